//! MAC addresses as CNI writes them (`aa:bb:cc:dd:ee:ff`).

use guest_sdk::cni::Error;
use guest_sdk::skel::Invocation;

/// The MAC a container interface is asked for, in the reference's order of
/// precedence: `runtimeConfig.mac`, else `MAC=` in `CNI_ARGS`, else the
/// config's `mac` (empty: none).
pub fn requested(inv: &Invocation, config: &str, runtime: &str) -> Result<String, Error> {
    if !runtime.is_empty() {
        return Ok(runtime.to_owned());
    }
    let mut arg = String::new();
    crate::compat::load_args(&inv.env.args, &["MAC"], |_, v| {
        arg = v.to_owned();
        Ok(())
    })?;
    Ok(if arg.is_empty() {
        config.to_owned()
    } else {
        arg
    })
}

/// Parses `aa:bb:cc:dd:ee:ff` (also `-` separated), as Go's
/// `net.ParseMAC` does for 6-byte addresses.
pub fn parse(s: &str) -> Result<Vec<u8>, Error> {
    let bad = || Error::internal(format!("address {s}: invalid MAC address"));
    let sep = if s.contains('-') { '-' } else { ':' };
    let parts: Vec<&str> = s.split(sep).collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    parts
        .iter()
        .map(|p| {
            if p.len() == 2 {
                u8::from_str_radix(p, 16).map_err(|_| bad())
            } else {
                Err(bad())
            }
        })
        .collect()
}

/// Formats bytes as `aa:bb:cc:dd:ee:ff`.
pub fn format(mac: &[u8]) -> String {
    guest_sdk::net::mac_string(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m = parse("0A:58:0a:00:00:02").expect("mac");
        assert_eq!(format(&m), "0a:58:0a:00:00:02");
        assert!(parse("zz").is_err());
        assert!(parse("0a:58:0a:00:00").is_err());
        assert_eq!(
            parse("zz").err().map(|e| e.msg),
            Some("address zz: invalid MAC address".into())
        );
    }
}

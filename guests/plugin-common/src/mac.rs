//! MAC addresses as CNI writes them (`aa:bb:cc:dd:ee:ff`).

use guest_sdk::cni::Error;
use guest_sdk::skel::Invocation;

/// The MAC a container interface is asked for, in the reference's order of
/// precedence: `runtimeConfig.mac`, else `MAC=` in `CNI_ARGS`, else the
/// config's `mac` (empty: none).
pub fn requested(inv: &Invocation, config: &str, runtime: &str) -> Result<String, Error> {
    // `CNI_ARGS` are read (and refused when malformed or unknown) even
    // when `runtimeConfig.mac` wins, as the reference reads them first.
    let mut arg = String::new();
    crate::compat::load_args(&inv.env.args, &["MAC"], |_, v| {
        arg = v.to_owned();
        Ok(())
    })?;
    let mac = [runtime, arg.as_str(), config]
        .into_iter()
        .find(|m| !m.is_empty())
        .unwrap_or_default()
        .to_owned();
    Ok(mac)
}

/// Parses a 6-byte MAC address in every form Go's `net.ParseMAC` reads:
/// `aa:bb:cc:dd:ee:ff`, `aa-bb-cc-dd-ee-ff` (one separator throughout, two
/// hex digits a group) and Cisco's `aabb.ccdd.eeff` (four a group), hex
/// digits of either case; anything else, the 8- and 20-byte forms Go also
/// reads (EUI-64, InfiniBand) included, is `address ⟨s⟩: invalid MAC
/// address` as Go words it.
pub fn parse(s: &str) -> Result<Vec<u8>, Error> {
    let bad = || Error::internal(format!("address {s}: invalid MAC address"));
    let b = s.as_bytes();
    let (sep, group) = match (b.get(2), b.get(4)) {
        (Some(&c @ (b':' | b'-')), _) => (c, 2),
        (_, Some(b'.')) => (b'.', 4),
        _ => return Err(bad()),
    };
    // Six bytes: 6 groups of 2 or 3 groups of 4 digits, one separator
    // after each group but the last.
    let groups = 12 / group;
    if b.len() != groups * (group + 1) - 1 {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(6);
    for (i, chunk) in b.split(|c| *c == sep).enumerate() {
        if i >= groups || chunk.len() != group || !chunk.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad());
        }
        for pair in chunk.chunks(2) {
            let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
        }
    }
    if out.len() != 6 {
        return Err(bad());
    }
    Ok(out)
}

/// Formats bytes as `aa:bb:cc:dd:ee:ff`.
pub fn format(mac: &[u8]) -> String {
    guest_sdk::net::mac_string(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_go_reads() {
        let want = [0x0a, 0x58, 0x0a, 0xbc, 0xde, 0xff];
        for ok in [
            "0a:58:0a:bc:de:ff",
            "0A:58:0A:BC:DE:FF",
            "0a-58-0a-bc-de-ff",
            "0a58.0abc.deff",
            "0A58.0aBC.DEff",
        ] {
            assert_eq!(parse(ok).expect(ok), want, "{ok}");
        }
        for bad in [
            "",
            "0a:58:0a:bc:de",
            "0a:58:0a:bc:de:ff:",
            "0a:58-0a:bc:de:ff",
            "0a:58:0a:bc:de:f",
            "0a:58:0a:bc:de:fff",
            "a:58:0a:bc:de:ff0",
            "0a58.0abc.def",
            "0a58.0abc:deff",
            "0a58.0abc.deff.0000",
            "0a5.80abc.deff",
            "0a:58:0a:bc:de:gg",
            "+a:58:0a:bc:de:ff",
            "0a580abcdeff",
            // EUI-64 and InfiniBand: Go reads them, no 6-byte link takes them.
            "0a:58:0a:bc:de:ff:00:01",
            "0a58.0abc.deff.0001",
        ] {
            assert_eq!(
                parse(bad).err().map(|e| e.msg),
                Some(format!("address {bad}: invalid MAC address")),
                "{bad}"
            );
        }
    }

    #[test]
    fn requested_in_the_references_order() {
        use crate::testing::invocation;
        use guest_sdk::cni::Command;
        let inv = |args: &str| invocation(Command::Add, args, serde_json::json!({}));
        let m = "MAC=02:00:00:00:00:01";
        assert_eq!(requested(&inv(m), "c", "r").unwrap(), "r");
        assert_eq!(requested(&inv(m), "c", "").unwrap(), "02:00:00:00:00:01");
        assert_eq!(requested(&inv("MAC="), "c", "").unwrap(), "c");
        assert_eq!(requested(&inv(""), "", "").unwrap(), "");
        // Bad CNI_ARGS fail even where runtimeConfig.mac wins.
        for bad in [";", "FOO=bar"] {
            assert!(requested(&inv(bad), "c", "r").is_err(), "{bad:?}");
        }
        assert_eq!(
            requested(&inv("FOO=bar;IgnoreUnknown=1"), "c", "r").unwrap(),
            "r"
        );
    }

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

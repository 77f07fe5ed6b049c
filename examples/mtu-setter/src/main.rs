//! `mtu-setter`: a chained CNI plugin that sets the MTU of the container's
//! interface, as a third-party author writes one against guest-sdk.
//!
//! It runs after a plugin that made the interface (bridge, ptp, ...):
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "net", "plugins": [
//!   {"type": "bridge", ...},
//!   {"type": "mtu-setter", "mtu": 1400}]}
//! ```
//!
//! ADD sets the MTU of the container interface (`CNI_IFNAME`, found with
//! `Invocation::container_interface`) and returns `prevResult`, with the
//! interface's `mtu` filled in. CHECK verifies the MTU; DEL is guest-sdk's
//! default, which has nothing to undo (the interface goes with the plugin
//! that made it).
//!
//! Policy: `read` and `modify` in the container namespace (policy.json).

use guest_sdk::cni::{CniResult, Error, NetConf};
use guest_sdk::skel::{self, Invocation, Plugin};
use serde::Deserialize;

/// The plugin's own key in the network config.
#[derive(Debug, Deserialize)]
struct Conf {
    /// The MTU to set.
    mtu: u32,
}

/// The smallest MTU IPv4 allows (RFC 791) and the largest Linux takes.
const MTU_RANGE: std::ops::RangeInclusive<u32> = 68..=65535;

/// Parses and checks the plugin's config: pure, unit-tested natively.
fn parse(conf: &NetConf) -> Result<Conf, Error> {
    let c: Conf = conf.plugin_config()?;
    if !MTU_RANGE.contains(&c.mtu) {
        return Err(Error::invalid_config(format!(
            "mtu {} is out of range {}..={}",
            c.mtu,
            MTU_RANGE.start(),
            MTU_RANGE.end()
        )));
    }
    Ok(c)
}

struct MtuSetter;

impl Plugin for MtuSetter {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let conf = parse(&inv.conf)?;
        let mut c = inv.container_interface()?;
        c.ns.set_mtu(c.link.index, conf.mtu)?;
        if let Some(i) = c.entry {
            c.prev.interfaces[i].mtu = Some(conf.mtu);
        }
        Ok(c.prev)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = parse(&inv.conf)?;
        let link = inv.container_interface()?.link;
        if link.mtu != conf.mtu {
            return Err(Error::internal(format!(
                "{:?} has MTU {}, expected {}",
                link.name, link.mtu, conf.mtu
            )));
        }
        Ok(())
    }
}

fn main() {
    skel::run(
        MtuSetter,
        "mtu-setter: sets the MTU of the container interface",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::net::Netns;

    fn conf(json: &str) -> NetConf {
        NetConf::parse(json.as_bytes()).expect("network config")
    }

    #[test]
    fn the_mtu_is_read_and_checked() {
        let c = conf(r#"{"cniVersion":"1.0.0","name":"n","type":"mtu-setter","mtu":1400}"#);
        assert_eq!(parse(&c).unwrap().mtu, 1400);
        for bad in [
            r#""mtu":67"#,
            r#""mtu":70000"#,
            r#""mtu":"big""#,
            r#""other":1"#,
        ] {
            let c = conf(&format!(
                r#"{{"cniVersion":"1.0.0","name":"n","type":"mtu-setter",{bad}}}"#
            ));
            let e = parse(&c).expect_err(bad);
            assert_eq!(e.code, 7, "{bad}: {e:?}");
            assert!(e.msg.contains("mtu"), "{bad}: {}", e.msg);
        }
    }

    /// Reaching a host call natively fails the test with a message (guest-sdk
    /// stops it), not an abort.
    #[test]
    #[should_panic(expected = "`netns.container` is a call to the wasmcni host")]
    fn host_calls_need_wasmcni() {
        let _ = Netns::container();
    }
}

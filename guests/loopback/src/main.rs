//! The CNI `loopback` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/loopback`): ADD sets `lo` up in the container namespace and
//! reports it with its loopback addresses (or passes a `prevResult` through
//! unchanged when chained); CHECK verifies `lo` is up; DEL sets it down and
//! succeeds when the namespace is already gone.

use guest_sdk::cni::{Cidr, CniResult, Error, Interface, IpConfig};
use guest_sdk::net::{to_ip, IpFamily, LinkInfo, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};

/// The reference ignores `CNI_IFNAME`: this only ever acts on `lo`.
const LO: &str = "lo";

struct Loopback;

/// The first address of `family` on `lo`, after checking that every one of
/// them is a loopback address.
fn first_loopback_address(
    ns: &Netns,
    lo: &LinkInfo,
    family: IpFamily,
) -> Result<Option<Cidr>, Error> {
    let addrs = ns.addresses(Some(lo), Some(family))?;
    for a in &addrs {
        let ip = to_ip(&a.prefix.address);
        if !ip.is_loopback() {
            return Err(Error::internal(format!(
                "loopback interface found with non-loopback address \"{ip}\""
            )));
        }
    }
    addrs
        .first()
        .map(|a| Cidr::new(to_ip(&a.prefix.address), a.prefix.prefix_len))
        .transpose()
}

impl Plugin for Loopback {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let ns = Netns::container()?;
        let lo = ns.link(LO)?;
        ns.set_link_up(&lo, true)?;
        let v4 = first_loopback_address(&ns, &lo, IpFamily::Ipv4)?;
        let v6 = first_loopback_address(&ns, &lo, IpFamily::Ipv6)?;
        if let Some(prev) = inv.prev_result()? {
            return Ok(prev);
        }
        let mut result = CniResult::default();
        result.interfaces.push(Interface {
            name: LO.to_owned(),
            mac: "00:00:00:00:00:00".to_owned(),
            sandbox: inv.env.netns.clone(),
            ..Interface::default()
        });
        for address in [v4, v6].into_iter().flatten() {
            result.ips.push(IpConfig {
                interface: Some(0),
                address,
                gateway: None,
            });
        }
        Ok(result)
    }

    fn check(&self, _inv: &Invocation) -> Result<(), Error> {
        let ns = Netns::container()?;
        let lo = ns.link(LO)?;
        if !lo.up {
            return Err(Error::internal("loopback interface is down"));
        }
        Ok(())
    }

    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        if inv.env.netns.is_empty() {
            return Ok(());
        }
        let ns = match Netns::container() {
            Ok(ns) => ns,
            // The namespace is gone: nothing to undo (the spec asks DEL to succeed).
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let lo = ns.link(LO)?;
        ns.set_link_up(&lo, false)?;
        Ok(())
    }
}

fn main() {
    skel::run(Loopback, "CNI loopback plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::skel::dispatch;
    use plugin_common::testing::{reach, Reached};
    use serde_json::json;

    /// Runs `command` through the SDK's entry point, as a runtime would.
    fn run(command: &str, args: &str, conf: &serde_json::Value) -> Reached {
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/c1"),
            ("CNI_IFNAME", "lo"),
            ("CNI_ARGS", args),
            ("CNI_PATH", "/opt/cni/bin"),
        ];
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
                .filter(|v| !v.is_empty())
        };
        reach(|| {
            let o = dispatch(&Loopback, lookup, conf.to_string().as_bytes());
            match o.code {
                0 => Ok(()),
                _ => Err(Error::internal(o.stdout)),
            }
        })
    }

    #[test]
    fn del_reads_neither_cni_args_nor_the_config_sections() {
        // The reference's DEL reads nothing but the skel's name and
        // version: it sets lo down whatever else the config says.
        let mut c = json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"});
        c["dns"] = json!("8.8.8.8");
        c["args"] = json!(1);
        c["prevResult"] = json!([]);
        for args in [";", "A", ""] {
            assert_eq!(
                run("DEL", args, &c),
                Reached::HostCall("netns.container".into()),
                "{args:?}"
            );
            assert!(
                matches!(run("ADD", args, &c), Reached::Returned(Err(_))),
                "{args:?}"
            );
        }
        // Nor does ADD read CNI_ARGS (as the reference's).
        let good = json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"});
        assert_eq!(
            run("ADD", ";", &good),
            Reached::HostCall("netns.container".into())
        );
        // What the Go skel refuses, DEL refuses too.
        c["name"] = json!("bad name");
        assert!(matches!(run("DEL", "", &c), Reached::Returned(Err(_))));
    }
}

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

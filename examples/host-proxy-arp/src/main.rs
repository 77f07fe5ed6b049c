//! `host-proxy-arp`: a chained CNI plugin that turns on proxy ARP on the
//! node's end of the container's veth (`net.ipv4.conf.<veth>.proxy_arp`),
//! as Calico does for routed pods. A third-party plugin that needs the
//! host namespace, written against guest-sdk.
//!
//! It runs after a plugin that made a veth pair (bridge, ptp):
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "net", "plugins": [
//!   {"type": "ptp", ...},
//!   {"type": "host-proxy-arp"}]}
//! ```
//!
//! ADD finds the container interface (`CNI_IFNAME`) in `prevResult`, its
//! peer in the node's namespace (the veth's `IFLA_LINK`), and writes the
//! setting; it returns `prevResult`. CHECK reads the setting back. DEL has
//! nothing to undo: the setting goes with the veth.
//!
//! Policy (policy.json): `read` in the container namespace; `read` and the
//! one sysctl pattern in the host namespace. wasmcni lets the plugin write
//! the setting only for a link of this attachment (the veth the chain's
//! first plugin made for this container), whatever the pattern says.

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::Netns;
use guest_sdk::skel::{self, Invocation, Plugin};

/// The sysctl key of `link`'s proxy ARP setting: a `.` in a link name is a
/// `/` in a sysctl key (as `sysctl -w` takes it).
fn proxy_arp_key(link: &str) -> String {
    format!("net.ipv4.conf.{}.proxy_arp", link.replace('.', "/"))
}

/// The container interface `ifname` of `prev` (one with a sandbox).
fn container_interface<'a>(prev: &'a CniResult, ifname: &str) -> Result<&'a str, Error> {
    prev.interfaces
        .iter()
        .find(|i| i.name == ifname && !i.sandbox.is_empty())
        .map(|i| i.name.as_str())
        .ok_or_else(|| {
            Error::invalid_config(format!(
                "prevResult has no container interface {ifname:?}: run host-proxy-arp after \
                 the plugin that creates the veth (bridge, ptp)"
            ))
        })
}

/// The proxy ARP key of the node's end of the container's veth.
fn host_peer_key(inv: &Invocation) -> Result<(Netns, String), Error> {
    let prev = inv.prev_result()?.ok_or_else(|| {
        Error::invalid_config("host-proxy-arp is a chained plugin: no prevResult")
    })?;
    let name = container_interface(&prev, &inv.env.ifname)?;
    let link = Netns::container()?.link(name)?;
    let (Some("veth"), Some(peer)) = (link.kind.as_deref(), link.parent_index) else {
        return Err(Error::invalid_config(format!(
            "{name:?} is not a veth (kind {:?}): host-proxy-arp needs a veth pair",
            link.kind
        )));
    };
    let host = Netns::host()?;
    let peer = host.link_by_index(peer)?;
    Ok((host, proxy_arp_key(&peer.name)))
}

struct HostProxyArp;

impl Plugin for HostProxyArp {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let (host, key) = host_peer_key(inv)?;
        host.set_sysctl(&key, "1")?;
        // host_peer_key checked that there is one.
        Ok(inv.prev_result()?.unwrap_or_default())
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let (host, key) = host_peer_key(inv)?;
        match host.sysctl(&key)?.trim() {
            "1" => Ok(()),
            v => Err(Error::internal(format!("{key} is {v}, expected 1"))),
        }
    }

    fn del(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    skel::run(
        HostProxyArp,
        "host-proxy-arp: proxy ARP on the node's end of the veth",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::cni::NetConf;

    #[test]
    fn the_key_names_the_link() {
        assert_eq!(
            proxy_arp_key("veth1a2b"),
            "net.ipv4.conf.veth1a2b.proxy_arp"
        );
        assert_eq!(proxy_arp_key("veth.1"), "net.ipv4.conf.veth/1.proxy_arp");
    }

    #[test]
    fn only_a_container_interface_qualifies() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"host-proxy-arp",
                "prevResult":{"cniVersion":"1.0.0","interfaces":[
                  {"name":"veth9"},{"name":"eth0","sandbox":"/run/netns/x"}]}}"#,
        )
        .unwrap();
        let prev = c.prev_result().unwrap().unwrap();
        assert_eq!(container_interface(&prev, "eth0").unwrap(), "eth0");
        assert!(container_interface(&prev, "veth9").is_err());
    }
}

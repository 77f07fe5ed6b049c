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
//! ADD finds the container interface (`CNI_IFNAME`, with
//! `Invocation::container_interface`), its peer in the node's namespace
//! (the veth's `IFLA_LINK`), and writes the setting; it returns
//! `prevResult`. CHECK reads the setting back. DEL is guest-sdk's default,
//! which has nothing to undo: the setting goes with the veth.
//!
//! Policy (policy.json): `read` in the container namespace; `read` and the
//! one sysctl pattern in the host namespace. wasmcni lets the plugin write
//! the setting only for a link of this attachment (the veth the chain's
//! first plugin made for this container), whatever the pattern says.

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::Netns;
use guest_sdk::skel::{self, ContainerInterface, Invocation, Plugin};

/// The sysctl key of `link`'s proxy ARP setting: a `.` in a link name is a
/// `/` in a sysctl key (as `sysctl -w` takes it).
fn proxy_arp_key(link: &str) -> String {
    format!("net.ipv4.conf.{}.proxy_arp", link.replace('.', "/"))
}

/// `prevResult`, the node's namespace, and the proxy ARP key of the node's
/// end of the container's veth.
fn host_peer_key(inv: &Invocation) -> Result<(CniResult, Netns, String), Error> {
    let ContainerInterface { prev, link, .. } = inv.container_interface()?;
    let (Some("veth"), Some(peer)) = (link.kind.as_deref(), link.parent_index) else {
        return Err(Error::invalid_config(format!(
            "{:?} is not a veth (kind {:?}): host-proxy-arp needs a veth pair",
            link.name, link.kind
        )));
    };
    let host = Netns::host()?;
    let peer = host.link_by_index(peer)?;
    Ok((prev, host, proxy_arp_key(&peer.name)))
}

struct HostProxyArp;

impl Plugin for HostProxyArp {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let (prev, host, key) = host_peer_key(inv)?;
        host.set_sysctl(&key, "1")?;
        Ok(prev)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let (_, host, key) = host_peer_key(inv)?;
        match host.sysctl(&key)?.trim() {
            "1" => Ok(()),
            v => Err(Error::internal(format!("{key} is {v}, expected 1"))),
        }
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

    #[test]
    fn the_key_names_the_link() {
        assert_eq!(
            proxy_arp_key("veth1a2b"),
            "net.ipv4.conf.veth1a2b.proxy_arp"
        );
        assert_eq!(proxy_arp_key("veth.1"), "net.ipv4.conf.veth/1.proxy_arp");
    }
}

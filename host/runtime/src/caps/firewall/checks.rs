//! What a firewall call may ask for: rules of a kind its grant allows,
//! in the node namespace; container addresses the attachment owns (S13);
//! only the port mappings the runtime asked for; `route_localnet` only on
//! the attachment's own link.

use std::net::IpAddr;

use crate::caps::bindings::wasmcni::plugin::firewall::{PortMapping, Protocol, RuleKind};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::{ip_from_wit, CapError};
use crate::caps::ctx::Ctx;
use crate::netns::Kind;
use crate::record::FwKind;

/// Most kinds in a remove or collect-garbage call (there are five).
pub(super) const MAX_KINDS: usize = 5;

impl Ctx {
    /// Refuses a port mapping the runtime did not ask for: every one must
    /// be in the config's `runtimeConfig.portMappings`, read by the host.
    pub(super) fn fw_requested(&self, m: &PortMapping) -> Result<(), CapError> {
        let proto = match m.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        };
        let host_ip = m.host_ip.map(ip_from_wit).filter(|a| !a.is_unspecified());
        let asked = self.attachment.port_mappings.iter().any(|r| {
            r.host_port == m.host_port
                && r.container_port == m.container_port
                && r.protocol == proto
                && r.host_ip == host_ip
        });
        crate::caps::authority::firewall::requested_port(
            asked,
            proto,
            m.host_port,
            host_ip,
            m.container_port,
        )
    }

    /// Refuses unless the grant allows rules of `kind`, in the node
    /// namespace.
    pub(super) fn fw_require(&self, ns: Kind, kind: FwKind) -> Result<(), CapError> {
        self.view().firewall(ns, kind)
    }

    /// Refuses an address that is not the attachment's own (S13,
    /// [`Ctx::check_own_address`]): a `prevResult` is what the plugins
    /// before this one in the chain returned, and a hostile one lists any
    /// address there (another container's, a LAN host's) or puts it on
    /// its own container interface first. Never a loopback, unspecified,
    /// multicast, link-local or IPv4-mapped address, whatever owns it: no
    /// rule names one as a container's (127.0.0.1 would map the runtime's
    /// host port onto the node's own loopback services).
    fn fw_own_address(&mut self, ip: IpAddr) -> Result<(), CapError> {
        crate::caps::authority::firewall::container_address(ip, unicast_container_address(ip))?;
        self.check_own_address(ip, "a firewall rule's container address")
    }

    /// Admits `ip` as one more container address of a call: the
    /// attachment's ([`Ctx::fw_own_address`]) and not given before in it.
    pub(super) fn fw_container(
        &mut self,
        seen: &mut Vec<IpAddr>,
        ip: IpAddr,
    ) -> Result<(), CapError> {
        if seen.contains(&ip) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        seen.push(ip);
        self.fw_own_address(ip)
    }

    /// The node interface the main table routes `ip` through (longest
    /// prefix), if any.
    pub(super) fn fw_route_link(&mut self, ip: IpAddr) -> Result<Option<String>, CapError> {
        let nl = self.netlink(Kind::Host)?;
        let routes = nl.routes(Some(netlink_packet_route::AddressFamily::Inet))?;
        let best = routes
            .iter()
            .filter_map(crate::netlink::RouteSpec::from_message)
            .filter(|r| r.table == 254 && r.oif.is_some())
            .filter(|r| {
                ipnet::IpNet::new(r.dst, r.dst_len)
                    .map(|n| n.trunc().contains(&ip))
                    .unwrap_or(false)
            })
            .max_by_key(|r| r.dst_len);
        let Some(oif) = best.and_then(|r| r.oif) else {
            return Ok(None);
        };
        // Never an uplink, nor another attachment's or network's link
        // (S13): there the container is not behind a link of its own, and
        // localhost port maps are not offered, as with the reference,
        // which sets it only on the host interface of the result.
        if !self.localnet_link_ok(oif) {
            return Ok(None);
        }
        Ok(Some(self.link(Kind::Host, oif)?.name))
    }

    pub(super) fn fw_kinds(&self, ns: Kind, kinds: &[RuleKind]) -> Result<Vec<FwKind>, CapError> {
        if kinds.len() > MAX_KINDS {
            return Err(CapError::Limit(format!(
                "{} kinds, more than the {MAX_KINDS} there are",
                kinds.len()
            )));
        }
        let mut out: Vec<FwKind> = Vec::new();
        for k in kinds {
            let k = FwKind::from(*k);
            if !out.contains(&k) {
                out.push(k);
            }
        }
        let kinds = out;
        if kinds.is_empty() {
            return Err(ErrorCode::InvalidArgument.into());
        }
        for k in &kinds {
            self.fw_require(ns, *k)?;
        }
        Ok(kinds)
    }
}

/// Whether `ip` can be a container's address in a rule: unicast, not
/// loopback, unspecified, link-local or IPv4-mapped.
fn unicast_container_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_link_local())
        }
        IpAddr::V6(a) => {
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || a.to_ipv4_mapped().is_some()
                || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

//! Routes: a unicast route as wasmcni models it (`RouteSpec`), the key
//! the kernel knows any route by (`RouteKey`), listed, added and deleted.
//! (`routes`, not `route`: a module of that name inside `route` would
//! stutter.)

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::address::family_of;
use super::error::{einval, NlError};
use super::socket::{Netlink, CREATE_EXCL};

/// A unicast route, as wasmcni models it (what the WIT `route` carries,
/// plus the protocol that marks wasmcni's own routes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RouteSpec {
    /// Destination address (network).
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// `RTA_GATEWAY`.
    pub gateway: Option<IpAddr>,
    /// `RTA_OIF`.
    pub oif: Option<u32>,
    /// Routing table (`RT_TABLE_MAIN` = 254 by default).
    pub table: u32,
    /// `RTA_PRIORITY`.
    pub metric: Option<u32>,
    /// `rtm_scope` (`RT_SCOPE_*` value).
    pub scope: u8,
    /// `RTA_PREFSRC`.
    pub source: Option<IpAddr>,
    /// `RTAX_MTU`.
    pub mtu: Option<u32>,
    /// `RTNH_F_ONLINK`.
    pub onlink: bool,
    /// `rtm_protocol`.
    pub protocol: u8,
}

impl RouteSpec {
    /// The spec of a kernel route message; `None` for anything that is not
    /// a unicast route (local, broadcast, multipath, ...).
    pub fn from_message(msg: &RouteMessage) -> Option<RouteSpec> {
        let h = &msg.header;
        // Only plain unicast routes fit the model. Source-specific (`from`)
        // and TOS routes would lose their selector; a route through a
        // nexthop object, an `RTA_VIA` (IPv4 via IPv6) gateway or with a
        // lightweight-tunnel encapsulation could not be added back as
        // modelled: such routes are not unicast routes in wasmcni's sense.
        if h.kind != RouteType::Unicast || h.source_prefix_length != 0 || h.tos != 0 {
            return None;
        }
        let family = h.address_family;
        let mut spec = RouteSpec {
            dst: unspecified(family)?,
            dst_len: h.destination_prefix_length,
            gateway: None,
            oif: None,
            table: u32::from(h.table),
            metric: None,
            scope: u8::from(h.scope),
            source: None,
            mtu: None,
            onlink: h.flags.contains(RouteFlags::Onlink),
            protocol: u8::from(h.protocol),
        };
        for attr in &msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => spec.dst = route_ip(a, family)?,
                RouteAttribute::Gateway(a) => spec.gateway = Some(route_ip(a, family)?),
                RouteAttribute::PrefSource(a) => spec.source = Some(route_ip(a, family)?),
                RouteAttribute::Oif(i) => spec.oif = Some(*i),
                RouteAttribute::Table(t) => spec.table = *t,
                RouteAttribute::Priority(p) => spec.metric = Some(*p),
                RouteAttribute::Metrics(metrics) => {
                    for m in metrics {
                        if let RouteMetric::Mtu(mtu) = m {
                            spec.mtu = Some(*mtu);
                        }
                    }
                }
                RouteAttribute::MultiPath(_)
                | RouteAttribute::Via(_)
                | RouteAttribute::NhId(_)
                | RouteAttribute::Encap(_)
                | RouteAttribute::EncapType(_)
                | RouteAttribute::Source(_) => return None,
                _ => {}
            }
        }
        Some(spec)
    }
}

/// Whether route `msg` goes through link `index` (its output link, or one
/// of its multipath next hops).
pub fn route_uses_link(msg: &RouteMessage, index: u32) -> bool {
    msg.attributes.iter().any(|a| match a {
        RouteAttribute::Oif(i) => *i == index,
        RouteAttribute::MultiPath(hops) => hops.iter().any(|h| h.interface_index == index),
        _ => false,
    })
}

/// What the kernel identifies a route by, whatever its type: table,
/// destination, TOS and metric (`fib_table_insert` / `ip6_ins_rt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteKey {
    /// Routing table.
    pub table: u32,
    /// Destination network.
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// `rtm_tos`.
    pub tos: u8,
    /// The metric, with the kernel's default (IPv6: 1024) filled in.
    pub metric: u32,
}

impl RouteKey {
    /// The key of any kernel route message (local, multipath, ... too).
    pub fn of_message(msg: &RouteMessage) -> Option<RouteKey> {
        let h = &msg.header;
        let family = h.address_family;
        let mut key = RouteKey {
            table: u32::from(h.table),
            dst: unspecified(family)?,
            dst_len: h.destination_prefix_length,
            tos: h.tos,
            metric: 0,
        };
        for attr in &msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => key.dst = route_ip(a, family)?,
                RouteAttribute::Table(t) => key.table = *t,
                RouteAttribute::Priority(p) => key.metric = *p,
                _ => {}
            }
        }
        if key.dst.is_ipv6() && key.metric == 0 {
            key.metric = 1024;
        }
        Some(key)
    }

    /// The key of a modelled route.
    pub fn of_spec(s: &RouteSpec) -> RouteKey {
        RouteKey {
            table: s.table,
            dst: s.dst,
            dst_len: s.dst_len,
            tos: 0,
            metric: s
                .metric
                .filter(|m| *m != 0 || s.dst.is_ipv4())
                .unwrap_or(if s.dst.is_ipv6() { 1024 } else { 0 }),
        }
    }
}

/// The all-zero address of an IP family.
fn unspecified(family: AddressFamily) -> Option<IpAddr> {
    match family {
        AddressFamily::Inet => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        AddressFamily::Inet6 => Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        _ => None,
    }
}

/// A route attribute's address, if it is an IP address of `family`.
fn route_ip(a: &RouteAddress, family: AddressFamily) -> Option<IpAddr> {
    match (a, family) {
        (RouteAddress::Inet(v4), AddressFamily::Inet) => Some(IpAddr::V4(*v4)),
        (RouteAddress::Inet6(v6), AddressFamily::Inet6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// How [`Netlink::add_route`] treats routes with the same key (table,
/// destination, TOS, metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAdd {
    /// `NLM_F_CREATE | NLM_F_EXCL`: fail (EEXIST) if any route has the key.
    Exclusive,
    /// `NLM_F_CREATE`: add beside routes with the same key through other
    /// links (IPv6 keeps an `fe80::/64` per link); EEXIST only if this very
    /// route is there.
    Append,
    /// `NLM_F_CREATE | NLM_F_REPLACE`: replace the route with the key.
    Replace,
}

/// A route message for `spec`: what adds it (`delete` false), or what
/// matches it for deletion (dst, table, metric, gateway, oif; any scope,
/// any protocol).
fn route_message(spec: &RouteSpec, delete: bool) -> Result<RouteMessage, NlError> {
    let (family, max) = family_of(spec.dst);
    if spec.dst_len > max {
        return einval();
    }
    // An address of the other family would be read by the kernel as a
    // (truncated) address of this one.
    let same_family = |a: &Option<IpAddr>| a.is_none_or(|a| a.is_ipv4() == spec.dst.is_ipv4());
    if !same_family(&spec.gateway) || (!delete && !same_family(&spec.source)) {
        return einval();
    }
    let mut msg = RouteMessage::default();
    let h = &mut msg.header;
    h.address_family = family;
    h.destination_prefix_length = spec.dst_len;
    // Tables above 255 only fit RTA_TABLE; the header then says UNSPEC.
    h.table = u8::try_from(spec.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
    h.kind = RouteType::Unicast;
    // A delete names the protocol exactly (so it never removes someone
    // else's route with the same destination); the scope is a wildcard.
    h.protocol = RouteProtocol::from(spec.protocol);
    if delete {
        h.scope = RouteScope::NoWhere;
    } else {
        h.scope = RouteScope::from(spec.scope);
        if spec.onlink {
            h.flags = RouteFlags::Onlink;
        }
    }
    let a = &mut msg.attributes;
    a.push(RouteAttribute::Table(spec.table));
    a.push(RouteAttribute::Destination(spec.dst.into()));
    if let Some(gw) = spec.gateway {
        a.push(RouteAttribute::Gateway(gw.into()));
    }
    if let Some(oif) = spec.oif {
        a.push(RouteAttribute::Oif(oif));
    }
    if let Some(metric) = spec.metric {
        a.push(RouteAttribute::Priority(metric));
    }
    if !delete {
        if let Some(src) = spec.source {
            a.push(RouteAttribute::PrefSource(src.into()));
        }
        if let Some(mtu) = spec.mtu {
            a.push(RouteAttribute::Metrics(vec![RouteMetric::Mtu(mtu)]));
        }
    }
    Ok(msg)
}

impl Netlink {
    /// Every route of every table, of one family or both.
    pub fn routes(&mut self, family: Option<AddressFamily>) -> Result<Vec<RouteMessage>, NlError> {
        let mut msg = RouteMessage::default();
        if let Some(f) = family {
            msg.header.address_family = f;
        }
        // rtm_table unspecified: the kernel dumps every table.
        let answers = self.request(RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => Some(r),
                _ => None,
            })
            .collect())
    }

    /// Adds a route as `mode` says.
    pub fn add_route(&mut self, spec: &RouteSpec, mode: RouteAdd) -> Result<(), NlError> {
        let msg = route_message(spec, false)?;
        let flags = match mode {
            RouteAdd::Exclusive => CREATE_EXCL,
            RouteAdd::Append => NLM_F_CREATE,
            RouteAdd::Replace => NLM_F_CREATE | NLM_F_REPLACE,
        };
        self.ack(RouteNetlinkMessage::NewRoute(msg), flags)
    }

    /// Deletes the route matching `spec` (dst, table, metric, gateway, oif).
    pub fn delete_route(&mut self, spec: &RouteSpec) -> Result<(), NlError> {
        let msg = route_message(spec, true)?;
        self.ack(RouteNetlinkMessage::DelRoute(msg), 0)
    }
}

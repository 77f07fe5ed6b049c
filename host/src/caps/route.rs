//! `wasmcni:plugin/route`.

use std::net::IpAddr;

use netlink_packet_route::AddressFamily;
use serde_json::json;
use wasmtime::component::Resource;

use super::address::{ip_from_wit, ip_to_wit, prefix_from_wit, scope_from_value, scope_value};
use super::bindings::wasmcni::plugin::route::{Host, Route, RouteInfo};
use super::bindings::wasmcni::plugin::types::{IpFamily, IpPrefix, Scope};
use super::{ns_arg, CapError, Ctx, NsHandle, StoreData, RTPROT_BOOT, RTPROT_WASMCNI};
use crate::journal::Undo;
use crate::netlink::RouteSpec;
use crate::netns::Kind;

/// `RT_TABLE_MAIN`.
const MAIN_TABLE: u32 = 254;

/// The metric the kernel gives a route without one (IPv6: 1024).
fn effective_metric(s: &RouteSpec) -> u32 {
    s.metric.unwrap_or(if s.dst.is_ipv6() { 1024 } else { 0 })
}

/// Whether two routes have the same kernel key (table, destination,
/// metric): `replace` replaces, `add` collides.
fn same_key(a: &RouteSpec, b: &RouteSpec) -> bool {
    a.table == b.table
        && a.dst == b.dst
        && a.dst_len == b.dst_len
        && effective_metric(a) == effective_metric(b)
}

/// Whether kernel route `k` is what a delete request `req` names: the key,
/// plus gateway and output link when the request gives them.
fn matches_delete(req: &RouteSpec, k: &RouteSpec) -> bool {
    req.table == k.table
        && req.dst == k.dst
        && req.dst_len == k.dst_len
        && (req.metric.is_none() || effective_metric(req) == effective_metric(k))
        && (req.gateway.is_none() || req.gateway == k.gateway)
        && (req.oif.is_none() || req.oif == k.oif)
}

fn to_spec(kind: Kind, r: &Route) -> Result<RouteSpec, CapError> {
    let (dst, dst_len) = prefix_from_wit(r.destination)?;
    let gateway = r.gateway.map(ip_from_wit);
    let source = r.source.map(ip_from_wit);
    let family_ok = |ip: &Option<IpAddr>| ip.is_none_or(|a| a.is_ipv4() == dst.is_ipv4());
    if !family_ok(&gateway) || !family_ok(&source) {
        return Err(super::ErrorCode::InvalidArgument.into());
    }
    let scope = r.scope.map(scope_value).unwrap_or(if gateway.is_some() {
        0
    } else {
        scope_value(Scope::Link)
    });
    Ok(RouteSpec {
        dst: network(dst, dst_len),
        dst_len,
        gateway,
        oif: r.link_index,
        table: r.table.unwrap_or(MAIN_TABLE),
        metric: r.metric,
        scope,
        source,
        mtu: r.mtu,
        onlink: r.on_link,
        protocol: if kind == Kind::Host {
            RTPROT_WASMCNI
        } else {
            RTPROT_BOOT
        },
    })
}

/// The network address of `ip/len` (the kernel refuses host bits in a
/// route destination).
fn network(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

fn to_wit(s: &RouteSpec) -> Route {
    Route {
        destination: IpPrefix {
            address: ip_to_wit(s.dst),
            prefix_len: s.dst_len,
        },
        gateway: s.gateway.map(ip_to_wit),
        link_index: s.oif,
        table: Some(s.table),
        metric: s.metric,
        scope: Some(scope_from_value(s.scope)),
        source: s.source.map(ip_to_wit),
        mtu: s.mtu,
        on_link: s.onlink,
    }
}

fn route_arg(s: &Result<RouteSpec, CapError>, r: &Route) -> serde_json::Value {
    match s {
        Ok(s) => json!({
            "destination": format!("{}/{}", s.dst, s.dst_len),
            "gateway": s.gateway.map(|g| g.to_string()),
            "link-index": s.oif, "table": s.table, "metric": s.metric, "scope": s.scope,
            "source": s.source.map(|g| g.to_string()), "mtu": s.mtu, "on-link": s.onlink,
        }),
        Err(_) => json!({"destination": format!("{:?}", r.destination), "invalid": true}),
    }
}

impl Ctx {
    fn routes_of(&mut self, kind: Kind, v4: bool) -> Result<Vec<RouteSpec>, CapError> {
        let family = if v4 {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let msgs = self
            .netlink(kind)?
            .routes(Some(family))
            .map_err(|e| CapError::from(&e))?;
        Ok(msgs.iter().filter_map(RouteSpec::from_message).collect())
    }

    /// Route changes: `routes` granted; in the host namespace through a link
    /// the plugin may modify.
    fn route_target(&mut self, kind: Kind, spec: &RouteSpec) -> Result<(), CapError> {
        self.require(kind, |g| g.routes, "routes")?;
        if kind == Kind::Host {
            let Some(oif) = spec.oif else {
                return Err(CapError::Denied(
                    "a host route must name its output link (one the plugin may modify)".into(),
                ));
            };
            let l = self.link(kind, oif)?;
            self.check_host_link(kind, &l)?;
        }
        Ok(())
    }

    /// In the host namespace only wasmcni's routes may be replaced or deleted.
    fn check_host_route(&self, kind: Kind, existing: &RouteSpec) -> Result<(), CapError> {
        if kind == Kind::Host && existing.protocol != RTPROT_WASMCNI {
            return Err(CapError::Denied(format!(
                "host route {}/{} (table {}) was not created by wasmcni",
                existing.dst, existing.dst_len, existing.table
            )));
        }
        Ok(())
    }
}

impl Host for StoreData {
    fn list(
        &mut self,
        ns: Resource<NsHandle>,
        family: Option<IpFamily>,
        table: Option<u32>,
    ) -> Result<Vec<RouteInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args =
            json!({"ns": ns_arg(kind), "family": family.map(|f| format!("{f:?}")), "table": table});
        self.cap("route.list", args, |c| {
            c.require(kind, |g| g.read, "read")?;
            let family = family.map(|f| match f {
                IpFamily::Ipv4 => AddressFamily::Inet,
                IpFamily::Ipv6 => AddressFamily::Inet6,
            });
            let msgs = c
                .netlink(kind)?
                .routes(family)
                .map_err(|e| CapError::from(&e))?;
            Ok(msgs
                .iter()
                .filter_map(RouteSpec::from_message)
                .filter(|s| table.is_none_or(|t| t == s.table))
                .map(|s| RouteInfo {
                    route: to_wit(&s),
                    owned: kind == Kind::Host && s.protocol == RTPROT_WASMCNI,
                })
                .collect())
        })
    }

    fn add(&mut self, ns: Resource<NsHandle>, route: Route) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let spec = to_spec(kind, &route);
        let args = json!({"ns": ns_arg(kind), "route": route_arg(&spec, &route)});
        self.cap("route.add", args, |c| {
            let spec = spec?;
            c.route_target(kind, &spec)?;
            c.netlink(kind)?
                .add_route(&spec, false)
                .map_err(|e| CapError::from(&e))?;
            c.journal.record(Undo::DeleteRoute { ns: kind, spec });
            Ok(())
        })
    }

    fn replace(&mut self, ns: Resource<NsHandle>, route: Route) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let spec = to_spec(kind, &route);
        let args = json!({"ns": ns_arg(kind), "route": route_arg(&spec, &route)});
        self.cap("route.replace", args, |c| {
            let spec = spec?;
            c.route_target(kind, &spec)?;
            let old = c
                .routes_of(kind, spec.dst.is_ipv4())?
                .into_iter()
                .find(|k| same_key(k, &spec));
            if let Some(old) = &old {
                c.check_host_route(kind, old)?;
            }
            c.netlink(kind)?
                .add_route(&spec, true)
                .map_err(|e| CapError::from(&e))?;
            c.journal.record(match old {
                Some(old) => Undo::RestoreRoute {
                    ns: kind,
                    spec: old,
                },
                None => Undo::DeleteRoute { ns: kind, spec },
            });
            Ok(())
        })
    }

    fn delete(&mut self, ns: Resource<NsHandle>, route: Route) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let spec = to_spec(kind, &route);
        let args = json!({"ns": ns_arg(kind), "route": route_arg(&spec, &route)});
        self.cap("route.delete", args, |c| {
            let spec = spec?;
            c.require(kind, |g| g.routes, "routes")?;
            let old = c
                .routes_of(kind, spec.dst.is_ipv4())?
                .into_iter()
                .find(|k| matches_delete(&spec, k))
                .ok_or(CapError::Kernel(libc::ESRCH))?;
            c.check_host_route(kind, &old)?;
            c.netlink(kind)?
                .delete_route(&old)
                .map_err(|e| CapError::from(&e))?;
            c.journal.record(Undo::RestoreRoute {
                ns: kind,
                spec: old,
            });
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_lose_their_host_bits() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(network(ip("10.1.2.3"), 16), ip("10.1.0.0"));
        assert_eq!(network(ip("10.1.2.3"), 0), ip("0.0.0.0"));
        assert_eq!(network(ip("10.1.2.3"), 32), ip("10.1.2.3"));
        assert_eq!(network(ip("fd00::1:2"), 64), ip("fd00::"));
        assert_eq!(network(ip("fd00::1"), 128), ip("fd00::1"));
    }
}

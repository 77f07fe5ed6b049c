//! `wasmcni:plugin/route`.

use super::ctx::{Inverse, Uncovered};
use super::row::*;
use crate::netlink::NlError;
use crate::record::Owned;
use std::net::IpAddr;

use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::AddressFamily;
use serde_json::{json, Value};
use wasmtime::component::Resource;

use super::args::AuditArg;
use super::bindings::wasmcni::plugin::route::{Host, Route, RouteInfo, Rule};
use super::bindings::wasmcni::plugin::types::{IpFamily, IpPrefix, Scope};
use super::bindings::{ip_from_wit, ip_to_wit, prefix_from_wit, scope_from_value, scope_value};
use super::bindings::{CapError, NsHandle};
use super::ctx::{Command, Ctx, StoreData, RTPROT_BOOT, RTPROT_WASMCNI};
use crate::netlink::{RouteAdd, RouteKey, RouteSpec, RuleSpec};
use crate::netns::Kind;
use crate::policy::LinkKind;

use super::authority::route::{Existing, MAIN_TABLE};

/// Whether kernel route `k` is what a delete request `req` names: the key,
/// plus gateway and output link when the request gives them.
fn matches_delete(req: &RouteSpec, k: &RouteSpec) -> bool {
    let (rk, kk) = (RouteKey::of_spec(req), RouteKey::of_spec(k));
    rk.table == kk.table
        && rk.dst == kk.dst
        && rk.dst_len == kk.dst_len
        && (req.metric.is_none() || rk.metric == kk.metric)
        && (req.gateway.is_none() || req.gateway == k.gateway)
        && (req.oif.is_none() || req.oif == k.oif)
}

fn to_spec(kind: Kind, r: &Route) -> Result<RouteSpec, CapError> {
    let (dst, dst_len) = prefix_from_wit(r.destination)?;
    let gateway = r.gateway.map(ip_from_wit);
    let source = r.source.map(ip_from_wit);
    let family_ok = |ip: &Option<IpAddr>| ip.is_none_or(|a| a.is_ipv4() == dst.is_ipv4());
    if !family_ok(&gateway) || !family_ok(&source) {
        return Err(super::bindings::ErrorCode::InvalidArgument.into());
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
        protocol: match (kind, r.protocol) {
            (Kind::Host, Some(p)) if p != RTPROT_WASMCNI => {
                return Err(super::bindings::ErrorCode::InvalidArgument.into())
            }
            (Kind::Host, _) => RTPROT_WASMCNI,
            (Kind::Container, p) => p.unwrap_or(RTPROT_BOOT),
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
        protocol: Some(s.protocol),
    }
}

/// A route as the audit record shows it: as the host read it (its spec),
/// or, if it is invalid, its destination as given.
struct RouteArg<'a>(Kind, &'a Route);

impl AuditArg for RouteArg<'_> {
    fn audit(&self) -> Value {
        let RouteArg(kind, r) = *self;
        match to_spec(kind, r) {
            Ok(s) => json!({
                "destination": format!("{}/{}", s.dst, s.dst_len),
                "gateway": s.gateway.map(|g| g.to_string()),
                "link-index": s.oif, "table": s.table, "metric": s.metric, "scope": s.scope,
                "source": s.source.map(|g| g.to_string()), "mtu": s.mtu, "on-link": s.onlink,
                "protocol": s.protocol,
            }),
            Err(_) => json!({"destination": format!("{:?}", r.destination), "invalid": true}),
        }
    }
}

/// A route message's destination network and prefix length (the
/// family's unspecified address for a default route).
fn route_dst(r: &RouteMessage) -> (IpAddr, u8) {
    let len = r.header.destination_prefix_length;
    let dst = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        RouteAttribute::Destination(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        _ => None,
    });
    let unspecified = if r.header.address_family == AddressFamily::Inet6 {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    };
    (dst.unwrap_or(unspecified), len)
}

/// A route message's output link.
fn route_oif(r: &RouteMessage) -> Option<u32> {
    r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Oif(i) => Some(*i),
        _ => None,
    })
}

/// A route message's table (`RTA_TABLE` where the header's byte cannot
/// hold it).
fn route_table(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

impl Ctx {
    /// Every route of the family, of every type, as the kernel lists them.
    fn routes_raw(&mut self, kind: Kind, v4: bool) -> Result<Vec<RouteMessage>, CapError> {
        let family = if v4 {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        self.netlink(kind)?
            .routes(Some(family))
            .map_err(CapError::from)
    }

    /// Route changes: `routes` granted; in the host namespace only in the
    /// main table and through a link the plugin may modify.
    fn route_target(&mut self, kind: Kind, spec: &RouteSpec) -> Result<(), CapError> {
        if kind == Kind::Host {
            let oif = self
                .view()
                .host_route(spec.table, spec.dst, spec.dst_len, spec.oif)?;
            let l = self.link(kind, oif)?;
            self.check_host_link(kind, &l)?;
            // A route to another attachment's address would steer the
            // node's traffic for it.
            let dst = ipnet::IpNet::new(spec.dst, spec.dst_len)
                .map_err(|_| CapError::Code(super::bindings::ErrorCode::InvalidArgument))?;
            let found = self.foreign_reservation_in(dst, true)?;
            super::authority::route::over_reservation(spec.dst, spec.dst_len, found.as_ref())?;
            self.route_takes_nothing(kind, spec, dst)?;
        }
        Ok(())
    }

    /// A host route may not take traffic the node routes elsewhere: it
    /// goes via none but the attachment's own addresses, and, unless it
    /// is a host route to one of them (ptp's), [`Ctx::takes_no_route`]
    /// through its output link.
    fn route_takes_nothing(
        &mut self,
        kind: Kind,
        spec: &RouteSpec,
        dst: ipnet::IpNet,
    ) -> Result<(), CapError> {
        if let Some(gw) = spec.gateway {
            self.check_own_address(gw, &format!("host route to {dst} via {gw}"))?;
        }
        if dst.prefix_len() == dst.max_prefix_len()
            && self.check_own_address(dst.addr(), "").is_ok()
        {
            return Ok(());
        }
        let oif = spec.oif.unwrap_or_default();
        self.takes_no_route(kind, dst, oif, "host route to")
    }

    /// What a new route to `dst` through link `oif` (a host route, or a
    /// host address's connected prefix) may not take: a route of the
    /// node's main table that [`Ctx::taken_if_covered`] protects (a
    /// connected subnet, an attachment's route, a reject route), not
    /// through a link of the attachment's own nor through `oif` itself,
    /// that either lies in the grant's `prefixes`
    /// and is as specific as or broader than `dst` while covering it
    /// (the new one would win for its addresses: another attachment's
    /// route, a connected subnet), or lies inside `dst` (the new one
    /// would take over once it goes). A broader route outside `prefixes`
    /// (the node's default, an uplink's) is the space the grant gives.
    /// One dump of the main table (of the family), made only for such
    /// routes and addresses: the standard plugins' host routes are to
    /// their own addresses, and a bridge's gateway address is made once
    /// per network, so an ADD's cost does not grow with the node.
    pub(super) fn takes_no_route(
        &mut self,
        kind: Kind,
        dst: ipnet::IpNet,
        oif: u32,
        what: &str,
    ) -> Result<(), CapError> {
        let mut existing = Vec::new();
        for r in self.routes_raw(kind, dst.addr().is_ipv4())? {
            if route_table(&r) != MAIN_TABLE {
                continue;
            }
            let (rdst, len) = route_dst(&r);
            let Ok(rnet) = ipnet::IpNet::new(rdst, len) else {
                continue;
            };
            if !self.view().meets(kind, dst, rnet) {
                continue;
            }
            let through_same_link = route_oif(&r).is_some_and(|i| i == oif);
            // Through the new route's own link it takes nothing: no link
            // to look up.
            let through = route_oif(&r)
                .filter(|_| !through_same_link)
                .and_then(|i| self.link(kind, i).ok());
            existing.push(Existing {
                net: rnet,
                unicast: r.header.kind == RouteType::Unicast,
                gateway: r.attributes.iter().any(|a| {
                    matches!(
                        a,
                        RouteAttribute::Gateway(_)
                            | RouteAttribute::Via(_)
                            | RouteAttribute::MultiPath(_)
                    )
                }),
                by_wasmcni: u8::from(r.header.protocol) == RTPROT_WASMCNI,
                through_marked: through.as_ref().is_some_and(|l| {
                    l.alias.as_deref().is_some_and(|a| {
                        a.starts_with(crate::attachment::NETWORK_MARK)
                            || a.starts_with(crate::attachment::ATTACHMENT_MARK)
                    })
                }),
                through_same_link,
                through_own: through.as_ref().is_some_and(|l| self.owned(l)),
            });
        }
        super::authority::route::takes_no_route(what, dst, &existing)
    }

    /// A route the plugin may replace or delete: one the journal can put
    /// back (a plain unicast route), and in the host namespace one wasmcni
    /// created (its protocol) through a link the plugin may modify.
    fn replaceable(&mut self, kind: Kind, msg: &RouteMessage) -> Result<RouteSpec, CapError> {
        let spec = RouteSpec::from_message(msg);
        let ours = match &spec {
            Some(spec) if kind == Kind::Host => {
                spec.protocol == RTPROT_WASMCNI
                    && match spec.oif {
                        Some(oif) => {
                            let l = self.link(kind, oif)?;
                            self.check_host_link(kind, &l).is_ok()
                        }
                        None => false,
                    }
            }
            _ => false,
        };
        super::authority::route::replaceable(
            kind,
            spec.as_ref().map(|s| (s.dst, s.dst_len, s.table)),
            ours,
        )?;
        spec.ok_or(CapError::Code(super::bindings::ErrorCode::Other))
    }
}

fn rule_spec(r: &Rule) -> Result<RuleSpec, CapError> {
    let v4 = r.family == IpFamily::Ipv4;
    let prefix = |p: &Option<IpPrefix>| -> Result<Option<(IpAddr, u8)>, CapError> {
        match p {
            None => Ok(None),
            Some(p) => {
                let (ip, len) = prefix_from_wit(*p)?;
                if ip.is_ipv4() != v4 {
                    return Err(super::bindings::ErrorCode::InvalidArgument.into());
                }
                Ok(Some((network(ip, len), len)))
            }
        }
    };
    if r.table == 0 {
        return Err(super::bindings::ErrorCode::InvalidArgument.into());
    }
    Ok(RuleSpec {
        v4,
        priority: r.priority,
        src: prefix(&r.source)?,
        dst: prefix(&r.destination)?,
        table: r.table,
    })
}

fn rule_to_wit(s: &RuleSpec) -> Rule {
    let p = |x: Option<(IpAddr, u8)>| {
        x.map(|(ip, len)| IpPrefix {
            address: ip_to_wit(ip),
            prefix_len: len,
        })
    };
    Rule {
        family: if s.v4 { IpFamily::Ipv4 } else { IpFamily::Ipv6 },
        priority: s.priority,
        source: p(s.src),
        destination: p(s.dst),
        table: s.table,
    }
}

impl AuditArg for Rule {
    fn audit(&self) -> Value {
        let p = |x: &Option<IpPrefix>| {
            x.and_then(|p| prefix_from_wit(p).ok())
                .map(|(ip, len)| format!("{ip}/{len}"))
        };
        json!({"family": format!("{:?}", self.family), "priority": self.priority,
               "source": p(&self.source), "destination": p(&self.destination),
               "table": self.table})
    }
}

impl Ctx {
    /// Rule changes: `routes` in the container namespace; never in the
    /// host's.
    fn rule_target(&mut self, kind: Kind) -> Result<(), CapError> {
        self.require(kind, super::row::Right::Routes)?;
        super::authority::route::rule(kind)
    }

    /// The namespace's routing-table lock
    /// ([`crate::netlock::tables_lock`]), for a plugin that may add rules
    /// or create VRFs there (the objects that take a table): taken once,
    /// waiting at most until the invocation's deadline, and held to its
    /// end. CHECK, GC and STATUS change nothing, so choose no table: for
    /// them it does nothing.
    fn lock_tables(&mut self, kind: Kind) -> Result<(), CapError> {
        // Nothing is chosen in CHECK, GC or STATUS: nothing to hold.
        if !matches!(self.command, Some(Command::Add | Command::Del)) {
            return Ok(());
        }
        super::authority::route::chooses_tables(
            self.rule_target(kind),
            self.require_create(kind, LinkKind::Vrf),
        )?;
        let ino = self
            .ns(kind)
            .ok_or(CapError::Code(super::bindings::ErrorCode::NotFound))?
            .ino();
        if self.table_locks.iter().any(|(i, _)| *i == ino) {
            return Ok(());
        }
        match crate::netlock::tables_lock(ino, self.deadline()) {
            Ok(file) => {
                self.table_locks.push((ino, file));
                Ok(())
            }
            Err((path, e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                self.note_host_error(format!(
                    "the routing-table lock of the {} namespace ({}) was held by another \
                     invocation until this one's deadline",
                    kind.name(),
                    path.display()
                ));
                Err(super::bindings::ErrorCode::TryAgain.into())
            }
            Err((path, e)) => {
                self.note_host_error(format!(
                    "taking the routing-table lock {}: {e}",
                    path.display()
                ));
                Err(CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)))
            }
        }
    }
}

/// The host functions' work, one method per call.
impl Ctx {
    /// The namespace's routing rules, of one family if `family` names one.
    fn route_rules(&mut self, kind: Kind, family: Option<IpFamily>) -> Result<Vec<Rule>, CapError> {
        let v4 = family.map(|f| f == IpFamily::Ipv4);
        Ok(self
            .netlink(kind)?
            .rules(v4)?
            .iter()
            .map(rule_to_wit)
            .collect())
    }

    /// Adds a routing rule in the container namespace, journaling its removal.
    fn add_route_rule(&mut self, kind: Kind, rule: &Rule) -> Result<(), CapError> {
        let spec = rule_spec(rule)?;
        self.rule_target(kind)?;
        let before = self.netlink(kind)?.rules(Some(spec.v4))?;
        self.netlink(kind)?.add_rule(&spec)?;
        // The rule as the kernel made it (its priority, if it chose
        // one): the undo deletes exactly that one.
        let made = self
            .netlink(kind)?
            .rules(Some(spec.v4))?
            .into_iter()
            .find(|r| !before.contains(r) && r.src == spec.src && r.dst == spec.dst)
            .unwrap_or(spec);
        self.journal.record(RouteUndo::DeleteRule {
            ns: kind,
            spec: made,
        });
        Ok(())
    }

    /// Deletes a routing rule in the container namespace, journaling its return.
    fn delete_route_rule(&mut self, kind: Kind, rule: &Rule) -> Result<(), CapError> {
        let spec = rule_spec(rule)?;
        self.rule_target(kind)?;
        let old = self
            .netlink(kind)?
            .rules(Some(spec.v4))?
            .into_iter()
            .find(|r| {
                r.table == spec.table
                    && r.src == spec.src
                    && r.dst == spec.dst
                    && spec.priority.is_none_or(|p| r.priority == Some(p))
            })
            .ok_or(CapError::Kernel(libc::ENOENT))?;
        self.netlink(kind)?.delete_rule(&old)?;
        self.journal.record(RouteUndo::AddRule {
            ns: kind,
            spec: old,
        });
        Ok(())
    }

    /// The namespace's routes, of one family and table if named.
    fn list_routes(
        &mut self,
        kind: Kind,
        family: Option<IpFamily>,
        table: Option<u32>,
    ) -> Result<Vec<RouteInfo>, CapError> {
        let family = family.map(|f| match f {
            IpFamily::Ipv4 => AddressFamily::Inet,
            IpFamily::Ipv6 => AddressFamily::Inet6,
        });
        let msgs = self.netlink(kind)?.routes(family)?;
        Ok(msgs
            .iter()
            .filter_map(RouteSpec::from_message)
            .filter(|s| table.is_none_or(|t| t == s.table))
            .map(|s| RouteInfo {
                route: to_wit(&s),
                owned: kind == Kind::Host && s.protocol == RTPROT_WASMCNI,
            })
            .collect())
    }

    /// Adds a route the plugin may add, journaling its removal.
    fn add_route(&mut self, kind: Kind, route: &Route) -> Result<(), CapError> {
        let spec = to_spec(kind, route)?;
        self.route_target(kind, &spec)?;
        self.netlink(kind)?.add_route(&spec, RouteAdd::Exclusive)?;
        self.journal
            .record(RouteUndo::DeleteRoute { ns: kind, spec });
        Ok(())
    }

    /// Adds or replaces a route, journaling what it replaced.
    fn replace_route(&mut self, kind: Kind, route: &Route) -> Result<(), CapError> {
        let spec = to_spec(kind, route)?;
        self.route_target(kind, &spec)?;
        // Whatever the kernel would replace, of any type, must be a
        // route the plugin may replace and the journal can restore.
        let key = RouteKey::of_spec(&spec);
        let in_the_way: Vec<RouteMessage> = self
            .routes_raw(kind, spec.dst.is_ipv4())?
            .into_iter()
            .filter(|m| RouteKey::of_message(m) == Some(key))
            .collect();
        let mut old = None;
        for m in &in_the_way {
            old = Some(self.replaceable(kind, m)?);
        }
        self.netlink(kind)?.add_route(&spec, RouteAdd::Replace)?;
        self.journal.record(match old {
            Some(old) => RouteUndo::RestoreRoute {
                ns: kind,
                spec: old,
            },
            None => RouteUndo::DeleteRoute { ns: kind, spec },
        });
        Ok(())
    }

    /// Deletes a route the plugin may delete, journaling its return.
    fn delete_route(&mut self, kind: Kind, route: &Route) -> Result<(), CapError> {
        let spec = to_spec(kind, route)?;
        let old = self
            .routes_raw(kind, spec.dst.is_ipv4())?
            .iter()
            .filter_map(RouteSpec::from_message)
            .find(|k| matches_delete(&spec, k))
            .ok_or(CapError::Kernel(libc::ESRCH))?;
        let raw = self
            .routes_raw(kind, spec.dst.is_ipv4())?
            .into_iter()
            .find(|m| RouteSpec::from_message(m).as_ref() == Some(&old))
            .ok_or(CapError::Kernel(libc::ESRCH))?;
        self.replaceable(kind, &raw)?;
        self.netlink(kind)?.delete_route(&old)?;
        self.journal.record(RouteUndo::AddRoute {
            ns: kind,
            spec: old,
        });
        Ok(())
    }
}

impl Host for StoreData {
    fn list_rules(
        &mut self,
        ns: Resource<NsHandle>,
        family: Option<IpFamily>,
    ) -> Result<Vec<Rule>, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, family);
        self.cap(&LIST_RULES, args, |c| c.route_rules(kind, family))
    }

    fn lock_tables(&mut self, ns: Resource<NsHandle>) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind,);
        self.cap(&LOCK_TABLES, args, |c| c.lock_tables(kind))
    }

    fn add_rule(&mut self, ns: Resource<NsHandle>, rule: Rule) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rule);
        self.cap(&ADD_RULE, args, |c| c.add_route_rule(kind, &rule))
    }

    fn delete_rule(&mut self, ns: Resource<NsHandle>, rule: Rule) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rule);
        self.cap(&DELETE_RULE, args, |c| c.delete_route_rule(kind, &rule))
    }

    fn list(
        &mut self,
        ns: Resource<NsHandle>,
        family: Option<IpFamily>,
        table: Option<u32>,
    ) -> Result<Vec<RouteInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, family, table);
        self.cap(&LIST, args, |c| c.list_routes(kind, family, table))
    }

    fn add(&mut self, ns: Resource<NsHandle>, route: Route) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, RouteArg(kind, &route));
        self.cap(&ADD, args, |c| c.add_route(kind, &route))
    }

    fn replace(&mut self, ns: Resource<NsHandle>, route: Route) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, RouteArg(kind, &route));
        self.cap(&REPLACE, args, |c| c.replace_route(kind, &route))
    }

    fn delete(&mut self, ns: Resource<NsHandle>, route: Route) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, RouteArg(kind, &route));
        self.cap(&DELETE, args, |c| c.delete_route(kind, &route))
    }
}

/// How a change to routes and policy rules is taken back (`route`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum RouteUndo {
    /// A route was added: delete it.
    DeleteRoute {
        /// Where.
        ns: Kind,
        /// What.
        spec: RouteSpec,
    },
    /// A route was deleted, or the kernel flushed it with a change to its
    /// link: add it back beside any other route with the same key (an
    /// IPv6 `fe80::/64` of another link must not be replaced).
    AddRoute {
        /// Where.
        ns: Kind,
        /// The route.
        spec: RouteSpec,
    },
    /// A route was replaced: put the old one back (replace).
    RestoreRoute {
        /// Where.
        ns: Kind,
        /// The old route (a replacement has the same key, so putting the
        /// old one back with `replace` removes the new one).
        spec: RouteSpec,
    },
    /// A policy routing rule was added: delete it.
    DeleteRule {
        /// Where.
        ns: Kind,
        /// The rule as the kernel made it.
        spec: crate::netlink::RuleSpec,
    },
    /// A policy routing rule was deleted: add it back.
    AddRule {
        /// Where.
        ns: Kind,
        /// The rule as it was.
        spec: crate::netlink::RuleSpec,
    },
    /// The namespace had no `l3mdev` rules before this ADD made VRF
    /// `vrf` (the kernel added them, or the host did): delete them, unless
    /// another VRF of the namespace is there then (it needs them).
    DeleteL3mdevRules {
        /// Where.
        ns: Kind,
        /// The index of the VRF that brought them (0 in an intent log of
        /// an older wasmcni: no VRF is exempt).
        #[serde(default)]
        vrf: u32,
        /// Whether the IPv4 rule came with it (an older log: both did).
        #[serde(default = "yes")]
        v4: bool,
        /// Whether the IPv6 rule came with it.
        #[serde(default = "yes")]
        v6: bool,
    },
}

impl Inverse for RouteUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let nl_err = |e: NlError| CapError::from(&e);
        match self {
            RouteUndo::DeleteRoute { ns, spec } => {
                ctx.netlink(*ns)?.delete_route(spec).map_err(nl_err)
            }
            RouteUndo::AddRoute { ns, spec } => ctx
                .netlink(*ns)?
                .add_route(spec, RouteAdd::Append)
                .map_err(nl_err),
            RouteUndo::RestoreRoute { ns, spec } => ctx
                .netlink(*ns)?
                .add_route(spec, RouteAdd::Replace)
                .map_err(nl_err),
            RouteUndo::DeleteRule { ns, spec } => {
                ctx.netlink(*ns)?.delete_rule(spec).map_err(nl_err)
            }
            RouteUndo::AddRule { ns, spec } => ctx.netlink(*ns)?.add_rule(spec).map_err(nl_err),
            RouteUndo::DeleteL3mdevRules { ns, vrf, v4, v6 } => {
                ctx.delete_l3mdev_rules(*ns, *vrf, *v4, *v6)
            }
        }
    }

    fn already_gone(&self, errno: i32) -> bool {
        match self {
            RouteUndo::DeleteRoute { .. } => errno == libc::ESRCH || errno == libc::ENODEV,
            RouteUndo::DeleteRule { .. } => errno == libc::ENOENT,
            RouteUndo::AddRule { .. } => errno == libc::EEXIST,
            // Put back by the kernel already (a prefix route with its
            // address).
            RouteUndo::AddRoute { .. } => errno == libc::EEXIST,
            RouteUndo::RestoreRoute { .. } | RouteUndo::DeleteL3mdevRules { .. } => false,
        }
    }

    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            RouteUndo::DeleteRoute { ns, spec }
            | RouteUndo::AddRoute { ns, spec }
            | RouteUndo::RestoreRoute { ns, spec } => spec.oif.as_mut().map(|oif| (*ns, oif)),
            RouteUndo::DeleteRule { .. }
            | RouteUndo::AddRule { .. }
            | RouteUndo::DeleteL3mdevRules { .. } => None,
        }
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn uncovered(&self, _ctx: &mut Ctx, _owned: &Owned) -> Uncovered {
        match self {
            RouteUndo::DeleteRule { ns: Kind::Host, .. }
            | RouteUndo::AddRule { ns: Kind::Host, .. }
            | RouteUndo::DeleteL3mdevRules { ns: Kind::Host, .. } => {
                Uncovered::Yes("a policy routing rule in the node".to_owned())
            }
            _ => Uncovered::ByLink,
        }
    }
}

/// serde's default for a flag that older logs did not write and meant.
fn yes() -> bool {
    true
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[
    &LIST,
    &ADD,
    &REPLACE,
    &LIST_RULES,
    &LOCK_TABLES,
    &ADD_RULE,
    &DELETE_RULE,
    &DELETE,
];

/// `route.list`.
pub(super) const LIST: Entry = Entry {
    call: "route.list",
    args: &["ns", "family", "table"],
    authority: "read routes",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `route.add`.
pub(super) const ADD: Entry = Entry {
    call: "route.add",
    args: &["ns", "route"],
    authority: "add a route",
    policy: "`routes`; host: main table, destination inside `prefixes` and covering no other attachment's reservation in any network's IPAM state, through a link own or `links`, marked with protocol 87; via only an address the attachment owns; unless it is a host route to one of its own addresses, neither as specific as, more specific than, nor covering a route of the node's main table inside `prefixes` that is a connected or on-link subnet, wasmcni's, or a reject route, not through its own link (one dump of the main table)",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Routes), Grant::Prefix("route.destination"), Grant::NodeLink("route.link-index", Ns::Call, LinkGrant::Links)],
};

/// `route.replace`.
pub(super) const REPLACE: Entry = Entry {
    call: "route.replace",
    args: &["ns", "route"],
    authority: "add or replace a route",
    policy: "`routes`; host: as add, and only replacing wasmcni's routes",
    undo: "put the old route back, or delete",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Routes),
        Grant::Prefix("route.destination"),
        Grant::NodeLink("route.link-index", Ns::Call, LinkGrant::Links),
    ],
};

/// `route.list-rules`.
pub(super) const LIST_RULES: Entry = Entry {
    call: "route.list-rules",
    args: &["ns", "family"],
    authority: "list the to-table policy routing rules",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `route.lock-tables`.
pub(super) const LOCK_TABLES: Entry = Entry {
    call: "route.lock-tables",
    args: &["ns"],
    authority: "take the namespace's routing-table lock (flock under the run dir, by nsfs inode) to the invocation's end, waiting until its deadline: a concurrent ADD in that namespace waits to choose a table",
    policy: "`routes` in the container namespace (as add-rule), or `create: [\"vrf\"]`; a no-op in CHECK, GC and STATUS",
    undo: "none (released when the invocation ends)",
    mutates: false,
    in_gc: false,
    needs: &[Grant::Tables],
};

/// `route.add-rule`.
pub(super) const ADD_RULE: Entry = Entry {
    call: "route.add-rule",
    args: &["ns", "rule"],
    authority:
        "add a policy routing rule sending matching traffic (source, destination prefix) to a table",
    policy: "`routes`; container namespace only (the host's rules are the node's)",
    undo: "delete the rule as the kernel made it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Routes)],
};

/// `route.delete-rule`.
pub(super) const DELETE_RULE: Entry = Entry {
    call: "route.delete-rule",
    args: &["ns", "rule"],
    authority: "delete a policy routing rule",
    policy: "`routes`; container namespace only",
    undo: "add it back",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Routes)],
};

/// `route.delete`.
pub(super) const DELETE: Entry = Entry {
    call: "route.delete",
    args: &["ns", "route"],
    authority: "delete a route",
    policy: "`routes`; host: only wasmcni's routes",
    undo: "add it back (beside other routes with the same key)",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Routes)],
};

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

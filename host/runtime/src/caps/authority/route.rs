//! Routes and rules: host routes only in the main table, inside the
//! grant's prefixes, through a link the plugin controls, over no other
//! attachment's reservation, taking no route that is not the
//! attachment's; which routes may be replaced; no rule in the node's
//! namespace.

use std::net::IpAddr;

use super::View;
use crate::caps::bindings::CapError;
use crate::ipam::Owner;
use crate::netns::Kind;

/// The node's main routing table: the only one a host route may go in.
pub(in crate::caps) const MAIN_TABLE: u32 = 254;

impl View<'_> {
    /// A host route (to `dst/len` in `table` through `oif`): in the main
    /// table, inside the grant's `prefixes`, naming its output link (which
    /// must then be one the plugin controls: [`View::host_link`]).
    pub fn host_route(
        &self,
        table: u32,
        dst: IpAddr,
        len: u8,
        oif: Option<u32>,
    ) -> Result<u32, CapError> {
        if table != MAIN_TABLE {
            return Err(CapError::denied(format!(
                "host routes only in the main table, not table {table} (a wasmcni invariant)"
            )));
        }
        if !self.ns_grant(Kind::Host).covers(dst, len) {
            let field = self.grant_field(Kind::Host, "prefixes");
            return Err(CapError::by_policy(
                &field,
                format!("host route to {dst}/{len} lies in none of {field}"),
            ));
        }
        oif.ok_or_else(|| {
            CapError::denied(
                "a host route must name its output link, one the plugin may modify (a \
                 wasmcni invariant)",
            )
        })
    }

    /// Whether a route of the node's main table to `existing` meets a new
    /// one to `dst`: it lies in the grant's `prefixes` and is as specific
    /// as or broader than `dst` while covering it (the new one would win
    /// for its addresses), or it lies inside `dst` (the new one would take
    /// over once it goes). A broader route outside `prefixes` (the node's
    /// default, an uplink's) is the space the grant gives.
    pub fn meets(&self, kind: Kind, dst: ipnet::IpNet, existing: ipnet::IpNet) -> bool {
        let len = existing.prefix_len();
        let covers_it = len > 0
            && len <= dst.prefix_len()
            && existing.contains(&dst.network())
            && self.ns_grant(kind).covers(existing.addr(), len);
        let inside = len >= dst.prefix_len() && dst.contains(&existing.addr());
        covers_it || inside
    }
}

/// A host route to `dst/len` may not cover an address a network's IPAM
/// state reserves for another attachment (`found`): it would steer the
/// node's traffic for it.
pub(in crate::caps) fn over_reservation(
    dst: IpAddr,
    len: u8,
    found: Option<&(IpAddr, Owner)>,
) -> Result<(), CapError> {
    let Some((other, holder)) = found else {
        return Ok(());
    };
    Err(CapError::denied_with(
        format!(
            "host route to {dst}/{len} covers an address reserved for another attachment \
             in a network's IPAM state (a wasmcni invariant)"
        ),
        format!("{other}: {} {}", holder.container_id, holder.ifname),
    ))
}

/// A route of the node's main table that meets a new one
/// ([`View::meets`]), as the kernel and the links' marks describe it.
#[derive(Debug, Clone, Copy)]
pub(in crate::caps) struct Existing {
    /// Its destination.
    pub net: ipnet::IpNet,
    /// A unicast route (not a reject, blackhole, ...).
    pub unicast: bool,
    /// It has a gateway (or a `via`, or several next hops).
    pub gateway: bool,
    /// wasmcni made it (its protocol).
    pub by_wasmcni: bool,
    /// Its output link carries a wasmcni mark (another attachment's or
    /// network's, or this one's).
    pub through_marked: bool,
    /// Its output link is the new route's own.
    pub through_same_link: bool,
    /// Its output link is this attachment's own.
    pub through_own: bool,
}

impl Existing {
    /// Whether a new route may not take part of it: a connected or
    /// on-link subnet (no gateway: a LAN, a bridge's subnet, a pod's host
    /// route), a route wasmcni made or one through a link wasmcni marked
    /// (another attachment's or network's), or a reject route. Not an
    /// admin's gateway route (a VPN's 10/8 via its tunnel): a network
    /// inside it takes that part, as with every runtime.
    fn protected(&self) -> bool {
        !self.unicast || !self.gateway || self.by_wasmcni || self.through_marked
    }
}

/// A new route to `dst` (`what`: a host route, a host address's connected
/// prefix) may not take a protected route that meets it (`existing`) and
/// is not through its own link or one of the attachment's.
pub(in crate::caps) fn takes_no_route(
    what: &str,
    dst: ipnet::IpNet,
    existing: &[Existing],
) -> Result<(), CapError> {
    let Some(r) = existing
        .iter()
        .find(|r| !(r.through_same_link || r.through_own || !r.protected()))
    else {
        return Ok(());
    };
    let (rnet, len) = (r.net, r.net.prefix_len());
    let inside = len >= dst.prefix_len() && dst.contains(&rnet.addr());
    let how = if inside && len > dst.prefix_len() {
        "covers"
    } else if len == dst.prefix_len() {
        "is as specific as"
    } else {
        "is more specific than"
    };
    Err(CapError::denied(format!(
        "{what} {dst} {how} the node's {}route to {rnet}, which is not this \
         attachment's: it would take that route's traffic (a wasmcni invariant)",
        if r.unicast { "" } else { "reject " }
    )))
}

/// A route the plugin may replace or delete: one the journal can put back
/// (`plain`: a plain unicast route), and in the host namespace one wasmcni
/// created (`ours`: its protocol, through a link the plugin controls).
pub(in crate::caps) fn replaceable(
    kind: Kind,
    plain: Option<(IpAddr, u8, u32)>,
    ours: bool,
) -> Result<(), CapError> {
    let Some((dst, len, table)) = plain else {
        return Err(CapError::denied(
            "the route in the way is not a plain unicast route (local, multipath, \
             nexthop, ...) and could not be restored (a wasmcni invariant)",
        ));
    };
    if kind == Kind::Host && !ours {
        return Err(CapError::denied(format!(
            "host route {dst}/{len} (table {table}) was not created by wasmcni through a link \
             the plugin may modify (a wasmcni invariant)"
        )));
    }
    Ok(())
}

/// Policy routing rules of the host namespace are the node's.
pub(in crate::caps) fn rule(kind: Kind) -> Result<(), CapError> {
    if kind == Kind::Host {
        return Err(CapError::denied(
            "policy routing rules of the host namespace are the node's (a wasmcni invariant)",
        ));
    }
    Ok(())
}

/// A plugin that may neither add rules nor create VRFs in a namespace
/// (`rules`, `vrfs`: why not) chooses no table there, so takes no lock.
pub(in crate::caps) fn chooses_tables(
    rules: Result<(), CapError>,
    vrfs: Result<(), CapError>,
) -> Result<(), CapError> {
    let (Err(rules), Err(vrfs)) = (rules, vrfs) else {
        return Ok(());
    };
    let reason = |e: CapError| match e {
        CapError::Denied(d) => d.reason().to_owned(),
        other => format!("{other:?}"),
    };
    Err(CapError::denied(format!(
        "the plugin may neither add rules nor create VRFs in this namespace, so \
         chooses no table there: {}; {}",
        reason(rules),
        reason(vrfs)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> ipnet::IpNet {
        s.parse().unwrap()
    }

    fn existing(s: &str) -> Existing {
        Existing {
            net: net(s),
            unicast: true,
            gateway: false,
            by_wasmcni: false,
            through_marked: false,
            through_same_link: false,
            through_own: false,
        }
    }

    #[test]
    fn a_route_takes_no_connected_subnet_nor_reject_route() {
        let dst = net("10.22.0.0/25");
        let e = takes_no_route("host route to", dst, &[existing("10.22.0.0/24")]).unwrap_err();
        assert!(format!("{e:?}").contains("is more specific than"), "{e:?}");
        let mut inside = existing("10.22.0.5/32");
        assert!(takes_no_route("host route to", dst, &[inside]).is_err());
        inside.through_own = true;
        assert!(takes_no_route("host route to", dst, &[inside]).is_ok());
        let mut reject = existing("10.22.0.0/24");
        reject.unicast = false;
        reject.gateway = true;
        let e = takes_no_route("host route to", dst, &[reject]).unwrap_err();
        assert!(format!("{e:?}").contains("reject route"), "{e:?}");
        // An admin's gateway route is the space a network takes part of.
        let mut vpn = existing("10.0.0.0/8");
        vpn.gateway = true;
        assert!(takes_no_route("host route to", dst, &[vpn]).is_ok());
        vpn.by_wasmcni = true;
        assert!(takes_no_route("host route to", dst, &[vpn]).is_err());
    }

    #[test]
    fn only_plain_routes_wasmcni_made_are_replaced_in_the_node() {
        let ip: IpAddr = "10.22.0.0".parse().unwrap();
        assert!(replaceable(Kind::Host, None, true).is_err());
        assert!(replaceable(Kind::Host, Some((ip, 24, 254)), false).is_err());
        assert!(replaceable(Kind::Host, Some((ip, 24, 254)), true).is_ok());
        assert!(replaceable(Kind::Container, Some((ip, 24, 254)), false).is_ok());
        assert!(rule(Kind::Host).is_err());
        assert!(rule(Kind::Container).is_ok());
    }
}

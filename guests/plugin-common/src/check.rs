//! CHECK helpers: what the reference plugins verify of a prevResult.

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::{LinkInfo, Netns};
use guest_sdk::skel::Invocation;

use crate::mac;

/// The prevResult's entry for `CNI_IFNAME` in this sandbox, and the link of
/// that name in `ns`: of `kind` (`IFLA_INFO_KIND`), with the entry's MAC
/// (the reference's texts).
pub fn interface(
    inv: &Invocation,
    ns: &Netns,
    prev: &CniResult,
    kind: &str,
) -> Result<LinkInfo, Error> {
    let link = any_interface(inv, ns, prev)?;
    if link.kind.as_deref() != Some(kind) {
        return Err(Error::internal(format!(
            "Error: Container interface {} not of type {kind}",
            link.name
        )));
    }
    Ok(link)
}

/// [`interface`] of any kind (a device moved in from the node: a NIC, a
/// veth, ...).
pub fn any_interface(inv: &Invocation, ns: &Netns, prev: &CniResult) -> Result<LinkInfo, Error> {
    let ifname = &inv.env.ifname;
    let entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == *ifname && i.sandbox == inv.env.netns)
        .ok_or_else(|| {
            Error::internal(format!(
                "Sandbox in prevResult  doesn't match configured netns: {}",
                inv.env.netns
            ))
        })?;
    let link = ns.link(&entry.name).map_err(|_| {
        Error::internal(format!(
            "Container Interface name in prevResult: {} not found",
            entry.name
        ))
    })?;
    if !entry.mac.is_empty() && entry.mac != mac::format(&link.mac) {
        return Err(Error::internal(format!(
            "Interface {} Mac {} doesn't match container Mac: {}",
            link.name,
            entry.mac,
            mac::format(&link.mac)
        )));
    }
    Ok(link)
}

/// Every address of `prev` is on `link`, and every route of `prev` is in
/// the container's main table.
pub fn addresses_and_routes(ns: &Netns, link: &LinkInfo, prev: &CniResult) -> Result<(), Error> {
    addresses(ns, link, prev)?;
    routes(ns, prev)
}

/// Every address of `prev` is on `link`, and a route to its subnet is in
/// the table `link` routes in: the main table, or its VRF's (the
/// reference looks in the main table only, and so fails CHECK when a VRF
/// took the routes).
pub fn addresses(ns: &Netns, link: &LinkInfo, prev: &CniResult) -> Result<(), Error> {
    let addrs = ns.addresses(Some(link), None)?;
    let table = match link.master {
        Some(m) => ns.link_by_index(m)?.vrf_table.unwrap_or(254),
        None => 254,
    };
    let routes = ns.routes(None, Some(table))?;
    for ip in &prev.ips {
        let found = addrs.iter().any(|a| {
            guest_sdk::net::to_ip(&a.prefix.address) == ip.address.addr()
                && a.prefix.prefix_len == ip.address.prefix_len()
        });
        if !found {
            return Err(Error::internal(format!(
                "Failed to match addr {} on interface {}",
                ip.address, link.name
            )));
        }
        let routed = routes.iter().any(|ri| {
            let dst = &ri.route.destination;
            guest_sdk::net::to_ip(&dst.address) == ip.address.network()
                && dst.prefix_len == ip.address.prefix_len()
        });
        if !routed {
            let gw = ip
                .gateway
                .map(|g| g.to_string())
                .unwrap_or_else(|| "<nil>".into());
            return Err(Error::internal(format!(
                "Failed to find Gateway {gw} for interface {}",
                link.name
            )));
        }
    }
    Ok(())
}

/// Every route of `prev` is in the main table of `ns`.
pub fn routes(ns: &Netns, prev: &CniResult) -> Result<(), Error> {
    let routes = ns.routes(None, Some(254))?;
    for r in &prev.routes {
        let found = routes.iter().any(|ri| {
            let dst = &ri.route.destination;
            guest_sdk::net::to_ip(&dst.address) == r.dst.network()
                && dst.prefix_len == r.dst.prefix_len()
                && (r.dst.prefix_len() == 0
                    || r.gw.is_none()
                    || ri.route.gateway.map(|g| guest_sdk::net::to_ip(&g)) == r.gw)
        });
        if !found {
            let gw =
                r.gw.map(|g| g.to_string())
                    .unwrap_or_else(|| "<nil>".into());
            return Err(Error::internal(format!(
                "Expected Route {{Dst:{} GW:{gw}}} not found in routing table",
                r.dst
            )));
        }
    }
    Ok(())
}

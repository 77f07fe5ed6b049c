//! CHECK helpers: what the reference plugins verify of a prevResult.

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::{LinkInfo, Netns};

/// Every address of `prev` is on `link`, and every route of `prev` is in
/// the container's main table.
pub fn addresses_and_routes(ns: &Netns, link: &LinkInfo, prev: &CniResult) -> Result<(), Error> {
    let addrs = ns.addresses(Some(link), None)?;
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
    }
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

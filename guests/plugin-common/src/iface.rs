//! Configuring the container's interface from a result, as the reference
//! `ipam.ConfigureIface` does: its addresses, up, then the result's routes
//! (through the family's gateway when a route names none).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::{from_ip, prefix, AddressOptions, IpFamily, Netns, Route, Scope};
use guest_sdk::skel::Invocation;

/// The container's namespace, with the reference's error text.
pub fn open_container(inv: &Invocation) -> Result<Netns, Error> {
    Netns::container()
        .map_err(|e| Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns)))
}

/// DEL's link part for a plugin whose interface is one link in the
/// container (macvlan, ipvlan, vlan, dummy, tap): deletes `CNI_IFNAME`
/// there; no namespace path, a namespace that is gone or a missing link is
/// no error.
pub fn delete_link(inv: &Invocation) -> Result<(), Error> {
    if inv.env.netns.is_empty() {
        return Ok(());
    }
    let ns = match Netns::container() {
        Ok(ns) => ns,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let Ok(link) = ns.link(&inv.env.ifname) else {
        return Ok(());
    };
    match ns.delete_link(link.index) {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(Error::internal(format!(
            "failed to delete {:?}: {e}",
            inv.env.ifname
        ))),
    }
}

/// The sysctl key of `link`'s `setting` in `family` (`ipv4`/`ipv6`).
pub fn link_key(family: &str, link: &str, setting: &str) -> String {
    format!("net.{family}.conf.{}.{setting}", link.replace('.', "/"))
}

/// Configures `ifname` in `ns` with the addresses of `result` whose
/// interface index points at an interface named `ifname`, brings it up,
/// waits for IPv6 duplicate address detection when there is an IPv6
/// gateway, and adds the result's routes.
pub fn configure(ns: &Netns, ifname: &str, result: &CniResult) -> Result<(), Error> {
    if result.interfaces.is_empty() {
        return Err(Error::internal("no interfaces to configure"));
    }
    let scopes = result
        .routes
        .iter()
        .map(|r| route_scope(r.scope, &r.dst.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let link = ns
        .link(ifname)
        .map_err(|e| Error::internal(format!("failed to lookup {ifname:?}: {e}")))?;
    let mut gw4: Option<IpAddr> = None;
    let mut gw6: Option<IpAddr> = None;
    let mut v6_enabled = false;
    for ip in &result.ips {
        let Some(i) = ip.interface else { continue };
        let addr = ip.address;
        if result.interfaces.get(i).map(|x| x.name.as_str()) != Some(ifname) {
            return Err(Error::internal(format!(
                "failed to add IP addr {addr} to {ifname:?}: invalid interface index"
            )));
        }
        if !addr.is_ipv4() && !v6_enabled {
            for l in ["lo", ifname] {
                let key = link_key("ipv6", l, "disable_ipv6");
                if let Ok(v) = ns.sysctl(&key) {
                    if v.trim() != "0" {
                        ns.set_sysctl(&key, "0").map_err(|e| {
                            Error::internal(format!(
                                "failed to enable IPv6 for interface {l:?} ({key}={v}): {e}"
                            ))
                        })?;
                    }
                }
            }
            v6_enabled = true;
        }
        ns.add_address(
            link.index,
            prefix(addr.addr(), addr.prefix_len()),
            AddressOptions {
                no_dad: false,
                no_prefix_route: false,
                scope: None,
            },
        )
        .map_err(|e| Error::internal(format!("failed to add IP addr {addr} to {ifname:?}: {e}")))?;
        if let Some(gw) = ip.gateway {
            let slot = if gw.is_ipv4() { &mut gw4 } else { &mut gw6 };
            if slot.is_none() {
                *slot = Some(gw);
            }
        }
    }
    ns.set_up(link.index, true)
        .map_err(|e| Error::internal(format!("failed to set {ifname:?} UP: {e}")))?;
    if gw6.is_some() {
        settle_addresses(ns, ifname, Duration::from_secs(10));
    }
    for (r, scope) in result.routes.iter().zip(scopes) {
        let gw = r.gw.or(if r.dst.is_ipv4() { gw4 } else { gw6 });
        let route = Route {
            destination: prefix(r.dst.addr(), r.dst.prefix_len()),
            gateway: gw.map(from_ip),
            link_index: Some(link.index),
            table: r.table,
            metric: r.priority,
            scope: Some(scope),
            source: None,
            mtu: r.mtu,
            on_link: false,
            protocol: None,
        };
        ns.add_route(&route).map_err(|e| {
            let via = gw.map(|g| g.to_string()).unwrap_or_else(|| "<nil>".into());
            Error::internal(format!(
                "failed to add route '{}' via {via} dev {ifname:?}: {e}",
                r.dst
            ))
        })?;
    }
    Ok(())
}

/// The scope of a result's route (spec 1.1's `scope`, as upstream's
/// `ConfigureIface` gives it to the kernel; none: universe, as there).
/// Only the scopes the capability interface names can be asked for: another
/// number (which upstream hands to the kernel) is refused, naming the
/// route.
pub fn route_scope(scope: Option<u8>, dst: &str) -> Result<Scope, Error> {
    Ok(match scope.unwrap_or(0) {
        0 => Scope::Universe,
        200 => Scope::Site,
        253 => Scope::Link,
        254 => Scope::Host,
        255 => Scope::Nowhere,
        n => {
            return Err(Error::unsupported_field(format!(
                "route {dst}: scope {n} is not one wasmcni can set (0 universe, 200 site, \
                 253 link, 254 host, 255 nowhere)"
            )))
        }
    })
}

/// Waits until no address of `ifname` is tentative or failed duplicate
/// address detection, for at most `limit` (polling every 50 ms); the
/// outcome does not matter, as in the reference.
pub fn settle_addresses(ns: &Netns, ifname: &str, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        let Ok(link) = ns.link(ifname) else { return };
        let Ok(addrs) = ns.addresses(Some(&link), Some(IpFamily::Ipv6)) else {
            return;
        };
        if addrs.iter().all(|a| !a.tentative && !a.dad_failed) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_scopes_as_the_kernel_names_them() {
        for (n, want) in [
            (None, Scope::Universe),
            (Some(0), Scope::Universe),
            (Some(200), Scope::Site),
            (Some(253), Scope::Link),
            (Some(254), Scope::Host),
            (Some(255), Scope::Nowhere),
        ] {
            assert_eq!(route_scope(n, "10.0.0.0/8").expect("named"), want, "{n:?}");
        }
        let e = route_scope(Some(100), "10.0.0.0/8").expect_err("unnamed");
        assert_eq!(e.code, 2, "{e:?}");
        assert!(e.msg.contains("route 10.0.0.0/8: scope 100"), "{e:?}");
    }
}

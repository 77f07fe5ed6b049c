//! The CNI `sbr` (source-based routing) meta plugin for wasmcni.
//!
//! Behaves like the reference (containernetworking/plugins
//! `plugins/meta/sbr`, with upstream's options newer than Debian's 1.1.1:
//! `table`, `gateways`, `addSourceHints`): a chained plugin that makes the
//! container interface's traffic leave by that interface when it comes
//! from the interface's addresses. For each address of `CNI_IFNAME` in the
//! prevResult it adds a rule `from ADDR lookup TABLE` (the first table
//! from 100 no rule or route uses, one per address), a default route
//! through the address's gateway (or the `gateways` entry of its family)
//! in that table, and moves the interface's routes of the main table
//! there (those whose source or gateway the address's subnet holds, and
//! those with neither). With `addSourceHints`, the subnet routes stay in
//! the main table with the address as source hint, and only the others
//! leave it. With `table`, it only adds the rules, to that table. DEL
//! removes the rules whose source is an address of the interface (of
//! `table`'s rules only, when given); the routes go with the interface.
//!
//! Unlike the reference, a failed ADD leaves no rule or moved route
//! behind (wasmcni's journal), two ADDs in one namespace at once (two
//! interfaces of a container) do not choose the same table (it is chosen
//! under the namespace's table lock), DEL succeeds when the namespace is gone
//! and reads only `table` (on its own: unusable, the rules of every table
//! go, as the reference 1.1.1's DEL always does), and CHECK verifies the rules are there (the reference's CHECK does
//! nothing).

use std::net::IpAddr;

use guest_sdk::cni::{CniResult, Error, IpConfig};
use guest_sdk::net::{from_ip, prefix, to_ip, IpFamily, Netns, Route, Rule, Scope};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::iface;
use serde::Deserialize;

/// The first table ID tried.
const FIRST_TABLE: u32 = 100;
/// `RT_TABLE_MAIN`.
const MAIN: u32 = 254;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    gateways: Vec<String>,
    #[serde(default)]
    add_source_hints: bool,
}

/// What DEL reads of the config: `table`, on its own
/// ([`plugin_common::lenient`]). Unusable (`-1`, a string), DEL tidies
/// the rules of every table, as the reference 1.1.1 (which has no
/// `table`) always does.
#[derive(Debug, Default, Deserialize)]
struct DelConf {
    #[serde(default, deserialize_with = "plugin_common::lenient::field")]
    table: Option<u32>,
}

/// The prevResult's addresses of `ifname`: those of an interface of that
/// name, and those naming no interface (or one out of range).
fn ip_configs(ifname: &str, prev: &CniResult) -> Result<Vec<IpConfig>, Error> {
    if prev.ips.is_empty() {
        return Err(Error::internal(format!(
            "No IP addresses supplied on interface: {ifname}"
        )));
    }
    Ok(prev
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            Some(i) if i < prev.interfaces.len() => prev.interfaces[i].name == ifname,
            _ => true,
        })
        .cloned()
        .collect())
}

/// The `gateways` option: at most one address of each family.
fn static_gateways(list: &[String]) -> Result<(Option<IpAddr>, Option<IpAddr>), Error> {
    if list.len() > 2 {
        return Err(Error::internal(
            "gateways list cannot contain more than 2 entries (one IPv4, one IPv6)",
        ));
    }
    let (mut v4, mut v6): (Option<IpAddr>, Option<IpAddr>) = (None, None);
    for g in list {
        let ip: IpAddr = g
            .parse()
            .map_err(|_| Error::internal(format!("invalid static gateway IP address: {g}")))?;
        let slot = if ip.is_ipv4() { &mut v4 } else { &mut v6 };
        if let Some(old) = slot {
            return Err(Error::internal(format!(
                "gateways list contains multiple {} addresses: {old} and {g}",
                if ip.is_ipv4() { "IPv4" } else { "IPv6" }
            )));
        }
        *slot = Some(ip);
    }
    Ok((v4, v6))
}

/// The rule that sends traffic from `ip` to `table`.
fn source_rule(ip: IpAddr, table: u32) -> Rule {
    Rule {
        family: if ip.is_ipv4() {
            IpFamily::Ipv4
        } else {
            IpFamily::Ipv6
        },
        priority: None,
        source: Some(prefix(ip, if ip.is_ipv4() { 32 } else { 128 })),
        destination: None,
        table,
    }
}

/// The first table from `from` on that no rule and no route uses.
fn next_free(from: u32, used: &[u32]) -> u32 {
    let mut t = from;
    while used.contains(&t) {
        t += 1;
    }
    t
}

fn host(e: guest_sdk::net::HostError, what: &str) -> Error {
    Error::internal(format!("{what}: {e}"))
}

struct Sbr;

impl Sbr {
    fn do_routes(ns: &Netns, ifname: &str, ips: &[IpConfig], conf: &Conf) -> Result<(), Error> {
        // The tables are chosen from what is in use: another ADD in this
        // namespace (another interface of the container) must not choose
        // them too before this one's rules and routes are there.
        ns.lock_tables()
            .map_err(|e| host(e, "Failed to lock the routing tables"))?;
        let rules = ns
            .rules(None)
            .map_err(|e| host(e, "Failed to list all rules"))?;
        let all = ns
            .routes(None, None)
            .map_err(|e| host(e, "Failed to list all routes"))?;
        let mut used: Vec<u32> = rules.iter().map(|r| r.table).collect();
        used.extend(all.iter().filter_map(|r| r.route.table));
        let mut table = next_free(FIRST_TABLE, &used);
        let link = ns
            .link(ifname)
            .map_err(|e| host(e, &format!("Cannot find network interface {ifname}")))?;
        let routes: Vec<Route> = all
            .iter()
            .map(|r| r.route)
            .filter(|r| r.link_index == Some(link.index) && r.table.unwrap_or(MAIN) == MAIN)
            .collect();
        let (gw4, gw6) = static_gateways(&conf.gateways)?;
        for ip in ips {
            let addr = ip.address.addr();
            ns.add_rule(&source_rule(addr, table))
                .map_err(|e| host(e, "Failed to add rule"))?;
            let gateway = if addr.is_ipv4() { gw4 } else { gw6 }.or(ip.gateway);
            if let Some(gw) = gateway {
                let any = if addr.is_ipv4() {
                    prefix(IpAddr::from([0u8; 4]), 0)
                } else {
                    prefix(IpAddr::from([0u16; 8]), 0)
                };
                let r = Route {
                    link_index: Some(link.index),
                    table: Some(table),
                    ..Route::to(any)
                };
                let r = Route {
                    gateway: Some(from_ip(gw)),
                    scope: Some(Scope::Universe),
                    ..r
                };
                ns.add_route(&r).map_err(|e| {
                    Error::internal(format!("Failed to add default route to {gw}: {e}"))
                })?;
            }
            for r in &routes {
                let src = r.source.map(|a| to_ip(&a));
                let gw = r.gateway.map(|a| to_ip(&a));
                let ours = src.is_some_and(|s| ip.address.contains(s))
                    || gw.is_some_and(|g| ip.address.contains(g))
                    || (src.is_none() && gw.is_none());
                if ours {
                    let moved = Route {
                        table: Some(table),
                        on_link: false,
                        ..*r
                    };
                    ns.replace_route(&moved)
                        .map_err(|e| host(e, "Failed to readd route"))?;
                }
            }
            used.push(table);
            table = next_free(table + 1, &used);
        }
        if conf.add_source_hints {
            for ip in ips {
                let subnet = Route {
                    link_index: Some(link.index),
                    table: Some(MAIN),
                    scope: Some(Scope::Link),
                    source: Some(from_ip(ip.address.addr())),
                    ..Route::to(prefix(ip.address.network(), ip.address.prefix_len()))
                };
                // As upstream: a hint that cannot be set is no failure.
                if let Err(e) = ns.replace_route(&subnet) {
                    eprintln!("sbr: source hint for {}: {e}", ip.address);
                }
            }
            for r in routes.iter().filter(|r| r.scope != Some(Scope::Link)) {
                if let Err(e) = ns.delete_route(r) {
                    eprintln!("sbr: deleting a route of the main table: {e}");
                }
            }
        } else {
            for r in &routes {
                ns.delete_route(r)
                    .map_err(|e| host(e, "Failed to delete route"))?;
            }
        }
        Ok(())
    }
}

impl Plugin for Sbr {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let conf: Conf = inv.conf.plugin_config()?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("This plugin must be called as chained plugin"))?;
        let ips = ip_configs(&inv.env.ifname, &prev)?;
        let ns = iface::open_container(inv)?;
        match conf.table {
            Some(t) => {
                for ip in &ips {
                    ns.add_rule(&source_rule(ip.address.addr(), t))
                        .map_err(|e| host(e, "failed to add rule"))?;
                }
            }
            None => Sbr::do_routes(&ns, &inv.env.ifname, &ips, &conf)?,
        }
        Ok(prev)
    }

    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        let conf: DelConf = plugin_common::lenient::decode(inv);
        if inv.env.netns.is_empty() {
            return Ok(());
        }
        let ns = match Netns::container() {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let link = match ns.link(&inv.env.ifname) {
            Ok(l) => l,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(host(e, &format!("Failed to get link {}", inv.env.ifname))),
        };
        let addrs: Vec<IpAddr> = ns
            .addresses(Some(&link), None)
            .map_err(|e| host(e, "Failed to list all addrs"))?
            .iter()
            .map(|a| to_ip(&a.prefix.address))
            .collect();
        let rules = ns
            .rules(None)
            .map_err(|e| host(e, "Failed to list all rules to tidy"))?;
        let mut last = None;
        for r in rules {
            if conf.table.is_some_and(|t| t != r.table) {
                continue;
            }
            let Some(src) = r.source else { continue };
            if addrs.contains(&to_ip(&src.address)) {
                if let Err(e) = ns.delete_rule(&r) {
                    last = Some(Error::internal(format!("Failed to delete rule {e}")));
                }
            }
        }
        match last {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let conf: Conf = inv.conf.plugin_config()?;
        let Some(prev) = inv.prev_result()? else {
            return Err(Error::internal(
                "This plugin must be called as chained plugin",
            ));
        };
        let ips = ip_configs(&inv.env.ifname, &prev)?;
        let ns = iface::open_container(inv)?;
        let rules = ns
            .rules(None)
            .map_err(|e| host(e, "Failed to list all rules"))?;
        for ip in &ips {
            let want = source_rule(ip.address.addr(), conf.table.unwrap_or(0)).source;
            let found = rules
                .iter()
                .any(|r| r.source == want && conf.table.is_none_or(|t| t == r.table));
            if !found {
                return Err(Error::internal(format!(
                    "sbr: no rule sends traffic from {} to its table",
                    ip.address.addr()
                )));
            }
        }
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `sbr`).
pub fn main() -> ! {
    skel::run(Sbr, "CNI sbr plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_skip_used_ones() {
        assert_eq!(next_free(100, &[254, 255]), 100);
        assert_eq!(next_free(100, &[100, 101, 103]), 102);
    }

    #[test]
    fn static_gateways_one_per_family() {
        let s = |v: &[&str]| static_gateways(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(
            s(&["10.0.0.1", "fd00::1"]).expect("ok"),
            (
                Some("10.0.0.1".parse().expect("ip")),
                Some("fd00::1".parse().expect("ip"))
            )
        );
        assert!(s(&["10.0.0.1", "10.0.0.2"])
            .unwrap_err()
            .msg
            .contains("multiple IPv4"));
        assert!(s(&["x"])
            .unwrap_err()
            .msg
            .contains("invalid static gateway IP address: x"));
        assert!(s(&["1.1.1.1", "::1", "2.2.2.2"]).is_err());
    }

    #[test]
    fn del_reads_table_on_its_own() {
        use guest_sdk::cni::Command;
        use plugin_common::testing::{invocation, reach, Reached};
        use serde_json::json;
        for (extra, table) in [
            (json!({"table": 7, "gateways": "x"}), Some(7)),
            (json!({"table": -1}), None),
            (json!({"table": "100", "addSourceHints": "yes"}), None),
            (json!({"table": null}), None),
        ] {
            let mut c = json!({"type": "sbr"});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let del = invocation(Command::Del, ";", c.clone());
            assert_eq!(
                plugin_common::lenient::decode::<DelConf>(&del).table,
                table,
                "{extra}"
            );
            assert_eq!(
                reach(|| Sbr.del(&del)),
                Reached::HostCall("netns.container".into()),
                "{extra}"
            );
            if table.is_none() && !extra["table"].is_null() {
                let add = invocation(Command::Add, "", c);
                assert!(add.conf.plugin_config::<Conf>().is_err(), "{extra}");
            }
        }
    }
}

/// docs/reference-options.md's `sbr` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check("sbr", &[("", keys_of::<Conf>())]);
    }
}

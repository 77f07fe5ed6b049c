//! The CNI `vrf` meta plugin for wasmcni.
//!
//! Behaves like the reference (containernetworking/plugins
//! `plugins/meta/vrf`): a chained plugin that puts the container interface
//! into a VRF named `vrfname` in the container's namespace, creating the
//! VRF (bound to `table`, or to the first table no VRF of the namespace
//! uses, from 1) if it does not exist, and refusing a VRF of that name
//! bound to another table. Enslaving drops the interface's IPv6 addresses:
//! the global ones are put back. As upstream (newer than Debian's 1.1.1),
//! the interface's gateway routes (scope universe) follow it into the
//! VRF's table. DEL frees the interface and deletes the VRF when no
//! interface is left in it; a VRF, interface or namespace that is gone is
//! no error.
//!
//! Unlike the reference, a failed ADD leaves no VRF and no change to the
//! interface (wasmcni's journal), two ADDs in one namespace at once do
//! not bind their new VRFs to the same free table (it is chosen under the
//! namespace's table lock), and CHECK verifies the interface is in the
//! VRF (the reference's CHECK ignores what it finds).

use std::time::Duration;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::{
    AddressOptions, HostError, IpFamily, LinkInfo, LinkOptions, Netns, Route, Scope,
};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::iface;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Conf {
    #[serde(default)]
    vrfname: String,
    #[serde(default)]
    table: u32,
}

/// What DEL reads of the config: `vrfname`, on its own
/// ([`plugin_common::lenient`]); the table matters to ADD alone.
#[derive(Debug, Default, Deserialize)]
struct DelConf {
    #[serde(default, deserialize_with = "plugin_common::lenient::field")]
    vrfname: Option<String>,
}

fn conf(inv: &Invocation) -> Result<Conf, Error> {
    let c: Conf = inv.conf.plugin_config()?;
    if c.vrfname.is_empty() {
        return Err(Error::internal(
            "configuration is expected to have a valid vrf name",
        ));
    }
    Ok(c)
}

/// The VRF named `name`, if there is one (an error if the name is taken
/// by another kind of link).
fn find_vrf(ns: &Netns, name: &str) -> Result<Option<LinkInfo>, Error> {
    match ns.link(name) {
        Ok(l) if l.kind.as_deref() == Some("vrf") => Ok(Some(l)),
        Ok(_) => Err(Error::internal(format!("Netlink {name} is not a VRF"))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether `name` can name a link (the kernel's `dev_valid_name`).
fn valid_link_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.contains(['/', ':'])
        && !name.chars().any(char::is_whitespace)
}

/// The first table from 1 on that no VRF of the namespace is bound to.
fn free_table(links: &[LinkInfo]) -> u32 {
    let taken: Vec<u32> = links.iter().filter_map(|l| l.vrf_table).collect();
    (1..).find(|t| !taken.contains(t)).unwrap_or(1)
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("cmdAdd failed: {e}"))
}

/// Replaces `r`, retrying a little while the kernel has not yet made the
/// connected route the gateway needs (an IPv6 address just put back).
fn replace_retrying(ns: &Netns, r: &Route) -> Result<(), HostError> {
    let mut wait = Duration::from_millis(10);
    for _ in 0..7 {
        match ns.replace_route(r) {
            Err(e) if e.code == guest_sdk::net::ErrorCode::Unreachable => {
                std::thread::sleep(wait);
                wait *= 2;
            }
            other => return other,
        }
    }
    ns.replace_route(r)
}

struct Vrf;

impl Plugin for Vrf {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let c = conf(inv)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("missing prevResult from earlier plugin"))?;
        let ns = iface::open_container(inv)?;
        let vrf = match find_vrf(&ns, &c.vrfname).map_err(|e| failed(e.msg))? {
            Some(v) => {
                if c.table != 0 && v.vrf_table != Some(c.table) {
                    return Err(failed(format!(
                        "VRF {} already exist with different routing table {}",
                        c.vrfname,
                        v.vrf_table.unwrap_or(0)
                    )));
                }
                v
            }
            None => {
                let table = if c.table == 0 {
                    // Chosen from the VRFs there are: another ADD in this
                    // namespace must not choose it too before this VRF is
                    // made.
                    ns.lock_tables().map_err(failed)?;
                    free_table(&ns.links().map_err(failed)?)
                } else {
                    c.table
                };
                // Queue length 0, as the reference's netlink library
                // makes it.
                let options = LinkOptions {
                    txqlen: Some(0),
                    ..LinkOptions::default()
                };
                let index = ns
                    .create_vrf(&c.vrfname, table, &options)
                    .map_err(|e| failed(format!("could not add VRF {}: {e}", c.vrfname)))?;
                ns.set_up(index, true).map_err(|e| {
                    failed(format!("could not set link up for VRF {}: {e}", c.vrfname))
                })?;
                ns.link_by_index(index).map_err(failed)?
            }
        };
        let ifname = &inv.env.ifname;
        let link = ns
            .link(ifname)
            .map_err(|_| failed(format!("could not get link by name {ifname}")))?;
        if let Some(m) = link.master {
            let name = ns.link_by_index(m).map(|l| l.name).unwrap_or_default();
            return Err(failed(format!(
                "interface {ifname} has already a master set: {name}"
            )));
        }
        let before: Vec<_> = ns
            .addresses(Some(&link), Some(IpFamily::Ipv6))
            .map_err(failed)?
            .into_iter()
            .filter(|a| a.scope == Scope::Universe)
            .collect();
        let table = vrf.vrf_table.unwrap_or(0);
        let routes: Vec<Route> = ns
            .routes(None, None)
            .map_err(failed)?
            .into_iter()
            .map(|r| r.route)
            .filter(|r| {
                r.link_index == Some(link.index)
                    && r.scope == Some(Scope::Universe)
                    && r.table.unwrap_or(254) == 254
            })
            .collect();
        ns.set_master(link.index, Some(vrf.index)).map_err(|e| {
            failed(format!(
                "could not set vrf {} as master of {ifname}: {e}",
                c.vrfname
            ))
        })?;
        let after = ns
            .addresses(Some(&link), Some(IpFamily::Ipv6))
            .map_err(failed)?;
        for a in before {
            if after.iter().any(|x| x.prefix == a.prefix) {
                continue;
            }
            ns.add_address(
                link.index,
                a.prefix,
                // With the flags the bridge gave it (as the reference
                // puts it back: duplicate address detection again).
                AddressOptions::default(),
            )
            .map_err(|e| {
                failed(format!(
                    "could not restore address {} to {ifname} @ {}: {e}",
                    a.prefix, c.vrfname
                ))
            })?;
        }
        for r in routes {
            let moved = Route {
                table: Some(table),
                ..r
            };
            replace_retrying(&ns, &moved)
                .map_err(|e| failed(format!("could not add route: {e}")))?;
        }
        Ok(prev)
    }

    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        // No usable VRF name: no ADD of this config made anything, and
        // failing would stop the runtime's DEL of the chain before the
        // plugins that did (the reference fails, and the bridge's address
        // leaks). A `table` ADD refuses does not matter here.
        let c: DelConf = plugin_common::lenient::decode(inv);
        let Some(vrfname) = c.vrfname.filter(|n| !n.is_empty()) else {
            return Ok(());
        };
        if inv.env.netns.is_empty() {
            return Ok(());
        }
        let ns = match Netns::container() {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // A name no link can have (`.`, `a/b`): no ADD made a VRF of it.
        let vrf = match find_vrf(&ns, &vrfname) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(_) if !valid_link_name(&vrfname) => return Ok(()),
            Err(e) => return Err(e),
        };
        let ifname = &inv.env.ifname;
        match ns.link(ifname) {
            Ok(l) => ns.set_master(l.index, None).map_err(|e| {
                Error::internal(format!("resetMaster: could reset master to {ifname}: {e}"))
            })?,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        let left = ns.links()?.iter().any(|l| l.master == Some(vrf.index));
        if !left {
            ns.delete_link(vrf.index)?;
        }
        Ok(())
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let c = conf(inv)?;
        inv.prev_result()?
            .ok_or_else(|| Error::internal("missing prevResult from earlier plugin"))?;
        let ns = iface::open_container(inv)?;
        let vrf = find_vrf(&ns, &c.vrfname)?
            .ok_or_else(|| Error::internal(format!("VRF {} not found", c.vrfname)))?;
        let in_vrf = ns
            .link(&inv.env.ifname)
            .is_ok_and(|l| l.master == Some(vrf.index));
        if !in_vrf {
            return Err(Error::internal(format!(
                "Failed to find {} associated to vrf {}",
                inv.env.ifname, c.vrfname
            )));
        }
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `vrf`).
pub fn main() -> ! {
    skel::run(Vrf, "CNI vrf plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vrf_name_is_required() {
        let conf = guest_sdk::cni::NetConf::from_value(serde_json::json!({
            "cniVersion": "1.0.0", "name": "n", "type": "vrf"
        }))
        .expect("conf");
        let inv = Invocation {
            env: guest_sdk::cni::Env::from_lookup(|k| match k {
                "CNI_COMMAND" => Some("VERSION".into()),
                _ => None,
            })
            .expect("env"),
            conf,
            stdin: Vec::new(),
        };
        assert_eq!(
            conf_of(&inv),
            Err("configuration is expected to have a valid vrf name".to_owned())
        );
    }

    fn conf_of(inv: &Invocation) -> Result<u32, String> {
        conf(inv).map(|c| c.table).map_err(|e| e.msg)
    }

    #[test]
    fn link_names() {
        for ok in ["red", "vrf-1.2", "fifteen-chars-x"] {
            assert!(valid_link_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx"] {
            assert!(!valid_link_name(bad), "{bad}");
        }
    }

    #[test]
    fn del_reads_the_vrf_name_on_its_own() {
        use guest_sdk::cni::Command;
        use plugin_common::testing::{invocation, reach, Reached};
        use serde_json::json;
        for (extra, reached) in [
            (
                json!({"vrfname": "red", "table": -1}),
                Some("netns.container"),
            ),
            (
                json!({"vrfname": "red", "table": "x"}),
                Some("netns.container"),
            ),
            (json!({"vrfname": "a/b"}), Some("netns.container")),
            (json!({}), None),
            (json!({"vrfname": 5}), None),
            (json!({"vrfname": ""}), None),
        ] {
            let mut c = json!({"type": "vrf"});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let add = invocation(Command::Add, "", c.clone());
            if extra["vrfname"] != "a/b" {
                assert!(conf(&add).is_err(), "{extra}: ADD accepts it");
            }
            let del = invocation(Command::Del, "", c);
            let want = match reached {
                Some(call) => Reached::HostCall(call.into()),
                None => Reached::Returned(Ok(())),
            };
            assert_eq!(reach(|| Vrf.del(&del)), want, "{extra}");
        }
    }
}

/// docs/reference-options.md's `vrf` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check("vrf", &[("", keys_of::<Conf>())]);
    }
}

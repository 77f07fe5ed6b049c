//! The CNI `ipvlan` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/ipvlan`, 1.1.1): an ipvlan named `CNI_IFNAME` on `master`,
//! born in the container, in `mode` (`l2` by default, `l3`, `l3s`), with
//! `mtu`. Without `master`, the master is the node's default-route link, or,
//! when chained, the single named interface of `prevResult`. The addresses
//! come from the IPAM plugin, or, chained without an IPAM section, from
//! `prevResult`. `linkInContainer` (added upstream after 1.1.1) takes the
//! master from the container's namespace.
//!
//! Unlike the reference, DEL reads no master and no option (only the
//! IPAM section): a config ADD refuses, or a master that is gone, does not
//! stop it. A failed ADD leaves nothing behind (wasmcni's
//! journal), GC and STATUS are forwarded to the IPAM plugin, and CHECK
//! cannot compare the ipvlan mode (the link interface does not report it).

use guest_sdk::cni::{CniResult, Command, Error};
use guest_sdk::net::{IpvlanMode, LinkOptions};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::stacked::{self, Kind};
use plugin_common::{iface, ipam};
use serde::Deserialize;

/// What ipvlan reads from the network config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    /// The master link's name; empty: see the module doc.
    #[serde(default)]
    master: String,
    /// `l2` (also empty), `l3` or `l3s`.
    #[serde(default)]
    mode: String,
    /// MTU of the ipvlan; ≤ 0: the kernel's default (the master's).
    #[serde(default)]
    mtu: i64,
    /// The master is in the container's namespace.
    #[serde(default)]
    link_in_container: bool,
}

impl Conf {
    /// As the reference's `loadConf`: for ADD and DEL the master defaults
    /// to the prevResult's single interface or the default route's link.
    fn load(inv: &Invocation, for_check: bool) -> Result<(Conf, Option<CniResult>), Error> {
        let mut c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        if for_check {
            return Ok((c, None));
        }
        let prev = inv
            .prev_result()
            .map_err(|e| Error::internal(format!("could not parse prevResult: {}", e.msg)))?;
        if c.master.is_empty() {
            match &prev {
                None => {
                    let ns = stacked::master_ns(inv, c.link_in_container)?;
                    c.master = stacked::default_route_link(&ns)?;
                }
                Some(r) if r.interfaces.len() == 1 && !r.interfaces[0].name.is_empty() => {
                    c.master = r.interfaces[0].name.clone();
                }
                Some(_) => {
                    return Err(Error::internal(
                        "chained master failure. PrevResult lacks a single named interface",
                    ))
                }
            }
        }
        Ok((c, prev))
    }
}

/// The mode named in the config, as the reference's `modeFromString`.
fn mode(s: &str) -> Result<IpvlanMode, Error> {
    match s {
        "" | "l2" => Ok(IpvlanMode::L2),
        "l3" => Ok(IpvlanMode::L3),
        "l3s" => Ok(IpvlanMode::L3s),
        _ => Err(Error::internal(format!("unknown ipvlan mode: {s:?}"))),
    }
}

fn lookup_master(
    inv: &Invocation,
    c: &Conf,
) -> Result<(guest_sdk::net::Netns, guest_sdk::net::LinkInfo), Error> {
    let ns = stacked::master_ns(inv, c.link_in_container)?;
    let m = ns.link(&c.master).map_err(|e| {
        let why = if e.is_not_found() {
            "Link not found".to_owned()
        } else {
            e.to_string()
        };
        Error::internal(format!("failed to lookup master {:?}: {why}", c.master))
    })?;
    Ok((ns, m))
}

struct Ipvlan;

impl Plugin for Ipvlan {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let (c, prev) = Conf::load(inv, false)?;
        let container = iface::open_container(inv)?;
        let mode = mode(&c.mode)?;
        let (master_ns, master) = lookup_master(inv, &c)?;
        let options = LinkOptions {
            mtu: u32::try_from(c.mtu).ok().filter(|m| *m > 0),
            mac: None,
            // The reference asks for a transmit queue length of 0.
            txqlen: Some(0),
        };
        let entry = stacked::create(
            inv,
            &container,
            &master_ns,
            &master,
            Kind::Ipvlan(mode),
            &options,
        )?;
        let chained = prev.filter(|p| ipam::plugin_type(inv).is_empty() && !p.ips.is_empty());
        let mut result = match chained {
            Some(p) => p,
            None => {
                let r = ipam::add(inv)?;
                if r.ips.is_empty() {
                    return Err(Error::internal("IPAM plugin returned missing IP config"));
                }
                r
            }
        };
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        result.interfaces = vec![entry];
        let ifname = &inv.env.ifname;
        stacked::arp_notify(&container, ifname);
        iface::configure(&container, ifname, &result)?;
        result.dns = inv.conf.dns.clone().unwrap_or_default();
        Ok(result)
    }

    /// Reads nothing of the config but the IPAM section: the master (and
    /// the prevResult it may come from) and the mode matter only to ADD.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Del)?;
        iface::delete_link(inv)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let (c, _) = Conf::load(inv, true)?;
        let container = iface::open_container(inv)?;
        ipam::exec_if_configured(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        // As the reference: CHECK does not default the master.
        if c.master.is_empty() {
            return Err(Error::internal(
                "failed to lookup master \"\": Link not found",
            ));
        }
        lookup_master(inv, &c)?;
        stacked::check_interface(inv, &container, &prev, "ipvlan")?;
        Ok(())
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Gc)?;
        Ok(())
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Status)?;
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `ipvlan`).
pub fn main() -> ! {
    skel::run(Ipvlan, "CNI ipvlan plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    #[test]
    fn del_reads_neither_master_nor_options() {
        // Chained without a master, after a prevResult of two interfaces:
        // ADD cannot pick a master, DEL needs none.
        let prev = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "a"}, {"name": "b"}],
                          "ips": [{"address": "10.1.0.5/24"}]});
        for extra in [
            json!({"linkInContainer": null, "master": "nosuch0", "mode": "l4"}),
            json!({"linkInContainer": 1, "mtu": "big"}),
            json!({"master": null, "prevResult": prev}),
        ] {
            let mut c = json!({"type": "ipvlan", "master": "uplink",
                               "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let inv = invocation(Command::Del, ";", c.clone());
            assert_eq!(
                reach(|| Ipvlan.del(&inv)),
                Reached::HostCall("delegate.run".into()),
                "{extra}"
            );
            c["ipam"] = json!({});
            let inv = invocation(Command::Del, "", c);
            assert_eq!(
                reach(|| Ipvlan.del(&inv)),
                Reached::HostCall("netns.container".into()),
                "{extra}"
            );
        }
    }
}

/// docs/reference-options.md's `ipvlan` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check("ipvlan", &[("", keys_of::<Conf>())]);
    }
}

//! The CNI `macvlan` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/macvlan`, 1.1.1): a macvlan named `CNI_IFNAME` on
//! `master` (default: the link of the node's default route), born in the
//! container, in `mode` (`bridge` by default, `private`, `vepa`,
//! `passthru`), with `mtu` (0: the master's; at most the master's) and
//! `mac` (also from `CNI_ARGS` `MAC=` and `runtimeConfig.mac`, which wins).
//! With an IPAM section, its addresses and routes go on the link; without
//! one the link is only brought up (L2) and the result lists the interface
//! only. From upstream's later versions: `linkInContainer` takes the
//! master from the container's namespace, and `bcqueuelen` (not 0) sets
//! the broadcast queue length the macvlan asks of its master.
//!
//! Unlike the reference, DEL reads no master and no option (only the
//! IPAM section): a config ADD refuses, or a master that is gone, does not
//! stop it. A failed ADD leaves nothing behind (wasmcni's
//! journal removes the link and releases the reservation), GC and STATUS
//! are forwarded to the IPAM plugin, and CHECK cannot compare the macvlan
//! mode (the link interface does not report it). Under the default policy
//! a node link is a master only: `passthru` on a node link is refused
//! (it changes the master).

use guest_sdk::cni::{CniResult, Command, Error};
use guest_sdk::net::{LinkOptions, MacvlanMode, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::stacked::{self, Kind};
use plugin_common::{iface, ipam, mac};
use serde::Deserialize;

/// `runtimeConfig` as macvlan reads it.
#[derive(Debug, Clone, Default, Deserialize)]
struct RuntimeConfig {
    #[serde(default)]
    mac: String,
}

/// What macvlan reads from the network config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    /// The master link's name; empty: the default route's link.
    #[serde(default)]
    master: String,
    /// `bridge` (also empty), `private`, `vepa` or `passthru`.
    #[serde(default)]
    mode: String,
    /// MTU of the macvlan, 0..=the master's.
    #[serde(default)]
    mtu: i64,
    /// The macvlan's MAC address.
    #[serde(default)]
    mac: String,
    /// The master is in the container's namespace.
    #[serde(default)]
    link_in_container: bool,
    /// The broadcast queue length the macvlan asks of its master
    /// (upstream v1.6+; 0: the kernel's default).
    #[serde(default)]
    bcqueuelen: u32,
    #[serde(default)]
    runtime_config: RuntimeConfig,
}

/// The loaded config with its master resolved.
struct Loaded {
    conf: Conf,
    master_ns: Netns,
    master: guest_sdk::net::LinkInfo,
    mtu: Option<u32>,
}

impl Conf {
    /// As the reference's `loadConf`: the master (default: the default
    /// route's link) must exist and `mtu` fit it; `MAC` from `CNI_ARGS`,
    /// then `runtimeConfig.mac`, override `mac`.
    fn load(inv: &Invocation) -> Result<Loaded, Error> {
        let mut c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        let master_ns = stacked::master_ns(inv, c.link_in_container)?;
        if c.master.is_empty() {
            c.master = stacked::default_route_link(&master_ns)?;
        }
        let master = stacked::lookup_master(&master_ns, &c.master)?;
        let mtu = stacked::check_mtu(c.mtu, &master)?;
        c.mac = mac::requested(inv, &c.mac, &c.runtime_config.mac)?;
        Ok(Loaded {
            conf: c,
            master_ns,
            master,
            mtu,
        })
    }
}

/// The mode named in the config, as the reference's `modeFromString`.
fn mode(s: &str) -> Result<MacvlanMode, Error> {
    match s {
        "" | "bridge" => Ok(MacvlanMode::Bridge),
        "private" => Ok(MacvlanMode::Private),
        "vepa" => Ok(MacvlanMode::Vepa),
        "passthru" => Ok(MacvlanMode::Passthru),
        _ => Err(Error::internal(format!("unknown macvlan mode: {s:?}"))),
    }
}

fn is_layer3(inv: &Invocation) -> bool {
    !ipam::plugin_type(inv).is_empty()
}

struct Macvlan;

impl Plugin for Macvlan {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let l = Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        let mode = mode(&l.conf.mode)?;
        let mac = if l.conf.mac.is_empty() {
            None
        } else {
            Some(mac::parse(&l.conf.mac).map_err(|e| {
                Error::internal(format!(
                    "invalid args {} for MAC addr: {}",
                    l.conf.mac, e.msg
                ))
            })?)
        };
        let options = LinkOptions {
            mtu: l.mtu,
            mac,
            // The reference asks for a transmit queue length of 0.
            txqlen: Some(0),
        };
        let entry = stacked::create(
            inv,
            &container,
            &l.master_ns,
            &l.master,
            Kind::Macvlan(mode, Some(l.conf.bcqueuelen).filter(|n| *n > 0)),
            &options,
        )?;
        let ifname = &inv.env.ifname;
        let mut result = CniResult {
            interfaces: vec![entry],
            ..CniResult::default()
        };
        if is_layer3(inv) {
            let r = ipam::add(inv)?;
            if r.ips.is_empty() {
                return Err(Error::internal("IPAM plugin returned missing IP config"));
            }
            result.ips = r.ips;
            result.routes = r.routes;
            for ip in &mut result.ips {
                ip.interface = Some(0);
            }
            stacked::arp_notify(&container, ifname);
            iface::configure(&container, ifname, &result)?;
        } else {
            let link = container.link(ifname).map_err(|e| {
                Error::internal(format!("failed to find interface name {ifname:?}: {e}"))
            })?;
            container
                .set_up(link.index, true)
                .map_err(|e| Error::internal(format!("failed to set {ifname:?} UP: {e}")))?;
        }
        result.dns = inv.conf.dns.clone().unwrap_or_default();
        Ok(result)
    }

    /// Reads nothing of the config but the IPAM section: the master, the
    /// MTU, the MAC and `CNI_ARGS` matter only to ADD (the reference's DEL
    /// fails on a master that is gone, for good).
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        if is_layer3(inv) {
            ipam::exec(inv, Command::Del)?;
        }
        iface::delete_link(inv)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        if is_layer3(inv) {
            ipam::exec(inv, Command::Check)?;
        }
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        stacked::check_interface(inv, &container, &prev, "macvlan")?;
        Ok(())
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        if is_layer3(inv) {
            ipam::exec(inv, Command::Gc)?;
        }
        Ok(())
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        if is_layer3(inv) {
            ipam::exec(inv, Command::Status)?;
        }
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `macvlan`).
pub fn main() -> ! {
    skel::run(Macvlan, "CNI macvlan plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    /// `bcqueuelen` (upstream v1.6+) is read in any case of its key; a
    /// value that is no `uint32` is refused before any host call, as Go's
    /// decoding refuses it; 0 is unset.
    #[test]
    fn bcqueuelen_is_read_as_upstream() {
        let conf = |key: &str, v: serde_json::Value| {
            let c = json!({"type": "macvlan", "master": "eth0", key: v,
                           "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            invocation(Command::Add, "", c)
        };
        for (key, v, want) in [
            ("bcqueuelen", json!(333), 333),
            ("BcQueueLen", json!(333), 333),
            ("bcqueuelen", json!(0), 0),
            ("bcqueuelen", json!(4294967295u64), u32::MAX),
        ] {
            let add = conf(key, v);
            // The master's lookup is the first host call.
            assert!(
                matches!(reach(|| Conf::load(&add).map(drop)), Reached::HostCall(_)),
                "{key}"
            );
            let c: Conf = add.conf.plugin_config().expect(key);
            assert_eq!(c.bcqueuelen, want, "{key}");
        }
        for v in [json!(-1), json!(4294967296u64), json!(1.5), json!("333")] {
            let add = conf("bcqueuelen", v.clone());
            match reach(|| Macvlan.add(&add).map(drop)) {
                Reached::Returned(Err(e)) => {
                    assert!(e.msg.contains("failed to load netconf"), "{v}: {e:?}")
                }
                other => panic!("{v}: {other:?}"),
            }
        }
    }

    #[test]
    fn del_reads_neither_master_nor_options() {
        for (extra, args) in [
            (json!({"linkInContainer": null}), ""),
            (json!({"linkInContainer": "yes", "mtu": "big"}), ""),
            (json!({"master": "nosuch0", "mode": "l2", "mtu": -1}), ""),
            (json!({"mac": "zz"}), "MAC=zz"),
            (json!({}), "FOO=bar"),
            (json!({}), ";"),
        ] {
            let mut c = json!({"type": "macvlan", "master": "uplink",
                               "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let inv = invocation(Command::Del, args, c.clone());
            assert_eq!(
                reach(|| Macvlan.del(&inv)),
                Reached::HostCall("delegate.run".into()),
                "{extra} {args:?}"
            );
            // Without IPAM (L2): on to the link.
            c["ipam"] = json!({});
            let inv = invocation(Command::Del, args, c);
            assert_eq!(
                reach(|| Macvlan.del(&inv)),
                Reached::HostCall("netns.container".into()),
                "{extra} {args:?}"
            );
        }
    }
}

/// docs/reference-options.md's `macvlan` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "macvlan",
            &[
                ("", keys_of::<Conf>()),
                ("runtimeConfig.", keys_of::<RuntimeConfig>()),
            ],
        );
    }
}

//! The CNI `vlan` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/vlan`, 1.1.1): an 802.1Q vlan `vlanId` named `CNI_IFNAME`
//! on `master` (required), born in the container, with `mtu` (0: the
//! master's; at most the master's), carrying the IPAM plugin's addresses
//! and routes. `linkInContainer` (added upstream after 1.1.1) takes the
//! master from the container's namespace.
//!
//! Unlike the reference, DEL reads no master and no option (only the
//! IPAM section): a config ADD refuses, or a master that is gone, does not
//! stop it. A failed ADD leaves nothing behind (wasmcni's
//! journal), and GC and STATUS are forwarded to the IPAM plugin.

use guest_sdk::cni::{CniResult, Command, Error};
use guest_sdk::net::{LinkInfo, LinkOptions, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::stacked::{self, Kind};
use plugin_common::{iface, ipam};
use serde::Deserialize;

/// What vlan reads from the network config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    /// The master link's name (required).
    #[serde(default)]
    master: String,
    /// The VLAN ID, 0..=4094.
    #[serde(default)]
    vlan_id: i64,
    /// MTU of the vlan, 0..=the master's.
    #[serde(default)]
    mtu: i64,
    /// The master is in the container's namespace.
    #[serde(default)]
    link_in_container: bool,
}

/// The loaded config with its master resolved.
struct Loaded {
    conf: Conf,
    master_ns: Netns,
    master: LinkInfo,
    mtu: Option<u32>,
}

impl Conf {
    /// As the reference's `loadConf`: `master` is required, `vlanId` in
    /// range, the master must exist and `mtu` fit it.
    fn load(inv: &Invocation) -> Result<Loaded, Error> {
        let c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        if c.master.is_empty() {
            return Err(Error::internal(
                "\"master\" field is required. It specifies the host interface name to create \
                 the VLAN for.",
            ));
        }
        if c.vlan_id < 0 || c.vlan_id > 4094 {
            return Err(Error::internal(format!(
                "invalid VLAN ID {} (must be between 0 and 4095 inclusive)",
                c.vlan_id
            )));
        }
        let master_ns = stacked::master_ns(inv, c.link_in_container)?;
        let master = stacked::lookup_master(&master_ns, &c.master)?;
        let mtu = stacked::check_mtu(c.mtu, &master)?;
        Ok(Loaded {
            conf: c,
            master_ns,
            master,
            mtu,
        })
    }
}

struct Vlan;

impl Plugin for Vlan {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let l = Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        let options = LinkOptions {
            mtu: l.mtu,
            mac: None,
            // The reference asks for a transmit queue length of 0.
            txqlen: Some(0),
        };
        let id = u16::try_from(l.conf.vlan_id).unwrap_or(0);
        let entry = stacked::create(
            inv,
            &container,
            &l.master_ns,
            &l.master,
            Kind::Vlan(id),
            &options,
        )?;
        let mut result = ipam::add(inv).map_err(|e| {
            Error::new(
                e.code,
                format!("failed to execute IPAM delegate: {}", e.msg),
            )
        })?;
        if result.ips.is_empty() {
            return Err(Error::internal("IPAM plugin returned missing IP config"));
        }
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        result.interfaces = vec![entry];
        let ifname = &inv.env.ifname;
        iface::configure(&container, ifname, &result)?;
        result.dns = inv.conf.dns.clone().unwrap_or_default();
        Ok(result)
    }

    /// Reads nothing of the config but the IPAM section: the master, the
    /// VLAN ID and the MTU matter only to ADD (the reference's DEL fails on
    /// a master that is gone, for good). Without an IPAM plugin (which ADD
    /// requires) there is no address to release.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Del)?;
        iface::delete_link(inv)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let l = Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        ipam::exec(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("vlan: Required prevResult missing"))?;
        let link = stacked::check_interface(inv, &container, &prev, "vlan")?;
        if let Some(mtu) = l.mtu {
            if link.mtu != mtu {
                return Err(Error::internal(format!(
                    "Error: Tuning configured MTU of {} is {mtu}, current value is {}",
                    link.name, link.mtu
                )));
            }
        }
        Ok(())
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Gc)
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec(inv, Command::Status)
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `vlan`).
pub fn main() -> ! {
    skel::run(Vlan, "CNI vlan plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    #[test]
    fn del_reads_neither_master_nor_options() {
        for extra in [
            json!({"vlanId": 5000}),
            json!({"master": ""}),
            json!({"master": "nosuch0", "mtu": -5}),
            json!({"linkInContainer": null, "vlanId": "ten"}),
        ] {
            let mut c = json!({"type": "vlan", "master": "uplink", "vlanId": 10,
                               "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let inv = invocation(Command::Del, ";", c.clone());
            assert_eq!(
                reach(|| Vlan.del(&inv)),
                Reached::HostCall("delegate.run".into()),
                "{extra}"
            );
            // No IPAM plugin (ADD requires one): on to the link.
            c["ipam"] = json!({});
            let inv = invocation(Command::Del, "", c);
            assert_eq!(
                reach(|| Vlan.del(&inv)),
                Reached::HostCall("netns.container".into()),
                "{extra}"
            );
        }
    }
}

/// docs/reference-options.md's `vlan` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check("vlan", &[("", keys_of::<Conf>())]);
    }
}

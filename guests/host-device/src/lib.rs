//! The CNI `host-device` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/host-device`, 1.1.1): moves a device of the node into the
//! container as `CNI_IFNAME`, keeping its original name in the alias, and
//! brings it up; with an IPAM section, configures the IPAM plugin's
//! addresses and routes on it. The device is named by `device`, `hwaddr`,
//! `kernelpath` or `pciBusID` (`runtimeConfig.deviceID` overrides
//! `pciBusID`), the first one set in that order. DEL runs the IPAM DEL and
//! moves the device back.
//!
//! Unlike the reference:
//! - The device comes back exactly as it was before the ADD — name, index,
//!   admin state, MTU, MAC, alias, per-link settings, addresses and routes
//!   (the reference brings it back down, with no addresses or routes, and
//!   with whatever the container did to it): the host recorded how when
//!   the ADD succeeded, and returns it even if this DEL does not.
//! - DEL is idempotent (spec): a namespace or device that is gone is no
//!   error (the reference fails).
//! - A failed ADD leaves the device where it was (wasmcni's journal; the
//!   reference can strand it in the container).
//! - The device moves in under its final name in one step, so a link of
//!   the device's host name in the container does not stop it.
//! - A PCI device bound to a userspace driver (DPDK: `vfio-pci`) has no
//!   network interface to move: refused as not found, where the reference
//!   succeeds without moving anything.

use guest_sdk::cni::{CniResult, Command, Error, Interface};
use guest_sdk::net::{DeviceSelector, ErrorCode, LinkInfo, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::{check, iface, ipam, mac};
use serde::Deserialize;

/// What host-device reads from the network config.
#[derive(Debug, Clone, Default, Deserialize)]
struct Conf {
    #[serde(default)]
    device: String,
    #[serde(default)]
    hwaddr: String,
    #[serde(default)]
    kernelpath: String,
    #[serde(default, rename = "pciBusID")]
    pci_bus_id: String,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<RuntimeConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct RuntimeConfig {
    #[serde(default, rename = "deviceID")]
    device_id: String,
}

/// How the config names the device: the first key set, in the
/// reference's order.
enum Selector {
    Name(String),
    Mac(String),
    KernelPath(String),
    Pci(String),
}

impl Conf {
    fn load(inv: &Invocation) -> Result<Selector, Error> {
        let mut c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        if let Some(id) = c.runtime_config.as_ref().map(|r| &r.device_id) {
            if !id.is_empty() {
                c.pci_bus_id = id.clone();
            }
        }
        Ok(if !c.device.is_empty() {
            Selector::Name(c.device)
        } else if !c.hwaddr.is_empty() {
            Selector::Mac(c.hwaddr)
        } else if !c.kernelpath.is_empty() {
            Selector::KernelPath(c.kernelpath)
        } else if !c.pci_bus_id.is_empty() {
            Selector::Pci(c.pci_bus_id)
        } else {
            return Err(Error::internal(
                "specify either \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\"",
            ));
        })
    }
}

/// The node's device the config names, with the reference's texts.
fn find(host: &Netns, selector: &Selector) -> Result<LinkInfo, Error> {
    let fail = |why: String| Error::internal(format!("failed to find host device: {why}"));
    let not_physical = || fail("failed to find physical interface".into());
    match selector {
        Selector::Name(name) => host.link(name).map_err(|e| {
            if e.is_not_found() {
                fail("Link not found".into())
            } else {
                Error::from(e)
            }
        }),
        Selector::Mac(text) => {
            let want = mac::parse(text)
                .map_err(|e| fail(format!("failed to parse MAC address {text:?}: {}", e.msg)))?;
            let links = host
                .links()
                .map_err(|e| Error::internal(format!("failed to list node links: {e}")))?;
            links
                .into_iter()
                .find(|l| l.mac == want)
                .ok_or_else(not_physical)
        }
        Selector::KernelPath(path) => {
            if !path.starts_with("/sys/devices/") {
                return Err(fail(format!(
                    "kernel device path {path:?} must be absolute and begin with /sys/devices/"
                )));
            }
            match host.find_devices(&DeviceSelector::KernelPath(path.clone())) {
                Ok(links) => links.into_iter().next().ok_or_else(not_physical),
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidArgument) => {
                    Err(fail(format!(
                        "failed to find network devices at {path:?}/net"
                    )))
                }
                Err(e) => Err(e.into()),
            }
        }
        Selector::Pci(address) => {
            match host.find_devices(&DeviceSelector::PciAddress(address.clone())) {
                Ok(links) => links.into_iter().next().ok_or_else(|| {
                    fail(format!(
                        "failed to find device name for pci address {address}"
                    ))
                }),
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidArgument) => {
                    Err(fail(format!("no net directory under pci device {address}")))
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

struct HostDevice;

impl Plugin for HostDevice {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let selector = Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        let host = Netns::host()?;
        let dev = find(&host, &selector)?;
        let ifname = &inv.env.ifname;
        let index = host
            .move_link(dev.index, &container, Some(ifname))
            .map_err(|e| Error::internal(format!("failed to move link {e}")))?;
        container
            .set_alias(index, &dev.name)
            .map_err(|e| Error::internal(format!("failed to set alias to {:?}: {e}", dev.name)))?;
        container
            .set_up(index, true)
            .map_err(|e| Error::internal(format!("failed to set {ifname:?} up: {e}")))?;
        let link = container.link_by_index(index)?;
        let mut result = if ipam::plugin_type(inv).is_empty() {
            CniResult::default()
        } else {
            let mut r = ipam::add(inv)?;
            if r.ips.is_empty() {
                return Err(Error::internal("IPAM plugin returned missing IP config"));
            }
            for ip in &mut r.ips {
                ip.interface = Some(0);
            }
            r
        };
        result.interfaces = vec![Interface {
            mac: mac::format(&link.mac),
            sandbox: inv.env.netns.clone(),
            ..Interface::new(ifname.clone())
        }];
        if !result.ips.is_empty() {
            iface::configure(&container, ifname, &result)?;
        }
        // The config's DNS, not the IPAM plugin's (as the reference 1.1.1).
        result.dns = inv.conf.dns.clone().unwrap_or_default();
        Ok(result)
    }

    /// Reads nothing of the config but the IPAM section: the device is
    /// the container's `CNI_IFNAME`, whatever the config named to find it
    /// (the reference's DEL fails on a config that names none).
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        if inv.env.netns.is_empty() {
            return Ok(());
        }
        ipam::exec_if_configured(inv, Command::Del)?;
        let container = match Netns::container() {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let Ok(link) = container.link(&inv.env.ifname) else {
            return Ok(());
        };
        let host = Netns::host()?;
        // The host returns a device this attachment's ADD took exactly as
        // it was, from its record; without one, nothing moves into the
        // node under a name of the plugin's choosing (host-device's grant
        // has no `names`), so the error stands.
        let back = container.move_link(link.index, &host, None);
        match back {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(Error::internal(format!(
                "failed to move {:?} to host netns: {e}",
                inv.env.ifname
            ))),
        }
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        ipam::exec_if_configured(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        let link = check::any_interface(inv, &container, &prev)?;
        check::addresses_and_routes(&container, &link, &prev)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Gc)
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Status)
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `host-device`).
pub fn main() -> ! {
    skel::run(HostDevice, "CNI host-device plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    #[test]
    fn del_needs_no_device_selector() {
        for extra in [
            json!({}),
            json!({"device": 5}),
            json!({"hwaddr": "zz"}),
            json!({"runtimeConfig": {"deviceID": 7}}),
        ] {
            let mut c = json!({"type": "host-device",
                               "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let add = invocation(Command::Add, "", c.clone());
            let refused = Conf::load(&add).and_then(|s| match s {
                Selector::Mac(m) => mac::parse(&m).map(drop),
                _ => Ok(()),
            });
            assert!(refused.is_err(), "{extra}: ADD accepts it");
            let inv = invocation(Command::Del, ";", c.clone());
            assert_eq!(
                reach(|| HostDevice.del(&inv)),
                Reached::HostCall("delegate.run".into()),
                "{extra}"
            );
            c["ipam"] = json!({});
            let inv = invocation(Command::Del, "", c);
            assert_eq!(
                reach(|| HostDevice.del(&inv)),
                Reached::HostCall("netns.container".into()),
                "{extra}"
            );
        }
    }
}

/// docs/reference-options.md's `host-device` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "host-device",
            &[
                ("", keys_of::<Conf>()),
                ("runtimeConfig.", keys_of::<RuntimeConfig>()),
            ],
        );
    }
}

//! The CNI `tap` plugin for wasmcni.
//!
//! Behaves like the upstream plugin (containernetworking/plugins
//! `plugins/main/tap`, added after 1.1.1): a persistent tap named
//! `CNI_IFNAME` in the container (`multiQueue`, `owner`, `group`, `mtu`,
//! `mac` — also from `CNI_ARGS` `MAC=` or `runtimeConfig.mac`, the latter
//! winning), enslaved to the container's bridge `bridge` when given, up;
//! with an IPAM section, the IPAM's addresses and routes on it
//! (`arp_notify` set first, as upstream), without one a layer-2 interface
//! only. The result's DNS is the config's `dns`. CHECK verifies the
//! prevResult's addresses and routes; DEL runs the IPAM DEL (when there is
//! IPAM) and deletes the tap (a missing tap or namespace is no error).
//!
//! Differences: `selinuxContext` needs an exec label for `ip`, which a
//! sandboxed plugin cannot have: refused (code 2). The tap is created in
//! the container directly (no temporary name: wasmcni creates it inside
//! the namespace, so the host's names cannot collide) and without
//! `IFF_VNET_HDR` (upstream sets it only when both `owner` and `group` are
//! given). A failed ADD leaves nothing behind; GC is forwarded to the IPAM.

use guest_sdk::cni::{CniResult, Command, Dns, Error, Interface};
use guest_sdk::net::{LinkOptions, TapOptions};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::{iface, ipam, mac};
use serde::Deserialize;

/// `runtimeConfig` keys tap reads.
#[derive(Debug, Clone, Default, Deserialize)]
struct RuntimeConfig {
    #[serde(default)]
    mac: String,
}

/// What tap reads from the network config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    #[serde(default)]
    multi_queue: bool,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    owner: Option<u32>,
    #[serde(default)]
    group: Option<u32>,
    #[serde(default)]
    selinux_context: String,
    #[serde(default)]
    bridge: String,
    #[serde(default)]
    runtime_config: RuntimeConfig,
    #[serde(default)]
    dns: Option<Dns>,
}

impl Conf {
    fn load(inv: &Invocation) -> Result<Conf, Error> {
        let mut c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        c.mac = mac::requested(inv, &c.mac, &c.runtime_config.mac)?;
        if !c.selinux_context.is_empty() {
            return Err(Error::unsupported_field(
                "tap option \"selinuxContext\" is not supported by wasmcni: it needs an SELinux \
                 exec label, which a sandboxed plugin cannot have",
            ));
        }
        if c.mtu < 0 || c.mtu > i64::from(u32::MAX) {
            return Err(Error::invalid_config(format!(
                "invalid \"mtu\" {}: must be 0 (the kernel's default) or a positive MTU",
                c.mtu
            )));
        }
        Ok(c)
    }

    fn mac(&self) -> Result<Option<Vec<u8>>, Error> {
        if self.mac.is_empty() {
            return Ok(None);
        }
        mac::parse(&self.mac).map(Some).map_err(|e| {
            Error::invalid_config(format!("invalid \"mac\" {:?}: {}", self.mac, e.msg))
        })
    }
}

struct Tap;

impl Plugin for Tap {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let c = Conf::load(inv)?;
        let layer3 = !ipam::plugin_type(inv).is_empty();
        let container = iface::open_container(inv)?;
        let ifname = &inv.env.ifname;
        let options = LinkOptions {
            mtu: u32::try_from(c.mtu).ok().filter(|m| *m > 0),
            mac: c.mac()?,
            txqlen: None,
        };
        let tap = TapOptions {
            multi_queue: c.multi_queue,
            owner: c.owner,
            group: c.group,
        };
        let index = container
            .create_tap(ifname, &options, tap)
            .map_err(|e| Error::internal(format!("failed to create tap: {e}")))?;
        if !c.bridge.is_empty() {
            let bridge = container
                .link(&c.bridge)
                .map_err(|e| Error::internal(format!("failed to get bridge {}: {e}", c.bridge)))?;
            container
                .set_master(index, Some(bridge.index))
                .map_err(|e| {
                    Error::internal(format!(
                        "failed to set tap {ifname} as a port of bridge {}: {e}",
                        c.bridge
                    ))
                })?;
        }
        container
            .set_up(index, true)
            .map_err(|e| Error::internal(format!("failed to set tap interface up: {e}")))?;
        let link = container
            .link_by_index(index)
            .map_err(|e| Error::internal(format!("failed to refetch tap {ifname:?}: {e}")))?;
        let mut result = CniResult {
            interfaces: vec![Interface {
                mac: mac::format(&link.mac),
                sandbox: inv.env.netns.clone(),
                ..Interface::new(ifname.clone())
            }],
            ..CniResult::default()
        };
        if layer3 {
            let r = ipam::add(inv)?;
            if r.ips.is_empty() {
                return Err(Error::internal("IPAM plugin returned missing IP config"));
            }
            result.ips = r.ips;
            result.routes = r.routes;
            for ip in &mut result.ips {
                ip.interface = Some(0);
            }
            // As upstream: best effort, the outcome does not matter.
            let key = iface::link_key("ipv4", ifname, "arp_notify");
            if container
                .sysctl(&key)
                .map(|v| v.trim() != "1")
                .unwrap_or(false)
            {
                let _ = container.set_sysctl(&key, "1");
            }
            iface::configure(&container, ifname, &result)?;
        }
        result.dns = c.dns.unwrap_or_default();
        Ok(result)
    }

    /// Reads nothing of the config but the IPAM section: the MAC, MTU,
    /// owner and `CNI_ARGS` matter only to ADD.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Del)?;
        iface::delete_link(inv)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        let container = iface::open_container(inv)?;
        ipam::exec_if_configured(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        let ifname = &inv.env.ifname;
        if !prev
            .interfaces
            .iter()
            .any(|i| i.name == *ifname && i.sandbox == inv.env.netns)
        {
            return Err(Error::internal(format!(
                "Sandbox in prevResult  doesn't match configured netns: {}",
                inv.env.netns
            )));
        }
        let link = container.link(ifname).map_err(|_| {
            Error::internal(format!(
                "Container Interface name in prevResult: {ifname} not found"
            ))
        })?;
        plugin_common::check::addresses_and_routes(&container, &link, &prev)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        ipam::exec_if_configured(inv, Command::Gc)
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        ipam::exec_if_configured(inv, Command::Status)
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `tap`).
pub fn main() -> ! {
    skel::run(Tap, "CNI tap plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    #[test]
    fn del_reads_no_option() {
        for (extra, args) in [
            (
                json!({"selinuxContext": "system_u:system_r:container_t:s0"}),
                "",
            ),
            (json!({"mtu": -1}), ""),
            (json!({"owner": -1, "multiQueue": "yes"}), ""),
            (json!({}), "FOO=bar"),
            (json!({}), ";"),
        ] {
            let mut c = json!({"type": "tap",
                               "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let add = invocation(Command::Add, args, c.clone());
            assert!(
                Conf::load(&add).is_err(),
                "{extra} {args:?}: ADD accepts it"
            );
            let inv = invocation(Command::Del, args, c.clone());
            assert_eq!(
                reach(|| Tap.del(&inv)),
                Reached::HostCall("delegate.run".into()),
                "{extra} {args:?}"
            );
            c["ipam"] = json!({});
            let inv = invocation(Command::Del, args, c);
            assert_eq!(
                reach(|| Tap.del(&inv)),
                Reached::HostCall("netns.container".into()),
                "{extra} {args:?}"
            );
        }
    }
}

/// docs/reference-options.md's `tap` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "tap",
            &[
                ("", keys_of::<Conf>()),
                ("runtimeConfig.", keys_of::<RuntimeConfig>()),
            ],
        );
    }
}

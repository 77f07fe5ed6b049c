//! The CNI `ptp` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/ptp`, 1.1.1): the IPAM plugin first, then a veth pair with
//! the container's addresses on its container end and, for each address,
//! the gateway as a /32 (/128) on the host end and a host route to the
//! container's address through it; in the container, the routes go through
//! the gateway (the subnet route is replaced by one via the gateway).
//!
//! Unlike the reference, a failed ADD leaves nothing behind (wasmcni's
//! journal removes the veth and releases the reservation). `ipMasq` is the
//! host firewall capability's `masquerade`, tagged with the attachment, so
//! DEL removes it whatever is left of the container and GC removes those
//! of attachments that are gone. DEL reads only the IPAM section and
//! `ipMasq` (on its own: unusable, no masquerade is removed), so a config
//! ADD cannot decode still has its address released.

use std::net::IpAddr;

use guest_sdk::cni::{Cidr, CniResult, Command, Dns, Error, Interface};
use guest_sdk::firewall::RuleKind;
use guest_sdk::net::{from_ip, prefix, AddressOptions, Netns, Route, Scope};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::{iface, ipam, mac, veth};
use serde::Deserialize;

/// What ptp reads from the network config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    /// Masquerade what the container sends outside its subnet.
    #[serde(default)]
    ip_masq: bool,
    /// `iptables` or `nftables` (upstream v1.6+): checked with `ipMasq`
    /// ([`plugin_common::check_ip_masq_backend`]).
    #[serde(default)]
    ip_masq_backend: Option<String>,
    /// MTU of both veth ends; ≤ 0: the kernel's default.
    #[serde(default)]
    mtu: i64,
    /// DNS settings; replace the IPAM's when any is set.
    #[serde(default)]
    dns: Option<Dns>,
}

/// What DEL and GC read of the config: only `ipMasq`, on its own
/// ([`plugin_common::lenient`]); unusable, no masquerade is removed (no
/// ADD installed one), and the address and interface still go.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DelConf {
    #[serde(default, deserialize_with = "plugin_common::lenient::field")]
    ip_masq: Option<bool>,
}

impl DelConf {
    fn load(inv: &Invocation) -> DelConf {
        plugin_common::lenient::decode(inv)
    }

    fn masquerade(&self) -> bool {
        self.ip_masq == Some(true)
    }
}

impl Conf {
    fn load(inv: &Invocation) -> Result<Conf, Error> {
        let c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        Ok(c)
    }

    fn mtu(&self) -> Option<u32> {
        u32::try_from(self.mtu).ok().filter(|m| *m > 0)
    }
}

struct Ptp;

/// A host-length prefix of `ip` (/32 or /128).
fn host_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

impl Plugin for Ptp {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let c = Conf::load(inv)?;
        // Upstream refuses it once the container is set up; here before
        // any host call, so nothing is left behind.
        plugin_common::check_ip_masq_backend(c.ip_masq, c.ip_masq_backend.as_deref())?;
        let mut result = ipam::add(inv)?;
        if result.ips.is_empty() {
            return Err(Error::internal("IPAM plugin returned missing IP config"));
        }
        let host = Netns::host()?;
        plugin_common::enable_forwarding(
            &host,
            result.ips.iter().any(|i| i.address.is_ipv4()),
            result.ips.iter().any(|i| !i.address.is_ipv4()),
        )
        .map_err(|e| Error::internal(format!("Could not enable IP forwarding: {e}")))?;
        let container = Netns::container().map_err(|e| {
            Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns))
        })?;
        let ifname = &inv.env.ifname;
        let v = veth::setup(&container, &host, ifname, c.mtu(), None)?;
        for ip in &mut result.ips {
            ip.interface = Some(1);
        }
        result.interfaces = vec![
            Interface {
                mac: mac::format(&v.host.mac),
                ..Interface::new(v.host.name.clone())
            },
            Interface {
                mac: mac::format(&v.container.mac),
                sandbox: inv.env.netns.clone(),
                ..Interface::new(ifname.clone())
            },
        ];
        iface::configure(&container, ifname, &result)?;
        // In the container: the subnet route goes through the gateway.
        for ip in &result.ips {
            let Some(gw) = ip.gateway else { continue };
            let addr = ip.address;
            let net = Cidr::new(addr.network(), addr.prefix_len())?;
            let subnet = Route {
                destination: prefix(net.addr(), net.prefix_len()),
                gateway: None,
                link_index: Some(v.container.index),
                table: None,
                metric: None,
                scope: None,
                source: None,
                mtu: None,
                on_link: false,
                protocol: None,
            };
            let fail = |e: guest_sdk::net::HostError| {
                Error::internal(format!("failed to delete route {net}: {e}"))
            };
            match container.delete_route(&subnet) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(fail(e)),
            }
            let to_gw = Route {
                destination: prefix(gw, host_prefix(gw)),
                scope: Some(Scope::Link),
                source: Some(from_ip(addr.addr())),
                ..subnet
            };
            container
                .add_route(&to_gw)
                .map_err(|e| Error::internal(format!("failed to add route {gw}: {e}")))?;
            let via_gw = Route {
                destination: prefix(net.addr(), net.prefix_len()),
                gateway: Some(from_ip(gw)),
                scope: Some(Scope::Universe),
                source: Some(from_ip(addr.addr())),
                ..subnet
            };
            container
                .add_route(&via_gw)
                .map_err(|e| Error::internal(format!("failed to add route {net}: {e}")))?;
        }
        // On the node: the gateway on the host end, a route to the
        // container's address through it.
        for ip in &result.ips {
            let gw = ip.gateway.ok_or_else(|| {
                Error::internal("failed to add IP addr to veth: the IPAM result has no gateway")
            })?;
            host.add_address(
                v.host.index,
                prefix(gw, host_prefix(gw)),
                AddressOptions {
                    no_dad: false,
                    no_prefix_route: false,
                    scope: None,
                },
            )
            .map_err(|e| Error::internal(format!("failed to add IP addr ({gw}) to veth: {e}")))?;
            let a = ip.address.addr();
            let route = Route {
                destination: prefix(a, host_prefix(a)),
                gateway: None,
                link_index: Some(v.host.index),
                table: None,
                metric: None,
                scope: Some(Scope::Host),
                source: None,
                mtu: None,
                on_link: false,
                protocol: None,
            };
            match host.add_route(&route) {
                Ok(()) => {}
                Err(e) if e.code == guest_sdk::net::ErrorCode::AlreadyExists => {}
                Err(e) => return Err(Error::internal(format!("failed to add route on host: {e}"))),
            }
        }
        if c.ip_masq {
            plugin_common::ip_masq(&host, &result)?;
        }
        if let Some(dns) = c.dns.filter(|d| !d.is_empty()) {
            result.dns = dns;
        }
        Ok(result)
    }

    /// Reads only [`DelConf`]; without an IPAM plugin (which ADD
    /// requires) there is no address to release.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        let c = DelConf::load(inv);
        ipam::exec_if_configured(inv, Command::Del)?;
        if c.masquerade() {
            Netns::host()?.firewall_remove(&[RuleKind::Masquerade])?;
        }
        if inv.env.netns.is_empty() {
            return Ok(());
        }
        match Netns::container() {
            Ok(ns) => {
                if let Ok(link) = ns.link(&inv.env.ifname) {
                    ns.delete_link(link.index).map_err(|e| {
                        Error::internal(format!("failed to delete {:?}: {e}", inv.env.ifname))
                    })?;
                }
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        let container = Netns::container().map_err(|e| {
            Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns))
        })?;
        ipam::exec(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("ptp: Required prevResult missing"))?;
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
        let link = container.link(&entry.name).map_err(|_| {
            Error::internal(format!(
                "ptp: Container Interface name in prevResult: {} not found",
                entry.name
            ))
        })?;
        if link.kind.as_deref() != Some("veth") {
            return Err(Error::internal(format!(
                "Error: Container interface {} not of type veth/p2p",
                link.name
            )));
        }
        if !entry.mac.is_empty() && entry.mac != mac::format(&link.mac) {
            return Err(Error::internal(format!(
                "ptp: Interface {} Mac {} doesn't match container Mac: {}",
                link.name,
                entry.mac,
                mac::format(&link.mac)
            )));
        }
        plugin_common::check::addresses_and_routes(&container, &link, &prev)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        let c = DelConf::load(inv);
        ipam::exec_if_configured(inv, Command::Gc)?;
        if c.masquerade() {
            Netns::host()?.firewall_collect_garbage(&[RuleKind::Masquerade])?;
        }
        Ok(())
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        Conf::load(inv)?;
        ipam::exec(inv, Command::Status)
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `ptp`).
pub fn main() -> ! {
    skel::run(Ptp, "CNI ptp plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::invocation;
    use serde_json::json;

    fn inv(command: Command, extra: serde_json::Value) -> Invocation {
        let mut c = json!({"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
        for (k, v) in extra.as_object().expect("object") {
            c[k] = v.clone();
        }
        invocation(command, "", c)
    }

    #[test]
    fn del_reads_ip_masq_on_its_own() {
        assert!(
            DelConf::load(&inv(Command::Del, json!({"ipMasq": true, "mtu": "x"}))).masquerade()
        );
        for v in [json!(null), json!("true"), json!(1), json!({})] {
            let extra = json!({"ipMasq": v.clone(), "mtu": "big"});
            // ADD cannot decode the config; DEL removes no masquerade.
            assert!(
                Conf::load(&inv(Command::Add, extra.clone())).is_err(),
                "{v}"
            );
            assert!(
                !DelConf::load(&inv(Command::Del, extra)).masquerade(),
                "{v}"
            );
        }
    }
}

#[cfg(test)]
mod del_tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    /// `ipMasqBackend` (upstream v1.6+): refused by ADD before any host
    /// call (the IPAM delegate included) only with `ipMasq`, with
    /// upstream's message.
    #[test]
    fn ip_masq_backend_as_upstream() {
        let conf = |extra: serde_json::Value| {
            let mut c =
                json!({"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            c
        };
        for (extra, refused) in [
            (json!({"ipMasq": true, "ipMasqBackend": "iptables"}), false),
            (json!({"ipMasq": false, "ipMasqBackend": "bogus"}), false),
            (json!({"ipMasq": true, "ipMasqBackend": "bogus"}), true),
        ] {
            let add = invocation(Command::Add, "", conf(extra.clone()));
            match reach(|| Ptp.add(&add).map(drop)) {
                Reached::Returned(Err(e)) if refused => assert_eq!(
                    (e.code, e.msg.as_str()),
                    (999, "unknown ipmasq backend \"bogus\""),
                    "{extra}"
                ),
                Reached::HostCall(c) if !refused => assert_eq!(c, "delegate.run", "{extra}"),
                other => panic!("{extra}: {other:?}"),
            }
        }
    }

    #[test]
    fn del_reaches_the_ipam_release_whatever_else_the_config_says() {
        for extra in [
            json!({"ipMasq": null}),
            json!({"ipMasq": "yes", "mtu": "big", "dns": {"nameservers": "x"}}),
        ] {
            let mut c =
                json!({"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let inv = invocation(Command::Del, ";", c);
            assert_eq!(
                reach(|| Ptp.del(&inv)),
                Reached::HostCall("delegate.run".into()),
                "{extra}"
            );
        }
        // No IPAM plugin (ADD requires one): on to the interface.
        let inv = invocation(Command::Del, "", json!({"type": "ptp", "ipam": {}}));
        assert_eq!(
            reach(|| Ptp.del(&inv)),
            Reached::HostCall("netns.container".into())
        );
    }
}

/// docs/reference-options.md's `ptp` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check("ptp", &[("", keys_of::<Conf>())]);
    }
}

//! The CNI `firewall` plugin for wasmcni.
//!
//! Behaves like the reference (containernetworking/plugins
//! `plugins/meta/firewall`, 1.1.1) with its iptables backend: a chained
//! plugin that lets the container's traffic through the node's forwarding
//! firewall (from each address of the prevResult: everything; to it:
//! established and related), before an admin chain `CNI-ADMIN` the
//! operator may fill, and with `ingressPolicy: "same-bridge"` isolates the
//! container's bridge (the prevResult's first interface) from other
//! isolated bridges; `"isolated"` (v1.7+) also drops what the bridge
//! forwards from one of its ports to another (where `br_netfilter` passes
//! bridged traffic to IP filtering, as the reference's rule needs too).
//!
//! The rules are the host's (`firewall` capability, kinds `forward` and
//! `isolation`): a mark in wasmcni's own forward chain, accepted by the one
//! static `FORWARD -j WASMCNI-FORWARD` rule the host keeps where an
//! iptables filter table exists (so it works on a node whose FORWARD
//! policy is DROP, as Docker and Kubernetes nodes have), tagged with the
//! attachment. So DEL needs no prevResult and removes everything
//! (idempotent; the reference's DEL without prevResult removes nothing and
//! it never removes its isolation rules), GC removes the rules of
//! attachments that are gone, and a failed ADD leaves nothing.
//!
//! Refused by ADD and CHECK (DEL reads no option), naming the option:
//! `backend: "firewalld"` (code 2: wasmcni
//! has no firewalld backend; the reference picks it when firewalld runs)
//! and an `iptablesAdminChainName` other than `CNI-ADMIN` (code 2: the
//! host's admin chain is fixed), any other `backend` or `ingressPolicy`
//! (code 7).

use std::net::IpAddr;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::firewall::{RuleKind, RuleOptions, Rules};
use guest_sdk::net::{from_ip, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};
use serde::Deserialize;
use serde_json::Value;

/// The admin chain the host's forward rules run first.
const ADMIN_CHAIN: &str = "CNI-ADMIN";

/// The ingress policies of today's reference (`isolated` since v1.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ingress {
    /// Every connection to the container (the default).
    Open,
    /// Only from the container's own bridge.
    SameBridge,
    /// Not even from the container's own bridge: only from outside the
    /// isolated bridges.
    Isolated,
}

impl Ingress {
    /// The policy's name in the config.
    fn name(self) -> &'static str {
        match self {
            Ingress::Open => "open",
            Ingress::SameBridge => "same-bridge",
            Ingress::Isolated => "isolated",
        }
    }
}

/// The parsed config.
#[derive(Debug)]
struct Conf {
    ingress: Ingress,
}

/// The config keys firewall reads, decoded through the SDK (keys as Go
/// matches them; `null` as absent), each value checked in [`parse`].
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfJson {
    #[serde(default)]
    backend: Option<Value>,
    #[serde(default)]
    iptables_admin_chain_name: Option<Value>,
    #[serde(default)]
    ingress_policy: Option<Value>,
}

fn text<'a>(v: &'a Option<Value>, key: &str) -> Result<&'a str, Error> {
    match v {
        None => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(Error::invalid_config(format!(
            "{key} must be a string, got {v}"
        ))),
    }
}

/// Reads and checks the config (ADD and CHECK; DEL reads none of it).
fn parse(inv: &Invocation) -> Result<Conf, Error> {
    let c: ConfJson = inv.conf.plugin_config()?;
    match text(&c.backend, "backend")? {
        "" | "iptables" => {}
        "firewalld" => {
            return Err(Error::unsupported_field(
                "firewall option \"backend\": \"firewalld\" is not supported by wasmcni: its \
                 rules are nftables rules of the host's (leave backend unset or \"iptables\")",
            ))
        }
        other => {
            return Err(Error::invalid_config(format!(
                "backend must be \"iptables\" or \"firewalld\", got {other:?}"
            )))
        }
    }
    match text(&c.iptables_admin_chain_name, "iptablesAdminChainName")? {
        "" | ADMIN_CHAIN => {}
        other => {
            return Err(Error::unsupported_field(format!(
                "firewall option \"iptablesAdminChainName\": {other:?} is not supported by \
                 wasmcni: the host's forward rules run the admin chain {ADMIN_CHAIN:?} only"
            )))
        }
    }
    let ingress = match text(&c.ingress_policy, "ingressPolicy")? {
        "" | "open" => Ingress::Open,
        "same-bridge" => Ingress::SameBridge,
        "isolated" => Ingress::Isolated,
        other => {
            return Err(Error::internal(format!(
                "unknown ingress policy: {other:?}"
            )))
        }
    };
    Ok(Conf { ingress })
}

fn chained(inv: &Invocation) -> Result<CniResult, Error> {
    inv.prev_result()?
        .ok_or_else(|| Error::internal("missing prevResult from earlier plugin"))
}

/// Every address of the prevResult (the reference allows them all).
fn addresses(prev: &CniResult) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in &prev.ips {
        let a = ip.address.addr();
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The bridge of `ingressPolicy` `"same-bridge"` or `"isolated"`: the
/// prevResult's first interface, as the reference takes it.
fn bridge_index(host: &Netns, prev: &CniResult, policy: Ingress) -> Result<u32, Error> {
    let first = prev.interfaces.first().ok_or_else(|| {
        Error::internal(format!(
            "interface needs to be set for ingress policy {:?}, make sure to chain \
             \"firewall\" plugin with \"bridge\"",
            policy.name()
        ))
    })?;
    if first.name.is_empty() {
        return Err(Error::internal("got empty bridge name"));
    }
    let link = host
        .link(&first.name)
        .map_err(|e| Error::internal(format!("bridge {:?}: {e}", first.name)))?;
    Ok(link.index)
}

struct Firewall;

impl Plugin for Firewall {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let conf = parse(inv)?;
        let prev = chained(inv)?;
        let host = Netns::host()?;
        let ips = addresses(&prev);
        if !ips.is_empty() {
            host.firewall_add(&Rules::Forward(ips.into_iter().map(from_ip).collect()))?;
        }
        match conf.ingress {
            Ingress::Open => {}
            Ingress::SameBridge => {
                let bridge = bridge_index(&host, &prev, conf.ingress)?;
                host.firewall_add(&Rules::Isolation(bridge))?;
            }
            Ingress::Isolated => {
                let bridge = bridge_index(&host, &prev, conf.ingress)?;
                host.firewall_add_with(
                    &Rules::Isolation(bridge),
                    RuleOptions {
                        isolate_within_bridge: true,
                    },
                )?;
            }
        }
        Ok(prev)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        parse(inv)?;
        let prev = chained(inv)?;
        let ips = addresses(&prev);
        if ips.is_empty() {
            return Ok(());
        }
        let host = Netns::host()?;
        if !host.firewall_check(&Rules::Forward(ips.iter().copied().map(from_ip).collect()))? {
            let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
            return Err(Error::internal(format!(
                "forward rules for {} are missing or differ",
                list.join(", ")
            )));
        }
        Ok(())
    }

    /// Removes the attachment's rules, with or without prevResult, and
    /// reads nothing of the config: a config ADD refuses (another admin
    /// chain, the firewalld backend, an unknown ingress policy) cannot
    /// stop it. (The reference's DEL fails on an unknown ingress policy,
    /// and on firewalld without a D-Bus.)
    fn del(&self, _inv: &Invocation) -> Result<(), Error> {
        Netns::host()?.firewall_remove(&[RuleKind::Forward, RuleKind::Isolation])?;
        Ok(())
    }

    fn gc(&self, _inv: &Invocation) -> Result<(), Error> {
        Netns::host()?.firewall_collect_garbage(&[RuleKind::Forward, RuleKind::Isolation])?;
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `firewall`).
pub fn main() -> ! {
    skel::run(Firewall, "CNI firewall plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::cni::Command;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    fn inv(command: Command, extra: Value) -> Invocation {
        let mut c = json!({"cniVersion": "1.0.0", "type": "firewall"});
        for (k, v) in extra.as_object().expect("object") {
            c[k] = v.clone();
        }
        invocation(command, "", c)
    }

    #[test]
    fn options_as_go_reads_them() {
        let c = parse(&inv(
            Command::Add,
            json!({"IngressPolicy": "same-bridge", "Backend": null}),
        ))
        .expect("ok");
        assert_eq!(c.ingress, Ingress::SameBridge);
        let c = parse(&inv(Command::Add, json!({"ingressPolicy": "isolated"}))).expect("ok");
        assert_eq!(c.ingress, Ingress::Isolated);
        for (extra, code) in [
            (json!({"backend": "firewalld"}), 2),
            (json!({"iptablesAdminChainName": "MY-ADMIN"}), 2),
            (json!({"backend": "nft"}), 7),
            (json!({"backend": 5}), 7),
            (json!({"ingressPolicy": "closed"}), 999),
        ] {
            let e = parse(&inv(Command::Add, extra.clone())).expect_err(&extra.to_string());
            assert_eq!(e.code, code, "{extra}: {}", e.msg);
        }
    }

    #[test]
    fn del_reads_no_config() {
        for extra in [
            json!({"backend": "firewalld"}),
            json!({"iptablesAdminChainName": "MY-ADMIN"}),
            json!({"ingressPolicy": "closed", "backend": 5}),
        ] {
            assert!(parse(&inv(Command::Add, extra.clone())).is_err(), "{extra}");
            let del = inv(Command::Del, extra.clone());
            assert_eq!(
                reach(|| Firewall.del(&del)),
                Reached::HostCall("netns.host".into()),
                "{extra}"
            );
        }
    }
}

/// docs/reference-options.md's `firewall` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check("firewall", &[("", keys_of::<ConfJson>())]);
    }
}

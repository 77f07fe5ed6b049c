//! The CNI `portmap` plugin for wasmcni.
//!
//! Behaves like the reference (containernetworking/plugins
//! `plugins/meta/portmap`, 1.1.1, with `masqAll` of later versions): a
//! chained plugin that forwards host ports (`runtimeConfig.portMappings`,
//! capability `portMappings`) to the container's first IPv4 and first IPv6
//! address of `CNI_IFNAME` in the prevResult. Options: `snat` (default
//! true: masquerade hairpin and localhost traffic), `masqAll`,
//! `markMasqBit` (0-31, default 13) and `externalSetMarkChain` (mutually
//! exclusive; validated as the reference does, unused: wasmcni's rules
//! need no mark), `conditionsV4` / `conditionsV6` (a subset: `-s`, `-d`,
//! `-i`, `-o` with `!`, or nft's `ip saddr|daddr [!=] CIDR`,
//! `iifname|oifname [!=] NAME`; anything else is refused naming the
//! element).
//!
//! The rules are the host's (`firewall` capability): DNAT only for traffic
//! to a local address of the node, after every iptables nat chain, tagged
//! with the attachment. So, unlike the reference, DEL needs neither
//! `portMappings` nor prevResult nor any option (a config ADD refuses does
//! not stop it) and removes everything (idempotent), GC
//! removes the rules of attachments that are gone, and a failed ADD leaves
//! nothing.

use std::net::IpAddr;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::firewall::{
    Condition, NameMatch, PortMap, PortMapping, PrefixMatch, Protocol, RuleKind, Rules,
};
use guest_sdk::net::{prefix, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};
use serde::Deserialize;
use serde_json::Value;

/// The parsed config.
#[derive(Debug, Default)]
struct Conf {
    mappings: Vec<PortMapping>,
    snat: bool,
    masq_all: bool,
    conditions_v4: Vec<Condition>,
    conditions_v6: Vec<Condition>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_config(msg)
}

/// The config keys portmap reads, decoded through the SDK (keys as Go
/// matches them: exactly, then case-insensitively; `null` as absent),
/// each value checked below with portmap's own messages.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfJson {
    #[serde(default)]
    snat: Option<Value>,
    #[serde(default)]
    masq_all: Option<Value>,
    #[serde(default)]
    mark_masq_bit: Option<Value>,
    #[serde(default)]
    external_set_mark_chain: Option<Value>,
    #[serde(default)]
    backend: Option<Value>,
    #[serde(default, rename = "conditionsV4")]
    conditions_v4: Option<Value>,
    #[serde(default, rename = "conditionsV6")]
    conditions_v6: Option<Value>,
    #[serde(default)]
    runtime_config: Option<RuntimeConfigJson>,
}

#[derive(Debug, Default, Deserialize)]
struct RuntimeConfigJson {
    #[serde(default, rename = "portMappings")]
    port_mappings: Option<Vec<MappingJson>>,
}

/// One `runtimeConfig.portMappings` entry. containerd sends Go's field
/// names (`{"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp",
/// "HostIP": ""}`), which match these keys as Go's decoder matches them.
#[derive(Debug, Default, Deserialize)]
struct MappingJson {
    #[serde(default, rename = "hostPort")]
    host_port: Option<Value>,
    #[serde(default, rename = "containerPort")]
    container_port: Option<Value>,
    #[serde(default)]
    protocol: Option<Value>,
    #[serde(default, rename = "hostIP")]
    host_ip: Option<Value>,
}

fn parse_mappings(list: &[MappingJson]) -> Result<Vec<PortMapping>, Error> {
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("runtimeConfig.portMappings[{i}]");
        let port = |v: &Option<Value>, key: &str, what: &str| -> Result<u16, Error> {
            match v {
                Some(v) => match v.as_i64() {
                    Some(p) if (1..=65535).contains(&p) => Ok(p as u16),
                    _ => Err(bad(format!("{at}.{key}: Invalid {what} port number: {v}"))),
                },
                None => Err(bad(format!("{at}.{key}: Invalid {what} port number: 0"))),
            }
        };
        let host_port = port(&m.host_port, "hostPort", "host")?;
        let container_port = port(&m.container_port, "containerPort", "container")?;
        let protocol = match &m.protocol {
            None => Protocol::Tcp,
            Some(Value::String(p)) => match p.to_ascii_lowercase().as_str() {
                "" | "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                "sctp" => Protocol::Sctp,
                _ => {
                    return Err(bad(format!(
                        "{at}.protocol: unknown protocol {p:?} (tcp, udp or sctp)"
                    )))
                }
            },
            Some(v) => return Err(bad(format!("{at}.protocol must be a string, got {v}"))),
        };
        let host_ip = match &m.host_ip {
            None => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(
                s.parse::<IpAddr>()
                    .map_err(|_| bad(format!("{at}.hostIP: not an IP address: {s:?}")))?
                    .into(),
            ),
            Some(v) => return Err(bad(format!("{at}.hostIP must be a string, got {v}"))),
        };
        out.push(PortMapping {
            host_port,
            container_port,
            protocol,
            host_ip,
        });
    }
    Ok(out)
}

/// Parses a condition list (`key` names it in errors) for `v6`.
fn parse_conditions(v: Option<&Value>, key: &str, v6: bool) -> Result<Vec<Condition>, Error> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(l)) => l,
        Some(other) => return Err(bad(format!("{key} must be a list of strings, got {other}"))),
    };
    // Tokens with the element each came from.
    let mut tokens: Vec<(usize, String)> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let Some(s) = e.as_str() else {
            return Err(bad(format!("{key}[{i}] must be a string, got {e}")));
        };
        tokens.extend(
            s.split_whitespace()
                .map(|t| (i, t.trim_matches('"').to_owned())),
        );
    }
    let mut out = Vec::new();
    let mut it = tokens.into_iter().peekable();
    let mut negate = false;
    while let Some((i, t)) = it.next() {
        let unsupported = |what: &str| {
            bad(format!(
                "{key}[{i}]: {what:?} is not a condition wasmcni supports (-s, -d, -i, -o, \
                 optionally with !; or ip saddr, ip daddr, iifname, oifname)"
            ))
        };
        let value = |it: &mut std::iter::Peekable<std::vec::IntoIter<(usize, String)>>| {
            it.next()
                .map(|(_, v)| v)
                .ok_or_else(|| bad(format!("{key}[{i}]: {t:?} needs a value")))
        };
        let prefix_of = |s: &str, negate: bool| -> Result<PrefixMatch, Error> {
            let (ip, len) = match s.split_once('/') {
                Some((a, l)) => (a, l.parse::<u8>().ok()),
                None => (s, Some(if s.contains(':') { 128 } else { 32 })),
            };
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| bad(format!("{key}[{i}]: not an address or CIDR: {s:?}")))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = len
                .filter(|l| *l <= max)
                .ok_or_else(|| bad(format!("{key}[{i}]: bad prefix length in {s:?}")))?;
            if ip.is_ipv6() != v6 {
                return Err(bad(format!(
                    "{key}[{i}]: {s:?} is not an IPv{} address",
                    if v6 { 6 } else { 4 }
                )));
            }
            Ok(PrefixMatch {
                prefix: prefix(ip, len),
                negate,
            })
        };
        let name_of = |s: String, negate: bool| -> Result<NameMatch, Error> {
            if s.is_empty()
                || s.len() > 15
                || s.contains(['/', ':', '*', '+'])
                || s == "."
                || s == ".."
            {
                return Err(bad(format!("{key}[{i}]: not an interface name: {s:?}")));
            }
            Ok(NameMatch { name: s, negate })
        };
        match t.as_str() {
            "!" => {
                negate = !negate;
                continue;
            }
            "-s" | "--source" | "--src" => {
                out.push(Condition::Source(prefix_of(&value(&mut it)?, negate)?))
            }
            "-d" | "--destination" | "--dst" => {
                out.push(Condition::Destination(prefix_of(&value(&mut it)?, negate)?))
            }
            "-i" | "--in-interface" => {
                out.push(Condition::InInterface(name_of(value(&mut it)?, negate)?))
            }
            "-o" | "--out-interface" => {
                out.push(Condition::OutInterface(name_of(value(&mut it)?, negate)?))
            }
            "ip" | "ip6" => {
                if (t == "ip6") != v6 {
                    return Err(unsupported(&t));
                }
                let field = value(&mut it)?;
                let mut v = value(&mut it)?;
                let mut neg = negate;
                if v == "!=" {
                    neg = !neg;
                    v = value(&mut it)?;
                }
                let p = prefix_of(&v, neg)?;
                match field.as_str() {
                    "saddr" => out.push(Condition::Source(p)),
                    "daddr" => out.push(Condition::Destination(p)),
                    other => return Err(unsupported(other)),
                }
            }
            "iifname" | "oifname" => {
                let mut v = value(&mut it)?;
                let mut neg = negate;
                if v == "!=" {
                    neg = !neg;
                    v = value(&mut it)?;
                }
                let n = name_of(v, neg)?;
                out.push(if t == "iifname" {
                    Condition::InInterface(n)
                } else {
                    Condition::OutInterface(n)
                });
            }
            other => return Err(unsupported(other)),
        }
        negate = false;
    }
    if negate {
        return Err(bad(format!("{key}: a trailing \"!\" negates nothing")));
    }
    if out.len() > 16 {
        return Err(bad(format!("{key}: more than 16 conditions")));
    }
    Ok(out)
}

/// The rule dialect of a conditions list as upstream tells it from its
/// first entry: `-`/`!` iptables, anything else nftables.
fn dialect(conditions: Option<&Value>) -> Option<&'static str> {
    let first = conditions?.as_array()?.first()?.as_str()?;
    match first.chars().next()? {
        '-' | '!' => Some("iptables"),
        _ => Some("nftables"),
    }
}

/// `backend` (upstream v1.6+), as upstream's `ensureBackend` checks it:
/// `iptables` or `nftables`, and no option of the other backend's
/// (`externalSetMarkChain` is iptables'; conditions are either's by their
/// dialect). Both of upstream's backends map ports alike; wasmcni's
/// rules are its own nftables rules either way.
fn check_backend(c: &ConfJson) -> Result<(), Error> {
    let b = match &c.backend {
        None => return Ok(()),
        Some(Value::String(b)) => b.as_str(),
        Some(v) => return Err(bad(format!("backend must be a string, got {v}"))),
    };
    let wrong = if b == "iptables" {
        "nftables"
    } else {
        "iptables"
    };
    let mut found = Vec::new();
    if wrong == "iptables" && c.external_set_mark_chain.is_some() {
        found.push("externalSetMarkChain");
    }
    if dialect(c.conditions_v4.as_ref()) == Some(wrong) {
        found.push("conditionsV4");
    }
    if dialect(c.conditions_v6.as_ref()) == Some(wrong) {
        found.push("conditionsV6");
    }
    if !found.is_empty() {
        return Err(bad(format!(
            "backend: {b} backend was requested but configuration contains \
             {wrong}-specific options [{}]",
            found.join(" ")
        )));
    }
    if b != "iptables" && b != "nftables" {
        return Err(bad(format!("backend: unrecognized backend {b:?}")));
    }
    Ok(())
}

/// Reads and checks the config (ADD and CHECK; DEL reads none of it).
fn parse(inv: &Invocation) -> Result<Conf, Error> {
    let c: ConfJson = inv.conf.plugin_config()?;
    let flag = |v: &Option<Value>, key: &str, default: bool| match v {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(bad(format!("{key} must be true or false, got {v}"))),
    };
    let snat = flag(&c.snat, "snat", true)?;
    let masq_all = flag(&c.masq_all, "masqAll", false)?;
    let mark_bit = match &c.mark_masq_bit {
        None => None,
        Some(v) => match v.as_i64() {
            Some(b) if (0..=31).contains(&b) => Some(b),
            Some(_) => return Err(bad("markMasqBit: MasqMarkBit must be between 0 and 31")),
            None => return Err(bad(format!("markMasqBit must be an integer, got {v}"))),
        },
    };
    match &c.external_set_mark_chain {
        None => {}
        Some(Value::String(_)) if mark_bit.is_some() => {
            return Err(bad(
                "externalSetMarkChain: Cannot specify externalSetMarkChain and markMasqBit",
            ))
        }
        Some(Value::String(_)) => {}
        Some(v) => {
            return Err(bad(format!(
                "externalSetMarkChain must be a string, got {v}"
            )))
        }
    }
    check_backend(&c)?;
    let mappings = c
        .runtime_config
        .and_then(|r| r.port_mappings)
        .unwrap_or_default();
    Ok(Conf {
        mappings: parse_mappings(&mappings)?,
        snat,
        masq_all,
        conditions_v4: parse_conditions(c.conditions_v4.as_ref(), "conditionsV4", false)?,
        conditions_v6: parse_conditions(c.conditions_v6.as_ref(), "conditionsV6", true)?,
    })
}

/// The container's first IPv4 and first IPv6 address (with prefix) as the
/// reference picks them: addresses of no interface or of `ifname` in a
/// sandbox.
fn container_addresses(prev: &CniResult, ifname: &str) -> Vec<(IpAddr, u8)> {
    let mut out: Vec<(IpAddr, u8)> = Vec::new();
    for ip in &prev.ips {
        if let Some(i) = ip.interface {
            if let Some(iface) = prev.interfaces.get(i) {
                if iface.name != ifname || iface.sandbox.is_empty() {
                    continue;
                }
            }
        }
        let a = ip.address.addr();
        if out.iter().any(|(b, _)| b.is_ipv4() == a.is_ipv4()) {
            continue;
        }
        out.push((a, ip.address.prefix_len()));
    }
    out
}

/// The port maps to the container's first IPv4 and first IPv6 address,
/// as one request (the host replaces the attachment's port maps with it);
/// `None` without an address.
fn port_maps(conf: &Conf, prev: &CniResult, ifname: &str) -> Option<Rules> {
    let maps: Vec<PortMap> = container_addresses(prev, ifname)
        .into_iter()
        .map(|(ip, len)| PortMap {
            container: prefix(ip, len),
            mappings: conf.mappings.clone(),
            snat: conf.snat,
            masq_all: conf.masq_all,
            conditions: if ip.is_ipv4() {
                conf.conditions_v4.clone()
            } else {
                conf.conditions_v6.clone()
            },
        })
        .collect();
    (!maps.is_empty()).then_some(Rules::PortMap(maps))
}

fn chained(inv: &Invocation) -> Result<CniResult, Error> {
    inv.prev_result()?
        .ok_or_else(|| bad("must be called as chained plugin"))
}

struct Portmap;

impl Plugin for Portmap {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let conf = parse(inv)?;
        let prev = chained(inv)?;
        if conf.mappings.is_empty() {
            return Ok(prev);
        }
        if let Some(r) = port_maps(&conf, &prev, &inv.env.ifname) {
            Netns::host()?.firewall_add(&r)?;
        }
        Ok(prev)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = parse(inv)?;
        let prev = chained(inv)?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        if let Some(r) = port_maps(&conf, &prev, &inv.env.ifname) {
            if !Netns::host()?.firewall_check(&r)? {
                return Err(Error::internal(
                    "portmap rules of this container are missing or differ",
                ));
            }
        }
        Ok(())
    }

    /// Removes every port map of the attachment, whether or not the
    /// runtime repeats its port mappings, and reads nothing of the config:
    /// a config ADD refuses (conditions wasmcni does not support, a
    /// `masqAll` or mark bit of the wrong kind, bad mappings) cannot stop
    /// it. (The reference's DEL fails on a config it cannot parse.)
    fn del(&self, _inv: &Invocation) -> Result<(), Error> {
        Netns::host()?.firewall_remove(&[RuleKind::PortMap])?;
        Ok(())
    }

    fn gc(&self, _inv: &Invocation) -> Result<(), Error> {
        Netns::host()?.firewall_collect_garbage(&[RuleKind::PortMap])?;
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `portmap`).
pub fn main() -> ! {
    skel::run(Portmap, "CNI portmap plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_in_both_syntaxes() {
        let c = parse_conditions(
            Some(&json!([
                "-s",
                "10.0.0.0/8",
                "!",
                "-d",
                "10.1.0.1",
                "-i eth0"
            ])),
            "conditionsV4",
            false,
        )
        .expect("ok");
        assert_eq!(c.len(), 3);
        assert!(matches!(&c[1], Condition::Destination(p) if p.negate));
        let c = parse_conditions(
            Some(&json!(["ip saddr != 10.0.0.0/8", "oifname \"cni0\""])),
            "conditionsV4",
            false,
        )
        .expect("ok");
        assert!(matches!(&c[0], Condition::Source(p) if p.negate));
        assert!(matches!(&c[1], Condition::OutInterface(n) if n.name == "cni0" && !n.negate));
    }

    #[test]
    fn bad_conditions_name_the_element() {
        for (v, key, v6, idx) in [
            (
                json!(["-s", "10.0.0.0/8", "-j", "ACCEPT"]),
                "conditionsV4",
                false,
                "[2]",
            ),
            (json!(["-m", "comment"]), "conditionsV4", false, "[0]"),
            (json!(["-s", "fd00::/8"]), "conditionsV4", false, "[0]"),
            (json!(["-s", "10.0.0.0/8"]), "conditionsV6", true, "[0]"),
            (json!(["-s"]), "conditionsV4", false, "[0]"),
            (json!(["-i", "a/b"]), "conditionsV4", false, "[0]"),
        ] {
            let e = parse_conditions(Some(&v), key, v6).expect_err(&v.to_string());
            assert_eq!(e.code, 7, "{v}");
            assert!(e.msg.contains(&format!("{key}{idx}")), "{v}: {}", e.msg);
        }
    }

    fn inv(command: guest_sdk::cni::Command, extra: Value) -> Invocation {
        let mut c = json!({"type": "portmap", "capabilities": {"portMappings": true}});
        for (k, v) in extra.as_object().expect("object") {
            c[k] = v.clone();
        }
        plugin_common::testing::invocation(command, "", c)
    }

    fn mappings(m: Value) -> Result<usize, Error> {
        let i = inv(
            guest_sdk::cni::Command::Add,
            json!({"runtimeConfig": {"portMappings": m}}),
        );
        parse(&i).map(|c| c.mappings.len())
    }

    #[test]
    fn mappings_are_checked() {
        assert_eq!(
            mappings(json!([{"hostPort": 8080, "containerPort": 80, "protocol": "TCP"}]))
                .expect("ok"),
            1
        );
        for m in [
            json!([{"hostPort": 0, "containerPort": 80}]),
            json!([{"hostPort": 8080, "containerPort": 70000}]),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "icmp"}]),
            json!([{"hostPort": 8080, "containerPort": 80, "hostIP": "nope"}]),
            json!([{"hostPort": 8080, "containerPort": 80, "hostIP": 5}]),
            json!("8080"),
            json!([8080]),
        ] {
            let e = mappings(m.clone()).expect_err(&m.to_string());
            assert_eq!(e.code, 7, "{m}");
            assert!(e.msg.contains("portMappings"), "{m}: {}", e.msg);
        }
    }

    /// `backend` (upstream v1.6+) as upstream's `ensureBackend` checks it:
    /// its messages, the other backend's options first.
    #[test]
    fn backend_as_upstream_checks_it() {
        for ok in [
            json!({"backend": "iptables", "conditionsV4": ["-s", "10.0.0.0/8"]}),
            json!({"backend": "nftables", "conditionsV6": ["ip6 saddr fd00::/8"]}),
            json!({"backend": "iptables", "externalSetMarkChain": "KUBE-MARK-MASQ"}),
            json!({"backend": null}),
            json!({"Backend": "nftables"}),
        ] {
            if let Err(e) = parse(&inv(guest_sdk::cni::Command::Add, ok.clone())) {
                panic!("{ok}: {e:?}");
            }
        }
        for (bad, msg) in [
            (
                json!({"backend": "nftables", "externalSetMarkChain": "X",
                       "conditionsV4": ["-s", "10.0.0.0/8"]}),
                "backend: nftables backend was requested but configuration contains \
                 iptables-specific options [externalSetMarkChain conditionsV4]",
            ),
            (
                json!({"backend": "iptables", "conditionsV6": ["ip6 saddr fd00::/8"]}),
                "backend: iptables backend was requested but configuration contains \
                 nftables-specific options [conditionsV6]",
            ),
            (
                json!({"backend": "bogus", "conditionsV4": ["-s", "10.0.0.0/8"]}),
                "backend: bogus backend was requested but configuration contains \
                 iptables-specific options [conditionsV4]",
            ),
            (
                json!({"backend": "bogus"}),
                "backend: unrecognized backend \"bogus\"",
            ),
            (json!({"backend": 1}), "backend must be a string, got 1"),
        ] {
            let e =
                parse(&inv(guest_sdk::cni::Command::Add, bad.clone())).expect_err(&bad.to_string());
            assert_eq!((e.code, e.msg.as_str()), (7, msg), "{bad}");
        }
    }

    #[test]
    fn mappings_with_go_field_names() {
        // containerd marshals its PortMapping struct without json tags.
        let i = inv(
            guest_sdk::cni::Command::Add,
            json!({"runtimeConfig": {"portMappings": [
                {"HostPort": 8080, "ContainerPort": 80, "Protocol": "udp", "HostIP": ""},
                {"HostPort": 8443, "ContainerPort": 443, "Protocol": "tcp", "HostIP": "10.1.0.1"}
            ]}}),
        );
        let c = parse(&i).expect("parses");
        assert_eq!(c.mappings.len(), 2);
        assert_eq!(
            (c.mappings[0].host_port, c.mappings[0].container_port),
            (8080, 80)
        );
        assert!(matches!(c.mappings[0].protocol, Protocol::Udp));
        assert!(c.mappings[0].host_ip.is_none());
        assert!(c.mappings[1].host_ip.is_some());
    }

    #[test]
    fn del_reads_no_config() {
        use plugin_common::testing::{reach, Reached};
        for extra in [
            json!({"conditionsV4": ["-m", "comment", "--comment", "x"]}),
            json!({"masqAll": 1}),
            json!({"markMasqBit": 40, "externalSetMarkChain": "X"}),
            json!({"snat": "yes"}),
            json!({"backend": "bogus"}),
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 0}]}}),
            json!({"runtimeConfig": {"portMappings": "8080"}}),
        ] {
            let add = inv(guest_sdk::cni::Command::Add, extra.clone());
            assert!(parse(&add).is_err(), "{extra}: ADD accepts it");
            let del = inv(guest_sdk::cni::Command::Del, extra.clone());
            assert_eq!(
                reach(|| Portmap.del(&del)),
                Reached::HostCall("netns.host".into()),
                "{extra}"
            );
        }
    }
}

/// docs/reference-options.md's `portmap` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "portmap",
            &[
                ("", keys_of::<ConfJson>()),
                ("runtimeConfig.", keys_of::<RuntimeConfigJson>()),
                ("runtimeConfig.portMappings[].", keys_of::<MappingJson>()),
            ],
        );
    }
}

//! The entry the needs of a plugin's records add up to (their union, as
//! `audit2allow` derives rules), with notes, and its JSON.

use serde_json::Value;

use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::netns::Kind;
use wasmcni_runtime::policy::{Entry, NsGrant, Pattern};

use super::need::{need_kind, push, Need};
use super::record::needs_noted;

/// The entry the needs of `records` add up to, pinned to `sha256`, and
/// notes on what was generalized, left out or could not be derived. A
/// grant that only calls the policy refused needed (no allowed call did)
/// stays in the entry, as `audit2allow` keeps it, but is named first in
/// the notes: a plugin can make refused calls on purpose.
pub fn derive(records: &[Logged], sha256: &str) -> (Entry, Vec<String>) {
    let mut e = Entry {
        sha256: Some(sha256.to_owned()),
        ..Entry::default()
    };
    let mut notes = Vec::new();
    let mut names: Vec<Pattern> = Vec::new();
    let mut unknown_name = false;
    let mut allowed: Vec<Need> = Vec::new();
    let mut refused: Vec<Need> = Vec::new();
    for r in records {
        let (needs, found) = needs_noted(r);
        for n in found {
            push(&mut notes, n);
        }
        let ran = matches!(r.outcome.as_str(), "ok" | "error");
        for need in needs {
            push(if ran { &mut allowed } else { &mut refused }, need.clone());
            apply(&mut e, &mut names, &mut unknown_name, need);
        }
    }
    let host_allowed = allowed.iter().any(|n| need_kind(n) == Some(Kind::Host));
    let mut only_refused: Vec<String> = refused
        .iter()
        .filter(|n| !allowed.contains(n))
        .filter(|n| !matches!(n, Need::Prefix(_)))
        .filter(|n| !(**n == Need::Host && host_allowed))
        .map(Need::to_string)
        .collect();
    if let Some(h) = e.host.as_mut() {
        h.prefixes = minimal_prefixes(std::mem::take(&mut h.prefixes));
        for p in &h.prefixes {
            // A prefix only an allowed call needed is the grant itself; one
            // that swallowed them came from a refused call.
            if !allowed.contains(&Need::Prefix(*p)) {
                only_refused.push(Need::Prefix(*p).to_string());
            }
            let wide = match p {
                ipnet::IpNet::V4(n) => n.prefix_len() < 8,
                ipnet::IpNet::V6(n) => n.prefix_len() < 16,
            };
            if wide {
                notes.push(format!(
                    "host prefix {p} is wide: with it the plugin may route much of the node's \
                     traffic; narrow it to the pod range if the plugin allows"
                ));
            }
        }
        // `names` matters only where links are made, moved in or renamed.
        if !h.create.is_empty() || h.move_links || h.modify {
            if unknown_name {
                notes.push(
                    "a link moved into the node under its own name: `names` left at its \
                     default (veth*, cni*); name it if the link is called otherwise"
                        .into(),
                );
            } else {
                h.names = Some(names);
            }
        }
    }
    let first: Vec<String> = only_refused
        .into_iter()
        .map(|g| {
            format!(
                "{g} only from refused calls: the plugin was denied it; grant it only if it \
                 needs it"
            )
        })
        .collect();
    notes.splice(0..0, first);
    (e, notes)
}

fn apply(e: &mut Entry, names: &mut Vec<Pattern>, unknown_name: &mut bool, need: Need) {
    fn g(e: &mut Entry, k: Kind) -> &mut NsGrant {
        match k {
            Kind::Container => &mut e.container,
            Kind::Host => e.host.get_or_insert_with(NsGrant::default),
        }
    }
    match need {
        Need::Host => {
            g(e, Kind::Host);
        }
        Need::Read(k) => g(e, k).read = true,
        Need::Create(k, kind) => push(&mut g(e, k).create, kind),
        Need::Modify(k) => g(e, k).modify = true,
        Need::Move(k) => g(e, k).move_links = true,
        Need::Addresses(k) => g(e, k).addresses = true,
        Need::Routes(k) => g(e, k).routes = true,
        Need::Announce(k) => g(e, k).announce = true,
        Need::TrafficControl(k) => g(e, k).traffic_control = true,
        Need::ConfigVlans(k) => g(e, k).config_vlans = true,
        Need::Firewall(field) => {
            let f = &mut g(e, Kind::Host).firewall;
            match field.as_str() {
                "port-mappings" => f.port_mappings = true,
                "masquerade" => f.masquerade = true,
                "forward" => f.forward = true,
                "isolation" => f.isolation = true,
                "mac-spoof" => f.mac_spoof = true,
                _ => {}
            }
        }
        Need::Sysctl(k, p) => push(&mut g(e, k).sysctls, Pattern(p)),
        Need::Name(p) => {
            g(e, Kind::Host);
            push(names, Pattern(p));
        }
        Need::UnknownName => {
            g(e, Kind::Host);
            *unknown_name = true;
        }
        Need::Prefix(n) => push(&mut g(e, Kind::Host).prefixes, n),
        Need::Links(n) => push(&mut g(e, Kind::Host).links, Pattern(n)),
        Need::Masters(n) => push(&mut g(e, Kind::Host).masters, Pattern(n)),
        Need::Bridges(n) => push(&mut g(e, Kind::Host).bridges, Pattern(n)),
        Need::IpamRoot(p) => push(&mut e.ipam_roots, p),
        Need::Delegate(n) => push(&mut e.delegates, n),
        Need::AttachmentState => e.attachment_state = true,
        Need::Dhcp => {
            e.dhcp = Some(wasmcni_runtime::policy::DhcpGrant {
                socket: wasmcni_runtime::policy::DEFAULT_DHCP_SOCKET.into(),
            })
        }
    }
}

/// The prefixes not inside another of them, sorted.
fn minimal_prefixes(mut v: Vec<ipnet::IpNet>) -> Vec<ipnet::IpNet> {
    v.sort();
    v.dedup();
    let all = v.clone();
    v.retain(|n| !all.iter().any(|o| o != n && o.contains(n)));
    v
}

/// `entry` as the JSON of a policy entry, without the fields that grant
/// nothing (a `names` list stays, empty or not: absent means the default).
pub fn entry_json(entry: &Entry) -> Value {
    let mut v = serde_json::to_value(entry).unwrap_or(Value::Null);
    fn prune(v: &mut Value, keep_names: bool) {
        if let Value::Object(m) = v {
            m.retain(|k, x| match x {
                Value::Null | Value::Bool(false) => false,
                Value::Array(a) if a.is_empty() => keep_names && k == "names",
                _ => true,
            });
        }
    }
    prune(&mut v, false);
    if let Value::Object(m) = &mut v {
        for ns in ["container", "host"] {
            if let Some(g) = m.get_mut(ns) {
                prune(g, true);
            }
        }
        if m.get("container")
            .is_some_and(|c| c == &serde_json::json!({}))
        {
            m.remove("container");
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suggest::{counts, needs, select};
    use serde_json::json;
    use std::path::PathBuf;
    use wasmcni_runtime::audit::{LinkRef, RefusedBy};
    use wasmcni_runtime::policy::{LinkKind, Policy};

    const SHA: &str = "ab";

    fn rec(command: &str, call: &str, args: Value, outcome: &str, reason: Option<&str>) -> Logged {
        Logged {
            plugin: "mine".into(),
            sha256: SHA.repeat(32),
            container_id: "0123456789abcdef0123456789abcdef".into(),
            ifname: "eth0".into(),
            command: command.into(),
            call: call.into(),
            args,
            outcome: outcome.into(),
            reason: reason.map(str::to_owned),
            ..Logged::default()
        }
    }

    /// A policy's refusal, as the audit record says it.
    fn by_policy(mut r: Logged, grant: &str) -> Logged {
        r.refused_by = Some(RefusedBy::Policy);
        r.grant = Some(grant.into());
        r
    }

    /// An invariant's refusal.
    fn by_invariant(mut r: Logged) -> Logged {
        r.refused_by = Some(RefusedBy::Invariant);
        r
    }

    /// A refusal about node link `name` (`index`).
    fn about(mut r: Logged, name: &str, index: u32) -> Logged {
        r.link = Some(LinkRef {
            name: name.into(),
            index,
        });
        r
    }

    fn ok(call: &str, args: Value) -> Logged {
        rec("ADD", call, args, "ok", None)
    }

    /// The suggestion, through the policy parser: what a policy file with
    /// it would grant.
    fn parsed(records: &[Logged]) -> Entry {
        let (e, _) = derive(records, &SHA.repeat(32));
        // As a policy.d file holds it, and as plugins.NAME of policy.json.
        let json = entry_json(&e);
        let back = Entry::from_value("mine", &json, "mine.json").expect("the entry parses");
        assert_eq!(back, e, "the JSON holds the whole entry: {json}");
        let doc = json!({"plugins": {"mine": json}}).to_string();
        let p = Policy::parse(&doc, "suggestion").expect("the suggestion parses");
        assert_eq!(p.entry("mine"), e);
        back
    }

    #[test]
    fn loopback_needs_read_and_modify_in_the_container_only() {
        let e = parsed(&[
            ok("netns.container", json!({})),
            ok("link.get-by-name", json!({"ns": "container", "name": "lo"})),
            ok(
                "link.set-up",
                json!({"ns": "container", "index": 1, "up": true}),
            ),
            by_invariant(rec(
                "CHECK",
                "link.set-up",
                json!({"ns": "container", "index": 1, "up": true}),
                "denied",
                Some("only ADD and DEL may change the kernel"),
            )),
        ]);
        assert!(e.container.read && e.container.modify);
        assert!(!e.container.addresses && e.container.create.is_empty());
        assert!(e.host.is_none());
        assert_eq!(e.sha256.as_deref(), Some(SHA.repeat(32).as_str()));
        assert!(e.ipam_roots.is_empty() && e.delegates.is_empty());
    }

    #[test]
    fn bandwidth_needs_traffic_control_on_the_host_and_read() {
        let limit = json!({"rate": 800000, "burst": 80000});
        let e = parsed(&[
            ok("netns.host", json!({})),
            ok(
                "link.get-by-name",
                json!({"ns": "container", "name": "eth0"}),
            ),
            ok("link.get-by-index", json!({"ns": "host", "index": 7})),
            ok(
                "traffic-control.limit-transmit",
                json!({"ns": "host", "index": 7, "limit": limit}),
            ),
            ok(
                "traffic-control.limit-receive",
                json!({"ns": "host", "index": 7, "limit": limit}),
            ),
            rec(
                "CHECK",
                "traffic-control.limits",
                json!({"ns": "host", "index": 7}),
                "ok",
                None,
            ),
            rec(
                "DEL",
                "traffic-control.remove-limits",
                json!({"ns": "host", "index": null}),
                "ok",
                None,
            ),
        ]);
        let host = e.host.expect("a host grant");
        assert!(host.traffic_control && host.read, "{host}");
        assert!(!host.modify && host.links.is_empty(), "{host}");
        assert!(e.container.read && !e.container.traffic_control);
    }

    #[test]
    fn policy_denials_count_invariant_denials_and_limits_do_not() {
        let denied = by_policy(
            rec(
                "ADD",
                "address.add",
                json!({"ns": "container", "link-index": 2, "prefix": "10.1.0.2/24"}),
                "denied",
                Some("the policy grants no `addresses` in the container namespace"),
            ),
            "plugins.mine.container.addresses",
        );
        assert!(counts(&denied));
        let invariant = by_invariant(rec(
            "ADD",
            "link.delete",
            json!({"ns": "container", "index": 2}),
            "denied",
            Some("during ADD a plugin may delete only links it created in the same call"),
        ));
        assert!(!counts(&invariant));
        // As reasons name fields and invariants now.
        let field = by_policy(
            rec(
                "ADD",
                "link.set-mtu",
                json!({"ns": "container", "index": 2, "mtu": 1400}),
                "denied",
                Some("plugins.mine.container.modify is false"),
            ),
            "plugins.mine.container.modify",
        );
        assert!(counts(&field));
        // A refusal's text is never read: a record that does not say what
        // refused it (a wasmcni before the `refused-by` field) counts not.
        let unsaid = rec(
            "ADD",
            "link.set-mtu",
            json!({"ns": "container", "index": 2, "mtu": 1400}),
            "denied",
            Some("plugins.mine.container.modify is false"),
        );
        assert!(!counts(&unsaid));
        let marked = about(by_invariant(rec(
            "ADD",
            "link.delete",
            json!({"ns": "host", "index": 2}),
            "denied",
            Some(
                "host link \"veth1\" (index 2) belongs to another attachment (a wasmcni invariant)",
            ),
        )), "veth1", 2);
        assert!(!counts(&marked));
        let limit = rec(
            "ADD",
            "link.list",
            json!({"ns": "container"}),
            "limit-exceeded",
            Some("budget"),
        );
        assert!(!counts(&limit));
        let undo = ok("journal.undo", json!({"undo": "x"}));
        assert!(!counts(&undo));
        let e = parsed(&[denied, invariant, limit, undo, field, marked]);
        assert!(e.container.addresses && e.container.modify && !e.container.read);
        assert!(e.host.is_none(), "{e:?}");
    }

    #[test]
    fn host_calls_give_names_prefixes_and_sysctls() {
        let e = parsed(&[
            ok("netns.host", json!({})),
            ok(
                "link.create-veth",
                json!({"ns": "host", "name": "veth1a2b3c4d", "peer-ns": "container",
                       "peer-name": "eth0"}),
            ),
            ok("link.create-bridge", json!({"ns": "host", "name": "cni0"})),
            ok(
                "address.add",
                json!({"ns": "host", "link-index": 5, "prefix": "10.22.0.1/24"}),
            ),
            ok(
                "route.add",
                json!({"ns": "host", "route": {"destination": "10.22.0.7/32", "link-index": 5}}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.ip_forward", "value": "1"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "container", "key": "net.ipv6.conf.eth0.disable_ipv6", "value": "0"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv6.conf.veth1a2b3c4d.accept_ra", "value": "0"}),
            ),
        ]);
        let h = e.host.expect("host grant");
        assert_eq!(h.create, vec![LinkKind::Veth, LinkKind::Bridge]);
        assert_eq!(
            h.names,
            Some(vec![Pattern("veth*".into()), Pattern("cni0".into())])
        );
        assert!(h.addresses && h.routes && !h.modify && !h.read);
        // The /32 lies inside the /24: one prefix covers both.
        assert_eq!(h.prefixes, vec!["10.22.0.0/24".parse().expect("net")]);
        assert_eq!(
            h.sysctls,
            vec![
                Pattern("net.ipv4.ip_forward".into()),
                Pattern("net.ipv6.conf.veth*.accept_ra".into())
            ]
        );
        assert_eq!(e.container.create, vec![LinkKind::Veth]);
        assert_eq!(
            e.container.sysctls,
            vec![Pattern("net.ipv6.conf.*.disable_ipv6".into())]
        );
        // Sufficient: every observed value passes the grant's own checks.
        assert!(h.may_name("veth99aabbcc") && h.may_name("cni0") && !h.may_name("cni1"));
        assert!(!h.may_name("eth1"));
        assert!(h.covers("10.22.0.7".parse().expect("ip"), 32));
        assert!(!h.covers("10.23.0.1".parse().expect("ip"), 32));
        assert!(h.names_sysctl("net.ipv4.ip_forward"));
        assert!(!h.names_sysctl("net.ipv4.conf.all.forwarding"));
    }

    #[test]
    fn node_links_become_links_masters_and_bridges() {
        let mut master = ok(
            "link.create-macvlan",
            json!({"master-ns": "host", "master": 2, "ns": "container", "name": "eth0"}),
        );
        master.extra.insert(
            "node-links".into(),
            json!({"2": {"name": "uplink0", "kind": "veth"}}),
        );
        let mut enslave = ok(
            "link.set-master",
            json!({"ns": "host", "index": 9, "master": 3}),
        );
        enslave.extra.insert(
            "node-links".into(),
            json!({"3": {"name": "br-admin", "kind": "bridge"}}),
        );
        // From a node's log: the denial names the link.
        let denied = about(by_policy(rec(
            "ADD",
            "link.set-mtu",
            json!({"ns": "host", "index": 4, "mtu": 9000}),
            "denied",
            Some("host link \"eth9\" (index 4) was not created by wasmcni and matches no `links` pattern"),
        ), "plugins.mine.host.links"), "eth9", 4);
        // And as a node's log words it now.
        let denied_now = about(by_policy(rec(
            "ADD",
            "link.create-vlan",
            json!({"master-ns": "host", "master": 5, "ns": "container", "name": "eth0.5"}),
            "denied",
            Some("host link \"bond0\" matches none of plugins.mine.host.masters (nor of plugins.mine.host.links)"),
        ), "plugins.mine.host.masters"), "bond0", 5);
        let e = parsed(&[master, enslave, denied, denied_now]);
        let h = e.host.expect("host");
        assert_eq!(
            h.masters,
            vec![Pattern("uplink0".into()), Pattern("bond0".into())]
        );
        assert_eq!(h.bridges, vec![Pattern("br-admin".into())]);
        assert_eq!(h.links, vec![Pattern("eth9".into())]);
        assert!(h.modify && !h.read);
        assert_eq!(e.container.create, vec![LinkKind::Macvlan, LinkKind::Vlan]);
        // A plugin that modifies links but created none: names stays empty.
        assert_eq!(h.names, Some(vec![]));
    }

    #[test]
    fn wide_host_prefixes_are_noted() {
        let (e, notes) = derive(
            &[ok(
                "route.add",
                json!({"ns": "host", "route": {"destination": "0.0.0.0/0", "link-index": 5}}),
            )],
            &SHA.repeat(32),
        );
        assert_eq!(
            e.host.expect("host").prefixes,
            vec!["0.0.0.0/0".parse::<ipnet::IpNet>().expect("net")]
        );
        assert!(
            notes.iter().any(|n| n.contains("0.0.0.0/0 is wide")),
            "{notes:?}"
        );
    }

    #[test]
    fn attachment_state_and_the_tuning_setters() {
        let e = parsed(&[
            ok(
                "attachment-state.set",
                json!({"key": "restore", "value": {"bytes": 12}}),
            ),
            ok(
                "link.set-txqlen",
                json!({"ns": "container", "index": 2, "txqlen": 5}),
            ),
        ]);
        assert!(e.attachment_state);
        assert!(e.container.modify);
        assert!(!parsed(&[]).attachment_state);
    }

    #[test]
    fn rules_and_the_table_lock() {
        let e = parsed(&[
            ok("route.lock-tables", json!({"ns": "container"})),
            ok("route.list-rules", json!({"ns": "container"})),
            ok(
                "route.add-rule",
                json!({"ns": "container", "rule": {"table": 100}}),
            ),
        ]);
        assert!(e.container.read && e.container.routes, "{}", e.container);
        assert!(e.host.is_none());
        // A VRF's table in the node namespace, where no rule may be added.
        let e = parsed(&[
            ok("netns.host", json!({})),
            ok("route.lock-tables", json!({"ns": "host"})),
        ]);
        let host = e.host.expect("a host grant");
        assert!(!host.routes && host.may_create(LinkKind::Vrf), "{host}");
    }

    #[test]
    fn ipam_and_delegates() {
        let e = parsed(&[
            ok("ipam-store.[static]store.open", json!({"data-dir": null})),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/mine"}),
            ),
            ok(
                "delegate.run",
                json!({"plugin-type": "host-local", "command": "ADD"}),
            ),
        ]);
        assert_eq!(
            e.ipam_roots,
            vec![
                PathBuf::from(wasmcni_runtime::ipam::DEFAULT_DATA_DIR),
                PathBuf::from("/var/lib/mine")
            ]
        );
        assert_eq!(e.delegates, vec!["host-local".to_owned()]);
    }

    #[test]
    fn moved_in_links_without_a_name_keep_the_default_names() {
        let (e, notes) = derive(
            &[ok(
                "link.move-to",
                json!({"ns": "container", "index": 3, "target": "host", "new-name": null}),
            )],
            &SHA.repeat(32),
        );
        let h = e.host.expect("host");
        assert!(h.move_links && e.container.move_links);
        assert_eq!(h.names, None);
        assert!(notes.iter().any(|n| n.contains("default")), "{notes:?}");
    }

    #[test]
    fn a_call_the_catalog_does_not_know_needs_nothing() {
        // What a call needs comes from its capability catalog row alone.
        let unknown = ok(
            "link.set-everything",
            json!({"ns": "host", "index": 2, "name": "veth1a2b3c4d"}),
        );
        assert_eq!(needs_noted(&unknown), (Vec::new(), Vec::new()));
        let e = parsed(&[unknown]);
        assert!(e.host.is_none() && e.container == NsGrant::default());
        // Its catalog row is what makes a known call count.
        let known = ok("link.set-up", json!({"ns": "host", "index": 2, "up": true}));
        assert_eq!(needs(&known), vec![Need::Modify(Kind::Host)]);
    }

    #[test]
    fn records_of_other_plugins_and_builds_are_not_used() {
        let mut other = ok("link.list", json!({"ns": "container"}));
        other.plugin = "theirs".into();
        let mut rebuilt = ok("link.list", json!({"ns": "container"}));
        rebuilt.sha256 = "cd".repeat(32);
        let e = select(vec![other.clone()], "mine", &SHA.repeat(32), "log").expect_err("none");
        assert!(e.to_string().contains("no record"), "{e}");
        let e = select(vec![rebuilt.clone()], "mine", &SHA.repeat(32), "log").expect_err("pin");
        assert!(e.to_string().contains(&"cd".repeat(32)), "{e}");
        let mine = ok("link.list", json!({"ns": "container"}));
        let got = select(vec![other, rebuilt, mine], "mine", &SHA.repeat(32), "log").expect("one");
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn empty_runs_give_an_empty_valid_entry() {
        let e = parsed(&[ok("netns.container", json!({}))]);
        assert_eq!(e.container, NsGrant::default());
        let v = entry_json(&e);
        assert_eq!(v, json!({"sha256": SHA.repeat(32)}));
    }

    #[test]
    fn grants_only_refused_calls_needed_are_noted_first() {
        let denied = about(by_policy(rec(
            "ADD",
            "link.set-up",
            json!({"ns": "host", "index": 2, "up": true}),
            "denied",
            Some("host link \"eth0\" (index 2) was not created by wasmcni and matches none of plugins.mine.host.links"),
        ), "plugins.mine.host.links"), "eth0", 2);
        let wide = by_policy(
            rec(
                "ADD",
                "route.add",
                json!({"ns": "host", "route": {"destination": "10.0.0.0/8"}}),
                "denied",
                Some("plugins.mine.host.routes is false"),
            ),
            "plugins.mine.host.routes",
        );
        let store = by_policy(
            rec(
                "ADD",
                "ipam-store.[static]store.open",
                json!({"data-dir": "/etc"}),
                "denied",
                Some("IPAM data dir /etc lies under none of plugins.mine.ipam-roots"),
            ),
            "plugins.mine.ipam-roots",
        );
        let records = [
            ok(
                "link.set-up",
                json!({"ns": "container", "index": 1, "up": true}),
            ),
            ok("netns.host", json!({})),
            ok(
                "address.add",
                json!({"ns": "host", "link-index": 9, "prefix": "10.1.2.3/32"}),
            ),
            denied,
            wide,
            store,
        ];
        let e = parsed(&records);
        let h = e.host.clone().expect("host");
        // Kept, as audit2allow keeps them ...
        assert_eq!(h.links, vec![Pattern("eth0".into())]);
        assert!(h.modify && h.routes && e.container.modify);
        assert_eq!(e.ipam_roots, vec![PathBuf::from("/etc")]);
        assert_eq!(h.prefixes, vec!["10.0.0.0/8".parse().expect("net")]);
        // ... but named, first.
        let (_, notes) = derive(&records, &SHA.repeat(32));
        let refused: Vec<&String> = notes
            .iter()
            .take_while(|n| n.contains("only from refused calls"))
            .collect();
        for g in [
            "host.links: [\"eth0\"]",
            "host.modify",
            "host.routes",
            "host.prefixes: [\"10.0.0.0/8\"]",
            "ipam-roots: [\"/etc\"]",
        ] {
            assert!(
                refused.iter().any(|n| n.starts_with(&format!("{g} only"))),
                "{g} not noted first: {notes:?}"
            );
        }
        assert!(
            refused[0].ends_with("the plugin was denied it; grant it only if it needs it"),
            "{notes:?}"
        );
        // What an allowed call needed is not flagged (nor the host entry
        // an allowed host call implies).
        for g in ["container.modify", "host only", "host.addresses"] {
            assert!(!notes.iter().any(|n| n.starts_with(g)), "{g}: {notes:?}");
        }
        assert_eq!(refused.len(), 5, "{notes:?}");
    }

    #[test]
    fn names_and_paths_from_the_log_are_checked_before_they_become_grants() {
        let mut star = ok(
            "link.set-up",
            json!({"ns": "host", "index": 4, "up": false}),
        );
        star.extra
            .insert("node-links".into(), json!({"4": {"name": "*"}}));
        let mut long = ok(
            "link.set-mtu",
            json!({"ns": "host", "index": 5, "mtu": 1400}),
        );
        long.extra.insert(
            "node-links".into(),
            json!({"5": {"name": "a-name-longer-than-15"}}),
        );
        let spaced = about(
            by_policy(
                rec(
                    "ADD",
                    "link.set-mtu",
                    json!({"ns": "host", "index": 6, "mtu": 1400}),
                    "denied",
                    Some("host link \"a b\" (index 6) matches none of plugins.mine.host.links"),
                ),
                "plugins.mine.host.links",
            ),
            "a b",
            6,
        );
        let records = [
            star,
            long,
            spaced,
            ok("link.create-dummy", json!({"ns": "host", "name": "*"})),
            ok("link.create-dummy", json!({"ns": "host", "name": ".."})),
            ok("link.create-dummy", json!({"ns": "host", "name": "dummy0"})),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.*.forwarding", "value": "1"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.dummy0.forwarding", "value": "1"}),
            ),
            ok("ipam-store.[static]store.open", json!({"data-dir": "/"})),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "var/lib"}),
            ),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/cni/../../../etc"}),
            ),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/./x"}),
            ),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/mine"}),
            ),
            ok("delegate.run", json!({"plugin-type": "../../bin/sh"})),
            ok("delegate.run", json!({"plugin-type": "host-local"})),
        ];
        let e = parsed(&records);
        let h = e.host.expect("host");
        assert!(h.links.is_empty() && h.bridges.is_empty(), "{:?}", h.links);
        assert_eq!(h.names, Some(vec![Pattern("dummy0".into())]));
        assert_eq!(
            h.sysctls,
            vec![Pattern("net.ipv4.conf.dummy0.forwarding".into())]
        );
        assert_eq!(e.ipam_roots, vec![PathBuf::from("/var/lib/mine")]);
        assert_eq!(e.delegates, vec!["host-local".to_owned()]);
        let (_, notes) = derive(&records, &SHA.repeat(32));
        for bad in [
            "\"*\"",
            "\"a-name-longer-than-15\"",
            "\"a b\"",
            "\"..\"",
            "\"net.ipv4.conf.*.forwarding\"",
            "\"/\"",
            "\"var/lib\"",
            "\"/var/lib/cni/../../../etc\"",
            "\"/var/lib/./x\"",
            "\"../../bin/sh\"",
        ] {
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains(bad) && n.contains("left out")
                        || n.contains(bad) && n.contains("no `names` grant")),
                "{bad}: {notes:?}"
            );
        }
    }

    #[test]
    fn generalization_that_would_be_too_broad_keeps_the_name_with_a_note() {
        let mut node = ok(
            "link.create-veth",
            json!({"ns": "host", "name": "upl1a2b3c4d", "peer-ns": "container", "peer-name": "eth0"}),
        );
        // `upl*` would match the node's `uplink0`.
        node.extra
            .insert("node-links".into(), json!({"2": {"name": "uplink0"}}));
        let records = [
            node,
            ok(
                "link.create-dummy",
                json!({"ns": "host", "name": "0123456789ab"}),
            ),
            ok(
                "link.create-dummy",
                json!({"ns": "host", "name": "eth0123456"}),
            ),
            ok(
                "link.create-dummy",
                json!({"ns": "host", "name": "veth1a2b3c4d"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.c-012345.proxy_arp", "value": "1"}),
            ),
        ];
        let e = parsed(&records);
        let h = e.host.expect("host");
        assert_eq!(
            h.names,
            Some(vec![
                Pattern("upl1a2b3c4d".into()),
                Pattern("0123456789ab".into()),
                Pattern("eth0123456".into()),
                Pattern("veth*".into()),
            ])
        );
        assert_eq!(
            h.sysctls,
            vec![Pattern("net.ipv4.conf.c-012345.proxy_arp".into())]
        );
        for n in h.names.iter().flatten().chain(&h.sysctls) {
            let literal = n.0.split('*').next().unwrap_or("");
            assert!(!n.0.contains('*') || literal.len() >= 3, "{n:?}");
        }
        let (_, notes) = derive(&records, &SHA.repeat(32));
        for (name, why) in [
            ("upl1a2b3c4d", "\"uplink0\""),
            ("0123456789ab", "shorter than 3"),
            ("eth0123456", "node link name"),
            ("c-012345", "shorter than 3"),
        ] {
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains(&format!("{name:?} kept exact")) && n.contains(why)),
                "{name}: {notes:?}"
            );
        }
        assert!(
            notes
                .iter()
                .any(|n| n.contains("\"veth1a2b3c4d\" became the pattern \"veth*\"")),
            "{notes:?}"
        );
    }

    #[test]
    fn cni_ifname_becomes_a_star_in_the_container_namespace_only() {
        // The runtime's CNI_IFNAME is eth0, as a node uplink often is too.
        let records = [
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.eth0.proxy_arp", "value": "1"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "container", "key": "net.ipv4.conf.eth0.arp_notify", "value": "1"}),
            ),
        ];
        let e = parsed(&records);
        assert_eq!(
            e.host.expect("host").sysctls,
            vec![Pattern("net.ipv4.conf.eth0.proxy_arp".into())]
        );
        assert_eq!(
            e.container.sysctls,
            vec![Pattern("net.ipv4.conf.*.arp_notify".into())]
        );
    }
}

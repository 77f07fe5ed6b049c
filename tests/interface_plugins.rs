//! The default-policy grants of the interface plugins stacked on a master
//! (`macvlan`, `ipvlan`, `vlan`) under hostile use (S2): a plugin holding
//! exactly one of those grants (the scripted fixture) is denied every
//! operation just outside it — another link kind, creating in or changing
//! the node's namespace, changing, moving or deleting the master, a
//! passthru macvlan on a node link, host addresses, other settings — with
//! an audit record and no change anywhere. Their behaviour against the
//! reference plugins is in tests/cases/{macvlan,ipvlan,vlan}/
//! (tests/plugins.rs).
//!
//! The denials are decided before the kernel is asked, so they hold on
//! this machine's kernel, which lacks the ipvlan and vlan kinds.

mod support;

use serde_json::{json, Value};
use support::world::{assert_denied, default_entry, policy_with, World};

/// Creating a link of `kind` named `name` in `ns` on the node's `uplink`.
fn create(kind: &str, ns: &str, name: &str) -> Value {
    json!({"call": format!("link.create-{kind}"), "ns": ns, "name": name,
           "master-ns": "host", "master": "uplink", "vlan-id": 10})
}

/// Operations just outside the default grant of `plugin`.
fn hostile(plugin: &str) -> Vec<Value> {
    let mut ops: Vec<Value> = ["macvlan", "ipvlan", "vlan"]
        .iter()
        .filter(|k| **k != plugin)
        .map(|k| create(k, "container", "eth9"))
        .collect();
    ops.extend([
        // Its own kind, but in the node's namespace.
        create(plugin, "host", "cnitestm1"),
        json!({"call": "link.create-veth", "ns": "container", "name": "eth9",
               "peer-ns": "host", "peer-name": "cnitestv1"}),
        json!({"call": "link.create-dummy", "ns": "container", "name": "eth9"}),
        // The master (or any node link) is used, never changed.
        json!({"call": "link.set-up", "ns": "host", "link": "uplink", "up": false}),
        json!({"call": "link.set-mtu", "ns": "host", "link": "uplink", "mtu": 1400}),
        json!({"call": "link.set-promiscuous", "ns": "host", "link": "uplink", "on": true}),
        json!({"call": "link.delete", "ns": "host", "link": "uplink"}),
        json!({"call": "link.move-to", "ns": "host", "link": "uplink", "target": "container"}),
        json!({"call": "address.add", "ns": "host", "link": "uplink", "prefix": "10.9.9.9/32"}),
        json!({"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.uplink.arp_notify",
               "value": "1"}),
        json!({"call": "sysctl.set", "ns": "container", "key": "net.ipv4.ip_forward",
               "value": "1"}),
    ]);
    if plugin == "macvlan" {
        // Passthru mirrors the macvlan's MAC and promiscuity onto its
        // master: a node link may not be one.
        let mut p = create("macvlan", "container", "eth9");
        p["mode"] = json!("passthru");
        ops.push(p);
    }
    ops
}

#[test]
fn s2_macvlan_ipvlan_vlan_default_grants_deny_everything_outside_them() {
    support::require_root();
    let world = World::new("s2ifp");
    for plugin in ["macvlan", "ipvlan", "vlan"] {
        for op in hostile(plugin) {
            assert_denied(&world, plugin, &default_entry(plugin), &op, |r| {
                r["call"] == op["call"]
            });
        }
    }
}

/// Inside the grant: macvlan makes a bridge-mode macvlan in the container
/// on a node link, which the journal undoes when the plugin fails.
#[test]
fn macvlan_default_grant_creates_on_a_node_master_and_is_undone() {
    support::require_root();
    let world = World::new("s2ifq");
    let before = world.snapshot();
    let run = world.run(
        "ADD",
        &policy_with(default_entry("macvlan")),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1,
                "ops": [create("macvlan", "container", "eth9"),
                        {"call": "link.set-up", "ns": "container", "link": "eth9", "up": true}]}),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    let report = run.json();
    for (i, r) in report["results"]
        .as_array()
        .expect("results")
        .iter()
        .enumerate()
    {
        assert!(r.get("ok").is_some(), "op {i}: {report}");
    }
    support::assert_same(
        &before,
        &world.snapshot(),
        "macvlan's own link was not undone",
    );
}

/// DEL with `linkInContainer` once the container's namespace is gone: the
/// master inside it cannot be looked up, nothing is left there, and the
/// spec asks DEL to succeed (it used to fail loading the config). Run for
/// macvlan here and, the config being refused before any link kind is
/// needed, for ipvlan and vlan too.
#[test]
fn del_with_link_in_container_succeeds_once_the_namespace_is_gone() {
    support::require_root();
    let node = support::Netns::new("lic-n");
    let gone = std::path::PathBuf::from(format!("/run/netns/wcni-lic-gone-{}", std::process::id()));
    for plugin in ["macvlan", "ipvlan", "vlan"] {
        let conf = json!({"cniVersion": "1.0.0", "name": "lic", "type": plugin,
                          "master": "eth9", "vlanId": 10, "linkInContainer": true,
                          "ipam": {"type": "static"}});
        let stdin = conf.to_string().into_bytes();
        let run = support::Invoke::wasmcni_run(plugin, &stdin)
            .cni("DEL", &gone, "eth0")
            .in_netns(&node)
            .run();
        assert_eq!(run.code, 0, "{plugin}: {run:?}");
        // With the namespace there but the master missing: DEL does not
        // look the master up (nothing of it is needed to remove the
        // container's link), so it succeeds — a runtime's cleanup after an
        // ADD that failed on the missing master must complete.
        let ctr = support::Netns::new("lic-c");
        let run = support::Invoke::wasmcni_run(plugin, &stdin)
            .cni("DEL", &ctr.path, "eth0")
            .in_netns(&node)
            .run();
        assert_eq!(
            run.code, 0,
            "{plugin}: DEL with the master missing: {run:?}"
        );
    }
}

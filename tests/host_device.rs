//! `host-device`'s authority and the attachment record that returns its
//! device (S2, and the "never leaks" half of host-device).
//!
//! - The default grant lets a plugin take only the node device the
//!   network config names (`config-links`): every other node link, and
//!   every change to the device while it is the node's, is denied with an
//!   audit record and nothing changed.
//! - A device a successful ADD took comes back on DEL exactly as it was —
//!   name, index, state, MTU, addresses, routes — even when the plugin's
//!   DEL forgets it or asks for another name: the host keeps the record.
//! - An ADD whose record cannot be written fails, and the device stays.
//!
//! The scripted fixture stands in for the plugin (a hostile or buggy
//! `host-device` holding its default grant); tests/cases/host-device/ has
//! the real plugin against the reference.

mod support;

use serde_json::{json, Value};
use support::world::{assert_denied_with, default_entry, policy_with, World};

/// The config of a host-device network naming `mst0` as its device.
fn conf(ops: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "device": "mst0", "ops": ops})
}

/// Gives the node's `mst0` some state worth returning: admin state, MTU,
/// addresses of both families, a route through it, per-link settings.
fn dress(world: &World) {
    for args in [
        &["link", "set", "mst0", "mtu", "1300"][..],
        &["link", "set", "mst0p", "up"],
        &["link", "set", "mst0", "up"],
        &["addr", "add", "10.66.0.5/24", "dev", "mst0"],
        &["addr", "add", "fd66::5/64", "dev", "mst0", "nodad"],
        &[
            "route",
            "add",
            "10.67.0.0/16",
            "via",
            "10.66.0.1",
            "dev",
            "mst0",
        ],
    ] {
        world.node.ip(args);
    }
    // Per-link settings the move resets to the container's defaults.
    for (key, value) in [
        ("ipv4/conf/mst0/arp_notify", "1"),
        ("ipv6/conf/mst0/accept_ra", "0"),
        ("ipv4/neigh/mst0/base_reachable_time_ms", "12345"),
    ] {
        let ok = std::process::Command::new("ip")
            .args(["netns", "exec", &world.node.name, "sh", "-c"])
            .arg(format!("echo {value} > /proc/sys/net/{key}"))
            .status()
            .expect("ip netns exec")
            .success();
        assert!(ok, "setting {key}");
    }
}

/// A world whose `mst0` has state worth returning ([`dress`]), its
/// snapshot before anything is taken, and host-device's default grant.
fn dressed(tag: &str) -> (World, Value, Value) {
    let world = World::new(tag);
    dress(&world);
    let before = world.snapshot();
    (world, before, policy_with(default_entry("host-device")))
}

/// A successful ADD that takes `mst0` ([`take`]).
fn add_taking(world: &World, policy: &Value) -> support::Run {
    let add = world.run("ADD", policy, &conf(take()), &[]);
    assert_eq!(add.code, 0, "{add:?}");
    add
}

fn take() -> Value {
    json!([
        {"call": "link.move-to", "ns": "host", "link": "mst0", "target": "container",
         "new-name": "eth0"},
        {"call": "link.set-up", "ns": "container", "link": "eth0", "up": true},
        {"call": "address.add", "ns": "container", "link": "eth0", "prefix": "10.68.0.2/24"},
    ])
}

fn records(world: &World) -> Vec<std::path::PathBuf> {
    fn walk(d: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(&world.state_dir(), &mut out);
    out
}

#[test]
fn s2_host_device_default_grant_takes_only_the_device_the_config_names() {
    support::require_root();
    let world = World::new("s2hd");
    let entry = default_entry("host-device");
    let device = json!({"device": "mst0"});
    let to_ctr = |link: &str| {
        json!({"call": "link.move-to", "ns": "host", "link": link, "target": "container",
               "new-name": "eth9"})
    };
    let ops = [
        // Node links the config does not name: the uplink, a link the
        // wide grant names by pattern, another attachment's link.
        to_ctr("uplink"),
        to_ctr("cnitestpre"),
        to_ctr("other0"),
        to_ctr("mst0p"),
        // The named device, but changed in place (only `move` is granted).
        json!({"call": "link.set-mtu", "ns": "host", "link": "mst0", "mtu": 1400}),
        json!({"call": "link.set-up", "ns": "host", "link": "mst0", "up": true}),
        json!({"call": "link.delete", "ns": "host", "link": "mst0"}),
        json!({"call": "address.add", "ns": "host", "link": "mst0", "prefix": "10.9.9.9/32"}),
        json!({"call": "link.create-veth", "ns": "container", "name": "eth9",
               "peer-ns": "host", "peer-name": "veth9"}),
        // Nothing moves into the node under a name of the plugin's
        // choosing (`names` is empty): not the config's device name (free
        // while the device is out), not a `veth*` or `cni*` one.
        json!({"call": "link.move-to", "ns": "container", "link": "lo", "target": "host",
               "new-name": "mst0"}),
        json!({"call": "link.move-to", "ns": "container", "link": "lo", "target": "host",
               "new-name": "veth0"}),
        json!({"call": "link.move-to", "ns": "container", "link": "lo", "target": "host",
               "new-name": "eth1"}),
    ];
    for op in &ops {
        assert_denied_with(&world, "host-device", &entry, &device, op, |r| {
            r["call"] == op["call"]
        });
    }
    // Without a device in the config, the device is not the plugin's.
    assert_denied_with(
        &world,
        "host-device",
        &entry,
        &json!({}),
        &to_ctr("mst0"),
        |r| r["call"] == "link.move-to",
    );
    // Another key names another device: hwaddr of the uplink names the
    // uplink, not mst0.
    let uplink_mac: Value =
        serde_json::from_str(&world.node.ip(&["-j", "link", "show", "uplink"])).expect("json");
    let mac = uplink_mac[0]["address"].as_str().expect("mac").to_owned();
    assert_denied_with(
        &world,
        "host-device",
        &entry,
        &json!({"hwaddr": mac}),
        &to_ctr("mst0"),
        |r| r["call"] == "link.move-to",
    );
}

#[test]
fn a_taken_device_comes_back_exactly_even_when_the_plugins_del_forgets_it() {
    support::require_root();
    let (world, before, policy) = dressed("hdrec");
    let add = add_taking(&world, &policy);
    let results = add.json()["results"].clone();
    assert!(
        results
            .as_array()
            .expect("results")
            .iter()
            .all(|r| r.get("ok").is_some()),
        "{results}"
    );
    let links: Value = serde_json::from_str(&world.node.ip(&["-j", "link", "show"])).expect("json");
    assert!(
        !links
            .as_array()
            .expect("links")
            .iter()
            .any(|l| l["ifname"] == "mst0"),
        "mst0 is still on the node"
    );
    let recs = records(&world);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(&recs[0]).expect("record"))
        .expect("record is JSON");
    assert_eq!(rec["borrowed"][0]["name"], "mst0", "{rec}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&recs[0])
            .expect("meta")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    // A DEL that does nothing: the host returns the device.
    let _ = std::fs::remove_file(world.audit_path());
    let del = world.run("DEL", &policy, &conf(json!([])), &[]);
    assert_eq!(del.code, 0, "{del:?}");
    assert!(
        del.stderr.contains("returning it"),
        "the host says what it returned: {del:?}"
    );
    assert!(
        world
            .audit()
            .iter()
            .any(|r| r["call"] == "record.return" && r["args"]["link"] == "mst0"),
        "no record.return audit record"
    );
    support::assert_same(&before, &world.snapshot(), "after a DEL that forgot mst0");

    // Again, with a DEL that tries to bring it back under another name:
    // refused, and the host returns it as it was all the same.
    add_taking(&world, &policy);
    let del = world.run(
        "DEL",
        &policy,
        &conf(
            json!([{"call": "link.move-to", "ns": "container", "link": "eth0",
                      "target": "host", "new-name": "veth0"}]),
        ),
        &[],
    );
    assert_eq!(del.code, 0, "{del:?}");
    assert_eq!(
        del.json()["results"][0]["error"],
        "access-denied",
        "{del:?}"
    );
    support::assert_same(
        &before,
        &world.snapshot(),
        "after a DEL naming another name",
    );

    // And with the plugin's own DEL moving it back: the record's way.
    add_taking(&world, &policy);
    let del = world.run(
        "DEL",
        &policy,
        &conf(
            json!([{"call": "link.move-to", "ns": "container", "link": "eth0",
                      "target": "host"}]),
        ),
        &[],
    );
    assert_eq!(del.code, 0, "{del:?}");
    assert!(del.json()["results"][0].get("ok").is_some(), "{del:?}");
    assert!(!del.stderr.contains("returning it"), "{del:?}");
    support::assert_same(&before, &world.snapshot(), "after the plugin's own DEL");
    // DEL again: nothing recorded, nothing to do.
    let del = world.run("DEL", &policy, &conf(json!([])), &[]);
    assert_eq!(del.code, 0, "{del:?}");
    support::assert_same(&before, &world.snapshot(), "after a second DEL");
}

#[test]
fn an_add_whose_record_cannot_be_written_fails_and_leaves_the_device() {
    support::require_root();
    let (world, before, policy) = dressed("hdnorec");
    // The state root is a regular file: no record can be written below it.
    let blocker = world.dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").expect("file");
    let add = world.run(
        "ADD",
        &policy,
        &conf(take()),
        &[("WASMCNI_STATE_DIR", &blocker.display().to_string())],
    );
    assert_ne!(add.code, 0, "{add:?}");
    let e: Value = serde_json::from_str(&add.stdout).expect("a CNI error");
    assert_eq!(e["code"], 5, "{add:?}");
    assert!(
        e["msg"]
            .as_str()
            .is_some_and(|m| m.contains("cannot record how to return host links")),
        "{add:?}"
    );
    support::assert_same(&before, &world.snapshot(), "a failed record left state");
}

/// The index of `name` in `ns`.
fn index_of(ns: &support::Netns, name: &str) -> u64 {
    let v: Value = serde_json::from_str(&ns.ip(&["-j", "link", "show", name])).expect("json");
    v[0]["ifindex"].as_u64().expect("ifindex")
}

/// Whether `ns` has a link called `name`.
fn has(ns: &support::Netns, name: &str) -> bool {
    let v: Value = serde_json::from_str(&ns.ip(&["-j", "link", "show"])).expect("json");
    v.as_array()
        .expect("links")
        .iter()
        .any(|l| l["ifname"] == name)
}

/// A container root that deletes the device and makes a link of its own
/// at the device's index (`ip link add … index N`): the host never moves
/// that link to the node under the device's name and with its addresses.
#[test]
fn a_link_made_at_a_recorded_index_is_never_returned_to_the_node() {
    support::require_root();
    let (world, _, policy) = dressed("hdimp");
    add_taking(&world, &policy);
    let index = index_of(&world.ctr, "eth0").to_string();
    world.ctr.ip(&["link", "del", "eth0"]);
    world.ctr.ip(&[
        "link", "add", "eth0", "index", &index, "type", "veth", "peer", "name", "imp0",
    ]);
    assert_eq!(index_of(&world.ctr, "eth0").to_string(), index);
    let del = world.run("DEL", &policy, &conf(json!([])), &[]);
    assert_eq!(del.code, 0, "{del:?}");
    assert!(
        has(&world.ctr, "eth0"),
        "the impostor left the container: {del:?}"
    );
    assert!(
        !has(&world.node, "mst0"),
        "a link took mst0's place on the node"
    );
    assert!(del.stderr.contains("no longer in the container"), "{del:?}");
    assert!(records(&world).is_empty(), "{:?}", records(&world));
    // Nor can the plugin's own DEL return it through the record.
    let add2 = world.run("ADD", &policy, &conf(json!([])), &[]);
    assert_eq!(add2.code, 0, "{add2:?}");
}

/// A hostile DEL can neither delete the device nor take it again after
/// the host returned it.
#[test]
fn a_del_can_neither_delete_nor_retake_the_device() {
    support::require_root();
    let (world, before, policy) = dressed("hddel");
    add_taking(&world, &policy);
    let del = world.run(
        "DEL",
        &policy,
        &conf(json!([
            {"call": "link.delete", "ns": "container", "link": "eth0"},
            {"call": "link.move-to", "ns": "container", "link": "eth0", "target": "host"},
            {"call": "link.move-to", "ns": "host", "link": "mst0", "target": "container",
             "new-name": "eth0"},
        ])),
        &[],
    );
    assert_eq!(del.code, 0, "{del:?}");
    let results = del.json()["results"].clone();
    assert_eq!(results[0]["error"], "access-denied", "delete: {results}");
    assert!(results[1].get("ok").is_some(), "return: {results}");
    assert_eq!(results[2]["error"], "access-denied", "retake: {results}");
    support::assert_same(&before, &world.snapshot(), "after a hostile DEL");
}

/// A plugin that may delegate to one holding `config-links` cannot point
/// it at another device: the delegate's devices are the runtime's config's,
/// not the config its caller hands it.
#[test]
fn a_delegate_takes_only_the_device_of_the_runtimes_config() {
    support::require_root();
    let world = World::new("hddlg");
    let before = world.snapshot();
    let mut entry = default_entry("host-device");
    entry["delegates"] = json!(["scripted"]);
    let to_ctr = |link: &str| {
        json!({"call": "link.move-to", "ns": "host", "link": link, "target": "container",
               "new-name": "eth9"})
    };
    let inner = |link: &str| {
        json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "device": link,
               "ops": [to_ctr(link)]})
    };
    let run = world.run(
        "ADD",
        &policy_with(entry),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "device": "mst0",
                "exit": 1,
                "ops": [{"call": "delegate.run", "type": "scripted", "command": "ADD",
                         "config": inner("uplink")},
                        {"call": "delegate.run", "type": "scripted", "command": "ADD",
                         "config": inner("mst0")}]}),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    let results = run.json()["results"].clone();
    let out: Value =
        serde_json::from_str(results[0]["ok"].as_str().expect("delegate output")).expect("json");
    assert_eq!(
        out["results"][0]["error"], "access-denied",
        "uplink: {results}"
    );
    let out: Value =
        serde_json::from_str(results[1]["ok"].as_str().expect("delegate output")).expect("json");
    assert!(out["results"][0].get("ok").is_some(), "mst0: {results}");
    // The caller fails (exit 1): everything is undone.
    support::assert_same(&before, &world.snapshot(), "after the failed ADD");
}

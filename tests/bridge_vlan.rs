//! `bridge`'s VLAN options beyond Debian's 1.1.1 reference (which has only
//! `vlan`: tests/cases/bridge/09–10 run that against it): `vlanTrunk` and
//! `preserveDefaultVlan`, as upstream containernetworking/plugins defines
//! them, through the real libcni and an installed wasmcni bin dir.
//!
//! - Bad trunk entries are refused with upstream's messages before anything
//!   is created (here: config checks need no kernel support).
//! - The port tables (`bridge vlan show`) for access, trunk and mixed
//!   ports, with and without VLAN 1 kept, on a bridge made with VLAN
//!   filtering; DEL takes the port away (in tests/vm/: this kernel has no
//!   bridge VLAN filtering).
//! - `link.set-port-vlans` under the default `bridge` grant (scripted
//!   plugin): a port joins only the VLANs the runtime's network config
//!   names (`config-vlans`), never another tenant's; and a failed ADD's
//!   undo gives a port that left its bridge (or the namespace) its VLANs
//!   back (in tests/vm/ too).

mod support;

use serde_json::{json, Value};
use support::net::Net;
use support::world::{assert_denied_with, default_entry, policy_with, wide, World};
use support::Netns;

fn bridge(extra: Value) -> Value {
    let mut conf = json!({"type": "bridge", "bridge": "cnitrunk0",
                          "ipam": {"type": "host-local", "subnet": "10.93.0.0/24", "dataDir": "@data"}});
    for (k, v) in extra.as_object().expect("object") {
        conf[k] = v.clone();
    }
    conf
}

#[test]
fn bad_trunks_are_refused_with_upstreams_messages_and_nothing_is_made() {
    support::require_root();
    for (trunk, msg) in [
        (
            json!([{"minID": 0, "maxID": 10}]),
            "incorrect trunk minID parameter",
        ),
        (
            json!([{"minID": 5, "maxID": 4095}]),
            "incorrect trunk maxID parameter",
        ),
        (
            json!([{"minID": 20, "maxID": 10}]),
            "minID is greater than maxID in trunk parameter",
        ),
        (
            json!([{"maxID": 10}]),
            "minID and maxID should be configured simultaneously, minID is missing",
        ),
        (
            json!([{"minID": 10}]),
            "minID and maxID should be configured simultaneously, maxID is missing",
        ),
        (json!([{"id": 0}]), "incorrect trunk id parameter"),
        (json!([{"id": 5000}]), "incorrect trunk id parameter"),
    ] {
        let net = Net::new("brtb");
        let before = (net.node.full_snapshot(), net.ctr.full_snapshot());
        let list = net.conflist("1.0.0", &bridge(json!({"vlanTrunk": trunk})));
        let add = net.call("add", &list, &net.ctr.path, "", "");
        let e = add
            .cni_error()
            .unwrap_or_else(|| panic!("{trunk}: no CNI error: {add:?}"));
        assert_eq!(e["msg"], msg, "{trunk}: {add:?}");
        assert_eq!(e["code"], 999, "{trunk}: {add:?}");
        support::assert_same(
            &json!(before),
            &json!((net.node.full_snapshot(), net.ctr.full_snapshot())),
            &format!("{trunk}: a refused config changed something"),
        );
    }
}

/// The VLANs of the container's port, as `bridge vlan show` gives them:
/// `vid` with `P` (PVID) and `U` (untagged) marks, in VID order.
fn port_table(net: &Net) -> Vec<String> {
    let links: Value =
        serde_json::from_str(&net.node.ip(&["-j", "link", "show", "master", "cnitrunk0"]))
            .expect("ip -j");
    let ports: Vec<&str> = links
        .as_array()
        .expect("links")
        .iter()
        .filter_map(|l| l["ifname"].as_str())
        .collect();
    assert_eq!(ports.len(), 1, "one port: {ports:?}");
    let vlans = port_vlans(&net.node, ports[0]);
    assert!(!vlans.is_empty(), "no VLANs for {}", ports[0]);
    vlans
}

#[test]
fn trunk_and_access_ports_get_upstreams_vlan_tables() {
    support::require_root();
    if !support::vm::kernel_has("bridge-vlan") {
        assert!(
            !support::vm::inside(),
            "the VM's kernel lacks bridge vlan filtering"
        );
        support::vm::rerun_this_test("trunk_and_access_ports_get_upstreams_vlan_tables");
        return;
    }
    for (extra, want) in [
        // Trunk only: VLAN 1 stays the native (PVID, untagged) VLAN.
        (
            json!({"vlanTrunk": [{"minID": 10, "maxID": 12}, {"id": 20}, {"id": 11}]}),
            &["1 PU", "10", "11", "12", "20"][..],
        ),
        (
            json!({"vlanTrunk": [{"id": 20}], "preserveDefaultVlan": false}),
            &["1 PU", "20"][..],
        ),
        // Access port without VLAN 1.
        (
            json!({"vlan": 30, "preserveDefaultVlan": false}),
            &["30 PU"][..],
        ),
        // Access and trunk, VLAN 1 kept (untagged, no longer the PVID).
        (
            json!({"vlan": 30, "vlanTrunk": [{"id": 40}], "preserveDefaultVlan": true}),
            &["1 U", "30 PU", "40"][..],
        ),
        // The same by default: VLAN 1 goes (upstream v1.8.0+; true in
        // v1.3-v1.7).
        (
            json!({"vlan": 30, "vlanTrunk": [{"id": 40}]}),
            &["30 PU", "40"][..],
        ),
        // A trunk VLAN equal to `vlan` ends tagged (upstream adds the
        // trunk after the access VLAN).
        (
            json!({"vlan": 30, "vlanTrunk": [{"id": 30}], "preserveDefaultVlan": false}),
            &["30"][..],
        ),
    ] {
        let net = Net::new("brtv");
        let list = net.conflist("1.0.0", &bridge(extra.clone()));
        let add = net.call("add", &list, &net.ctr.path, "", "");
        assert_eq!(add.code, 0, "{extra}: {add:?}");
        assert_eq!(port_table(&net), want, "{extra}");
        let br: Value =
            serde_json::from_str(&net.node.ip(&["-d", "-j", "link", "show", "cnitrunk0"]))
                .expect("ip -j");
        assert_eq!(
            br[0]["linkinfo"]["info_data"]["vlan_filtering"], 1,
            "{extra}: the new bridge filters by VLAN"
        );
        let del = net.call("del", &list, &net.ctr.path, "", "");
        assert_eq!(del.code, 0, "{extra}: {del:?}");
        let left = net.node.ip(&["-j", "link", "show", "master", "cnitrunk0"]);
        assert!(
            serde_json::from_str::<Value>(&left)
                .map(|v| v.as_array().is_some_and(Vec::is_empty))
                .unwrap_or(left.trim().is_empty()),
            "{extra}: a port is left: {left}"
        );
    }
}

/// Runs `test` here if this kernel filters bridge ports by VLAN, else
/// (named `name`) in the VM, whose kernel does.
fn with_bridge_vlans(name: &str, test: impl FnOnce()) {
    support::require_root();
    if support::vm::kernel_has("bridge-vlan") {
        test();
    } else {
        assert!(
            !support::vm::inside(),
            "the VM's kernel lacks bridge vlan filtering"
        );
        support::vm::rerun_this_test(name);
    }
}

/// `bridge -n NODE ARGS...`; panics on failure.
fn bridge_cmd(world: &World, args: &[&str]) {
    let out = std::process::Command::new("bridge")
        .args(["-n", &world.node.name])
        .args(args)
        .output()
        .expect("bridge (iproute2)");
    assert!(out.status.success(), "bridge {args:?}: {out:?}");
}

/// The VLANs of node port `port`, as `vid` with `P` (PVID) and `U`
/// (untagged) marks, in VID order.
fn vlans_of(world: &World, port: &str) -> Vec<String> {
    port_vlans(&world.node, port)
}

/// The VLANs of port `port` of `node`'s bridges (none if it has no
/// entry), as `vid` with `P` (PVID) and `U` (untagged) marks, in VID
/// order.
fn port_vlans(node: &Netns, port: &str) -> Vec<String> {
    let all = node.bridge_vlans();
    let Some(entry) = all
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["ifname"] == port)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for v in entry["vlans"].as_array().expect("vlans") {
        let first = v["vlan"].as_u64().expect("vid");
        let last = v["vlanEnd"].as_u64().unwrap_or(first);
        let flags: Vec<&str> = v["flags"]
            .as_array()
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mark = format!(
            "{}{}",
            if flags.contains(&"PVID") { "P" } else { "" },
            if flags.contains(&"Egress Untagged") {
                "U"
            } else {
                ""
            }
        );
        for vid in first..=last {
            out.push(format!("{vid} {mark}").trim_end().to_owned());
        }
    }
    out
}

/// A world whose node has a VLAN-filtering bridge `cnivlan0` (down, so
/// its carrier and addresses do not change as ports join; one the
/// default `bridge` entry may share: `bridges: ["cni*"]`) with two ports:
/// `vethvl0`, the attachment's own (its mark, as an earlier ADD leaves
/// it), in VLAN 1 as the kernel puts a new port; and `vethvl9`, another
/// tenant's, in VLAN 30 only.
fn vlan_world(tag: &str) -> World {
    let world = World::new(tag);
    let node = &world.node;
    node.ip(&[
        "link",
        "add",
        "cnivlan0",
        "type",
        "bridge",
        "vlan_filtering",
        "1",
    ]);
    for (port, alias) in [
        ("vethvl0", "wasmcni:n:ctr-test-1:eth0"),
        ("vethvl9", "wasmcni:n:another-tenant:eth0"),
    ] {
        let peer = format!("{port}p");
        node.ip(&["link", "add", port, "type", "veth", "peer", "name", &peer]);
        node.ip(&["link", "set", port, "alias", alias]);
        node.ip(&["link", "set", port, "master", "cnivlan0"]);
    }
    bridge_cmd(&world, &["vlan", "del", "dev", "vethvl9", "vid", "1"]);
    bridge_cmd(
        &world,
        &[
            "vlan", "add", "dev", "vethvl9", "vid", "30", "pvid", "untagged",
        ],
    );
    assert_eq!(vlans_of(&world, "vethvl0"), ["1 PU"]);
    world
}

fn set_vlans(vlans: Value) -> Value {
    json!({"call": "link.set-port-vlans", "ns": "host", "link": "vethvl0", "vlans": vlans})
}

/// Breach 10 of issue 24: a plugin holding the default `bridge` grant
/// cannot put its own port into a VLAN the runtime's network config does
/// not name (another tenant's VLAN 30): `access-denied` naming
/// `config-vlans`, audited, nothing changed. Nor with a grant without
/// `config-vlans`, nor through a delegate whose config its caller wrote.
#[test]
fn a_port_joins_only_vlans_the_network_config_names() {
    with_bridge_vlans("a_port_joins_only_vlans_the_network_config_names", || {
        let world = vlan_world("brvd");
        let entry = default_entry("bridge");
        let named = json!({"vlan": 10, "vlanTrunk": [{"minID": 20, "maxID": 21}]});
        let audited = |r: &Value| {
            r["call"] == "link.set-port-vlans"
                && r["reason"]
                    .as_str()
                    .is_some_and(|s| s.contains("plugins.scripted.host.config-vlans"))
        };
        for (conf, vlans) in [
            // Another tenant's VLAN, beside those the config names.
            (
                named.clone(),
                json!([{"vid": 1, "untagged": true}, {"vid": 10, "pvid": true, "untagged": true},
                       {"vid": 30}]),
            ),
            // As the access VLAN.
            (
                named.clone(),
                json!([{"vid": 30, "pvid": true, "untagged": true}]),
            ),
            // Just outside the trunk range.
            (
                named.clone(),
                json!([{"vid": 1, "pvid": true, "untagged": true}, {"vid": 22}]),
            ),
            // A config with no VLANs names none.
            (
                json!({}),
                json!([{"vid": 30, "pvid": true, "untagged": true}]),
            ),
            // A config the reference refuses (a VLAN out of range) names
            // none either.
            (
                json!({"vlan": 30, "vlanTrunk": [{"id": 5000}]}),
                json!([{"vid": 30, "pvid": true, "untagged": true}]),
            ),
        ] {
            assert_denied_with(&world, "bridge", &entry, &conf, &set_vlans(vlans), audited);
        }
        // A grant without `config-vlans`: not even a VLAN the config names.
        let mut bare = entry.clone();
        bare["host"]
            .as_object_mut()
            .expect("host grant")
            .remove("config-vlans");
        assert_denied_with(
            &world,
            "bridge",
            &bare,
            &named,
            &set_vlans(json!([{"vid": 10, "pvid": true, "untagged": true}])),
            audited,
        );
        // A delegate's VLANs are its runtime's config's, not those of the
        // config its caller hands it.
        let mut delegating = entry.clone();
        delegating["delegates"] = json!(["scripted"]);
        let before = world.snapshot();
        let inner = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "vlan": 30,
                           "ops": [set_vlans(json!([{"vid": 30, "pvid": true, "untagged": true}]))]});
        let run = world.run(
            "ADD",
            &policy_with(delegating),
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "vlan": 10,
                    "ops": [{"call": "delegate.run", "type": "scripted", "command": "ADD",
                             "config": inner}]}),
            &[],
        );
        assert_eq!(run.code, 0, "{run:?}");
        let results = run.json()["results"].clone();
        let out: Value = serde_json::from_str(results[0]["ok"].as_str().expect("delegate output"))
            .expect("json");
        assert_eq!(out["results"][0]["error"], "access-denied", "{results}");
        support::assert_same(&before, &world.snapshot(), "after the delegate's ADD");
        assert_eq!(vlans_of(&world, "vethvl0"), ["1 PU"]);
        assert_eq!(vlans_of(&world, "vethvl9"), ["30 PU"]);
    });
}

/// What the bridge plugin sets on its port is allowed: the config's
/// `vlan` and `vlanTrunk` VLANs, VLAN 1 as a trunk's native VLAN, and
/// whatever the port has already (the kernel's default PVID).
#[test]
fn a_port_joins_the_vlans_the_network_config_names() {
    with_bridge_vlans("a_port_joins_the_vlans_the_network_config_names", || {
        let world = vlan_world("brva");
        let entry = default_entry("bridge");
        let add = |conf: Value, vlans: Value| {
            let mut config = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                                    "ops": [set_vlans(vlans)]});
            for (k, v) in conf.as_object().expect("object") {
                config[k] = v.clone();
            }
            let run = world.run("ADD", &policy_with(entry.clone()), &config, &[]);
            assert_eq!(run.code, 0, "{run:?}");
            let results = run.json()["results"].clone();
            assert!(results[0].get("ok").is_some(), "{conf}: {results}");
        };
        // Access and trunk VLANs, VLAN 1 kept (untagged, no longer the
        // PVID); keys as Go matches them.
        add(
            json!({"Vlan": 10, "vlanTrunk": [{"MinID": 20, "maxID": 22}, {"id": 40}]}),
            json!([{"vid": 1, "untagged": true}, {"vid": 10, "pvid": true, "untagged": true},
                   {"vid": 20}, {"vid": 21}, {"vid": 22}, {"vid": 40}]),
        );
        assert_eq!(
            vlans_of(&world, "vethvl0"),
            ["1 U", "10 PU", "20", "21", "22", "40"]
        );
        // Leaving VLANs, keeping what the port has.
        add(
            json!({}),
            json!([{"vid": 10, "pvid": true, "untagged": true}]),
        );
        assert_eq!(vlans_of(&world, "vethvl0"), ["10 PU"]);
        // A trunk without `vlan`: VLAN 1 is its native VLAN, though the
        // port no longer has it.
        add(
            json!({"vlanTrunk": [{"id": 20}], "preserveDefaultVlan": false}),
            json!([{"vid": 1, "pvid": true, "untagged": true}, {"vid": 20}]),
        );
        assert_eq!(vlans_of(&world, "vethvl0"), ["1 PU", "20"]);
        assert_eq!(vlans_of(&world, "vethvl9"), ["30 PU"]);
    });
}

/// The undo of a failed ADD puts a pre-existing port's VLANs back exactly,
/// whatever took them (leaving the bridge, moving out of the namespace).
#[test]
fn the_undo_of_a_failed_add_restores_a_ports_vlans() {
    with_bridge_vlans("the_undo_of_a_failed_add_restores_a_ports_vlans", || {
        let world = vlan_world("brvu");
        // A port the wide grant names (`links: cnitest*`), in VLANs 10
        // (PVID, untagged) and 20, without VLAN 1.
        world.node.ip(&[
            "link",
            "add",
            "cnitestvp",
            "type",
            "veth",
            "peer",
            "name",
            "cnitestvpp",
        ]);
        world
            .node
            .ip(&["link", "set", "cnitestvp", "master", "cnivlan0"]);
        bridge_cmd(&world, &["vlan", "del", "dev", "cnitestvp", "vid", "1"]);
        for vid in [&["20"][..], &["10", "pvid", "untagged"]] {
            let mut args = vec!["vlan", "add", "dev", "cnitestvp", "vid"];
            args.extend(vid);
            bridge_cmd(&world, &args);
        }
        assert_eq!(vlans_of(&world, "cnitestvp"), ["10 PU", "20"]);
        // Another bridge the grant may use (`bridges: cnibr*`), with a
        // port already (an empty bridge takes its first port's MAC).
        world.node.ip(&["link", "add", "cnibrx0", "type", "bridge"]);
        world.node.ip(&[
            "link", "add", "cnibrxp", "type", "veth", "peer", "name", "cnibrxq",
        ]);
        world
            .node
            .ip(&["link", "set", "cnibrxp", "master", "cnibrx0"]);
        // The kernel lists bridge ports' VLANs in the order the ports
        // joined the namespace: a port moved out and back comes last.
        let snapshot = || {
            let mut s = world.snapshot();
            if let Some(v) = s["node"]["vlans"].as_array_mut() {
                v.sort_by_key(|e| e["ifname"].to_string());
            }
            s
        };
        let before = snapshot();
        for ops in [
            json!([{"call": "link.set-master", "ns": "host", "link": "cnitestvp", "master": null}]),
            json!([{"call": "link.set-master", "ns": "host", "link": "cnitestvp",
                    "master": "cnibrx0"}]),
            json!([{"call": "link.move-to", "ns": "host", "link": "cnitestvp",
                    "target": "container", "new-name": "eth7"}]),
        ] {
            let run = world.run(
                "ADD",
                &policy_with(wide()),
                &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1,
                        "ops": ops}),
                &[],
            );
            assert_eq!(run.code, 1, "{ops}: {run:?}");
            let results = run.json()["results"].clone();
            assert!(results[0].get("ok").is_some(), "{ops}: {results}");
            assert_eq!(vlans_of(&world, "cnitestvp"), ["10 PU", "20"], "{ops}");
            support::assert_same(&before, &snapshot(), &format!("{ops}: after the undo"));
        }
    });
}

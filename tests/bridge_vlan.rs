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

mod support;

use serde_json::{json, Value};
use support::net::Net;

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
    let vlans = net.node.bridge_vlans();
    let entry = vlans
        .as_array()
        .expect("vlans")
        .iter()
        .find(|e| e["ifname"] == ports[0])
        .unwrap_or_else(|| panic!("no VLANs for {}: {vlans}", ports[0]));
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
            out.push(if mark.is_empty() {
                vid.to_string()
            } else {
                format!("{vid} {mark}")
            });
        }
    }
    out
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
            json!({"vlan": 30, "vlanTrunk": [{"id": 40}]}),
            &["1 U", "30 PU", "40"][..],
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

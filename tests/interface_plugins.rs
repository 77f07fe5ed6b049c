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
//!
//! And bridge options of upstream releases after Debian's 1.1.1 (the
//! differential's oracle ignores them), checked against upstream's
//! behaviour: `portIsolation`, `disableContainerInterface`; and
//! macvlan's `bcqueuelen`.

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

/// bridge's `portIsolation` and `disableContainerInterface` (upstream
/// v1.6+). Debian's 1.1.1, the differential's oracle (tests/plugins.rs),
/// ignores both keys, so they are checked here against what upstream's
/// source does: each container's host port is isolated
/// (`IFLA_BRPORT_ISOLATED`), so two containers reach their gateway but not
/// each other; an interface left down is left down, and with IPAM the ADD
/// is refused (upstream's message) with nothing made. DEL leaves the
/// containers as they were.
#[test]
fn bridge_isolated_ports_and_an_interface_left_down() {
    support::require_root();
    let world = World::new("briso");
    let ctr2 = support::Netns::new("briso-c2");
    let ctrs = [&world.ctr, &ctr2];
    let empty: Vec<Value> = ctrs.iter().map(|c| c.snapshot()).collect();
    let ipam = json!({"type": "host-local", "dataDir": world.ipam_dir(), "subnet": "10.78.0.0/24"});
    let conf = json!({"cniVersion": "1.0.0", "name": "isonet", "type": "bridge",
                      "bridge": "cniiso0", "isGateway": true, "portIsolation": true,
                      "ipam": ipam});
    let ping = |ctr: &support::Netns, to: &str| {
        ctr.command("ping")
            .args(["-c", "1", "-W", "2", to])
            .output()
            .expect("ping")
            .status
            .success()
    };
    // Isolated, then (the control) not: the same two containers reach
    // each other only then.
    for isolated in [true, false] {
        let mut conf = conf.clone();
        conf["portIsolation"] = json!(isolated);
        let mut addrs = Vec::new();
        for (i, ctr) in ctrs.iter().enumerate() {
            let cid = format!("iso{i}{isolated}");
            let add = world.run_bundled(ctr, "bridge", "ADD", &conf, &cid);
            assert_eq!(add.code, 0, "{cid}: ADD: {add:?}");
            let r = add.json();
            let port = r["interfaces"][1]["name"].as_str().expect("host veth");
            let link: Value = world.node.ip_json(&["-d", "-j", "link", "show", port]);
            assert_eq!(
                link[0]["linkinfo"]["info_slave_data"]["isolated"], isolated,
                "{cid}: port {port}: {link}"
            );
            let a = r["ips"][0]["address"].as_str().expect("address");
            addrs.push(a.split('/').next().expect("ip").to_owned());
        }
        for (i, ctr) in ctrs.iter().enumerate() {
            assert!(
                ping(ctr, "10.78.0.1"),
                "container {i} (isolated: {isolated}) cannot reach its gateway"
            );
            let other = &addrs[1 - i];
            assert_eq!(
                ping(ctr, other),
                !isolated,
                "container {i} to {other}, isolated: {isolated}"
            );
        }
        for (i, ctr) in ctrs.iter().enumerate() {
            let cid = format!("iso{i}{isolated}");
            let del = world.run_bundled(ctr, "bridge", "DEL", &conf, &cid);
            assert_eq!(del.code, 0, "{cid}: DEL: {del:?}");
            support::assert_same(&empty[i], &ctr.snapshot(), &format!("{cid}: after DEL"));
        }
    }

    // Left down: layer 2 only.
    let mut l2 = conf.clone();
    l2["disableContainerInterface"] = json!(true);
    let refused = world.run_bundled(&world.ctr, "bridge", "ADD", &l2, "down0");
    refused.assert_cni_error(
        999,
        "cannot use IPAM when DisableContainerInterface flag is set",
    );
    support::assert_same(&empty[0], &world.ctr.snapshot(), "after the refused ADD");
    l2.as_object_mut().expect("conf").remove("ipam");
    for (down, cid) in [(true, "down1"), (false, "up1")] {
        l2["disableContainerInterface"] = json!(down);
        let add = world.run_bundled(&world.ctr, "bridge", "ADD", &l2, cid);
        assert_eq!(add.code, 0, "{cid}: {add:?}");
        let link: Value = world.ctr.ip_json(&["-j", "link", "show", "eth0"]);
        let up = link[0]["flags"]
            .as_array()
            .expect("flags")
            .iter()
            .any(|f| f == "UP");
        assert_eq!(up, !down, "{cid}: {link}");
        let del = world.run_bundled(&world.ctr, "bridge", "DEL", &l2, cid);
        assert_eq!(del.code, 0, "{cid}: DEL: {del:?}");
        support::assert_same(
            &empty[0],
            &world.ctr.snapshot(),
            &format!("{cid}: after DEL"),
        );
    }
}

/// macvlan's `bcqueuelen` (upstream v1.6+, `IFLA_MACVLAN_BC_QUEUE_LEN`):
/// the macvlan asks its master for that broadcast queue length, as
/// upstream's does (Debian's 1.1.1, the differential's oracle, ignores
/// the key); unset or 0, the kernel's default (1000). DEL leaves the
/// container as it was.
#[test]
fn macvlan_bcqueuelen_as_upstream() {
    support::require_root();
    let world = World::new("mvbcq");
    let empty = world.ctr.snapshot();
    for (bcq, want) in [(json!(333), 333), (json!(0), 1000), (json!(null), 1000)] {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "mvnet", "type": "macvlan",
                              "master": "uplink"});
        if !bcq.is_null() {
            conf["bcqueuelen"] = bcq.clone();
        }
        let add = world.run_bundled(&world.ctr, "macvlan", "ADD", &conf, "mv0");
        assert_eq!(add.code, 0, "bcqueuelen {bcq}: {add:?}");
        let link: Value = world.ctr.ip_json(&["-d", "-j", "link", "show", "eth0"]);
        assert_eq!(
            link[0]["linkinfo"]["info_data"]["bcqueuelen"], want,
            "bcqueuelen {bcq}: {link}"
        );
        let del = world.run_bundled(&world.ctr, "macvlan", "DEL", &conf, "mv0");
        assert_eq!(del.code, 0, "bcqueuelen {bcq}: DEL: {del:?}");
        support::assert_same(
            &empty,
            &world.ctr.snapshot(),
            &format!("bcqueuelen {bcq}: after DEL"),
        );
    }
}

/// The route fields of spec 1.1 an IPAM result carries (`scope`,
/// `table`, `priority`), set as upstream's `ConfigureIface` sets them
/// (Debian's 1.1.1 predates them): host-local's routes through bridge. A
/// scope the kernel has no name for is refused by name, leaving nothing.
#[test]
fn ipam_route_scope_table_and_priority_as_upstream() {
    support::require_root();
    let world = World::new("rtscope");
    let empty = world.ctr.snapshot();
    let conf = |routes: Value| {
        json!({"cniVersion": "1.1.0", "name": "rtnet", "type": "bridge", "bridge": "cnirt0",
               "isGateway": true,
               "ipam": {"type": "host-local", "dataDir": world.ipam_dir(),
                        "subnet": "10.79.0.0/24", "routes": routes}})
    };
    let good = conf(json!([
        {"dst": "192.168.50.0/24", "scope": 200, "priority": 7},
        {"dst": "192.168.60.0/24", "table": 100},
    ]));
    let add = world.run_bundled(&world.ctr, "bridge", "ADD", &good, "rt0");
    assert_eq!(add.code, 0, "{add:?}");
    let route = |args: &[&str]| -> Value {
        let v: Value = world.ctr.ip_json(args);
        assert_eq!(v.as_array().map(Vec::len), Some(1), "{args:?}: {v}");
        v[0].clone()
    };
    let site = route(&["-j", "route", "show", "192.168.50.0/24"]);
    assert_eq!(site["scope"], "site", "{site}");
    assert_eq!(site["metric"], 7, "{site}");
    assert_eq!(site["gateway"], "10.79.0.1", "{site}");
    let tabled = route(&["-j", "route", "show", "table", "100", "192.168.60.0/24"]);
    assert_eq!(tabled["gateway"], "10.79.0.1", "{tabled}");
    let main: Value = world
        .ctr
        .ip_json(&["-j", "route", "show", "192.168.60.0/24"]);
    assert_eq!(main, json!([]), "the table-100 route is in main too");
    let del = world.run_bundled(&world.ctr, "bridge", "DEL", &good, "rt0");
    assert_eq!(del.code, 0, "{del:?}");
    support::assert_same(&empty, &world.ctr.snapshot(), "after DEL");

    let bad = conf(json!([{"dst": "192.168.50.0/24", "scope": 100}]));
    let add = world.run_bundled(&world.ctr, "bridge", "ADD", &bad, "rt1");
    add.assert_cni_error(2, "route 192.168.50.0/24: scope 100");
    support::assert_same(&empty, &world.ctr.snapshot(), "after the refused ADD");
    // The network's directory stays (the earlier ADD's lock file).
    let files: Vec<String> = std::fs::read_dir(world.ipam_dir().join("rtnet"))
        .expect("the network's IPAM directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().all(|f| !f.starts_with("10.79.")),
        "a reservation left: {files:?}"
    );
}

/// bridge's result `dns` as upstream's since v1.2.0: the IPAM's, unless
/// the config sets its own (1.1.1 replaced it, with nothing when the
/// config set none).
#[test]
fn bridge_result_dns_is_the_ipams_unless_the_config_sets_one() {
    support::require_root();
    let world = World::new("brdns");
    let conf = |top: Option<Value>| {
        let mut c = json!({"cniVersion": "1.0.0", "name": "dnsnet", "type": "bridge",
                           "bridge": "cnidns0", "isGateway": true,
                           "ipam": {"type": "static",
                                    "addresses": [{"address": "10.81.0.5/24",
                                                   "gateway": "10.81.0.1"}],
                                    "dns": {"nameservers": ["10.81.0.53"],
                                            "search": ["ipam.example"]}}});
        if let Some(d) = top {
            c["dns"] = d;
        }
        c
    };
    for (top, want) in [
        (
            None,
            json!({"nameservers": ["10.81.0.53"], "search": ["ipam.example"]}),
        ),
        (
            Some(json!({"nameservers": ["192.0.2.53"]})),
            json!({"nameservers": ["192.0.2.53"]}),
        ),
    ] {
        let c = conf(top.clone());
        let add = world.run_bundled(&world.ctr, "bridge", "ADD", &c, "dns0");
        assert_eq!(add.code, 0, "{top:?}: {add:?}");
        assert_eq!(add.json()["dns"], want, "{top:?}");
        let del = world.run_bundled(&world.ctr, "bridge", "DEL", &c, "dns0");
        assert_eq!(del.code, 0, "{top:?}: {del:?}");
    }
}

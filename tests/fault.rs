//! S6 through each standard plugin: a real plugin's ADD is ended at every
//! one of its host calls — the call traps (the plugin dies there), or the
//! call fails with EIO (the plugin's own error path) — and the node, the
//! container and the IPAM state must be exactly as before (links,
//! addresses, routes of every table, the whole `net.` settings tree, every
//! state file). `WASMCNI_FAULT=call:K[:error]` (debug builds of wasmcni)
//! picks the call; a delegate's calls count too. The same plugin's full
//! ADD and DEL must also leave the state as it was.
//!
//! Plugins whose link kind this kernel lacks run in tests/vm/.

mod support;

use serde_json::{json, Value};
use support::world::World;
use support::{Invoke, Run};

/// One plugin under test: its config, the node's links it needs, and the
/// link kind it needs from the kernel (if any).
struct Subject {
    plugin: &'static str,
    conf: Value,
    node: &'static [&'static [&'static str]],
    needs: Option<&'static str>,
    /// `ip` commands run in the container namespace first (the interface
    /// a chained plugin works on).
    ctr: &'static [&'static [&'static str]],
}

fn host_local(subnet: &str) -> Value {
    json!({"type": "host-local", "dataDir": "@ipam", "ranges": [[{"subnet": subnet}]],
           "routes": [{"dst": "0.0.0.0/0"}]})
}

/// A sandboxed node and container for `s`, and a way to run the plugin
/// there: `(command, WASMCNI_FAULT) -> Run`.
fn setup(s: &Subject, tag: &str) -> (World, Value) {
    let world = World::new(&format!("{tag}{}", &s.plugin[..s.plugin.len().min(5)]));
    for cmd in s.node {
        world.node.ip(cmd);
    }
    for cmd in s.ctr {
        world.ctr.ip(cmd);
    }
    let mut conf = s.conf.clone();
    conf["cniVersion"] = json!("1.0.0");
    conf["name"] = json!("faultnet");
    conf["type"] = json!(s.plugin);
    if conf["prevResult"] == "@veth" {
        // A chained plugin: a main plugin's veth (node end `vethfault0`,
        // container end `eth0`) and its result.
        let ctr = world.ctr.path.display().to_string();
        world.node.ip(&[
            "link",
            "add",
            "vethfault0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &ctr,
        ]);
        // Marked as this attachment's, as the main plugin's ADD leaves it.
        world.node.ip(&[
            "link",
            "set",
            "vethfault0",
            "alias",
            "wasmcni:faultnet:ctr-test-1:eth0",
        ]);
        // No IPv6 link-local addresses: their duplicate address detection
        // would run on its own clock across snapshots.
        world
            .node
            .ip(&["link", "set", "vethfault0", "addrgenmode", "none"]);
        world
            .ctr
            .ip(&["link", "set", "eth0", "addrgenmode", "none"]);
        // The addresses the prevResult gives it, as the main plugin left
        // them (the operator vouches for them: see `run`).
        world
            .ctr
            .ip(&["addr", "add", "10.76.0.2/24", "dev", "eth0"]);
        world
            .ctr
            .ip(&["addr", "add", "fd00:76::2/64", "dev", "eth0", "nodad"]);
        world.node.ip(&["link", "set", "vethfault0", "up"]);
        world.ctr.ip(&["link", "set", "eth0", "up"]);
        world.wait_for_carrier(&["vethfault0"]);
        conf["prevResult"] = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "vethfault0"}, {"name": "eth0", "sandbox": ctr}],
            "ips": [{"address": "10.76.0.2/24", "interface": 1},
                    {"address": "fd00:76::2/64", "interface": 1}]});
    }
    (world, conf)
}

fn run(s: &Subject, world: &World, conf: &Value, command: &str, fault: Option<String>) -> Run {
    let mut policy = json!({"plugins": {"host-local": {"ipam-roots": ["@ipam"]}}});
    // A chained plugin's addresses (`@veth`) come from a main plugin that
    // is not wasmcni's here (no record of the attachment): the operator
    // vouches for them (S13).
    for chained in ["portmap", "firewall"] {
        let mut entry = support::world::default_entry(chained);
        entry["static-ranges"] = json!(["10.76.0.2/32", "fd00:76::2/128"]);
        policy["plugins"][chained] = entry;
    }
    let _ = std::fs::remove_file(world.audit_path());
    let stdin = conf
        .to_string()
        .replace(
            "\"@ipam\"",
            &Value::from(world.ipam_dir().display().to_string()).to_string(),
        )
        .into_bytes();
    let mut inv = Invoke::wasmcni_run(s.plugin, &stdin)
        .cni(command, &world.ctr.path, "eth0")
        .env(
            "WASMCNI_POLICY",
            world.policy(&policy).display().to_string(),
        )
        .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
        .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
        .in_netns(&world.node);
    if let Some(f) = fault {
        inv = inv.env("WASMCNI_FAULT", f);
    }
    inv.run()
}

/// Runs the whole S6 sweep for `s`.
fn sweep(s: &Subject) {
    support::require_root();
    let what = s.plugin;
    // The full ADD works and counts its host calls (in a world of its
    // own: what a successful ADD and DEL leave, like the reference — the
    // bridge, ip_forward, the IPAM lock file — is no failed ADD's doing).
    let total = {
        let (world, conf) = setup(s, "fa");
        let add = run(s, &world, &conf, "ADD", None);
        assert_eq!(add.code, 0, "{what}: ADD: {add:?}");
        // Capability calls only: the host's own records (`record.store`)
        // are audited too, but are not calls a fault can end.
        let total = world
            .audit()
            .iter()
            .filter(|r| !r["call"].as_str().is_some_and(|c| c.starts_with("record.")))
            .count();
        let del = run(s, &world, &conf, "DEL", None);
        assert_eq!(del.code, 0, "{what}: DEL: {del:?}");
        total
    };
    // The fewest: portmap's (the node namespace, then one firewall.add
    // for every address and mapping; its undo after later calls is
    // swept in tests/firewall.rs).
    assert!(total >= 2, "{what}: only {total} host calls");
    let tolerated = std::sync::Mutex::new(Vec::new());
    // Both modes, here and under the VM's emulation; the runs go side by
    // side, each thread with a sandbox of its own (`support::in_parallel`).
    let modes = ["trap", "error"];
    let runs: Vec<(usize, &str)> = (1..=total)
        .flat_map(|k| modes.iter().map(move |m| (k, *m)))
        .collect();
    let fresh = |thread: usize| {
        let (world, conf) = setup(s, &format!("fb{thread}"));
        let before = without_new_lock(world.snapshot());
        (world, conf, before, thread)
    };
    support::in_parallel(&runs, fresh, |sandbox, &(k, mode)| {
        let thread = sandbox.3;
        let (world, conf, before, _) = sandbox;
        let fault = match mode {
            "trap" => format!("call:{k}"),
            _ => format!("call:{k}:error"),
        };
        let r = run(s, world, conf, "ADD", Some(fault));
        let case = format!("{what}: fault at host call {k}/{total} ({mode})");
        assert!(
            !r.stdout.contains("panicked") && !r.stderr.contains("panicked"),
            "{case}: {r:?}"
        );
        if r.code == 0 {
            // The plugin tolerated the failed call (a lookup it
            // expects may fail): its ADD stands. DEL it, and start
            // over from a fresh sandbox (a DEL leaves what the
            // reference's leaves: the bridge, ip_forward).
            assert_eq!(mode, "error", "{case}: a trap cannot succeed: {r:?}");
            tolerated.lock().expect("tolerated").push(
                world
                    .audit()
                    .iter()
                    .find(|r| r["outcome"] != "ok")
                    .map(|r| r["call"].to_string())
                    .unwrap_or_default(),
            );
            let d = run(s, world, conf, "DEL", None);
            assert_eq!(d.code, 0, "{case}: DEL: {d:?}");
            *sandbox = fresh(thread);
            return;
        }
        let err = r.json();
        assert!(
            err["code"].as_u64().is_some() && err["msg"].as_str().is_some(),
            "{case}: not a CNI error: {r:?}"
        );
        if mode == "trap" {
            assert_eq!(err["code"], 100, "{case}: {r:?}");
        }
        // A device moved back and set up reports its carrier through
        // the kernel's link watch, up to a second later: a state that
        // differs is looked at again for up to 3 s before it counts.
        let start = std::time::Instant::now();
        let mut now = without_new_lock(world.snapshot());
        while now != *before && start.elapsed() < std::time::Duration::from_secs(3) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            now = without_new_lock(world.snapshot());
        }
        support::assert_same(before, &now, &format!("{case}: state"));
    });
    let tolerated = tolerated.into_inner().expect("tolerated");
    eprintln!(
        "{what}: {total} host calls, each failed in turn; failures the plugin tolerated: {tolerated:?}"
    );
}

/// The state without any IPAM network's empty `lock` file: the first ADD
/// of a network creates it (as the reference does) and a failed ADD
/// leaves it, since unlinking a lock file another ADD may be waiting on
/// would let two ADDs hold "the" lock at once. It holds no address.
fn without_new_lock(mut v: Value) -> Value {
    if let Some(m) = v["ipam"].as_object_mut() {
        m.retain(|k, x| !(k.ends_with("/lock") && x == ""));
    }
    v
}

/// Runs `s` here if this kernel has its link kind, else in the VM.
fn sweep_where_possible(s: &Subject, test: &str) {
    match s.needs {
        Some(kind) if !support::vm::kernel_has(kind) => support::vm::rerun_this_test(test),
        _ => sweep(s),
    }
}

#[test]
fn s6_bridge_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "bridge",
            // ipMasq and macspoofchk: firewall rules (and their tables)
            // are undone at every later call too; portIsolation: the
            // port's flag with them.
            conf: json!({"bridge": "cnifault0", "isGateway": true, "ipMasq": true,
                         "macspoofchk": true, "hairpinMode": true, "portIsolation": true,
                         "ipam": host_local("10.66.0.0/24")}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_bridge_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_ptp_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "ptp",
            conf: json!({"mtu": 1400, "ipMasq": true, "ipam": host_local("10.67.0.0/24")}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_ptp_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_tap_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "tap",
            conf: json!({"mtu": 1400, "mac": "0a:58:0a:44:00:09", "multiQueue": true,
                         "owner": 4242, "group": 4343, "ipam": host_local("10.68.0.0/24")}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_tap_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_dummy_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "dummy",
            conf: json!({"ipam": host_local("10.69.0.0/24")}),
            node: &[],
            needs: Some("dummy"),
            ctr: &[],
        },
        "s6_dummy_add_is_undone_at_every_host_call",
    );
}

/// bridge with a VLAN gateway: port VLANs, the `<bridge>.<vlan>` pair
/// handed to the network, all undone at every host call (in tests/vm/).
#[test]
fn s6_bridge_vlan_gateway_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "bridge",
            conf: json!({"bridge": "cnifaultv0", "vlan": 300, "isGateway": true,
                         "vlanTrunk": [{"id": 301}], "ipam": host_local("10.75.0.0/24")}),
            node: &[],
            needs: Some("bridge-vlan"),
            ctr: &[],
        },
        "s6_bridge_vlan_gateway_add_is_undone_at_every_host_call",
    );
}

/// host-device takes a node device with state worth returning: the
/// failed ADD must give it back as it was, at every host call.
#[test]
fn s6_host_device_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "host-device",
            conf: json!({"device": "mst0", "ipam": host_local("10.72.0.0/24")}),
            // No IPv6 link-local addresses: their duplicate address
            // detection would run on its own clock across snapshots.
            node: &[
                &["link", "set", "mst0", "addrgenmode", "none"],
                &["link", "set", "mst0p", "addrgenmode", "none"],
                &["link", "set", "mst0", "mtu", "1300"],
                &["link", "set", "mst0p", "up"],
                &["link", "set", "mst0", "up"],
                &["addr", "add", "10.73.0.5/24", "dev", "mst0"],
                &[
                    "route",
                    "add",
                    "10.74.0.0/16",
                    "via",
                    "10.73.0.1",
                    "dev",
                    "mst0",
                ],
            ],
            needs: None,
            ctr: &[],
        },
        "s6_host_device_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_macvlan_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "macvlan",
            conf: json!({"master": "uplink", "mode": "bridge", "mtu": 1400,
                         "ipam": host_local("10.71.0.0/24")}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_macvlan_add_is_undone_at_every_host_call",
    );
}

/// The same with `bcqueuelen`: the macvlan is made by
/// `link.create-macvlan-with`.
#[test]
fn s6_macvlan_bcqueuelen_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "macvlan",
            conf: json!({"master": "uplink", "mode": "bridge", "bcqueuelen": 333,
                         "ipam": host_local("10.72.0.0/24")}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_macvlan_bcqueuelen_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_ipvlan_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "ipvlan",
            conf: json!({"master": "uplink", "mode": "l2", "ipam": host_local("10.72.0.0/24")}),
            node: &[],
            needs: Some("ipvlan"),
            ctr: &[],
        },
        "s6_ipvlan_add_is_undone_at_every_host_call",
    );
}

/// bandwidth, chained after a main plugin's veth: the tbf on the host
/// veth, the ingress qdisc, its redirect filter and the ifb, all undone at
/// every host call.
#[test]
fn s6_bandwidth_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "bandwidth",
            conf: json!({"ingressRate": 800000, "ingressBurst": 80000,
                         "egressRate": 1600000, "egressBurst": 160000, "prevResult": "@veth"}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_bandwidth_add_is_undone_at_every_host_call",
    );
}

/// portmap, chained after a main plugin's veth: its nftables rules (and
/// the table) undone at every host call.
#[test]
fn s6_portmap_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "portmap",
            conf: json!({"runtimeConfig": {"portMappings": [
                             {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                             {"hostPort": 5353, "containerPort": 53, "protocol": "udp"}]},
                         "prevResult": "@veth"}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_portmap_add_is_undone_at_every_host_call",
    );
}

/// The firewall plugin, chained after a main plugin's veth: its forward
/// rules (and the tables, and the static FORWARD jump's effects) undone at
/// every host call.
#[test]
fn s6_firewall_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "firewall",
            conf: json!({"prevResult": "@veth"}),
            node: &[],
            needs: None,
            ctr: &[],
        },
        "s6_firewall_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_vlan_add_is_undone_at_every_host_call() {
    sweep_where_possible(
        &Subject {
            plugin: "vlan",
            conf: json!({"master": "uplink", "vlanId": 42, "ipam": host_local("10.73.0.0/24")}),
            node: &[],
            needs: Some("vlan"),
            ctr: &[],
        },
        "s6_vlan_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_tuning_add_is_undone_at_every_host_call() {
    // Every value tuning sets, on a container interface (a veth whose
    // peer stays in the container), with its attachment-state backup.
    sweep_where_possible(
        &Subject {
            plugin: "tuning",
            conf: json!({"mtu": 1400, "mac": "02:00:00:00:77:01", "promisc": true,
                         "allmulti": true, "txQLen": 222,
                         "sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2",
                                    "net.ipv4.ip_forward": "1"},
                         "prevResult": {"cniVersion": "1.0.0",
                                        "interfaces": [{"name": "eth0"}], "ips": []}}),
            node: &[],
            needs: None,
            ctr: &[
                &[
                    "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
                ],
                &["link", "set", "eth0", "up"],
            ],
        },
        "s6_tuning_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_sbr_add_is_undone_at_every_host_call() {
    // Rules, default routes and the interface's routes moved to their
    // tables, for an IPv4 and an IPv6 address.
    sweep_where_possible(
        &Subject {
            plugin: "sbr",
            conf: json!({"prevResult": {"cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0"}],
                "ips": [{"address": "10.84.0.2/24", "gateway": "10.84.0.1", "interface": 0},
                        {"address": "fd00:84::2/64", "gateway": "fd00:84::1", "interface": 0}]}}),
            node: &[],
            needs: None,
            ctr: &[
                &[
                    "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
                ],
                // No link-local addresses: their duplicate address
                // detection would end during the sweep, and the state
                // with it.
                &["link", "set", "eth0", "addrgenmode", "none"],
                &["link", "set", "eth0p", "addrgenmode", "none"],
                &["link", "set", "eth0p", "up"],
                &["link", "set", "eth0", "up"],
                &["addr", "add", "10.84.0.2/24", "dev", "eth0"],
                &["addr", "add", "fd00:84::2/64", "dev", "eth0", "nodad"],
                &["route", "add", "default", "via", "10.84.0.1", "dev", "eth0"],
            ],
        },
        "s6_sbr_add_is_undone_at_every_host_call",
    );
}

#[test]
fn s6_vrf_add_is_undone_at_every_host_call() {
    // The VRF made, the interface enslaved, its IPv6 address put back and
    // its gateway route moved to the VRF's table (in the VM: this kernel
    // has no VRF).
    sweep_where_possible(
        &Subject {
            plugin: "vrf",
            conf: json!({"vrfname": "blue", "table": 1001,
                         "prevResult": {"cniVersion": "1.0.0",
                                        "interfaces": [{"name": "eth0"}], "ips": []}}),
            node: &[],
            needs: Some("vrf"),
            ctr: &[
                &[
                    "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
                ],
                &["link", "set", "eth0", "addrgenmode", "none"],
                &["link", "set", "eth0p", "addrgenmode", "none"],
                &["link", "set", "eth0p", "up"],
                &["link", "set", "eth0", "up"],
                &["addr", "add", "10.85.0.2/24", "dev", "eth0"],
                &["addr", "add", "fd00:85::2/64", "dev", "eth0", "nodad"],
                &["route", "add", "default", "via", "10.85.0.1", "dev", "eth0"],
            ],
        },
        "s6_vrf_add_is_undone_at_every_host_call",
    );
}

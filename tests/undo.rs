//! The undo is exact and the host invariants hold against a hostile plugin:
//! one regression test per breach found (propagated sysctls, a stale
//! "created" index, a moved node link, a master changed through its upper
//! device). Each runs the scripted fixture in a sandboxed node (see
//! `support::world`) and compares the whole kernel state of both
//! namespaces (links, addresses, routes in every table, the full
//! `/proc/sys/net` tree) before and after.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::world::{policy_with, wide, World};

fn conf(ops: Value, exit: i32) -> Value {
    json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": ops, "exit": exit})
}

/// The outcome of op `i` in the scripted plugin's report.
fn result(run: &support::Run, i: usize) -> Value {
    run.json()["results"][i].clone()
}

#[track_caller]
fn assert_ok(run: &support::Run, i: usize) {
    let r = result(run, i);
    assert!(r.get("ok").is_some(), "op {i} failed: {r} in {run:?}");
}

/// Waits until no IPv6 address in either namespace is tentative (a link
/// that comes back up runs duplicate address detection again), then
/// snapshots.
fn settled_snapshot(world: &World) -> Value {
    let t = Instant::now();
    loop {
        let snap = world.snapshot();
        if !snap.to_string().contains("\"tentative\"") || t.elapsed() > Duration::from_secs(8) {
            return snap;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What the node had, and what the plugin writes.
type SysctlCase = (&'static str, Vec<(&'static str, &'static str)>, Value);

/// A failed ADD that wrote a sysctl the kernel propagates leaves the whole
/// `net.` tree of both namespaces as it was.
#[test]
fn propagated_sysctl_writes_are_undone_exactly() {
    let mut grant = wide();
    grant["host"]["sysctls"] = json!([
        "net.ipv4.ip_forward",
        "net.ipv4.conf.all.*",
        "net.ipv4.conf.default.*",
        "net.ipv6.conf.all.*",
        "net.ipv6.conf.default.*"
    ]);
    grant["container"]["sysctls"] = json!(["net.ipv4.conf.all.forwarding", "net.ipv6.conf.all.*"]);
    let policy = policy_with(grant);
    // (what the node had, what the plugin writes)
    let cases: Vec<SysctlCase> = vec![
        (
            "routing off on the uplink, plugin turns ip_forward off",
            vec![
                ("net.ipv4.ip_forward", "1"),
                ("net.ipv4.conf.uplink.forwarding", "0"),
            ],
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv4.ip_forward", "value": "0"}]),
        ),
        (
            "redirects hardened, plugin turns ip_forward on",
            vec![
                ("net.ipv4.ip_forward", "0"),
                ("net.ipv4.conf.all.accept_redirects", "0"),
                ("net.ipv4.conf.uplink.forwarding", "0"),
            ],
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv4.ip_forward", "value": "1"}]),
        ),
        (
            "IPv6 forwarding with one link off",
            vec![
                ("net.ipv6.conf.all.forwarding", "1"),
                ("net.ipv6.conf.uplink.forwarding", "0"),
            ],
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv6.conf.all.forwarding", "value": "0"}]),
        ),
        (
            "a default copied to links that never set theirs",
            vec![("net.ipv4.conf.uplink.rp_filter", "1")],
            json!([
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.default.rp_filter", "value": "2"},
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.all.rp_filter", "value": "1"},
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv6.conf.all.disable_ipv6", "value": "1"}
            ]),
        ),
        (
            "both namespaces, after a created link and the uplink's own key",
            vec![("net.ipv4.ip_forward", "1")],
            json!([
                {"call": "link.create-veth", "ns": "host", "name": "cnitestv0", "peer-ns": "container", "peer-name": "eth0"},
                {"call": "sysctl.set", "ns": "container", "key": "net.ipv4.conf.all.forwarding", "value": "1"},
                {"call": "sysctl.set", "ns": "container", "key": "net.ipv6.conf.all.forwarding", "value": "1"},
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.all.forwarding", "value": "0"},
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.ip_forward", "value": "1"}
            ]),
        ),
    ];
    for (what, node_has, ops) in cases {
        let world = World::new("sysu");
        for (k, v) in &node_has {
            world.node.sysctl(k, v);
        }
        let before = world.snapshot();
        let n = ops.as_array().map_or(0, Vec::len);
        let run = world.run("ADD", &policy, &conf(ops, 1), &[]);
        assert_eq!(run.code, 1, "{what}: {run:?}");
        for i in 0..n {
            assert_ok(&run, i);
        }
        support::assert_same(&before, &world.snapshot(), what);
        let undone = world
            .audit()
            .iter()
            .filter(|r| r["call"] == "journal.undo")
            .all(|r| r["outcome"] == "ok");
        assert!(undone, "{what}: an undo step failed: {:#?}", world.audit());
    }
}

/// The index of the next link the kernel will allocate in `ns` (it counts
/// up from the last one it gave), moved past `above` by making and
/// deleting throwaway links.
fn next_index_above(ns: &support::Netns, above: u32) -> u32 {
    loop {
        ns.ip(&[
            "link", "add", "burn0", "type", "veth", "peer", "name", "burn1",
        ]);
        let v: Value = serde_json::from_str(&ns.ip(&["-j", "link", "show"])).expect("json");
        let last = v
            .as_array()
            .expect("links")
            .iter()
            .filter_map(|l| l["ifindex"].as_u64())
            .max()
            .expect("an index") as u32;
        ns.ip(&["link", "del", "burn0"]);
        if last >= above {
            return last + 1;
        }
    }
}

/// Deleting a created veth takes its peer along: the peer's index must
/// leave the created set, or a link later moved in under that index (the
/// kernel keeps a moved link's index when it is free) counts as created
/// and can be deleted for good.
#[test]
fn a_failed_add_never_deletes_a_link_it_did_not_create() {
    let world = World::new("idx");
    // The container's next index, past every index the node uses.
    let k = next_index_above(&world.ctr, 60);
    // Another attachment of the same container: a host veth wasmcni made,
    // at exactly that index.
    let ks = k.to_string();
    world.node.ip(&[
        "link", "add", "victim", "index", &ks, "type", "veth", "peer", "name", "victimp",
    ]);
    world
        .node
        .ip(&["link", "set", "victim", "alias", "wasmcni:ctr-test-1"]);
    world.node.ip(&["link", "set", "victim", "up"]);
    world
        .node
        .ip(&["addr", "add", "10.66.0.1/24", "dev", "victim"]);
    let before = world.snapshot();
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &conf(
            json!([
                {"call": "link.create-veth", "ns": "host", "name": "cnitestv1", "peer-ns": "container", "peer-name": "p1"},
                {"call": "link.delete", "ns": "host", "link": "cnitestv1"},
                {"call": "link.move-to", "ns": "host", "link": "victim", "target": "container"},
                {"call": "link.delete", "ns": "container", "link": k},
            ]),
            1,
        ),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        result(&run, 0)["ok"][1],
        json!(k),
        "the peer must get the victim's index for this test to mean anything: {run:?}"
    );
    assert_ok(&run, 2);
    assert_eq!(result(&run, 3)["error"], "access-denied", "{run:?}");
    support::assert_same(&before, &settled_snapshot(&world), "victim");
}

/// Undoing a move puts the link back as it was: admin state, MTU, MAC,
/// alias, master and hairpin, addresses, routes in every table, per-link
/// settings of both families. In both directions.
#[test]
fn undoing_a_move_restores_the_link_exactly() {
    let world = World::new("mv");
    let n = &world.node;
    n.ip(&["link", "add", "hd0", "type", "veth", "peer", "name", "hd0p"]);
    n.ip(&["link", "set", "hd0p", "up"]);
    n.ip(&[
        "link",
        "set",
        "hd0",
        "mtu",
        "1400",
        "alias",
        "node-link",
        "up",
    ]);
    n.ip(&["addr", "add", "10.88.0.2/24", "dev", "hd0"]);
    n.ip(&["addr", "add", "fd00:88::2/64", "dev", "hd0"]);
    n.ip(&[
        "route",
        "add",
        "10.89.0.0/24",
        "via",
        "10.88.0.1",
        "dev",
        "hd0",
    ]);
    n.ip(&["route", "add", "10.90.0.0/24", "dev", "hd0", "table", "100"]);
    n.ip(&[
        "route",
        "add",
        "fd00:89::/64",
        "via",
        "fd00:88::1",
        "dev",
        "hd0",
    ]);
    n.sysctl("net.ipv4.conf.hd0.rp_filter", "2");
    n.sysctl("net.ipv6.conf.hd0.accept_ra", "0");
    n.sysctl("net.ipv4.neigh.hd0.retrans_time_ms", "2000");
    // A bridge port with hairpin on.
    n.ip(&["link", "add", "hdbr0", "type", "bridge"]);
    n.ip(&["link", "set", "hdbr0", "up"]);
    n.ip(&["link", "add", "hd1", "type", "veth", "peer", "name", "hd1p"]);
    n.ip(&["link", "set", "hd1", "master", "hdbr0", "up"]);
    n.ip(&[
        "link",
        "set",
        "hd1",
        "type",
        "bridge_slave",
        "hairpin",
        "on",
    ]);
    n.ip(&["link", "set", "hd1", "promisc", "on"]);
    // And a container link that moves the other way.
    let c = &world.ctr;
    c.ip(&[
        "link", "add", "cpre0", "type", "veth", "peer", "name", "cpre0p",
    ]);
    c.ip(&["link", "set", "cpre0", "mtu", "1300", "up"]);
    c.ip(&["addr", "add", "10.91.0.2/24", "dev", "cpre0"]);
    c.ip(&[
        "route",
        "add",
        "10.92.0.0/24",
        "via",
        "10.91.0.1",
        "dev",
        "cpre0",
    ]);
    c.sysctl("net.ipv4.conf.cpre0.rp_filter", "2");
    c.sysctl("net.ipv6.conf.cpre0.disable_ipv6", "1");
    let before = settled_snapshot(&world);
    let mut grant = wide();
    grant["host"]["links"] = json!(["cnitest*", "hd*"]);
    let run = world.run(
        "ADD",
        &policy_with(grant),
        &conf(
            json!([
                {"call": "link.move-to", "ns": "host", "link": "hd0", "target": "container"},
                {"call": "link.move-to", "ns": "host", "link": "hd1", "target": "container", "new-name": "net1"},
                {"call": "link.move-to", "ns": "container", "link": "cpre0", "target": "host", "new-name": "cnitestmv0"},
            ]),
            1,
        ),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    for i in 0..3 {
        assert_ok(&run, i);
    }
    support::assert_same(&before, &settled_snapshot(&world), "moved links");
}

/// A `masters` link is used as a master and never changed, also not
/// through a link stacked on it (its promiscuity is the master's).
#[test]
fn a_masters_link_is_never_changed_through_its_upper_device() {
    let world = World::new("mst");
    world.node.ip(&["link", "set", "mst0p", "up"]);
    world.node.ip(&["link", "set", "mst0", "up"]);
    let promiscuity = |w: &World| -> u64 {
        let v: Value =
            serde_json::from_str(&w.node.ip(&["-d", "-j", "link", "show", "mst0"])).expect("json");
        v[0]["promiscuity"].as_u64().expect("promiscuity")
    };
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &conf(
            json!([
                {"call": "link.create-macvlan", "ns": "container", "master-ns": "host", "master": "mst0", "mode": "bridge", "name": "mv0"},
                {"call": "link.set-up", "ns": "container", "link": "mv0", "up": true},
            ]),
            0,
        ),
        &[],
    );
    assert_ok(&run, 0);
    assert_ok(&run, 1);
    // Bringing a macvlan up may add its address to the master's unicast
    // filter (on a veth, which has none, that counts as promiscuity):
    // that is using it as a master. Setting the macvlan promiscuous is not.
    let used = promiscuity(&world);
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &conf(
            json!([{"call": "link.set-promiscuous", "ns": "container", "link": "mv0", "on": true}]),
            0,
        ),
        &[],
    );
    assert_eq!(result(&run, 0)["error"], "access-denied", "{run:?}");
    assert_eq!(promiscuity(&world), used, "the master changed");
    let audit = world.audit();
    assert!(
        audit.iter().any(|r| r["call"] == "link.set-promiscuous"
            && r["outcome"] == "denied"
            && r["reason"].as_str().is_some_and(|s| s.contains("\"mst0\""))),
        "{audit:#?}"
    );
}

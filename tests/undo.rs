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
        // (A plugin may only raise forwarding in the node: turning it
        // off would also turn on `accept_ra` 1 and IPv6 redirects.)
        (
            "routing on the uplink alone, plugin turns ip_forward on",
            vec![
                ("net.ipv4.ip_forward", "0"),
                ("net.ipv4.conf.uplink.forwarding", "1"),
            ],
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv4.ip_forward", "value": "1"}]),
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
            "IPv6 forwarding on one link only",
            vec![
                ("net.ipv6.conf.all.forwarding", "0"),
                ("net.ipv6.conf.uplink.forwarding", "1"),
            ],
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv6.conf.all.forwarding", "value": "1"}]),
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
            vec![("net.ipv4.ip_forward", "0")],
            json!([
                {"call": "link.create-veth", "ns": "host", "name": "cnitestv0", "peer-ns": "container", "peer-name": "eth0"},
                {"call": "sysctl.set", "ns": "container", "key": "net.ipv4.conf.all.forwarding", "value": "1"},
                {"call": "sysctl.set", "ns": "container", "key": "net.ipv6.conf.all.forwarding", "value": "1"},
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.all.forwarding", "value": "1"},
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
    // This attachment's own host veth, made by an earlier plugin of its
    // chain (it carries the attachment's mark), at exactly that index.
    let ks = k.to_string();
    world.node.ip(&[
        "link", "add", "victim", "index", &ks, "type", "veth", "peer", "name", "victimp",
    ]);
    world.node.ip(&[
        "link",
        "set",
        "victim",
        "alias",
        "wasmcni:n:ctr-test-1:eth0",
    ]);
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
    support::assert_same(&before, &world.snapshot(), "victim");
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
        "learning",
        "off",
        "isolated",
        "on",
        "cost",
        "42",
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
    let before = world.snapshot();
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
    support::assert_same(&before, &world.snapshot(), "moved links");
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

/// The journal knows links by identity, not by (namespace, index): a
/// created link that moves away and a node link that moves into its old
/// index are two links, and deleting the first forgets nothing of the
/// second.
#[test]
fn deleting_a_moved_link_forgets_nothing_of_the_link_that_took_its_index() {
    let world = World::new("ident");
    // The container's next two indexes (a veth's peer, then its end), past
    // every index the node uses; the node link `hd0` takes the end's.
    let next = next_index_above(&world.ctr, 60);
    let k = (next + 1).to_string();
    let n = &world.node;
    n.ip(&[
        "link", "add", "hd0", "index", &k, "type", "veth", "peer", "name", "hd0p",
    ]);
    n.ip(&["link", "set", "hd0p", "up"]);
    n.ip(&["link", "set", "hd0", "mtu", "1400", "up"]);
    n.ip(&["addr", "add", "10.88.0.2/24", "dev", "hd0"]);
    n.ip(&[
        "route",
        "add",
        "10.89.0.0/24",
        "via",
        "10.88.0.1",
        "dev",
        "hd0",
    ]);
    let before = world.snapshot();
    let mut grant = wide();
    grant["host"]["links"] = json!(["cnitest*", "hd*"]);
    let run = world.run(
        "ADD",
        &policy_with(grant),
        &conf(
            json!([
                {"call": "link.create-veth", "ns": "container", "name": "e", "peer-ns": "container", "peer-name": "ep"},
                {"call": "link.move-to", "ns": "container", "link": "e", "target": "host", "new-name": "vethe"},
                {"call": "link.move-to", "ns": "host", "link": "hd0", "target": "container"},
                {"call": "link.delete", "ns": "host", "link": "vethe"},
            ]),
            1,
        ),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        result(&run, 0)["ok"][0],
        json!(next + 1),
        "the created link must take hd0's index for this test to mean anything: {run:?}"
    );
    for i in 0..4 {
        assert_ok(&run, i);
    }
    support::assert_same(&before, &world.snapshot(), "hd0 after the undo");
}

/// A `masters` link is not changed through a bridge either: a bridge makes
/// its ports promiscuous, and a macvlan passes that to its lower device.
#[test]
fn a_masters_link_is_never_changed_through_a_bridge() {
    let world = World::new("mstbr");
    world.node.ip(&["link", "set", "mst0p", "up"]);
    world.node.ip(&["link", "set", "mst0", "up"]);
    let mut grant = wide();
    grant["container"]["create"] = json!(["veth", "macvlan", "bridge"]);
    let before = world.snapshot();
    let run = world.run(
        "ADD",
        &policy_with(grant),
        &conf(
            json!([
                {"call": "link.create-macvlan", "ns": "container", "master-ns": "host", "master": "mst0", "mode": "bridge", "name": "mv0"},
                {"call": "link.create-bridge", "ns": "container", "name": "br0"},
                {"call": "link.set-master", "ns": "container", "link": "mv0", "master": "br0"},
            ]),
            1,
        ),
        &[],
    );
    assert_ok(&run, 0);
    assert_ok(&run, 1);
    assert_eq!(result(&run, 2)["error"], "access-denied", "{run:?}");
    support::assert_same(&before, &world.snapshot(), "masters through a bridge");
}

/// The undo of a propagating sysctl write restores only what that write
/// changed and is still as it left it: a setting someone else changed
/// meanwhile stays as they set it (to a value that is neither the one
/// before the write nor the one it left, so restoring either is caught),
/// what the kernel propagated the write over and nobody touched goes back,
/// and a setting the write never changed is left alone.
#[test]
fn a_sysctl_undo_keeps_what_others_changed_meanwhile() {
    let world = World::new("sysco");
    let n = &world.node;
    n.sysctl("net.ipv4.ip_forward", "0");
    // No link of the node ever set its own rp_filter: a write of the
    // default is copied to each of them.
    n.sysctl("net.ipv4.conf.default.rp_filter", "0");
    let mut grant = wide();
    grant["host"]["sysctls"] = json!(["net.ipv4.ip_forward", "net.ipv4.conf.default.rp_filter"]);
    grant["deadline-ms"] = json!(3000);
    let policy = policy_with(grant);
    let stdin = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
        "ops": [{"call": "sysctl.set", "ns": "host", "key": "net.ipv4.ip_forward", "value": "1"},
                {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.default.rp_filter", "value": "1"}],
        "fail": {"after": 3, "how": "sleep"}});
    let has = |sysctls: &[String], line: &str| sysctls.iter().any(|l| l == line);
    let run = std::thread::scope(|s| {
        let (w, p, st) = (&world, &policy, &stdin);
        let h = s.spawn(move || w.run("ADD", p, st, &[]));
        // Once both writes are made (the plugin then sleeps until its
        // deadline), another tool changes settings.
        let t = Instant::now();
        while !has(&n.sysctls(), "/proc/sys/net/ipv4/conf/uplinkp/rp_filter:1") {
            assert!(
                t.elapsed() < Duration::from_millis(2500) && !h.is_finished(),
                "the plugin's writes never showed"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // One the writes changed (0 -> 1), to neither value.
        n.sysctl("net.ipv4.conf.uplink.rp_filter", "2");
        // One they did not change.
        n.sysctl("net.ipv4.conf.lo.accept_local", "1");
        assert!(
            !h.is_finished(),
            "the ADD ended before the other tool's changes: they were not made meanwhile"
        );
        h.join().expect("run")
    });
    run.assert_cni_error(101, "deadline");
    let sysctls = n.sysctls();
    for (line, what) in [
        (
            "/proc/sys/net/ipv4/ip_forward:0",
            "the plugin's write is undone",
        ),
        (
            "/proc/sys/net/ipv4/conf/default/rp_filter:0",
            "the plugin's write is undone",
        ),
        (
            "/proc/sys/net/ipv4/conf/uplinkp/forwarding:0",
            "what ip_forward propagated over goes back",
        ),
        (
            "/proc/sys/net/ipv4/conf/uplinkp/rp_filter:0",
            "what the default propagated over goes back",
        ),
        (
            "/proc/sys/net/ipv4/conf/uplink/rp_filter:2",
            "another's change stays",
        ),
        (
            "/proc/sys/net/ipv4/conf/lo/accept_local:1",
            "another's change stays",
        ),
    ] {
        let key = &line[..line.rfind(':').unwrap_or(line.len())];
        let now: Vec<&String> = sysctls.iter().filter(|l| l.starts_with(key)).collect();
        assert!(has(&sysctls, line), "{what}: not {line} but {now:?}");
    }
}

/// `conf.all.disable_ipv6` drops every link's IPv6 addresses and routes:
/// the undo puts them back.
#[test]
fn a_sysctl_that_flushes_addresses_is_undone_with_them() {
    let world = World::new("flush");
    let n = &world.node;
    n.ip(&["link", "set", "uplinkp", "up"]);
    n.ip(&["addr", "add", "fd00:5::10/64", "dev", "uplink", "nodad"]);
    n.ip(&[
        "route",
        "add",
        "fd00:77::/48",
        "via",
        "fd00:5::1",
        "dev",
        "uplink",
    ]);
    let before = world.snapshot();
    let mut grant = wide();
    grant["host"]["sysctls"] = json!(["net.ipv6.conf.all.disable_ipv6"]);
    let run = world.run(
        "ADD",
        &policy_with(grant),
        &conf(
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv6.conf.all.disable_ipv6", "value": "1"}]),
            1,
        ),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert_ok(&run, 0);
    support::assert_same(&before, &world.snapshot(), "disable_ipv6");
}

/// What the journal could not put back is not done: a link with a
/// multipath route or a permanent neighbour entry is not moved or set down.
#[test]
fn a_change_that_could_not_be_undone_is_refused() {
    let world = World::new("norest");
    let n = &world.node;
    for l in ["hd0", "hd1"] {
        let peer = format!("{l}p");
        n.ip(&["link", "add", l, "type", "veth", "peer", "name", &peer]);
        n.ip(&["link", "set", &peer, "up"]);
        n.ip(&["link", "set", l, "up"]);
    }
    n.ip(&["addr", "add", "10.88.0.2/24", "dev", "hd0"]);
    n.ip(&[
        "route",
        "add",
        "10.99.0.0/24",
        "nexthop",
        "via",
        "10.88.0.1",
        "dev",
        "hd0",
        "nexthop",
        "via",
        "192.0.2.1",
        "dev",
        "uplink",
    ]);
    n.ip(&[
        "neigh",
        "add",
        "10.88.0.9",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        "hd1",
        "nud",
        "permanent",
    ]);
    let before = world.snapshot();
    let mut grant = wide();
    grant["host"]["links"] = json!(["cnitest*", "hd*"]);
    let run = world.run(
        "ADD",
        &policy_with(grant),
        &conf(
            json!([
                {"call": "link.move-to", "ns": "host", "link": "hd0", "target": "container"},
                {"call": "link.move-to", "ns": "host", "link": "hd1", "target": "container"},
                {"call": "link.set-up", "ns": "host", "link": "hd1", "up": false},
            ]),
            0,
        ),
        &[],
    );
    for i in 0..3 {
        assert_eq!(result(&run, i)["error"], "access-denied", "op {i}: {run:?}");
    }
    support::assert_same(&before, &world.snapshot(), "refused changes");
}

/// A bridge an ADD created for the network is shared as soon as another
/// attachment's link joins it: if the first ADD then fails, its undo keeps
/// the bridge (the other attachment's port stays where it was).
#[test]
fn a_failed_add_keeps_the_network_bridge_another_attachment_joined() {
    let world = World::new("share");
    let mut grant = wide();
    grant["deadline-ms"] = json!(2500);
    let policy = policy_with(grant);
    let first = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-bridge", "ns": "host", "name": "cnijoin0"},
        {"call": "link.set-up", "ns": "host", "link": "cnijoin0", "up": true},
    ], "fail": {"after": 4, "how": "sleep"}});
    let second = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "container", "name": "eth1", "peer-ns": "host", "peer-name": "vethjoin1"},
        {"call": "link.set-master", "ns": "host", "link": "vethjoin1", "master": "cnijoin0"},
    ]});
    let (failed, joined) = std::thread::scope(|s| {
        let (w, p, f) = (&world, &policy, &first);
        let h = s.spawn(move || w.run("ADD", p, f, &[]));
        // While the first ADD sleeps, another attachment joins its bridge.
        std::thread::sleep(Duration::from_millis(800));
        let joined = world.run(
            "ADD",
            &policy,
            &second,
            &[("CNI_CONTAINERID", "ctr-test-2")],
        );
        (h.join().expect("first"), joined)
    });
    failed.assert_cni_error(101, "deadline");
    assert_eq!(joined.code, 0, "{joined:?}");
    for i in 0..2 {
        assert_ok(&joined, i);
    }
    let v: Value =
        serde_json::from_str(&world.node.ip(&["-j", "link", "show", "vethjoin1"])).expect("json");
    assert_eq!(
        v[0]["master"], "cnijoin0",
        "the other attachment's port: {v}"
    );
}

/// The wide grant, allowed to make VRFs in the container.
fn vrf_grant() -> Value {
    let mut g = wide();
    g["container"]["create"] = json!(["veth", "vrf"]);
    g
}

/// `ip rule` of both families in the world's container namespace, the
/// `l3mdev` rules only.
fn l3mdev_rules(world: &World) -> Vec<String> {
    let mut out = Vec::new();
    for family in ["-4", "-6"] {
        let rules = world.ctr.ip(&[family, "rule", "show"]);
        out.extend(
            rules
                .lines()
                .filter(|l| l.contains("l3mdev"))
                .map(|l| format!("{family} {}", l.trim())),
        );
    }
    out
}

/// Runs `test` here if this kernel makes VRFs, else (named `name`) in the
/// VM, whose kernel does.
fn with_vrf(name: &str, test: impl FnOnce()) {
    support::require_root();
    if support::vm::kernel_has("vrf") {
        test();
    } else {
        assert!(!support::vm::inside(), "the VM's kernel lacks VRFs");
        support::vm::rerun_this_test(name);
    }
}

#[test]
fn a_failed_add_keeps_the_l3mdev_rules_another_attachments_vrf_needs() {
    // ADD a makes the namespace's first VRF (the kernel adds the l3mdev
    // rules with it) and is held before it fails; meanwhile ADD b makes a
    // second VRF there and succeeds. a's undo takes its VRF, but not the
    // rules: b's VRF needs them.
    with_vrf(
        "a_failed_add_keeps_the_l3mdev_rules_another_attachments_vrf_needs",
        || {
            let world = World::new("unl3");
            let policy = policy_with(vrf_grant());
            let ops_a = json!([
                {"call": "link.create-vrf", "ns": "container", "name": "red", "table": 10},
                {"call": "link.set-up", "ns": "container", "link": "red", "up": true},
            ]);
            let mut a = world.spawn(
                "ADD",
                &policy,
                &conf(ops_a, 1),
                &[
                    ("CNI_CONTAINERID", "ctr-a"),
                    ("WASMCNI_FAULT", "pause:link.set-up"),
                ],
            );
            a.wait_paused();
            assert_eq!(l3mdev_rules(&world).len(), 2, "the kernel's rules");
            let b = world.run(
                "ADD",
                &policy,
                &conf(
                    json!([{"call": "link.create-vrf", "ns": "container", "name": "blue",
                            "table": 11}]),
                    0,
                ),
                &[("CNI_CONTAINERID", "ctr-b"), ("CNI_IFNAME", "eth1")],
            );
            assert_eq!(b.code, 0, "{b:?}");
            assert_ok(&b, 0);
            a.resume();
            let a = a.wait();
            assert_eq!(a.code, 1, "{a:?}");
            let links = world.ctr.ip(&["-o", "link", "show"]);
            assert!(!links.contains("red"), "a's VRF is undone: {links}");
            assert!(links.contains("blue"), "{links}");
            assert_eq!(
                l3mdev_rules(&world).len(),
                2,
                "b's VRF keeps the l3mdev rules: {:?}",
                l3mdev_rules(&world)
            );
        },
    );
}

#[test]
fn a_vrf_made_after_an_undo_took_the_l3mdev_rules_gets_them() {
    // The kernel adds the l3mdev rules with a namespace's first VRF only:
    // once a failed ADD's undo took them (with its VRF, leaving the
    // namespace as it was), the next VRF there gets them from the host.
    with_vrf(
        "a_vrf_made_after_an_undo_took_the_l3mdev_rules_gets_them",
        || {
            let world = World::new("unl3b");
            let policy = policy_with(vrf_grant());
            let before = world.snapshot();
            let make = |name: &str, table: u32, exit: i32| {
                world.run(
                    "ADD",
                    &policy,
                    &conf(
                        json!([{"call": "link.create-vrf", "ns": "container", "name": name,
                                "table": table}]),
                        exit,
                    ),
                    &[],
                )
            };
            let a = make("red", 10, 1);
            assert_eq!(a.code, 1, "{a:?}");
            assert_ok(&a, 0);
            assert!(l3mdev_rules(&world).is_empty(), "the undo takes them");
            support::assert_same(&before, &world.snapshot(), "after the undo");
            let b = make("blue", 11, 0);
            assert_eq!(b.code, 0, "{b:?}");
            assert_ok(&b, 0);
            assert_eq!(
                l3mdev_rules(&world).len(),
                2,
                "the second VRF's rules: {:?}",
                l3mdev_rules(&world)
            );
        },
    );
}

#[test]
fn a_failed_add_takes_back_only_the_l3mdev_rule_its_vrf_brought() {
    // The namespace keeps the IPv4 l3mdev rule of a VRF made and deleted
    // before, and an admin removed the IPv6 one: the ADD's VRF brings
    // back the IPv6 rule only, and its undo takes only that one.
    with_vrf(
        "a_failed_add_takes_back_only_the_l3mdev_rule_its_vrf_brought",
        || {
            let world = World::new("unl3c");
            world
                .ctr
                .ip(&["link", "add", "old0", "type", "vrf", "table", "20"]);
            world.ctr.ip(&["link", "del", "old0"]);
            world
                .ctr
                .ip(&["-6", "rule", "del", "pref", "1000", "l3mdev"]);
            let before = l3mdev_rules(&world);
            assert_eq!(before.len(), 1, "{before:?}");
            let a = world.run(
                "ADD",
                &policy_with(vrf_grant()),
                &conf(
                    json!([{"call": "link.create-vrf", "ns": "container", "name": "red",
                            "table": 10}]),
                    1,
                ),
                &[],
            );
            assert_eq!(a.code, 1, "{a:?}");
            assert_ok(&a, 0);
            assert_eq!(l3mdev_rules(&world), before, "after the undo");
        },
    );
}

/// The snapshots every comparison here rests on wait for the kernel to
/// settle, and see when it has: a namespace with a veth pair that is up
/// (carrier, IPv6 link-local addresses, their local routes) settles. When
/// the wait judged the normalised snapshot (no `tentative` flag, no
/// link-local local routes), it never saw this settle and every snapshot
/// took the whole wait: CI ran past its limit.
#[test]
fn a_quiet_namespace_snapshot_settles() {
    let ns = support::Netns::new("settle");
    ns.ip(&["link", "add", "st0", "type", "veth", "peer", "name", "st1"]);
    ns.ip(&["link", "set", "st0", "up"]);
    ns.ip(&["link", "set", "st1", "up"]);
    let (snap, settled) = ns.snapshot_settling();
    assert!(settled, "the snapshot did not settle: {snap}");
    let routes = snap["routes6"].to_string();
    assert!(routes.contains("fe80::/64"), "no link-local routes: {snap}");
    assert!(
        !snap.to_string().contains("tentative"),
        "a compared snapshot keeps detection's flag: {snap}"
    );
}

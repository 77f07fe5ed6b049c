//! Chains that never leak, through the real libcni (tests/libcni/) in
//! namespaces the tests make:
//! - `wasmcni-chain` gives the result libcni gives running the same list
//!   plugin by plugin, and its DEL removes everything;
//! - a chain whose member fails ADD, at any position, leaves nothing at
//!   all, before the runtime's cleanup (the plain list leaves the earlier
//!   plugins' changes until the runtime's DEL, and for good when a later
//!   plugin's DEL fails: libcni stops there);
//! - a failing chain retried 100 times: with the runtime's DEL after each
//!   failure nothing leaks (plain list, chain runner, the reference); with
//!   no DEL (a runtime that retries the sandbox without cleaning up,
//!   containerd#12130) the reference and the plain list leak one address
//!   per try, the chain runner none.
//!
//! Needs root, `go` with Debian's libcni, the reference plugins in
//! /usr/lib/cni, and `nft`: without them the tests fail.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::cni::{bin_dir, Call, Drive};
use support::net::Net;

const REFERENCE: &str = "/usr/lib/cni";

/// The podman-style members: bridge (host-local, gateway, masquerade),
/// portmap, tuning.
fn members(tuning_sysctl: &str) -> Vec<Value> {
    vec![
        json!({"type": "bridge", "bridge": "cnichain0", "isGateway": true, "ipMasq": true,
               "hairpinMode": true,
               "ipam": {"type": "host-local", "dataDir": "@data",
                        "ranges": [[{"subnet": "10.89.0.0/24"}]],
                        "routes": [{"dst": "0.0.0.0/0"}]}}),
        json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
        json!({"type": "tuning", "sysctl": {tuning_sysctl: "1"}}),
    ]
}

/// A sysctl tuning accepts.
const GOOD: &str = "net.ipv4.conf.eth0.arp_notify";
/// One it fails on (no such setting).
const BAD: &str = "net.ipv4.conf.eth0.no_such_setting";

/// The list as libcni runs it: one exec per plugin.
fn plain(members: &[Value]) -> Value {
    json!({"cniVersion": "1.0.0", "name": "devnet", "plugins": members})
}

/// The same members as one `wasmcni-chain` plugin.
fn chained(members: &[Value]) -> Value {
    json!({"cniVersion": "1.0.0", "name": "devnet", "plugins": [
        {"type": "wasmcni-chain", "capabilities": {"portMappings": true}, "plugins": members}]})
}

fn write(net: &Net, name: &str, list: &Value) -> PathBuf {
    let text = list.to_string().replace(
        "\"@data\"",
        &Value::from(net.data().display().to_string()).to_string(),
    );
    let p = net.dir.path().join(name);
    std::fs::write(&p, text).expect("conflist");
    p
}

const CAPARGS: &str =
    r#"{"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}"#;

fn call(net: &Net, bin: &Path, cmd: &str, conflist: &Path, netns: &Path, cid: &str) -> Drive {
    Call {
        node: &net.node,
        bin,
        cmd,
        conflist,
        netns,
        cid,
        ifname: "eth0",
        cache: &net.dir.path().join("cache"),
        args: "",
        capargs: CAPARGS,
        env: &net.env,
    }
    .run()
}

/// `v` with what is random per run replaced: MAC addresses, and the host
/// veth's name (`veth` and 8 hex digits).
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let x = if k == "mac" {
                        json!("<mac>")
                    } else {
                        normalized(x)
                    };
                    (k.clone(), x)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        Value::String(s) if s.starts_with("veth") && s.len() == 12 => json!("<veth>"),
        Value::String(s) if s.starts_with("/run/netns/") => json!("<netns>"),
        // Route listings: the host veth's name and link-local addresses;
        // without the local routes of link-local addresses, which the
        // kernel adds once duplicate address detection is done (a second
        // or so after a link comes up: a loaded machine's snapshot may
        // come before it), not by any plugin's doing.
        Value::String(s) if s.contains('\n') => Value::from(
            s.lines()
                .filter(|l| !(l.starts_with("local fe80::") && l.contains(" table local ")))
                .map(|l| {
                    l.split(' ')
                        .map(|w| {
                            if w.starts_with("veth") && w.len() == 12 {
                                "<veth>"
                            } else if w.starts_with("fe80::") && !w.contains('/') {
                                "<ll>"
                            } else {
                                w
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        x => x.clone(),
    }
}

/// Attachment records under the run's state root.
fn records(net: &Net) -> usize {
    let mut n = 0;
    let mut dirs = vec![net.dir.path().join("state").join("attachments")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            } else {
                n += 1;
            }
        }
    }
    n
}

/// What a chain may leave in the node and the container: links, addresses,
/// routes, nftables rules (tags and all), reservations and records.
fn state(net: &Net) -> Value {
    let links = |ns: &support::Netns| {
        let v: Value = serde_json::from_str(&ns.ip(&["-j", "addr", "show"])).expect("ip -j");
        v.as_array()
            .expect("links")
            .iter()
            .map(|l| {
                let addrs: Vec<String> = l["addr_info"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|a| a["scope"] != "link")
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
                    .collect();
                json!({"name": l["ifname"], "addrs": addrs})
            })
            .collect::<Vec<_>>()
    };
    let rules: Vec<Value> = net
        .node
        .wasmcni_rules()
        .into_iter()
        .map(|mut r| {
            r["handle"] = Value::Null;
            r
        })
        .collect();
    json!({
        "node": links(&net.node),
        "ctr": links(&net.ctr),
        "node-routes": net.node.ip(&["route", "show", "table", "all"]),
        "ctr-routes": net.ctr.ip(&["route", "show", "table", "all"]),
        "rules": rules,
        "reservations": net.reservations(),
        "records": records(net),
    })
}

/// The node and container are as `before` but for the network's bridge,
/// which stays after the last DEL as the reference's does (its gateway
/// address and routes with it).
fn assert_back_to(net: &Net, before: &Value, what: &str) {
    let mut after = state(net);
    after["node"]
        .as_array_mut()
        .expect("links")
        .retain(|l| l["name"] != "cnichain0");
    let mut was = before.clone();
    was["node-routes"] = Value::Null;
    after["node-routes"] = Value::Null;
    assert_eq!(was, after, "{what}");
}

#[test]
fn the_chain_runner_gives_the_result_libcni_gives_for_the_same_list() {
    let mut results = Vec::new();
    let mut states = Vec::new();
    for (name, list) in [
        ("plain", plain(&members(GOOD))),
        ("chained", chained(&members(GOOD))),
    ] {
        let net = Net::new(&format!("ch{}", &name[..2]));
        let before = state(&net);
        let conflist = write(&net, "net.conflist", &list);
        let add = call(&net, bin_dir(), "add", &conflist, &net.ctr.path, "ctr0");
        assert_eq!(add.code, 0, "{name} ADD: {add:?}");
        results.push(normalized(&add.json()));
        // One record per plugin for the list, one for the chain: compared
        // by what they hold, below.
        let mut s = normalized(&state(&net));
        s["records"] = Value::Null;
        states.push(s);
        let check = call(&net, bin_dir(), "check", &conflist, &net.ctr.path, "ctr0");
        assert_eq!(check.code, 0, "{name} CHECK: {check:?}");
        let del = call(&net, bin_dir(), "del", &conflist, &net.ctr.path, "ctr0");
        assert_eq!(del.code, 0, "{name} DEL: {del:?}");
        assert_back_to(&net, &before, &format!("{name}: DEL left something"));
        assert_eq!(net.reservations(), Vec::<String>::new());
        assert_eq!(records(&net), 0, "{name}: records left");
    }
    assert_eq!(results[0], results[1], "the chain's result is libcni's");
    assert_eq!(
        states[0], states[1],
        "the chain leaves the node and container as the list does"
    );
}

#[test]
fn a_chain_failure_at_any_position_undoes_the_whole_chain() {
    // Position 1: portmap with a config it refuses; position 2: tuning
    // with a setting that does not exist.
    let mut bad_portmap = members(GOOD);
    bad_portmap[1]["snat"] = json!("yes");
    for (what, members) in [("portmap", bad_portmap), ("tuning", members(BAD))] {
        let net = Net::new(&format!("chf{}", &what[..2]));
        let before = state(&net);
        let conflist = write(&net, "chain.conflist", &chained(&members));
        let add = call(&net, bin_dir(), "add", &conflist, &net.ctr.path, "ctr0");
        assert_ne!(add.code, 0, "{what}: {add:?}");
        let err = add.cni_error().unwrap_or_else(|| panic!("{what}: {add:?}"));
        assert!(
            err["details"].as_str().unwrap_or("").contains(what),
            "the error names the member: {err}"
        );
        let after = state(&net);
        // The first ADD of the network made its bridge: undone too.
        assert_eq!(before, after, "{what}: the failed chain left something");
        // The plain list, for contrast: the earlier plugins' changes stay
        // until the runtime's DEL, which goes through every member (portmap
        // refuses its config on ADD, not on DEL; the reference's DEL fails
        // on it, so libcni never reaches its bridge, which leaks).
        let conflist = write(&net, "plain.conflist", &plain(&members));
        let add = call(&net, bin_dir(), "add", &conflist, &net.ctr.path, "ctr1");
        assert_ne!(add.code, 0, "{what}: {add:?}");
        assert_eq!(
            net.reservations().len(),
            1,
            "{what}: the list's bridge ADD stays"
        );
        let del = call(&net, bin_dir(), "del", &conflist, &net.ctr.path, "ctr1");
        assert_eq!(del.code, 0, "{what}: {del:?}");
        assert_back_to(
            &net,
            &before,
            &format!("{what}: the runtime's DEL cleaned the list up"),
        );
    }
}

/// A list whose last member's policy entry is broken (a typo in it, as an
/// operator's edit may leave it): that member cannot run, so the list's
/// ADD fails at it; the runtime's DEL after it must still complete — the
/// broken member's DEL gets the host's record-driven cleanup and succeeds,
/// so libcni goes on to portmap's and bridge's, and nothing is left. The
/// same when the entry breaks between a good ADD and its DEL.
#[test]
fn a_broken_policy_entry_does_not_stop_the_lists_del() {
    let net = Net::new("chbpol");
    let before = state(&net);
    let policy = net.dir.path().join("policy.json");
    let write_policy = |tuning: Value| {
        let v = json!({"plugins": {
            "host-local": {"ipam-roots": [net.data()]},
            "tuning": tuning}});
        std::fs::write(&policy, v.to_string()).expect("policy");
    };
    // tuning's default entry, and the same with a typo.
    let good = json!({"attachment-state": true,
                      "container": {"read": true, "modify": true, "sysctls": ["net.*"]}});
    let mut broken = good.clone();
    broken["container"]["modfiy"] = json!(true);
    let conflist = write(&net, "plain.conflist", &plain(&members(GOOD)));
    // Broken before the ADD.
    write_policy(broken.clone());
    let add = call(&net, bin_dir(), "add", &conflist, &net.ctr.path, "ctr0");
    assert_ne!(add.code, 0, "{add:?}");
    let err = add.cni_error().unwrap_or_else(|| panic!("{add:?}"));
    assert_eq!(err["code"], 105, "{err}");
    assert!(
        err["msg"].as_str().unwrap_or("").contains("modfiy"),
        "{err}"
    );
    let del = call(&net, bin_dir(), "del", &conflist, &net.ctr.path, "ctr0");
    assert_eq!(del.code, 0, "the list's DEL after the failed ADD: {del:?}");
    assert_back_to(&net, &before, "broken before the ADD: the runtime's DEL");
    // Broken between a good ADD and its DEL.
    write_policy(good.clone());
    let add = call(&net, bin_dir(), "add", &conflist, &net.ctr.path, "ctr1");
    assert_eq!(add.code, 0, "{add:?}");
    write_policy(broken.clone());
    let del = call(&net, bin_dir(), "del", &conflist, &net.ctr.path, "ctr1");
    assert_eq!(
        del.code, 0,
        "the list's DEL with tuning's entry broken: {del:?}"
    );
    assert_back_to(&net, &before, "broken after the ADD: the runtime's DEL");
    // The same members as one wasmcni-chain: a member that cannot be
    // resolved keeps the whole chain from running, and its DEL gets the
    // host's cleanup of the chain's record. That record holds what only
    // the members' DELs take back (portmap's `route_localnet` and the
    // bridge's MAC on the shared bridge): the DEL fails naming it, and
    // goes through once the entry is fixed.
    let chain = write(&net, "chain.conflist", &chained(&members(GOOD)));
    write_policy(good.clone());
    let add = call(&net, bin_dir(), "add", &chain, &net.ctr.path, "ctr2");
    assert_eq!(add.code, 0, "{add:?}");
    write_policy(broken);
    let del = call(&net, bin_dir(), "del", &chain, &net.ctr.path, "ctr2");
    let err = del.cni_error().unwrap_or_else(|| panic!("{del:?}"));
    assert_eq!(err["code"], 105, "{err}");
    assert!(
        err["details"]
            .as_str()
            .unwrap_or("")
            .contains("cannot stand in for this DEL"),
        "{err}"
    );
    write_policy(good);
    let del = call(&net, bin_dir(), "del", &chain, &net.ctr.path, "ctr2");
    assert_eq!(
        del.code, 0,
        "the chain's DEL once the entry is fixed: {del:?}"
    );
    assert_back_to(&net, &before, "the chain: the runtime's DEL after the fix");
    let audit = std::fs::read_to_string(net.dir.path().join("audit.jsonl")).unwrap_or_default();
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"del.stand-in\"") && l.contains("\"tuning\"")),
        "the stand-in is audited"
    );
}

/// Runs the failing list `n` times (a new container ID each time, as a
/// runtime retrying a sandbox does), with the runtime's DEL after each
/// failure (in the one container namespace), or without (each try in a
/// namespace of its own, gone after it, as a failed sandbox's is); answers
/// the reservations and host veths left.
fn retry(net: &Net, bin: &Path, conflist: &Path, n: usize, cleanup: bool) -> (usize, usize) {
    for i in 0..n {
        let cid = format!("retry{i}");
        let own = (!cleanup).then(|| support::Netns::new("chrs"));
        let netns = own.as_ref().map_or(&net.ctr.path, |ns| &ns.path);
        let add = call(net, bin, "add", conflist, netns, &cid);
        assert_ne!(add.code, 0, "ADD {i} must fail: {add:?}");
        if cleanup {
            let del = call(net, bin, "del", conflist, netns, &cid);
            assert_eq!(del.code, 0, "DEL {i}: {del:?}");
        }
    }
    let veths = net
        .node
        .ip(&["-o", "link", "show", "type", "veth"])
        .lines()
        .count();
    (net.reservations().len(), veths)
}

#[test]
fn a_failing_chain_retried_100_times_leaks_nothing() {
    const N: usize = 100;
    let failing = members(BAD);
    let mut report = Vec::new();
    for (who, bin, list) in [
        ("reference list", Path::new(REFERENCE), plain(&failing)),
        ("wasmcni list", bin_dir(), plain(&failing)),
        ("wasmcni-chain", bin_dir(), chained(&failing)),
    ] {
        for cleanup in [true, false] {
            let net = Net::new("chr");
            let conflist = write(&net, "net.conflist", &list);
            let (ips, veths) = retry(&net, bin, &conflist, N, cleanup);
            report.push(format!(
                "{who}, {} DEL: {ips} reservations, {veths} host veths left after {N} tries",
                if cleanup { "with" } else { "without" }
            ));
            if cleanup || who == "wasmcni-chain" {
                assert_eq!((ips, veths), (0, 0), "{who}, cleanup {cleanup}");
                assert_eq!(records(&net), 0, "{who}: records left");
            } else {
                // What a runtime that does not clean up is left with.
                assert_eq!(ips, N, "{who} leaks one address per try");
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// Runs `wasmcni-chain` in `world` with `members` (scripted ones among
/// them, found in the fixtures) under `policy`.
fn run_chain(
    world: &support::world::World,
    command: &str,
    policy: &Value,
    members: Value,
) -> support::Run {
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "wasmcni-chain",
                      "plugins": members,
                      "runtimeConfig": {"portMappings": [
                          {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}});
    let fixtures = support::fixture("scripted")
        .parent()
        .expect("fixture dir")
        .display()
        .to_string();
    support::Invoke::wasmcni_run("wasmcni-chain", conf.to_string().as_bytes())
        .cni(command, &world.ctr.path, "eth0")
        .env("WASMCNI_POLICY", world.policy(policy).display().to_string())
        .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
        .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
        .env("WASMCNI_PLUGIN_DIR", fixtures)
        .in_netns(&world.node)
        .run()
}

#[test]
fn a_chain_members_result_is_no_address_the_next_member_may_use() {
    // A member that only prints a result naming an address the container
    // does not hold (another container's): portmap after it must not map
    // the runtime's port there. It would in-process if member results were
    // taken as the attachment's addresses (as an IPAM delegate's are).
    let world = support::world::World::new("chaddr");
    let before = world.snapshot();
    let policy = json!({"plugins": {"scripted": {}}});
    let r = run_chain(
        &world,
        "ADD",
        &policy,
        json!([
            {"type": "scripted", "print": {"cniVersion": "1.0.0",
                "ips": [{"address": "10.70.0.99/24"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}]),
    );
    assert_ne!(r.code, 0, "portmap must be refused: {r:?}");
    assert!(r.stdout.contains("plugins[1] (portmap)"), "{r:?}");
    support::assert_same(
        &before,
        &world.snapshot(),
        "a refused chain changes nothing",
    );
}

#[test]
fn a_chain_member_may_not_touch_the_links_an_earlier_member_made() {
    let world = support::world::World::new("chlink");
    let before = world.snapshot();
    let policy = json!({"plugins": {"scripted": support::world::wide()}});
    let r = run_chain(
        &world,
        "ADD",
        &policy,
        json!([
            {"type": "scripted", "ops": [{"call": "link.create-veth", "ns": "host",
                "name": "cnitestm0", "peer-ns": "container", "peer-name": "eth0"}]},
            {"type": "scripted", "ops": [{"call": "link.delete", "ns": "host",
                "link": "cnitestm0"}]}]),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let report: Value = serde_json::from_str(&r.stdout).expect("the last member's report");
    assert_eq!(
        report["results"][0]["error"], "access-denied",
        "the second member deleted the first's link: {report}"
    );
    assert!(world.node.ip(&["link", "show"]).contains("cnitestm0"));
    // The chain's DEL (the members do nothing in DEL here but make their
    // calls again, which fail) and the host's record leave nothing.
    let del = run_chain(
        &world,
        "DEL",
        &policy,
        json!([{"type": "scripted"}, {"type": "scripted"}]),
    );
    assert_eq!(del.code, 0, "{del:?}");
    support::assert_same(&before, &world.snapshot(), "after the chain's DEL");
}

/// `kill -9` of the chain runner right after each of its host calls acted
/// (through libcni, as a runtime's timeout kills a plugin): from what it
/// leaves (its intent log), the runtime's DEL, or a GC that no longer
/// holds the attachment, takes the node and the container back to the
/// start (but for the network's bridge, which a DEL leaves too).
#[test]
fn a_chain_killed_at_any_host_call_is_cleaned_up_by_del_and_gc() {
    let net = Net::new("chkill");
    let before = state(&net);
    let list = chained(&members(GOOD));
    let conflist = write(&net, "net.conflist", &list);
    // The runtime's GC holding no attachment, as libcni 1.2 calls the
    // plugin (Debian's libcni 1.1.2 has no GC).
    let mut gc = list["plugins"][0].clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["name"] = json!("devnet");
    gc["cni.dev/valid-attachments"] = json!([]);
    let gc = gc.to_string().replace(
        "\"@data\"",
        &Value::from(net.data().display().to_string()).to_string(),
    );
    let (mut killed, mut left) = (0, 0);
    let mut whole = false;
    'calls: for k in 1..=200 {
        for cleanup in ["DEL", "GC"] {
            let mut env = net.env.clone();
            env.push(("WASMCNI_FAULT".into(), format!("kill:{k}")));
            let add = Call {
                node: &net.node,
                bin: bin_dir(),
                cmd: "add",
                conflist: &conflist,
                netns: &net.ctr.path,
                cid: "ctr0",
                ifname: "eth0",
                cache: &net.dir.path().join("cache"),
                args: "",
                capargs: CAPARGS,
                env: &env,
            }
            .run();
            if add.code == 0 {
                // Past the chain's last host call: it ran whole.
                let del = call(&net, bin_dir(), "del", &conflist, &net.ctr.path, "ctr0");
                assert_eq!(del.code, 0, "DEL: {del:?}");
                whole = true;
                break 'calls;
            }
            assert!(
                add.stderr.contains("signal: killed"),
                "kill:{k}: the chain is killed: {add:?}"
            );
            killed += 1;
            if records(&net) > 0 {
                left += 1;
            }
            let c = if cleanup == "DEL" {
                let d = call(&net, bin_dir(), "del", &conflist, &net.ctr.path, "ctr0");
                (d.code, format!("{d:?}"))
            } else {
                let mut inv = support::Invoke::wasmcni_run("wasmcni-chain", gc.as_bytes())
                    .cni("GC", &net.ctr.path, "eth0")
                    .env("CNI_CONTAINERID", "ctr0")
                    .in_netns(&net.node);
                for (key, v) in &net.env {
                    inv = inv.env(key, v);
                }
                let r = inv.run();
                (r.code, format!("{r:?}"))
            };
            assert_eq!(c.0, 0, "{cleanup} after kill:{k}: {}", c.1);
            assert_back_to(
                &net,
                &before,
                &format!("{cleanup} after the chain was killed at host call {k}"),
            );
        }
    }
    assert!(whole, "the chain makes fewer than 200 host calls");
    assert!(killed >= 40, "{killed} kills");
    assert!(
        left * 2 > killed,
        "{left} of {killed} kills left an intent log"
    );
}

/// Closing a netfilter socket after a commit waits out an RCU grace
/// period in the kernel (nf_tables' destroy work, 7–18 ms here), so a
/// process keeps one socket per namespace for all its users: a chain
/// whose bridge masquerades, whose portmap maps a TCP and a UDP port (the
/// UDP one flushes conntrack entries) and whose firewall adds rules opens
/// one netfilter socket in ADD and one in DEL, where it used to open one
/// per member and one more for conntrack.
#[test]
fn a_chain_opens_one_netfilter_socket() {
    support::require_root();
    let net = Net::new("chnf");
    let conf = json!({"cniVersion": "1.0.0", "name": "devnet", "type": "wasmcni-chain",
        "plugins": [
            members(GOOD)[0].clone(),
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall"}],
        "runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 5353, "containerPort": 53, "protocol": "udp"}]}})
    .to_string()
    .replace(
        "\"@data\"",
        &Value::from(net.data().display().to_string()).to_string(),
    );
    for command in ["ADD", "DEL"] {
        let log = net.dir.path().join(format!("{command}.strace"));
        let mut inv = support::Invoke::exe("strace", conf.as_bytes());
        let exe = support::wasmcni().display().to_string();
        let log_arg = log.display().to_string();
        for a in [
            "-f",
            "-qq",
            "-e",
            "trace=socket",
            "-e",
            "signal=none",
            "-o",
            &log_arg,
            &exe,
            "run",
            "wasmcni-chain",
        ] {
            inv = inv.arg(a);
        }
        inv = inv.cni(command, &net.ctr.path, "eth0").env(
            "WASMCNI_CACHE_DIR",
            support::cache_dir().display().to_string(),
        );
        for (k, v) in &net.env {
            inv = inv.env(k, v);
        }
        let run = inv.in_netns(&net.node).run();
        assert_eq!(run.code, 0, "{command}: {run:?}");
        let trace = std::fs::read_to_string(&log).expect("strace's log");
        let netfilter = trace
            .lines()
            .filter(|l| l.contains("NETLINK_NETFILTER") && !l.contains("= -1"))
            .count();
        assert!(
            trace.contains("NETLINK_ROUTE"),
            "{command}: is strace's output what this test reads?\n{trace}"
        );
        assert_eq!(netfilter, 1, "{command}: netfilter sockets opened\n{trace}");
    }
}

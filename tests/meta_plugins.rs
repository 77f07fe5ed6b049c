//! The meta plugins beyond their differential cases (tests/cases/): sbr's
//! upstream options (`table`, `gateways`, `addSourceHints`, newer than
//! Debian's reference) and its undo; the tables sbr and vrf choose when
//! two ADDs in one container run at once (`WASMCNI_FAULT=pause:CALL`
//! stops one in the window); the `tuning` plugin and the
//! `attachment-state` capability it keeps its backup in: values
//! applied and restored on DEL (which the differential cannot see: there
//! the veth goes with the bridge's DEL), upstream's `txQLen` and CHECK of
//! `IFNAME` keys (newer than Debian's reference), the record's lifecycle
//! (kept from ADD to DEL, put back by a failed ADD, removed by DEL and by
//! GC), and its confinement (S2: no grant, no write outside ADD/DEL, no
//! reaching another attachment's record through a delegate's config).

mod support;

use serde_json::{json, Value};
use support::world::World;
use support::Run;

/// Runs bundled `plugin` in `world` (node namespace as the host) with
/// `conf` for container `cid`.
fn run(world: &World, plugin: &str, command: &str, conf: &Value, cid: &str) -> Run {
    world.run_bundled(&world.ctr, plugin, command, conf, cid)
}

/// The container's `eth0`, as `ip -j -d link` shows it.
fn eth0(world: &World) -> Value {
    let v: Value =
        serde_json::from_str(&world.ctr.ip(&["-j", "-d", "link", "show", "eth0"])).expect("json");
    v[0].clone()
}

/// What tuning may change of a link: MTU, MAC, flags, queue length.
fn tunables(l: &Value) -> Value {
    let flag = |f: &str| {
        l["flags"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == f))
    };
    json!({"mtu": l["mtu"], "mac": l["address"], "promisc": l["promiscuity"].as_u64() > Some(0),
           "allmulti": flag("ALLMULTI"), "txqlen": l["txqlen"]})
}

fn plugin_state_files(world: &World) -> Vec<String> {
    fn walk(d: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&world.state_dir().join("plugin-state"), &mut out);
    out
}

/// A container with an `eth0` (a veth whose peer stays in the container),
/// and tuning's config chained after it.
fn setup(tag: &str, tuning: Value) -> (World, Value) {
    let world = World::new(tag);
    world.ctr.ip(&[
        "link",
        "add",
        "eth0",
        "txqueuelen",
        "1000",
        "type",
        "veth",
        "peer",
        "name",
        "eth0p",
    ]);
    world.ctr.ip(&["link", "set", "eth0", "up"]);
    let mut conf = tuning;
    conf["cniVersion"] = json!("1.0.0");
    conf["name"] = json!("tunenet");
    conf["type"] = json!("tuning");
    conf["prevResult"] = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "", "sandbox": world.ctr.path.display().to_string()}],
        "ips": []});
    (world, conf)
}

#[test]
fn tuning_applies_every_value_checks_them_and_restores_them_on_del() {
    support::require_root();
    let (world, conf) = setup(
        "tun1",
        json!({"mtu": 1280, "mac": "02:11:22:33:44:55", "promisc": true, "allmulti": true,
               "txQLen": 321,
               "sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2", "net.core.somaxconn": "777"}}),
    );
    let before = tunables(&eth0(&world));
    assert_eq!(before["mtu"], 1500, "{before}");

    let add = run(&world, "tuning", "ADD", &conf, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    // The result is the prevResult with the interface's new MAC.
    assert_eq!(
        add.json()["interfaces"][0]["mac"],
        "02:11:22:33:44:55",
        "{add:?}"
    );
    let now = tunables(&eth0(&world));
    assert_eq!(
        now,
        json!({"mtu": 1280, "mac": "02:11:22:33:44:55", "promisc": true, "allmulti": true,
               "txqlen": 321}),
        "after ADD"
    );
    let sysctls = world.ctr.sysctls();
    for want in [
        "/proc/sys/net/ipv4/conf/eth0/rp_filter:2",
        "/proc/sys/net/core/somaxconn:777",
    ] {
        assert!(sysctls.iter().any(|l| l == want), "{want} not set");
    }
    // The backup is the plugin's record for this attachment, with the
    // old values.
    let files = plugin_state_files(&world);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].ends_with("plugin-state/tunenet/c1/eth0/tuning.json"),
        "{files:?}"
    );
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).expect("record")).expect("json");
    let backup: Value =
        serde_json::from_str(record["values"]["restore"].as_str().expect("restore")).expect("json");
    assert_eq!(backup["mtu"], 1500, "{record}");
    assert_eq!(backup["txQLen"], 1000, "{record}");
    assert_eq!(backup["promisc"], false, "{record}");

    // CHECK (upstream's: IFNAME substituted) passes, and fails once a
    // value drifts.
    let check = run(&world, "tuning", "CHECK", &conf, "c1");
    assert_eq!(check.code, 0, "{check:?}");
    world.ctr.ip(&["link", "set", "eth0", "txqueuelen", "99"]);
    let check = run(&world, "tuning", "CHECK", &conf, "c1");
    check.assert_cni_error(
        999,
        "Transmit Queue Length of eth0 is 321, current value is 99",
    );
    world.ctr.ip(&["link", "set", "eth0", "txqueuelen", "321"]);
    world.ctr.sysctl("net.ipv4.conf.eth0.rp_filter", "1");
    let check = run(&world, "tuning", "CHECK", &conf, "c1");
    check.assert_cni_error(
        999,
        "Tuning configured value of /proc/sys/net/ipv4/conf/eth0/rp_filter is 2, current value is 1",
    );

    // DEL puts every interface value back, and the record goes.
    let del = run(&world, "tuning", "DEL", &conf, "c1");
    assert_eq!(del.code, 0, "{del:?}");
    assert_eq!(tunables(&eth0(&world)), before, "after DEL");
    assert!(
        plugin_state_files(&world).is_empty(),
        "{:?}",
        plugin_state_files(&world)
    );
    // A second DEL (spec: DEL may come again) has nothing to do.
    let del = run(&world, "tuning", "DEL", &conf, "c1");
    assert_eq!(del.code, 0, "{del:?}");
    assert_eq!(tunables(&eth0(&world)), before);
}

#[test]
fn a_failed_tuning_add_leaves_the_interface_sysctls_and_record_as_they_were() {
    support::require_root();
    // The MTU is out of the veth's range: the kernel refuses it after the
    // sysctl, the MAC and promiscuity have changed.
    let (world, conf) = setup(
        "tun2",
        json!({"mtu": 70000, "mac": "02:11:22:33:44:66", "promisc": true,
               "sysctl": {"net.core.somaxconn": "555"}}),
    );
    let before = world.snapshot();
    let add = run(&world, "tuning", "ADD", &conf, "c1");
    assert_ne!(add.code, 0, "{add:?}");
    support::assert_same(&before, &world.snapshot(), "after the failed ADD");
    assert!(plugin_state_files(&world).is_empty());
}

#[test]
fn bad_tuning_configs_are_cni_errors_that_change_nothing() {
    support::require_root();
    for (conf, code, needle) in [
        (
            json!({"sysctl": {"kernel.hostname": "x"}}),
            999,
            "invalid net sysctl key: \"kernel/hostname\"",
        ),
        (
            json!({"mac": "not-a-mac"}),
            999,
            "invalid args not-a-mac for MAC addr",
        ),
        (json!({"mtu": "big"}), 7, "mtu"),
        (json!({"txQLen": -1}), 7, "txQLen"),
        (json!({"allmulti": "yes"}), 7, "allmulti"),
    ] {
        let (world, conf) = setup("tun3", conf);
        let before = world.snapshot();
        let add = run(&world, "tuning", "ADD", &conf, "c1");
        add.assert_cni_error(code, needle);
        support::assert_same(&before, &world.snapshot(), &format!("{conf}"));
    }
    // No prevResult: the reference's error.
    let (world, mut conf) = setup("tun4", json!({"mtu": 1400}));
    conf.as_object_mut().expect("object").remove("prevResult");
    run(&world, "tuning", "ADD", &conf, "c1").assert_cni_error(999, "Required prevResult missing");
}

/// The scripted fixture's policy with (or without) `attachment-state`.
fn scripted_policy(state: bool) -> Value {
    json!({"plugins": {"scripted": {"attachment-state": state, "delegates": ["scripted"]}}})
}

fn scripted(ops: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "statenet", "type": "scripted", "ops": ops})
}

fn results(r: &Run) -> Vec<Value> {
    r.json()["results"].as_array().cloned().unwrap_or_default()
}

#[test]
fn s2_attachment_state_needs_its_grant_and_a_writing_command() {
    let world = World::new("sts1");
    let before = world.snapshot();
    let ops = json!([{"call": "state.set", "key": "k", "value": "v"},
                     {"call": "state.get", "key": "k"},
                     {"call": "state.keys"},
                     {"call": "state.remove", "key": "k"}]);
    // No grant: every call refused, nothing written, the reason names the
    // policy field.
    let r = world.run("ADD", &scripted_policy(false), &scripted(ops.clone()), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    for (i, res) in results(&r).iter().enumerate() {
        assert_eq!(res["error"], "access-denied", "op {i}: {r:?}");
    }
    let audit = world.audit();
    assert!(
        audit.iter().any(|a| a["call"] == "attachment-state.set"
            && a["reason"]
                .as_str()
                .is_some_and(|s| s.contains("plugins.scripted.attachment-state is false"))),
        "{audit:?}"
    );
    support::assert_same(&before, &world.snapshot(), "denied state calls");

    // CHECK may read, never write.
    let r = world.run("CHECK", &scripted_policy(true), &scripted(ops.clone()), &[]);
    let res = results(&r);
    assert_eq!(res[0]["error"], "access-denied", "{r:?}");
    assert_eq!(res[1], json!({"call": "state.get", "ok": null}), "{r:?}");
    assert_eq!(res[2], json!({"call": "state.keys", "ok": []}), "{r:?}");
    support::assert_same(&before, &world.snapshot(), "CHECK");

    // Bounds.
    let r = world.run(
        "ADD",
        &scripted_policy(true),
        &scripted(json!([{"call": "state.set", "key": "a/b", "value": "v"},
                         {"call": "state.set", "key": "k", "value": "x".repeat(4097)},
                         {"call": "state.set", "key": "k".repeat(65), "value": "v"}])),
        &[],
    );
    let res = results(&r);
    assert_eq!(res[0]["error"], "invalid-argument", "{r:?}");
    assert_eq!(res[1]["error"], "limit-exceeded", "{r:?}");
    assert_eq!(res[2]["error"], "limit-exceeded", "{r:?}");
    support::assert_same(&before, &world.snapshot(), "refused writes");
}

#[test]
fn attachment_state_lives_from_add_to_del_and_a_failed_add_puts_it_back() {
    let world = World::new("sts2");
    let policy = scripted_policy(true);
    let r = world.run(
        "ADD",
        &policy,
        &scripted(json!([{"call": "state.set", "key": "old-mtu", "value": "1500"}])),
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let kept = world.snapshot();
    assert_eq!(
        kept["records"].as_object().map(|m| m.len()),
        Some(1),
        "{kept}"
    );

    // A failing ADD's writes are undone: the record is as it was.
    let mut failing = scripted(
        json!([{"call": "state.set", "key": "old-mtu", "value": "9000"},
                                      {"call": "state.set", "key": "more", "value": "x"},
                                      {"call": "state.get", "key": "old-mtu"}]),
    );
    failing["exit"] = json!(1);
    let r = world.run("ADD", &policy, &failing, &[]);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(results(&r)[2]["ok"], "9000", "{r:?}");
    support::assert_same(&kept, &world.snapshot(), "after the failed ADD");

    // The next invocation for the attachment (its DEL) reads it back.
    let r = world.run(
        "DEL",
        &policy,
        &scripted(json!([{"call": "state.get", "key": "old-mtu"}, {"call": "state.keys"}])),
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(results(&r)[0]["ok"], "1500", "{r:?}");
    assert_eq!(results(&r)[1]["ok"], json!(["old-mtu"]), "{r:?}");
    // A successful DEL removes it, even when the plugin did not.
    let after = world.snapshot();
    assert_eq!(after["records"], json!({}), "{after}");
}

#[test]
fn a_failed_del_keeps_the_record_for_the_retry() {
    let world = World::new("sts3");
    let policy = scripted_policy(true);
    let r = world.run(
        "ADD",
        &policy,
        &scripted(json!([{"call": "state.set", "key": "k", "value": "v"}])),
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let mut del = scripted(json!([]));
    del["exit"] = json!(1);
    let r = world.run("DEL", &policy, &del, &[]);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(
        world.snapshot()["records"].as_object().map(|m| m.len()),
        Some(1)
    );
    let r = world.run("DEL", &policy, &scripted(json!([])), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(world.snapshot()["records"], json!({}));
}

#[test]
fn s2_a_delegate_cannot_reach_another_networks_record_through_its_config() {
    let world = World::new("sts4");
    let policy = scripted_policy(true);
    // The caller hands its delegate a config of another network: the
    // delegate's record is still the runtime's attachment's (network
    // `statenet`), under the delegate's own name.
    let inner = json!({"cniVersion": "1.0.0", "name": "othernet", "type": "scripted",
                       "ops": [{"call": "state.set", "key": "k", "value": "from-delegate"}]});
    let r = world.run(
        "ADD",
        &policy,
        &scripted(
            json!([{"call": "delegate.run", "type": "scripted", "command": "ADD",
                          "config": inner}]),
        ),
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let records = world.snapshot()["records"].clone();
    let names: Vec<&String> = records.as_object().expect("records").keys().collect();
    assert_eq!(names.len(), 1, "{records}");
    assert!(
        names[0].starts_with("plugin-state/statenet/ctr-test-1/eth0/"),
        "{names:?}"
    );
}

#[test]
fn gc_removes_exactly_the_records_of_attachments_the_runtime_no_longer_holds() {
    let world = World::new("sts5");
    let policy = scripted_policy(true);
    let set = scripted(json!([{"call": "state.set", "key": "k", "value": "v"}]));
    for cid in ["c1", "c2", "c3", "c4"] {
        let r = world.run("ADD", &policy, &set, &[("CNI_CONTAINERID", cid)]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let mut gc = scripted(json!([]));
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c2", "ifname": "eth0"},
                                             {"containerID": "c4", "ifname": "eth0"}]);
    let r = world.run("GC", &policy, &gc, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let records = world.snapshot()["records"].clone();
    let mut left: Vec<String> = records
        .as_object()
        .expect("records")
        .keys()
        .map(|k| k.split('/').nth(2).unwrap_or("").to_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["c2", "c4"], "{records}");
    assert!(r.stderr.contains("GC removed the plugin state"), "{r:?}");
}

/// The container's rules (`ip rule`), both families, as text lines.
fn rules(world: &World) -> Vec<String> {
    let mut out: Vec<String> = world
        .ctr
        .ip(&["-4", "rule", "show"])
        .lines()
        .map(str::to_owned)
        .collect();
    out.extend(
        world
            .ctr
            .ip(&["-6", "rule", "show"])
            .lines()
            .map(str::to_owned),
    );
    out
}

#[test]
fn s2_rules_only_with_routes_and_never_in_the_host_namespace() {
    let world = World::new("rul1");
    let before = world.snapshot();
    let add =
        |ns: &str| json!({"call": "rule.add", "ns": ns, "source": "10.9.0.2/32", "table": 100});
    let ops = json!([add("container"), add("host"),
                     {"call": "rule.list", "ns": "container"}]);
    // No `routes`: refused. `routes` in both namespaces: the host's still
    // refused (an invariant).
    for (policy, container_ok) in [
        (
            json!({"container": {"read": true}, "host": {"read": true}}),
            false,
        ),
        (
            json!({"container": {"read": true, "routes": true},
                "host": {"read": true, "routes": true}}),
            true,
        ),
    ] {
        let mut entry = policy;
        entry["delegates"] = json!([]);
        let r = world.run(
            "ADD",
            &json!({"plugins": {"scripted": entry}}),
            &scripted(ops.clone()),
            &[],
        );
        let res = results(&r);
        assert_eq!(res[1]["error"], "access-denied", "{r:?}");
        if container_ok {
            assert_eq!(res[0], json!({"call": "rule.add", "ok": null}), "{r:?}");
            let listed = res[2]["ok"].as_array().expect("rules");
            assert!(
                listed
                    .iter()
                    .any(|x| x["source"] == "10.9.0.2/32" && x["table"] == 100),
                "{r:?}"
            );
            // The rule is the journal's: a DEL-less cleanup of the test.
            world
                .ctr
                .ip(&["rule", "del", "from", "10.9.0.2", "table", "100"]);
        } else {
            assert_eq!(res[0]["error"], "access-denied", "{r:?}");
        }
    }
    support::assert_same(&before, &world.snapshot(), "rules");
}

/// bridge + host-local ADD for the world's container, then `sbr` with
/// `extra` on its result; returns the sbr config used.
fn sbr_setup(world: &World, extra: Value, cid: &str) -> Value {
    let bridge = json!({"cniVersion": "1.0.0", "name": "sbrnet", "type": "bridge",
        "bridge": "cnisbr9", "isGateway": true,
        "ipam": {"type": "host-local", "dataDir": world.ipam_dir().display().to_string(),
                 "ranges": [[{"subnet": "10.83.0.0/24"}], [{"subnet": "fd00:83::/64"}]],
                 "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}});
    let add = run(world, "bridge", "ADD", &bridge, cid);
    assert_eq!(add.code, 0, "{add:?}");
    let mut conf = extra;
    conf["cniVersion"] = json!("1.0.0");
    conf["name"] = json!("sbrnet");
    conf["type"] = json!("sbr");
    conf["prevResult"] = add.json();
    conf
}

#[test]
fn sbr_moves_the_routes_and_its_del_removes_the_rules() {
    support::require_root();
    let world = World::new("sbr1");
    let conf = sbr_setup(&world, json!({}), "c1");
    let main_before = world.ctr.ip(&["route", "show", "table", "main"]);
    assert!(
        main_before.contains("default via 10.83.0.1"),
        "{main_before}"
    );
    let add = run(&world, "sbr", "ADD", &conf, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let r = rules(&world);
    assert!(
        r.iter().any(|l| l.contains("from 10.83.0.2 lookup 100")),
        "{r:?}"
    );
    assert!(
        r.iter().any(|l| l.contains("from fd00:83::2 lookup 101")),
        "{r:?}"
    );
    let t100 = world.ctr.ip(&["route", "show", "table", "100"]);
    assert!(t100.contains("default via 10.83.0.1 dev eth0"), "{t100}");
    assert!(t100.contains("10.83.0.0/24 dev eth0"), "{t100}");
    assert_eq!(
        world
            .ctr
            .ip(&["-4", "route", "show", "table", "main"])
            .trim(),
        ""
    );
    // Traffic from the address leaves through table 100: the gateway
    // answers a ping bound to it.
    let ping = std::process::Command::new(support::ip_exe())
        .args([
            "netns",
            "exec",
            &world.ctr.name,
            "ping",
            "-c1",
            "-W2",
            "-I",
            "10.83.0.2",
            "10.83.0.1",
        ])
        .output()
        .expect("ping");
    assert!(ping.status.success(), "{ping:?}");
    let check = run(&world, "sbr", "CHECK", &conf, "c1");
    assert_eq!(check.code, 0, "{check:?}");
    let del = run(&world, "sbr", "DEL", &conf, "c1");
    assert_eq!(del.code, 0, "{del:?}");
    let r = rules(&world);
    assert!(!r.iter().any(|l| l.contains("lookup 10")), "{r:?}");
    // CHECK now fails: the rules are gone.
    let check = run(&world, "sbr", "CHECK", &conf, "c1");
    check.assert_cni_error(999, "no rule sends traffic from 10.83.0.2");
}

#[test]
fn sbr_upstream_options_table_gateways_and_source_hints() {
    support::require_root();
    // `table`: only the rules, to that table; DEL removes only its rules.
    let world = World::new("sbr2");
    let conf = sbr_setup(&world, json!({"table": 500}), "c1");
    let main_before = world.ctr.ip(&["route", "show", "table", "main"]);
    world
        .ctr
        .ip(&["rule", "add", "from", "10.99.0.1", "lookup", "77"]);
    let add = run(&world, "sbr", "ADD", &conf, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let r = rules(&world);
    assert!(
        r.iter().any(|l| l.contains("from 10.83.0.2 lookup 500")),
        "{r:?}"
    );
    assert_eq!(
        world.ctr.ip(&["route", "show", "table", "main"]),
        main_before
    );
    let del = run(&world, "sbr", "DEL", &conf, "c1");
    assert_eq!(del.code, 0, "{del:?}");
    let r = rules(&world);
    assert!(!r.iter().any(|l| l.contains("lookup 500")), "{r:?}");
    assert!(r.iter().any(|l| l.contains("lookup 77")), "{r:?}");

    // `gateways` overrides the result's; `addSourceHints` keeps the
    // subnet route in main with the address as its source.
    let world = World::new("sbr3");
    let conf = sbr_setup(
        &world,
        json!({"gateways": ["10.83.0.254"], "addSourceHints": true}),
        "c1",
    );
    // (A default route of the main table would be moved over the
    // gateway's, as upstream moves it.)
    world.ctr.ip(&["-4", "route", "del", "default"]);
    let add = run(&world, "sbr", "ADD", &conf, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let t100 = world.ctr.ip(&["route", "show", "table", "100"]);
    assert!(t100.contains("default via 10.83.0.254 dev eth0"), "{t100}");
    let main = world.ctr.ip(&["-4", "route", "show", "table", "main"]);
    assert!(
        main.contains("10.83.0.0/24 dev eth0") && main.contains("src 10.83.0.2"),
        "{main}"
    );
    assert!(!main.contains("default"), "{main}");

    // Bad gateways: a CNI error naming them, nothing changed.
    let world = World::new("sbr4");
    let conf = sbr_setup(&world, json!({"gateways": ["10.0.0.1", "10.0.0.2"]}), "c1");
    let before = world.snapshot();
    run(&world, "sbr", "ADD", &conf, "c1")
        .assert_cni_error(999, "gateways list contains multiple IPv4 addresses");
    support::assert_same(&before, &world.snapshot(), "refused gateways");
}

/// The table a rule sends traffic from `source` to (`ip rule` lines).
fn table_of(rules: &[String], source: &str) -> Option<u32> {
    let from = format!("from {source} lookup ");
    rules
        .iter()
        .find_map(|l| l.split_once(&from))
        .and_then(|(_, t)| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
}

#[test]
fn sbr_adds_of_two_interfaces_at_once_choose_different_tables() {
    // Two ADDs in one container namespace at once, one per interface (a
    // pod's two networks, as Multus adds them): each chooses the first
    // table from 100 no rule or route uses. The first stops right after
    // it chose (`WASMCNI_FAULT=pause:route.add-rule`); the second runs
    // into that window. Without the namespace's table lock both chose
    // table 100, and the first's default route met the second's there.
    support::require_root();
    let world = World::new("sbrrace");
    let run_dir = world.dir.path().join("run");
    let mut confs = Vec::new();
    for (i, eth) in ["eth0", "eth1"].into_iter().enumerate() {
        let peer = format!("{eth}p");
        let address = format!("10.9{i}.0.2/24");
        world
            .ctr
            .ip(&["link", "add", eth, "type", "veth", "peer", "name", &peer]);
        world.ctr.ip(&["link", "set", &peer, "up"]);
        world.ctr.ip(&["link", "set", eth, "up"]);
        world.ctr.ip(&["addr", "add", &address, "dev", eth]);
        let conf = json!({"cniVersion": "1.0.0", "name": "sbrnet", "type": "sbr",
            "prevResult": {"cniVersion": "1.0.0",
                "interfaces": [{"name": eth, "sandbox": world.ctr.path.display().to_string()}],
                "ips": [{"address": address, "gateway": format!("10.9{i}.0.1"), "interface": 0}]}});
        confs.push(conf.to_string().into_bytes());
    }
    let add = |i: usize, fault: Option<&str>| {
        let mut inv = world
            .bundled(&world.ctr, "sbr", "ADD", &confs[i], "c1", &json!({}))
            .env("CNI_IFNAME", format!("eth{i}"))
            .env("WASMCNI_RUN_DIR", run_dir.display().to_string());
        if let Some(f) = fault {
            inv = inv.env("WASMCNI_FAULT", f);
        }
        inv.spawn()
    };
    // Generous: a cold artifact cache compiles the plugin first.
    let timeout = std::time::Duration::from_secs(300);
    let mut first = add(0, Some("pause:route.add-rule"));
    support::wait_until("the eth0 ADD stops before its first rule", timeout, || {
        assert!(!first.exited(), "the eth0 ADD ended before it stopped");
        first.stopped()
    });
    let mut second = add(1, None);
    support::wait_until(
        "the eth1 ADD ends or waits for the table lock",
        timeout,
        || second.exited() || second.waits_for_flock(),
    );
    first.resume();
    let (first, second) = (first.wait(), second.wait());
    assert_eq!(first.code, 0, "eth0: {first:?}");
    assert_eq!(second.code, 0, "eth1: {second:?}");
    let r = rules(&world);
    let (t0, t1) = (table_of(&r, "10.90.0.2"), table_of(&r, "10.91.0.2"));
    assert!(t0.is_some() && t1.is_some() && t0 != t1, "{r:?}");
    for (i, t) in [t0, t1].into_iter().flatten().enumerate() {
        let routes = world.ctr.ip(&["route", "show", "table", &t.to_string()]);
        assert!(
            routes.contains(&format!("default via 10.9{i}.0.1 dev eth{i}")),
            "table {t}: {routes}"
        );
    }
}

#[test]
fn vrf_adds_of_two_interfaces_at_once_bind_different_tables() {
    // As sbr's above, for `vrf` without `table`: each ADD binds its new
    // VRF to the first table no VRF of the namespace uses. The first
    // stops right after it chose (`pause:link.create-vrf`). In the VM:
    // this kernel has no VRF.
    if !support::vm::kernel_has("vrf") {
        return support::vm::rerun_this_test(
            "vrf_adds_of_two_interfaces_at_once_bind_different_tables",
        );
    }
    support::require_root();
    let world = World::new("vrfrace");
    let run_dir = world.dir.path().join("run");
    let mut confs = Vec::new();
    for (eth, vrf) in [("eth0", "blue"), ("eth1", "red")] {
        let peer = format!("{eth}p");
        world
            .ctr
            .ip(&["link", "add", eth, "type", "veth", "peer", "name", &peer]);
        world.ctr.ip(&["link", "set", eth, "up"]);
        let conf = json!({"cniVersion": "1.0.0", "name": "vrfnet", "type": "vrf", "vrfname": vrf,
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": eth}], "ips": []}});
        confs.push(conf.to_string().into_bytes());
    }
    let add = |i: usize, fault: Option<&str>| {
        let mut inv = world
            .bundled(&world.ctr, "vrf", "ADD", &confs[i], "c1", &json!({}))
            .env("CNI_IFNAME", format!("eth{i}"))
            .env("WASMCNI_RUN_DIR", run_dir.display().to_string());
        if let Some(f) = fault {
            inv = inv.env("WASMCNI_FAULT", f);
        }
        inv.spawn()
    };
    let timeout = std::time::Duration::from_secs(300);
    let mut first = add(0, Some("pause:link.create-vrf"));
    support::wait_until("the eth0 ADD stops before its VRF", timeout, || {
        assert!(!first.exited(), "the eth0 ADD ended before it stopped");
        first.stopped()
    });
    let mut second = add(1, None);
    support::wait_until(
        "the eth1 ADD ends or waits for the table lock",
        timeout,
        || second.exited() || second.waits_for_flock(),
    );
    first.resume();
    let (first, second) = (first.wait(), second.wait());
    assert_eq!(first.code, 0, "eth0: {first:?}");
    assert_eq!(second.code, 0, "eth1: {second:?}");
    let vrfs: Value =
        serde_json::from_str(&world.ctr.ip(&["-j", "-d", "link", "show", "type", "vrf"]))
            .expect("json");
    let table = |name: &str| {
        vrfs.as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifname"] == name)
            .map(|l| l["linkinfo"]["info_data"]["table"].clone())
    };
    let (blue, red) = (table("blue"), table("red"));
    assert!(
        blue.is_some() && red.is_some() && blue != red,
        "tables: blue {blue:?}, red {red:?}"
    );
}

//! The `firewall` capability in a real kernel: the rules it installs
//! (`nft -j list table inet wasmcni`), traffic through a mapped port
//! between namespaces, DEL of exactly one attachment's rules (a second
//! attachment's DEL leaves the first's byte-identical), the undo of a
//! failed ADD after every host call (S6), and GC of attachments that are
//! gone. Everything runs inside namespaces the test makes; the machine's
//! own nftables, iptables and sysctls are never touched. Needs root and
//! Debian's `nftables` (`nft`): without them the tests fail.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::world::{policy_with, wide, World};
use support::Netns;

/// The wide grant with every firewall kind.
/// The wide grant with every firewall right, vouching (`static-ranges`)
/// for the addresses the scripted plugin's `prevResult`s give its
/// attachments, 10.70.0.5–7 and their IPv6 twins: the scripted plugin
/// runs no IPAM, so only the operator's word makes them its own (S13).
fn grant() -> Value {
    let mut g = wide();
    g["host"]["firewall"] = json!({"port-mappings": true, "masquerade": true, "forward": true,
                                   "isolation": true, "mac-spoof": true});
    g["static-ranges"] = json!(["10.70.0.5/32", "10.70.0.6/31", "fd70::5/128", "fd70::6/127"]);
    g
}

/// The IPv6 address of the attachment whose IPv4 one is `ip`
/// (10.70.0.5: fd70::5).
fn v6_of(ip: &str) -> String {
    format!("fd70::{}", ip.rsplit('.').next().unwrap_or("1"))
}

/// A config whose runtime `prevResult` gives the attachment `ip` and its
/// IPv6 address, and whose `runtimeConfig.portMappings` are [`add_ops`]'s.
fn conf(network: &str, ip: &str, ops: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": network, "type": "scripted", "ops": ops,
           "runtimeConfig": {"portMappings": [
               {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
               {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.10"}]},
           "prevResult": {"cniVersion": "1.0.0", "ips": [
               {"address": format!("{ip}/24")}, {"address": format!("{}/64", v6_of(ip))}]}})
}

/// Port mappings, ipMasq and forward for `ip` (in the shared bridge's
/// 10.70.0.0/24) and its IPv6 address, each kind in one call.
fn add_ops(ip: &str) -> Value {
    let mappings = json!([
        {"host-port": 8080, "container-port": 80, "protocol": "tcp"},
        {"host-port": 5353, "container-port": 53, "protocol": "udp", "host-ip": "192.0.2.10"}
    ]);
    let ip6 = v6_of(ip);
    json!([
        {"call": "firewall.add", "ns": "host", "rules": {"port-map": [
            {"container": format!("{ip}/24"), "snat": true, "mappings": mappings},
            {"container": format!("{ip6}/64"), "snat": true, "mappings": mappings}]}},
        {"call": "firewall.add", "ns": "host",
         "rules": {"masquerade": [format!("{ip}/24"), format!("{ip6}/64")]}},
        {"call": "firewall.add", "ns": "host", "rules": {"forward": [ip, ip6.as_str()]}}
    ])
}

fn del_ops() -> Value {
    json!([{"call": "firewall.remove", "ns": "host",
            "kinds": ["port-map", "masquerade", "forward"]}])
}

fn check_ops(ip: &str) -> Value {
    let mut ops = add_ops(ip);
    for op in ops.as_array_mut().expect("ops") {
        op["call"] = json!("firewall.check");
    }
    ops
}

/// The network's bridge up, as a bridge plugin leaves it; without DAD, so
/// that its link-local address is not tentative in one snapshot and
/// settled in the next.
fn bridge_up(node: &Netns) {
    node.sysctl("net.ipv6.conf.cnishared0.accept_dad", "0");
    node.ip(&["link", "set", "cnishared0", "up"]);
}

fn run(world: &World, cmd: &str, ctr: &str, conf: &Value) -> support::Run {
    world.run(
        cmd,
        &policy_with(grant()),
        conf,
        &[("CNI_CONTAINERID", ctr)],
    )
}

fn ok(r: &support::Run, what: &str) -> Value {
    assert_eq!(r.code, 0, "{what}: {r:?}");
    let rep = r.json();
    for x in rep["results"].as_array().expect("results") {
        assert!(x.get("ok").is_some(), "{what}: {rep}");
    }
    rep
}

/// ADD of ctr-a with `conf` has its first call refused: the plugin saw
/// `access-denied`, the last audit record is a `firewall.add` denial whose
/// reason has `why`, and nothing changed since `before`.
fn refused(world: &World, conf: &Value, before: &Value, why: &str, what: &str) {
    let r = run(world, "ADD", "ctr-a", conf);
    assert_eq!(r.code, 0, "{what}: {r:?}");
    let rep = r.json();
    assert_eq!(rep["results"][0]["error"], "access-denied", "{what}: {rep}");
    let audit = world.audit();
    assert!(
        audit.last().is_some_and(|a| a["call"] == "firewall.add"
            && a["outcome"] == "denied"
            && a["reason"].as_str().is_some_and(|r| r.contains(why))),
        "{what}: {audit:?}"
    );
    support::assert_same(before, &world.snapshot(), &format!("after {what}"));
}

/// The rules of one attachment (by the readable tail of their tag).
fn rules_of(ns: &Netns, network: &str, ctr: &str) -> Vec<Value> {
    let tail = format!(" {network}/{ctr}/eth0");
    ns.wasmcni_rules()
        .into_iter()
        .filter(|r| r["comment"].as_str().is_some_and(|c| c.ends_with(&tail)))
        .collect()
}

#[test]
fn rules_are_wasmcnis_own_and_del_removes_exactly_one_attachment() {
    let world = world_holding("fwr");
    // The network's bridge is up, as a bridge plugin leaves it.
    bridge_up(&world.node);
    let node_before = world.snapshot();
    ok(
        &run(
            &world,
            "ADD",
            "ctr-a",
            &conf("n", "10.70.0.5", add_ops("10.70.0.5")),
        ),
        "ADD a",
    );
    let text = world.node.nft(&["list", "table", "inet", "wasmcni"]);
    for want in [
        "type nat hook prerouting priority dstnat + 10",
        "type nat hook output priority -90",
        "type nat hook postrouting priority srcnat + 10",
        "type filter hook forward priority filter - 10",
        "fib daddr type local jump hostports",
        "tcp dport 8080 dnat ip to 10.70.0.5:80",
        "ip daddr 192.0.2.10 udp dport 5353 dnat ip to 10.70.0.5:53",
        "ip saddr 10.70.0.0/24 masquerade",
        "ip saddr 127.0.0.1 masquerade",
        "ip saddr 10.70.0.5 ip daddr != 10.70.0.0/24 ip daddr != 224.0.0.0/4 masquerade",
        "iifname \"cnishared0\" ip daddr 127.0.0.0/8",
        "meta mark set meta mark | 0x00001000",
        // IPv6 in the same calls: the mapping bound to an IPv4 host IP is
        // skipped, as the reference skips it.
        "tcp dport 8080 dnat ip6 to [fd70::5]:80",
        "ip6 saddr fd70::/64 masquerade",
        "ip6 saddr fd70::5 ip6 daddr != fd70::/64 ip6 daddr != ff00::/8 masquerade",
        "ip6 saddr fd70::5 meta mark set meta mark | 0x00001000",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // Nothing outside wasmcni's table.
    let all = world.node.nft(&["list", "tables"]);
    assert_eq!(all.trim(), "table inet wasmcni", "{all}");
    // route_localnet on the interface towards the container.
    assert_eq!(
        read_sysctl(&world.node, "net/ipv4/conf/cnishared0/route_localnet"),
        "1"
    );
    assert!(
        !text.contains("dnat ip6 to [fd70::5]:53"),
        "an IPv4 host IP's mapping in IPv6:\n{text}"
    );
    let a_rules = rules_of(&world.node, "n", "ctr-a");
    // Port mappings: the jump; IPv4: 2 DNATs, 2 masquerades (hairpin,
    // localhost), the 127/8 guard; IPv6: 1 DNAT, the hairpin masquerade;
    // ipMasq: 2; forward: 2 per address.
    assert_eq!(a_rules.len(), 14, "{a_rules:#?}");

    // CHECK finds exactly these; a second ADD replaces, not duplicates.
    let rep = ok(
        &run(
            &world,
            "CHECK",
            "ctr-a",
            &conf("n", "10.70.0.5", check_ops("10.70.0.5")),
        ),
        "CHECK a",
    );
    assert!(
        rep["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["ok"] == true),
        "{rep}"
    );
    ok(
        &run(
            &world,
            "ADD",
            "ctr-a",
            &conf("n", "10.70.0.5", add_ops("10.70.0.5")),
        ),
        "ADD a again",
    );
    assert_eq!(rules_of(&world.node, "n", "ctr-a").len(), 14);
    let entries = world
        .node
        .wasmcni_rules()
        .iter()
        .filter(|r| r["comment"] == "wasmcni entry")
        .count();
    assert_eq!(entries, 2, "one entry rule per nat base chain");
    let a_rules = rules_of(&world.node, "n", "ctr-a");

    // A second attachment (same network, other container)...
    ok(
        &run(
            &world,
            "ADD",
            "ctr-b",
            &conf("n", "10.70.0.6", add_ops("10.70.0.6")),
        ),
        "ADD b",
    );
    assert_eq!(rules_of(&world.node, "n", "ctr-b").len(), 14);
    // ... whose CHECK does not see a's rules as its own ...
    let rep = ok(
        &run(
            &world,
            "CHECK",
            "ctr-b",
            &conf("n", "10.70.0.5", check_ops("10.70.0.5")),
        ),
        "CHECK b as a",
    );
    assert!(
        rep["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["ok"] == false),
        "{rep}"
    );
    // ... and whose DEL (no prevResult needed) leaves a's rules as they were,
    // handle for handle.
    let rep = ok(
        &run(
            &world,
            "DEL",
            "ctr-b",
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": del_ops()}),
        ),
        "DEL b",
    );
    assert_eq!(rep["results"][0]["ok"], 14, "{rep}");
    assert!(rules_of(&world.node, "n", "ctr-b").is_empty());
    assert_eq!(
        rules_of(&world.node, "n", "ctr-a"),
        a_rules,
        "DEL of b changed a's rules"
    );
    let text = world.node.nft(&["list", "table", "inet", "wasmcni"]);
    assert_eq!(text.matches("-pm {").count(), 1, "b's chain left:\n{text}");
    // DEL twice, and DEL of a: the table goes with the last attachment.
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": del_ops()});
    let rep = ok(&run(&world, "DEL", "ctr-b", &del), "DEL b again");
    assert_eq!(rep["results"][0]["ok"], 0);
    // b's DEL left route_localnet: a's port map still needs it.
    assert_eq!(
        read_sysctl(&world.node, "net/ipv4/conf/cnishared0/route_localnet"),
        "1"
    );
    ok(&run(&world, "DEL", "ctr-a", &del), "DEL a");
    assert_eq!(world.node.nft(&["list", "tables"]).trim(), "");
    // Unlike the reference, the last DEL puts route_localnet back with the
    // guard that made it safe: everything is as before.
    support::assert_same(&node_before, &world.snapshot(), "after every DEL");
}

/// Threat 6 (a hostile plugin with `port-mappings`): it may map only what
/// the runtime asked for in `runtimeConfig.portMappings` (read by the host
/// from stdin), not capture the node's SSH or API server ports, a port of
/// the node's loopback, or a mapping with another container port or
/// protocol; each try is refused (access-denied, audited) and leaves no
/// rule and no table.
#[test]
fn a_plugin_maps_only_the_ports_the_runtime_asked_for() {
    let world = world_holding("fwp");
    bridge_up(&world.node);
    let before = world.snapshot();
    let pm = |m: Value| {
        json!([{"call": "firewall.add", "ns": "host", "rules": {"port-map": {
            "container": "10.70.0.5/24", "snat": true, "mappings": [m]}}}])
    };
    for m in [
        json!({"host-port": 22, "container-port": 22, "protocol": "tcp"}),
        json!({"host-port": 6443, "container-port": 80, "protocol": "tcp"}),
        json!({"host-port": 8080, "container-port": 80, "protocol": "tcp", "host-ip": "127.0.0.1"}),
        json!({"host-port": 8080, "container-port": 81, "protocol": "tcp"}),
        json!({"host-port": 8080, "container-port": 80, "protocol": "udp"}),
        json!({"host-port": 5353, "container-port": 53, "protocol": "udp"}),
    ] {
        refused(
            &world,
            &conf("n", "10.70.0.5", pm(m.clone())),
            &before,
            "runtimeConfig.portMappings",
            &m.to_string(),
        );
    }
    // What the runtime asked for is mapped (the same call, the same conf).
    let asked = pm(
        json!({"host-port": 5353, "container-port": 53, "protocol": "udp",
                          "host-ip": "192.0.2.10"}),
    );
    ok(
        &run(&world, "ADD", "ctr-a", &conf("n", "10.70.0.5", asked)),
        "asked for",
    );
    let text = world.node.nft(&["list", "table", "inet", "wasmcni"]);
    assert!(
        text.contains("udp dport 5353 dnat ip to 10.70.0.5:53"),
        "{text}"
    );
}

fn read_sysctl(ns: &Netns, key: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "cat",
            &format!("/proc/sys/{key}"),
        ])
        .output()
        .expect("cat");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn gc_removes_only_this_networks_gone_attachments() {
    let world = world_holding("fwg");
    // The network's bridge is up, as a bridge plugin leaves it.
    bridge_up(&world.node);
    ok(
        &run(
            &world,
            "ADD",
            "ctr-a",
            &conf("n", "10.70.0.5", add_ops("10.70.0.5")),
        ),
        "ADD a",
    );
    ok(
        &run(
            &world,
            "ADD",
            "ctr-b",
            &conf("n", "10.70.0.6", add_ops("10.70.0.6")),
        ),
        "ADD b",
    );
    // Another network's attachment with the same container ID as b.
    ok(
        &run(
            &world,
            "ADD",
            "ctr-b",
            &conf("n2", "10.70.0.7", add_ops("10.70.0.7")),
        ),
        "ADD n2/b",
    );
    let a = rules_of(&world.node, "n", "ctr-a");
    let other = rules_of(&world.node, "n2", "ctr-b");
    let gc = json!({"cniVersion": "1.1.0", "name": "n", "type": "scripted",
                    "ops": [{"call": "firewall.collect-garbage", "ns": "host",
                             "kinds": ["port-map", "masquerade", "forward"]}],
                    "cni.dev/valid-attachments": [{"containerID": "ctr-a", "ifname": "eth0"}]});
    let rep = ok(&run(&world, "GC", "gc", &gc), "GC");
    assert_eq!(rep["results"][0]["ok"], 14, "{rep}");
    assert!(rules_of(&world.node, "n", "ctr-b").is_empty());
    assert_eq!(rules_of(&world.node, "n", "ctr-a"), a);
    assert_eq!(rules_of(&world.node, "n2", "ctr-b"), other);
}

#[test]
fn s6_a_failed_add_leaves_no_rule_after_every_host_call() {
    let world = World::new("fw6");
    // The network's bridge is up, as a bridge plugin leaves it (no IPv6:
    // its link-local address would still be tentative in the snapshots).
    world
        .node
        .sysctl("net.ipv6.conf.cnishared0.disable_ipv6", "1");
    bridge_up(&world.node);
    std::thread::sleep(Duration::from_millis(200));
    let before = world.snapshot();
    let ops = add_ops("10.70.0.5");
    let total = ops.as_array().unwrap().len() as u64;
    // The plugin's ops; with WASMCNI_FAULT, every host call of the process
    // (`netns.host` first).
    for k in 1..=total + 1 {
        for how in ["exit", "trap"] {
            if k > total {
                break;
            }
            let mut c = conf("n", "10.70.0.5", ops.clone());
            c["fail"] = json!({"after": k, "how": how});
            let r = run(&world, "ADD", "ctr-a", &c);
            assert_ne!(r.code, 0, "k={k} {how}: {r:?}");
            support::assert_same(&before, &world.snapshot(), &format!("k={k} {how}"));
        }
        // The k-th call itself fails (EIO) or traps before it acts.
        for fault in [format!("call:{k}"), format!("call:{k}:error")] {
            let mut c = conf("n", "10.70.0.5", ops.clone());
            c["exit"] = json!(1);
            let r = world.run(
                "ADD",
                &policy_with(grant()),
                &c,
                &[("CNI_CONTAINERID", "ctr-a"), ("WASMCNI_FAULT", &fault)],
            );
            assert_ne!(r.code, 0, "{fault}: {r:?}");
            support::assert_same(&before, &world.snapshot(), &fault);
        }
    }
}

/// A TCP server in `ns` on port 80 that answers each connection with the
/// address it came from.
struct Server(Child);

impl Server {
    /// A server on port 80 answering with the client's address.
    fn start(ns: &Netns) -> Server {
        Server::labelled(ns, 80, "")
    }

    /// A server on `port` answering with `label` (if any) and the
    /// client's address: which server answered, and whom it saw.
    fn labelled(ns: &Netns, port: u16, label: &str) -> Server {
        let prefix = if label.is_empty() {
            String::new()
        } else {
            format!("{label} ")
        };
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "python3", "-c"])
            .arg(format!(
                "import socket\n\
                 s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 s.bind(('0.0.0.0', {port})); s.listen(16)\n\
                 print('listening', flush=True)\n\
                 while True:\n    c, a = s.accept(); c.sendall(('{prefix}' + a[0]).encode()); c.close()\n",
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        // Listening before anyone connects (a fixed wait let the tests'
        // "nothing answers" controls pass against a server not yet up):
        // its first line says so; end of output means it failed to start.
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().expect("piped")),
            &mut first,
        )
        .expect("reading the server's first line");
        assert_eq!(
            first.trim(),
            "listening",
            "the test server on port {port} in {} did not start",
            ns.name
        );
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the server saw as the client's address, connecting from `ns` to
/// `addr:port` ("" if nothing answered).
fn fetch(ns: &Netns, addr: &str, port: u16) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg(format!(
            "import socket\n\
             try:\n    s=socket.create_connection(('{addr}', {port}), timeout=2); print(s.recv(64).decode())\n\
             except Exception:\n    pass\n"
        ))
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn traffic_reaches_the_container_only_through_a_local_mapped_port() {
    let world = world_holding("fwt");
    let (node, ctr) = (&world.node, &world.ctr);
    // The container on the shared bridge (what a bridge plugin's ADD made).
    node.ip(&[
        "link", "add", "vethfwt0", "type", "veth", "peer", "name", "eth0", "netns", &ctr.name,
    ]);
    node.ip(&["link", "set", "vethfwt0", "master", "cnishared0", "up"]);
    bridge_up(node);
    ctr.ip(&["addr", "add", "10.70.0.5/24", "dev", "eth0"]);
    ctr.ip(&["link", "set", "eth0", "up"]);
    ctr.ip(&["link", "set", "lo", "up"]);
    ctr.ip(&["route", "add", "default", "via", "10.70.0.1"]);
    // A client outside, on its own link to the node.
    let (x, _outside_server) = outside(node, "fwtx");
    node.sysctl("net.ipv4.ip_forward", "1");
    let _server = Server::start(ctr);
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "", "mapped before the ADD");

    ok(
        &run(
            &world,
            "ADD",
            "ctr-a",
            &conf("n", "10.70.0.5", add_ops("10.70.0.5")),
        ),
        "ADD",
    );
    // From outside to a node address: DNATed, the client's address kept.
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "203.0.113.2");
    // From the node to its own address (its source kept, as the
    // reference) and to 127.0.0.1 (route_localnet; masqueraded to the
    // bridge's address).
    assert_eq!(fetch(node, "192.0.2.10", 8080), "192.0.2.10");
    assert_eq!(fetch(node, "127.0.0.1", 8080), "10.70.0.1");
    // Hairpin: the container to the node's mapped port. This kernel has
    // br_netfilter built in (bridge-nf-call-iptables=1), so the DNATed
    // packet goes back out of the bridge port it came in on: the port needs
    // hairpin mode, as the bridge plugin's `hairpinMode` sets it (the
    // reference needs the same).
    node.ip(&[
        "link",
        "set",
        "vethfwt0",
        "type",
        "bridge_slave",
        "hairpin",
        "on",
    ]);
    assert_eq!(fetch(ctr, "203.0.113.1", 8080), "10.70.0.1");
    // Not local: a routed destination on the same port is never captured.
    assert_eq!(fetch(&x, "198.51.100.7", 8080), "");
    // After DEL nothing answers.
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": del_ops()});
    ok(&run(&world, "DEL", "ctr-a", &del), "DEL");
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "");
}

/// Runs the bundled portmap plugin in `world`, alone (no plugin before it
/// established the attachment's addresses): its default entry, with the
/// operator vouching for 10.70.0.5 (S13).
fn portmap(world: &World, command: &str, conf: &Value, cid: &str) -> support::Run {
    let mut entry = support::world::default_entry("portmap");
    entry["static-ranges"] = json!(["10.70.0.5/32"]);
    world.run_bundled_with(
        &world.ctr,
        "portmap",
        command,
        conf,
        cid,
        &json!({ "portmap": entry }),
    )
}

fn portmap_conf(extra: Value, mappings: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": "pmnet", "type": "portmap",
        "runtimeConfig": {"portMappings": mappings},
        "prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "vethpm0"}, {"name": "eth0", "sandbox": "/var/run/netns/x"}],
            "ips": [{"address": "10.70.0.5/24", "interface": 1},
                    {"address": "10.70.0.99/24", "interface": 0}]}
    });
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

#[test]
fn portmap_plugin_maps_checks_and_dels_without_mappings() {
    let world = world_holding("fwp");
    // The network's bridge is up, as a bridge plugin leaves it.
    bridge_up(&world.node);
    let before = world.snapshot();
    let m = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                   {"hostPort": 5353, "containerPort": 53, "protocol": "udp"}]);
    let add = portmap(&world, "ADD", &portmap_conf(json!({}), m.clone()), "ctr-p");
    assert_eq!(add.code, 0, "{add:?}");
    // The result is the prevResult, unchanged.
    assert_eq!(add.json()["ips"][0]["address"], "10.70.0.5/24");
    let text = world.node.nft(&["list", "table", "inet", "wasmcni"]);
    // The container's address of CNI_IFNAME, not the host interface's.
    assert!(text.contains("dnat ip to 10.70.0.5:80"), "{text}");
    assert!(text.contains("dnat ip to 10.70.0.5:53"), "{text}");
    assert!(!text.contains("10.70.0.99"), "{text}");
    let check = portmap(
        &world,
        "CHECK",
        &portmap_conf(json!({}), m.clone()),
        "ctr-p",
    );
    assert_eq!(check.code, 0, "{check:?}");
    // CHECK with another mapping than installed fails.
    let other = json!([{"hostPort": 8081, "containerPort": 80, "protocol": "tcp"}]);
    let check = portmap(&world, "CHECK", &portmap_conf(json!({}), other), "ctr-p");
    assert_ne!(check.code, 0, "{check:?}");
    // DEL without portMappings or prevResult (the reference's is a no-op).
    let del = json!({"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap"});
    let r = portmap(&world, "DEL", &del, "ctr-p");
    assert_eq!(r.code, 0, "{r:?}");
    let r = portmap(&world, "DEL", &del, "ctr-p");
    assert_eq!(r.code, 0, "DEL twice: {r:?}");
    let mut after = world.snapshot();
    let mut b = before;
    for s in [&mut after, &mut b] {
        s["node"]["sysctls"] = Value::Null;
    }
    support::assert_same(&b, &after, "after DEL");
}

#[test]
fn portmap_bad_input_is_a_clear_error_and_leaves_nothing() {
    let world = World::new("fwpb");
    let before = world.snapshot();
    let ok = json!([{"hostPort": 8080, "containerPort": 80}]);
    for (extra, mappings, words) in [
        (
            json!({}),
            json!([{"hostPort": 0, "containerPort": 80}]),
            vec!["portMappings[0].hostPort"],
        ),
        (
            json!({}),
            json!([{"hostPort": 8080, "containerPort": 65536}]),
            vec!["containerPort"],
        ),
        (
            json!({}),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "icmp"}]),
            vec!["protocol"],
        ),
        (
            json!({}),
            json!([{"hostPort": 8080, "containerPort": 80, "hostIP": "x"}]),
            vec!["hostIP"],
        ),
        (json!({"markMasqBit": 32}), ok.clone(), vec!["markMasqBit"]),
        (
            json!({"markMasqBit": 3, "externalSetMarkChain": "X"}),
            ok.clone(),
            vec!["externalSetMarkChain"],
        ),
        (
            json!({"conditionsV4": ["-m", "comment"]}),
            ok.clone(),
            vec!["conditionsV4[0]"],
        ),
        (
            json!({"conditionsV4": ["-s", "10.0.0.0/8", "-j", "ACCEPT"]}),
            ok.clone(),
            vec!["conditionsV4[2]"],
        ),
        (
            json!({"conditionsV6": ["-s", "10.0.0.0/8"]}),
            ok.clone(),
            vec!["conditionsV6[0]"],
        ),
        (json!({"snat": "yes"}), ok.clone(), vec!["snat"]),
    ] {
        let conf = portmap_conf(extra.clone(), mappings.clone());
        let r = portmap(&world, "ADD", &conf, "ctr-p");
        assert_ne!(r.code, 0, "{extra} {mappings}: {r:?}");
        let e = r.json();
        assert_eq!(e["code"], 7, "{extra} {mappings}: {e}");
        for w in words {
            assert!(
                e["msg"].as_str().unwrap_or("").contains(w),
                "{extra} {mappings}: {e}"
            );
        }
        support::assert_same(&before, &world.snapshot(), &format!("{extra} {mappings}"));
    }
    // Not chained.
    let mut conf = portmap_conf(json!({}), ok);
    conf.as_object_mut().expect("object").remove("prevResult");
    let r = portmap(&world, "ADD", &conf, "ctr-p");
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("chained"), "{r:?}");
}

/// `iptables` in `ns` (iptables-nft, inside the test's namespace only).
fn iptables(ns: &Netns, args: &[&str]) -> String {
    iptables_as("iptables", ns, args)
}

/// `cmd` (`iptables`, `iptables-legacy`) inside the namespace.
fn iptables_as(cmd: &str, ns: &Netns, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, cmd])
        .args(args)
        .output()
        .expect("iptables");
    assert!(out.status.success(), "{cmd} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn forward_marks_pass_an_iptables_forward_drop_policy_once_per_node() {
    forward_drop_node("fwf", "iptables");
}

/// The same on a node whose iptables is the legacy one (x_tables, no
/// nftables table): the static jump is installed with `iptables-legacy`.
#[test]
fn forward_marks_pass_a_legacy_iptables_forward_drop_policy() {
    forward_drop_node("fwl", "iptables-legacy");
}

/// A node whose FORWARD policy is DROP in `cmd`'s dialect: the forward
/// mark lets the container's traffic through, once per node, and DEL takes
/// the way out away.
fn forward_drop_node(tag: &str, cmd: &str) {
    let world = world_holding(tag);
    let (node, ctr) = (&world.node, &world.ctr);
    node.ip(&[
        "link", "add", "vethfwf0", "type", "veth", "peer", "name", "eth0", "netns", &ctr.name,
    ]);
    node.ip(&["link", "set", "vethfwf0", "master", "cnishared0", "up"]);
    bridge_up(node);
    ctr.ip(&["addr", "add", "10.70.0.5/24", "dev", "eth0"]);
    ctr.ip(&["link", "set", "eth0", "up"]);
    ctr.ip(&["route", "add", "default", "via", "10.70.0.1"]);
    let (_x, _server) = outside(node, &format!("{tag}x"));
    node.sysctl("net.ipv4.ip_forward", "1");
    // A Docker/Kubernetes-like node: FORWARD drops by default.
    iptables_as(cmd, node, &["-P", "FORWARD", "DROP"]);
    assert_eq!(
        fetch(ctr, "203.0.113.2", 80),
        "",
        "forwarded before the ADD"
    );

    let fwd = json!([{"call": "firewall.add", "ns": "host", "rules": {"forward": "10.70.0.5"}}]);
    ok(
        &run(&world, "ADD", "ctr-a", &conf("n", "10.70.0.5", fwd.clone())),
        "ADD",
    );
    let rules = iptables_as(cmd, node, &["-S"]);
    assert!(
        rules.contains("-A FORWARD -m comment --comment wasmcni -j WASMCNI-FORWARD"),
        "{rules}"
    );
    assert!(rules.contains("-A WASMCNI-FORWARD -j CNI-ADMIN"), "{rules}");
    assert!(
        rules.contains("-A WASMCNI-FORWARD -m mark --mark 0x1000/0x1000 -j ACCEPT"),
        "{rules}"
    );
    // The container's traffic passes; nothing else does.
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "10.70.0.5");
    // Another attachment's ADD does not add the static rule again.
    ok(
        &run(
            &world,
            "ADD",
            "ctr-b",
            &conf(
                "n",
                "10.70.0.6",
                json!([{"call": "firewall.add", "ns": "host", "rules": {"forward": "10.70.0.6"}}]),
            ),
        ),
        "ADD b",
    );
    assert_eq!(iptables_as(cmd, node, &["-S"]), rules);
    // After DEL the mark is gone, and with it the container's way out.
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                     "ops": [{"call": "firewall.remove", "ns": "host", "kinds": ["forward"]}]});
    ok(&run(&world, "DEL", "ctr-a", &del), "DEL");
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "");
}

#[test]
fn mac_spoof_and_isolation_rules_are_the_attachments_and_go_with_it() {
    let world = World::new("fwm");
    let ops = json!([
        {"call": "link.create-veth", "ns": "host", "name": "cnitestv9", "peer-ns": "container", "peer-name": "eth9"},
        {"call": "firewall.add", "ns": "host", "link": "cnitestv9", "rules": {"mac-spoof": "02:00:00:00:00:09"}},
        {"call": "firewall.add", "ns": "host", "link": "cnishared0", "rules": {"isolation": true}}
    ]);
    // A failed ADD takes them back with the veth ...
    let before = world.snapshot();
    let mut c = conf("n", "10.70.0.5", ops.clone());
    c["exit"] = json!(1);
    let r = run(&world, "ADD", "ctr-a", &c);
    assert_ne!(r.code, 0, "{r:?}");
    support::assert_same(&before, &world.snapshot(), "failed ADD");
    // ... a successful one installs them in wasmcni's tables (bridge
    // priority -300, which nft names `dstnat`).
    ok(
        &run(&world, "ADD", "ctr-a", &conf("n", "10.70.0.5", ops)),
        "ADD",
    );
    let bridge = world.node.nft(&["list", "table", "bridge", "wasmcni"]);
    assert!(
        bridge.contains("type filter hook prerouting priority dstnat;"),
        "{bridge}"
    );
    assert!(
        bridge.contains("iifname \"cnitestv9\" ether saddr != 02:00:00:00:00:09 drop"),
        "{bridge}"
    );
    let inet = world.node.nft(&["list", "table", "inet", "wasmcni"]);
    assert!(
        inet.contains("iifname \"cnishared0\" oifname != \"cnishared0\" jump isolation"),
        "{inet}"
    );
    assert!(inet.contains("oifname \"cnishared0\" drop"), "{inet}");
    // DEL removes both tables' rules (and the tables, the last ones).
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                     "ops": [{"call": "firewall.remove", "ns": "host",
                              "kinds": ["mac-spoof", "isolation"]}]});
    let rep = ok(&run(&world, "DEL", "ctr-a", &del), "DEL");
    assert_eq!(rep["results"][0]["ok"], 3, "{rep}");
    assert_eq!(world.node.nft(&["list", "tables"]).trim(), "");
}

/// `conntrack ARGS...` in `ns`: its output (both streams).
fn conntrack(ns: &Netns, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "conntrack"])
        .args(args)
        .output()
        .expect("this test needs conntrack (apt-get install conntrack)");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn udp_conntrack_entries_to_a_mapped_port_go_after_add_and_after_del() {
    let world = world_holding("fwc");
    let node = &world.node;
    let plant = |dport: &str| {
        let out = conntrack(
            node,
            &[
                "-I",
                "-p",
                "udp",
                "-s",
                "198.51.100.9",
                "-d",
                "192.0.2.10",
                "--sport",
                "4000",
                "--dport",
                dport,
                "-t",
                "120",
            ],
        );
        assert!(out.contains("1 flow entries have been created"), "{out}");
    };
    let listed = |dport: &str| conntrack(node, &["-L", "-p", "udp", "--dport", dport]);
    plant("5353");
    plant("5354");
    ok(
        &run(
            &world,
            "ADD",
            "ctr-a",
            &conf("n", "10.70.0.5", add_ops("10.70.0.5")),
        ),
        "ADD",
    );
    assert!(!listed("5353").contains("dport=5353"), "{}", listed("5353"));
    // Another port's entry stays.
    assert!(listed("5354").contains("dport=5354"), "{}", listed("5354"));
    plant("5353");
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": del_ops()});
    ok(&run(&world, "DEL", "ctr-a", &del), "DEL");
    assert!(!listed("5353").contains("dport=5353"), "{}", listed("5353"));
    assert!(listed("5354").contains("dport=5354"), "{}", listed("5354"));
}

/// Runs the bundled `plugin` in `world` for container `cid`
/// ([`World::run_bundled`]).
fn bundled(world: &World, plugin: &str, command: &str, conf: &Value, cid: &str) -> support::Run {
    world.run_bundled(&world.ctr, plugin, command, conf, cid)
}

/// The bridge plugin's `ipMasq` and `macspoofchk` on the capability: what
/// the container sends outside its subnet leaves with the node's address;
/// a frame with another source MAC is dropped at its port; DEL removes
/// both (and the tables), GC of a gone attachment too.
#[test]
fn bridge_ip_masq_and_mac_spoof_check_work_and_go_with_del() {
    let world = World::new("fwb");
    let (node, ctr) = (&world.node, &world.ctr);
    let (_x, _server) = outside(node, "fwbx");
    let before = world.snapshot();
    let conf = json!({"cniVersion": "1.0.0", "name": "mq", "type": "bridge",
        "bridge": "cnimq0", "isGateway": true, "ipMasq": true, "macspoofchk": true,
        "ipam": {"type": "host-local", "dataDir": world.ipam_dir().display().to_string(),
                 "ranges": [[{"subnet": "10.74.0.0/24"}], [{"subnet": "fd00:74::/64"}]],
                 "routes": [{"dst": "0.0.0.0/0"}]}});
    let add = bundled(&world, "bridge", "ADD", &conf, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let text = node.nft(&["list", "ruleset"]);
    for want in [
        "ip saddr 10.74.0.2 ip daddr != 10.74.0.0/24 ip daddr != 224.0.0.0/4 masquerade",
        "ip6 saddr fd00:74::2 ip6 daddr != fd00:74::/64 ip6 daddr != ff00::/8 masquerade",
        "table bridge wasmcni",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let mac = add.json()["interfaces"][2]["mac"]
        .as_str()
        .expect("container mac")
        .to_owned();
    assert!(
        text.contains(&format!("ether saddr != {mac} drop")),
        "{text}"
    );
    // Out through the node: the server sees the node's address, not the
    // container's (without the rule it would see 10.74.0.2: its answer
    // routes back through the node either way).
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "203.0.113.1");
    // Another source MAC on the container's interface: its frames are
    // dropped at the port; its own again: they pass.
    ctr.ip(&["link", "set", "eth0", "address", "02:00:00:00:00:99"]);
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "", "a spoofed MAC passed");
    ctr.ip(&["link", "set", "eth0", "address", &mac]);
    ctr.ip(&["neigh", "flush", "all"]);
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "203.0.113.1");

    let del = bundled(&world, "bridge", "DEL", &conf, "c1");
    assert_eq!(del.code, 0, "{del:?}");
    assert_eq!(
        node.nft(&["list", "tables"]).trim(),
        "",
        "rules left after DEL"
    );
    // What is left is what the reference leaves too: the bridge with its
    // gateway addresses, ip_forward, host-local's lock file.
    let after = world.snapshot();
    assert_eq!(after["records"], before["records"]);
    assert_eq!(
        after["ctr"], before["ctr"],
        "the container is not as before"
    );

    // GC: an attachment the runtime no longer lists loses its rules.
    let add = bundled(&world, "bridge", "ADD", &conf, "c2");
    assert_eq!(add.code, 0, "{add:?}");
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    let run = bundled(&world, "bridge", "GC", &gc, "");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(node.nft(&["list", "tables"]).trim(), "", "GC left rules");
}

/// The ptp plugin's `ipMasq` on the capability: the container's traffic
/// leaves with the node's address; DEL removes the rule and the table.
#[test]
fn ptp_ip_masq_works_and_goes_with_del() {
    let world = World::new("fwq");
    let (node, ctr) = (&world.node, &world.ctr);
    let (_x, _server) = outside(node, "fwqx");
    let conf = json!({"cniVersion": "1.0.0", "name": "pq", "type": "ptp", "ipMasq": true,
        "ipam": {"type": "host-local", "dataDir": world.ipam_dir().display().to_string(),
                 "subnet": "10.75.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}});
    let add = bundled(&world, "ptp", "ADD", &conf, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let text = node.nft(&["list", "ruleset"]);
    assert!(
        text.contains(
            "ip saddr 10.75.0.2 ip daddr != 10.75.0.0/24 ip daddr != 224.0.0.0/4 masquerade"
        ),
        "{text}"
    );
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "203.0.113.1");
    let del = bundled(&world, "ptp", "DEL", &conf, "c1");
    assert_eq!(del.code, 0, "{del:?}");
    assert_eq!(
        node.nft(&["list", "tables"]).trim(),
        "",
        "rules left after DEL"
    );
}

/// An outside client network on the node (`xlink`, 203.0.113.1/24; the
/// namespace's x0 is .2) with a [`Server`] in it.
fn outside(node: &Netns, tag: &str) -> (Netns, Server) {
    let x = Netns::new(tag);
    node.ip(&[
        "link", "add", "xlink", "type", "veth", "peer", "name", "x0", "netns", &x.name,
    ]);
    node.ip(&["addr", "add", "203.0.113.1/24", "dev", "xlink"]);
    node.ip(&["link", "set", "xlink", "up"]);
    x.ip(&["addr", "add", "203.0.113.2/24", "dev", "x0"]);
    x.ip(&["link", "set", "x0", "up"]);
    x.ip(&["link", "set", "lo", "up"]);
    x.ip(&["route", "add", "default", "via", "203.0.113.1"]);
    let server = Server::start(&x);
    (x, server)
}

/// A bridge + host-local network `name` on bridge `br` with `subnet`.
fn bridge_net(world: &World, name: &str, br: &str, subnet: &str) -> Value {
    json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": br,
           "isGateway": true,
           "ipam": {"type": "host-local", "dataDir": world.ipam_dir().display().to_string(),
                    "subnet": subnet, "routes": [{"dst": "0.0.0.0/0"}]}})
}

/// The firewall plugin's config chained after `prev`.
fn firewall_conf(name: &str, extra: Value, prev: Option<Value>) -> Value {
    let mut c = extra;
    c["cniVersion"] = json!("1.0.0");
    c["name"] = json!(name);
    c["type"] = json!("firewall");
    if let Some(p) = prev {
        c["prevResult"] = p;
    }
    c
}

/// The firewall plugin on a Docker/Kubernetes-like node (iptables FORWARD
/// policy DROP): the container's traffic passes with it and not without;
/// CHECK finds its rules; DEL (no prevResult) takes them back.
#[test]
fn firewall_plugin_lets_the_container_through_a_forward_drop_node() {
    let world = World::new("fwg");
    let (node, ctr) = (&world.node, &world.ctr);
    let (_x, _server) = outside(node, "fwgx");
    iptables(node, &["-P", "FORWARD", "DROP"]);
    let net = bridge_net(&world, "fwnet", "cnifwg0", "10.76.0.0/24");
    let add = bundled(&world, "bridge", "ADD", &net, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let prev = add.json();
    assert_eq!(
        fetch(ctr, "203.0.113.2", 80),
        "",
        "forwarded without the plugin"
    );

    let conf = firewall_conf("fwnet", json!({}), Some(prev.clone()));
    let fw = bundled(&world, "firewall", "ADD", &conf, "c1");
    assert_eq!(fw.code, 0, "{fw:?}");
    assert_eq!(
        fw.json()["ips"],
        prev["ips"],
        "the result is the prevResult"
    );
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "10.76.0.2");
    let check = bundled(&world, "firewall", "CHECK", &conf, "c1");
    assert_eq!(check.code, 0, "{check:?}");

    let del = bundled(
        &world,
        "firewall",
        "DEL",
        &firewall_conf("fwnet", json!({}), None),
        "c1",
    );
    assert_eq!(del.code, 0, "{del:?}");
    assert_eq!(fetch(ctr, "203.0.113.2", 80), "", "forwarded after DEL");
    let check = bundled(&world, "firewall", "CHECK", &conf, "c1");
    assert_ne!(check.code, 0, "CHECK after DEL: {check:?}");
    assert!(
        check.stdout.contains("10.76.0.2"),
        "CHECK names the address: {check:?}"
    );
}

/// `ingressPolicy: "same-bridge"`: two isolated bridges cannot reach each
/// other, each still reaches the outside; after one network's DEL it can.
#[test]
fn same_bridge_ingress_policy_isolates_bridges_until_del() {
    let world = World::new("fwi");
    let (node, ctr) = (&world.node, &world.ctr);
    let (_x, _server) = outside(node, "fwix");
    node.sysctl("net.ipv4.ip_forward", "1");
    let ctr2 = Netns::new("fwi2");
    let same = json!({"ingressPolicy": "same-bridge"});
    let (a, b) = (
        bridge_net(&world, "neta", "cnifwa0", "10.86.0.0/24"),
        bridge_net(&world, "netb", "cnifwb0", "10.87.0.0/24"),
    );
    let add_a = bundled(&world, "bridge", "ADD", &a, "ca");
    assert_eq!(add_a.code, 0, "{add_a:?}");
    let add_b = world.run_bundled(&ctr2, "bridge", "ADD", &b, "cb");
    assert_eq!(add_b.code, 0, "{add_b:?}");
    let _server_b = Server::start(&ctr2);
    assert_eq!(fetch(ctr, "10.87.0.2", 80), "10.86.0.2", "not yet isolated");

    let fa = firewall_conf("neta", same.clone(), Some(add_a.json()));
    let fb = firewall_conf("netb", same.clone(), Some(add_b.json()));
    let run = bundled(&world, "firewall", "ADD", &fa, "ca");
    assert_eq!(run.code, 0, "{run:?}");
    let run = world.run_bundled(&ctr2, "firewall", "ADD", &fb, "cb");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        fetch(ctr, "10.87.0.2", 80),
        "",
        "isolated bridges reached each other"
    );
    assert_eq!(
        fetch(ctr, "203.0.113.2", 80),
        "10.86.0.2",
        "the outside is not isolated"
    );

    let run = world.run_bundled(&ctr2, "firewall", "DEL", &fb, "cb");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        fetch(ctr, "10.87.0.2", 80),
        "10.86.0.2",
        "isolated after DEL"
    );
}

/// `ingressPolicy: "isolated"` (reference v1.7+): two containers of one
/// bridge cannot reach each other (this kernel passes bridged traffic to
/// IP filtering, as the reference's `-i B -o B -j DROP` needs too), while
/// with `"same-bridge"` they can; each still reaches the outside; the
/// attachment's DEL takes the rule with it.
#[test]
fn isolated_ingress_policy_separates_the_containers_of_a_bridge_until_del() {
    let world = World::new("fws");
    let (node, ctr) = (&world.node, &world.ctr);
    let (_x, _server) = outside(node, "fwsx");
    node.sysctl("net.ipv4.ip_forward", "1");
    let ctr2 = Netns::new("fws2");
    let net = bridge_net(&world, "nets", "cnifws0", "10.88.0.0/24");
    let add_a = bundled(&world, "bridge", "ADD", &net, "ca");
    assert_eq!(add_a.code, 0, "{add_a:?}");
    let add_b = world.run_bundled(&ctr2, "bridge", "ADD", &net, "cb");
    assert_eq!(add_b.code, 0, "{add_b:?}");
    let _server_b = Server::start(&ctr2);
    let firewall = |ns: &Netns, cmd: &str, policy: &str, prev: &support::Run, cid: &str| {
        let conf = firewall_conf("nets", json!({"ingressPolicy": policy}), Some(prev.json()));
        let run = world.run_bundled(ns, "firewall", cmd, &conf, cid);
        assert_eq!(run.code, 0, "{policy} {cmd}: {run:?}");
    };
    firewall(ctr, "ADD", "same-bridge", &add_a, "ca");
    firewall(&ctr2, "ADD", "same-bridge", &add_b, "cb");
    assert_eq!(
        fetch(ctr, "10.88.0.3", 80),
        "10.88.0.2",
        "same-bridge keeps a bridge's containers together"
    );
    let drops = |ns: &Netns| {
        ns.wasmcni_rules()
            .into_iter()
            .filter(|r| {
                let text = r["expr"].to_string();
                text.contains("\"iifname\"")
                    && text.contains("\"oifname\"")
                    && text.matches("\"cnifws0\"").count() == 2
                    && text.contains("\"drop\"")
                    && !text.contains("\"!=\"")
            })
            .count()
    };
    assert_eq!(drops(node), 0);

    // One attachment's ADD with "isolated" replaces its isolation rules.
    firewall(ctr, "ADD", "isolated", &add_a, "ca");
    assert_eq!(
        fetch(ctr, "10.88.0.3", 80),
        "",
        "isolated: the bridge's containers reached each other"
    );
    assert_eq!(drops(node), 1);
    assert_eq!(
        fetch(ctr, "203.0.113.2", 80),
        "10.88.0.2",
        "isolated: the outside is still reached"
    );

    let del = firewall_conf("nets", json!({}), None);
    let run = world.run_bundled(ctr, "firewall", "DEL", &del, "ca");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(drops(node), 0);
    assert_eq!(
        fetch(ctr, "10.88.0.3", 80),
        "10.88.0.2",
        "the isolated attachment's DEL took its rule"
    );
}

/// `isolate-within-bridge` cuts every port of the bridge from every
/// other, the admins' own ports too: it needs the network's own bridge
/// (wasmcni's mark) or a link the grant's `links` names, not an unmarked
/// bridge that only `bridges` lets the plugin adopt (where plain
/// isolation is allowed). `firewall.check` finds either form.
#[test]
fn isolating_within_a_bridge_needs_the_networks_own_bridge_or_links() {
    let world = World::new("fwb");
    let node = &world.node;
    node.ip(&["link", "add", "cnibradm0", "type", "bridge"]);
    let isolate = |link: &str, within: bool| {
        let call = if within {
            "firewall.add-with"
        } else {
            "firewall.add"
        };
        json!([{"call": call, "ns": "host", "link": link, "rules": {"isolation": true},
                "isolate-within-bridge": within},
               {"call": "firewall.check", "ns": "host", "link": link,
                "rules": {"isolation": true}}])
    };
    let before = world.snapshot();
    let r = run(
        &world,
        "ADD",
        "ctr-a",
        &conf("n", "10.70.0.5", isolate("cnibradm0", true)),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let rep = r.json();
    assert_eq!(rep["results"][0]["error"], "access-denied", "{rep}");
    let audit = world.audit();
    let last = audit
        .iter()
        .rfind(|a| a["call"] == "firewall.add-with")
        .expect("audited");
    assert_eq!(last["outcome"], "denied", "{last}");
    support::assert_same(&before, &world.snapshot(), "after the refused add-with");

    // Plain isolation of the same bridge is allowed (`bridges`).
    let r = run(
        &world,
        "ADD",
        "ctr-a",
        &conf("n", "10.70.0.5", isolate("cnibradm0", false)),
    );
    let rep = ok(&r, "add on an admin bridge");
    assert_eq!(rep["results"][1]["ok"], true, "check finds it: {rep}");

    // The network's own bridge: allowed, and found by check.
    let r = run(
        &world,
        "ADD",
        "ctr-b",
        &conf("n", "10.70.0.6", isolate("cnishared0", true)),
    );
    let rep = ok(&r, "add-with on the network's bridge");
    assert_eq!(rep["results"][1]["ok"], true, "check finds it: {rep}");
    assert_eq!(rules_of(node, "n", "ctr-b").len(), 3, "{rep}");

    // The admins' bridge, named in `links`: allowed.
    let mut g = grant();
    g["host"]["links"] = json!(["cnitest*", "cnibradm0"]);
    let r = world.run(
        "ADD",
        &policy_with(g),
        &conf("n", "10.70.0.7", isolate("cnibradm0", true)),
        &[("CNI_CONTAINERID", "ctr-c")],
    );
    let rep = ok(&r, "add-with on a bridge `links` names");
    assert_eq!(rep["results"][1]["ok"], true, "check finds it: {rep}");
    for ctr in ["ctr-a", "ctr-b", "ctr-c"] {
        let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                         "ops": [{"call": "firewall.remove", "ns": "host", "kinds": ["isolation"]}]});
        ok(&run(&world, "DEL", ctr, &del), "DEL");
        assert!(rules_of(node, "n", ctr).is_empty(), "{ctr}");
    }
}

/// Options wasmcni cannot honour are refused naming them, and change
/// nothing.
#[test]
fn firewall_plugin_refuses_what_it_cannot_do() {
    let world = World::new("fwr2");
    let net = bridge_net(&world, "fwnet", "cnifwr0", "10.79.0.0/24");
    let add = bundled(&world, "bridge", "ADD", &net, "c1");
    assert_eq!(add.code, 0, "{add:?}");
    let prev = add.json();
    let before = world.snapshot();
    for (extra, code, names) in [
        (json!({"backend": "firewalld"}), 2, "backend"),
        (json!({"backend": "nft"}), 7, "backend"),
        (
            json!({"iptablesAdminChainName": "MY-ADMIN"}),
            2,
            "iptablesAdminChainName",
        ),
        (json!({"ingressPolicy": "closed"}), 999, "ingress policy"),
        (json!({"backend": 3}), 7, "backend"),
    ] {
        let conf = firewall_conf("fwnet", extra.clone(), Some(prev.clone()));
        let run = bundled(&world, "firewall", "ADD", &conf, "c1");
        assert_ne!(run.code, 0, "{extra}: {run:?}");
        let err = run.json();
        assert_eq!(err["code"], code, "{extra}: {err}");
        assert!(
            err["msg"].as_str().is_some_and(|m| m.contains(names)),
            "{extra}: {err}"
        );
        support::assert_same(&before, &world.snapshot(), &format!("after {extra}"));
    }
    let run = bundled(
        &world,
        "firewall",
        "ADD",
        &firewall_conf("fwnet", json!({}), None),
        "c1",
    );
    assert_ne!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("missing prevResult"), "{run:?}");
}

/// A world whose container holds the addresses the scripted plugin's
/// `prevResult`s give it (10.70.0.5–7 and their IPv6 twins): the host
/// names a `prevResult` address in a rule only while the container's
/// namespace holds it.
fn world_holding(tag: &str) -> World {
    let world = World::new(tag);
    hold(
        &world.ctr,
        &[
            "10.70.0.5/32",
            "10.70.0.6/32",
            "10.70.0.7/32",
            "fd70::5/128",
            "fd70::6/128",
            "fd70::7/128",
        ],
    );
    world
}

/// Gives `ns` the addresses `prefixes` on a link of their own (`link`, a
/// veth pair inside it whose peer stays down), as a container's interface
/// holds them; up (`up`) or down.
fn hold_on(ns: &Netns, link: &str, up: bool, prefixes: &[&str]) {
    let peer = format!("{link}p");
    ns.ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
    for p in prefixes {
        ns.ip(&["addr", "add", p, "dev", link, "nodad"]);
    }
    if up {
        ns.ip(&["link", "set", link, "up"]);
    }
}

/// [`hold_on`] an up link `held0`. Host routes only (/32, /128) where the
/// container has an eth0 of its own, so no second connected route
/// competes with eth0's.
fn hold(ns: &Netns, prefixes: &[&str]) {
    hold_on(ns, "held0", true, prefixes);
}

/// S11, S13 (hostile chain): a runtime's `prevResult` is what the plugins
/// before this one returned, and a hostile one can list any address
/// there, and put it on its own container interface first. The host names
/// an address in a rule as the container's only if the attachment owns
/// it (here: the operator's `static-ranges`), so a result listing another
/// container's address gets no port mapping, masquerade or forward rule
/// pointed at that container, whatever the container holds.
#[test]
fn a_prev_result_cannot_point_rules_at_an_address_the_attachment_does_not_own() {
    let world = World::new("fwh");
    bridge_up(&world.node);
    // Another container holds 10.70.0.9; this one holds 10.70.0.5, and
    // 10.70.0.9 too (a hostile plugin before this one put it there).
    let other = Netns::new("fwho");
    hold(&other, &["10.70.0.9/24", "fd70::9/64"]);
    hold(&world.ctr, &["10.70.0.5/24", "fd70::5/64"]);
    hold_on(
        &world.ctr,
        "stolen0",
        true,
        &["10.70.0.9/32", "fd70::9/128"],
    );
    let before = world.snapshot();
    let not_held = "10.70.0.9 is not an address of this attachment";
    for op in add_ops("10.70.0.9").as_array().expect("ops") {
        let c = conf("n", "10.70.0.9", json!([op]));
        refused(&world, &c, &before, not_held, &op.to_string());
    }
    // IPv6 alone: the same.
    let v6 = json!([{"call": "firewall.add", "ns": "host", "rules": {"forward": ["fd70::9"]}}]);
    refused(
        &world,
        &conf("n", "10.70.0.9", v6),
        &before,
        "fd70::9 is not an address of this attachment",
        "IPv6 alone",
    );
    // An address the container holds only on a link that is down, or on
    // loopback (which runtimes bring up: 127.0.0.1 would map the node's
    // host port onto the node's own loopback services), is not its.
    hold_on(&world.ctr, "held1", false, &["10.70.0.8/32"]);
    world.ctr.ip(&["link", "set", "lo", "up"]);
    let before = world.snapshot();
    for (ip, why) in [
        (
            "10.70.0.8",
            "10.70.0.8 is not an address of this attachment",
        ),
        (
            "127.0.0.1",
            "is a loopback, unspecified, multicast, link-local",
        ),
    ] {
        let fwd = json!([{"call": "firewall.add", "ns": "host", "rules": {"forward": [ip]}}]);
        let mut c = conf("n", ip, fwd);
        c["prevResult"]["ips"] = json!([{"address": format!("{ip}/8")}]);
        refused(&world, &c, &before, why, ip);
    }
    // The addresses the container holds get their rules.
    ok(
        &run(
            &world,
            "ADD",
            "ctr-a",
            &conf("n", "10.70.0.5", add_ops("10.70.0.5")),
        ),
        "the container's own addresses",
    );
    assert!(!rules_of(&world.node, "n", "ctr-a").is_empty());
    ok(
        &run(&world, "DEL", "ctr-a", &conf("n", "10.70.0.5", del_ops())),
        "DEL",
    );
}

/// S11: a port mapping captures only traffic to the node's own addresses
/// (to its host IP, if it has one) on its host port. Each negative has a
/// positive control beside it, and every server says who it is: traffic
/// to another container's address on the same port reaches that
/// container; another tool's DNAT for the same port (a kube-proxy
/// NodePort, in iptables' nat PREROUTING) stays ahead of wasmcni's; a
/// mapping bound to a host IP leaves the node's other addresses alone;
/// other ports of the node are the node's.
#[test]
fn a_port_mapping_captures_no_other_destination_port_or_service() {
    let world = world_holding("fws");
    let (node, ctr) = (&world.node, &world.ctr);
    // Two containers on the shared bridge: ctr-a (10.70.0.5, the mapped
    // one) and another (10.70.0.6) serving the same port 8080.
    let other = Netns::new("fwso");
    for (peer, ns, ip) in [
        ("vethfws0", ctr, "10.70.0.5"),
        ("vethfws1", &other, "10.70.0.6"),
    ] {
        node.ip(&[
            "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
        ]);
        node.ip(&["link", "set", peer, "master", "cnishared0", "up"]);
        ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns.ip(&["route", "add", "default", "via", "10.70.0.1"]);
    }
    bridge_up(node);
    let (x, _outside_server) = outside(node, "fwsx");
    node.sysctl("net.ipv4.ip_forward", "1");
    let _mapped = Server::labelled(ctr, 80, "ctr-a");
    let _other = Server::labelled(&other, 8080, "other");
    let _node_service = Server::labelled(node, 8081, "node");
    // 8080 from any local address; 9090 only to the host IP 192.0.2.10.
    let mappings = json!([
        {"host-port": 8080, "container-port": 80, "protocol": "tcp"},
        {"host-port": 9090, "container-port": 80, "protocol": "tcp", "host-ip": "192.0.2.10"}
    ]);
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
        "ops": [{"call": "firewall.add", "ns": "host", "rules": {"port-map": [
            {"container": "10.70.0.5/24", "snat": true, "mappings": mappings}]}}],
        "runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 9090, "containerPort": 80, "protocol": "tcp", "hostIP": "192.0.2.10"}]},
        "prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "10.70.0.5/24"}]}});
    // Before the ADD: the other container and the node's service answer,
    // and nothing on 8080 or 9090 of the node.
    assert_eq!(fetch(&x, "10.70.0.6", 8080), "other 203.0.113.2");
    assert_eq!(fetch(&x, "203.0.113.1", 8081), "node 203.0.113.2");
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "");
    ok(&run(&world, "ADD", "ctr-a", &conf), "ADD");
    // The mapping answers (the positive controls).
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "ctr-a 203.0.113.2");
    assert_eq!(fetch(&x, "192.0.2.10", 9090), "ctr-a 203.0.113.2");
    // Another container's address on the same port: not a node address,
    // never captured (CVE-2019-9946's class).
    assert_eq!(fetch(&x, "10.70.0.6", 8080), "other 203.0.113.2");
    // A node port the runtime did not map stays the node's.
    assert_eq!(fetch(&x, "203.0.113.1", 8081), "node 203.0.113.2");
    // The host-IP mapping leaves the node's other addresses alone.
    assert_eq!(fetch(&x, "203.0.113.1", 9090), "");
    // Another tool's service DNAT for the same port (iptables nat
    // PREROUTING, as kube-proxy's NodePorts) is ahead of wasmcni's.
    let nodeport = [
        "PREROUTING",
        "-d",
        "203.0.113.1",
        "-p",
        "tcp",
        "--dport",
        "8080",
        "-j",
        "DNAT",
        "--to-destination",
        "10.70.0.6:8080",
    ];
    let mut add = vec!["-t", "nat", "-A"];
    add.extend(nodeport);
    iptables(node, &add);
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "other 203.0.113.2");
    let mut del = vec!["-t", "nat", "-D"];
    del.extend(nodeport);
    iptables(node, &del);
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "ctr-a 203.0.113.2");
    // After DEL: the node's port is no longer the container's.
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": del_ops()});
    ok(&run(&world, "DEL", "ctr-a", &del), "DEL");
    assert_eq!(fetch(&x, "203.0.113.1", 8080), "");
    assert_eq!(fetch(&x, "10.70.0.6", 8080), "other 203.0.113.2");
}

//! Authority by attachment (issue 24; SECURITY.md S13–S16): a hostile
//! plugin, with the default grants of the standard plugins or a wide one,
//! gets nothing beyond its own attachment. Each test is one breach found
//! by attacking wasmcni, written to fail before the fix: the attack, its
//! refusal (access denied, audited, nothing changed), and beside it the
//! legitimate use that must keep working.
//!
//! The victim is always real: a container on network `vnet` attached by
//! the bundled bridge plugin with host-local IPAM (10.22.0.2 reserved for
//! it, its port on bridge `cnivic0`, which carries vnet's mark).

mod support;

use serde_json::{json, Value};
use support::world::{assert_denied, default_entry, policy_with, wide, World};
use support::Netns;

/// The victim's network config.
fn vnet(world: &World) -> Value {
    json!({"cniVersion": "1.0.0", "name": "vnet", "type": "bridge", "bridge": "cnivic0",
           "isGateway": true,
           "ipam": {"type": "host-local", "subnet": "10.22.0.0/24",
                    "dataDir": world.ipam_dir().display().to_string()}})
}

/// A world with the victim attached: its namespace (keep it alive).
fn with_victim(world: &World, tag: &str) -> Netns {
    let victim = Netns::new(tag);
    let add = world.run_bundled(&victim, "bridge", "ADD", &vnet(world), "victim");
    assert_eq!(add.code, 0, "the victim's ADD: {add:?}");
    assert_eq!(
        add.json()["ips"][0]["address"],
        "10.22.0.2/24",
        "the victim's address: {add:?}"
    );
    assert!(victim_reserved(world), "no reservation for the victim");
    victim
}

/// The victim's host veth: the port of vnet's bridge `cnivic0`.
fn victim_port(world: &World) -> String {
    let ports = world.node.ip(&["-o", "link", "show", "master", "cnivic0"]);
    ports
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .next()
        .unwrap_or_else(|| panic!("the victim's port on cnivic0: {ports}"))
}

/// Whether vnet's IPAM state still reserves 10.22.0.2 for the victim.
fn victim_reserved(world: &World) -> bool {
    std::fs::read_to_string(world.ipam_dir().join("vnet").join("10.22.0.2"))
        .is_ok_and(|t| t.starts_with("victim"))
}

/// Puts `prefixes` on a link `link` of `ns` of its own (a veth pair inside
/// it), up: what a hostile plugin before this one can leave there.
fn hold(ns: &Netns, link: &str, prefixes: &[&str]) {
    let peer = format!("{link}p");
    ns.ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
    for p in prefixes {
        ns.ip(&["addr", "add", p, "dev", link, "nodad"]);
    }
    ns.ip(&["link", "set", link, "up"]);
}

/// A chained plugin's config on network `network` whose `prevResult`
/// lists `ip` as the container's, with a port mapping asked for by the
/// runtime.
fn chained(plugin: &str, network: &str, ip: &str) -> Value {
    json!({"cniVersion": "1.0.0", "name": network, "type": plugin,
           "runtimeConfig": {"portMappings": [
               {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
           "prevResult": {"cniVersion": "1.0.0",
               "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
               "ips": [{"address": format!("{ip}/24"), "interface": 0}]}})
}

/// The results of a scripted run's ops (its report).
fn results(run: &support::Run) -> Vec<Value> {
    assert_eq!(run.code, 0, "{run:?}");
    run.json()["results"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Asserts op `i` of a scripted run was refused, and the audit log has a
/// denial whose reason contains `why`.
fn denied(world: &World, run: &support::Run, i: usize, why: &str, what: &str) {
    let r = results(run);
    assert_eq!(r[i]["error"], "access-denied", "{what}: {r:?}");
    let audit = world.audit();
    assert!(
        audit
            .iter()
            .any(|a| a["outcome"] == "denied"
                && a["reason"].as_str().is_some_and(|r| r.contains(why))),
        "{what}: no denial saying {why:?} in {audit:#?}"
    );
}

/// Breach 1 (S13): a hostile first member of a chain puts the victim's
/// address on its own container interface and lists it in its result; the
/// real portmap and firewall plugins after it must not point the node's
/// published port, or forward rules, at the victim. The attacker's own
/// address, established by its own bridge ADD (the attachment's record),
/// still gets its rules.
#[test]
fn breach1_a_prev_result_address_the_container_holds_is_not_its_own() {
    let world = World::new("az1");
    let _victim = with_victim(&world, "az1v");
    hold(&world.ctr, "held0", &["10.22.0.2/32"]);
    let before = world.snapshot();
    for plugin in ["portmap", "firewall"] {
        let run = world.run_bundled(
            &world.ctr,
            plugin,
            "ADD",
            &chained(plugin, "anet", "10.22.0.2"),
            "attacker",
        );
        assert_ne!(run.code, 0, "{plugin} took the victim's address: {run:?}");
        assert!(
            run.stdout
                .contains("10.22.0.2 is not an address of this attachment"),
            "{plugin}: {run:?}"
        );
        support::assert_same(&before, &world.snapshot(), &format!("after {plugin}"));
    }
    // The attacker's own attachment: its bridge ADD reserves 10.23.0.2,
    // which the chained plugins find in its record.
    let own = json!({"cniVersion": "1.0.0", "name": "anet", "type": "bridge",
        "bridge": "cniatk0", "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "10.23.0.0/24",
                 "dataDir": world.ipam_dir().display().to_string()}});
    let add = world.run_bundled(&world.ctr, "bridge", "ADD", &own, "attacker");
    assert_eq!(add.code, 0, "{add:?}");
    for plugin in ["portmap", "firewall"] {
        let conf = chained(plugin, "anet", "10.23.0.2");
        let run = world.run_bundled(&world.ctr, plugin, "ADD", &conf, "attacker");
        assert_eq!(
            run.code, 0,
            "{plugin} on the attachment's own address: {run:?}"
        );
        let del = world.run_bundled(&world.ctr, plugin, "DEL", &conf, "attacker");
        assert_eq!(del.code, 0, "{del:?}");
    }
    let del = world.run_bundled(&world.ctr, "bridge", "DEL", &own, "attacker");
    assert_eq!(del.code, 0, "{del:?}");
    // The victim's address is no container address of another attachment
    // either: a plugin may not put it in its container.
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &json!({"cniVersion": "1.0.0", "name": "anet", "type": "scripted", "ops": [
            {"call": "address.add", "ns": "container", "link": "held0", "prefix": "10.22.0.2/24"}]}),
        &[("CNI_CONTAINERID", "attacker")],
    );
    denied(
        &world,
        &run,
        0,
        "covers 10.22.0.2, reserved for another attachment",
        "container address",
    );
    assert!(victim_reserved(&world));
}

/// Issue 49, breach 2 (a container takes the node's gateway address): an
/// attacker with container `addresses` puts cnivic0's own address
/// (10.22.0.1, the victim's gateway) or one of the node's uplink addresses
/// (IPv4, IPv6) on a link of its container, to announce it and have the victim's
/// off-subnet traffic. Both are refused (audited, nothing added) whatever
/// the grant; an address the node does not hold is still the plugin's to
/// add.
#[test]
fn issue49_breach2_a_container_cannot_take_an_address_the_node_holds() {
    let world = World::new("az2");
    let _victim = with_victim(&world, "az2v");
    hold(&world.node, "upl0", &["192.0.2.10/24", "2001:db8:7::10/64"]);
    hold(&world.ctr, "held0", &[]);
    let addrs = |ns: &Netns| ns.ip(&["-o", "addr", "show", "dev", "held0"]);
    for (i, prefix) in ["10.22.0.1/24", "192.0.2.10/24", "2001:db8:7::10/64"]
        .into_iter()
        .enumerate()
    {
        let run = world.run(
            "ADD",
            &policy_with(wide()),
            &json!({"cniVersion": "1.0.0", "name": "anet", "type": "scripted", "ops": [
                {"call": "address.add", "ns": "container", "link": "held0",
                 "prefix": prefix, "no-dad": true},
                {"call": "address.announce", "ns": "container", "link": "held0",
                 "address": prefix}]}),
            &[("CNI_CONTAINERID", "attacker")],
        );
        let ip = prefix.split('/').next().unwrap();
        denied(
            &world,
            &run,
            0,
            &format!("container address {ip} is the node's own"),
            &format!("attack {i}: {prefix}"),
        );
        assert!(results(&run)[1].get("ok").is_none(), "announced: {run:?}");
        assert!(
            !addrs(&world.ctr).contains(&format!(" {ip}/")),
            "{prefix} on the attacker's link: {}",
            addrs(&world.ctr)
        );
    }
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &json!({"cniVersion": "1.0.0", "name": "anet", "type": "scripted", "ops": [
            {"call": "address.add", "ns": "container", "link": "held0",
             "prefix": "10.99.0.5/24", "no-dad": true}]}),
        &[("CNI_CONTAINERID", "attacker")],
    );
    assert!(results(&run)[0].get("ok").is_some(), "{run:?}");
    assert!(
        addrs(&world.ctr).contains(" 10.99.0.5/24"),
        "{}",
        addrs(&world.ctr)
    );
    assert!(victim_reserved(&world));
}

/// Issue 49, breach 4 (IPAM poisoning across networks): a plugin of
/// network n2, whose runtime config names n2's subnet (10.22.2.0/24), runs
/// host-local with a config of its own for another network's subnet
/// (10.22.5.0/24), or calls the IPAM store itself: the reservation of
/// 10.22.5.200 in n2's state is refused (the delegate fails), and network
/// n5's first bridge ADD, whose gateway prefix covers 10.22.5.200, then
/// succeeds. A reservation inside n2's subnet is n2's to make.
#[test]
fn issue49_breach4_no_reservation_outside_the_networks_own_subnets() {
    let world = World::new("az94");
    let policy = json!({"plugins": {
        "scripted": {"ipam-roots": ["@ipam"], "delegates": ["host-local"]},
        "host-local": {"ipam-roots": ["@ipam"]}}});
    let n2_ipam = json!({"type": "host-local", "subnet": "10.22.2.0/24", "dataDir": "@ipam"});
    let foreign = json!({"cniVersion": "1.0.0", "name": "n2", "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": "@ipam",
                 "ranges": [[{"subnet": "10.22.5.0/24", "rangeStart": "10.22.5.200"}]]}});
    let held = |ip: &str| world.ipam_dir().join("n2").join(ip).exists();
    for ops in [
        json!([{"call": "delegate.run", "type": "host-local", "command": "ADD", "config": foreign}]),
        json!([{"call": "ipam.open", "data-dir": "@ipam"},
               {"call": "ipam.reserve", "address": "10.22.5.200", "range-id": "0"}]),
    ] {
        let conf = json!({"cniVersion": "1.0.0", "name": "n2", "type": "scripted",
                          "ipam": n2_ipam, "ops": ops});
        let run = world.run("ADD", &policy, &conf, &[("CNI_CONTAINERID", "attacker")]);
        let r = results(&run);
        let last = r.last().expect("a result");
        assert!(last.get("error").is_some(), "{ops}: {r:?}");
        assert!(!held("10.22.5.200"), "{ops}: reserved in n2's state: {r:?}");
        let audit = world.audit();
        assert!(
            audit.iter().any(|a| a["outcome"] == "denied"
                && a["reason"]
                    .as_str()
                    .is_some_and(|x| x.contains("outside the subnets the runtime's config names"))),
            "{ops}: no denial in {audit:#?}"
        );
        let del = json!({"cniVersion": "1.0.0", "name": "n2", "type": "scripted",
                         "ipam": n2_ipam, "ops": []});
        let d = world.run("DEL", &policy, &del, &[("CNI_CONTAINERID", "attacker")]);
        assert_eq!(d.code, 0, "{d:?}");
    }
    // Network n5's first ADD: its gateway prefix covers no one's address.
    let n5 = json!({"cniVersion": "1.0.0", "name": "n5", "type": "bridge", "bridge": "cnin5",
           "isGateway": true,
           "ipam": {"type": "host-local", "subnet": "10.22.5.0/24",
                    "dataDir": world.ipam_dir().display().to_string()}});
    let pod = Netns::new("az94p");
    let add = world.run_bundled(&pod, "bridge", "ADD", &n5, "pod");
    assert_eq!(add.code, 0, "n5's first ADD: {add:?}");
    assert_eq!(world.run_bundled(&pod, "bridge", "DEL", &n5, "pod").code, 0);
    // Inside n2's own subnet, the store is n2's plugin's to use.
    let conf = json!({"cniVersion": "1.0.0", "name": "n2", "type": "scripted", "ipam": n2_ipam,
        "ops": [{"call": "ipam.open", "data-dir": "@ipam"},
                {"call": "ipam.reserve", "address": "10.22.2.9", "range-id": "0"}]});
    let r = results(&world.run("ADD", &policy, &conf, &[("CNI_CONTAINERID", "attacker")]));
    assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    assert!(held("10.22.2.9"));
}

/// The scripted plugin's grant for the delegate attacks: wide, with the
/// firewall and the bundled IPAM plugins as delegates.
fn attacker_grant() -> Value {
    let mut g = wide();
    g["host"]["firewall"] = json!({"port-mappings": true, "masquerade": true, "forward": true});
    g["delegates"] = json!(["scripted", "static", "host-local"]);
    g
}

fn attacker_policy() -> Value {
    json!({"plugins": {"scripted": attacker_grant(),
                       "host-local": {"ipam-roots": ["@ipam"]}}})
}

/// Breaches 2 and 3 (S13): a plugin runs a static IPAM delegate with a
/// config it wrote itself, naming a LAN host beside the node (192.0.2.50,
/// on the uplink's subnet) or the victim's address: no DNAT off the node,
/// no `route_localnet` on the uplink, no masquerade or forward rule for
/// another container. The same delegate on the runtime's own config gives
/// the attachment its address.
#[test]
fn breach2_3_a_delegate_on_a_config_the_plugin_wrote_gives_it_no_address() {
    let world = World::new("az2");
    let _victim = with_victim(&world, "az2v");
    world
        .node
        .sysctl("net.ipv4.conf.uplink.route_localnet", "0");
    let before = world.snapshot();
    let mappings = json!([{"host-port": 8080, "container-port": 80, "protocol": "tcp"}]);
    for ip in ["192.0.2.50", "10.22.0.2"] {
        let static_conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "static",
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/24")}]}});
        for rules in [
            json!({"port-map": [{"container": format!("{ip}/24"), "snat": true, "mappings": mappings}]}),
            json!({"masquerade": [format!("{ip}/24")]}),
            json!({"forward": [ip]}),
        ] {
            let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                "runtimeConfig": {"portMappings": [
                    {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
                "ops": [
                    {"call": "delegate.run", "type": "static", "command": "ADD", "config": static_conf},
                    {"call": "firewall.add", "ns": "host", "rules": rules}]});
            let run = world.run("ADD", &attacker_policy(), &conf, &[]);
            let what = format!("{ip} {rules}");
            denied(
                &world,
                &run,
                1,
                &format!("{ip} is not an address of this attachment"),
                &what,
            );
            support::assert_same(&before, &world.snapshot(), &what);
        }
    }
    let sysctls = world.node.sysctls();
    assert!(
        sysctls
            .iter()
            .any(|l| l.ends_with("/ipv4/conf/uplink/route_localnet:0")),
        "route_localnet on the uplink: {:?}",
        sysctls
            .iter()
            .filter(|l| l.contains("uplink/route_localnet"))
            .collect::<Vec<_>>()
    );
    // The runtime's own config, handed to the static delegate unchanged:
    // its address is the attachment's.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
        "ipam": {"type": "static", "addresses": [{"address": "10.24.0.9/24"}]},
        "ops": [
            {"call": "delegate.run", "type": "static", "command": "ADD", "config": "@stdin"},
            {"call": "firewall.add", "ns": "host", "rules": {"forward": ["10.24.0.9"]}}]});
    let run = world.run("ADD", &attacker_policy(), &conf, &[]);
    let r = results(&run);
    assert!(
        r[1].get("ok").is_some(),
        "the runtime's own static address: {r:?}"
    );
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "firewall.remove", "ns": "host", "kinds": ["forward"]}]});
    assert_eq!(world.run("DEL", &attacker_policy(), &del, &[]).code, 0);
}

/// The addresses an attachment owns stay its own when a later delegate
/// cannot even be loaded (it imports an interface wasmcni refuses): the
/// plugin goes on with its CNI error, and its address is still the
/// attachment's.
#[test]
fn a_delegate_that_cannot_load_takes_no_address_from_its_caller() {
    let world = World::new("az3l");
    let mut g = attacker_grant();
    g["delegates"] = json!(["static", "sockets"]);
    let policy = json!({"plugins": {"scripted": g}});
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
        "ipam": {"type": "static", "addresses": [{"address": "10.24.0.9/24"}]},
        "ops": [
            {"call": "delegate.run", "type": "static", "command": "ADD", "config": "@stdin"},
            {"call": "delegate.run", "type": "sockets", "command": "ADD", "config": "@stdin"},
            {"call": "firewall.add", "ns": "host", "rules": {"forward": ["10.24.0.9"]}}]});
    let run = world.run("ADD", &policy, &conf, &[]);
    let r = results(&run);
    assert!(r[0].get("ok").is_some(), "{r:?}");
    assert!(
        r[1].get("ok").is_none(),
        "a delegate importing wasi:sockets ran: {r:?}"
    );
    assert!(
        r[2].get("ok").is_some(),
        "the runtime's own static address after a delegate that could not load: {r:?}"
    );
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "firewall.remove", "ns": "host", "kinds": ["forward"]}]});
    assert_eq!(world.run("DEL", &policy, &del, &[]).code, 0);
}

/// Breach 4 (S14): a delegate runs under its caller's network, whatever
/// its config says: a GC of the attacker's own network that delegates
/// host-local's GC with `"name": "vnet"` and no valid attachments
/// releases nothing of vnet's, and an ADD that delegates host-local with
/// that name reserves nothing in vnet's state.
#[test]
fn breach4_a_delegate_cannot_claim_another_network() {
    let world = World::new("az4");
    let _victim = with_victim(&world, "az4v");
    let vnet_dir = world.ipam_dir().join("vnet");
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(&vnet_dir)
            .expect("vnet state")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let hl = |version: &str| {
        json!({"cniVersion": version, "name": "vnet", "type": "host-local",
               "cni.dev/valid-attachments": [],
               "ipam": {"type": "host-local", "subnet": "10.22.0.0/24", "dataDir": "@ipam"}})
    };
    let gc = json!({"cniVersion": "1.1.0", "name": "n", "type": "scripted",
        "cni.dev/valid-attachments": [{"containerID": "other-ctr", "ifname": "eth0"}],
        "ops": [{"call": "delegate.run", "type": "host-local", "command": "GC", "config": hl("1.1.0")}]});
    let run = world.run("GC", &attacker_policy(), &gc, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        victim_reserved(&world),
        "a GC of network n released vnet's reservation: {run:?}"
    );
    let add = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
        "ops": [{"call": "delegate.run", "type": "host-local", "command": "ADD", "config": hl("1.0.0")}]});
    let run = world.run(
        "ADD",
        &attacker_policy(),
        &add,
        &[("CNI_CONTAINERID", "attacker")],
    );
    let r = results(&run);
    assert!(r[0].get("ok").is_some(), "{r:?}");
    assert_eq!(
        listing(),
        before,
        "an ADD of network n reserved in vnet's state"
    );
    // It reserved in its own network's state instead.
    let mine = std::fs::read_dir(world.ipam_dir().join("n"))
        .expect("n state")
        .flatten()
        .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.starts_with("attacker")));
    assert!(
        mine,
        "the delegate's reservation is not in network n's state"
    );
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
        "ops": [{"call": "delegate.run", "type": "host-local", "command": "DEL", "config": hl("1.0.0")}]});
    let run = world.run(
        "DEL",
        &attacker_policy(),
        &del,
        &[("CNI_CONTAINERID", "attacker")],
    );
    assert_eq!(run.code, 0, "{run:?}");
}

/// Breach 5 (S13): the victim's address is reserved in vnet's IPAM state,
/// which the attacker's call never opened; a host route to it through the
/// attacker's own host veth, or a host address whose connected prefix
/// covers it, would steer the node's traffic for the victim.
#[test]
fn breach5_no_host_route_or_address_covers_another_networks_reservation() {
    let world = World::new("az5");
    let _victim = with_victim(&world, "az5v");
    let before = world.snapshot();
    let veth = json!({"call": "link.create-veth", "ns": "host", "name": "cnitestv0",
                      "peer-ns": "container", "peer-name": "eth0"});
    for (op, why) in [
        (
            json!({"call": "route.add", "ns": "host", "destination": "10.22.0.2/32", "link": "cnitestv0"}),
            "host route to 10.22.0.2/32 covers an address reserved for another attachment",
        ),
        (
            json!({"call": "route.add", "ns": "host", "destination": "10.22.0.0/28", "link": "cnitestv0"}),
            "host route to 10.22.0.0/28 covers an address reserved for another attachment",
        ),
        (
            json!({"call": "address.add", "ns": "host", "link": "cnitestv0", "prefix": "10.22.0.77/24"}),
            "host address 10.22.0.77/24 covers 10.22.0.2",
        ),
    ] {
        let up = json!({"call": "link.set-up", "ns": "host", "link": "cnitestv0", "up": true});
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                          "ops": [veth, up, op]});
        let run = world.run("ADD", &policy_with(wide()), &conf, &[]);
        denied(&world, &run, 2, why, &op.to_string());
        // The plugin's ADD succeeded: its veth stays until its DEL.
        let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
        assert_eq!(world.run("DEL", &policy_with(wide()), &del, &[]).code, 0);
        support::assert_same(&before, &world.snapshot(), &op.to_string());
    }
    // What covers no one else's address, nor takes a route of the node's
    // (10.22.0.78 lies in the victim network's connected subnet), is the
    // plugin's to add.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [veth,
        {"call": "link.set-up", "ns": "host", "link": "cnitestv0", "up": true},
        {"call": "address.add", "ns": "host", "link": "cnitestv0", "prefix": "10.22.0.77/32"},
        {"call": "route.add", "ns": "host", "destination": "10.23.0.78/32", "link": "cnitestv0"}]});
    let r = results(&world.run("ADD", &policy_with(wide()), &conf, &[]));
    assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    assert_eq!(world.run("DEL", &policy_with(wide()), &del, &[]).code, 0);
    // A network's own prefix on its own bridge covers its containers'
    // reservations by design: an ADD that makes the bridge again (an
    // admin deleted it) puts the gateway back while the victim's
    // reservation is there.
    world.node.ip(&["link", "del", "cnivic0"]);
    let second = Netns::new("az5s");
    let add = world.run_bundled(&second, "bridge", "ADD", &vnet(&world), "second");
    assert_eq!(add.code, 0, "{add:?}");
    let del = world.run_bundled(&second, "bridge", "DEL", &vnet(&world), "second");
    assert_eq!(del.code, 0, "{del:?}");
}

/// Breach 6 (S14): with the bridge plugin's default grant (`bridges:
/// ["cni*"]`), network n may not enslave its port to vnet's bridge, make
/// it promiscuous or give it an address; an admin bridge no network has
/// marked stays usable.
#[test]
fn breach6_a_network_cannot_join_another_networks_bridge() {
    let world = World::new("az6");
    let _victim = with_victim(&world, "az6v");
    world.node.ip(&["link", "add", "cniadm0", "type", "bridge"]);
    let entry = default_entry("bridge");
    let veth = json!({"call": "link.create-veth", "ns": "host", "name": "vethatk0",
                      "peer-ns": "container", "peer-name": "eth0"});
    let before = world.snapshot();
    for op in [
        json!({"call": "link.set-master", "ns": "host", "link": "vethatk0", "master": "cnivic0"}),
        json!({"call": "link.set-promiscuous", "ns": "host", "link": "cnivic0", "on": true}),
        json!({"call": "address.add", "ns": "host", "link": "cnivic0", "prefix": "10.22.0.1/24"}),
    ] {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                          "ops": [veth, op]});
        let run = world.run("ADD", &policy_with(entry.clone()), &conf, &[]);
        denied(
            &world,
            &run,
            1,
            "is shared by another network",
            &op.to_string(),
        );
        let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
        assert_eq!(
            world
                .run("DEL", &policy_with(entry.clone()), &del, &[])
                .code,
            0
        );
        support::assert_same(&before, &world.snapshot(), &op.to_string());
    }
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [veth,
        {"call": "link.set-master", "ns": "host", "link": "vethatk0", "master": "cniadm0"}]});
    let r = results(&world.run("ADD", &policy_with(entry.clone()), &conf, &[]));
    assert!(
        r.iter().all(|x| x.get("ok").is_some()),
        "an admin bridge: {r:?}"
    );
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    assert_eq!(world.run("DEL", &policy_with(entry), &del, &[]).code, 0);
}

/// Issue 49, breach 6 (S14): a name pattern is no authority over a link
/// another network or attachment has marked. A plugin of network n granted
/// `links: ["cni*", "veth*"]` and the sysctl patterns may not change vnet's
/// bridge `cnivic0` or the victim's host veth (its MTU, its `rp_filter`,
/// `accept_ra`, `forwarding`), in ADD or in DEL, though every pattern
/// matches: refused, audited, nothing changed. A link the pattern names
/// that no one has marked stays the plugin's to change.
#[test]
fn issue49_breach6_a_name_pattern_does_not_reach_another_networks_or_attachments_link() {
    let world = World::new("az96");
    let _victim = with_victim(&world, "az96v");
    let port = victim_port(&world);
    world.node.ip(&["link", "add", "cniadm1", "type", "bridge"]);
    let mut grant = wide();
    grant["host"]["links"] = json!(["cni*", "veth*"]);
    grant["host"]["sysctls"] = json!([
        "net.ipv4.conf.*.forwarding",
        "net.ipv4.conf.*.rp_filter",
        "net.ipv6.conf.*.accept_ra"
    ]);
    let before = world.snapshot();
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    for cmd in ["ADD", "DEL"] {
        for (link, why) in [
            ("cnivic0", "is shared by another network"),
            (port.as_str(), "belongs to another attachment"),
        ] {
            for op in [
                json!({"call": "link.set-mtu", "ns": "host", "link": link, "mtu": 1280}),
                json!({"call": "sysctl.set", "ns": "host",
                       "key": format!("net.ipv4.conf.{link}.rp_filter"), "value": "2"}),
                json!({"call": "sysctl.set", "ns": "host",
                       "key": format!("net.ipv6.conf.{link}.accept_ra"), "value": "2"}),
                json!({"call": "sysctl.set", "ns": "host",
                       "key": format!("net.ipv4.conf.{link}.forwarding"), "value": "0"}),
            ] {
                let what = format!("{cmd} {op}");
                let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                                  "ops": [op]});
                let run = world.run(cmd, &policy_with(grant.clone()), &conf, &[]);
                denied(&world, &run, 0, why, &what);
                if cmd == "ADD" {
                    let d = world.run("DEL", &policy_with(grant.clone()), &del, &[]);
                    assert_eq!(d.code, 0, "{what}: {d:?}");
                }
                support::assert_same(&before, &world.snapshot(), &what);
            }
        }
    }
    // Nor may a link stacked on it put the plugin's container on its
    // segment (the master check asks the same of a `links` match).
    for master in ["cnivic0", port.as_str()] {
        let op = json!({"call": "link.create-macvlan", "ns": "container", "master-ns": "host",
                        "master": master, "mode": "bridge", "name": "mv0"});
        let what = op.to_string();
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                          "ops": [op]});
        let run = world.run("ADD", &policy_with(grant.clone()), &conf, &[]);
        denied(
            &world,
            &run,
            0,
            &format!("host link {master:?} matches none of"),
            &what,
        );
        assert_eq!(
            world
                .run("DEL", &policy_with(grant.clone()), &del, &[])
                .code,
            0
        );
        support::assert_same(&before, &world.snapshot(), &what);
    }
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.set-mtu", "ns": "host", "link": "cniadm1", "mtu": 1280},
        {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.cniadm1.rp_filter", "value": "2"}]});
    let r = results(&world.run("ADD", &policy_with(grant.clone()), &conf, &[]));
    assert!(
        r.iter().all(|x| x.get("ok").is_some()),
        "a link no one marked: {r:?}"
    );
    assert_eq!(world.run("DEL", &policy_with(grant), &del, &[]).code, 0);
}

/// Issue 49, breach 1 (a pair wasmcni made): two attachments in one pod
/// namespace. The attacker is attachment (n2, pod, net1) with container
/// `modify` and host `adopt-peer`; the victim's `eth0` is called `net1`
/// when its ADD starts (no plugin may rename it so: the test does), so
/// "the peer of CNI_IFNAME" is the victim's host veth, which carries the
/// victim's attachment mark: changing it (MTU, a bridge of its own,
/// traffic control) is refused, audited, and leaves it as it was. (A
/// pair a native plugin made carries no mark:
/// `issue49_breach1_adopt_peer_is_fixed_at_add_for_a_native_pair`.)
#[test]
fn issue49_breach1_adopt_peer_does_not_hand_over_another_attachments_marked_veth() {
    let world = World::new("az91");
    let pod = with_victim(&world, "az91v");
    let port = victim_port(&world);
    let grant = json!({
        "container": {"read": true, "modify": true},
        "host": {"read": true, "modify": true, "traffic-control": true, "adopt-peer": true,
                 "bridges": ["cnishared*"]}});
    let before = world.snapshot();
    let netns = pod.path.display().to_string();
    let env = [
        ("CNI_NETNS", netns.as_str()),
        ("CNI_IFNAME", "net1"),
        ("CNI_CONTAINERID", "pod"),
    ];
    for (op, why) in [
        (
            json!({"call": "link.set-mtu", "ns": "host", "link": port, "mtu": 1280}),
            "belongs to another attachment",
        ),
        (
            json!({"call": "traffic-control.limit-receive", "ns": "host", "link": port,
                   "rate": 1000000, "burst": 10000}),
            "belongs to another attachment",
        ),
        (
            json!({"call": "link.set-master", "ns": "host", "link": port, "master": "cnishared0"}),
            "belongs to another attachment",
        ),
    ] {
        let what = op.to_string();
        // The victim's eth0 under the attacker's ifname (from outside: no
        // plugin may give it that name), so that the kernel's peer of
        // `net1` when the ADD starts is the victim's marked veth.
        pod.ip(&["link", "set", "eth0", "name", "net1"]);
        let conf = json!({"cniVersion": "1.0.0", "name": "n2", "type": "scripted", "ops": [op]});
        let run = world.run("ADD", &policy_with(grant.clone()), &conf, &env);
        denied(&world, &run, 0, why, &what);
        let del = json!({"cniVersion": "1.0.0", "name": "n2", "type": "scripted", "ops": []});
        let d = world.run("DEL", &policy_with(grant.clone()), &del, &env);
        assert_eq!(d.code, 0, "{what}: {d:?}");
        pod.ip(&["link", "set", "net1", "name", "eth0"]);
        support::assert_same(&before, &world.snapshot(), &what);
    }
}

/// Issue 49, breach 1 (a pair a native plugin made, which carries no
/// mark): two attachments of the reference bridge in one pod namespace,
/// the victim's `eth0` and the attacker's `net1`. The attacker, with
/// container `modify` and host `adopt-peer`, tries to rename the
/// victim's `eth0` to its own ifname, so that "its" peer would be the
/// victim's host veth: refused (a link takes `CNI_IFNAME` only if the
/// call made or moved it in), and the victim's veth with it; its own is
/// still adopted. When names are swapped by something else between its
/// ADD and DEL (here the test, as any actor outside wasmcni could), its
/// DEL adopts the peer its ADD fixed and recorded, not the victim's.
#[test]
fn issue49_breach1_adopt_peer_is_fixed_at_add_for_a_native_pair() {
    let world = World::new("az92");
    let (theirs, mine) = two_native_pairs(&world);
    let grant = json!({
        "container": {"read": true, "modify": true},
        "host": {"read": true, "modify": true, "traffic-control": true, "adopt-peer": true}});
    let env = [("CNI_IFNAME", "net1"), ("CNI_CONTAINERID", "pod")];
    // Its MTU, master, state and MAC (the bridge port's timers move).
    let state = |link: &str| world.node.ip(&["-o", "link", "show", link]);
    let before = state(&theirs);
    let attack = breach1_attack(&theirs);
    let ops = |list: Vec<&Value>| -> Value {
        json!({"cniVersion": "1.0.0", "name": "n2", "type": "scripted", "ops": list})
    };
    // ADD: the rename, the attack, its own peer.
    let take = json!({"call": "link.set-name", "ns": "container", "link": "eth0", "name": "net1"});
    let own_mtu = json!({"call": "link.set-mtu", "ns": "host", "link": mine, "mtu": 1400});
    let list: Vec<&Value> = [&take]
        .into_iter()
        .chain(&attack)
        .chain([&own_mtu])
        .collect();
    let run = world.run("ADD", &policy_with(grant.clone()), &ops(list), &env);
    let r = results(&run);
    denied(
        &world,
        &run,
        0,
        "may not take the name \"net1\"",
        "the rename",
    );
    for i in [1, 2] {
        denied(
            &world,
            &run,
            i,
            "was not created by wasmcni",
            "ADD's attack",
        );
    }
    assert!(r[3].get("ok").is_some(), "its own peer: {r:?}");
    assert!(
        world.node.ip(&["link", "show", &mine]).contains("mtu 1400"),
        "{}",
        world.node.ip(&["link", "show", &mine])
    );
    assert_eq!(
        state(&theirs),
        before,
        "the victim's host veth after the ADD"
    );
    // The names swapped from outside, then its DEL.
    swap_names(&world, true);
    let run = world.run(
        "DEL",
        &policy_with(grant),
        &ops(attack.iter().collect()),
        &env,
    );
    swap_names(&world, false);
    for i in [0, 1] {
        denied(
            &world,
            &run,
            i,
            "was not created by wasmcni",
            "DEL after the swap",
        );
    }
    assert_eq!(
        state(&theirs),
        before,
        "the victim's host veth after the DEL"
    );
    assert_unswapped_and_unshaped(&world, &theirs);
}

/// The same through `wasmcni-chain`: the first member tries the rename,
/// the second (both granted `adopt-peer`) attacks and adopts its own; the
/// peer the first member fixed when it started is the chain's, and its
/// record's for the chain's DEL after a swap from outside.
#[test]
fn issue49_breach1_a_chain_member_adopts_the_peer_the_chain_fixed() {
    let world = World::new("az93");
    let (theirs, mine) = two_native_pairs(&world);
    let before = world.node.ip(&["-o", "link", "show", &theirs]);
    let attack = breach1_attack(&theirs);
    let grant = json!({
        "container": {"read": true, "modify": true},
        "host": {"read": true, "modify": true, "traffic-control": true, "adopt-peer": true}});
    let policy = json!({"plugins": {"scripted": grant}});
    let own_mtu = json!({"call": "link.set-mtu", "ns": "host", "link": mine, "mtu": 1400});
    let take = json!({"call": "link.set-name", "ns": "container", "link": "eth0", "name": "net1"});
    let mut second: Vec<Value> = attack.to_vec();
    second.push(own_mtu);
    let chain = |command: &str, members: Value| {
        let conf = json!({"cniVersion": "1.0.0", "name": "n2", "type": "wasmcni-chain",
                          "plugins": members});
        let fixtures = support::fixture("scripted")
            .parent()
            .expect("fixture dir")
            .display()
            .to_string();
        support::Invoke::wasmcni_run("wasmcni-chain", conf.to_string().as_bytes())
            .cni(command, &world.ctr.path, "net1")
            .env("CNI_CONTAINERID", "pod")
            .env(
                "WASMCNI_POLICY",
                world.policy(&policy).display().to_string(),
            )
            .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
            .env("WASMCNI_PLUGIN_DIR", fixtures)
            .in_netns(&world.node)
            .run()
    };
    let run = chain(
        "ADD",
        json!([{"type": "scripted", "ops": [take]}, {"type": "scripted", "ops": second}]),
    );
    let r = results(&run);
    for i in [0, 1] {
        denied(
            &world,
            &run,
            i,
            "was not created by wasmcni",
            "the second member's ADD",
        );
    }
    assert!(r[2].get("ok").is_some(), "its own peer: {r:?}");
    assert_eq!(
        world.node.ip(&["-o", "link", "show", &theirs]),
        before,
        "the victim's host veth after the chain's ADD"
    );
    // Its DEL, the names swapped from outside.
    swap_names(&world, true);
    let _ = std::fs::remove_file(world.audit_path());
    let run = chain(
        "DEL",
        json!([{"type": "scripted", "ops": []}, {"type": "scripted", "ops": attack}]),
    );
    swap_names(&world, false);
    // (A DEL prints nothing: the refusals are the audit's.)
    assert_eq!(run.code, 0, "{run:?}");
    let refused: Vec<Value> = world
        .audit()
        .into_iter()
        .filter(|a| {
            a["outcome"] == "denied"
                && a["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("was not created by wasmcni"))
        })
        .collect();
    assert_eq!(refused.len(), 2, "the chain's DEL: {refused:#?}");
    assert_eq!(
        world.node.ip(&["-o", "link", "show", &theirs]),
        before,
        "the victim's host veth after the chain's DEL"
    );
    assert_unswapped_and_unshaped(&world, &theirs);
}

/// Breach 1's attack on the victim's host veth `theirs`: its MTU, a
/// shaper.
fn breach1_attack(theirs: &str) -> [Value; 2] {
    [
        json!({"call": "link.set-mtu", "ns": "host", "link": theirs, "mtu": 1280}),
        json!({"call": "traffic-control.limit-receive", "ns": "host", "link": theirs,
               "rate": 1000000, "burst": 10000}),
    ]
}

/// Swaps the pod namespace's names (`swap`: the victim's `eth0` becomes
/// `net1`, the attacker's `net1` `own1`), or swaps them back, from
/// outside wasmcni.
fn swap_names(world: &World, swap: bool) {
    let steps: [[&str; 2]; 2] = if swap {
        [["net1", "own1"], ["eth0", "net1"]]
    } else {
        [["net1", "eth0"], ["own1", "net1"]]
    };
    for [from, to] in steps {
        world.ctr.ip(&["link", "set", from, "name", to]);
    }
}

/// Asserts the pod namespace has its names back and the victim's host
/// veth `theirs` no shaper.
fn assert_unswapped_and_unshaped(world: &World, theirs: &str) {
    let links = world.ctr.ip(&["-o", "link", "show"]);
    assert!(
        links.contains(": eth0@") && links.contains(": net1@") && !links.contains("own1"),
        "{links}"
    );
    let qdiscs = world
        .node
        .command("tc")
        .args(["qdisc", "show", "dev", theirs])
        .output()
        .expect("tc");
    let qdiscs = String::from_utf8_lossy(&qdiscs.stdout).into_owned();
    assert!(
        qdiscs.contains("qdisc") && !qdiscs.contains("tbf"),
        "the victim's host veth: {qdiscs}"
    );
}

/// Two attachments of the reference bridge in `world`'s pod namespace:
/// the victim's `eth0` (network nnet) and the attacker's `net1` (n2), as
/// (the victim's host veth, the attacker's).
fn two_native_pairs(world: &World) -> (String, String) {
    let theirs = host_veth(&native_bridge(world, &world.ctr, "pod"));
    let conf = json!({"cniVersion": "1.0.0", "name": "n2", "type": "bridge",
        "bridge": "cninat2", "ipam": {"type": "host-local", "subnet": "10.28.0.0/24",
                 "dataDir": world.ipam_dir().display().to_string()}})
    .to_string();
    let run = support::Invoke::exe(
        format!("{}/bridge", support::REFERENCE_DIR),
        conf.as_bytes(),
    )
    .cni("ADD", &world.ctr.path, "net1")
    .env("CNI_CONTAINERID", "pod")
    .in_netns(&world.node)
    .run();
    assert_eq!(run.code, 0, "the attacker's own pair: {run:?}");
    (theirs, host_veth(&run.json()))
}

/// The names of the node's links.
fn node_links(world: &World) -> Vec<String> {
    world
        .node
        .ip(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect()
}

/// Breach 8 (S15): ADD of (n, ctr-test-1, eth0) in namespace n1, its DEL
/// lost, ADD again in n2; the late DEL of the first incarnation touches
/// only its objects: the host's cleanup leaves the second's host veth, a
/// plugin's DEL may not delete it, and the reservation (which names the
/// attachment, not an incarnation) stays the live incarnation's. The DEL
/// of the second then removes everything.
#[test]
fn breach8_a_late_del_touches_only_its_own_incarnation() {
    let world = World::new("az8");
    let n2 = Netns::new("az8b");
    let policy = json!({"plugins": {"scripted": wide()}});
    let add = |host: &str, ns: &Netns, ip: &str| {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
            {"call": "link.create-veth", "ns": "host", "name": host,
             "peer-ns": "container", "peer-name": "eth0"},
            {"call": "ipam.open", "data-dir": "@ipam"},
            {"call": "ipam.reserve", "address": ip, "range-id": "0"}]});
        let run = world.run(
            "ADD",
            &policy,
            &conf,
            &[("CNI_NETNS", ns.path.display().to_string().as_str())],
        );
        let r = results(&run);
        assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    };
    add("cnitestv1", &world.ctr, "10.80.0.21");
    add("cnitestv2", &n2, "10.80.0.22");
    assert!(node_links(&world).contains(&"cnitestv1".to_owned()));
    // The late DEL of the first incarnation: its plugin tries the second's
    // host veth, and releases what it holds.
    let late = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.delete", "ns": "host", "link": "cnitestv2"},
        {"call": "ipam.open", "data-dir": "@ipam"},
        {"call": "ipam.release-owned"}]});
    let run = world.run("DEL", &policy, &late, &[]);
    denied(
        &world,
        &run,
        0,
        "belongs to another incarnation of this attachment",
        "the late DEL's link.delete",
    );
    let links = node_links(&world);
    assert!(
        links.contains(&"cnitestv2".to_owned()),
        "the late DEL removed the live incarnation's veth: {links:?}"
    );
    assert!(
        !links.contains(&"cnitestv1".to_owned()),
        "the late DEL left its own veth: {links:?}"
    );
    let n_dir = world.ipam_dir().join("n");
    assert!(
        n_dir.join("10.80.0.22").exists(),
        "the late DEL released the live incarnation's reservation"
    );
    // The live incarnation's DEL removes the rest.
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    let run = world.run(
        "DEL",
        &policy,
        &del,
        &[("CNI_NETNS", n2.path.display().to_string().as_str())],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let links = node_links(&world);
    assert!(!links.contains(&"cnitestv2".to_owned()), "{links:?}");
    assert!(!n_dir.join("10.80.0.22").exists());
    assert!(!n_dir.join("10.80.0.21").exists());
}

/// Issue 49, breach 3 (S15): what a DEL takes away by the attachment's
/// name alone (its firewall rules by their tag, its `ifb`, its plugin
/// state) does not say which incarnation made it, so a late DEL, whose
/// namespace the records no longer name, keeps it for the live
/// incarnation: its plugin's `firewall.remove` and
/// `traffic-control.remove-limits`, and the host's drop of its plugin
/// state, remove nothing (audited). The live incarnation's DEL then
/// removes all of it.
#[test]
fn issue49_breach3_a_late_del_keeps_the_live_incarnations_rules_ifb_and_state() {
    let world = World::new("az93");
    let n2 = Netns::new("az93b");
    let mut grant = wide();
    grant["host"]["firewall"] = json!({"forward": true});
    grant["host"]["traffic-control"] = json!(true);
    grant["static-ranges"] = json!(["10.80.0.0/24"]);
    grant["attachment-state"] = json!(true);
    let policy = json!({"plugins": {"scripted": grant}});
    let in_ns = |ns: &Netns| ns.path.display().to_string();
    // The first incarnation, in the world's container namespace; its DEL
    // is lost, and the runtime adds the attachment again in n2.
    let first = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "host", "name": "cnitestv1",
         "peer-ns": "container", "peer-name": "eth0"}]});
    let r = results(&world.run("ADD", &policy, &first, &[]));
    assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    let live = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "host", "name": "cnitestv2",
         "peer-ns": "container", "peer-name": "eth0"},
        {"call": "firewall.add", "ns": "host", "rules": {"forward": ["10.80.0.22"]}},
        {"call": "traffic-control.limit-receive", "ns": "host", "link": "cnitestv2",
         "rate": 1000000, "burst": 10000},
        {"call": "state.set", "key": "k", "value": "v"}]});
    let r = results(&world.run("ADD", &policy, &live, &[("CNI_NETNS", &in_ns(&n2))]));
    assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    let ifb = {
        use sha2::Digest;
        let d = sha2::Sha512::digest(b"nctr-test-1");
        format!("bwp{}", &hex::encode(d)[..12])
    };
    let state = world
        .state_dir()
        .join("plugin-state/n/ctr-test-1/eth0/scripted.json");
    let rules = |world: &World| {
        world
            .node
            .wasmcni_rules()
            .iter()
            .filter(|r| r.to_string().contains("10.80.0.22"))
            .count()
    };
    let live_rules = rules(&world);
    assert!(live_rules > 0, "{:?}", world.node.wasmcni_rules());
    assert!(
        node_links(&world).contains(&ifb),
        "{:?}",
        node_links(&world)
    );
    assert!(state.is_file(), "{}", state.display());
    // The late DEL, in the first incarnation's namespace.
    let late = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "firewall.remove", "ns": "host", "kinds": ["forward"]},
        {"call": "traffic-control.remove-limits", "ns": "host"},
        {"call": "state.remove", "key": "k"}]});
    let run = world.run("DEL", &policy, &late, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        results(&run).iter().all(|x| x.get("ok").is_some()),
        "{run:?}"
    );
    assert_eq!(
        rules(&world),
        live_rules,
        "the late DEL removed the live incarnation's rules"
    );
    let links = node_links(&world);
    assert!(
        links.contains(&ifb),
        "the late DEL removed the live incarnation's ifb: {links:?}"
    );
    assert!(!links.contains(&"cnitestv1".to_owned()), "{links:?}");
    assert!(
        std::fs::read_to_string(&state).is_ok_and(|t| t.contains("\"k\"")),
        "the late DEL removed the live incarnation's plugin state"
    );
    let audit = world.audit();
    for call in [
        "firewall.keep",
        "traffic-control.keep",
        "attachment-state.keep",
        "host.keep-state",
    ] {
        assert!(
            audit.iter().any(|a| a["call"] == call),
            "no {call} in {audit:#?}"
        );
    }
    // The live incarnation's DEL removes it all.
    let run = world.run("DEL", &policy, &late, &[("CNI_NETNS", &in_ns(&n2))]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(rules(&world), 0, "{:?}", world.node.wasmcni_rules());
    let links = node_links(&world);
    assert!(!links.contains(&ifb), "{links:?}");
    assert!(!links.contains(&"cnitestv2".to_owned()), "{links:?}");
    assert!(!state.exists(), "{}", state.display());
}

/// Breach 7 (S16): a failed ADD that created the network's bridge, put
/// the gateway address on it and handed a gateway pair to the network,
/// racing a second ADD that joined the bridge meanwhile: its undo keeps
/// the bridge, the gateway address and the pair (the other attachment
/// uses them), and takes back only what was its attachment's own.
#[test]
fn breach7_an_undo_keeps_what_another_attachment_shares() {
    let world = World::new("az7");
    let n2 = Netns::new("az7b");
    let policy = json!({"plugins": {"scripted": wide()}});
    // It fails (exit 1) after a pause at its end.
    let creator = json!({"cniVersion": "1.0.0", "name": "n7", "type": "scripted",
        "exit": 1,
        "ops": [
            {"call": "link.create-bridge", "ns": "host", "name": "cnibr7"},
            {"call": "link.set-up", "ns": "host", "link": "cnibr7", "up": true},
            {"call": "address.add", "ns": "host", "link": "cnibr7", "prefix": "10.97.0.1/24"},
            {"call": "link.create-veth", "ns": "host", "name": "cnitestg7", "peer-ns": "host", "peer-name": "cnitestg7p"},
            {"call": "link.share", "ns": "host", "link": "cnitestg7"},
            {"call": "link.share", "ns": "host", "link": "cnitestg7p"},
            {"call": "link.create-veth", "ns": "host", "name": "cnitesta7", "peer-ns": "container", "peer-name": "eth0"},
            {"call": "sleep", "ms": 3000}]});
    let joiner = json!({"cniVersion": "1.0.0", "name": "n7", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "host", "name": "cnitestb7", "peer-ns": "container", "peer-name": "eth0"},
        {"call": "link.set-master", "ns": "host", "link": "cnitestb7", "master": "cnibr7"}]});
    std::thread::scope(|s| {
        let failed = s.spawn(|| world.run("ADD", &policy, &creator, &[("CNI_CONTAINERID", "a")]));
        // The second ADD joins once the creator's last step is done.
        let t0 = std::time::Instant::now();
        while !node_links(&world).contains(&"cnitesta7".to_owned()) {
            assert!(t0.elapsed().as_secs() < 20, "the creator never got there");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let run = world.run(
            "ADD",
            &policy,
            &joiner,
            &[
                ("CNI_CONTAINERID", "b"),
                ("CNI_NETNS", n2.path.display().to_string().as_str()),
            ],
        );
        let r = results(&run);
        assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
        let failed = failed.join().expect("creator");
        assert_ne!(failed.code, 0, "the creator's ADD was to fail: {failed:?}");
    });
    let links = node_links(&world);
    for kept in ["cnibr7", "cnitestg7", "cnitestg7p", "cnitestb7"] {
        assert!(links.contains(&kept.to_owned()), "{kept} gone: {links:?}");
    }
    assert!(!links.contains(&"cnitesta7".to_owned()), "{links:?}");
    let addrs = world.node.ip(&["-o", "addr", "show", "dev", "cnibr7"]);
    assert!(
        addrs.contains("10.97.0.1/24"),
        "the undo took the gateway address the other attachment uses: {addrs}"
    );
    let del = json!({"cniVersion": "1.0.0", "name": "n7", "type": "scripted", "ops": []});
    let run = world.run(
        "DEL",
        &policy,
        &del,
        &[
            ("CNI_CONTAINERID", "b"),
            ("CNI_NETNS", n2.path.display().to_string().as_str()),
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
}

/// Breach 12 (S16): links an ADD hands to its network (`link.share`, a
/// gateway pair) have the network's attachments as holders: they stay
/// while any is left, and go with the last one's DEL (before, no DEL or
/// GC ever removed them: each ADD could leave links behind forever).
#[test]
fn breach12_shared_links_go_with_their_last_holder() {
    let world = World::new("az12");
    let n2 = Netns::new("az12b");
    let policy = json!({"plugins": {"scripted": wide()}});
    let sharer = json!({"cniVersion": "1.0.0", "name": "n12", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "host", "name": "cnitestg12", "peer-ns": "host", "peer-name": "cnitestg12p"},
        {"call": "link.share", "ns": "host", "link": "cnitestg12"},
        {"call": "link.share", "ns": "host", "link": "cnitestg12p"},
        {"call": "link.create-veth", "ns": "host", "name": "cnitesta12", "peer-ns": "container", "peer-name": "eth0"}]});
    let other = json!({"cniVersion": "1.0.0", "name": "n12", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "host", "name": "cnitestb12", "peer-ns": "container", "peer-name": "eth0"}]});
    let del = json!({"cniVersion": "1.0.0", "name": "n12", "type": "scripted", "ops": []});
    let n2_path = n2.path.display().to_string();
    let b = [("CNI_CONTAINERID", "b"), ("CNI_NETNS", n2_path.as_str())];
    let ok = |run: support::Run| {
        let r = results(&run);
        assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    };
    ok(world.run("ADD", &policy, &sharer, &[("CNI_CONTAINERID", "a")]));
    ok(world.run("ADD", &policy, &other, &b));
    assert_eq!(
        world
            .run("DEL", &policy, &del, &[("CNI_CONTAINERID", "a")])
            .code,
        0
    );
    let links = node_links(&world);
    assert!(
        links.contains(&"cnitestg12".to_owned()),
        "the shared pair went while b holds the network: {links:?}"
    );
    assert!(!links.contains(&"cnitesta12".to_owned()), "{links:?}");
    let run = world.run("DEL", &policy, &del, &b);
    assert_eq!(run.code, 0, "{run:?}");
    let links = node_links(&world);
    for gone in ["cnitestg12", "cnitestg12p", "cnitestb12"] {
        assert!(!links.contains(&gone.to_owned()), "{gone} left: {links:?}");
    }
}

/// S13 through the records: a record gives authority (the addresses a
/// plugin may name as its container's, what the host removes), so the
/// state root must be as safe as the policy's path. Where another user
/// could write one — here a group/world-writable state root holding a
/// forged record that gives the attacker the victim's address — wasmcni
/// refuses to ADD, naming the state root, and a DEL ignores the records.
#[test]
fn a_state_root_others_can_write_gives_no_authority() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let world = World::new("azs");
    let _victim = with_victim(&world, "azsv");
    let dir = world.state_dir().join("attachments/anet/attacker/eth0");
    std::fs::create_dir_all(&dir).expect("record dir");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let forged = json!({"version": 1, "network": "anet", "container-id": "attacker",
        "ifname": "eth0", "plugin": "bridge", "boot-id": boot.trim(),
        "netns": std::fs::metadata(&world.ctr.path).expect("netns").ino(),
        "borrowed": [], "addresses": ["10.22.0.2"]});
    std::fs::write(dir.join("bridge.json"), forged.to_string()).expect("forge");
    let conf = chained("portmap", "anet", "10.22.0.2");
    // Trusted, the record is the host's word (the forgery needs root).
    std::fs::set_permissions(world.state_dir(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    let before = world.snapshot();
    let run = world.run_bundled(&world.ctr, "portmap", "ADD", &conf, "attacker");
    assert_ne!(
        run.code, 0,
        "an ADD under a world-writable state root: {run:?}"
    );
    assert!(
        run.stdout.contains("is writable by group or others")
            && run
                .stdout
                .contains(&world.state_dir().display().to_string()),
        "{run:?}"
    );
    support::assert_same(&before, &world.snapshot(), "after the refused ADD");
    let del = world.run_bundled(&world.ctr, "portmap", "DEL", &conf, "attacker");
    assert_eq!(del.code, 0, "{del:?}");
    assert!(
        del.stderr.contains("ignoring the attachment records"),
        "{del:?}"
    );
}

/// The reference bridge (native, `/usr/lib/cni`) attaching `ns` as `cid`
/// to network `nnet`: its result.
fn native_bridge(world: &World, ns: &Netns, cid: &str) -> Value {
    let conf = json!({"cniVersion": "1.0.0", "name": "nnet", "type": "bridge",
        "bridge": "cninat0", "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "10.27.0.0/24",
                 "dataDir": world.ipam_dir().display().to_string()}})
    .to_string();
    let run = support::Invoke::exe(
        format!("{}/bridge", support::REFERENCE_DIR),
        conf.as_bytes(),
    )
    .cni("ADD", &ns.path, "eth0")
    .env("CNI_CONTAINERID", cid)
    .in_netns(&world.node)
    .run();
    assert_eq!(run.code, 0, "the reference bridge's ADD: {run:?}");
    run.json()
}

/// The host end of a native bridge result's veth.
fn host_veth(result: &Value) -> String {
    result["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| {
            i["sandbox"].is_null() && i["name"].as_str().is_some_and(|n| n.starts_with("veth"))
        })
        .and_then(|i| i["name"].as_str())
        .unwrap_or_else(|| panic!("no host veth in {result}"))
        .to_owned()
}

/// Issue 27 (coexistence with a primary CNI): a wasmcni plugin chained
/// after a native one may change the host end of its attachment's veth —
/// which wasmcni did not create and no mark names — only when its entry
/// says `adopt-peer`, and then that one link alone: the kernel, not the
/// prevResult, says which link is the peer. bandwidth after the
/// reference bridge is refused under its default entry (the report), and
/// shapes its host veth with `adopt-peer`; a plugin with `adopt-peer`
/// cannot shape another container's host veth, nor the bridge.
#[test]
fn adopt_peer_gives_the_host_end_of_the_attachments_own_veth_and_nothing_else() {
    let world = World::new("az9");
    let victim = Netns::new("az9v");
    let theirs = host_veth(&native_bridge(&world, &victim, "victim"));
    let result = native_bridge(&world, &world.ctr, "ctr");
    let mine = host_veth(&result);
    let bw = json!({"cniVersion": "1.0.0", "name": "nnet", "type": "bandwidth",
        "ingressRate": 8000000, "ingressBurst": 80000, "prevResult": result});
    let qdiscs = |link: &str| {
        let out = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &world.node.name,
                "tc",
                "qdisc",
                "show",
                "dev",
                link,
            ])
            .output()
            .expect("tc");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The default entry: the host veth is not the plugin's.
    let before = world.snapshot();
    let run = world.run_bundled(&world.ctr, "bandwidth", "ADD", &bw, "ctr");
    assert_ne!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("was not created by wasmcni"), "{run:?}");
    support::assert_same(&before, &world.snapshot(), "after the refused ADD");
    // With adopt-peer: its own host veth, shaped.
    let mut entry = default_entry("bandwidth");
    entry["host"]["adopt-peer"] = json!(true);
    let entries = json!({"bandwidth": entry});
    let run = world.run_bundled_with(&world.ctr, "bandwidth", "ADD", &bw, "ctr", &entries);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(qdiscs(&mine).contains("tbf"), "{}", qdiscs(&mine));
    let del = world.run_bundled_with(&world.ctr, "bandwidth", "DEL", &bw, "ctr", &entries);
    // (The shaping goes with the veth, at the native bridge's DEL, as with
    // the reference bandwidth: its DEL removes only the ifb it made.)
    assert_eq!(del.code, 0, "{del:?}");
    // A hostile plugin with adopt-peer: another container's host veth and
    // the bridge are not its attachment's (assert_denied also checks that
    // nothing changed, traffic control included).
    let limit = |link: &str| {
        json!({"call": "traffic-control.limit-receive", "ns": "host", "link": link,
               "rate": 1000000, "burst": 10000})
    };
    // The refusal says what refused it, for tools (`wasmcni policy
    // suggest` reads these, never the text): the policy's `links`, about
    // that node link.
    let not_ours = |r: &Value| {
        r["reason"]
            .as_str()
            .is_some_and(|s| s.contains("was not created by wasmcni"))
            && r["refused-by"] == "policy"
            && r["grant"] == "plugins.scripted.host.links"
            && r["link"]["name"].as_str().is_some_and(|n| !n.is_empty())
            && r["link"]["index"].as_u64().is_some()
    };
    let mut grant = json!({"container": {"read": true},
                           "host": {"read": true, "traffic-control": true, "adopt-peer": true}});
    for target in [theirs.as_str(), "cninat0"] {
        assert_denied(&world, "adopt-peer", &grant, &limit(target), not_ours);
    }
    // The same call on its own veth passes.
    let run = world.run(
        "ADD",
        &policy_with(grant.clone()),
        &json!({"cniVersion": "1.0.0", "name": "nnet", "type": "scripted", "ops": [limit(&mine)]}),
        &[("CNI_CONTAINERID", "ctr")],
    );
    assert!(results(&run)[0].get("error").is_none(), "{run:?}");
    // Without adopt-peer, not even that.
    grant["host"]["adopt-peer"] = json!(false);
    assert_denied(&world, "no adopt-peer", &grant, &limit(&mine), not_ours);
}

/// A macvlan's broadcast queue is shared by every macvlan on its master
/// (the kernel queues as many frames as the largest request among them):
/// a plugin whose grant uses a node link only as a master (`masters`, as
/// the default macvlan grant's `*`) may not ask for more than the
/// kernel's default (1000) there, which would raise the queue of every
/// other network's macvlan on that link; up to it, nobody's changes.
#[test]
fn a_macvlans_broadcast_queue_does_not_raise_its_masters_for_others() {
    let world = World::new("abcq");
    // Another network's macvlan on the node's uplink.
    world.node.ip(&[
        "link", "add", "link", "uplink", "name", "othermv0", "type", "macvlan", "mode", "bridge",
    ]);
    let used = || -> Value {
        let v: Value = world
            .node
            .ip_json(&["-d", "-j", "link", "show", "othermv0"]);
        v[0]["linkinfo"]["info_data"]["usedbcqueuelen"].clone()
    };
    assert_eq!(used(), 1000);
    let policy = policy_with(default_entry("macvlan"));
    let create = |n: u32| {
        json!({"cniVersion": "1.0.0", "name": "anet", "type": "scripted", "ops": [
            {"call": "link.create-macvlan-with", "ns": "container", "master-ns": "host",
             "master": "uplink", "name": "mv9", "bc-queue-len": n}]})
    };
    let run = world.run(
        "ADD",
        &policy,
        &create(50_000),
        &[("CNI_CONTAINERID", "attacker")],
    );
    denied(
        &world,
        &run,
        0,
        "raises the queue every macvlan on host link \"uplink\" shares",
        "bcqueuelen 50000",
    );
    assert_eq!(used(), 1000, "the other network's queue");
    assert!(
        !world.ctr.ip(&["-o", "link"]).contains("mv9"),
        "{}",
        world.ctr.ip(&["-o", "link"])
    );
    let run = world.run(
        "ADD",
        &policy,
        &create(1000),
        &[("CNI_CONTAINERID", "attacker")],
    );
    assert!(results(&run)[0].get("ok").is_some(), "{run:?}");
    assert!(world.ctr.ip(&["-o", "link"]).contains("mv9"));
    assert_eq!(used(), 1000, "the other network's queue");
}

/// Issue 49, breach 5 (routes the kernel adds): a host grant whose
/// sysctl patterns match `accept_ra` (the default bridge and ptp
/// entries', which set it to 0 as the reference does) may not raise it,
/// nor any setting by which the node takes routes or addresses from what
/// a link receives, on its own new host veth either (nor -1, which the
/// kernel reads as on), nor turn IPv6 forwarding off (which makes the
/// kernel honour `accept_ra` 1): at 2 its container could send router
/// advertisements that route the node's traffic, or another network's
/// subnet, through that veth. Lowering stays allowed, and the host end
/// of a pair into the container takes no router advertisement from the
/// start (`accept_ra` 0, as the reference bridge and ptp leave theirs).
#[test]
fn issue49_breach5_no_host_setting_takes_routes_from_a_container() {
    let world = World::new("az97");
    let mut grant = wide();
    grant["host"]["sysctls"] = json!([
        "net.ipv6.conf.*.accept_ra",
        "net.ipv6.conf.*.accept_ra_rt_info_max_plen",
        "net.ipv6.conf.*.autoconf",
        "net.ipv6.conf.*.accept_ra_pinfo",
        "net.ipv4.conf.*.accept_redirects",
        "net.ipv6.conf.all.accept_redirects",
        "net.ipv6.conf.all.forwarding"
    ]);
    let set = |key: &str, value: &str| json!({"call": "sysctl.set", "ns": "host", "key": key, "value": value});
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "host", "name": "cnitestra0",
         "peer-ns": "container", "peer-name": "eth0"},
        set("net.ipv6.conf.cnitestra0.accept_ra", "2"),
        set("net.ipv6.conf.cnitestra0.accept_ra_rt_info_max_plen", "128"),
        set("net.ipv6.conf.cnitestra0.autoconf", "1"),
        set("net.ipv4.conf.cnitestra0.accept_redirects", "1"),
        set("net.ipv6.conf.all.accept_redirects", "1"),
        set("net.ipv6.conf.cnitestra0.accept_ra", "-1"),
        set("net.ipv6.conf.all.forwarding", "0"),
        set("net.ipv6.conf.cnitestra0.accept_ra_pinfo", "0")]});
    // The node's `all` default is 1 (accept_redirects): lower it first,
    // so that raising it back is a raise.
    world.node.sysctl("net.ipv6.conf.all.accept_redirects", "0");
    world
        .node
        .sysctl("net.ipv4.conf.default.accept_redirects", "0");
    world.node.sysctl("net.ipv6.conf.default.autoconf", "0");
    world.node.sysctl("net.ipv6.conf.all.forwarding", "1");
    let before_add = world.snapshot();
    let run = world.run("ADD", &policy_with(grant.clone()), &conf, &[]);
    let r = results(&run);
    assert!(r[0].get("ok").is_some(), "the veth: {r:?}");
    for i in 1..=6 {
        denied(
            &world,
            &run,
            i,
            "a plugin may only lower it",
            &format!("op {i}"),
        );
    }
    denied(
        &world,
        &run,
        7,
        "a plugin may only raise it",
        "forwarding off",
    );
    assert!(r[8].get("ok").is_some(), "lowering accept_ra_pinfo: {r:?}");
    // The host end takes no router advertisement from its container,
    // though the plugin never lowered it (the kernel's default is 1).
    let now = world
        .node
        .command("cat")
        .arg("/proc/sys/net/ipv6/conf/cnitestra0/accept_ra")
        .output()
        .expect("cat");
    assert_eq!(String::from_utf8_lossy(&now.stdout).trim(), "0");
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    assert_eq!(world.run("DEL", &policy_with(grant), &del, &[]).code, 0);
    support::assert_same(&before_add, &world.snapshot(), "after the DEL");
}

/// Issue 49, breach 5: a host route through the plugin's own veth, or a
/// host address's connected prefix, may not take traffic the node routes
/// elsewhere within the grant's `prefixes`: not more specific than (nor
/// as specific as) a connected subnet, another attachment's route or a
/// reject route, nor covering one, nor via an address that is not the
/// attachment's, also after a first step of its own (its own /32, an
/// address of its own). A route to its own address (ptp's), or in space
/// no route of the node's holds, is its to add; so is one more specific
/// than a route broader than the grant (the node's default or an
/// uplink's, an unreachable IPv6 default), or than an admin's gateway
/// route (a VPN's).
#[test]
fn breach5_no_host_route_takes_a_route_or_subnet_that_is_not_its_own() {
    let world = World::new("az5r");
    let node = &world.node;
    // Another attachment's route (other0 carries another container's
    // mark), an admin's blackhole, a broad route of the uplink's.
    node.ip(&["link", "set", "other0", "up"]);
    node.ip(&["route", "add", "10.88.7.0/24", "dev", "other0"]);
    // Network n's bridge up, as its ADDs leave it: its subnet's route is
    // there (no IPv6: a link-local address would still be tentative in
    // the snapshots).
    node.sysctl("net.ipv6.conf.cnishared0.disable_ipv6", "1");
    node.ip(&["link", "set", "cnishared0", "up"]);
    // A ULA LAN on cnitestpre, and an unreachable IPv6 default (broader
    // than the grant: it hides nothing of the plugin's).
    node.ip(&[
        "addr",
        "add",
        "fd12:3456::1/64",
        "dev",
        "cnitestpre",
        "nodad",
    ]);
    node.ip(&[
        "-6",
        "route",
        "add",
        "unreachable",
        "default",
        "metric",
        "4278198272",
    ]);
    node.ip(&["route", "add", "blackhole", "10.89.0.0/24"]);
    node.ip(&[
        "route",
        "add",
        "10.0.0.0/8",
        "via",
        "192.0.2.1",
        "dev",
        "uplink",
    ]);
    // An admin's gateway route inside the grant (a VPN's, say): a network
    // inside it takes that part, as with every runtime.
    node.ip(&[
        "route",
        "add",
        "10.100.0.0/16",
        "via",
        "192.0.2.1",
        "dev",
        "uplink",
    ]);
    let mut grant = wide();
    grant["host"]["prefixes"] = json!(["10.64.0.0/10", "fd00::/8"]);
    grant["static-ranges"] = json!(["10.88.7.5/32"]);
    let policy = policy_with(grant);
    let veth = json!({"call": "link.create-veth", "ns": "host", "name": "cnitestv0",
                      "peer-ns": "container", "peer-name": "eth0"});
    let up = json!({"call": "link.set-up", "ns": "host", "link": "cnitestv0", "up": true});
    let route = |dst: &str, extra: Value| {
        let mut r = json!({"call": "route.add", "ns": "host", "destination": dst,
                           "link": "cnitestv0"});
        for (k, v) in extra.as_object().expect("object") {
            r[k] = v.clone();
        }
        r
    };
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    let before = world.snapshot();
    for (op, why) in [
        // Inside the node's connected subnet on cnitestpre (10.77.0.0/24).
        (
            route("10.77.0.128/25", json!({})),
            "is more specific than the node's route to 10.77.0.0/24",
        ),
        (
            route("10.77.0.9/32", json!({})),
            "is more specific than the node's route to 10.77.0.0/24",
        ),
        // Over network n's own bridge subnet (cnishared0, 10.70.0.0/24).
        (
            route("10.70.0.0/25", json!({})),
            "is more specific than the node's route to 10.70.0.0/24",
        ),
        // Another attachment's route: more specific, as specific (a
        // better metric would win), covering it.
        (
            route("10.88.7.0/25", json!({})),
            "is more specific than the node's route to 10.88.7.0/24",
        ),
        (
            route("10.88.7.0/24", json!({"metric": 5})),
            "is as specific as the node's route to 10.88.7.0/24",
        ),
        (
            route("10.88.0.0/16", json!({})),
            "covers the node's route to 10.88.7.0/24",
        ),
        // An admin's blackhole.
        (
            route("10.89.0.5/32", json!({})),
            "is more specific than the node's reject route to 10.89.0.0/24",
        ),
        // Half of the IPv6 LAN.
        (
            route("fd12:3456::/65", json!({})),
            "is more specific than the node's route to fd12:3456::/64",
        ),
        // Via an address that is not the attachment's.
        (
            route("10.90.0.0/24", json!({"gateway": "10.77.0.5"})),
            "10.77.0.5 is not an address of this attachment",
        ),
    ] {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                          "ops": [veth, up, op]});
        let run = world.run("ADD", &policy, &conf, &[]);
        denied(&world, &run, 2, why, &op.to_string());
        assert_eq!(world.run("DEL", &policy, &del, &[]).code, 0);
        support::assert_same(&before, &world.snapshot(), &op.to_string());
    }
    // The same after a first step the check must not be blind to: an
    // address's connected prefix is a route too; a route to its own
    // address, or an address of its own, hides nothing broader.
    for (first, op, why) in [
        (
            json!({"call": "link.set-up", "ns": "host", "link": "cnitestv0", "up": true}),
            json!({"call": "address.add", "ns": "host", "link": "cnitestv0",
                   "prefix": "10.77.0.129/25"}),
            "connected prefix 10.77.0.128/25 is more specific than the node's route to 10.77.0.0/24",
        ),
        (
            route("10.88.7.5/32", json!({})),
            route("10.88.7.0/29", json!({})),
            "is more specific than the node's route to 10.88.7.0/24",
        ),
        (
            json!({"call": "address.add", "ns": "host", "link": "cnitestv0",
                   "prefix": "10.77.0.128/32"}),
            route("10.77.0.128/25", json!({})),
            "is more specific than the node's route to 10.77.0.0/24",
        ),
    ] {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                          "ops": [veth, up, first, op]});
        let run = world.run("ADD", &policy, &conf, &[]);
        denied(&world, &run, 3, why, &op.to_string());
        assert_eq!(world.run("DEL", &policy, &del, &[]).code, 0);
        support::assert_same(&before, &world.snapshot(), &op.to_string());
    }
    // Its own address (static-ranges vouch for it here; IPAM in real
    // life), space no route of the node's holds, and a route more
    // specific than only the uplink's 10.0.0.0/8 (broader than the
    // grant): the plugin's to add.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [veth, up,
        route("10.88.7.5/32", json!({})),
        route("10.91.0.0/24", json!({})),
        route("10.92.0.0/24", json!({"gateway": "10.88.7.5"})),
        route("fd77::/64", json!({})),
        {"call": "address.add", "ns": "host", "link": "cnitestv0", "prefix": "10.93.0.1/24"},
        {"call": "address.add", "ns": "host", "link": "cnitestv0", "prefix": "10.100.5.1/24"}]});
    let r = results(&world.run("ADD", &policy, &conf, &[]));
    assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    assert_eq!(world.run("DEL", &policy, &del, &[]).code, 0);
    support::assert_same(&before, &world.snapshot(), "after the allowed routes");
}

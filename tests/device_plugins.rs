//! The interface plugins without a Debian reference binary (`tap`,
//! `dummy`): kernel-state tests through the real libcni (tests/libcni/)
//! and an installed wasmcni bin dir, asserting what upstream
//! containernetworking/plugins produces (results, links, addresses,
//! routes, settings) in every spec version 0.3.0 – 1.0.0; their errors;
//! and their default-policy grants under hostile use (S2: a plugin holding
//! exactly that grant is denied everything just outside it, audited, with
//! no effect). `dummy` needs the `dummy` link kind: on a kernel without it
//! its tests rerun themselves in tests/vm/.

mod support;

use serde_json::{json, Value};
use support::cni::Drive;
use support::net::Net;
use support::world::{assert_denied, default_entry, policy_with, World};
use support::{Invoke, Netns};

const VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"];

/// The result's `ips` entry upstream gives for `addr` via `gw` on
/// interface 0, in `version`.
fn ip_entry(version: &str, addr: &str, gw: &str) -> Value {
    if version.starts_with("0.") {
        json!({"version": "4", "address": addr, "gateway": gw, "interface": 0})
    } else {
        json!({"address": addr, "gateway": gw, "interface": 0})
    }
}

/// The plain error text of a failed driver run (message and details).
fn error_text(d: &Drive) -> String {
    let e = d
        .cni_error()
        .unwrap_or_else(|| panic!("no CNI error: {d:?}"));
    format!(
        "{} {}",
        e["msg"].as_str().unwrap_or(""),
        e["details"].as_str().unwrap_or("")
    )
}

#[test]
fn tap_with_ipam_every_option_through_libcni() {
    for version in VERSIONS {
        let net = Net::new("tap3");
        net.ctr.ip(&["link", "add", "br0", "type", "bridge"]);
        let conf = json!({
            "type": "tap", "mtu": 1400, "mac": "0a:58:0a:3c:00:05", "multiQueue": true,
            "owner": 4242, "group": 4343, "bridge": "br0",
            "dns": {"nameservers": ["10.1.1.1"], "search": ["example.test"]},
            "ipam": {"type": "host-local", "dataDir": "@data", "subnet": "10.60.0.0/24",
                     "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.0.2.0/24", "gw": "10.60.0.254"}]}
        });
        let list = net.conflist(version, &conf);
        let add = net.call("add", &list, &net.ctr.path, "", "");
        assert_eq!(add.code, 0, "{version} ADD: {add:?}");
        let r = add.json();
        assert_eq!(r["cniVersion"], version, "{r}");
        assert_eq!(
            r["interfaces"],
            json!([{"name": "eth0", "mac": "0a:58:0a:3c:00:05",
                    "sandbox": net.ctr.path.display().to_string()}]),
            "{version}: {r}"
        );
        assert_eq!(
            r["ips"],
            json!([ip_entry(version, "10.60.0.2/24", "10.60.0.1")]),
            "{version}: {r}"
        );
        assert_eq!(
            r["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "192.0.2.0/24", "gw": "10.60.0.254"}]),
            "{version}: {r}"
        );
        assert_eq!(
            r["dns"],
            json!({"nameservers": ["10.1.1.1"], "search": ["example.test"]}),
            "{version}: {r}"
        );
        let l = net.eth0();
        assert_eq!(l["mtu"], 1400, "{l}");
        assert_eq!(l["address"], "0a:58:0a:3c:00:05", "{l}");
        assert_eq!(l["master"], "br0", "{l}");
        assert!(l["flags"].as_array().unwrap().contains(&json!("UP")), "{l}");
        assert_eq!(l["linkinfo"]["info_kind"], "tun", "{l}");
        let d = &l["linkinfo"]["info_data"];
        assert_eq!(d["type"], "tap", "{l}");
        assert_eq!(d["multi_queue"], true, "{l}");
        assert_eq!(d["persist"], true, "{l}");
        assert_eq!(d["pi"], false, "{l}");
        assert_eq!(d["user"], 4242, "{l}");
        assert_eq!(d["group"], 4343, "{l}");
        assert_eq!(net.eth0_v4(), vec!["10.60.0.2/24".to_string()]);
        let routes = net.routes_v4();
        for want in [
            "default via 10.60.0.1 dev eth0",
            "192.0.2.0/24 via 10.60.0.254 dev eth0",
            "10.60.0.0/24 via - dev eth0",
        ] {
            assert!(routes.contains(&want.to_string()), "{want}: {routes:?}");
        }
        let mut arp = String::new();
        std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.ctr.name,
                "cat",
                "/proc/sys/net/ipv4/conf/eth0/arp_notify",
            ])
            .output()
            .map(|o| arp = String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap();
        assert_eq!(arp.trim(), "1", "arp_notify");
        assert_eq!(net.reservations(), vec!["10.60.0.2".to_string()]);
        if version != "0.3.0" && version != "0.3.1" {
            let check = net.call("check", &list, &net.ctr.path, "", "");
            assert_eq!(check.code, 0, "{version} CHECK: {check:?}");
            // CHECK sees a route gone.
            net.ctr.ip(&["route", "del", "192.0.2.0/24"]);
            let check = net.call("check", &list, &net.ctr.path, "", "");
            assert_ne!(
                check.code, 0,
                "{version} CHECK without the route: {check:?}"
            );
            assert!(error_text(&check).contains("192.0.2.0/24"), "{check:?}");
        }
        net.del_is_idempotent(&list, "", "");
        // The bridge the tap was enslaved to is the container's, untouched.
        assert!(net.ctr.ip(&["link", "show", "br0"]).contains("br0"));
    }
}

#[test]
fn tap_layer2_only_without_ipam() {
    for version in VERSIONS {
        let net = Net::new("tap2");
        let list = net.conflist(version, &json!({"type": "tap"}));
        let add = net.call("add", &list, &net.ctr.path, "", "");
        assert_eq!(add.code, 0, "{version} ADD: {add:?}");
        let r = add.json();
        let l = net.eth0();
        assert_eq!(
            r["interfaces"],
            json!([{"name": "eth0", "mac": l["address"],
                    "sandbox": net.ctr.path.display().to_string()}]),
            "{version}: {r}"
        );
        assert!(r.get("ips").is_none_or(|v| v == &json!([])), "{r}");
        assert_eq!(l["linkinfo"]["info_data"]["type"], "tap", "{l}");
        assert_eq!(l["linkinfo"]["info_data"]["multi_queue"], false, "{l}");
        assert!(l["linkinfo"]["info_data"].get("user").is_none(), "{l}");
        assert!(l["linkinfo"]["info_data"].get("group").is_none(), "{l}");
        assert_eq!(l["mtu"], 1500, "{l}");
        assert!(l["flags"].as_array().unwrap().contains(&json!("UP")), "{l}");
        assert!(net.eth0_v4().is_empty());
        if version == "1.0.0" || version == "0.4.0" {
            let check = net.call("check", &list, &net.ctr.path, "", "");
            assert_eq!(check.code, 0, "{version} CHECK: {check:?}");
        }
        net.del_is_idempotent(&list, "", "");
    }
}

#[test]
fn tap_mac_from_args_and_runtime_config_win_over_the_config() {
    let net = Net::new("tapm");
    let conf = json!({"type": "tap", "mac": "0a:00:00:00:00:01"});
    let list = net.conflist("1.0.0", &conf);
    let add = net.call(
        "add",
        &list,
        &net.ctr.path,
        "IgnoreUnknown=1;MAC=0a:00:00:00:00:02",
        "",
    );
    assert_eq!(add.code, 0, "{add:?}");
    assert_eq!(net.eth0()["address"], "0a:00:00:00:00:02");
    net.del_is_idempotent(&list, "", "");
    let conf = json!({"type": "tap", "mac": "0a:00:00:00:00:01", "capabilities": {"mac": true}});
    let list = net.conflist("1.0.0", &conf);
    let add = net.call(
        "add",
        &list,
        &net.ctr.path,
        "IgnoreUnknown=1;MAC=0a:00:00:00:00:02",
        r#"{"mac": "0a:00:00:00:00:03"}"#,
    );
    assert_eq!(add.code, 0, "{add:?}");
    assert_eq!(net.eth0()["address"], "0a:00:00:00:00:03");
    assert_eq!(add.json()["interfaces"][0]["mac"], "0a:00:00:00:00:03");
    net.del_is_idempotent(&list, "", "");
}

/// A direct invocation of `plugin` with `conf` in `ctr`, the node as host.
fn direct(
    plugin: &str,
    command: &str,
    node: &Netns,
    ctr: &Netns,
    conf: &Value,
    env: &[(String, String)],
) -> support::Run {
    let stdin = conf.to_string().into_bytes();
    let mut inv = Invoke::wasmcni_run(plugin, &stdin)
        .cni(command, &ctr.path, "eth0")
        .in_netns(node);
    for (k, v) in env {
        inv = inv.env(k, v);
    }
    inv.run()
}

#[test]
fn tap_bad_input_is_a_cni_error_naming_the_field_and_leaves_nothing() {
    let net = Net::new("tape");
    let before = net.ctr.snapshot();
    let base = |extra: Value| {
        let mut c = json!({"cniVersion": "1.0.0", "name": "devnet", "type": "tap"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    for (extra, code, needle) in [
        (json!({"mac": "zz:00:00:00:00:01"}), 7, "\"mac\""),
        (json!({"mac": "0a:00:00:00:01"}), 7, "\"mac\""),
        (json!({"mtu": -1}), 7, "\"mtu\""),
        (
            json!({"selinuxContext": "system_u:object_r:container_t:s0"}),
            2,
            "selinuxContext",
        ),
        (json!({"bridge": "nobr0"}), 999, "nobr0"),
        (json!({"mtu": 70000}), 999, "tap"),
        (json!({"owner": "root"}), 999, "owner"),
        (json!({"multiQueue": "yes"}), 999, "multiQueue"),
        (
            json!({"ipam": {"type": "host-local", "dataDir": "/nonexistent-root/x", "subnet": "10.60.0.0/24"}}),
            999,
            "IPAM",
        ),
    ] {
        let run = direct(
            "tap",
            "ADD",
            &net.node,
            &net.ctr,
            &base(extra.clone()),
            &net.env,
        );
        run.assert_cni_error(code, needle);
        support::assert_same(
            &before,
            &net.ctr.snapshot(),
            &format!("{extra}: container changed"),
        );
    }
}

/// Runs `test` in tests/vm/ when this kernel has no dummy links.
fn on_a_kernel_with_dummy(name: &str) -> bool {
    support::require_root();
    if support::vm::kernel_has("dummy") {
        return true;
    }
    assert!(!support::vm::inside(), "the VM's kernel lacks dummy links");
    support::vm::rerun_this_test(name);
    false
}

#[test]
fn dummy_through_libcni() {
    if !on_a_kernel_with_dummy("dummy_through_libcni") {
        return;
    }
    for version in VERSIONS {
        let net = Net::new("dum");
        let conf = json!({
            "type": "dummy",
            "ipam": {"type": "host-local", "dataDir": "@data",
                     "ranges": [[{"subnet": "10.61.0.0/24"}], [{"subnet": "fd61::/64"}]],
                     "routes": [{"dst": "192.0.2.0/24"}]}
        });
        let list = net.conflist(version, &conf);
        let add = net.call("add", &list, &net.ctr.path, "", "");
        assert_eq!(add.code, 0, "{version} ADD: {add:?}");
        let r = add.json();
        let l = net.eth0();
        assert_eq!(l["linkinfo"]["info_kind"], "dummy", "{l}");
        assert!(l["flags"].as_array().unwrap().contains(&json!("UP")), "{l}");
        assert_eq!(
            r["interfaces"],
            json!([{"name": "eth0", "mac": l["address"],
                    "sandbox": net.ctr.path.display().to_string()}]),
            "{version}: {r}"
        );
        let v6 = if version.starts_with("0.") {
            json!({"version": "6", "address": "fd61::2/64", "gateway": "fd61::1", "interface": 0})
        } else {
            json!({"address": "fd61::2/64", "gateway": "fd61::1", "interface": 0})
        };
        assert_eq!(
            r["ips"],
            json!([ip_entry(version, "10.61.0.2/24", "10.61.0.1"), v6]),
            "{version}: {r}"
        );
        assert_eq!(r["routes"], json!([{"dst": "192.0.2.0/24"}]), "{r}");
        assert_eq!(net.eth0_v4(), vec!["10.61.0.2/24".to_string()]);
        let v6 = net.ctr.ip(&["-6", "addr", "show", "dev", "eth0"]);
        assert!(v6.contains("fd61::2/64"), "{v6}");
        let routes = net.routes_v4();
        assert!(
            routes.contains(&"192.0.2.0/24 via 10.61.0.1 dev eth0".to_string()),
            "{routes:?}"
        );
        assert_eq!(net.reservations().len(), 2, "{:?}", net.reservations());
        if version == "1.0.0" || version == "0.4.0" {
            let check = net.call("check", &list, &net.ctr.path, "", "");
            assert_eq!(check.code, 0, "{version} CHECK: {check:?}");
            net.ctr.ip(&["addr", "del", "10.61.0.2/24", "dev", "eth0"]);
            let check = net.call("check", &list, &net.ctr.path, "", "");
            assert_ne!(
                check.code, 0,
                "{version} CHECK without the address: {check:?}"
            );
            assert!(error_text(&check).contains("10.61.0.2/24"), "{check:?}");
        }
        net.del_is_idempotent(&list, "", "");
    }
}

#[test]
fn dummy_needs_ipam_and_a_failed_add_leaves_nothing() {
    if !on_a_kernel_with_dummy("dummy_needs_ipam_and_a_failed_add_leaves_nothing") {
        return;
    }
    let net = Net::new("dume");
    let before = net.ctr.snapshot();
    let conf = json!({"cniVersion": "1.0.0", "name": "devnet", "type": "dummy"});
    direct("dummy", "ADD", &net.node, &net.ctr, &conf, &net.env).assert_cni_error(7, "\"ipam\"");
    // IPAM fails after the link exists: the journal removes it.
    let conf = json!({"cniVersion": "1.0.0", "name": "devnet", "type": "dummy",
                      "ipam": {"type": "host-local", "dataDir": "/nonexistent-root/x", "subnet": "10.61.0.0/24"}});
    let run = direct("dummy", "ADD", &net.node, &net.ctr, &conf, &net.env);
    assert_ne!(run.code, 0, "{run:?}");
    support::assert_same(&before, &net.ctr.snapshot(), "a failed ADD left something");
}

/// S2 for the default grants of tap and dummy: a plugin holding exactly
/// that grant (the scripted fixture) is denied every operation just
/// outside it — another link kind, the host namespace, moving links,
/// other settings — with an audit record and no change anywhere.
#[test]
fn s2_tap_and_dummy_default_grants_deny_everything_outside_them() {
    let host_tap = json!({"call": "link.create-tap", "ns": "host", "name": "cnitestt1"});
    let host_dummy = json!({"call": "link.create-dummy", "ns": "host", "name": "cnitestd1"});
    let veth = json!({"call": "link.create-veth", "ns": "container", "name": "eth9", "peer-ns": "host", "peer-name": "cnitestv1"});
    let bridge = json!({"call": "link.create-bridge", "ns": "container", "name": "br9"});
    let move_out =
        json!({"call": "link.move-to", "ns": "host", "link": "uplink", "target": "container"});
    let fwd = json!({"call": "sysctl.set", "ns": "container", "key": "net.ipv4.ip_forward", "value": "1"});
    let host_addr =
        json!({"call": "address.add", "ns": "host", "link": "uplink", "prefix": "10.9.9.9/32"});
    let host_down = json!({"call": "link.set-up", "ns": "host", "link": "uplink", "up": false});
    let cases = [
        (
            "tap",
            json!({"call": "link.create-dummy", "ns": "container", "name": "eth9"}),
        ),
        ("tap", host_tap.clone()),
        ("tap", veth.clone()),
        ("tap", bridge.clone()),
        ("tap", move_out.clone()),
        ("tap", fwd.clone()),
        ("tap", host_addr.clone()),
        ("tap", host_down.clone()),
        (
            "dummy",
            json!({"call": "link.create-tap", "ns": "container", "name": "eth9"}),
        ),
        ("dummy", host_dummy),
        ("dummy", host_tap),
        ("dummy", veth),
        ("dummy", bridge),
        ("dummy", move_out),
        ("dummy", fwd),
        (
            "dummy",
            json!({"call": "sysctl.set", "ns": "container", "key": "net.ipv4.conf.lo.arp_notify", "value": "1"}),
        ),
        ("dummy", host_addr),
        ("dummy", host_down),
    ];
    let world = World::new("s2dev");
    for (plugin, op) in &cases {
        assert_denied(&world, plugin, &default_entry(plugin), op, |r| {
            r["call"] == op["call"]
                // No right at all in the host namespace: its handle is
                // refused already.
                || (["ns", "peer-ns", "target"].iter().any(|k| op[*k] == "host")
                    && r["call"].as_str().is_some_and(|c| c.starts_with("netns.")))
        });
    }
    // Inside the grant: tap makes a tap in the container (undone: exit 1).
    let before = world.snapshot();
    let run = world.run(
        "ADD",
        &policy_with(default_entry("tap")),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1,
                "ops": [{"call": "link.create-tap", "ns": "container", "name": "eth9"}]}),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.json()["results"][0].get("ok").is_some(), "{run:?}");
    support::assert_same(&before, &world.snapshot(), "tap's own tap was not undone");
}

//! Result conversion between every spec version, against JSON fixtures in
//! testdata/ (written in libcni's print format: four-space indent, libcni's
//! key order, libcni's omitempty).
//!
//! Fixtures: `result-<ver>.json` (loopback) and `result-bridge-<ver>.json`
//! for every version, each the libcni down-conversion of the 1.1.0 one;
//! `*-up-from-<0.2|0.4>-as-<ver>.json` for what up-conversion from a
//! poorer version yields (the test swaps in the target `cniVersion`).

use std::path::PathBuf;

use guest_sdk::cni::{Cidr, CniResult, Interface, IpConfig, Route};
use serde_json::{json, Value};

const VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];
const NAMES: [&str; 2] = ["", "-bridge"];

fn family(v: &str) -> u8 {
    match v {
        "0.1.0" | "0.2.0" => 0,
        "0.3.0" | "0.3.1" | "0.4.0" => 1,
        _ => 2,
    }
}

fn read(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(file);
    match std::fs::read_to_string(&path) {
        Ok(s) => s.trim_end().to_string(),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

fn fixture(name: &str, version: &str) -> String {
    read(&format!("result{name}-{version}.json"))
}

/// What converting a `src` fixture to `dst` must print.
fn expected(name: &str, src: &str, dst: &str) -> String {
    if family(dst) <= family(src) {
        return fixture(name, dst);
    }
    let from = if family(src) == 0 { "0.2" } else { "0.4" };
    let as_ver = if family(dst) == 1 { "0.4.0" } else { "1.1.0" };
    let text = read(&format!("result{name}-up-from-{from}-as-{as_ver}.json"));
    let old = format!("\"cniVersion\": \"{as_ver}\"");
    let new = format!("\"cniVersion\": \"{dst}\"");
    assert!(text.contains(&old));
    text.replacen(&old, &new, 1)
}

fn parse(text: &str) -> Value {
    match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => panic!("bad fixture JSON: {e}\n{text}"),
    }
}

fn load(name: &str, version: &str) -> CniResult {
    match CniResult::from_json(&parse(&fixture(name, version)), version) {
        Ok(r) => r,
        Err(e) => panic!("fixture result{name}-{version}: {e}"),
    }
}

fn print(r: &CniResult, version: &str) -> String {
    match r.to_json_string(version) {
        Ok(s) => s,
        Err(e) => panic!("to_json_string({version}): {e}"),
    }
}

#[test]
fn every_fixture_converts_to_every_version_exactly() {
    let mut checked = 0;
    for name in NAMES {
        for src in VERSIONS {
            let result = load(name, src);
            for dst in VERSIONS {
                let want = expected(name, src, dst);
                let got = print(&result, dst);
                assert_eq!(got, want, "result{name}: {src} -> {dst} (text)");
                let value = result.to_json(dst).ok();
                assert_eq!(
                    value,
                    Some(parse(&want)),
                    "result{name}: {src} -> {dst} (value)"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 7 * 7);
}

#[test]
fn converting_there_and_back_gives_the_expected_fixture() {
    for name in NAMES {
        for src in VERSIONS {
            for via in VERSIONS {
                let there = load(name, src).to_json(via).ok();
                let back = there.and_then(|v| CniResult::from_json(&v, via).ok());
                let text = back.map(|r| print(&r, src));
                // Whatever the poorer of the two versions lost stays lost.
                let poorer = if family(via) < family(src) { via } else { src };
                assert_eq!(
                    text.as_deref(),
                    Some(expected(name, poorer, src).as_str()),
                    "result{name}: {src} -> {via} -> {src}"
                );
            }
        }
    }
}

#[test]
fn fixtures_parse_to_the_same_model_within_a_family() {
    for name in NAMES {
        assert_eq!(load(name, "0.1.0"), load(name, "0.2.0"));
        assert_eq!(load(name, "0.3.0"), load(name, "0.4.0"));
        assert_eq!(load(name, "0.3.1"), load(name, "0.4.0"));
        assert_eq!(load(name, "1.0.0"), load(name, "1.1.0"));
    }
}

fn cidr(s: &str) -> Cidr {
    match Cidr::parse(s) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn bridge_model_has_expected_values() {
    let r = load("-bridge", "1.1.0");
    assert_eq!(r.interfaces.len(), 3);
    assert_eq!(r.interfaces[2].name, "eth0");
    assert_eq!(r.interfaces[2].mtu, Some(1450));
    assert_eq!(r.interfaces[2].sandbox, "/var/run/netns/cni-5f6c2a1e");
    assert_eq!(r.ips.len(), 3);
    assert_eq!(r.ips[0].address, cidr("10.22.0.5/16"));
    assert_eq!(
        r.ips[0].gateway.map(|g| g.to_string()).as_deref(),
        Some("10.22.0.1")
    );
    assert_eq!(r.ips[0].interface, Some(2));
    assert_eq!(r.routes[1].mtu, Some(1400));
    assert_eq!(r.routes[1].advmss, Some(1360));
    assert_eq!(r.routes[1].table, Some(100));
    assert_eq!(r.routes[1].scope, Some(0));
    assert_eq!(r.routes[3].scope, Some(253));
    assert_eq!(r.routes[3].gw, None);
    assert_eq!(r.dns.domain, "cluster.local");
    assert_eq!(r.dns.nameservers, ["10.22.0.10", "fd00:10:22::a"]);
}

#[test]
fn v02_keeps_only_the_first_address_of_each_family() {
    let r = load("-bridge", "1.1.0");
    let v = r.to_json("0.2.0").ok();
    assert_eq!(
        v.as_ref().and_then(|v| v.pointer("/ip4/ip")),
        Some(&json!("10.22.0.5/16"))
    );
    // 10.23.0.5/24 (the second IPv4 address) is gone, as in libcni.
    assert!(!v
        .map(|v| v.to_string())
        .unwrap_or_default()
        .contains("10.23.0.5"));
}

#[test]
fn v02_without_addresses_is_an_error_but_later_versions_are_fine() {
    let mut r = CniResult::default();
    r.interfaces.push(Interface::new("dummy0"));
    for v in ["0.1.0", "0.2.0", ""] {
        let e = r.to_json(v).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(999), "version {v:?}");
        assert!(e.is_some_and(|e| e.msg.contains("no valid IP addresses")));
    }
    assert_eq!(
        r.to_json("0.4.0").ok(),
        Some(json!({"cniVersion": "0.4.0", "interfaces": [{"name": "dummy0"}], "dns": {}}))
    );
    assert_eq!(
        r.to_json("1.0.0").ok(),
        Some(json!({"cniVersion": "1.0.0", "interfaces": [{"name": "dummy0"}]}))
    );
    // Only an IPv6 address: ip6 alone, v4 routes dropped.
    let mut r = CniResult::default();
    r.ips.push(IpConfig::new(cidr("fd00::5/64")));
    r.routes.push(Route::new(cidr("0.0.0.0/0")));
    r.routes.push(Route::new(cidr("::/0")));
    assert_eq!(
        r.to_json("0.2.0").ok(),
        Some(
            json!({"cniVersion": "0.2.0", "ip6": {"ip": "fd00::5/64", "routes": [{"dst": "::/0"}]}, "dns": {}})
        )
    );
}

#[test]
fn v11_fields_round_trip_and_are_dropped_before_1_0() {
    let mut r = CniResult::default();
    let mut vhost = Interface::new("net1");
    vhost.socket_path = Some("/var/run/vhost/net1.sock".into());
    vhost.pci_id = Some("0000:03:00.1".into());
    vhost.mtu = Some(9000);
    r.interfaces.push(vhost);
    let mut ip = IpConfig::new(cidr("192.0.2.7/24"));
    ip.interface = Some(0);
    r.ips.push(ip);

    let v11 = r.to_json("1.1.0").ok();
    assert_eq!(
        v11,
        Some(json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"mtu": 9000, "name": "net1", "pciID": "0000:03:00.1",
                            "socketPath": "/var/run/vhost/net1.sock"}],
            "ips": [{"address": "192.0.2.7/24", "interface": 0}]
        }))
    );
    let back = v11.and_then(|v| CniResult::from_json(&v, "1.1.0").ok());
    assert_eq!(back.as_ref(), Some(&r));
    assert_eq!(
        r.to_json("0.4.0").ok(),
        Some(json!({
            "cniVersion": "0.4.0",
            "interfaces": [{"name": "net1"}],
            "ips": [{"version": "4", "interface": 0, "address": "192.0.2.7/24"}],
            "dns": {}
        }))
    );
    // 0.4.0 input with 1.1-only interface fields: ignored, as Go does.
    let v04 =
        json!({"cniVersion": "0.4.0", "interfaces": [{"name": "a", "mtu": 1500, "pciID": "x"}]});
    let parsed = CniResult::from_json(&v04, "0.4.0").ok();
    assert_eq!(
        parsed.map(|p| p.interfaces),
        Some(vec![Interface::new("a")])
    );
}

#[test]
fn go_omitempty_rules_for_zero_values() {
    let mut r = CniResult::default();
    let mut route = Route::new(cidr("10.0.0.0/8"));
    route.mtu = Some(0);
    route.advmss = Some(0);
    route.priority = Some(0);
    route.table = Some(0);
    route.scope = Some(0);
    r.routes.push(route);
    let mut i = Interface::new("");
    i.mtu = Some(0);
    i.socket_path = Some(String::new());
    r.interfaces.push(i);
    assert_eq!(
        r.to_json_string("1.0.0").ok().as_deref(),
        Some(
            "{\n    \"cniVersion\": \"1.0.0\",\n    \"interfaces\": [\n        {\n            \"name\": \"\"\n        }\n    ],\n    \"routes\": [\n        {\n            \"dst\": \"10.0.0.0/8\",\n            \"scope\": 0,\n            \"table\": 0\n        }\n    ]\n}"
        )
    );
    assert_eq!(
        r.to_json("0.3.1").ok(),
        Some(json!({"cniVersion": "0.3.1", "interfaces": [{"name": ""}],
                    "routes": [{"dst": "10.0.0.0/8", "table": 0, "scope": 0}], "dns": {}}))
    );
}

#[test]
fn result_cni_version_handling() {
    let body = json!({"ips": [{"address": "10.1.2.3/24"}]});
    // Missing cniVersion: taken to be the requested one.
    assert!(CniResult::from_json(&body, "0.4.0").is_ok());
    assert!(CniResult::from_json(&body, "1.0.0").is_ok());
    // Same family, other version: accepted (libcni's creator does too).
    let v031 = json!({"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.1.2.3/24"}]});
    assert!(CniResult::from_json(&v031, "0.4.0").is_ok());
    // Other family: code 1, libcni's message.
    let e = CniResult::from_json(&v031, "1.0.0").err();
    assert_eq!(e.as_ref().map(|e| e.code), Some(1));
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is \"0.3.1\"")
    );
    // Unknown requested version: code 1; empty means 0.1.0.
    assert_eq!(
        CniResult::from_json(&body, "0.5.0").err().map(|e| e.code),
        Some(1)
    );
    assert_eq!(
        CniResult::from_json(&body, "1.0").err().map(|e| e.code),
        Some(1)
    );
    let v02 = json!({"ip4": {"ip": "10.1.2.3/24"}});
    let r = CniResult::from_json(&v02, "").ok();
    assert_eq!(r.as_ref().map(|r| r.ips.len()), Some(1));
    assert_eq!(
        r.and_then(|r| r.to_json("").ok()),
        Some(json!({"cniVersion": "0.1.0", "ip4": {"ip": "10.1.2.3/24"}, "dns": {}}))
    );
    assert_eq!(
        CniResult::default().to_json("2.0.0").err().map(|e| e.code),
        Some(1)
    );
}

#[test]
fn malformed_results_are_decode_errors_naming_the_field() {
    let cases: [(Value, &str, &str); 8] = [
        (json!([]), "1.0.0", "expected a JSON object, got array"),
        (
            json!({"cniVersion": 1}),
            "1.0.0",
            "field \"cniVersion\" must be a string",
        ),
        (
            json!({"ips": [{"address": "10.0.0.1/8"}, {"address": "10.0.0.1"}]}),
            "1.0.0",
            "field \"ips[1].address\": invalid CIDR address \"10.0.0.1\"",
        ),
        (
            json!({"ips": [{"address": "10.0.0.1/8", "gateway": "nope"}]}),
            "0.4.0",
            "field \"ips[0].gateway\": invalid IP address \"nope\"",
        ),
        (
            json!({"routes": [{"dst": "::/0", "mtu": -1}]}),
            "1.1.0",
            "field \"routes[0].mtu\"",
        ),
        (
            json!({"interfaces": [null]}),
            "1.0.0",
            "field \"interfaces[0]\"",
        ),
        (
            json!({"ip4": {"gateway": "10.0.0.1"}}),
            "0.2.0",
            "field \"ip4\": missing field `ip`",
        ),
        (
            json!({"dns": {"nameservers": "8.8.8.8"}}),
            "0.3.0",
            "field \"dns.nameservers\"",
        ),
    ];
    for (value, version, want) in cases {
        let e = CniResult::from_json(&value, version).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(6), "{value}");
        let msg = e.map(|e| e.msg).unwrap_or_default();
        assert!(
            msg.contains(want),
            "{value}: {msg:?} should contain {want:?}"
        );
    }
    assert_eq!(
        CniResult::from_slice(b"{", "1.0.0").err().map(|e| e.code),
        Some(6)
    );
}

#[test]
fn addresses_are_canonical_and_null_or_empty_means_absent() {
    let v = json!({
        "cniVersion": "1.0.0",
        "interfaces": null,
        "ips": [{"address": "2001:DB8:0::5/64", "gateway": "", "interface": null},
                {"address": "::ffff:192.0.2.1/120", "gateway": "::ffff:192.0.2.254"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": null, "mtu": null}],
        "dns": null
    });
    let r = CniResult::from_json(&v, "1.0.0").ok();
    assert_eq!(
        r.and_then(|r| r.to_json("0.4.0").ok()),
        Some(json!({
            "cniVersion": "0.4.0",
            "ips": [{"version": "6", "address": "2001:db8::5/64"},
                    {"version": "4", "address": "192.0.2.1/24", "gateway": "192.0.2.254"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        }))
    );
}

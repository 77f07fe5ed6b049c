//! loopback through wasmcni against the reference `loopback`
//! (/usr/lib/cni/loopback): same result JSON and the same kernel state after
//! ADD, CHECK, DEL, DEL, for every spec version the reference speaks, each
//! run in fresh network namespaces.

mod support;

use serde_json::Value;
use support::{loopback_conf, Invoke, Netns, Run, REFERENCE_DIR};

const REFERENCE_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"];

fn reference() -> String {
    format!("{REFERENCE_DIR}/loopback")
}

/// A result as a runtime reads it: the namespace path replaced by a
/// placeholder, an empty `dns` the same as none, and the 0.3/0.4 `version`
/// of an IP left out (it is derived from the address; the reference omits
/// it, the spec and wasmcni write it).
fn normalized(v: &Value, netns: &Netns) -> Value {
    let s = serde_json::to_string(v).unwrap();
    let path = serde_json::to_string(&netns.path.display().to_string()).unwrap();
    let mut v: Value = serde_json::from_str(&s.replace(&path, "\"<netns>\"")).unwrap();
    let m = v.as_object_mut().unwrap();
    if m.get("dns")
        .is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty()))
    {
        m.remove("dns");
    }
    if let Some(ips) = m.get_mut("ips").and_then(|i| i.as_array_mut()) {
        for ip in ips {
            ip.as_object_mut().unwrap().remove("version");
        }
    }
    v
}

/// What a 0.1.0/0.2.0 result must be, from the reference's answer.
///
/// The reference (Debian's plugins 1.1.1, libcni 1.1) prints a 1.x-shaped
/// result (`interfaces`, `ips`) and only relabels its `cniVersion`, which a
/// 0.2.0 client cannot read. wasmcni converts as the spec and libcni's
/// converters do: the first IPv4 and IPv6 address become `ip4` and `ip6`.
fn as_spec_020(reference: &Value, version: &str) -> Value {
    let first = |v4: bool| {
        reference["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["address"].as_str().unwrap())
            .find(|a| a.contains('.') == v4)
    };
    let mut expected = serde_json::json!({"cniVersion": version});
    if let Some(a) = first(true) {
        expected["ip4"] = serde_json::json!({"ip": a});
    }
    if let Some(a) = first(false) {
        expected["ip6"] = serde_json::json!({"ip": a});
    }
    expected
}

/// Runs `command` with `conf` through wasmcni in `ours` and through the
/// reference in `theirs`.
fn both(command: &str, conf: &[u8], ours: &Netns, theirs: &Netns) -> (Run, Run) {
    let a = Invoke::wasmcni_as("loopback", conf)
        .cni(command, &ours.path, "lo")
        .run();
    let b = Invoke::exe(reference(), conf)
        .cni(command, &theirs.path, "lo")
        .run();
    (a, b)
}

#[test]
fn add_check_del_del_match_the_reference_in_every_version() {
    for version in REFERENCE_VERSIONS {
        let ours = Netns::new("lo-ours");
        let theirs = Netns::new("lo-ref");
        assert_eq!(
            ours.snapshot(),
            theirs.snapshot(),
            "fresh namespaces differ"
        );
        assert!(!ours.lo_up());
        let conf = loopback_conf(version);

        let (a, b) = both("ADD", &conf, &ours, &theirs);
        assert_eq!(a.code, 0, "{version} ADD: {a:?}");
        assert_eq!(b.code, 0, "{version} reference ADD: {b:?}");
        if version.starts_with("0.1") || version.starts_with("0.2") {
            assert_eq!(
                normalized(&a.json(), &ours),
                as_spec_020(&b.json(), version),
                "{version}: ADD result"
            );
        } else {
            assert_eq!(
                normalized(&a.json(), &ours),
                normalized(&b.json(), &theirs),
                "{version}: ADD results differ"
            );
        }
        assert!(ours.lo_up(), "{version}: lo not up after ADD");
        assert_eq!(
            ours.snapshot(),
            theirs.snapshot(),
            "{version}: kernel state differs after ADD"
        );

        let (a, b) = both("CHECK", &conf, &ours, &theirs);
        assert_eq!(
            a.code, b.code,
            "{version} CHECK exit codes differ: ours {a:?} reference {b:?}"
        );
        if b.code != 0 {
            // Before 0.4.0 CHECK is refused; the code must match.
            assert_eq!(
                a.json()["code"],
                b.json()["code"],
                "{version} CHECK error codes differ"
            );
        }

        for round in 1..=2 {
            let (a, b) = both("DEL", &conf, &ours, &theirs);
            assert_eq!(a.code, 0, "{version} DEL #{round}: {a:?}");
            assert_eq!(b.code, 0, "{version} reference DEL #{round}: {b:?}");
            assert_eq!(a.stdout.trim(), b.stdout.trim());
            assert!(!ours.lo_up(), "{version}: lo still up after DEL #{round}");
            assert_eq!(
                ours.snapshot(),
                theirs.snapshot(),
                "{version}: kernel state differs after DEL #{round}"
            );
        }
    }
}

#[test]
fn check_fails_when_lo_is_down_like_the_reference() {
    let ours = Netns::new("lo-chk");
    let theirs = Netns::new("lo-chk-ref");
    let conf = loopback_conf("1.0.0");
    let (a, b) = both("CHECK", &conf, &ours, &theirs);
    assert_ne!(a.code, 0);
    assert_eq!(a.json()["code"], b.json()["code"]);
    assert_eq!(a.json()["msg"], b.json()["msg"]);
}

#[test]
fn chained_add_passes_prev_result_through() {
    let ours = Netns::new("lo-prev");
    let theirs = Netns::new("lo-prev-ref");
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let ips = if version == "1.0.0" {
            r#"[{"address":"10.1.2.3/24","gateway":"10.1.2.1","interface":0}]"#
        } else {
            r#"[{"version":"4","address":"10.1.2.3/24","gateway":"10.1.2.1","interface":0}]"#
        };
        let conf = format!(
            r#"{{"cniVersion":"{version}","name":"n","type":"loopback","prevResult":{{"cniVersion":"{version}","interfaces":[{{"name":"eth0","mac":"0a:58:0a:01:02:03","sandbox":"/x"}}],"ips":{ips},"routes":[{{"dst":"0.0.0.0/0"}}],"dns":{{"nameservers":["10.1.2.1"]}}}}}}"#
        );
        let (a, b) = both("ADD", conf.as_bytes(), &ours, &theirs);
        assert_eq!((a.code, b.code), (0, 0), "{version}: {a:?} {b:?}");
        assert_eq!(a.json(), b.json(), "{version}: chained results differ");
    }
}

#[test]
fn del_succeeds_when_the_netns_is_gone_or_not_given() {
    let conf = loopback_conf("1.0.0");
    let gone = std::path::Path::new("/run/netns/wcni-never-existed");
    let a = Invoke::wasmcni_as("loopback", &conf)
        .cni("DEL", gone, "lo")
        .run();
    let b = Invoke::exe(reference(), &conf).cni("DEL", gone, "lo").run();
    assert_eq!((a.code, b.code), (0, 0), "{a:?} {b:?}");
    let a = Invoke::wasmcni_as("loopback", &conf)
        .cni("DEL", std::path::Path::new(""), "lo")
        .run();
    assert_eq!(a.code, 0, "{a:?}");
}

#[test]
fn version_lists_every_version_the_reference_does_and_1_1_0() {
    let ours = Invoke::wasmcni_as("loopback", b"{}")
        .env("CNI_COMMAND", "VERSION")
        .run();
    let theirs = Invoke::exe(reference(), b"{}")
        .env("CNI_COMMAND", "VERSION")
        .run();
    assert_eq!(ours.code, 0, "{ours:?}");
    let supported: Vec<String> =
        serde_json::from_value(ours.json()["supportedVersions"].clone()).unwrap();
    assert_eq!(
        supported,
        ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    );
    let reference: Vec<String> =
        serde_json::from_value(theirs.json()["supportedVersions"].clone()).unwrap();
    for v in reference {
        assert!(
            supported.contains(&v),
            "reference supports {v}, wasmcni does not"
        );
    }
}

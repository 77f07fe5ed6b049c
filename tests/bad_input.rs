//! Every bad input gets a clear CNI error with the right code, a non-zero
//! exit, and leaves nothing behind. Where the reference loopback performs the
//! same check, its code must be ours too.

mod support;

use std::path::Path;
use std::process::Command;

use support::{loopback_conf, Invoke, Netns, REFERENCE_DIR};

fn reference() -> String {
    format!("{REFERENCE_DIR}/loopback")
}

struct Case {
    what: &'static str,
    env: Vec<(&'static str, String)>,
    stdin: Vec<u8>,
    code: u64,
    needle: &'static str,
}

/// The one deliberate difference from the reference: with no CNI_COMMAND
/// the Go skel prints its "about" text and exits 0 (a person ran it by
/// hand). wasmcni also prints it on stderr, but answers with code 4 and a
/// non-zero exit, since a runtime that omits CNI_COMMAND is broken.
const REFERENCE_EXITS_0: &[&str] = &["missing CNI_COMMAND"];

/// Environment-and-config cases that need a real namespace; both wasmcni
/// and the reference run each, and the netns must be untouched after.
#[test]
fn env_and_config_errors_match_the_reference() {
    let ns = Netns::new("bad");
    let netns = ns.path.display().to_string();
    let good = |cmd: &str| -> Vec<(&'static str, String)> {
        vec![
            ("CNI_COMMAND", cmd.to_owned()),
            ("CNI_CONTAINERID", "ctr-1".to_owned()),
            ("CNI_NETNS", netns.clone()),
            ("CNI_IFNAME", "lo".to_owned()),
            ("CNI_PATH", REFERENCE_DIR.to_owned()),
        ]
    };
    let with = |k: &'static str, v: &str| -> Vec<(&'static str, String)> {
        good("ADD")
            .into_iter()
            .map(|(key, val)| {
                if key == k {
                    (key, v.to_owned())
                } else {
                    (key, val)
                }
            })
            .collect()
    };
    let without = |k: &str| -> Vec<(&'static str, String)> {
        good("ADD")
            .into_iter()
            .filter(|(key, _)| *key != k)
            .collect()
    };
    let cases = vec![
        Case {
            what: "missing CNI_COMMAND",
            env: without("CNI_COMMAND"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "CNI_COMMAND",
        },
        Case {
            what: "unknown command",
            env: with("CNI_COMMAND", "FROB"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "FROB",
        },
        Case {
            what: "missing CNI_CONTAINERID",
            env: without("CNI_CONTAINERID"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "CNI_CONTAINERID",
        },
        Case {
            what: "bad container ID",
            env: with("CNI_CONTAINERID", "../etc"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "",
        },
        Case {
            what: "16-byte ifname",
            env: with("CNI_IFNAME", "abcdefghijklmnop"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "",
        },
        Case {
            what: "ifname with /",
            env: with("CNI_IFNAME", "a/b"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "",
        },
        Case {
            what: "ifname ..",
            env: with("CNI_IFNAME", ".."),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "",
        },
        Case {
            what: "ifname with space",
            env: with("CNI_IFNAME", "a b"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "",
        },
        Case {
            what: "missing CNI_PATH",
            env: without("CNI_PATH"),
            stdin: loopback_conf("1.0.0"),
            code: 4,
            needle: "CNI_PATH",
        },
        Case {
            what: "invalid JSON",
            env: good("ADD"),
            stdin: b"{not json".to_vec(),
            code: 6,
            needle: "",
        },
        Case {
            what: "unsupported cniVersion",
            env: good("ADD"),
            stdin: loopback_conf("9.9.9"),
            code: 1,
            needle: "9.9.9",
        },
    ];
    let before = ns.snapshot();
    for c in &cases {
        let mut ours = Invoke::wasmcni_as("loopback", &c.stdin);
        let mut theirs = Invoke::exe(reference(), &c.stdin);
        for (k, v) in &c.env {
            ours = ours.env(k, v);
            theirs = theirs.env(k, v);
        }
        let a = ours.run();
        a.assert_cni_error(c.code, c.needle);
        let b = theirs.run();
        if REFERENCE_EXITS_0.contains(&c.what) {
            assert_eq!(b.code, 0, "{}: {b:?}", c.what);
            assert!(!a.stderr.is_empty(), "{}: no about text on stderr", c.what);
        } else {
            assert_ne!(b.code, 0, "{}: the reference accepted it: {b:?}", c.what);
            assert_eq!(
                a.json()["code"],
                b.json()["code"],
                "{}: ours {a:?} reference {b:?}",
                c.what
            );
        }
        assert_eq!(ns.snapshot(), before, "{}: the namespace changed", c.what);
    }
}

#[test]
fn unknown_plugins_and_path_names_are_refused() {
    let conf = loopback_conf("1.0.0");
    let ns = Netns::new("bad-name");
    let r = Invoke::wasmcni_as("nosuchplugin", &conf)
        .cni("ADD", &ns.path, "eth0")
        .run();
    r.assert_cni_error(7, "nosuchplugin");
    for name in ["../loopback", "..", "a/b", "../../sbin/reboot"] {
        let r = Invoke::wasmcni_run(name, &conf)
            .cni("ADD", &ns.path, "eth0")
            .run();
        r.assert_cni_error(7, "invalid plugin name");
    }
    assert!(!ns.lo_up());
}

#[test]
fn netns_that_is_a_regular_file_or_another_namespace_type_is_refused() {
    let ns_dir = tempfile::tempdir().unwrap();
    let file = ns_dir.path().join("not-a-netns");
    std::fs::write(&file, b"").unwrap();
    let conf = loopback_conf("1.0.0");
    for cmd in ["ADD", "CHECK", "DEL"] {
        let r = Invoke::wasmcni_as("loopback", &conf)
            .cni(cmd, &file, "lo")
            .run();
        r.assert_cni_error(4, "not a network namespace");
        let r = Invoke::wasmcni_as("loopback", &conf)
            .cni(cmd, Path::new("/proc/self/ns/mnt"), "lo")
            .run();
        r.assert_cni_error(4, "not a network namespace");
    }
    let missing = Path::new("/run/netns/wcni-definitely-missing");
    for cmd in ["ADD", "CHECK"] {
        let r = Invoke::wasmcni_as("loopback", &conf)
            .cni(cmd, missing, "lo")
            .run();
        r.assert_cni_error(4, "does not exist");
    }
}

/// The host's own namespace (directly, and through a symlink) is refused for
/// every command. This runs wasmcni inside `unshare -n`, so even a broken
/// check could only touch a throwaway namespace, never the machine's `lo`.
#[test]
fn the_hosts_own_netns_is_refused_even_through_a_symlink() {
    support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("ns-link");
    std::os::unix::fs::symlink("/proc/self/ns/net", &link).unwrap();
    let conf = loopback_conf("1.0.0");
    for cmd in ["ADD", "CHECK", "DEL"] {
        for netns in [Path::new("/proc/self/ns/net"), link.as_path()] {
            // Inside the sandbox, lo starts down; a wrongly accepted ADD would set it up.
            let script = format!(
                "printf '%s' '{}' | CNI_COMMAND={cmd} CNI_CONTAINERID=c1 CNI_NETNS={} CNI_IFNAME=lo CNI_PATH=/x WASMCNI_CACHE_DIR={} {} run loopback; echo \"exit=$?\"; ip -j link show lo",
                String::from_utf8(conf.clone()).unwrap(),
                netns.display(),
                support::cache_dir().display(),
                support::wasmcni().display(),
            );
            let out = Command::new("unshare")
                .args(["-n", "sh", "-c", &script])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let mut lines = text.lines();
            let json: serde_json::Value = serde_json::from_str(lines.next().unwrap_or(""))
                .unwrap_or_else(|e| panic!("{cmd} {netns:?}: {e}: {text}"));
            assert_eq!(json["code"], 4, "{cmd} {netns:?}: {text}");
            assert!(json["msg"].as_str().unwrap().contains("own"), "{text}");
            assert_eq!(lines.next(), Some("exit=1"), "{text}");
            let lo: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
            assert!(
                !lo[0]["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
                "{cmd}: sandbox lo was touched: {text}"
            );
        }
    }
}

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

/// A native build (plain `cargo build`), a core module and other files
/// that are no component get code 103 and one line saying what they are
/// and what to do, never the compiler's byte dump (issue 11, friction 8).
#[test]
fn native_elf_and_other_non_components_get_a_one_line_hint() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "native.wasm",
            std::fs::read("/bin/true").expect("an ELF executable"),
            "is a native ELF executable, not a WebAssembly component: build it with `cargo build --target wasm32-wasip2`",
        ),
        (
            "core.wasm",
            b"\0asm\x01\0\0\0".to_vec(),
            "is a core WebAssembly module, not a component",
        ),
        ("text.wasm", b"(component)".to_vec(), "WebAssembly text"),
        ("junk.wasm", b"hello world".to_vec(), "is not a WebAssembly component"),
    ];
    for (file, bytes, needle) in &cases {
        let path = dir.path().join(file);
        std::fs::write(&path, bytes).unwrap();
        let r = Invoke::wasmcni_run(&path.display().to_string(), &loopback_conf("1.0.0"))
            .env("CNI_COMMAND", "VERSION")
            .run();
        r.assert_cni_error(103, needle);
        let v = r.json();
        let msg = v["msg"].as_str().unwrap();
        let shown = path.display().to_string();
        assert!(msg.starts_with(&shown), "{msg}");
        // (The path is a random temporary name, which may hold "0x".)
        let rest = &msg[shown.len()..];
        assert!(!msg.contains('\n') && !rest.contains("0x"), "{msg}");
        assert!(v.get("details").is_none(), "no byte dump: {v}");
    }
    // Found by name in the plugin dir, as a runtime reaches it.
    std::fs::copy(dir.path().join("native.wasm"), dir.path().join("mine.wasm")).unwrap();
    let r = Invoke::wasmcni_run("mine", &loopback_conf("1.0.0"))
        .env("WASMCNI_PLUGIN_DIR", dir.path().display().to_string())
        .env("CNI_COMMAND", "VERSION")
        .run();
    r.assert_cni_error(103, "mine.wasm is a native ELF executable");
}

/// A denied call's reason reaches the runtime when the plugin fails: the
/// CNI error's `details` name the call and the field of the plugin's own
/// policy entry that would allow it (or the invariant), distinct for each
/// cause, after the plugin's own code and msg; what only the audit log
/// may know (another attachment's identity) stays there (friction 3).
#[test]
fn denials_reach_the_runtime_as_policy_field_paths() {
    use serde_json::{json, Value};
    use support::world::{policy_with, wide, World};
    let world = World::new("why");
    // Runs `ops` under `grant` in an ADD whose plugin fails with a CNI
    // error of its own right after its last host call.
    let fail_after_ops = |grant: Value, ops: Value| {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                              "ops": ops, "exit": 1});
        let probe = world.run("ADD", &policy_with(grant.clone()), &conf, &[]);
        let calls = probe.json()["calls"].as_u64().expect("calls");
        conf["fail"] = json!({"after": calls, "how": "exit"});
        let run = world.run("ADD", &policy_with(grant), &conf, &[]);
        assert_ne!(run.code, 0, "{run:?}");
        let v = run.json();
        assert_eq!(v["code"], 11, "the plugin's own code stays: {run:?}");
        assert!(
            v["msg"]
                .as_str()
                .unwrap()
                .starts_with("failing after host call"),
            "the plugin's own msg stays: {run:?}"
        );
        (v["details"].as_str().unwrap_or("").to_owned(), run)
    };
    let own_veth = json!({"call": "link.create-veth", "ns": "host", "name": "cnitestv9",
                          "peer-ns": "container", "peer-name": "eth9"});
    let mut narrow = wide();
    narrow["container"]["read"] = json!(false);
    let cases = [
        (
            narrow,
            json!([{"call": "link.get-by-name", "ns": "container", "name": "lo"}]),
            "link.get-by-name: plugins.scripted.container.read is false",
        ),
        (
            wide(),
            json!([{"call": "sysctl.get", "ns": "container", "key": "net.ipv4.ip_forward"}]),
            "sysctl.get: sysctl net.ipv4.ip_forward matches none of plugins.scripted.container.sysctls",
        ),
        (
            json!({"container": {"read": true}}),
            json!([{"call": "link.list", "ns": "host"}]),
            "netns.host: plugins.scripted.host is absent",
        ),
        (
            wide(),
            json!([own_veth, {"call": "address.add", "ns": "host", "link": "cnitestv9",
                              "prefix": "192.0.2.11/24"}]),
            "address.add: host address 192.0.2.11/24 lies in none of plugins.scripted.host.prefixes",
        ),
        (
            wide(),
            json!([{"call": "delegate.run", "type": "nosuch", "command": "ADD", "config": {}}]),
            "delegate.run: \"nosuch\" is listed in neither plugins.scripted.delegates nor plugins.scripted.native-delegates",
        ),
        (
            wide(),
            json!([{"call": "link.set-up", "ns": "host", "link": "other0", "up": true}]),
            "link.set-up: host link \"other0\"",
        ),
    ];
    let mut seen = Vec::new();
    for (grant, ops, needle) in cases {
        let before = world.snapshot();
        let (details, run) = fail_after_ops(grant, ops);
        assert!(details.contains(needle), "{needle:?} not in {details:?}");
        assert!(run.stderr.contains(needle), "not logged: {run:?}");
        assert!(
            !seen.contains(&details),
            "two causes, one explanation: {details}"
        );
        seen.push(details);
        support::assert_same(&before, &world.snapshot(), needle);
    }
    // Another attachment's link: the invariant is named, the other
    // attachment's identity (its mark) only in the audit log.
    let last = seen.last().unwrap();
    assert!(
        last.contains("belongs to another attachment (a wasmcni invariant)"),
        "{last}"
    );
    assert!(!last.contains("another-container"), "{last}");
    assert!(
        world.audit().iter().any(|r| r["outcome"] == "denied"
            && r["reason"]
                .as_str()
                .is_some_and(|s| s.contains("wasmcni:another-container"))),
        "the audit log keeps the identity"
    );
    // A plugin that succeeds despite a denial gets no details added.
    let run = world.run(
        "ADD",
        &policy_with(json!({})),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                "ops": [{"call": "link.list", "ns": "container"}]}),
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.json().get("details").is_none(), "{run:?}");
}

/// bandwidth: bad rates and bursts are CNI errors (code 999, as the
/// reference's untyped errors) whose message names the key, on wasmcni
/// and, where it checks the same, on the reference; nothing is installed.
#[test]
fn bandwidth_bad_rates_are_errors_naming_the_key() {
    use serde_json::{json, Value};
    use support::world::World;
    let world = World::new("bwbad");
    let ctr = world.ctr.path.display().to_string();
    world.node.ip(&[
        "link", "add", "vethbad0", "type", "veth", "peer", "name", "eth0", "netns", &ctr,
    ]);
    world.node.ip(&[
        "link",
        "set",
        "vethbad0",
        "alias",
        "wasmcni:bwnet:ctr-test-1:eth0",
    ]);
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "vethbad0"}, {"name": "eth0", "sandbox": ctr}], "ips": []});
    let policy = world.policy(&json!({"plugins": {}}));
    // (what, the plugin's keys, words the message must hold, whether the
    // reference refuses it too)
    let cases: Vec<(&str, Value, &[&str], bool)> = vec![
        (
            "rate without burst",
            json!({"ingressRate": 800000}),
            &["ingressRate", "ingressBurst"],
            true,
        ),
        (
            "burst without rate",
            json!({"egressBurst": 80000}),
            &["egressBurst", "egressRate"],
            true,
        ),
        (
            "negative rate",
            json!({"egressRate": -1, "egressBurst": 80000}),
            &["egressRate"],
            true,
        ),
        (
            "rate not a number",
            json!({"ingressRate": "1mbit", "ingressBurst": 80000}),
            &["ingressRate"],
            true,
        ),
        (
            "burst of 4 GiB",
            json!({"ingressRate": 800000, "ingressBurst": 34359738360u64}),
            &["ingressBurst", "4GB"],
            true,
        ),
        (
            "runtime rate without burst",
            json!({"runtimeConfig": {"bandwidth": {"egressRate": 800000}}}),
            &["runtimeConfig.bandwidth.egressRate"],
            true,
        ),
        (
            "rate below one byte per second",
            json!({"ingressRate": 7, "ingressBurst": 80000}),
            &["ingressRate", "at least 8"],
            false,
        ),
    ];
    for (what, keys, words, reference_too) in cases {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "bwnet", "type": "bandwidth",
                              "prevResult": prev});
        for (k, v) in keys.as_object().expect("object") {
            conf[k] = v.clone();
        }
        let stdin = conf.to_string().into_bytes();
        let before = world.snapshot();
        let run = Invoke::wasmcni_run("bandwidth", &stdin)
            .cni("ADD", &world.ctr.path, "eth0")
            .env("WASMCNI_POLICY", policy.display().to_string())
            .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
            .in_netns(&world.node)
            .run();
        for w in words {
            run.assert_cni_error(999, w);
        }
        support::assert_same(&before, &world.snapshot(), what);
        if reference_too {
            let r = Invoke::exe(format!("{REFERENCE_DIR}/bandwidth"), &stdin)
                .cni("ADD", &world.ctr.path, "eth0")
                .in_netns(&world.node)
                .run();
            r.assert_cni_error(999, "");
            support::assert_same(&before, &world.snapshot(), what);
        }
    }
}

/// bandwidth's GC collects the ifb of an attachment the runtime no longer
/// holds; its DEL removes the attachment's ifb, succeeds again when it is
/// gone, and needs no container namespace (the runtime may have removed
/// it first, or pass none).
#[test]
fn bandwidth_gc_and_del_remove_the_ifb_and_del_needs_no_netns() {
    use serde_json::json;
    use support::world::World;
    let world = World::new("bwdel");
    let ctr = world.ctr.path.display().to_string();
    world.node.ip(&[
        "link", "add", "vethdel0", "type", "veth", "peer", "name", "eth0", "netns", &ctr,
    ]);
    world.node.ip(&[
        "link",
        "set",
        "vethdel0",
        "alias",
        "wasmcni:bwnet:ctr-test-1:eth0",
    ]);
    let conf = json!({"cniVersion": "1.0.0", "name": "bwnet", "type": "bandwidth",
        "egressRate": 800000, "egressBurst": 80000,
        "prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "vethdel0"}, {"name": "eth0", "sandbox": ctr}], "ips": []}});
    let stdin = conf.to_string().into_bytes();
    let policy = world.policy(&json!({"plugins": {}}));
    let run = |command: &str, netns: &Path| {
        Invoke::wasmcni_run("bandwidth", &stdin)
            .cni(command, netns, "eth0")
            .env("WASMCNI_POLICY", policy.display().to_string())
            .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
            .in_netns(&world.node)
            .run()
    };
    let add = run("ADD", &world.ctr.path);
    assert_eq!(add.code, 0, "{add:?}");
    let ifb = add.json()["interfaces"][2]["name"]
        .as_str()
        .expect("the ifb in the result")
        .to_owned();
    assert!(ifb.starts_with("bwp") && ifb.len() == 15, "{add:?}");
    assert!(world.node.ip(&["link", "show"]).contains(&ifb));
    // GC keeps the ifb of a valid attachment and collects it once the
    // runtime no longer lists it.
    for (valid, kept) in [
        (
            json!([{"containerID": "ctr-test-1", "ifname": "eth0"}]),
            true,
        ),
        (json!([]), false),
    ] {
        let gc_conf = json!({"cniVersion": "1.1.0", "name": "bwnet", "type": "bandwidth",
            "egressRate": 800000, "egressBurst": 80000, "cni.dev/valid-attachments": valid});
        let gc_stdin = gc_conf.to_string().into_bytes();
        let gc = Invoke::wasmcni_run("bandwidth", &gc_stdin)
            .cni("GC", Path::new(""), "eth0")
            .env("WASMCNI_POLICY", policy.display().to_string())
            .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
            .in_netns(&world.node)
            .run();
        assert_eq!(gc.code, 0, "{gc:?}");
        assert_eq!(
            world.node.ip(&["link", "show"]).contains(&ifb),
            kept,
            "{gc:?}"
        );
    }
    let gone = Path::new("/run/netns/wasmcni-no-such-netns");
    for _ in 0..2 {
        let del = run("DEL", gone);
        assert_eq!(del.code, 0, "{del:?}");
        assert!(!world.node.ip(&["link", "show"]).contains(&ifb));
    }
}

/// A host veth for the bandwidth tests below: `name` in the node, its peer
/// `eth0` in the container, marked as the attachment's (as wasmcni's
/// bridge leaves it), with transmit queue length `txqlen` (0: as the
/// reference and wasmcni make veths); and the plugin's prevResult.
fn bandwidth_veth(world: &support::world::World, name: &str, txqlen: u32) -> serde_json::Value {
    let ctr = world.ctr.path.display().to_string();
    world.node.ip(&[
        "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", &ctr,
    ]);
    let txqlen = txqlen.to_string();
    world.node.ip(&["link", "set", name, "txqueuelen", &txqlen]);
    world.node.ip(&[
        "link",
        "set",
        name,
        "alias",
        "wasmcni:bwnet:ctr-test-1:eth0",
    ]);
    world.node.ip(&["link", "set", name, "up"]);
    world.ctr.ip(&["link", "set", "eth0", "up"]);
    world.wait_for_carrier(&[name]);
    serde_json::json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": name}, {"name": "eth0", "sandbox": ctr}], "ips": []})
}

/// bandwidth's ADD or DEL, as a runtime calls it, in `world`.
fn bandwidth_call(
    world: &support::world::World,
    command: &str,
    limits: serde_json::Value,
    prev: &serde_json::Value,
) -> support::Run {
    bandwidth_invoke(world, command, limits, prev).run()
}

/// [`bandwidth_call`], not yet run (a test adds to its environment).
fn bandwidth_invoke(
    world: &support::world::World,
    command: &str,
    limits: serde_json::Value,
    prev: &serde_json::Value,
) -> Invoke<'static> {
    let mut conf = serde_json::json!({"cniVersion": "1.0.0", "name": "bwnet",
        "type": "bandwidth", "prevResult": prev});
    for (k, v) in limits.as_object().expect("object") {
        conf[k] = v.clone();
    }
    let policy = world.policy(&serde_json::json!({"plugins": {}}));
    // As World::spawn: the builder borrows its stdin for the test's life.
    let stdin: &'static [u8] = Box::leak(conf.to_string().into_bytes().into_boxed_slice());
    Invoke::wasmcni_run("bandwidth", stdin)
        .cni(command, &world.ctr.path, "eth0")
        .env("WASMCNI_POLICY", policy.display().to_string())
        .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
        .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
        .in_netns(&world.node)
}

/// Issue 48: limits the kernel refuses (a rate of 2^40 bit/s: the
/// bucket's buffer is 0) fail the ADD with a CNI error and leave the host
/// veth as it was — its transmit queue length too, which the kernel sets
/// to 1000 when a qdisc is attached to a link without a queue, even one
/// it refuses (the reference's failed ADD leaves it so). Both when the
/// refused limit is the first change and when it comes after one that
/// worked (ingress limited, then egress refused: the journal's undo).
#[test]
fn bandwidth_limits_the_kernel_refuses_leave_the_host_veth_as_it_was() {
    use serde_json::json;
    let world = support::world::World::new("bwbig");
    let prev = bandwidth_veth(&world, "vethbig0", 0);
    for limits in [
        json!({"ingressRate": 1_099_511_627_776u64, "ingressBurst": 80000}),
        json!({"ingressRate": 800000, "ingressBurst": 80000,
               "egressRate": 1_099_511_627_776u64, "egressBurst": 80000}),
    ] {
        let before = world.snapshot();
        let add = bandwidth_call(&world, "ADD", limits.clone(), &prev);
        assert_ne!(add.code, 0, "{limits}: {add:?}");
        add.assert_cni_error(999, "invalid argument");
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("{limits}: the failed ADD"),
        );
        let del = bandwidth_call(&world, "DEL", limits.clone(), &prev);
        assert_eq!(del.code, 0, "{limits}: {del:?}");
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("{limits}: the DEL after it"),
        );
    }
}

/// Issue 48: bandwidth's DEL removes the limits its ADD put on the host
/// veth when the veth outlives it (the runtime's DEL of the chain runs
/// bandwidth's first; a main plugin whose DEL fails, or a veth the
/// runtime keeps, leaves the veth): the `tbf`, the `ingress` qdisc and
/// the `ifb`, whatever the rates (8 bit/s, the smallest, whose bucket
/// the reference's arithmetic overflows). The reference's DEL leaves the
/// `tbf`. A second DEL, and one without the container's namespace,
/// succeed.
#[test]
fn bandwidth_del_removes_the_limits_from_a_host_veth_that_outlives_it() {
    use serde_json::json;
    let world = support::world::World::new("bwkeep");
    // A queue length the kernel does not change: the state after DEL is
    // the state before ADD, exactly.
    let prev = bandwidth_veth(&world, "vethkeep0", 1000);
    let before = world.snapshot();
    for limits in [
        json!({"ingressRate": 8, "ingressBurst": 80000, "egressRate": 8, "egressBurst": 8}),
        json!({"ingressRate": 800000, "ingressBurst": 80000}),
        json!({"egressRate": 800000, "egressBurst": 80000}),
    ] {
        let add = bandwidth_call(&world, "ADD", limits.clone(), &prev);
        assert_eq!(add.code, 0, "{limits}: {add:?}");
        let qdiscs = world.node.traffic_control()["qdiscs"].to_string();
        assert!(
            qdiscs.contains("\"tbf\""),
            "{limits}: no tbf after ADD: {qdiscs}"
        );
        for _ in 0..2 {
            let del = bandwidth_call(&world, "DEL", limits.clone(), &prev);
            assert_eq!(del.code, 0, "{limits}: {del:?}");
            support::assert_same(&before, &world.snapshot(), &format!("{limits}: after DEL"));
        }
    }
}

/// bandwidth's DEL completes where the reference's would on a node that
/// ran the reference before wasmcni: after the reference's ADD limited a
/// native plugin's veth (no wasmcni mark), wasmcni's DEL succeeds and
/// leaves that veth as the reference's DEL does.
#[test]
fn bandwidth_del_completes_on_a_veth_the_reference_limited() {
    use serde_json::json;
    let world = support::world::World::new("bwnat");
    let prev = bandwidth_veth(&world, "vethnat0", 1000);
    world.node.ip(&["link", "set", "vethnat0", "alias", ""]);
    let conf = json!({"cniVersion": "1.0.0", "name": "bwnet", "type": "bandwidth",
        "ingressRate": 800000, "ingressBurst": 80000, "prevResult": prev});
    let r = Invoke::exe(
        format!("{REFERENCE_DIR}/bandwidth"),
        conf.to_string().as_bytes(),
    )
    .cni("ADD", &world.ctr.path, "eth0")
    .in_netns(&world.node)
    .run();
    assert_eq!(r.code, 0, "the reference's ADD: {r:?}");
    let limited = world.snapshot();
    assert!(limited["node"]["tc"].to_string().contains("\"tbf\""));
    let del = bandwidth_call(
        &world,
        "DEL",
        json!({"ingressRate": 800000, "ingressBurst": 80000}),
        &prev,
    );
    assert_eq!(del.code, 0, "{del:?}");
    support::assert_same(
        &limited,
        &world.snapshot(),
        "the DEL left the veth as it was",
    );
}

/// A tmpfs of `kib` KiB mounted on `dir` (made if missing) for as long as
/// it lives: a state directory that can fill up.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(dir: &std::path::Path, kib: u32) -> SmallFs {
        std::fs::create_dir_all(dir).expect("mount point");
        let st = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(st.success(), "mounting a tmpfs on {}", dir.display());
        SmallFs(dir.to_owned())
    }

    /// Fills it: one file takes every block left.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).expect("filler");
        let chunk = [0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
    }

    /// Every file in it but the filler.
    fn files(&self) -> Vec<String> {
        fn walk(d: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.file_name().is_some_and(|n| n != "filler") {
                    out.push(p.display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &mut out);
        out
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Issue 48 (the soak's first find): an ADD whose state directory is full
/// fails with a CNI error naming the intent log it could not write, and
/// leaves no file there — a failed write of the intent log's first line
/// left an empty log, which the ADD's DEL kept and the node's `wasmcni
/// gc` met on every run ("not a record"). Nothing of the ADD is left in
/// the namespaces either, and the runtime's DEL completes. Then, room made,
/// an intent log a kill left empty goes with the attachment's DEL, and an
/// ADD and DEL of the same attachment work and leave no file.
#[test]
fn an_add_on_a_full_state_directory_fails_and_leaves_no_file_there() {
    use serde_json::json;
    let world = support::world::World::new("full");
    let fs = SmallFs::mount(&world.state_dir(), 256);
    let policy = world.policy(&json!({"plugins": {"host-local": {"ipam-roots": ["@ipam"]}}}));
    let conf = json!({"cniVersion": "1.0.0", "name": "fullnet", "type": "bridge",
        "bridge": "cni-full0", "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "10.74.0.0/24",
                 "dataDir": world.ipam_dir().display().to_string()}})
    .to_string();
    let call = |command: &str| {
        Invoke::wasmcni_run("bridge", conf.as_bytes())
            .cni(command, &world.ctr.path, "eth0")
            .env("WASMCNI_POLICY", policy.display().to_string())
            .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
            .in_netns(&world.node)
            .run()
    };
    fs.fill();
    let before = world.snapshot();
    let add = call("ADD");
    assert_ne!(add.code, 0, "an ADD on a full state directory: {add:?}");
    assert!(
        add.stdout.contains("No space left on device") && add.stdout.contains(".intent"),
        "the error names the intent log it could not write: {add:?}"
    );
    assert_eq!(
        fs.files(),
        Vec::<String>::new(),
        "the failed ADD left files"
    );
    support::assert_same(&before, &world.snapshot(), "the failed ADD left state");
    let del = call("DEL");
    assert_eq!(
        del.code, 0,
        "the runtime's DEL after the failed ADD: {del:?}"
    );
    assert_eq!(fs.files(), Vec::<String>::new(), "the DEL left files");
    // An intent log a kill left empty (between its creation and its first
    // line): it names nothing, and the DEL, which finds no record, takes
    // it away.
    let intent =
        fs.0.join("attachments/fullnet/ctr-test-1/eth0/bridge.intent");
    std::fs::remove_file(fs.0.join("filler")).expect("making room");
    std::fs::create_dir_all(intent.parent().unwrap()).expect("record dir");
    std::fs::write(&intent, "").expect("an empty intent log");
    let del = call("DEL");
    assert_eq!(del.code, 0, "a DEL beside an empty intent log: {del:?}");
    assert!(!intent.exists(), "the DEL left the empty intent log");
    let add = call("ADD");
    assert_eq!(add.code, 0, "{add:?}");
    let del = call("DEL");
    assert_eq!(del.code, 0, "{del:?}");
    // (The host's bookkeeping stays: which IPAM state directories the
    // node has, and the boot the records were reconciled for.)
    let left: Vec<String> = fs
        .files()
        .into_iter()
        .filter(|f| !f.ends_with("/ipam-stores") && !f.ends_with("/boot-id"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "ADD and DEL left files");
}

/// The soak's third find: a bandwidth ADD killed after the kernel made
/// the attachment's ifb and the intent log said where, before the ifb was
/// marked (`WASMCNI_FAULT=step:link-unmarked`): the runtime's DEL was
/// refused ("has this attachment's ifb name but is not its ifb") at every
/// try — containerd left the pod SANDBOX_UNKNOWN. The record (its intent
/// log) proves the unmarked ifb is the attachment's: the DEL takes the
/// limits off and removes it, and the node is as before the ADD.
#[test]
fn a_bandwidth_add_killed_before_it_marked_its_ifb_is_undone_by_its_del() {
    use serde_json::json;
    let world = support::world::World::new("bwkill");
    let prev = bandwidth_veth(&world, "vethkill0", 0);
    let before = world.snapshot();
    let limits = json!({"egressRate": 800000, "egressBurst": 80000});
    let add = bandwidth_invoke(&world, "ADD", limits.clone(), &prev)
        .env("WASMCNI_FAULT", "step:link-unmarked")
        .run();
    assert_ne!(add.code, 0, "the ADD was to be killed: {add:?}");
    let links = world.node.ip(&["-o", "link", "show", "type", "ifb"]);
    assert!(
        links.contains("bwp"),
        "the kill came before the ifb was made: {links}"
    );
    let del = bandwidth_call(&world, "DEL", limits, &prev);
    assert_eq!(
        del.code, 0,
        "the runtime's DEL after the killed ADD: {del:?}"
    );
    support::assert_same(
        &before,
        &world.snapshot(),
        "the DEL after an ADD killed before it marked its ifb",
    );
}

/// The hour soak's find (seed 20261129, step 2539): a bandwidth ADD killed
/// a step earlier, after the kernel made the ifb and before the intent log
/// said where (`WASMCNI_FAULT=step:link-made`): the runtime's DEL was
/// refused at every try, as above, and containerd's pod was left
/// SANDBOX_UNKNOWN with its veth, address, rules and record. The ifb's
/// name is the host's, derived from the attachment, and the log's last
/// line named it before the kernel made it: the DEL takes it (the plugin's
/// `remove-limits`), and so does a GC that finds the attachment gone (the
/// host's cleanup of its record); the node is as before the ADD.
#[test]
fn a_bandwidth_add_killed_before_it_read_back_its_ifb_is_undone_by_its_del_or_gc() {
    use serde_json::json;
    let world = support::world::World::new("bwmade");
    let prev = bandwidth_veth(&world, "vethmade0", 0);
    let before = world.snapshot();
    let limits = json!({"egressRate": 800000, "egressBurst": 80000});
    for cleanup in ["DEL", "GC"] {
        let add = bandwidth_invoke(&world, "ADD", limits.clone(), &prev)
            .env("WASMCNI_FAULT", "step:link-made")
            .run();
        assert_ne!(add.code, 0, "the ADD was to be killed: {add:?}");
        let links = world.node.ip(&["-o", "link", "show", "type", "ifb"]);
        assert!(
            links.contains("bwp") && !links.contains("alias"),
            "the kill came before the ifb was made, or after it was marked: {links}"
        );
        let c = if cleanup == "DEL" {
            bandwidth_call(&world, "DEL", limits.clone(), &prev)
        } else {
            let gc = json!({"cniVersion": "1.1.0", "cni.dev/valid-attachments": []});
            bandwidth_call(&world, "GC", gc, &prev)
        };
        assert_eq!(
            c.code, 0,
            "the runtime's {cleanup} after the killed ADD: {c:?}"
        );
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("the {cleanup} after an ADD killed before it read back its ifb"),
        );
    }
}

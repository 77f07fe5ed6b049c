//! `wasmcni chain-into` (issue 27, coexistence with the primary CNI): a
//! wasmcni plugin appended to the primary's conflist — flannel's, Calico's
//! and Cilium's, as their installers write them — atomically,
//! idempotently, with per-node placeholders, taken out again leaving the
//! primary's list as it was, and kept there by `--watch` when the
//! primary's installer rewrites its file.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MARK: &str = "wasmcni.dev/chained";

/// The three primaries' conflists, as their installers write them.
fn primaries() -> Vec<(&'static str, Value)> {
    vec![
        (
            "10-flannel.conflist",
            json!({"name": "cbr0", "cniVersion": "0.3.1", "plugins": [
                {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
                {"type": "portmap", "capabilities": {"portMappings": true}}]}),
        ),
        (
            "10-calico.conflist",
            json!({"name": "k8s-pod-network", "cniVersion": "0.3.1", "plugins": [
                {"type": "calico", "log_level": "info", "datastore_type": "kubernetes",
                 "nodename": "node-1", "mtu": 1440, "ipam": {"type": "calico-ipam"},
                 "policy": {"type": "k8s"},
                 "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}},
                {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
                {"type": "bandwidth", "capabilities": {"bandwidth": true}}]}),
        ),
        (
            "05-cilium.conflist",
            json!({"cniVersion": "0.3.1", "name": "cilium", "plugins": [
                {"type": "cilium-cni", "enable-debug": false,
                 "log-file": "/var/run/cilium/cilium-cni.log"}]}),
        ),
    ]
}

/// The entry chained: a third-party plugin with per-node values.
fn entry() -> Value {
    json!({"type": "mtu-setter", "mtu": "__CNI_MTU__", "node": "__KUBERNETES_NODE_NAME__"})
}

fn chain_into(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(support::wasmcni());
    c.arg("chain-into").arg("--conf-dir").arg(dir).args(args);
    c.env_remove("CNI_MTU")
        .env_remove("KUBERNETES_NODE_NAME")
        .env_remove("POD_CIDR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("wasmcni chain-into")
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json")
}

const NODE: &[(&str, &str)] = &[("CNI_MTU", "1450"), ("KUBERNETES_NODE_NAME", "node-7")];

/// A conf dir holding `primary` and, sorting after it, another network's
/// list (which must not be touched).
fn conf_dir(name: &str, primary: &Value) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = support::private_tempdir();
    let p = dir.path().join(name);
    std::fs::write(&p, serde_json::to_string_pretty(primary).unwrap()).unwrap();
    let other = dir.path().join("99-other.conflist");
    std::fs::write(
        &other,
        r#"{"name":"o","cniVersion":"1.0.0","plugins":[{"type":"x"}]}"#,
    )
    .unwrap();
    (dir, p, other)
}

#[test]
fn an_entry_goes_into_flannel_calico_and_cilium_lists_and_back_out() {
    let entry_file = support::private_tempdir();
    let e = entry_file.path().join("entry.json");
    std::fs::write(&e, entry().to_string()).unwrap();
    let e = e.to_str().unwrap().to_owned();
    for (name, primary) in primaries() {
        let (dir, p, other) = conf_dir(name, &primary);
        let other_text = std::fs::read(&other).unwrap();
        // In: appended after the primary's own plugins, placeholders
        // filled (the MTU a number), marked.
        let out = chain_into(dir.path(), &["--entry", &e], NODE);
        assert!(out.status.success(), "{name}: {out:?}");
        let chained = read(&p);
        let mut want = primary.clone();
        want["plugins"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "mtu-setter", "mtu": 1450, "node": "node-7", MARK: true}));
        assert_eq!(chained, want, "{name}");
        assert_eq!(
            std::fs::read(&other).unwrap(),
            other_text,
            "{name}: only the primary"
        );
        // Again: nothing written.
        let text = std::fs::read(&p).unwrap();
        let out = chain_into(dir.path(), &["--entry", &e], NODE);
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("unchanged"),
            "{out:?}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), text, "{name}: idempotent");
        // Another node value: the entry replaced, not doubled.
        let out = chain_into(
            dir.path(),
            &["--entry", &e],
            &[("CNI_MTU", "1400"), NODE[1]],
        );
        assert!(out.status.success(), "{name}: {out:?}");
        let plugins = read(&p)["plugins"].as_array().unwrap().clone();
        assert_eq!(
            plugins.iter().filter(|p| p[MARK] == true).count(),
            1,
            "{name}"
        );
        assert_eq!(plugins.last().unwrap()["mtu"], 1400, "{name}");
        // A placeholder without its value: refused, nothing written.
        let text = std::fs::read(&p).unwrap();
        let out = chain_into(dir.path(), &["--entry", &e], &[NODE[1]]);
        assert!(!out.status.success(), "{name}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("__CNI_MTU__ is in the entry but $CNI_MTU is not set"),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read(&p).unwrap(),
            text,
            "{name}: refused, unchanged"
        );
        // Out: the primary's list as it was.
        let out = chain_into(dir.path(), &["--remove"], &[]);
        assert!(out.status.success(), "{name}: {out:?}");
        assert_eq!(read(&p), primary, "{name}: removed");
        // No temporary file left for a runtime to find.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{name}: {names:?}");
    }
}

#[test]
fn what_cannot_be_chained_is_refused_with_nothing_written() {
    let files = support::private_tempdir();
    let bw = files.path().join("bw.json");
    std::fs::write(&bw, json!({"type": "bandwidth"}).to_string()).unwrap();
    let typeless = files.path().join("typeless.json");
    std::fs::write(&typeless, json!({"mtu": 1}).to_string()).unwrap();
    let (_, calico) = primaries().remove(1);
    let (dir, p, _) = conf_dir("10-calico.conflist", &calico);
    let text = std::fs::read(&p).unwrap();
    for (entry, why) in [
        (&bw, "already has a \"bandwidth\" plugin of its own"),
        (&typeless, "has no string \"type\""),
    ] {
        let out = chain_into(dir.path(), &["--entry", entry.to_str().unwrap()], &[]);
        assert!(!out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{out:?}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), text);
    }
    // A single-plugin primary (.conf) is not a list to chain into.
    let single = support::private_tempdir();
    std::fs::write(
        single.path().join("10-x.conf"),
        json!({"cniVersion": "0.3.1", "name": "x", "type": "bridge"}).to_string(),
    )
    .unwrap();
    let e = files.path().join("e.json");
    std::fs::write(&e, json!({"type": "mtu-setter"}).to_string()).unwrap();
    let out = chain_into(single.path(), &["--entry", e.to_str().unwrap()], &[]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("single-plugin config"),
        "{out:?}"
    );
}

#[test]
fn watch_puts_the_entry_back_when_the_primary_rewrites_its_list() {
    let files = support::private_tempdir();
    let e = files.path().join("entry.json");
    std::fs::write(&e, entry().to_string()).unwrap();
    let (_, flannel) = primaries().remove(0);
    // The primary is not there yet when the watcher starts.
    let dir = support::private_tempdir();
    let p = dir.path().join("10-flannel.conflist");
    let mut child = Command::new(support::wasmcni())
        .arg("chain-into")
        .arg("--conf-dir")
        .arg(dir.path())
        .args([
            "--entry",
            e.to_str().unwrap(),
            "--watch",
            "--remove-on-exit",
        ])
        .envs(NODE.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wasmcni chain-into --watch");
    let chained = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| {
                v["plugins"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x[MARK] == true))
            })
    };
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // The primary's installer writes its list, twice (as at each start).
    for round in 0..2 {
        std::fs::write(&p, flannel.to_string()).unwrap();
        wait(&format!("the entry chained, round {round}"), &|| {
            chained(&p)
        });
    }
    // SIGTERM: it takes the entry out and exits.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "it did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert_eq!(read(&p), flannel, "removed on exit");
}

//! The plugin author's path, as CI runs it: the third-party plugins in
//! examples/ and a crate made by `wasmcni new` are built the way their
//! authors build them (`cargo build --release` in the crate, outside
//! wasmcni's workspace, for wasm32-wasip2 by their `.cargo/config.toml`),
//! then run by `wasmcni run X.wasm --policy P` in a fresh node and
//! container namespace pair, chained after a standard plugin's ADD. Each
//! runs with its starter `policy.json`, pinned to the build's sha256, and
//! must change the kernel as it says; without its entry (or with another
//! pin) it must be refused and change nothing.
//!
//! The crates share one target directory (target/examples) and build
//! `--offline`: every crate they use is one wasmcni's own build has
//! fetched.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::{Invoke, Netns, Run};

/// The checkout.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("checkout")
        .to_owned()
}

/// The target directory the example crates share.
fn examples_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/")
        .join("examples")
}

/// `cargo ARGS` in crate `dir`, as its author runs it (none of this
/// test's own cargo settings leak in), into target/examples.
fn cargo(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(dir)
        .args(args)
        .arg("--offline")
        .env("CARGO_TARGET_DIR", examples_target());
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
        // tests/run sets it for the test binary alone (libtest's
        // --report-time); no build an author makes has it.
        "RUSTC_BOOTSTRAP",
        "CARGO_MANIFEST_DIR",
    ] {
        cmd.env_remove(var);
    }
    // This workspace's .cargo/config.toml reaches crates below it: its
    // flags for wasmcni's own static build are not an author's. Set and
    // empty, these replace every configured flag (an empty
    // CARGO_TARGET_<triple>_RUSTFLAGS would be merged with them instead).
    cmd.env("CARGO_ENCODED_RUSTFLAGS", "")
        .env("CARGO_ENCODED_RUSTDOCFLAGS", "");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running cargo in {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "cargo {args:?} in {} failed (the wasm32-wasip2 target is installed by `make setup`):\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds plugin crate `dir` named `name`; returns its component.
fn build(dir: &Path, name: &str) -> PathBuf {
    cargo(dir, &["build", "--release"]);
    let wasm = examples_target().join(format!("wasm32-wasip2/release/{name}.wasm"));
    assert!(wasm.is_file(), "{} was not built", wasm.display());
    wasm
}

fn sha256(file: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(file).expect("plugin")))
}

/// Writes `policy` (mode 0600) into `dir`; returns its path.
fn write_policy(dir: &Path, file: &str, policy: &Value) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(file);
    std::fs::write(&p, policy.to_string()).expect("policy");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    p
}

/// A plugin crate's starter policy.json, with plugin `name`'s entry
/// pinned to `pin`.
fn pinned(crate_dir: &Path, name: &str, pin: &str) -> Value {
    let text = std::fs::read_to_string(crate_dir.join("policy.json")).expect("policy.json");
    let mut v: Value = serde_json::from_str(&text).expect("policy.json is JSON");
    v["plugins"][name]["sha256"] = json!(pin);
    v
}

/// A node and a container, a standard plugin's ADD done between them.
struct Chain {
    node: Netns,
    ctr: Netns,
    dir: tempfile::TempDir,
    /// The standard plugin's result: the chained plugin's prevResult.
    prev: Value,
}

impl Chain {
    fn new(tag: &str, plugin: Value) -> Chain {
        let node = Netns::new(&format!("{tag}n"));
        node.ip(&["link", "set", "lo", "up"]);
        let ctr = Netns::new(&format!("{tag}c"));
        let mut conf = plugin;
        conf["cniVersion"] = json!("1.0.0");
        conf["name"] = json!("exnet");
        let typ = conf["type"].as_str().expect("type").to_owned();
        let run = Invoke::wasmcni_run(&typ, conf.to_string().as_bytes())
            .cni("ADD", &ctr.path, "eth0")
            .in_netns(&node)
            .run();
        assert_eq!(run.code, 0, "{typ} ADD: {run:?}");
        Chain {
            prev: run.json(),
            node,
            ctr,
            dir: support::private_tempdir(),
        }
    }

    /// Runs the chained plugin `wasm` (`cmd`) with `conf` (+ prevResult)
    /// under policy `policy`.
    fn run(&self, wasm: &Path, cmd: &str, conf: &Value, policy: &Value) -> Run {
        let mut conf = conf.clone();
        conf["cniVersion"] = json!("1.0.0");
        conf["name"] = json!("exnet");
        conf["prevResult"] = self.prev.clone();
        let policy = write_policy(self.dir.path(), &format!("{cmd}-policy.json"), policy);
        Invoke::wasmcni_run(&wasm.display().to_string(), conf.to_string().as_bytes())
            .arg("--policy")
            .arg(policy.display().to_string())
            .cni(cmd, &self.ctr.path, "eth0")
            .in_netns(&self.node)
            .run()
    }

    /// `ip -d -j link show eth0` in the container.
    fn eth0(&self) -> Value {
        let s = self.ctr.ip(&["-d", "-j", "link", "show", "eth0"]);
        serde_json::from_str::<Value>(&s).expect("ip -j")[0].clone()
    }

    /// The node's end of the veth: the result's interface without a
    /// sandbox whose name is not the bridge's.
    fn host_veth(&self) -> String {
        self.prev["interfaces"]
            .as_array()
            .expect("interfaces")
            .iter()
            .filter(|i| i["sandbox"].as_str().unwrap_or("").is_empty())
            .filter_map(|i| i["name"].as_str())
            .find(|n| n.starts_with("veth"))
            .unwrap_or_else(|| panic!("no host veth in {}", self.prev))
            .to_owned()
    }

    /// A setting of the node's namespace.
    fn node_sysctl(&self, path: &str) -> String {
        let out = Command::new(support::ip_exe())
            .args(["netns", "exec", &self.node.name, "cat", path])
            .output()
            .expect("ip netns exec cat");
        assert!(out.status.success(), "{path}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// Asserts a run was refused for want of a grant (or a pin).
#[track_caller]
fn assert_refused(run: &Run, needle: &str) {
    assert_ne!(run.code, 0, "expected a refusal: {run:?}");
    let all = format!("{}{}", run.stdout, run.stderr).to_lowercase();
    assert!(all.contains(needle), "{needle:?} not in {run:?}");
}

fn bridge() -> Value {
    json!({"type": "bridge", "bridge": "cniex0",
           "ipam": {"type": "static", "addresses": [{"address": "10.99.0.2/24"}]}})
}

#[test]
fn mtu_setter_sets_the_container_mtu_under_its_starter_policy() {
    support::require_root();
    let dir = root().join("examples/mtu-setter");
    let wasm = build(&dir, "mtu-setter");
    let chain = Chain::new("exm", bridge());
    let conf = json!({"type": "mtu-setter", "mtu": 1400});
    let mtu = |c: &Chain| c.eth0()["mtu"].as_u64().expect("mtu");
    assert_eq!(mtu(&chain), 1500);

    // Without an entry it has no authority; with another build's pin it
    // does not run.
    let run = chain.run(&wasm, "ADD", &conf, &json!({"plugins": {}}));
    assert_refused(&run, "denied");
    let run = chain.run(
        &wasm,
        "ADD",
        &conf,
        &pinned(&dir, "mtu-setter", &"0".repeat(64)),
    );
    assert_refused(&run, "sha256");
    assert_eq!(mtu(&chain), 1500, "a refused run changed the MTU");

    let policy = pinned(&dir, "mtu-setter", &sha256(&wasm));
    let run = chain.run(&wasm, "ADD", &conf, &policy);
    assert_eq!(run.code, 0, "ADD: {run:?}");
    assert_eq!(mtu(&chain), 1400);
    // prevResult comes back, its container interface with the new MTU.
    let out = run.json();
    assert_eq!(out["ips"], chain.prev["ips"], "{out}");
    let eth0 = out["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "eth0")
        .expect("eth0 in the result");
    assert_eq!(eth0["mtu"], 1400, "{out}");

    let run = chain.run(&wasm, "CHECK", &conf, &policy);
    assert_eq!(run.code, 0, "CHECK: {run:?}");
    let run = chain.run(
        &wasm,
        "CHECK",
        &json!({"type": "mtu-setter", "mtu": 1300}),
        &policy,
    );
    assert_refused(&run, "expected 1300");
    let run = chain.run(&wasm, "DEL", &conf, &policy);
    assert_eq!(run.code, 0, "DEL: {run:?}");
}

#[test]
fn host_proxy_arp_sets_the_host_veth_setting_under_its_starter_policy() {
    support::require_root();
    let dir = root().join("examples/host-proxy-arp");
    let wasm = build(&dir, "host-proxy-arp");
    let chain = Chain::new(
        "exp",
        json!({"type": "ptp", "ipam": {"type": "static", "addresses": [
            {"address": "10.99.1.2/24", "gateway": "10.99.1.1"}]}}),
    );
    let veth = chain.host_veth();
    let setting = format!("/proc/sys/net/ipv4/conf/{veth}/proxy_arp");
    assert_eq!(chain.node_sysctl(&setting), "0");
    let conf = json!({"type": "host-proxy-arp"});

    let run = chain.run(&wasm, "ADD", &conf, &json!({"plugins": {}}));
    assert_refused(&run, "denied");
    // The container half of its entry alone is not enough.
    let mut no_host = pinned(&dir, "host-proxy-arp", &sha256(&wasm));
    no_host["plugins"]["host-proxy-arp"]
        .as_object_mut()
        .unwrap()
        .remove("host");
    let run = chain.run(&wasm, "ADD", &conf, &no_host);
    assert_refused(&run, "denied");
    assert_eq!(chain.node_sysctl(&setting), "0", "a refused run changed it");

    let policy = pinned(&dir, "host-proxy-arp", &sha256(&wasm));
    let run = chain.run(&wasm, "ADD", &conf, &policy);
    assert_eq!(run.code, 0, "ADD: {run:?}");
    assert_eq!(run.json(), chain.prev, "prevResult passes through");
    assert_eq!(chain.node_sysctl(&setting), "1");
    let run = chain.run(&wasm, "CHECK", &conf, &policy);
    assert_eq!(run.code, 0, "CHECK: {run:?}");
    let run = chain.run(&wasm, "DEL", &conf, &policy);
    assert_eq!(run.code, 0, "DEL: {run:?}");
}

#[test]
fn a_scaffolded_plugin_builds_tests_natively_and_runs() {
    support::require_root();
    let tmp = support::private_tempdir();
    let dir = tmp.path().join("scaffolded");
    // On this checkout's guest-sdk by path, as the examples are (their
    // builds share it); the default, the published SDK, is
    // author_journey's.
    let sdk = std::fs::canonicalize(root().join("guest-sdk")).unwrap();
    let out = Command::new(support::wasmcni())
        .args(["new", "scaffolded", "--dir"])
        .arg(&dir)
        .arg("--sdk")
        .arg(&sdk)
        .output()
        .expect("wasmcni new");
    assert!(out.status.success(), "wasmcni new: {out:?}");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("path = \"{}\"", sdk.display())),
        "{manifest}"
    );
    // Twice into the same place: refused, nothing overwritten.
    let again = Command::new(support::wasmcni())
        .args(["new", "scaffolded", "--dir"])
        .arg(&dir)
        .output()
        .expect("wasmcni new");
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not empty"),
        "{again:?}"
    );

    // Its unit tests run natively; the one that reaches a host call fails
    // with guest-sdk's message (it expects it), not an abort.
    let test = cargo(&dir, &["test", "--target", "host-tuple"]);
    let text = String::from_utf8_lossy(&test.stdout);
    assert!(
        text.contains("host_calls_need_wasmcni - should panic ... ok"),
        "{text}"
    );
    assert!(text.contains("test result: ok. 3 passed"), "{text}");

    // And it does what it says, under its own starter policy.
    let wasm = build(&dir, "scaffolded");
    let chain = Chain::new("exs", bridge());
    let conf = json!({"type": "scaffolded", "alias": "web frontend"});
    let run = chain.run(&wasm, "ADD", &conf, &json!({"plugins": {}}));
    assert_refused(&run, "denied");
    let policy = pinned(&dir, "scaffolded", &sha256(&wasm));
    let run = chain.run(&wasm, "ADD", &conf, &policy);
    assert_eq!(run.code, 0, "ADD: {run:?}");
    assert_eq!(chain.eth0()["ifalias"], "web frontend");
    let run = chain.run(&wasm, "CHECK", &conf, &policy);
    assert_eq!(run.code, 0, "CHECK: {run:?}");
}

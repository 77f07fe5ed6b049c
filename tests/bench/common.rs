//! What the benchmarks share: one side of a comparison (a node namespace,
//! a container namespace, a data dir, a plugin dir) and libcni calls
//! through it.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use super::support;
use support::cni::Call;
use support::Netns;

/// The median (of a non-empty list).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A number from the environment, else `d`.
pub fn env_num(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// One side: a node, a container namespace, a data dir, its plugins.
pub struct Side {
    pub node: Netns,
    pub ctr: Netns,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Side {
    /// A side running the plugins in `bin`; `wasm`: wasmcni's, with a
    /// policy file granting host-local the side's data dir, and the audit
    /// log and state root in the side's dir (not the machine's).
    pub fn new(tag: &str, bin: &Path, wasm: bool) -> Side {
        let node = Netns::new(&format!("{tag}n"));
        node.ip(&["link", "set", "lo", "up"]);
        let ctr = Netns::new(&format!("{tag}c"));
        let dir = support::private_tempdir();
        let mut env = vec![];
        if wasm {
            let policy = dir.path().join("policy.json");
            std::fs::write(
                &policy,
                json!({"plugins": {"host-local": {"ipam-roots": [dir.path().join("data")]}}})
                    .to_string(),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600)).unwrap();
            env.push(("WASMCNI_POLICY".to_owned(), policy.display().to_string()));
            // The audit log stays on, in its usual place's stead.
            env.push((
                "WASMCNI_AUDIT".to_owned(),
                dir.path().join("audit.jsonl").display().to_string(),
            ));
            env.push((
                "WASMCNI_STATE_DIR".to_owned(),
                dir.path().join("state").display().to_string(),
            ));
        }
        Side {
            node,
            ctr,
            dir,
            bin: bin.to_owned(),
            env,
        }
    }

    /// Writes a conflist into the side's dir.
    pub fn write_conflist(&self, file: &str, v: &serde_json::Value) -> PathBuf {
        let p = self.dir.path().join(file);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    /// One libcni call with CNI_ARGS and capability arguments: (the
    /// libcni call alone, the driver process from exec to exit), in ms.
    /// Panics if it fails.
    #[allow(clippy::too_many_arguments)]
    pub fn call_caps(
        &self,
        cmd: &str,
        conflist: &Path,
        ctr: &Netns,
        cid: &str,
        ifname: &str,
        args: &str,
        capargs: &str,
    ) -> (f64, f64) {
        let t = Instant::now();
        let d = Call {
            node: &self.node,
            bin: &self.bin,
            cmd,
            conflist,
            netns: &ctr.path,
            cid,
            ifname,
            cache: &self.dir.path().join("cache"),
            args,
            capargs,
            env: &self.env,
        }
        .run_setns();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(d.code, 0, "{cmd} {cid}: {d:?}");
        let libcni = d.elapsed_us.expect("the driver's -timing line") as f64 / 1e3;
        (libcni, ms)
    }
}

/// Checks root, installs the wasmcni under test (`WASMCNI_BIN`, else this
/// build's) into a fresh bin dir and builds the libcni driver: (the dir
/// holding it, the bin dir).
pub fn install_wasmcni() -> (tempfile::TempDir, PathBuf) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the benchmark needs root (network namespaces)"
    );
    let wasmcni = under_test();
    let work = support::private_tempdir();
    let bin = work.path().join("bin");
    let out = std::process::Command::new(&wasmcni)
        .arg("install")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "wasmcni install: {out:?}");
    support::cni::driver();
    (work, bin)
}

/// The wasmcni under test: `WASMCNI_BIN` (`make bench` points it at a copy
/// of the release build), else this build's. Printed.
pub fn under_test() -> PathBuf {
    let wasmcni = std::env::var_os("WASMCNI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_wasmcni")));
    println!("wasmcni under test: {}", wasmcni.display());
    wasmcni
}

/// Fails unless every one of `tools` is on the PATH; `hint` says how to
/// install them.
pub fn require_tools(tools: &[&str], hint: &str) {
    for tool in tools {
        assert!(
            std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "the benchmark needs {tool} ({hint})"
        );
    }
}

/// Medians of interleaved ADD/DEL pairs, each (libcni call, driver
/// process) in ms.
pub struct Pairs {
    pub ref_add: (f64, f64),
    pub was_add: (f64, f64),
    pub ref_del: (f64, f64),
    pub was_del: (f64, f64),
}

/// `runs` ADD/DEL pairs of containers `c0..`, the reference (`r`, its
/// conflist) and wasmcni (`w`) taking turns, the order alternating;
/// `call(side, conflist, cmd, cid)` makes one libcni call. Prints the
/// medians and ratios under `title`.
pub fn interleave(
    runs: usize,
    title: &str,
    r: (&Side, &Path),
    w: (&Side, &Path),
    call: impl Fn(&Side, &Path, &str, &str) -> (f64, f64),
) -> Pairs {
    let m = interleave_n(
        runs,
        title,
        &[("wasmcni", w.0, w.1), ("reference", r.0, r.1)],
        call,
    );
    Pairs {
        ref_add: m[1].0,
        was_add: m[0].0,
        ref_del: m[1].1,
        was_del: m[0].1,
    }
}

/// [`interleave`] for any number of sides, the last being the reference
/// every ratio is against: for each container, every side's ADD in an
/// order that rotates, then every side's DEL in the same order. Answers
/// each side's (ADD, DEL) medians, each (libcni call, driver process).
pub fn interleave_n(
    runs: usize,
    title: &str,
    sides: &[(&str, &Side, &Path)],
    call: impl Fn(&Side, &Path, &str, &str) -> (f64, f64),
) -> Vec<((f64, f64), (f64, f64))> {
    let n = sides.len();
    let mut adds = vec![Vec::new(); n];
    let mut dels = vec![Vec::new(); n];
    for i in 0..runs {
        let cid = format!("c{i}");
        let order: Vec<usize> = (0..n).map(|k| (i + k) % n).collect();
        for &k in &order {
            adds[k].push(call(sides[k].1, sides[k].2, "add", &cid));
        }
        for &k in &order {
            dels[k].push(call(sides[k].1, sides[k].2, "del", &cid));
        }
    }
    let split = |v: Vec<(f64, f64)>| -> (f64, f64) {
        let (a, b): (Vec<f64>, Vec<f64>) = v.into_iter().unzip();
        (median(a), median(b))
    };
    let m: Vec<((f64, f64), (f64, f64))> = adds
        .into_iter()
        .zip(dels)
        .map(|(a, d)| (split(a), split(d)))
        .collect();
    let reference = m[n - 1];
    println!("{title}, {runs} interleaved ADD/DEL pairs, medians");
    for (what, pick) in [
        ("the libcni call (what a runtime waits for)", 0usize),
        (
            "the driver process, exec to exit (adds the Go driver's own start-up)",
            1,
        ),
    ] {
        println!("  {what}:");
        for (cmd, col) in [("ADD", 0usize), ("DEL", 1)] {
            let get = |x: &((f64, f64), (f64, f64))| {
                let pair = if col == 0 { x.0 } else { x.1 };
                if pick == 0 {
                    pair.0
                } else {
                    pair.1
                }
            };
            let r = get(&reference);
            let mut line = format!("    {cmd}:");
            for (k, (name, _, _)) in sides.iter().enumerate() {
                let v = get(&m[k]);
                if k == n - 1 {
                    line.push_str(&format!("  {name} {v:6.2} ms"));
                } else {
                    line.push_str(&format!("  {name} {v:6.2} ms ({:.2}x)", v / r));
                }
            }
            println!("{line}");
        }
    }
    m
}

/// Prints each floor as PASS or FAIL, and exits 1 if any failed.
pub fn verdict(checks: &[(&str, bool)]) {
    let mut ok = true;
    for (what, pass) in checks {
        println!("  {} {what}", if *pass { "PASS" } else { "FAIL" });
        ok &= pass;
    }
    if !ok {
        std::process::exit(1);
    }
}

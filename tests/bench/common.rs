//! What the benchmarks share: one side of a comparison (a node namespace,
//! a container namespace, a data dir, a plugin dir) and libcni calls
//! through it.

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
    let wasmcni = std::env::var_os("WASMCNI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_wasmcni")));
    println!("wasmcni under test: {}", wasmcni.display());
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
    let call = |(s, l): (&Side, &Path), cmd: &str, cid: &str| call(s, l, cmd, cid);
    let (mut ra, mut wa, mut rd, mut wd) = (vec![], vec![], vec![], vec![]);
    for i in 0..runs {
        let cid = format!("c{i}");
        if i % 2 == 0 {
            ra.push(call(r, "add", &cid));
            wa.push(call(w, "add", &cid));
            rd.push(call(r, "del", &cid));
            wd.push(call(w, "del", &cid));
        } else {
            wa.push(call(w, "add", &cid));
            ra.push(call(r, "add", &cid));
            wd.push(call(w, "del", &cid));
            rd.push(call(r, "del", &cid));
        }
    }
    let split = |v: Vec<(f64, f64)>| -> (f64, f64) {
        let (a, b): (Vec<f64>, Vec<f64>) = v.into_iter().unzip();
        (median(a), median(b))
    };
    let p = Pairs {
        ref_add: split(ra),
        was_add: split(wa),
        ref_del: split(rd),
        was_del: split(wd),
    };
    let line = |what: &str, w: f64, r: f64| {
        println!(
            "    {what}: wasmcni {w:6.2} ms  reference {r:6.2} ms  ratio {:.2}x",
            w / r
        )
    };
    println!("{title}, {runs} interleaved ADD/DEL pairs, medians");
    println!("  the libcni call (what a runtime waits for):");
    line("ADD", p.was_add.0, p.ref_add.0);
    line("DEL", p.was_del.0, p.ref_del.0);
    println!("  the driver process, exec to exit (adds the Go driver's own start-up):");
    line("ADD", p.was_add.1, p.ref_add.1);
    line("DEL", p.was_del.1, p.ref_del.1);
    p
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

//! The soak (issue 48): containerd's CRI, as tests/cri.rs runs it (in a
//! sandbox of its own: tests/cri/sandbox.sh), driven by a seeded random
//! mix of pods and faults (tests/cri/soak.py, which says what it checks
//! after every step and at the end). `make soak DURATION=… SEED=…` runs
//! it longer, on the release build.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The soak's seconds in `make test` (`make soak DURATION=…` runs it
/// longer, tests/cri/soak.py): about three minutes.
const SOAK_SECONDS: u32 = 150;

/// The soak (tests/cri/soak.py), short and seeded: containerd driven by a
/// random mix of pods (some with a hostPort, some with bandwidth limits)
/// while faults strike at random moments — containerd killed and
/// restarted, a wasmcni process killed mid-ADD and mid-DEL, a namespace
/// gone before its DEL, the state directory full, bridge's policy entry
/// broken, `wasmcni gc` beside ADDs — each at least once. After every
/// step the node holds what the live pods need and nothing of the others;
/// at the end nothing at all, every ADD and DEL audited, containerd's
/// open files and memory steady. `WASMCNI_SOAK_SEED` picks another seed.
#[test]
fn wasmcni_soak_of_pods_and_faults_leaves_nothing() {
    support::require_cri();
    // The seed changes what runs, not how much.
    #[allow(clippy::disallowed_methods)]
    let seed: u64 = std::env::var("WASMCNI_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48);
    let work = support::private_tempdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cri/sandbox.sh");
    let t = std::time::Instant::now();
    let out = Command::new("unshare")
        .args(["-n", "-m"])
        .arg(&script)
        .arg(support::wasmcni())
        .arg(work.path())
        .args(["soak", &seed.to_string(), &SOAK_SECONDS.to_string()])
        .env("WASMCNI_CACHE_DIR", support::cache_dir())
        .output()
        .expect("running containerd in a sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = || {
        let tail: Vec<&str> = stdout.lines().rev().take(60).collect();
        format!(
            "sandbox {}\n{}\n{stderr}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    };
    assert!(
        out.status.success(),
        "the soak's sandbox failed:\n{}",
        context()
    );
    let summary: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("soak "))
        .map(|j| serde_json::from_str(j).expect("the soak's summary"))
        .unwrap_or_else(|| panic!("no soak summary:\n{}", context()));
    eprintln!(
        "soak (seed {seed}): {:.1} s\n{}",
        t.elapsed().as_secs_f64(),
        serde_json::to_string_pretty(&summary).unwrap()
    );
    assert_eq!(
        summary["problem-count"],
        0,
        "the soak found problems (seed {seed}):\n{}\n{}",
        serde_json::to_string_pretty(&summary["problems"]).unwrap(),
        context()
    );
    for kind in [
        "restart",
        "kill-add",
        "kill-del",
        "netns-gone",
        "disk-full",
        "policy",
        "gc",
    ] {
        assert!(
            summary["faults"][kind].as_u64().unwrap_or(0) >= 1,
            "the soak never injected {kind} (seed {seed}): {summary}"
        );
    }
    assert!(
        summary["pods"].as_u64().unwrap_or(0) >= 20,
        "the soak ran too few pods to mean much: {summary}"
    );
}

//! Benchmark: a pod's whole network lifetime through a real Kubernetes
//! runtime — RunPodSandbox, StopPodSandbox and RemovePodSandbox over the
//! CRI API of Debian's containerd 1.6 (tests/cri/: the sandbox script and
//! the CRI client tests/cri.rs uses) — with the network bridge (isGateway,
//! ipMasq) + host-local + portmap + bandwidth + tuning served by an
//! installed wasmcni bin dir and by the reference Go plugins. Two
//! containerds (one per side, each with its own root, socket, bin dir and
//! network) run in one sandbox (`unshare -n -m`); the sides take turns
//! pod by pod, the order alternating. Each call is timed by the client
//! around the gRPC call: what the kubelet waits for, containerd's and
//! runc's own work included.
//!
//! Run: `make bench` (as root), or `cargo bench -p wasmcni --bench cri`
//! with `WASMCNI_BIN` pointing at the release executable.
//! Options (env): `BENCH_RUNS` (pods per side, default 30),
//! `BENCH_CRI_HOSTPORT=1` (each pod with a hostPort and bandwidth
//! annotations, so portmap and bandwidth get capability arguments; by
//! default a plain pod, as most are).
//!
//! Prints the medians of each call and of the three together, and the
//! ratios wasmcni / reference. Target: the whole ≤ 0.9× the reference.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{env_num, median, verdict};

fn main() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the benchmark needs root (namespaces, containerd)"
    );
    let wasmcni = common::under_test();
    let runs = env_num("BENCH_RUNS", 30);
    let hostport = std::env::var("BENCH_CRI_HOSTPORT").is_ok_and(|v| v == "1");
    let work = support::private_tempdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cri/sandbox.sh");
    let out = Command::new("unshare")
        .args(["-n", "-m"])
        .arg(&script)
        .arg(&wasmcni)
        .arg(work.path())
        .args(["bench", &runs.to_string()])
        // The installed plugins compile into the bin dir, as on a node.
        .env_remove("WASMCNI_CACHE_DIR")
        .env(
            "WASMCNI_BENCH_CRI_HOSTPORT",
            if hostport { "1" } else { "0" },
        )
        .output()
        .expect("running containerd in a sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // side -> call -> times (ms)
    let mut times: BTreeMap<String, BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for line in stdout.lines() {
        if let Some(j) = line.strip_prefix("bench-left ") {
            panic!("pods left something behind: {j}");
        }
        let Some(j) = line.strip_prefix("bench ") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(j).unwrap();
        let side = v["side"].as_str().unwrap().to_owned();
        let calls = times.entry(side).or_default();
        let mut total = 0.0;
        for call in ["run", "stop", "remove"] {
            let ms = v[call].as_f64().unwrap();
            total += ms;
            calls.entry(call).or_default().push(ms);
        }
        calls.entry("total").or_default().push(total);
    }
    let med = |side: &str, call: &str| -> f64 {
        median(
            times
                .get(side)
                .and_then(|c| c.get(call))
                .cloned()
                .unwrap_or_else(|| panic!("no {side} {call} times in:\n{stdout}\n{stderr}")),
        )
    };
    println!(
        "containerd 1.6 CRI, {runs} pods per side ({}), interleaved, medians:",
        if hostport {
            "each with a hostPort and bandwidth annotations"
        } else {
            "plain pods"
        }
    );
    for (call, what) in [
        ("run", "RunPodSandbox"),
        ("stop", "StopPodSandbox"),
        ("remove", "RemovePodSandbox"),
        ("total", "the three"),
    ] {
        let (w, r) = (med("wasmcni", call), med("reference", call));
        println!(
            "  {what:<17} wasmcni {w:7.1} ms  reference {r:7.1} ms  ({:.2}x)",
            w / r
        );
    }
    let ratio = med("wasmcni", "total") / med("reference", "total");
    verdict(&[("Run + Stop + Remove <= 0.9x reference", ratio <= 0.9)]);
}

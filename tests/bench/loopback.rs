//! Benchmark: loopback ADD through wasmcni vs the reference Go `loopback`,
//! whole-process (exec to exit), interleaved in one run.
//!
//! Run: `cargo bench -p wasmcni --bench loopback` (as root; `make bench`).
//! Options (env): `BENCH_RUNS` (warm pairs, default 200), `BENCH_COLD`
//! (first runs, default 5).
//!
//! Prints medians (and p90) of wall time per ADD, the ratio wasmcni /
//! reference, the first run without a precompiled artifact, and peak RSS
//! (`ru_maxrss` of each child) of both. Checks the floors: warm ADD ≤
//! 0.8× reference and peak RSS ≤ 1.3× reference (issue 26; issue 2's were
//! 1.0× and 2×), first run ≤ 150 ms (issue 2).
#![allow(clippy::disallowed_methods)] // a test reads its own environment

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use common::{env_num, median};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONF: &[u8] = br#"{"cniVersion":"1.0.0","name":"bench-net","type":"loopback"}"#;

struct Sample {
    wall: Duration,
    max_rss_kib: i64,
}

/// Runs one ADD of `exe` in `netns` and measures it.
// The child is reaped with wait4 (to read its rusage), not Child::wait.
#[allow(clippy::zombie_processes)]
fn add(exe: &Path, netns: &Path, extra_env: &[(&str, &Path)]) -> Sample {
    let start = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "bench-ctr")
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "lo")
        .env("CNI_PATH", exe.parent().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
    child.stdin.take().unwrap().write_all(CONF).unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(r, pid, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{exe:?} ADD failed"
    );
    Sample {
        wall,
        max_rss_kib: usage.ru_maxrss,
    }
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the benchmark needs root (network namespaces)"
    );
    let runs = env_num("BENCH_RUNS", 200);
    let cold_runs = env_num("BENCH_COLD", 5);
    let reference = PathBuf::from("/usr/lib/cni/loopback");
    assert!(reference.is_file(), "install containernetworking-plugins");

    // Not under /tmp: wasmcni refuses a state root others can write.
    let work = support::private_tempdir();
    let bin = work.path().join("bin");
    // The executable users install is `cargo build --release`'s; `cargo
    // bench` builds its own with dev-dependency features unified, which
    // changes symbol names (and so the hot-symbol link order), and it
    // overwrites target/x86_64-unknown-linux-gnu/release/wasmcni. `make
    // bench` points WASMCNI_BIN at a copy of the release build.
    let wasmcni = common::under_test();
    let out = Command::new(&wasmcni)
        .arg("install")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "wasmcni install: {out:?}");
    let ours = bin.join("loopback");

    let ns_name = format!("wcni-bench-{}", std::process::id());
    assert!(Command::new("ip")
        .args(["netns", "add", &ns_name])
        .status()
        .unwrap()
        .success());
    let netns = PathBuf::from("/run/netns").join(&ns_name);

    // wasmcni audits and keeps records as on a node, but in the work
    // directory: never the machine's /var/log/wasmcni or /var/lib/wasmcni.
    let (audit, state) = (work.path().join("audit.jsonl"), work.path().join("state"));
    let env = [("WASMCNI_AUDIT", &*audit), ("WASMCNI_STATE_DIR", &*state)];

    // First runs: an empty artifact cache each time (compile + store).
    let mut cold = Vec::new();
    for i in 0..cold_runs {
        let cache = work.path().join(format!("cold-cache-{i}"));
        cold.push(
            add(
                &ours,
                &netns,
                &[env[0], env[1], ("WASMCNI_CACHE_DIR", &cache)],
            )
            .wall
            .as_secs_f64()
                * 1e3,
        );
    }

    // Warm-up, then interleaved pairs.
    for _ in 0..5 {
        add(&ours, &netns, &env);
        add(&reference, &netns, &[]);
    }
    let (mut w, mut r, mut w_rss, mut r_rss) = (vec![], vec![], vec![], vec![]);
    for i in 0..runs {
        // Alternate which goes first, so neither always runs on a warmer cache.
        let (a, b) = if i % 2 == 0 {
            (add(&ours, &netns, &env), add(&reference, &netns, &[]))
        } else {
            let b = add(&reference, &netns, &[]);
            (add(&ours, &netns, &env), b)
        };
        w.push(a.wall.as_secs_f64() * 1e3);
        r.push(b.wall.as_secs_f64() * 1e3);
        w_rss.push(a.max_rss_kib as f64 / 1024.0);
        r_rss.push(b.max_rss_kib as f64 / 1024.0);
    }
    let _ = Command::new("ip").args(["netns", "del", &ns_name]).status();

    let (wm, rm) = (median(w.clone()), median(r.clone()));
    let (wrss, rrss) = (median(w_rss.clone()), median(r_rss.clone()));
    let wrss_max = w_rss.iter().cloned().fold(0.0, f64::max);
    let cold_m = median(cold.clone());
    println!("loopback ADD, whole process, {runs} interleaved pairs (+{cold_runs} first runs)");
    println!("  wasmcni   warm: median {wm:7.2} ms  p90 {:7.2} ms  peak RSS median {wrss:5.1} MiB (max {wrss_max:.1})", pct(w, 0.9));
    println!(
        "  reference warm: median {rm:7.2} ms  p90 {:7.2} ms  peak RSS median {rrss:5.1} MiB",
        pct(r, 0.9)
    );
    println!("  wasmcni first run (no artifact: compile + store): median {cold_m:.1} ms  (all: {cold:.1?})");
    println!(
        "  ratio wasmcni/reference: time {:.2}x, peak RSS {:.2}x",
        wm / rm,
        wrss / rrss
    );
    common::verdict(&[
        ("warm ADD <= 0.8x reference", wm <= 0.8 * rm),
        ("first run <= 150 ms", cold_m <= 150.0),
        ("peak RSS <= 1.3x reference", wrss <= 1.3 * rrss),
    ]);
}

//! Benchmark: `podman run --rm` with Debian's podman (4.3, CNI backend) on
//! a bridge + host-local network, its plugins wasmcni's (an installed bin
//! dir) or the reference's (`/usr/lib/cni`), interleaved in one run, with
//! `--network none` beside them (podman and runc alone). Two variants of
//! the network: `plain` (bridge with `isGateway`, host-local: the issue's
//! row) and `default` (the list `podman network create` writes: bridge
//! with `ipMasq` and `hairpinMode`, portmap, firewall, tuning; the
//! container publishes a port, `-p 18080:80`; the reference's plugins
//! exec iptables for their rules, wasmcni's make nftables transactions).
//! The runs are `tests/bench/podman.sh`'s, in network and
//! mount namespaces of their own: podman's, CNI's and wasmcni's paths are
//! tmpfs mounts there, over the machine's directories. A run counts only
//! when podman reported no error (its network cleanup, the DEL, only logs
//! one) and wasmcni's audit log shows that wasmcni served the wasmcni
//! side's runs and no other.
//!
//! Run: `make bench` (as root), or `cargo bench -p wasmcni --bench podman`
//! with `WASMCNI_BIN` pointing at the release executable.
//! Options (env): `BENCH_RUNS` (runs per variant and side, default 40).
//!
//! Prints the medians of the whole `podman run` process (exec to exit:
//! what a user waits for) and the ratios; checks the floor
//! (wasmcni ≤ 0.85× the reference, on each variant).
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
        "the benchmark needs root (network and mount namespaces)"
    );
    common::require_tools(
        &["podman", "runc", "busybox", "unshare", "nft"],
        "apt-get install podman runc busybox-static nftables",
    );
    let runs = env_num("BENCH_RUNS", 40);
    let wasmcni = common::under_test();
    let work = support::private_tempdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/bench/podman.sh");
    let out = Command::new("unshare")
        .args(["-n", "-m"])
        .arg(&script)
        .arg(&wasmcni)
        .arg(work.path().join("bin"))
        .arg(work.path())
        .arg(runs.to_string())
        .output()
        .expect("running podman.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "podman.sh failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // (variant, side) -> each run's ms.
    let mut times: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut left = None;
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["left", ..] => left = Some(line.to_owned()),
            [variant, side, ms] => times
                .entry((variant.to_string(), side.to_string()))
                .or_default()
                .push(ms.parse().expect("a time in ms")),
            _ => panic!("podman.sh: unexpected line {line:?}"),
        }
    }
    let left = left.expect("podman.sh's last line");
    println!(
        "`podman run --rm ... /bin/true`, {runs} runs per variant and side, interleaved; \
         medians, the podman process from exec to exit"
    );
    let mut checks = vec![];
    for variant in ["plain", "default"] {
        let m = |side: &str| {
            let v = times
                .get(&(variant.to_owned(), side.to_owned()))
                .unwrap_or_else(|| panic!("no {variant} {side} runs:\n{stdout}"));
            assert_eq!(v.len(), runs, "{variant} {side}: {} runs", v.len());
            median(v.clone())
        };
        let (w, r, none) = (m("wasmcni"), m("reference"), m("none"));
        println!(
            "  {variant:7}: wasmcni {w:7.2} ms  reference {r:7.2} ms  ratio {:.2}x  \
             (--network none {none:7.2} ms; the network's part: wasmcni {:.2} ms, \
             reference {:.2} ms)",
            w / r,
            w - none,
            r - none
        );
        checks.push((
            format!("{variant}: podman run --rm <= 0.85x the reference"),
            w <= 0.85 * r,
        ));
    }
    println!("  after the runs: {left}");
    checks.push((
        "no veth, container, reservation or wasmcni record left; the firewall rules as before"
            .to_owned(),
        left == "left veths 0 containers 0 reservations 0 records 0 same-rules yes",
    ));
    let checks: Vec<(&str, bool)> = checks.iter().map(|(s, b)| (s.as_str(), *b)).collect();
    // verdict exits the process on a miss: remove the work dir first.
    drop(work);
    verdict(&checks);
}

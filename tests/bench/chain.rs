//! Benchmark: the chain podman writes for a network — bridge (ipMasq,
//! hairpinMode) + host-local + portmap + firewall + tuning — through the
//! real libcni (tests/libcni/ driver, one exec per plugin), ADD and DEL of
//! the whole chain with a port mapping, wasmcni vs the reference Go
//! plugins, interleaved in one run, each side on a node namespace of its
//! own.
//!
//! Run: `make bench` (as root), or `cargo bench -p wasmcni --bench chain`
//! with `WASMCNI_BIN` pointing at the release executable.
//! Options (env): `BENCH_RUNS` (interleaved ADD/DEL pairs, default 100).
//!
//! Prints the ADD and DEL medians of the libcni call (what a runtime
//! waits for) and of the driver process, and the ratios. Floors checked:
//! ADD ≤ 0.8× and DEL ≤ 0.8× the reference.

#[path = "common.rs"]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{env_num, median, Side};
use serde_json::json;

/// The chain, as podman 4.3's CNI backend writes it for a network.
fn podman_chain(side: &Side) -> PathBuf {
    side.write_conflist(
        "chain.conflist",
        &json!({"cniVersion": "1.0.0", "name": "benchchain", "plugins": [
            {"type": "bridge", "bridge": "cnichain0", "isGateway": true, "ipMasq": true,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": "10.43.0.0/24", "gateway": "10.43.0.1"}]],
                      "dataDir": side.dir.path().join("data")}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"}]}),
    )
}

/// The node's firewall (nftables, which holds iptables-nft's tables too),
/// without counters: the same before the run and after it, or the run
/// leaked.
fn firewall_state(node: &support::Netns) -> String {
    node.nft(&["-s", "list", "ruleset"])
}

fn main() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the benchmark needs root (network namespaces)"
    );
    let runs = env_num("BENCH_RUNS", 100);
    let wasmcni = std::env::var_os("WASMCNI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_wasmcni")));
    println!("wasmcni under test: {}", wasmcni.display());
    let work = support::private_tempdir();
    let bin = work.path().join("bin");
    let out = Command::new(&wasmcni)
        .arg("install")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "wasmcni install: {out:?}");
    support::cni::driver();

    let r = Side::new("cref", Path::new("/usr/lib/cni"), false);
    let w = Side::new("cwas", &bin, true);
    let (rl, wl) = (podman_chain(&r), podman_chain(&w));
    let caps = json!({"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8443, "containerPort": 443, "protocol": "tcp"}]})
    .to_string();
    let call = |s: &Side, l: &Path, cmd: &str, cid: &str| {
        s.call_caps(cmd, l, &s.ctr, cid, "eth0", "", &caps)
    };
    for (s, l) in [(&r, &rl), (&w, &wl)] {
        // Warm-up (the bridge's creation, the reference's chains, the
        // artifact cache) outside the measurement.
        call(s, l, "add", "warm");
        call(s, l, "del", "warm");
    }
    let before = [firewall_state(&r.node), firewall_state(&w.node)];
    let (mut ra, mut wa, mut rd, mut wd) = (vec![], vec![], vec![], vec![]);
    for i in 0..runs {
        let cid = format!("c{i}");
        if i % 2 == 0 {
            ra.push(call(&r, &rl, "add", &cid));
            wa.push(call(&w, &wl, "add", &cid));
            rd.push(call(&r, &rl, "del", &cid));
            wd.push(call(&w, &wl, "del", &cid));
        } else {
            wa.push(call(&w, &wl, "add", &cid));
            ra.push(call(&r, &rl, "add", &cid));
            wd.push(call(&w, &wl, "del", &cid));
            rd.push(call(&r, &rl, "del", &cid));
        }
    }
    // Every DEL removed what its ADD installed, on both sides.
    let after = [firewall_state(&r.node), firewall_state(&w.node)];
    for (k, who) in ["reference", "wasmcni"].iter().enumerate() {
        assert_eq!(
            before[k], after[k],
            "{who}: the firewall after {runs} ADD/DEL pairs differs from before"
        );
    }
    let split = |v: Vec<(f64, f64)>| -> (f64, f64) {
        let (a, b): (Vec<f64>, Vec<f64>) = v.into_iter().unzip();
        (median(a), median(b))
    };
    let ((ram, rap), (wam, wap), (rdm, rdp), (wdm, wdp)) =
        (split(ra), split(wa), split(rd), split(wd));
    println!(
        "bridge (ipMasq) + host-local + portmap (2 mappings) + firewall + tuning through libcni, \
         {runs} interleaved ADD/DEL pairs of the whole chain, medians"
    );
    println!("  the libcni call (what a runtime waits for):");
    println!(
        "    ADD: wasmcni {wam:6.2} ms  reference {ram:6.2} ms  ratio {:.2}x",
        wam / ram
    );
    println!(
        "    DEL: wasmcni {wdm:6.2} ms  reference {rdm:6.2} ms  ratio {:.2}x",
        wdm / rdm
    );
    println!("  the driver process, exec to exit (adds the Go driver's own start-up):");
    println!(
        "    ADD: wasmcni {wap:6.2} ms  reference {rap:6.2} ms  ratio {:.2}x",
        wap / rap
    );
    println!(
        "    DEL: wasmcni {wdp:6.2} ms  reference {rdp:6.2} ms  ratio {:.2}x",
        wdp / rdp
    );
    drop((r, w));
    let checks = [
        ("ADD <= 0.8x reference", wam <= 0.8 * ram),
        ("DEL <= 0.8x reference", wdm <= 0.8 * rdm),
    ];
    let mut ok = true;
    for (what, pass) in checks {
        println!("  {} {what}", if pass { "PASS" } else { "FAIL" });
        ok &= pass;
    }
    if !ok {
        std::process::exit(1);
    }
}

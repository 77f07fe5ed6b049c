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
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::path::{Path, PathBuf};

use common::{env_num, install_wasmcni, interleave, verdict, Side};
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
    let runs = env_num("BENCH_RUNS", 100);
    let (_work, bin) = install_wasmcni();

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
    let p = interleave(
        runs,
        "bridge (ipMasq) + host-local + portmap (2 mappings) + firewall + tuning through libcni, \
         the whole chain",
        (&r, &rl),
        (&w, &wl),
        call,
    );
    // Every DEL removed what its ADD installed, on both sides.
    let after = [firewall_state(&r.node), firewall_state(&w.node)];
    for (k, who) in ["reference", "wasmcni"].iter().enumerate() {
        assert_eq!(
            before[k], after[k],
            "{who}: the firewall after {runs} ADD/DEL pairs differs from before"
        );
    }
    drop((r, w));
    verdict(&[
        ("ADD <= 0.8x reference", p.was_add.0 <= 0.8 * p.ref_add.0),
        ("DEL <= 0.8x reference", p.was_del.0 <= 0.8 * p.ref_del.0),
    ]);
}

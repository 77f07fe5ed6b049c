//! Benchmark: the chain podman writes for a network — bridge (ipMasq,
//! hairpinMode) + host-local + portmap + firewall + tuning — through the
//! real libcni (tests/libcni/ driver), ADD and DEL of the whole chain with
//! a port mapping: wasmcni with one exec per plugin, the same members as
//! one `wasmcni-chain` plugin (one exec), and the reference Go plugins,
//! interleaved in one run, each side on a node namespace of its own.
//!
//! Run: `make bench` (as root), or `cargo bench -p wasmcni --bench chain`
//! with `WASMCNI_BIN` pointing at the release executable.
//! Options (env): `BENCH_RUNS` (interleaved ADD/DEL pairs, default 100).
//!
//! Prints the ADD and DEL medians of the libcni call (what a runtime
//! waits for) and of the driver process, and the ratios. Floors checked
//! (issue 26): ADD ≤ 0.4× and DEL ≤ 0.25× the reference for the list (one
//! exec per plugin), and the chain runner at most the list's.

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::path::{Path, PathBuf};

use common::{env_num, install_wasmcni, interleave_n, verdict, Side};
use serde_json::json;

/// The chain's members, as podman 4.3's CNI backend writes them for a
/// network.
fn podman_members(side: &Side) -> serde_json::Value {
    json!([
        {"type": "bridge", "bridge": "cnichain0", "isGateway": true, "ipMasq": true,
         "hairpinMode": true,
         "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                  "ranges": [[{"subnet": "10.43.0.0/24", "gateway": "10.43.0.1"}]],
                  "dataDir": side.dir.path().join("data")}},
        {"type": "portmap", "capabilities": {"portMappings": true}},
        {"type": "firewall", "backend": ""},
        {"type": "tuning"}])
}

/// The chain as a conflist (one exec per plugin).
fn podman_chain(side: &Side) -> PathBuf {
    side.write_conflist(
        "chain.conflist",
        &json!({"cniVersion": "1.0.0", "name": "benchchain", "plugins": podman_members(side)}),
    )
}

/// The same members as one `wasmcni-chain` plugin.
fn podman_chain_runner(side: &Side) -> PathBuf {
    side.write_conflist(
        "runner.conflist",
        &json!({"cniVersion": "1.0.0", "name": "benchchain", "plugins": [
            {"type": "wasmcni-chain", "capabilities": {"portMappings": true},
             "plugins": podman_members(side)}]}),
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
    let c = Side::new("cchn", &bin, true);
    let (rl, wl, cl) = (podman_chain(&r), podman_chain(&w), podman_chain_runner(&c));
    let caps = json!({"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8443, "containerPort": 443, "protocol": "tcp"}]})
    .to_string();
    let call = |s: &Side, l: &Path, cmd: &str, cid: &str| {
        s.call_caps(cmd, l, &s.ctr, cid, "eth0", "", &caps)
    };
    for (s, l) in [(&r, &rl), (&w, &wl), (&c, &cl)] {
        // Warm-up (the bridge's creation, the reference's chains, the
        // artifact cache) outside the measurement.
        call(s, l, "add", "warm");
        call(s, l, "del", "warm");
    }
    let nodes = [&r.node, &w.node, &c.node];
    let before: Vec<String> = nodes.iter().map(|n| firewall_state(n)).collect();
    let m = interleave_n(
        runs,
        "bridge (ipMasq) + host-local + portmap (2 mappings) + firewall + tuning through libcni, \
         the whole chain",
        &[
            ("wasmcni list", &w, &wl),
            ("wasmcni-chain", &c, &cl),
            ("reference", &r, &rl),
        ],
        call,
    );
    // Every DEL removed what its ADD installed, on every side.
    let after: Vec<String> = nodes.iter().map(|n| firewall_state(n)).collect();
    for (k, who) in ["reference", "wasmcni list", "wasmcni-chain"]
        .iter()
        .enumerate()
    {
        assert_eq!(
            before[k], after[k],
            "{who}: the firewall after {runs} ADD/DEL pairs differs from before"
        );
    }
    drop((r, w, c));
    let (list, runner, reference) = (m[0], m[1], m[2]);
    verdict(&[
        (
            "list ADD <= 0.4x reference",
            list.0 .0 <= 0.4 * reference.0 .0,
        ),
        (
            "list DEL <= 0.25x reference",
            list.1 .0 <= 0.25 * reference.1 .0,
        ),
        ("wasmcni-chain ADD <= the list's", runner.0 .0 <= list.0 .0),
        ("wasmcni-chain DEL <= the list's", runner.1 .0 <= list.1 .0),
    ]);
}

//! Benchmark: a container's network through netavark (2.1.0, built by
//! tests/netavark/setup), setup then teardown, on a network served by
//! wasmcni as a netavark plugin (bridge + host-local + portmap, one
//! `wasmcni-chain` run per call) against one of netavark's own bridge
//! driver, each with a static IP (as Podman assigns it) and a published
//! port, interleaved in one run, each side on a node namespace of its own.
//!
//! Run: `make bench` (as root), or `cargo bench -p wasmcni --bench netavark`
//! with `WASMCNI_BIN` pointing at the release executable.
//! Options (env): `BENCH_RUNS` (setup/teardown pairs per side, default 50),
//! `WASMCNI_NETAVARK` (the netavark executable).
//!
//! Prints the medians of setup, teardown and the two together (each the
//! netavark process, exec to exit, as Podman waits for it) and the ratios.
//! The aim, checked: setup + teardown no slower than netavark's
//! own bridge driver.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{env_num, install_wasmcni, median, verdict, Side};
use serde_json::{json, Value};

/// One side: its node, its network as netavark's input wants it.
struct Bench {
    side: Side,
    network: Value,
    subnet: &'static str,
}

impl Bench {
    fn options(&self, cid: &str, ip: &str) -> Value {
        let name = self.network["name"].as_str().expect("name");
        json!({
            "container_id": cid, "container_name": cid,
            "networks": {name: {"interface_name": "eth0", "static_ips": [ip]}},
            "network_info": {name: self.network},
            "port_mappings": [{"container_port": 80, "host_ip": "", "host_port": 18080,
                               "protocol": "tcp", "range": 1}]})
    }

    /// Runs netavark `cmd` in the side's node; its wall time in ms.
    fn netavark(&self, bin: &Path, cmd: &str, opts: &Value) -> f64 {
        let node = std::fs::File::open(&self.side.node.path).expect("node netns");
        let mut c = Command::new(support::netavark());
        c.arg("--config")
            .arg(self.side.dir.path().join("netavark"))
            .args(["--rootless", "false", "--firewall-driver", "nftables"])
            .arg("--plugin-directory")
            .arg(bin)
            .arg(cmd)
            .arg(&self.side.ctr.path)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("WASMCNI_RUN_DIR", self.side.dir.path().join("run"))
            .envs(self.side.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let fd = node.as_raw_fd();
        // SAFETY: setns(2) only, between fork and exec.
        unsafe {
            c.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let t = Instant::now();
        let mut child = c.spawn().expect("netavark");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(opts.to_string().as_bytes())
            .expect("netavark's stdin");
        let out = child.wait_with_output().expect("netavark");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(
            out.status.success(),
            "netavark {cmd} on {}: {}{}",
            self.network["name"],
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ms
    }
}

fn main() {
    let (_work, bin) = install_wasmcni();
    let runs = env_num("BENCH_RUNS", 50);
    let w = Side::new("bnvw", &bin, true);
    let conflist = w.write_conflist(
        "devnet.conflist",
        &json!({"cniVersion": "1.0.0", "name": "benchnv", "plugins": [
            {"type": "bridge", "bridge": "cni-bnv0", "isGateway": true,
             "capabilities": {"ips": true},
             "ipam": {"type": "host-local", "dataDir": w.dir.path().join("data"),
                      "ranges": [[{"subnet": "10.64.0.0/24", "gateway": "10.64.0.1"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}]}),
    );
    let wasm = Bench {
        network: json!({
            "name": "wnet", "id": "1".repeat(64), "driver": "wasmcni",
            "ipv6_enabled": false, "internal": false, "dns_enabled": false,
            "options": {"conflist": conflist},
            "subnets": [{"subnet": "10.64.0.0/24", "gateway": "10.64.0.1"}],
            "ipam_options": {"driver": "host-local"}}),
        side: w,
        subnet: "10.64.0",
    };
    let own = Bench {
        network: json!({
            "name": "nnet", "id": "2".repeat(64), "driver": "bridge",
            "network_interface": "nvbr0",
            "ipv6_enabled": false, "internal": false, "dns_enabled": false,
            "subnets": [{"subnet": "10.65.0.0/24", "gateway": "10.65.0.1"}],
            "ipam_options": {"driver": "host-local"}}),
        side: Side::new("bnvn", &bin, false),
        subnet: "10.65.0",
    };
    for b in [&wasm, &own] {
        std::fs::create_dir_all(b.side.dir.path().join("netavark")).expect("config dir");
    }
    // (setup, teardown) per side, ms.
    let mut times: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    // One warm-up each (artifact pages, the first nftables table).
    for b in [&wasm, &own] {
        let o = b.options("warm", &format!("{}.2", b.subnet));
        b.netavark(&bin, "setup", &o);
        b.netavark(&bin, "teardown", &o);
    }
    for i in 0..runs {
        let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let b = [&wasm, &own][k];
            let o = b.options(&format!("c{i}"), &format!("{}.{}", b.subnet, 10 + i % 200));
            let s = b.netavark(&bin, "setup", &o);
            let t = b.netavark(&bin, "teardown", &o);
            times[k].push((s, t));
        }
    }
    let med = |k: usize, f: &dyn Fn(&(f64, f64)) -> f64| median(times[k].iter().map(f).collect());
    println!("netavark setup + teardown, {runs} pairs per side, medians (ms):");
    println!(
        "  {:<34} {:>8} {:>9} {:>8}",
        "", "setup", "teardown", "both"
    );
    let mut rows = Vec::new();
    for (k, name) in [
        (0, "wasmcni plugin (bridge+portmap)"),
        (1, "netavark's bridge driver"),
    ] {
        let row = (med(k, &|p| p.0), med(k, &|p| p.1), med(k, &|p| p.0 + p.1));
        println!("  {name:<34} {:>8.2} {:>9.2} {:>8.2}", row.0, row.1, row.2);
        rows.push(row);
    }
    let ratio = |a: f64, b: f64| a / b;
    println!(
        "  ratio wasmcni / netavark bridge: setup {:.2}x, teardown {:.2}x, both {:.2}x",
        ratio(rows[0].0, rows[1].0),
        ratio(rows[0].1, rows[1].1),
        ratio(rows[0].2, rows[1].2)
    );
    verdict(&[(
        "setup + teardown no slower than netavark's own bridge driver (issue 28's aim)",
        rows[0].2 <= rows[1].2,
    )]);
}

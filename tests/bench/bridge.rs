//! Benchmark: bridge + host-local, wasmcni vs the reference Go plugins,
//! through the real libcni (tests/libcni/ driver), interleaved in one run.
//!
//! Run: `make bench` (as root), or `cargo bench -p wasmcni --bench bridge`
//! with `WASMCNI_BIN` pointing at the release executable.
//! Options (env): `BENCH_RUNS` (interleaved ADD/DEL pairs, default 100),
//! `BENCH_SEQ` (sequential ADDs on one /16, default 1000), `BENCH_PAR`
//! (parallel ADDs, default 64), `BENCH_SEQ_IPAM=static` (the sequential
//! run with static IPAM instead of host-local: no IPAM state, only what the
//! kernel and bridge do).
//!
//! Prints:
//! - ADD and DEL medians through libcni (the reference runs bridge, which
//!   execs host-local; wasmcni runs host-local inside the bridge process),
//!   and the ratios: of the libcni call alone (timed inside the driver:
//!   what a runtime, which calls libcni in-process, waits for) and of the
//!   driver process from exec to exit (adds the Go driver's start-up, the
//!   same for both);
//! - `BENCH_SEQ` sequential ADDs of distinct containers on one network,
//!   then their DELs in the same order: the median of the last 100 against
//!   the first 100 (what grows with the number of attachments), for
//!   wasmcni, the reference, and the floor: `floor/bridge.c`, a static C
//!   plugin making only the kernel changes of a bridge ADD (one rtnetlink
//!   request each, no IPAM state, no checks), run through libcni the same
//!   way, so the kernel's own growth is measured beside the plugins';
//! - `BENCH_PAR` ADDs at once, each through its own libcni process: total
//!   wall time of both (median of three rounds, order alternating);
//! - peak RSS of one ADD, executed directly: wasmcni's one process against
//!   the reference bridge and host-local processes (each, and summed).
//!
//! Floors checked (issue 26): ADD ≤ 0.6× and DEL ≤ 0.3× the reference;
//! sequential ADDs: last-100 ≤ 1.5× first-100 and ≤ 0.6× the reference's
//! last-100; sequential DELs at the full network ≤ 0.3× the reference's.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;
use support::Netns;

use common::{env_num, install_wasmcni, interleave, median, verdict, Side};

impl Side {
    fn conflist(&self, subnet: &str) -> PathBuf {
        self.write_conflist(
            &format!("{}.conflist", subnet.replace('/', "_")),
            &json!({"cniVersion": "1.0.0", "name": "benchnet", "plugins": [
                {"type": "bridge", "bridge": "cnibench0", "isGateway": true,
                 "ipam": {"type": "host-local", "subnet": subnet,
                          "dataDir": self.dir.path().join("data")}}]}),
        )
    }

    /// One libcni call: (the libcni call alone, the driver process from
    /// exec to exit), in ms. Panics if it fails.
    fn call(&self, cmd: &str, conflist: &Path, ctr: &Netns, cid: &str, ifname: &str) -> (f64, f64) {
        self.call_with(cmd, conflist, ctr, cid, ifname, "")
    }

    /// A network with `static` IPAM (no state): the address comes in
    /// CNI_ARGS.
    fn conflist_static(&self) -> PathBuf {
        self.write_conflist(
            "static.conflist",
            &json!({"cniVersion": "1.0.0", "name": "benchnet", "plugins": [
                {"type": "bridge", "bridge": "cnibench0", "isGateway": true,
                 "ipam": {"type": "static"}}]}),
        )
    }

    /// [`Side::call`] with CNI_ARGS.
    fn call_with(
        &self,
        cmd: &str,
        conflist: &Path,
        ctr: &Netns,
        cid: &str,
        ifname: &str,
        args: &str,
    ) -> (f64, f64) {
        self.call_caps(cmd, conflist, ctr, cid, ifname, args, "")
    }
}

/// Peak RSS (KiB) of `exe` run directly with the CNI environment, in
/// `node`: the process and the children it waited for (the kernel reports
/// the larger of them).
#[allow(clippy::zombie_processes)]
fn peak_rss(
    exe: &Path,
    node: &Netns,
    ctr: &Netns,
    conf: &[u8],
    command: &str,
    env: &[(String, String)],
) -> i64 {
    let mut cmd = Command::new(support::ip_exe());
    cmd.args(["netns", "exec", &node.name])
        .arg(exe)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", "rss")
        .env("CNI_NETNS", &ctr.path)
        .env("CNI_IFNAME", "rss0")
        .env("CNI_PATH", "/usr/lib/cni")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(conf).unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{exe:?} {command}"
    );
    usage.ru_maxrss
}

/// The order the three sides of the sequential run take their turns in
/// round `i`: each side first, second and third as often as the others.
fn turns(i: usize) -> [usize; 3] {
    [[0, 1, 2], [1, 2, 0], [2, 0, 1]][i % 3]
}

/// Builds `floor/bridge.c` into `dir`/floor/bridge, static: with musl-gcc
/// (`make setup` installs musl-tools; the kernel's uapi headers are put on
/// its path), else with gcc. Returns the bin dir. Panics if neither builds
/// it: the benchmark does not run without its floor.
fn floor_plugin(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/bench/floor/bridge.c");
    let bin = dir.join("floor");
    let headers = dir.join("floor-headers");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&headers).unwrap();
    for (name, target) in [
        ("linux", "/usr/include/linux"),
        ("asm-generic", "/usr/include/asm-generic"),
        ("asm", "/usr/include/x86_64-linux-gnu/asm"),
    ] {
        let _ = std::os::unix::fs::symlink(target, headers.join(name));
    }
    let out = bin.join("bridge");
    let musl = Command::new("musl-gcc")
        .args(["-static", "-O2", "-isystem"])
        .arg(&headers)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status();
    if !musl.is_ok_and(|s| s.success()) {
        let gcc = Command::new("gcc")
            .args(["-static", "-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(
            gcc.success(),
            "building {src:?} failed with musl-gcc and gcc"
        );
    }
    bin
}

/// Waits until `node` has no veth left (the kernel deletes a deleted
/// namespace's veths, and their peers, in the background).
fn settle(node: &Netns) {
    let start = Instant::now();
    while !node
        .ip(&["-o", "link", "show", "type", "veth"])
        .trim()
        .is_empty()
    {
        assert!(
            start.elapsed().as_secs() < 300,
            "the kernel did not finish tearing down the namespaces"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Waits until the kernel's background teardown of deleted network
/// namespaces is done: the number of live ones (active `net_namespace`
/// objects in /proc/slabinfo, freed only at the end of the teardown) stays
/// the same for a second.
fn settle_namespaces() {
    let count = || {
        std::fs::read_to_string("/proc/slabinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("net_namespace "))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let start = Instant::now();
    let mut last = count();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = count();
        if now == last || start.elapsed().as_secs() > 300 {
            return;
        }
        last = now;
    }
}

fn main() {
    let runs = env_num("BENCH_RUNS", 100);
    let seq = env_num("BENCH_SEQ", 1000);
    let par = env_num("BENCH_PAR", 64);
    let (_work, bin) = install_wasmcni();

    // ADD / DEL, interleaved.
    let r = Side::new("bref", Path::new("/usr/lib/cni"), false);
    let w = Side::new("bwas", &bin, true);
    let (rl, wl) = (r.conflist("10.40.0.0/24"), w.conflist("10.40.0.0/24"));
    for s in [(&r, &rl), (&w, &wl)] {
        // Warm-up (and the bridge's creation) outside the measurement.
        s.0.call("add", s.1, &s.0.ctr, "warm", "eth0");
        s.0.call("del", s.1, &s.0.ctr, "warm", "eth0");
    }
    let p = interleave(
        runs,
        "bridge + host-local through libcni",
        (&r, &rl),
        (&w, &wl),
        |s, l, cmd, cid| s.call(cmd, l, &s.ctr, cid, "eth0"),
    );

    // Peak RSS of one ADD, executed directly.
    let single = |list: &Path| -> Vec<u8> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(list).unwrap()).unwrap();
        let mut plugin = v["plugins"][0].clone();
        plugin["cniVersion"] = json!("1.0.0");
        plugin["name"] = json!("benchnet");
        plugin.to_string().into_bytes()
    };
    let (wconf, rconf) = (single(&wl), single(&rl));
    let (mut wr, mut rr, mut hr) = (vec![], vec![], vec![]);
    for _ in 0..10 {
        wr.push(
            peak_rss(&bin.join("bridge"), &w.node, &w.ctr, &wconf, "ADD", &w.env) as f64 / 1024.0,
        );
        peak_rss(&bin.join("bridge"), &w.node, &w.ctr, &wconf, "DEL", &w.env);
        rr.push(
            peak_rss(
                Path::new("/usr/lib/cni/bridge"),
                &r.node,
                &r.ctr,
                &rconf,
                "ADD",
                &[],
            ) as f64
                / 1024.0,
        );
        peak_rss(
            Path::new("/usr/lib/cni/bridge"),
            &r.node,
            &r.ctr,
            &rconf,
            "DEL",
            &[],
        );
        hr.push(
            peak_rss(
                Path::new("/usr/lib/cni/host-local"),
                &r.node,
                &r.ctr,
                &rconf,
                "ADD",
                &[],
            ) as f64
                / 1024.0,
        );
        peak_rss(
            Path::new("/usr/lib/cni/host-local"),
            &r.node,
            &r.ctr,
            &rconf,
            "DEL",
            &[],
        );
    }
    let (wrm, rrm, hrm) = (median(wr), median(rr), median(hr));
    println!(
        "  peak RSS of one ADD: wasmcni {wrm:.1} MiB (one process); reference bridge {rrm:.1} MiB \
         + host-local {hrm:.1} MiB = {:.1} MiB (two processes); ratio {:.2}x of the pair",
        rrm + hrm,
        wrm / (rrm + hrm)
    );

    // Parallel ADDs, each its own libcni process, then the DELs: three
    // rounds, the order alternating, each after a pause (the kernel frees
    // deleted links in the background; that should not land on the other).
    let pr = Side::new("pref", Path::new("/usr/lib/cni"), false);
    let pw = Side::new("pwas", &bin, true);
    let (prl, pwl) = (pr.conflist("10.41.0.0/24"), pw.conflist("10.41.0.0/24"));
    let (mut rtot, mut wtot) = (vec![], vec![]);
    for round in 0..3 {
        let mut sides = [(&pr, &prl, false), (&pw, &pwl, true)];
        if round % 2 == 1 {
            sides.reverse();
        }
        for (s, l, ours) in sides {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let t = Instant::now();
            std::thread::scope(|sc| {
                for i in 0..par {
                    sc.spawn(move || {
                        s.call("add", l, &s.ctr, &format!("p{i}"), &format!("eth{i}"))
                    });
                }
            });
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if ours {
                wtot.push(ms)
            } else {
                rtot.push(ms)
            }
            std::thread::scope(|sc| {
                for i in 0..par {
                    sc.spawn(move || {
                        s.call("del", l, &s.ctr, &format!("p{i}"), &format!("eth{i}"))
                    });
                }
            });
        }
    }
    let (rpar, wpar) = (median(rtot), median(wtot));
    println!(
        "  {par} parallel ADDs (wall time, median of 3 rounds): wasmcni {wpar:.0} ms  \
         reference {rpar:.0} ms  ratio {:.2}x",
        wpar / rpar
    );

    // Sequential ADDs on one /16, each container in a namespace of its own
    // (as on a node): does an ADD slow down as the network fills? Both
    // sides at once, each on a node of its own, taking turns (the order
    // alternating), so both see the same machine: the growth the kernel
    // adds (more links, ports, namespaces) and the VM's own ups and downs.
    // `BENCH_SEQ_IPAM=static`: the same with static IPAM (no IPAM state
    // at all), which leaves only what the kernel and the bridge plugin do.
    let static_ipam = std::env::var("BENCH_SEQ_IPAM").as_deref() == Ok("static");
    settle_namespaces();
    let floor_bin = floor_plugin(w.dir.path());
    let sides = [
        Side::new("swas", &bin, true),
        Side::new("sref", Path::new("/usr/lib/cni"), false),
        Side::new("sflr", &floor_bin, false),
    ];
    let lists: Vec<PathBuf> = sides
        .iter()
        .map(|side| {
            if static_ipam {
                side.conflist_static()
            } else {
                side.conflist("10.42.0.0/16")
            }
        })
        .collect();
    let mut times: [Vec<f64>; 3] = Default::default();
    // Each round's containers, in the order the sides took their turns.
    let mut rounds = Vec::with_capacity(seq);
    for i in 0..seq {
        let addr = format!("IP=10.42.{}.{}/16", (i + 2) / 256, (i + 2) % 256);
        let order = turns(i);
        let mut ctrs = Vec::with_capacity(3);
        for k in order {
            let args = match k {
                2 => format!("IgnoreUnknown=1;{addr};GW=10.42.0.1;BR=cnibench0"),
                _ if static_ipam => format!("IgnoreUnknown=1;{addr}"),
                _ => String::new(),
            };
            let ctr = Netns::new("sq");
            let t = sides[k].call_with("add", &lists[k], &ctr, &format!("s{i}"), "eth0", &args);
            times[k].push(t.0);
            ctrs.push(ctr);
        }
        rounds.push(ctrs);
    }
    // Then the DELs, in the order of the ADDs, taking turns the same way:
    // the first ones leave a full network, the last ones an empty one.
    let mut del_times: [Vec<f64>; 3] = Default::default();
    for (i, ctrs) in rounds.iter().enumerate() {
        for (k, ctr) in turns(i).into_iter().zip(ctrs) {
            let t = sides[k].call_with("del", &lists[k], ctr, &format!("s{i}"), "eth0", "");
            del_times[k].push(t.0);
        }
    }
    let growth = |t: &[f64]| {
        (
            median(t[..100.min(seq)].to_vec()),
            median(t[seq.saturating_sub(100)..].to_vec()),
        )
    };
    let ((first, last), (rfirst, rlast)) = (growth(&times[0]), growth(&times[1]));
    let (ffirst, flast) = growth(&times[2]);
    let ((dfirst, dlast), (rdfirst, rdlast)) = (growth(&del_times[0]), growth(&del_times[1]));
    let (fdfirst, fdlast) = growth(&del_times[2]);
    // The kernel tears the namespaces down in the background, with their
    // links: let it finish before the process exits.
    drop(rounds);
    for side in &sides {
        settle(&side.node);
    }
    drop(sides);
    println!(
        "  {seq} sequential ADDs on a /16{}: wasmcni first 100 median {first:.2} ms, last 100 \
         {last:.2} ms ({:.2}x); reference {rfirst:.2} ms, {rlast:.2} ms ({:.2}x)",
        if static_ipam { " (static IPAM)" } else { "" },
        last / first,
        rlast / rfirst
    );
    println!(
        "  then their DELs in the same order: wasmcni first 100 median {dfirst:.2} ms, last 100 \
         {dlast:.2} ms; reference {rdfirst:.2} ms, {rdlast:.2} ms; at the full network (first \
         100) {:.2}x the reference, ADD at the full network (last 100) {:.2}x",
        dfirst / rdfirst,
        last / rlast
    );
    println!(
        "  the floor (a static C plugin making only the kernel's changes, through libcni): \
         ADD first 100 {ffirst:.2} ms, last 100 {flast:.2} ms ({:.2}x, +{:.2} ms); DEL first \
         100 {fdfirst:.2} ms, last 100 {fdlast:.2} ms; wasmcni's ADD grew +{:.2} ms, the \
         reference's +{:.2} ms",
        flast / ffirst,
        flast - ffirst,
        last - first,
        rlast - rfirst
    );

    // Namespaces go before the exit below (which runs no destructors).
    drop((r, w, pr, pw));
    verdict(&[
        ("ADD <= 0.6x reference", p.was_add.0 <= 0.6 * p.ref_add.0),
        ("DEL <= 0.3x reference", p.was_del.0 <= 0.3 * p.ref_del.0),
        (
            "sequential ADD: last 100 <= 1.5x first 100",
            last <= 1.5 * first,
        ),
        (
            "sequential ADD: last 100 <= 0.6x the reference's last 100",
            last <= 0.6 * rlast,
        ),
        (
            "sequential DEL at the full network <= 0.3x the reference's",
            dfirst <= 0.3 * rdfirst,
        ),
    ]);
}

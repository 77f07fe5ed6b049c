//! The sandbox around a plugin: deadline, memory cap, traps, output
//! contract, refused imports, no ambient authority; precompiled artifacts
//! (stale/corrupt ones rebuilt, never loaded); `wasmcni install`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{fixture, loopback_conf, Invoke, Netns};

fn hostile(mode: &str) -> Invoke<'static> {
    Invoke::wasmcni_run(fixture("hostile").to_str().unwrap(), b"{}")
        .env("CNI_COMMAND", "ADD")
        .env("CNI_ARGS", format!("MODE={mode}"))
}

/// The standard plugins' component runs the plugin its program name
/// names; a copy run under any other name (by path, as `standard`)
/// refuses every command, VERSION too, and runs none of them.
#[test]
fn the_standard_component_under_another_name_runs_no_plugin() {
    let path = fixture("standard");
    let conf = br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#;
    for command in ["VERSION", "ADD", "DEL"] {
        let r = Invoke::wasmcni_run(path.to_str().unwrap(), conf)
            .env("CNI_COMMAND", command)
            .run();
        r.assert_cni_error(4, "the standard plugins' component, run as \"standard\"");
        assert!(r.stdout.contains("bridge, dhcp, dummy"), "{command}: {r:?}");
    }
}

/// The deadline is wall time, and what it saves is the work: the loop's
/// CPU time is bounded (the deadline plus start-up and a compile), which a
/// loaded machine cannot stretch as it stretches wall time; without the
/// deadline it grows without end. The wall time only has to stay far
/// below forever.
#[test]
fn an_infinite_loop_ends_at_the_deadline() {
    let start = Instant::now();
    let (r, cpu) = hostile("loop")
        .env("WASMCNI_DEADLINE_MS", "500")
        .spawn()
        .wait_cpu();
    let took = start.elapsed();
    r.assert_cni_error(101, "deadline of 500 ms");
    assert!(cpu < Duration::from_millis(1500), "CPU time {cpu:?}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_memory_bomb_ends_at_the_cap() {
    let r = hostile("memory").env("WASMCNI_MEMORY_MB", "16").run();
    r.assert_cni_error(102, "memory cap of 16 MiB");
}

#[test]
fn a_trap_is_a_cni_error_not_a_crash() {
    let r = hostile("trap").run();
    r.assert_cni_error(100, "trapped");
    assert!(!r.stderr.contains("RUST_BACKTRACE"), "{r:?}");
}

/// WASI 0.2's `exit` carries success or failure only, so a plugin's
/// `exit(42)` is wasmcni's exit 1; CNI needs only zero / non-zero.
#[test]
fn the_plugins_stdout_and_exit_code_are_wasmcnis() {
    let r = hostile("exit").run();
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.json()["msg"], "hostile says no");
}

#[test]
fn stdout_is_bounded() {
    let r = hostile("flood").run();
    r.assert_cni_error(100, "more than 1 MiB");
    assert!(
        r.stdout.len() < 64 << 10,
        "flood reached stdout: {} bytes",
        r.stdout.len()
    );
}

#[test]
fn the_plugin_sees_only_the_cni_environment() {
    let r = hostile("env")
        .env("SECRET_TOKEN", "hunter2")
        .env("CNI_IFNAME", "eth0")
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let mut keys: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.split('=').next())
        .collect();
    keys.sort();
    assert_eq!(keys, ["CNI_ARGS", "CNI_COMMAND", "CNI_IFNAME"], "{r:?}");
}

#[test]
fn a_component_importing_the_filesystem_is_refused_before_it_runs() {
    let r = Invoke::wasmcni_run(fixture("files").to_str().unwrap(), b"{}")
        .env("CNI_COMMAND", "ADD")
        .run();
    r.assert_cni_error(103, "wasi:filesystem/preopens");
    assert!(!r.stdout.contains("passwd="), "it ran: {r:?}");
}

#[test]
fn a_component_importing_sockets_is_refused_before_it_runs() {
    let r = Invoke::wasmcni_run(fixture("sockets").to_str().unwrap(), b"{}")
        .env("CNI_COMMAND", "ADD")
        .run();
    r.assert_cni_error(103, "wasi:sockets");
    assert!(!r.stdout.contains("connect"), "it ran: {r:?}");
}

#[test]
fn a_bad_limit_setting_is_an_env_error() {
    let r = hostile("exit").env("WASMCNI_DEADLINE_MS", "soon").run();
    r.assert_cni_error(4, "WASMCNI_DEADLINE_MS");
}

fn artifacts(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    v.sort();
    v
}

#[test]
fn corrupt_or_foreign_artifacts_are_rebuilt_not_loaded() {
    let ns = Netns::new("art");
    let cache = tempfile::tempdir().unwrap();
    let conf = loopback_conf("1.0.0");
    let run = || {
        Invoke::wasmcni_as("loopback", &conf)
            .env("WASMCNI_CACHE_DIR", cache.path().display().to_string())
            .cni("CHECK", &ns.path, "lo")
            .run()
    };
    // lo is down, so CHECK fails with the plugin's own error: that proves it ran.
    let first = run();
    assert_eq!(
        first.json()["msg"],
        "loopback interface is down",
        "{first:?}"
    );
    let arts = artifacts(cache.path());
    assert_eq!(arts.len(), 1, "one artifact written: {arts:?}");
    let good = std::fs::read(&arts[0]).unwrap();
    // A second run verifies the artifact in full and stamps it; from then
    // on only a change of the file's identity triggers a full check.
    let second = run();
    assert_eq!(
        second.json()["msg"],
        "loopback interface is down",
        "{second:?}"
    );
    let stamp = arts[0].with_extension("cwasm.ok");
    assert!(stamp.is_file(), "no verification stamp");

    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let corruptions: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 3].to_vec()),
        ("bit flip", flipped),
        ("garbage", vec![0x7f; 4096]),
        ("empty", vec![]),
    ];
    for (what, bytes) in corruptions {
        std::fs::write(&arts[0], &bytes).unwrap();
        let r = run();
        assert_eq!(
            r.json()["msg"],
            "loopback interface is down",
            "{what}: {r:?}"
        );
        assert_eq!(
            std::fs::read(&arts[0]).unwrap(),
            good,
            "{what}: artifact not rebuilt"
        );
    }

    // That was the first run's kind (Winch's: fast to compile). `wasmcni
    // precompile`, which `install` runs, adds loopback's Cranelift
    // artifact, and from then on runs load that one: the first run's is
    // not read again (a run that did would rebuild it).
    let out = std::process::Command::new(support::wasmcni())
        .arg("precompile")
        .arg("--cache-dir")
        .arg(cache.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "wasmcni precompile: {out:?}");
    let now = artifacts(cache.path());
    let loopback = |p: &&std::path::PathBuf| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("loopback-"))
    };
    assert_eq!(now.iter().filter(loopback).count(), 2, "{now:?}");
    std::fs::write(&arts[0], b"garbage").unwrap();
    let r = run();
    assert_eq!(r.json()["msg"], "loopback interface is down", "{r:?}");
    assert_eq!(
        std::fs::read(&arts[0]).unwrap(),
        b"garbage",
        "the first run's artifact was loaded after precompile"
    );
}

#[test]
fn an_untrusted_cache_directory_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let cache = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = hostile("exit")
        .env("WASMCNI_CACHE_DIR", cache.path().display().to_string())
        .run();
    assert_eq!(r.json()["msg"], "hostile says no", "{r:?}");
    assert!(
        artifacts(cache.path()).is_empty(),
        "wrote into a world-writable dir"
    );
    assert!(
        r.stderr
            .contains("not owned by us or is group/world-writable"),
        "{r:?}"
    );
}

#[test]
fn install_makes_a_bin_dir_is_idempotent_and_refuses_foreign_files() {
    support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let install = |force: bool| {
        let mut c = std::process::Command::new(support::wasmcni());
        c.arg("install").arg(&bin);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let out = install(false);
    assert!(out.status.success(), "{out:?}");
    let lo = bin.join("loopback");
    assert_eq!(std::fs::read_link(&lo).unwrap(), Path::new("wasmcni"));
    assert!(bin.join("wasmcni").is_file());
    // One artifact per standard component (loopback's own, the one the
    // others share), every standard plugin linked.
    let arts = artifacts(&bin.join(".wasmcni-cache"));
    // Every bundled plugin (`wasmcni list`), the first five at least.
    let listed = std::process::Command::new(support::wasmcni())
        .args(["list", "--json"])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let rows: Vec<&serde_json::Value> = listed["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["origin"] == "bundled")
        .collect();
    let standard: Vec<String> = rows
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let component = |name: &str| -> String {
        let row = rows.iter().find(|p| p["name"] == name).expect("listed");
        row["component"].as_str().expect("component").to_owned()
    };
    assert_eq!(component("loopback"), "loopback");
    assert_eq!(component("bridge"), "standard");
    assert_eq!(component("host-local"), "standard");
    let components: std::collections::BTreeSet<String> =
        standard.iter().map(|p| component(p)).collect();
    for p in ["bridge", "host-local", "loopback", "ptp", "static"] {
        assert!(
            standard.iter().any(|s| s == p),
            "{p} not listed: {standard:?}"
        );
    }
    assert_eq!(arts.len(), components.len(), "{arts:?}");
    for p in &standard {
        assert_eq!(
            std::fs::read_link(bin.join(p)).unwrap(),
            Path::new("wasmcni"),
            "{p}"
        );
        assert!(
            arts.iter().any(|a| a
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{}-", component(p)))),
            "no artifact for {p}: {arts:?}"
        );
    }
    let stamp = std::fs::metadata(&arts[0]).unwrap().modified().unwrap();

    // Idempotent: again, nothing rebuilt.
    let out = install(false);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(artifacts(&bin.join(".wasmcni-cache")), arts);
    assert_eq!(
        std::fs::metadata(&arts[0]).unwrap().modified().unwrap(),
        stamp
    );

    // The installed link is a working plugin, loading the precompiled artifact.
    let ns = Netns::new("inst");
    let conf = loopback_conf("1.0.0");
    let r = Invoke::exe(&lo, &conf).cni("ADD", &ns.path, "lo").run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(ns.lo_up());

    // A foreign file is not replaced without --force, and nothing changes.
    std::fs::remove_file(&lo).unwrap();
    std::fs::write(&lo, b"#!/bin/sh\necho native\n").unwrap();
    let out = install(false);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refusing"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&lo).unwrap(), b"#!/bin/sh\necho native\n");
    let out = install(true);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_link(&lo).unwrap(), Path::new("wasmcni"));
}

/// `wasmcni demo` (what `make demo` runs) works end to end: loopback's
/// steps, the refused ADD, and two containers on the spec's example
/// network (bridge + tuning + portmap) that reach their gateway, each
/// other and the published port, with the runtime's MAC and the sysctl
/// applied, and nothing left after the DELs, all in its own sandbox.
#[test]
fn the_demo_runs_end_to_end() {
    support::require_root();
    let out = std::process::Command::new(support::wasmcni())
        .arg("demo")
        .output()
        .expect("run the demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "access denied by wasmcni policy",
        "ping from demo-ctr-0 to 10.1.0.1: ok",
        "ping from demo-ctr-1 to 10.1.0.2: ok",
        "eth0 MAC 0a:58:0a:01:00:aa (the runtime asked 0a:58:0a:01:00:aa), net.core.somaxconn = 500",
        "tcp dport 8080 dnat ip to 10.1.0.2:80",
        "connect from the node to 10.1.0.1:8080 (node port 8080): answered \"hello from demo-ctr-0's port 80\"",
        "connect from the node to 127.0.0.1:8080 (node port 8080): answered \"hello",
        "connect from demo-ctr-1 to 10.1.0.1:8080 (node port 8080): answered \"hello",
        "IPAM state after the DELs: last_reserved_ip.0 lock",
        "nftables tables after the DELs: none",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

/// A plugin built against the WIT as first published (`tests/wit-0.1.0`,
/// `wasmcni:plugin@0.1.0`, by wit-bindgen alone: tests/fixtures/first-wit)
/// runs on this host as it did on the first: its calls are allowed under
/// its grant and act, its result is the runtime's (issue 51, item 5; the
/// WIT's own check is `wit_compat` in the runtime's unit tests).
#[test]
fn a_plugin_built_against_the_first_published_wit_keeps_running() {
    let world = support::world::World::new("wit010");
    let policy = serde_json::json!({"plugins": {"first-wit": {
        "container": {"read": true, "modify": true}}}});
    world.ctr.ip(&["link", "set", "lo", "down"]);
    let run = Invoke::wasmcni_run(
        fixture("first-wit").to_str().unwrap(),
        b"{\"cniVersion\": \"1.0.0\", \"name\": \"n\", \"type\": \"first-wit\"}",
    )
    .cni("ADD", &world.ctr.path, "eth0")
    .env("CNI_CONTAINERID", "wit010")
    .env(
        "WASMCNI_POLICY",
        world.policy(&policy).display().to_string(),
    )
    .env("WASMCNI_AUDIT", world.audit_path().display().to_string())
    .env("WASMCNI_STATE_DIR", world.state_dir().display().to_string())
    .in_netns(&world.node)
    .run();
    assert_eq!(run.code, 0, "{run:?}");
    let result: serde_json::Value = serde_json::from_str(&run.stdout).expect("a CNI result");
    assert_eq!(result["interfaces"][0]["name"], "lo", "{run:?}");
    let lo = world.ctr.ip(&["-j", "link", "show", "lo"]);
    assert!(lo.contains("\"UP\""), "lo is not up in the container: {lo}");
    let calls: Vec<String> = world
        .audit()
        .iter()
        .filter(|r| r["outcome"] == "ok")
        .filter_map(|r| r["call"].as_str().map(str::to_owned))
        .collect();
    for call in [
        "netns.container",
        "link.get-by-name",
        "link.set-up",
        "link.list",
    ] {
        assert!(
            calls.iter().any(|c| c == call),
            "{call} not allowed: {calls:?}"
        );
    }
}

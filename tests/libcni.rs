//! wasmcni as a drop-in plugin directory for the real libcni (Debian's
//! golang-github-appc-cni-dev), driven by tests/libcni/main.go: conflists in
//! 0.3.1, 0.4.0 and 1.0.0 through AddNetworkList / CheckNetworkList /
//! DelNetworkList / GetVersionInfo against an installed wasmcni bin dir.

mod support;

use std::path::Path;
use std::process::Command;

use support::Netns;

use support::cni::{bin_dir, driver};

struct Drive {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the driver with `work` holding libcni's cache (`work/cache`) and
/// the plugins' audit log and attachment records: libcni hands its own
/// environment to the plugins, so these reach wasmcni, never the node's
/// /var/log/wasmcni or /var/lib/wasmcni.
fn drive(args: &[&str], conflist: Option<&Path>, netns: Option<&Path>, work: &Path) -> Drive {
    let mut c = Command::new(driver());
    c.args(args)
        .arg("-bindir")
        .arg(bin_dir())
        .arg("-cachedir")
        .arg(work.join("cache"))
        .arg("-ifname")
        .arg("lo");
    if let Some(f) = conflist {
        c.arg("-conflist").arg(f);
    }
    if let Some(n) = netns {
        c.arg("-netns").arg(n);
    }
    let out = c
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("WASMCNI_AUDIT", work.join("audit.jsonl"))
        .env("WASMCNI_STATE_DIR", work.join("state"))
        .output()
        .unwrap();
    Drive {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn libcni_accepts_every_result_and_runs_add_check_del() {
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let ns = Netns::new("libcni");
        let work = support::private_tempdir();
        let conflist = work.path().join("net.conflist");
        std::fs::write(
            &conflist,
            format!(
                r#"{{"cniVersion":"{version}","name":"lo-net","plugins":[{{"type":"loopback"}}]}}"#
            ),
        )
        .unwrap();
        let cache = work.path().join("cache");

        let add = drive(
            &["-cmd", "add"],
            Some(&conflist),
            Some(&ns.path),
            work.path(),
        );
        assert_eq!(add.code, 0, "{version} add: {}{}", add.stdout, add.stderr);
        let result: serde_json::Value = serde_json::from_str(&add.stdout).unwrap();
        assert_eq!(result["cniVersion"], version, "{version}: {result}");
        assert_eq!(result["interfaces"][0]["name"], "lo");
        let ips: Vec<&str> = result["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["address"].as_str().unwrap())
            .collect();
        assert_eq!(ips, ["127.0.0.1/8", "::1/128"], "{version}");
        assert!(ns.lo_up(), "{version}: lo not up after add");
        assert!(
            cache.join("results/lo-net-cnidriver-test-lo").is_file(),
            "libcni cached the result"
        );
        // The plugin audited into the test's log, which libcni's
        // environment carried to it.
        let audit = std::fs::read_to_string(work.path().join("audit.jsonl")).unwrap_or_default();
        assert!(
            audit.contains(r#""command":"ADD""#),
            "{version}: no ADD in the test's audit log: {audit}"
        );

        let check = drive(
            &["-cmd", "check"],
            Some(&conflist),
            Some(&ns.path),
            work.path(),
        );
        if version == "0.3.1" {
            // libcni itself refuses CHECK below 0.4.0.
            assert_ne!(check.code, 0);
            assert!(
                check.stderr.contains("does not support the CHECK command"),
                "{}",
                check.stderr
            );
        } else {
            assert_eq!(check.code, 0, "{version} check: {}", check.stderr);
        }

        for round in 1..=2 {
            let del = drive(
                &["-cmd", "del"],
                Some(&conflist),
                Some(&ns.path),
                work.path(),
            );
            assert_eq!(del.code, 0, "{version} del #{round}: {}", del.stderr);
            assert!(!ns.lo_up(), "{version}: lo up after del");
        }
    }
}

#[test]
fn libcni_reads_the_supported_versions() {
    let work = support::private_tempdir();
    let v = drive(
        &["-cmd", "version", "-plugin", "loopback"],
        None,
        None,
        work.path(),
    );
    assert_eq!(v.code, 0, "{}", v.stderr);
    let info: serde_json::Value = serde_json::from_str(&v.stdout).unwrap();
    let versions: Vec<&str> = info["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(
        versions,
        ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    );
}

#[test]
fn libcni_reports_a_plugin_error_with_its_code() {
    let ns = Netns::new("libcni-err");
    let work = support::private_tempdir();
    let conflist = work.path().join("net.conflist");
    std::fs::write(
        &conflist,
        r#"{"cniVersion":"1.0.0","name":"lo-net","plugins":[{"type":"loopback"}]}"#,
    )
    .unwrap();
    // CHECK with no cached result and lo down: the plugin's own error, code 999.
    let check = drive(
        &["-cmd", "check"],
        Some(&conflist),
        Some(&ns.path),
        &work.path().join("c"),
    );
    assert_ne!(check.code, 0);
    assert!(check.stderr.contains(r#""code":999"#), "{}", check.stderr);
    assert!(
        check.stderr.contains("loopback interface is down"),
        "{}",
        check.stderr
    );
}

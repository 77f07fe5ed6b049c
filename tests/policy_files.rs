//! Policy as a directory (`policy.d/NAME.json`) beside the policy file,
//! failure isolation (a broken entry refuses its own plugin only, with an
//! error naming the file and the field), and `wasmcni list`.
//!
//! Policy resolution happens before any namespace is opened, so most cases
//! run VERSION (no namespace); one ADD in a fresh namespace shows that the
//! standard loopback really runs beside a broken entry.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::{fixture, loopback_conf, Invoke, Netns, Run};

/// A policy file and a policy directory in a private directory (every
/// directory above it is root's and not world-writable).
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let s = Setup {
            dir: support::private_tempdir(),
        };
        std::fs::create_dir(s.policy_dir()).expect("policy.d");
        s.write_policy(&json!({"plugins": {}}));
        s
    }

    fn policy_file(&self) -> PathBuf {
        self.dir.path().join("policy.json")
    }

    fn policy_dir(&self) -> PathBuf {
        self.dir.path().join("policy.d")
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }

    fn write_policy(&self, v: &Value) {
        Self::write(&self.policy_file(), &v.to_string());
    }

    fn write_entry(&self, name: &str, text: &str) -> PathBuf {
        let p = self.policy_dir().join(format!("{name}.json"));
        Self::write(&p, text);
        p
    }

    fn with_env<'a>(&self, inv: Invoke<'a>) -> Invoke<'a> {
        inv.env("WASMCNI_POLICY", self.policy_file().display().to_string())
            .env(
                "WASMCNI_POLICY_DIR",
                self.policy_dir().display().to_string(),
            )
    }

    /// The scripted fixture (a third-party plugin) running VERSION.
    fn scripted(&self) -> Run {
        let conf = br#"{"cniVersion":"1.0.0","name":"n","type":"scripted"}"#;
        self.with_env(Invoke::wasmcni_run(
            &fixture("scripted").display().to_string(),
            conf,
        ))
        .env("CNI_COMMAND", "VERSION")
        .run()
    }

    /// The standard loopback running VERSION.
    fn loopback(&self) -> Run {
        let conf = loopback_conf("1.0.0");
        self.with_env(Invoke::wasmcni_run("loopback", &conf))
            .env("CNI_COMMAND", "VERSION")
            .run()
    }

    /// `wasmcni list --json` with this policy and `plugin_dir`.
    fn list(&self, plugin_dir: &Path, bin_dir: Option<&Path>) -> Value {
        let mut cmd = std::process::Command::new(support::wasmcni());
        cmd.args(["list", "--json"])
            .env_clear()
            .env("WASMCNI_POLICY", self.policy_file())
            .env("WASMCNI_POLICY_DIR", self.policy_dir())
            .env("WASMCNI_PLUGIN_DIR", plugin_dir);
        if let Some(b) = bin_dir {
            cmd.arg("--bin-dir").arg(b);
        }
        let out = cmd.output().expect("wasmcni list");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }
}

fn assert_ok(r: &Run, what: &str) {
    assert_eq!(r.code, 0, "{what}: {r:?}");
}

/// A scripted entry of the policy directory with a typo refuses scripted
/// (code 105, the file and the field path named) and nothing else; fixed,
/// scripted runs.
#[test]
fn a_typo_in_one_entry_file_refuses_only_that_plugin() {
    let s = Setup::new();
    let file = s.write_entry("scripted", r#"{"container": {"modfiy": true}}"#);
    let r = s.scripted();
    r.assert_cni_error(105, &file.display().to_string());
    r.assert_cni_error(105, "plugins.scripted.container.modfiy: unknown field");
    assert_ok(&s.loopback(), "loopback beside a broken entry");
    // Other ways one entry file can be broken.
    for (text, needle) in [
        ("{\"container\": ", "not a JSON object"),
        (
            r#"{"sha256": "abc"}"#,
            "plugins.scripted.sha256 must be 64 hex digits",
        ),
        (
            r#"{"host": {"prefixes": ["10.0.0.0/33"]}}"#,
            "plugins.scripted.host.prefixes[0]",
        ),
        (r#"[1, 2]"#, "plugins.scripted must be a JSON object"),
    ] {
        s.write_entry("scripted", text);
        let r = s.scripted();
        r.assert_cni_error(105, needle);
        r.assert_cni_error(105, &file.display().to_string());
        assert_ok(&s.loopback(), needle);
    }
    s.write_entry("scripted", r#"{"container": {"modify": true}}"#);
    assert_ok(&s.scripted(), "fixed");
}

/// The same isolation inside policy.json: a typo in one plugin's entry
/// breaks that plugin only, with the file and field path named; what is
/// not a policy at all still fails everything, clearly.
#[test]
fn a_typo_in_one_policy_json_entry_refuses_only_that_plugin() {
    let s = Setup::new();
    s.write_policy(&json!({"plugins": {
        "mtu-setter": {"container": {"modfiy": true}},
        "scripted": {"container": {"read": true}},
    }}));
    assert_ok(&s.scripted(), "scripted beside a broken entry");
    assert_ok(&s.loopback(), "loopback beside a broken entry");
    let conf = br#"{"cniVersion":"1.0.0","name":"n","type":"mtu-setter"}"#;
    let dir = s.dir.path().join("plugins");
    std::fs::create_dir(&dir).expect("plugin dir");
    std::fs::copy(fixture("scripted"), dir.join("mtu-setter.wasm")).expect("copy");
    let r = s
        .with_env(Invoke::wasmcni_run("mtu-setter", conf))
        .env("WASMCNI_PLUGIN_DIR", dir.display().to_string())
        .env("CNI_COMMAND", "VERSION")
        .run();
    r.assert_cni_error(105, &s.policy_file().display().to_string());
    r.assert_cni_error(105, "plugins.mtu-setter.container.modfiy: unknown field");
    // Not JSON, or an unknown top-level field: every plugin is refused.
    for (text, needle) in [
        ("not json", "expected"),
        (r#"{"plugins": {}, "plugin": {}}"#, "unknown field `plugin`"),
    ] {
        Setup::write(&s.policy_file(), text);
        s.loopback().assert_cni_error(105, needle);
        s.scripted().assert_cni_error(105, needle);
    }
}

/// An entry in both policy.json and policy.d is ambiguous: that plugin is
/// refused, both files named; others run.
#[test]
fn an_entry_in_both_places_refuses_that_plugin() {
    let s = Setup::new();
    s.write_policy(&json!({"plugins": {"scripted": {}}}));
    let file = s.write_entry("scripted", "{}");
    let r = s.scripted();
    r.assert_cni_error(105, &file.display().to_string());
    r.assert_cni_error(105, &s.policy_file().display().to_string());
    assert_ok(&s.loopback(), "loopback");
}

/// The policy directory is trusted as the policy file is: a writable
/// directory refuses every plugin (its listing is the attacker's); a
/// writable entry file refuses its own plugin.
#[test]
fn untrusted_policy_dirs_and_entry_files_are_refused() {
    let s = Setup::new();
    let file = s.write_entry("scripted", "{}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    s.scripted()
        .assert_cni_error(105, "writable by group or others");
    assert_ok(&s.loopback(), "loopback beside an untrusted entry file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_ok(&s.scripted(), "trusted again");
    std::fs::set_permissions(s.policy_dir(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    s.loopback()
        .assert_cni_error(105, "writable by group or others");
    std::fs::set_permissions(s.policy_dir(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    // An explicit directory must exist.
    let r = Invoke::wasmcni_run("loopback", &loopback_conf("1.0.0"))
        .env("WASMCNI_POLICY_DIR", "/nonexistent/policy.d")
        .env("CNI_COMMAND", "VERSION")
        .run();
    r.assert_cni_error(105, "/nonexistent/policy.d");
}

/// An entry in policy.d grants what it says (and only to its plugin), and
/// replaces the embedded default of a standard plugin; files that name no
/// plugin, and other files, are ignored.
#[test]
fn policy_dir_entries_grant_and_strays_are_ignored() {
    let s = Setup::new();
    // loopback with nothing: its ADD is refused by the plugin's first call.
    s.write_entry("loopback", "{}");
    s.write_entry("bad name!", "not even json");
    Setup::write(&s.policy_dir().join("README"), "not json");
    Setup::write(&s.policy_dir().join("loopback.json.dpkg-old"), "not json");
    let ns = Netns::new("pold");
    let conf = loopback_conf("1.0.0");
    let add = || {
        s.with_env(Invoke::wasmcni_run("loopback", &conf))
            .cni("ADD", &ns.path, "lo")
            .run()
    };
    let r = add();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!ns.lo_up());
    // The runtime learns why, as a field path of loopback's own entry.
    let details = r.json()["details"].as_str().unwrap_or("").to_owned();
    assert!(
        details.contains("plugins.loopback.container.read is false")
            || details.contains("plugins.loopback.container.modify is false"),
        "{r:?}"
    );
    s.write_entry(
        "loopback",
        r#"{"container": {"read": true, "modify": true}}"#,
    );
    assert_ok(&add(), "loopback under its policy.d entry");
    assert!(ns.lo_up());
}

/// `write_entry_file` (what `wasmcni install --plugin` uses) writes an
/// entry a run accepts, pinned, 0644, atomically; a bad entry is refused
/// before anything is written.
#[test]
fn write_entry_file_writes_what_a_run_accepts() {
    let s = Setup::new();
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(fixture("scripted")).expect("fixture"),
        ))
    };
    let dir = s.policy_dir().join("new");
    let path = wasmcni::policy::write_entry_file(
        &dir,
        "scripted",
        &json!({"container": {"read": true}, "sha256": "00"}),
        &sha,
    )
    .expect("written");
    assert_eq!(path, dir.join("scripted.json"));
    let meta = std::fs::metadata(&path).expect("meta");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    assert_eq!(written["sha256"], sha);
    let run = Invoke::wasmcni_run(
        &fixture("scripted").display().to_string(),
        br#"{"cniVersion":"1.0.0","name":"n","type":"scripted"}"#,
    )
    .env("WASMCNI_POLICY", s.policy_file().display().to_string())
    .env("WASMCNI_POLICY_DIR", dir.display().to_string())
    .env("CNI_COMMAND", "VERSION")
    .run();
    assert_ok(&run, "pinned entry");
    // Pinned: another build is refused.
    wasmcni::policy::write_entry_file(&dir, "scripted", &json!({}), &"ab".repeat(32))
        .expect("written");
    let run = Invoke::wasmcni_run(
        &fixture("scripted").display().to_string(),
        br#"{"cniVersion":"1.0.0","name":"n","type":"scripted"}"#,
    )
    .env("WASMCNI_POLICY", s.policy_file().display().to_string())
    .env("WASMCNI_POLICY_DIR", dir.display().to_string())
    .env("CNI_COMMAND", "VERSION")
    .run();
    run.assert_cni_error(103, "pins it to");
    // Refused before writing: a typo, a bad name, a bad pin.
    let before = std::fs::read(&path).expect("read");
    let e = wasmcni::policy::write_entry_file(
        &dir,
        "scripted",
        &json!({"container": {"modfiy": true}}),
        &sha,
    )
    .expect_err("typo");
    assert!(
        e.to_string().contains("plugins.scripted.container.modfiy"),
        "{e}"
    );
    assert!(wasmcni::policy::write_entry_file(&dir, "../x", &json!({}), &sha).is_err());
    assert!(wasmcni::policy::write_entry_file(&dir, "scripted", &json!({}), "abc").is_err());
    assert!(wasmcni::policy::write_entry_file(&dir, "scripted", &json!([]), &sha).is_err());
    assert_eq!(std::fs::read(&path).expect("read"), before);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("scripted.json")]);
}

/// `wasmcni list`: the standard plugins and every NAME.wasm of the plugin
/// dir, each with origin, sha256 and policy status; with --bin-dir, what
/// each name there is.
#[test]
fn list_shows_every_reachable_plugin_with_its_policy_status() {
    let s = Setup::new();
    let plugins = s.dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    let wasm = std::fs::read(fixture("scripted")).expect("fixture");
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&wasm))
    };
    for name in [
        "pinned", "mismatch", "bare", "broken", "fromfile", "loopback",
    ] {
        std::fs::write(plugins.join(format!("{name}.wasm")), &wasm).expect("copy");
    }
    s.write_entry("pinned", &json!({"sha256": sha}).to_string());
    s.write_entry("mismatch", &json!({"sha256": "ab".repeat(32)}).to_string());
    s.write_entry("broken", r#"{"container": {"modfiy": true}}"#);
    s.write_entry("nobody", "{}");
    s.write_entry("bad name!", "{}");
    s.write_policy(&json!({"plugins": {"fromfile": {}, "bridge": {"container": {"read": true}}}}));

    // A bin dir: wasmcni, links to it, a native binary, a dangling link.
    let bin = s.dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::fs::copy(support::wasmcni(), bin.join("wasmcni")).expect("copy wasmcni");
    for l in ["loopback", "pinned", "gone"] {
        std::os::unix::fs::symlink("wasmcni", bin.join(l)).expect("link");
    }
    Setup::write(&bin.join("dhcp"), "#!/bin/sh\n");
    std::fs::set_permissions(bin.join("dhcp"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::os::unix::fs::symlink("/nonexistent/x", bin.join("old")).expect("link");

    let r = s.list(&plugins, Some(&bin));
    let row = |name: &str, origin_bundled: bool| -> Value {
        r["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .find(|p| p["name"] == name && (p["origin"] == "bundled") == origin_bundled)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed: {r:#}"))
    };
    let status = |name: &str, bundled: bool| -> String {
        row(name, bundled)["policy"]["status"]
            .as_str()
            .expect("status")
            .to_owned()
    };
    assert_eq!(status("loopback", true), "default");
    assert_eq!(status("bridge", true), "entry (policy.json)");
    assert_eq!(
        status("pinned", false),
        "entry (policy.d/pinned.json), pinned ok"
    );
    assert_eq!(
        status("mismatch", false),
        "entry (policy.d/mismatch.json), pin MISMATCH"
    );
    assert_eq!(status("bare", false), "no entry: no authority");
    assert_eq!(status("fromfile", false), "entry (policy.json)");
    let broken = status("broken", false);
    assert!(
        broken.starts_with("INVALID: ") && broken.contains("plugins.broken.container.modfiy"),
        "{broken}"
    );
    assert!(status("loopback", false).starts_with("SHADOWED"), "{r:#}");
    assert_eq!(row("pinned", false)["sha256"], sha);
    assert_eq!(
        row("pinned", false)["origin"],
        plugins.join("pinned.wasm").display().to_string()
    );
    assert_eq!(r["entries-without-plugin"], json!(["nobody"]), "{r:#}");
    assert_eq!(
        r["stray-policy-files"],
        json!([s.policy_dir().join("bad name!.json").display().to_string()])
    );
    let entry = |name: &str| -> Value {
        r["bin-dir"]["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not in bin dir: {r:#}"))
    };
    assert_eq!(entry("wasmcni")["kind"], "wasmcni");
    assert_eq!(entry("loopback")["kind"], "wasmcni link");
    assert_eq!(entry("loopback")["plugin"], "bundled");
    assert_eq!(entry("pinned")["kind"], "wasmcni link");
    assert_eq!(
        entry("pinned")["plugin"],
        plugins.join("pinned.wasm").display().to_string()
    );
    assert!(
        entry("gone")["plugin"]
            .as_str()
            .is_some_and(|p| p.starts_with("NOT FOUND")),
        "{r:#}"
    );
    assert_eq!(entry("dhcp")["kind"], "native binary");
    assert_eq!(entry("old")["kind"], "dangling link");

    // The text form: one row per plugin, columns.
    let out = std::process::Command::new(support::wasmcni())
        .args(["list", "--bin-dir"])
        .arg(&bin)
        .env_clear()
        .env("WASMCNI_POLICY", s.policy_file())
        .env("WASMCNI_POLICY_DIR", s.policy_dir())
        .env("WASMCNI_PLUGIN_DIR", &plugins)
        .output()
        .expect("list");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
            .to_owned()
    };
    assert!(line("NAME").contains("POLICY"), "{text}");
    assert!(line("mismatch").contains("pin MISMATCH"), "{text}");
    // The table shortens the sha256 (the full value is in --json).
    let short = format!("{}…{}", &sha[..4], &sha[60..]);
    assert!(line("pinned").contains(&short), "{text}");
    assert!(!text.contains(&sha), "{text}");
    assert!(text.contains("dangling link -> /nonexistent/x"), "{text}");
    assert!(text.contains("bad name!.json"), "{text}");
}

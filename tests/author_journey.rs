//! Issue 11's "done when", as one test: a new plugin author follows the
//! README from a fresh checkout — scaffold a plugin (`wasmcni new`), build
//! it for wasm32-wasip2, `wasmcni try` it in a throwaway sandbox, take the
//! policy entry `wasmcni policy suggest` derives from that run, install it
//! (`wasmcni install --plugin --policy`), and run it through the real
//! libcni chained after bridge + host-local, as a runtime would.
//!
//! Every step is the command the README gives, run as a separate process;
//! nothing is handed from one step to the next except files.
//!
//! The crate `new` writes depends on the published SDK (crates.io's
//! wasmcni-guest-sdk, at this build's version). The journey builds it
//! against that SDK as `cargo publish` would upload it: the SDK and the
//! crates it depends on, packaged from this checkout (`cargo package`) and
//! unpacked, stand in for crates.io (`[patch.crates-io]`), so a package
//! that lacks a file its build reads fails here.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

use support::cni::Call;
use support::Netns;

const NAME: &str = "journey-alias";

fn wasmcni(args: &[&str]) -> Output {
    Command::new(support::wasmcni())
        .args(args)
        .output()
        .expect("running wasmcni")
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The crates `cargo publish --workspace` uploads: the SDK and what it
/// depends on (docs/internals.md, "Releasing the SDK").
const PUBLISHED: [&str; 3] = ["wasmcni-cni-spec", "wasmcni-gojson", "wasmcni-guest-sdk"];

/// `cargo` as an author runs it: none of this test's own cargo settings
/// leak in.
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_MANIFEST_DIR",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_DIR",
        // tests/run sets it for the test binary alone (libtest's
        // --report-time); no build an author makes has it.
        "RUSTC_BOOTSTRAP",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The published crates as `cargo package` makes them from this checkout
/// (offline: every crate their lock files name is one the workspace's
/// build has fetched), unpacked in `dir`, and the `cargo --config`
/// arguments that make them crates.io's for a build. Checks what the SDK's
/// package carries: its sources, and the WIT its bindings are generated
/// from, the same as wit/ (guest-sdk/wit is a link to it).
fn packaged_sdk(dir: &Path) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = dir.join("target");
    let mut cmd = cargo();
    cmd.current_dir(&root)
        .args(["package", "--no-verify", "--offline", "--allow-dirty"])
        .args(PUBLISHED.iter().flat_map(|p| ["-p", p]))
        .arg("--target-dir")
        .arg(&target);
    ok(cmd.output().expect("cargo package"), "cargo package");
    let version = env!("CARGO_PKG_VERSION");
    let mut config = Vec::new();
    for p in PUBLISHED {
        let file = target.join(format!("package/{p}-{version}.crate"));
        ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(dir)
                .output()
                .expect("tar"),
            "unpacking the package",
        );
        let unpacked = dir.join(format!("{p}-{version}"));
        assert!(unpacked.join("src/lib.rs").is_file(), "{p}: no src/lib.rs");
        assert!(unpacked.join("README.md").is_file(), "{p}: no README.md");
        config.push(format!("patch.crates-io.{p}.path=\"{}\"", s(&unpacked)));
    }
    let sdk = dir.join(format!("wasmcni-guest-sdk-{version}"));
    let wit = |d: &Path| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .map(|e| {
                let e = e.expect("wit entry");
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).expect("wit file"))
            })
            .collect();
        files.sort();
        files
    };
    let (packaged, ours) = (wit(&sdk.join("wit")), wit(&root.join("wit")));
    let differ: Vec<&str> = packaged
        .iter()
        .filter(|f| !ours.contains(f))
        .chain(ours.iter().filter(|f| !packaged.contains(f)))
        .map(|f| f.0.as_str())
        .collect();
    assert!(
        differ.is_empty(),
        "the SDK's package and wit/ differ in {differ:?}: guest-sdk/wit must be a link to wit/"
    );
    config
}

/// `cargo build --release` in the scaffolded crate, as its README says
/// (its .cargo/config.toml selects wasm32-wasip2), offline, into the
/// target directory the example crates share, with `config` (`cargo
/// --config` arguments).
fn cargo_build(dir: &Path, config: &[String]) -> PathBuf {
    cargo_build_as(dir, NAME, true, config)
}

/// `cargo build --release` of plugin crate `name` in `dir`; `offline`
/// unless it must fetch (a git dependency).
fn cargo_build_as(dir: &Path, name: &str, offline: bool, config: &[String]) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/")
        .join("examples");
    let mut cmd = cargo();
    cmd.current_dir(dir)
        .args(["build", "--release"])
        .args(offline.then_some("--offline"))
        .args(config.iter().flat_map(|c| ["--config", c]))
        .env("CARGO_TARGET_DIR", &target);
    // This workspace's .cargo/config.toml reaches crates below it: its
    // flags for wasmcni's own static build are not an author's. Set and
    // empty, these replace every configured flag (an empty
    // CARGO_TARGET_<triple>_RUSTFLAGS would be merged with them instead).
    cmd.env("CARGO_ENCODED_RUSTFLAGS", "")
        .env("CARGO_ENCODED_RUSTDOCFLAGS", "");
    ok(cmd.output().expect("cargo"), "cargo build --release");
    let wasm = target.join(format!("wasm32-wasip2/release/{name}.wasm"));
    assert!(wasm.is_file(), "no {}", wasm.display());
    wasm
}

#[test]
fn a_new_plugin_goes_from_template_to_a_libcni_chain() {
    support::require_root();
    let tmp = support::private_tempdir();
    let t = tmp.path();

    // 1. Scaffold and build, against the SDK as it would be published.
    let crate_dir = t.join(NAME);
    ok(
        wasmcni(&["new", NAME, "--dir", s(&crate_dir)]),
        "wasmcni new",
    );
    let cargo_toml = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let want = format!(
        r#"guest-sdk = {{ package = "wasmcni-guest-sdk", version = "{}" }}"#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(cargo_toml.contains(&want), "{cargo_toml}");
    let published = packaged_sdk(&t.join("crates.io"));
    let wasm = cargo_build(&crate_dir, &published);
    // The README says install pins the starter policy itself (issue 27: it
    // said to pin it from `sha256sum`, contradicting install).
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    assert!(
        readme.contains("--policy policy.json")
            && readme.contains("Install pins the entry itself")
            && !readme.contains("sha256sum"),
        "{readme}"
    );

    // 2. Try it after bridge + host-local, the chain it will run in.
    let conflist = t.join("net.conflist");
    let net = |data: &Path| {
        json!({"cniVersion": "1.0.0", "name": "journey", "plugins": [
            {"type": "bridge", "bridge": "cnijourney0", "isGateway": true,
             "ipam": {"type": "host-local", "subnet": "10.233.7.0/24",
                      "dataDir": data}},
            {"type": NAME, "alias": "web frontend"}]})
    };
    std::fs::write(&conflist, net(&t.join("ipam")).to_string()).unwrap();
    let audit = t.join("try.jsonl");
    let tried = ok(
        wasmcni(&[
            "try",
            s(&wasm),
            "--config",
            s(&conflist),
            "--audit-out",
            s(&audit),
        ]),
        "wasmcni try",
    );
    let text = String::from_utf8_lossy(&tried.stdout);
    assert!(
        text.contains("container.modify"),
        "try shows grants: {text}"
    );

    // 3. The suggested entry: exactly what the plugin used, pinned.
    let suggested = ok(
        wasmcni(&["policy", "suggest", s(&wasm), "--from-try", s(&audit)]),
        "wasmcni policy suggest",
    );
    let entry: Value = serde_json::from_slice(&suggested.stdout).expect("suggest prints JSON");
    let sha = hex_sha256(&wasm);
    assert_eq!(entry["sha256"], sha.as_str(), "{entry}");
    assert_eq!(
        entry["container"],
        json!({"read": true, "modify": true}),
        "{entry}"
    );
    assert!(entry.get("host").is_none(), "no host grant: {entry}");
    let entry_file = t.join(format!("{NAME}.policy.json"));
    std::fs::write(&entry_file, entry.to_string()).unwrap();

    // 4. Install it beside the standard plugins.
    let bin = t.join("bin");
    let plugins = t.join("plugins");
    let policy_d = t.join("policy.d");
    let install = |extra: &[&str]| {
        let mut args = vec![
            "install",
            s(&bin),
            "--plugin",
            s(&wasm),
            "--policy",
            s(&entry_file),
            "--plugin-dir",
            s(&plugins),
            "--policy-dir",
            s(&policy_d),
        ];
        args.extend_from_slice(extra);
        ok(wasmcni(&args), "wasmcni install --plugin")
    };
    // First as the crate's README says: its starter policy.json (a policy
    // document) as it is, pinned by install (issue 27: install wanted the
    // entry alone).
    let starter = crate_dir.join("policy.json");
    ok(
        wasmcni(&[
            "install",
            s(&bin),
            "--plugin",
            s(&wasm),
            "--policy",
            s(&starter),
            "--plugin-dir",
            s(&plugins),
            "--policy-dir",
            s(&policy_d),
        ]),
        "wasmcni install --plugin --policy policy.json",
    );
    let written: Value =
        serde_json::from_slice(&std::fs::read(policy_d.join(format!("{NAME}.json"))).unwrap())
            .unwrap();
    assert_eq!(
        written, entry,
        "the starter entry, pinned, is the one suggested"
    );
    // Then with the suggested entry: the same entry, so nothing changes.
    let again = install(&[]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains(&format!("{NAME}.json: unchanged")),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert!(bin.join(NAME).is_symlink());
    assert!(plugins.join(format!("{NAME}.wasm")).is_file());
    let written: Value =
        serde_json::from_slice(&std::fs::read(policy_d.join(format!("{NAME}.json"))).unwrap())
            .unwrap();
    assert_eq!(written["sha256"], sha.as_str());

    // 5. A runtime runs the chain through libcni.
    let node = Netns::new("journeyn");
    node.ip(&["link", "set", "lo", "up"]);
    let ctr = Netns::new("journeyc");
    let data = t.join("data");
    std::fs::write(&conflist, net(&data).to_string()).unwrap();
    let policy = t.join("policy.json");
    std::fs::write(
        &policy,
        json!({"plugins": {"host-local": {"ipam-roots": [data]}}}).to_string(),
    )
    .unwrap();
    let env: Vec<(String, String)> = [
        ("WASMCNI_POLICY", s(&policy).to_owned()),
        ("WASMCNI_POLICY_DIR", s(&policy_d).to_owned()),
        ("WASMCNI_PLUGIN_DIR", s(&plugins).to_owned()),
        ("WASMCNI_AUDIT", s(&t.join("audit.jsonl")).to_owned()),
        ("WASMCNI_STATE_DIR", s(&t.join("state")).to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let cache = t.join("cache");
    let call = |cmd: &str| {
        Call {
            node: &node,
            bin: &bin,
            cmd,
            conflist: &conflist,
            netns: &ctr.path,
            cid: "journey0",
            ifname: "eth0",
            cache: &cache,
            args: "",
            capargs: "",
            env: &env,
        }
        .run()
    };
    let before = (node.snapshot(), ctr.snapshot());
    let add = call("add");
    assert_eq!(add.code, 0, "libcni ADD: {add:?}");
    let eth0: Value =
        serde_json::from_str(&ctr.ip(&["-d", "-j", "link", "show", "eth0"])).expect("ip -j");
    assert_eq!(eth0[0]["ifalias"], "web frontend", "{eth0}");
    let check = call("check");
    assert_eq!(check.code, 0, "libcni CHECK: {check:?}");
    let del = call("del");
    assert_eq!(del.code, 0, "libcni DEL: {del:?}");
    support::assert_same(&before.1, &ctr.snapshot(), "container after DEL");
    // The node keeps the network's bridge, as with the reference bridge
    // plugin; the container's veth is gone.
    let links: Vec<String> = serde_json::from_str::<Value>(&node.ip(&["-j", "link", "show"]))
        .expect("ip -j")
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["ifname"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(links, ["lo", "cnijourney0"], "node links after DEL");
    let before = (node.snapshot(), before.1);

    // Without its entry the plugin has no authority, and the runtime is
    // told which grant is missing; the chain's ADD leaves nothing.
    std::fs::remove_file(policy_d.join(format!("{NAME}.json"))).unwrap();
    let add = call("add");
    assert_ne!(add.code, 0, "ADD without an entry: {add:?}");
    let err = add.cni_error().expect("a CNI error");
    let told = err.to_string();
    assert!(
        told.contains(&format!("plugins.{NAME}.container.read")),
        "the error names the missing grant: {told}"
    );
    let del = call("del");
    assert_eq!(del.code, 0, "libcni DEL after the failed ADD: {del:?}");
    support::assert_same(&before.0, &node.snapshot(), "node after failed ADD");
    support::assert_same(&before.1, &ctr.snapshot(), "container after failed ADD");

    // A rebuild is re-pinned by installing again (friction 5): the entry is
    // back, pinned to the file installed.
    install(&[]);
    let add = call("add");
    assert_eq!(add.code, 0, "libcni ADD after reinstall: {add:?}");
    assert_eq!(call("del").code, 0);
}

fn hex_sha256(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

/// Issue 27 item 8: a plugin repository whose CI has no wasmcni checkout
/// depends on guest-sdk by git (`wasmcni new --sdk-git URL --sdk-rev
/// COMMIT`; here the URL is this checkout's, the commit its HEAD), and the
/// next steps `new` prints run as printed (`try` of a chained plugin with
/// the crate's own net.conflist, which makes its prevResult).
#[test]
fn a_plugin_on_guest_sdk_by_git_builds_and_the_printed_next_steps_run() {
    support::require_root();
    let tmp = support::private_tempdir();
    let name = "journey-git";
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the checkout");
    let head = ok(
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["rev-parse", "HEAD"])
            .output()
            .expect("git"),
        "git rev-parse HEAD",
    );
    let rev = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let url = format!("file://{}", repo.display());
    let crate_dir = tmp.path().join(name);
    let made = ok(
        wasmcni(&[
            "new",
            name,
            "--dir",
            s(&crate_dir),
            "--sdk-git",
            &url,
            "--sdk-rev",
            &rev,
        ]),
        "wasmcni new --sdk-git",
    );
    let cargo = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(
        cargo.contains(&format!(
            "guest-sdk = {{ package = \"wasmcni-guest-sdk\", git = \"{url}\", rev = \"{rev}\" }}"
        )) && !cargo.contains("guest-sdk = { package = \"wasmcni-guest-sdk\", path"),
        "{cargo}"
    );
    let wasm = cargo_build_as(&crate_dir, name, false, &[]);
    // The printed `try` step, run as printed from the crate's directory
    // (the built plugin at the path it names).
    let printed = String::from_utf8_lossy(&made.stdout).into_owned();
    let step = printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("sudo wasmcni "))
        .unwrap_or_else(|| panic!("no `sudo wasmcni try` step: {printed}"));
    let args: Vec<String> = step
        .split_whitespace()
        .map(|a| {
            if a.ends_with(".wasm") {
                s(&wasm).to_owned()
            } else {
                a.to_owned()
            }
        })
        .collect();
    assert_eq!(args[..2], ["try".to_owned(), s(&wasm).to_owned()], "{step}");
    assert!(step.contains("--config net.conflist"), "{step}");
    let tried = ok(
        Command::new(support::wasmcni())
            .args(&args)
            .current_dir(&crate_dir)
            .output()
            .expect("wasmcni try"),
        "the printed wasmcni try",
    );
    let text = String::from_utf8_lossy(&tried.stdout);
    assert!(text.contains("container.modify"), "{text}");
}

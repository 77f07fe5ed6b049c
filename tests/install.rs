//! `wasmcni install` as a node operator uses it: a third-party plugin
//! installed beside the standard ones (link, plugin file, pinned policy
//! entry, precompiled artifact) and run through the real libcni in a chain
//! after a standard plugin; its pin renewed when it is rebuilt (issue 11,
//! friction 5); and the node installer image (deploy/) run with podman as
//! its DaemonSet runs it, then libcni against what it installed.
//!
//! Everything lives in a private directory under target/; the "node" of
//! the image test is such a directory too, bind-mounted where the
//! DaemonSet mounts the node's paths.

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::cni::{Call, Drive};
use support::{Invoke, Netns};

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Everything under `root` that a run could change: for each path, its
/// kind, inode, size, modification and change times (ns) and link target.
/// Equal snapshots: nothing was written, replaced, renamed or chmod'ed.
fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_owned()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let link = std::fs::read_link(&path).ok();
            out.insert(
                path.strip_prefix(root).unwrap().to_owned(),
                format!(
                    "{:?} ino={} size={} mtime={}.{} ctime={}.{} mode={:o} -> {link:?}",
                    m.file_type(),
                    m.ino(),
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                    m.mode()
                ),
            );
            if m.is_dir() {
                todo.push(path);
            }
        }
    }
    out
}

fn assert_unchanged(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
    let keys: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{k:?}: {:?} -> {:?}", before.get(k), after.get(k)))
        .collect();
    assert!(diff.is_empty(), "changed:\n{}", diff.join("\n"));
}

/// The artifacts in a cache dir.
fn artifacts(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    v.sort();
    v
}

/// The components the artifacts in a cache dir are of, sorted (`standard`
/// for the standard plugins that share that component).
fn artifact_components(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = artifacts(dir)
        .iter()
        .map(|a| {
            // NAME-SHA16-FINGERPRINT.cwasm
            let mut parts = a.rsplitn(3, '-');
            parts.nth(2).unwrap_or_default().to_owned()
        })
        .collect();
    v.sort();
    v
}

/// The standard plugins (`wasmcni list`: NAME ORIGIN ...).
fn standard_plugins() -> Vec<String> {
    let out = Command::new(support::wasmcni())
        .arg("list")
        .env_clear()
        .output()
        .unwrap();
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let name = cols.next()?;
            (cols.next()? == "bundled").then(|| name.to_owned())
        })
        .collect();
    assert!(names.iter().any(|n| n == "loopback"), "{}", text(&out));
    names
}

/// A "rebuild" of a component: the same component with a custom section
/// appended (valid, different bytes, a different sha256).
fn rebuilt(wasm: &[u8], tag: &str) -> Vec<u8> {
    let name = b"rebuild";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(tag.as_bytes());
    assert!(section.len() < 128);
    let mut out = wasm.to_vec();
    out.push(0);
    out.push(section.len() as u8);
    out.extend(section);
    out
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A node directory for the plugin-install test: bin dir, plugin dir,
/// policy dir, policy file, audit and state, all private.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = support::private_tempdir();
        let n = Node { dir };
        std::fs::create_dir(n.path("src")).unwrap();
        // The wasmcni this node installs from: a copy, so one rebuilt by a
        // concurrent `cargo build` cannot change under the test.
        std::fs::create_dir(n.path("tool")).unwrap();
        std::fs::copy(support::wasmcni(), n.path("tool/wasmcni")).unwrap();
        // An empty policy file: the machine's own (if any) plays no part.
        std::fs::write(n.path("policy.json"), r#"{"plugins":{}}"#).unwrap();
        std::fs::write(
            n.path("src/entry.json"),
            json!({"container": {"read": true, "modify": true}}).to_string(),
        )
        .unwrap();
        n
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `wasmcni install bin --plugin-dir plugins --policy-dir policy.d ARGS`,
    /// with a clean environment.
    fn install(&self, args: &[&str]) -> Output {
        Command::new(self.path("tool/wasmcni"))
            .arg("install")
            .arg(self.path("bin"))
            .arg("--plugin-dir")
            .arg(self.path("plugins"))
            .arg("--policy-dir")
            .arg(self.path("policy.d"))
            .args(args)
            .env_clear()
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    /// Runs `install ARGS`, which must be refused before it changes
    /// anything: a failure, with every one of `needles` in its stderr, no
    /// panic, and the node's files as they were.
    fn assert_refused(&self, args: &[&str], needles: &[&str]) {
        self.assert_refused_by(&format!("{args:?}"), || self.install(args), needles);
    }

    /// As [`Node::assert_refused`], for a command `run` makes (`what`
    /// names it in messages).
    fn assert_refused_by(&self, what: &str, run: impl FnOnce() -> Output, needles: &[&str]) {
        let before = tree(self.dir.path());
        let out = run();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: {}", text(&out));
        for needle in needles {
            assert!(
                err.contains(needle),
                "{what}: no {needle:?} in {}",
                text(&out)
            );
        }
        assert!(!err.contains("panicked"), "{what}: {}", text(&out));
        assert_unchanged(&before, &tree(self.dir.path()));
    }

    /// What the node's runtime would give a plugin: where to find
    /// third-party plugins and policy, and where to audit.
    fn env(&self) -> Vec<(String, String)> {
        [
            ("WASMCNI_PLUGIN_DIR", "plugins"),
            ("WASMCNI_POLICY_DIR", "policy.d"),
            ("WASMCNI_POLICY", "policy.json"),
            ("WASMCNI_AUDIT", "audit.jsonl"),
            ("WASMCNI_STATE_DIR", "state"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), self.path(v).display().to_string()))
        .collect()
    }

    /// ADD of `plugin` through its link in the bin dir, in `ns`.
    fn add(&self, plugin: &str, ns: &Netns) -> support::Run {
        let conf = format!(r#"{{"cniVersion":"1.0.0","name":"lo-net","type":"{plugin}"}}"#);
        let mut inv =
            Invoke::exe(self.path("bin").join(plugin), conf.as_bytes()).cni("ADD", &ns.path, "lo");
        for (k, v) in self.env() {
            inv = inv.env(&k, v);
        }
        inv.run()
    }

    /// libcni's `cmd` of `conflist` through the bin dir, in `ctr` (`lo`),
    /// as the node's runtime would run it (`env`).
    fn libcni(&self, netnode: &Netns, conflist: &Path, ctr: &Netns, cid: &str, cmd: &str) -> Drive {
        Call {
            node: netnode,
            bin: &self.path("bin"),
            cmd,
            conflist,
            netns: &ctr.path,
            cid,
            ifname: "lo",
            cache: &self.path("libcni"),
            args: "",
            capargs: "",
            env: &self.env(),
        }
        .run()
    }

    fn entry(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path("policy.d/myplugin.json")).unwrap())
            .unwrap()
    }
}

#[test]
fn a_third_party_plugin_installs_beside_the_standard_ones_and_runs_in_a_libcni_chain() {
    support::require_root();
    let node = Node::new();
    // The plugin: a copy of the loopback component, under a name of its own.
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let sha = sha256(&wasm);

    let out = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let bin = node.path("bin");
    assert_eq!(
        std::fs::read_link(bin.join("myplugin")).unwrap(),
        Path::new("wasmcni")
    );
    assert_eq!(
        std::fs::read_link(bin.join("loopback")).unwrap(),
        Path::new("wasmcni")
    );
    assert_eq!(
        std::fs::read(node.path("plugins/myplugin.wasm")).unwrap(),
        wasm
    );
    let entry = node.entry();
    assert_eq!(entry["sha256"], sha.as_str(), "{entry}");
    assert_eq!(entry["container"]["modify"], true, "{entry}");
    let arts = artifacts(&bin.join(".wasmcni-cache"));
    assert!(
        arts.iter()
            .any(|a| a.starts_with(&format!("myplugin-{}-", &sha[..16]))),
        "no artifact for myplugin: {arts:?}"
    );
    // loopback's, one for the other standard plugins (one component), myplugin's.
    assert_eq!(
        artifact_components(&bin.join(".wasmcni-cache")),
        ["loopback", "myplugin", "standard"],
        "{arts:?}"
    );
    for (dir, file) in [("plugins", "myplugin.wasm"), ("policy.d", "myplugin.json")] {
        let record = std::fs::read_to_string(node.path(dir).join(".wasmcni-owned")).unwrap();
        let bytes = std::fs::read(node.path(dir).join(file)).unwrap();
        assert_eq!(record, format!("{}  {file}\n", sha256(&bytes)), "{dir}");
    }

    // Idempotent: the same command again, and a plain install of the bin
    // dir (which keeps the third-party artifact), change nothing.
    let before = tree(node.dir.path());
    let out = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("myplugin.json: unchanged"),
        "{}",
        text(&out)
    );
    let out = node.install(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_unchanged(&before, &tree(node.dir.path()));

    // The link runs it, from the artifact install compiled (none added).
    let ns = Netns::new("inst");
    let r = node.add("myplugin", &ns);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(ns.lo_up());
    assert_eq!(artifacts(&bin.join(".wasmcni-cache")), arts);

    // Through the real libcni: a standard plugin, then the installed one.
    let netnode = Netns::new("instn");
    let ctr = Netns::new("instc");
    let conflist = node.path("chain.conflist");
    std::fs::write(
        &conflist,
        json!({"cniVersion": "1.0.0", "name": "chain",
               "plugins": [{"type": "loopback"}, {"type": "myplugin"}]})
        .to_string(),
    )
    .unwrap();
    let call = |cmd: &str| node.libcni(&netnode, &conflist, &ctr, "inst0", cmd);
    let add = call("add");
    assert_eq!(add.code, 0, "{add:?}");
    assert!(ctr.lo_up());
    assert_eq!(add.json()["interfaces"][0]["name"], "lo", "{add:?}");
    let audit = std::fs::read_to_string(node.path("audit.jsonl")).unwrap();
    assert!(
        audit.lines().any(|l| l.contains("\"plugin\":\"myplugin\"")
            && l.contains("\"container_id\":\"inst0\"")
            && l.contains(&sha)),
        "myplugin ran in the chain: {audit}"
    );
    let check = call("check");
    assert_eq!(check.code, 0, "{check:?}");
    let del = call("del");
    assert_eq!(del.code, 0, "{del:?}");
    assert!(!ctr.lo_up());
}

/// Friction 5: a rebuilt plugin is re-pinned by install, but only in an
/// entry install wrote; someone else's entry is left alone, loudly.
#[test]
fn a_rebuilt_plugin_is_re_pinned_only_where_install_owns_the_entry() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let out = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // Rebuilt, installed again without --policy: the entry install wrote
    // follows the new build, and the plugin runs.
    let v2 = rebuilt(&wasm, "v2");
    std::fs::write(node.path("src/myplugin.wasm"), &v2).unwrap();
    let out = node.install(&["--plugin", "src/myplugin.wasm"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("re-pinned"),
        "{}",
        text(&out)
    );
    assert_eq!(node.entry()["sha256"], sha256(&v2).as_str());
    assert_eq!(
        std::fs::read(node.path("plugins/myplugin.wasm")).unwrap(),
        v2
    );
    let ns = Netns::new("repin");
    let r = node.add("myplugin", &ns);
    assert_eq!(r.code, 0, "{r:?}");

    // The operator edits the entry: it is theirs now. The next rebuild is
    // refused (issue 27: it was installed with a warning), as a run would
    // refuse it: nothing changes, and install says which file to change.
    let mut mine = node.entry();
    mine["deadline-ms"] = json!(5000);
    let mine = serde_json::to_vec_pretty(&mine).unwrap();
    std::fs::write(node.path("policy.d/myplugin.json"), &mine).unwrap();
    let v3 = rebuilt(&wasm, "v3");
    std::fs::write(node.path("src/myplugin.wasm"), &v3).unwrap();
    node.assert_refused(
        &["--plugin", "src/myplugin.wasm"],
        &[
            "plugin \"myplugin\" would be REFUSED on every run",
            &format!("pins it to {}", sha256(&v2)),
            &format!(
                "set `sha256` in {}",
                node.path("policy.d/myplugin.json").display()
            ),
            &sha256(&v3),
            "--allow-broken",
        ],
    );
    let r = node.add("myplugin", &ns);
    assert_eq!(r.code, 0, "v2 still runs: {r:?}");
    // With --allow-broken the build is installed, the entry not touched,
    // and the plugin refused — as install said.
    let out = node.install(&["--plugin", "src/myplugin.wasm", "--allow-broken"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("would be REFUSED"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read(node.path("policy.d/myplugin.json")).unwrap(),
        mine
    );
    let r = node.add("myplugin", &ns);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&sha256(&v3)), "{r:?}");

    // --policy does not replace their entry either, and nothing changes...
    node.assert_refused(
        &[
            "--plugin",
            "src/myplugin.wasm",
            "--policy",
            "src/entry.json",
        ],
        &["refusing", "myplugin.json"],
    );
    // ...unless told to.
    let out = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
        "--force",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(node.entry()["sha256"], sha256(&v3).as_str());
    let r = node.add("myplugin", &ns);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn install_refuses_what_it_cannot_or_must_not_install() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    // A native build under a .wasm name (its first 64 KiB: the header is
    // what tells).
    let mut elf = vec![0; 64 << 10];
    std::io::Read::read_exact(
        &mut std::fs::File::open(support::wasmcni()).unwrap(),
        &mut elf,
    )
    .unwrap();
    std::fs::write(node.path("src/native.wasm"), &elf).unwrap();
    std::fs::write(
        node.path("src/bad-entry.json"),
        r#"{"container":{"modfiy":true}}"#,
    )
    .unwrap();
    std::fs::create_dir(node.path("plugins")).unwrap();
    std::fs::write(node.path("plugins/theirs.wasm"), b"not ours").unwrap();
    let out = node.install(&[]);
    assert!(out.status.success(), "{}", text(&out));
    for (args, needle) in [
        (
            &["--plugin", "src/myplugin.wasm", "--name", "loopback"][..],
            "standard plugin",
        ),
        (
            &["--plugin", "src/myplugin.wasm", "--name", "standard"][..],
            "standard plugin or component",
        ),
        (
            &["--plugin", "src/myplugin.wasm", "--name", "../x"][..],
            "invalid plugin name",
        ),
        (
            &["--plugin", "src/native.wasm"][..],
            "native ELF executable, not a WASI component: build the plugin with `cargo build --release --target wasm32-wasip2`",
        ),
        (&["--plugin", "src/missing.wasm"][..], "src/missing.wasm"),
        (
            &["--plugin", "src/myplugin.wasm", "--name", "theirs"][..],
            "refusing to replace files that are not wasmcni's own (use --force)",
        ),
        (
            &["--plugin", "src/myplugin.wasm", "--policy", "src/bad-entry.json"][..],
            "modfiy",
        ),
        (&["--policy", "src/entry.json"][..], "--plugin"),
    ] {
        // Checked before anything was changed.
        node.assert_refused(args, &[needle]);
    }
}

// ---------------------------------------------------------------------------
// The node installer image, run as the DaemonSet runs it.

const IMAGE: &str = "localhost/wasmcni-installer:test";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The container's arguments, as deploy/wasmcni-daemonset.yaml gives them.
fn manifest_args() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/wasmcni-daemonset.yaml")).unwrap();
    let mut lines = text.lines().skip_while(|l| l.trim() != "args:").skip(1);
    let mut args = Vec::new();
    for l in lines.by_ref() {
        let t = l.trim();
        if t.starts_with('#') {
            continue;
        }
        match t.strip_prefix("- ") {
            Some(a) => args.push(a.to_owned()),
            None => break,
        }
    }
    assert!(
        args.first().is_some_and(|a| a == "install") && args.len() > 5,
        "args: {args:?}"
    );
    args
}

/// Builds the image (`make image-build`: the static musl build and
/// `podman build`, each a no-op when current); returns the seconds it took.
/// From the debug build (`IMAGE_PROFILE=dev`): the same code for the same
/// target in the same image, built in ~60% of the release build's CPU
/// time, which the rest of the test run needs (the test checks what the
/// image does as the DaemonSet runs it, not its speed).
fn build_image() -> f64 {
    let t = std::time::Instant::now();
    let out = Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(repo())
        .arg("image-build")
        .arg(format!("IMAGE={IMAGE}"))
        .arg("IMAGE_PROFILE=dev")
        // tests/run sets it for the test binary alone (libtest's
        // --report-time): the image's build must not see it.
        .env_remove("RUSTC_BOOTSTRAP")
        .output()
        .expect("running make (apt-get install make)");
    assert!(
        out.status.success(),
        "make image-build (needs `make setup`: the {} rustup target and musl-tools): {}",
        "x86_64-unknown-linux-musl",
        text(&out)
    );
    t.elapsed().as_secs_f64()
}

/// Gives the calling thread, and every process it starts, a mount
/// namespace of its own in which podman's storage and state directories
/// are empty tmpfs (as tests/podman/run.sh does): the image, containers
/// and their state never touch the machine's, and vanish with the test.
fn private_podman_state() {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS | nix::sched::CloneFlags::CLONE_FS)
        .expect("unshare(CLONE_NEWNS)");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("making / private in this mount namespace");
    for d in [
        "/var/lib/containers",
        "/run/containers",
        "/run/libpod",
        "/var/lib/cni",
        "/etc/cni/net.d",
        // podman runs the plugins without the test's WASMCNI_* settings
        // (its cleanup process at least): wasmcni's default audit log and
        // attachment records must not be the machine's.
        "/var/log/wasmcni",
        "/var/lib/wasmcni",
    ] {
        std::fs::create_dir_all(d).unwrap();
        mount(
            Some("tmpfs"),
            d,
            Some("tmpfs"),
            MsFlags::empty(),
            // Not tmpfs's default 1777: wasmcni keeps no records where
            // others can write.
            Some("mode=0755"),
        )
        .unwrap_or_else(|e| panic!("tmpfs on {d}: {e}"));
    }
}

/// A container started by the test, removed when dropped.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rm", "-f", &self.0]).output();
    }
}

/// The node and its configuration for the image test.
struct ImageNode {
    dir: tempfile::TempDir,
}

/// The DaemonSet's mounts: the node's paths under /host, the ConfigMaps
/// under /config (deploy/wasmcni-daemonset.yaml), plus a third-party
/// plugin (an optional ConfigMap in deploy/README.md).
const MOUNTS: &[(&str, &str, bool)] = &[
    ("host/opt/cni/bin", "/host/opt/cni/bin", false),
    ("host/etc/cni/net.d", "/host/etc/cni/net.d", false),
    ("host/etc/wasmcni", "/host/etc/wasmcni", false),
    ("host/opt/wasmcni", "/host/opt/wasmcni", false),
    ("config/conflist", "/config/conflist", true),
    ("config/policy", "/config/policy", true),
    ("config/plugins", "/config/plugins", true),
];

const CONFLIST: &str = r#"{"cniVersion":"1.0.0","name":"wasmcni","plugins":[{"type":"loopback"},{"type":"myplugin"}]}"#;
const POLICY: &str = r#"{"plugins":{"loopback":{"container":{"read":true,"modify":true}}}}"#;

impl ImageNode {
    fn new() -> ImageNode {
        let n = ImageNode {
            dir: support::private_tempdir(),
        };
        for (dir, _, _) in MOUNTS {
            std::fs::create_dir_all(n.path(dir)).unwrap();
        }
        // A ConfigMap volume as the kubelet writes it: each key a symlink
        // into the current `..data` directory.
        let data = n.path("config/conflist/..data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("10-wasmcni.conflist"), CONFLIST).unwrap();
        std::os::unix::fs::symlink(
            "..data/10-wasmcni.conflist",
            n.path("config/conflist/10-wasmcni.conflist"),
        )
        .unwrap();
        std::fs::write(n.path("config/policy/policy.json"), POLICY).unwrap();
        std::fs::copy(
            support::fixture("loopback"),
            n.path("config/plugins/myplugin.wasm"),
        )
        .unwrap();
        std::fs::write(
            n.path("config/plugins/myplugin.json"),
            json!({"container": {"read": true, "modify": true}}).to_string(),
        )
        .unwrap();
        n
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `podman run` of the installer with the DaemonSet's security context
    /// (not privileged, no capabilities, read-only root, uid 0), mounts
    /// and arguments.
    fn run(&self, detached: Option<&str>, sleep: bool) -> Output {
        let mut c = Command::new("podman");
        c.arg("run");
        match detached {
            Some(name) => c.args(["-d", "--name", name]),
            None => c.arg("--rm"),
        };
        c.args([
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "all",
            "--security-opt",
            "no-new-privileges",
            "--user",
            "0:0",
            "--pull",
            "never",
            "--runtime",
            "runc",
            // The machine's hard limits are below podman's defaults.
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1000:1000",
        ]);
        for (dir, at, ro) in MOUNTS {
            c.arg("-v").arg(format!(
                "{}:{at}{}",
                self.path(dir).display(),
                if *ro { ":ro" } else { "" }
            ));
        }
        c.arg(IMAGE);
        let args: Vec<String> = manifest_args()
            .into_iter()
            .filter(|a| sleep || a != "--then-sleep")
            .collect();
        c.args(args).args([
            "--plugin=/config/plugins/myplugin.wasm",
            "--policy=/config/plugins/myplugin.json",
        ]);
        c.output().expect("running podman")
    }

    fn host(&self) -> PathBuf {
        self.path("host")
    }
}

#[test]
fn installer_image_installs_a_node_as_the_daemonset_runs_it() {
    support::require_root();
    assert!(
        Command::new("podman")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs podman (apt-get install podman; `make setup` does)"
    );
    private_podman_state();
    let secs = build_image();
    eprintln!("installer image: make image-build took {secs:.1} s");
    let manifest = std::fs::read_to_string(repo().join("deploy/wasmcni-daemonset.yaml")).unwrap();
    for (_, at, _) in MOUNTS.iter().filter(|(d, _, _)| d.starts_with("host/")) {
        assert!(
            manifest.contains(&format!("mountPath: {at} }}")),
            "the manifest mounts {at}"
        );
    }
    let node = ImageNode::new();

    // As a DaemonSet pod: install, then wait; SIGTERM ends it at once, 0.
    let name = format!("wasmcni-install-test-{}", std::process::id());
    let started = node.run(Some(&name), true);
    assert!(started.status.success(), "{}", text(&started));
    let _container = Container(name.clone());
    let t = std::time::Instant::now();
    let logs = loop {
        let logs = Command::new("podman")
            .args(["logs", &name])
            .output()
            .unwrap();
        let all = text(&logs);
        if all.contains("waiting for SIGTERM") {
            break all;
        }
        let state = Command::new("podman")
            .args(["inspect", "--format", "{{.State.Status}}", &name])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&state.stdout).trim() == "running",
            "the installer stopped: {all}"
        );
        assert!(t.elapsed().as_secs() < 300, "installer timed out: {all}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let t = std::time::Instant::now();
    let stop = Command::new("podman")
        .args(["stop", "-t", "30", &name])
        .output()
        .unwrap();
    assert!(stop.status.success(), "{}", text(&stop));
    assert!(
        t.elapsed().as_secs() < 15,
        "SIGTERM did not end the installer (killed after the grace period)"
    );
    let code = Command::new("podman")
        .args(["inspect", "--format", "{{.State.ExitCode}}", &name])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&code.stdout).trim(), "0", "{logs}");

    // What it installed, at the node's paths.
    let host = node.host();
    let bin = host.join("opt/cni/bin");
    assert_eq!(
        std::fs::read(bin.join("wasmcni")).unwrap(),
        std::fs::read(repo().join("target/image/wasmcni")).unwrap(),
        "the image's static wasmcni"
    );
    // What the conflist names (issue 27: no --only links those alone, not
    // every standard plugin).
    let plugins = ["loopback", "myplugin"];
    for p in plugins {
        assert_eq!(
            std::fs::read_link(bin.join(p)).unwrap(),
            Path::new("wasmcni"),
            "{p}"
        );
    }
    for p in standard_plugins().iter().filter(|p| *p != "loopback") {
        assert!(
            std::fs::symlink_metadata(bin.join(p)).is_err(),
            "{p} linked"
        );
    }
    let arts = artifacts(&bin.join(".wasmcni-cache"));
    assert_eq!(
        artifact_components(&bin.join(".wasmcni-cache")),
        ["loopback", "myplugin"]
    );
    assert_eq!(
        std::fs::read_to_string(host.join("etc/cni/net.d/10-wasmcni.conflist")).unwrap(),
        CONFLIST
    );
    assert_eq!(
        std::fs::read_to_string(host.join("etc/wasmcni/policy.json")).unwrap(),
        POLICY
    );
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    assert_eq!(
        std::fs::read(host.join("opt/wasmcni/plugins/myplugin.wasm")).unwrap(),
        wasm
    );
    let entry: Value = serde_json::from_slice(
        &std::fs::read(host.join("etc/wasmcni/policy.d/myplugin.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(entry["sha256"], sha256(&wasm).as_str());

    // A second run changes nothing.
    let before = tree(&host);
    let out = node.run(None, false);
    assert!(out.status.success(), "{}", text(&out));
    assert_unchanged(&before, &tree(&host));

    // A file it does not own (an operator's edit) is left alone, and the
    // pod fails, naming it.
    let conf = host.join("etc/cni/net.d/10-wasmcni.conflist");
    let edited = CONFLIST.replace("\"wasmcni\"", "\"edited\"");
    std::fs::write(&conf, &edited).unwrap();
    let before = tree(&host);
    let out = node.run(None, false);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing") && err.contains("/host/etc/cni/net.d/10-wasmcni.conflist"),
        "{}",
        text(&out)
    );
    assert_unchanged(&before, &tree(&host));
    // Put back exactly as install wrote it, it is install's again.
    std::fs::write(&conf, CONFLIST).unwrap();

    // The node's runtime: libcni with the installed bin dir and conflist,
    // wasmcni reading the node's plugin dir and policy (here under the
    // node directory), and loading the artifacts the container compiled.
    let env: Vec<(String, String)> = [
        ("WASMCNI_PLUGIN_DIR", "opt/wasmcni/plugins"),
        ("WASMCNI_POLICY", "etc/wasmcni/policy.json"),
        ("WASMCNI_POLICY_DIR", "etc/wasmcni/policy.d"),
        ("WASMCNI_AUDIT", "audit.jsonl"),
        ("WASMCNI_STATE_DIR", "state"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), host.join(v).display().to_string()))
    .collect();
    let netnode = Netns::new("imgn");
    let ctr = Netns::new("imgc");
    let call = |cmd: &str| {
        Call {
            node: &netnode,
            bin: &bin,
            cmd,
            conflist: &conf,
            netns: &ctr.path,
            cid: "img0",
            ifname: "lo",
            cache: &node.path("libcni"),
            args: "",
            capargs: "",
            env: &env,
        }
        .run()
    };
    let add = call("add");
    assert_eq!(add.code, 0, "{add:?}");
    assert!(ctr.lo_up());
    let audit = std::fs::read_to_string(host.join("audit.jsonl")).unwrap();
    assert!(
        audit.contains("\"plugin\":\"myplugin\""),
        "myplugin ran: {audit}"
    );
    assert_eq!(call("check").code, 0);
    let del = call("del");
    assert_eq!(del.code, 0, "{del:?}");
    assert!(!ctr.lo_up());
    // Every plugin loaded from what the container precompiled.
    assert_eq!(artifacts(&bin.join(".wasmcni-cache")), arts);
}

/// Installed where a run looks for policy (no --policy-dir): install warns
/// when the plugin would have no authority, and refuses when a run would
/// refuse it (issue 27: it warned and installed): an entry in the policy
/// file or the policy dir pinned to another build.
#[test]
fn install_warns_of_a_plugin_without_authority_and_refuses_one_pinned_elsewhere() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/bare.wasm"), &wasm).unwrap();
    std::fs::create_dir(node.path("policy.d")).unwrap();
    let install = |extra: &[&str]| {
        let mut c = Command::new(node.path("tool/wasmcni"));
        c.arg("install")
            .arg(node.path("bin"))
            .arg("--plugin-dir")
            .arg(node.path("plugins"))
            .args(["--only", "loopback", "--plugin", "src/bare.wasm"])
            .args(extra)
            .env_clear()
            .current_dir(node.dir.path());
        for (k, v) in node.env() {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = install(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("it has no policy entry"),
        "{}",
        text(&out)
    );
    // An entry in the policy file pinned to another build.
    let policy = node.path("policy.json");
    std::fs::write(
        &policy,
        json!({"plugins": {"bare": {"sha256": "ab".repeat(32)}}}).to_string(),
    )
    .unwrap();
    let sha = sha256(&wasm);
    node.assert_refused_by(
        "pinned in the policy file",
        || install(&[]),
        &[
            "plugin \"bare\" would be REFUSED on every run",
            &format!(
                "its sha256 is {sha} but the policy pins it to {}",
                "ab".repeat(32)
            ),
            &format!("set plugins.bare.sha256 in {} to {sha}", policy.display()),
        ],
    );
    // Pinned right: nothing to say.
    std::fs::write(
        &policy,
        json!({"plugins": {"bare": {"sha256": sha}}}).to_string(),
    )
    .unwrap();
    let out = install(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        text(&out)
    );
    // An entry in the policy dir (not install's) pinned to another build:
    // refused; with --allow-broken, one warning for the one problem
    // (issue 27: there were two).
    std::fs::write(&policy, r#"{"plugins":{}}"#).unwrap();
    std::fs::write(
        node.path("policy.d/bare.json"),
        json!({"sha256": "ab".repeat(32)}).to_string(),
    )
    .unwrap();
    node.assert_refused_by(
        "pinned in the policy dir",
        || install(&[]),
        &["would be REFUSED", "bare.json", &sha],
    );
    let out = install(&["--allow-broken"]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.to_lowercase().contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", text(&out));
    assert!(
        warnings[0].contains("REFUSE") && warnings[0].contains("bare.json"),
        "{}",
        text(&out)
    );
}

/// `--only`: on a node whose bin dir holds the native reference plugins
/// (flannel, Calico, kubenet), install links only the standard plugins
/// named, needs no --force and leaves the native ones alone; an unknown
/// name is refused with the list of valid ones, before anything changes.
#[test]
fn install_only_links_the_named_standard_plugins_and_leaves_native_ones_alone() {
    support::require_root();
    let node = Node::new();
    let std_names = standard_plugins();
    for n in ["bridge", "host-local", "loopback"] {
        assert!(std_names.iter().any(|s| s == n), "{std_names:?}");
    }
    let bin = node.path("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("bridge"), b"native bridge").unwrap();
    std::fs::write(bin.join("host-local"), b"native host-local").unwrap();
    std::os::unix::fs::symlink("/usr/libexec/cni/portmap", bin.join("portmap")).unwrap();

    // Without --only, these are conflicts (as before).
    let out = node.install(&[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use --force"),
        "{}",
        text(&out)
    );

    node.assert_refused(
        &["--only", "loopback,nosuch"],
        &["\"nosuch\" is not a standard plugin", "bridge", "loopback"],
    );

    let out = node.install(&["--only", "loopback"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_link(bin.join("loopback")).unwrap(),
        Path::new("wasmcni")
    );
    assert_eq!(std::fs::read(bin.join("bridge")).unwrap(), b"native bridge");
    assert_eq!(
        std::fs::read(bin.join("host-local")).unwrap(),
        b"native host-local"
    );
    assert_eq!(
        std::fs::read_link(bin.join("portmap")).unwrap(),
        Path::new("/usr/libexec/cni/portmap")
    );
    for n in std_names.iter().filter(|n| *n != "loopback") {
        assert!(
            std::fs::read_link(bin.join(n)).ok().as_deref() != Some(Path::new("wasmcni")),
            "{n} was linked"
        );
    }
    // loopback is a component of its own; nothing else was compiled.
    assert_eq!(
        artifact_components(&bin.join(".wasmcni-cache")),
        ["loopback"],
        "artifacts beyond --only"
    );
    // A plugin installed with --only is linked too.
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let out = node.install(&["--only", "loopback", "--plugin", "src/myplugin.wasm"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_link(bin.join("myplugin")).unwrap(),
        Path::new("wasmcni")
    );
    assert_eq!(std::fs::read(bin.join("bridge")).unwrap(), b"native bridge");
}

/// A pre-planted symlink is never written through: not at the temporary
/// name an installer that is pid 1 (every DaemonSet pod) used to pick,
/// nor at the files replaced with --force; each replacement is a rename,
/// and no temporary is left behind.
#[test]
fn install_never_writes_through_a_planted_symlink() {
    support::require_root();
    let node = Node::new();
    let bin = node.path("bin");
    std::fs::create_dir(&bin).unwrap();
    for v in ["victim-tmp", "victim-bin", "victim-link"] {
        std::fs::write(node.path(v), v).unwrap();
    }
    // The old temporary name of pid 1, and the targets themselves.
    std::os::unix::fs::symlink(node.path("victim-tmp"), bin.join(".wasmcni.tmp1")).unwrap();
    std::os::unix::fs::symlink(node.path("victim-bin"), bin.join("wasmcni")).unwrap();
    std::os::unix::fs::symlink(node.path("victim-link"), bin.join("bridge")).unwrap();
    // As pid 1, in a pid namespace of its own.
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--"])
        .arg(node.path("tool/wasmcni"))
        .arg("install")
        .arg(&bin)
        .arg("--plugin-dir")
        .arg(node.path("plugins"))
        .arg("--policy-dir")
        .arg(node.path("policy.d"))
        .args(["--only", "bridge,loopback", "--force"])
        .env_clear()
        .current_dir(node.dir.path())
        .output()
        .expect("running unshare (util-linux)");
    assert!(out.status.success(), "{}", text(&out));
    for v in ["victim-tmp", "victim-bin", "victim-link"] {
        assert_eq!(std::fs::read(node.path(v)).unwrap(), v.as_bytes(), "{v}");
    }
    let m = std::fs::symlink_metadata(bin.join("wasmcni")).unwrap();
    assert!(m.is_file(), "{m:?}");
    assert_eq!(
        std::fs::read(bin.join("wasmcni")).unwrap(),
        std::fs::read(node.path("tool/wasmcni")).unwrap()
    );
    assert_eq!(
        std::fs::read_link(bin.join("bridge")).unwrap(),
        Path::new("wasmcni")
    );
    let left: Vec<String> = std::fs::read_dir(&bin)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp") && n != ".wasmcni.tmp1")
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// An entry written into the policy dir for a plugin the policy file also
/// names makes wasmcni refuse the plugin as ambiguous: install refuses
/// (issue 27: it warned and wrote it), naming both files, both where the
/// policy dir is the one a run reads and where it is given with
/// --policy-dir (the DaemonSet's case); so does a policy file written
/// alone that names a plugin the policy dir has an entry for (it said
/// nothing). With --allow-broken it warns, once.
#[test]
fn install_refuses_an_entry_the_policy_file_also_has() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let run = |policy_dir_flag: bool, extra: &[&str]| {
        let mut c = Command::new(node.path("tool/wasmcni"));
        c.arg("install")
            .arg(node.path("bin"))
            .arg("--plugin-dir")
            .arg(node.path("plugins"));
        if policy_dir_flag {
            c.arg("--policy-dir").arg(node.path("policy.d"));
        }
        c.args([
            "--only",
            "loopback",
            "--plugin",
            "src/myplugin.wasm",
            "--policy",
            "src/entry.json",
        ])
        .args(extra)
        .env_clear()
        .env("WASMCNI_POLICY", node.path("policy.json"))
        .current_dir(node.dir.path());
        if !policy_dir_flag {
            c.env("WASMCNI_POLICY_DIR", node.path("policy.d"));
        }
        c.output().unwrap()
    };
    // Only in the policy dir: nothing to say.
    let out = run(true, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("REFUSED"),
        "{}",
        text(&out)
    );
    let policy = node.path("policy.json");
    let entry = node.path("policy.d/myplugin.json");
    std::fs::write(&policy, json!({"plugins": {"myplugin": {}}}).to_string()).unwrap();
    let ambiguous = [
        "plugin \"myplugin\" would be REFUSED on every run",
        "has an entry both in",
        &format!("{} (plugins.myplugin)", policy.display()),
        &format!("and in {}; remove one", entry.display()),
        "nothing was changed",
        "--allow-broken",
    ];
    for flag in [true, false] {
        node.assert_refused_by(
            &format!("--policy-dir {flag}"),
            || run(flag, &[]),
            &ambiguous,
        );
    }
    // --allow-broken: installed, and said once (issue 27: without
    // --policy-dir, the check of the effective policy said it a second
    // time).
    for flag in [true, false] {
        let out = run(flag, &["--allow-broken"]);
        assert!(out.status.success(), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.matches("has an entry both in").count(),
            1,
            "--policy-dir {flag}: {}",
            text(&out)
        );
        assert!(err.contains("--allow-broken"), "{}", text(&out));
    }

    // The policy file alone, naming a plugin the policy dir has an entry
    // for: refused too, before it is written.
    let policy = node.path("etc/policy.json");
    std::fs::write(
        node.path("src/new-policy.json"),
        json!({"plugins": {"loopback": {"container": {"read": true, "modify": true}},
                           "myplugin": {"container": {"read": true}}}})
        .to_string(),
    )
    .unwrap();
    let policy_arg = policy.display().to_string();
    node.assert_refused(
        &[
            "--only",
            "loopback",
            "--policy-file",
            "src/new-policy.json",
            "--policy-target",
            &policy_arg,
        ],
        &[
            "plugin \"myplugin\" would be REFUSED on every run",
            &format!("{policy_arg} (plugins.myplugin)"),
            &format!("and in {}; remove one", entry.display()),
        ],
    );
    assert!(!node.path("etc").exists());
}

/// `wasmcni list` as a node operator runs it after install: with the node's
/// plugin dir and policy, and `--bin-dir` when given.
fn list(node: &Node, args: &[&str]) -> Output {
    let out = Command::new(node.path("tool/wasmcni"))
        .arg("list")
        .args(args)
        .env_clear()
        .env("WASMCNI_PLUGIN_DIR", node.path("plugins"))
        .env("WASMCNI_POLICY", node.path("policy.json"))
        .current_dir(node.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    out
}

/// Issue 27 (6): the `wasmcni-chain` link install makes is reported as a
/// wasmcni link reaching the chain runner (it used to be `NOT FOUND`), in
/// the table and in JSON; the table's sha256 column is short, the JSON's
/// whole.
#[test]
fn list_reports_the_chain_link_install_made_and_short_sha256s() {
    support::require_root();
    let node = Node::new();
    let out = node.install(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let bin = node.path("bin");
    assert_eq!(
        std::fs::read_link(bin.join("wasmcni-chain")).unwrap(),
        Path::new("wasmcni")
    );

    let bin_arg = bin.display().to_string();
    let out = list(&node, &["--bin-dir", &bin_arg]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains("NOT FOUND"), "{}", text(&out));
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some("wasmcni-chain"))
        .unwrap_or_else(|| panic!("no wasmcni-chain row: {}", text(&out)))
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        [
            "wasmcni-chain",
            "wasmcni",
            "link",
            "bundled",
            "(chain",
            "runner)"
        ],
        "{}",
        text(&out)
    );
    // Plugin rows: NAME ORIGIN SHA256 POLICY, the sha256 as `7c5a…10fc`,
    // and no line as wide as a whole one would make it.
    let loopback = std::fs::read_link(bin.join("loopback")).unwrap();
    assert_eq!(loopback, Path::new("wasmcni"));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .take_while(|l| !l.is_empty())
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.len() >= standard_plugins().len(), "{}", text(&out));
    for r in &rows {
        let sha = r[2];
        assert_eq!(sha.chars().count(), 9, "{r:?}");
        let (head, tail) = sha.split_once('…').unwrap_or_else(|| panic!("{r:?}"));
        assert!(
            head.len() == 4
                && tail.len() == 4
                && (head.to_owned() + tail)
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit()),
            "{r:?}"
        );
    }

    let out = list(&node, &["--bin-dir", &bin_arg, "--json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = r["bin-dir"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "wasmcni-chain")
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(entry["kind"], "wasmcni link", "{entry}");
    assert_eq!(entry["plugin"], "bundled (chain runner)", "{entry}");
    for p in r["plugins"].as_array().unwrap() {
        let sha = p["sha256"].as_str().unwrap_or_default();
        assert!(
            sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "the JSON has the whole sha256: {p}"
        );
    }
}

/// Issue 27 (6): `--only` links the chain runner exactly when it names it
/// (like any standard plugin), and its list of valid names includes it.
#[test]
fn install_only_links_the_chain_runner_only_when_named() {
    support::require_root();
    let node = Node::new();
    let bin = node.path("bin");
    std::fs::create_dir(&bin).unwrap();
    node.assert_refused(
        &["--only", "wasmcni-chainx"],
        &[
            "\"wasmcni-chainx\" is not a standard plugin",
            "loopback",
            "wasmcni-chain)",
        ],
    );

    // Not named: not linked.
    let out = node.install(&["--only", "loopback"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        std::fs::symlink_metadata(bin.join("wasmcni-chain")).is_err(),
        "{}",
        text(&out)
    );
    // Named: linked, and `list` says it reaches the chain runner.
    let out = node.install(&["--only", "loopback,wasmcni-chain"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_link(bin.join("wasmcni-chain")).unwrap(),
        Path::new("wasmcni")
    );
    assert!(std::fs::symlink_metadata(bin.join("bridge")).is_err());
    let out = list(&node, &["--bin-dir", &bin.display().to_string()]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("wasmcni-chain") && l.contains("chain runner")),
        "{}",
        text(&out)
    );
    // The chain runner alone (a node whose plugins all run through it).
    let out = node.install(&["--only", "wasmcni-chain"]);
    assert!(out.status.success(), "{}", text(&out));
    // A later --only without it leaves the link alone, as any other name.
    let out = node.install(&["--only", "loopback"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_link(bin.join("wasmcni-chain")).unwrap(),
        Path::new("wasmcni")
    );
}

/// Issue 27 (7): `--policy` takes the plugin's entry alone or a policy
/// document holding it (as the template's policy.json, which `try
/// --policy` takes too), and pins it either way; a document without the
/// plugin's entry, or with other plugins' entries, is refused, naming the
/// plugin and the entries found, before anything changes.
#[test]
fn install_takes_the_policy_entry_alone_or_in_a_policy_document() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let sha = sha256(&wasm);
    let doc = |plugins: Value| json!({ "plugins": plugins }).to_string();
    let grant = json!({"container": {"read": true, "modify": true}});
    for (file, text) in [
        ("src/doc.json", doc(json!({ "myplugin": grant }))),
        ("src/none.json", doc(json!({}))),
        ("src/other.json", doc(json!({ "other": grant }))),
        (
            "src/both.json",
            doc(json!({ "myplugin": grant, "other": grant, "third": {} })),
        ),
        (
            "src/typo.json",
            doc(json!({ "myplugin": {"container": {"modfiy": true}} })),
        ),
        (
            "src/extra.json",
            json!({"plugins": { "myplugin": grant }, "version": 1}).to_string(),
        ),
    ] {
        std::fs::write(node.path(file), text).unwrap();
    }
    let out = node.install(&[]);
    assert!(out.status.success(), "{}", text(&out));

    for (policy, needle) in [
        (
            "src/none.json",
            "no entry for plugin \"myplugin\" (no plugins.myplugin; entries found: none)",
        ),
        (
            "src/other.json",
            "no entry for plugin \"myplugin\" (no plugins.myplugin; entries found: plugins.other)",
        ),
        (
            "src/both.json",
            "entries for other plugins besides \"myplugin\" (plugins.other, plugins.third)",
        ),
        ("src/typo.json", "plugins.myplugin.container.modfiy"),
        ("src/extra.json", "version"),
    ] {
        node.assert_refused(
            &["--plugin", "src/myplugin.wasm", "--policy", policy],
            &[needle, policy],
        );
    }
    // Under another name, the document's entry must be that name's.
    node.assert_refused(
        &[
            "--plugin",
            "src/myplugin.wasm",
            "--name",
            "renamed",
            "--policy",
            "src/doc.json",
        ],
        &["no entry for plugin \"renamed\" (no plugins.renamed; entries found: plugins.myplugin)"],
    );

    // A document: its entry is written, pinned.
    let out = node.install(&["--plugin", "src/myplugin.wasm", "--policy", "src/doc.json"]);
    assert!(out.status.success(), "{}", text(&out));
    let mut pinned = grant.clone();
    pinned["sha256"] = json!(sha);
    assert_eq!(node.entry(), pinned);
    // The same entry alone is the same entry: nothing changes.
    let before = tree(node.dir.path());
    let out = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_unchanged(&before, &tree(node.dir.path()));
    // It runs under it.
    let ns = Netns::new("instdoc");
    let r = node.add("myplugin", &ns);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(ns.lo_up());

    // The starter policy.json `wasmcni new` writes installs as it is.
    let crate_dir = node.path("myplugin-crate");
    let out = Command::new(node.path("tool/wasmcni"))
        .args(["new", "myplugin", "--dir"])
        .arg(&crate_dir)
        .arg("--sdk")
        .arg(repo().join("guest-sdk"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let starter = crate_dir.join("policy.json");
    let out = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        starter.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let starter: Value = serde_json::from_slice(&std::fs::read(&starter).unwrap()).unwrap();
    let mut pinned = starter["plugins"]["myplugin"].clone();
    pinned["sha256"] = json!(sha);
    assert_eq!(node.entry(), pinned);
}

/// Issue 27 (4): several `--plugin`s in one run, each with the `--name`
/// and `--policy` after it, and several `--conflist`s; a `--name` or
/// `--policy` that belongs to no `--plugin` or to one that has one
/// already, two plugins of one name and two conflists of one file name are
/// refused before anything changes.
#[test]
fn install_takes_many_plugins_each_with_its_own_name_and_policy() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    let bee = rebuilt(&wasm, "bee");
    std::fs::write(node.path("src/a.wasm"), &wasm).unwrap();
    std::fs::write(node.path("src/b.wasm"), &bee).unwrap();
    std::fs::write(
        node.path("src/a.json"),
        json!({"container": {"read": true, "modify": true}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        node.path("src/b.json"),
        json!({"container": {"read": true}}).to_string(),
    )
    .unwrap();
    std::fs::create_dir(node.path("src/other")).unwrap();
    for (file, ty) in [
        ("src/10-a.conflist", "a"),
        ("src/20-bee.conflist", "bee"),
        ("src/other/10-a.conflist", "loopback"),
    ] {
        std::fs::write(
            node.path(file),
            json!({"cniVersion": "1.0.0", "name": ty, "plugins": [{"type": ty}]}).to_string(),
        )
        .unwrap();
    }
    let conf_dir = node.path("net.d").display().to_string();
    for (args, needle) in [
        (
            &["--policy", "src/a.json", "--plugin", "src/a.wasm"][..],
            "--policy \"src/a.json\" comes before any --plugin",
        ),
        (
            &[
                "--plugin",
                "src/a.wasm",
                "--policy",
                "src/a.json",
                "--policy",
                "src/b.json",
            ][..],
            "--plugin \"src/a.wasm\" is given two --policy (\"src/a.json\", \"src/b.json\")",
        ),
        (
            &[
                "--plugin",
                "src/a.wasm",
                "--plugin",
                "src/b.wasm",
                "--name",
                "a",
            ][..],
            "--plugin \"src/a.wasm\" and --plugin \"src/b.wasm\" both install plugin \"a\"",
        ),
        (
            &[
                "--conflist",
                "src/10-a.conflist",
                "--conflist",
                "src/other/10-a.conflist",
                "--conf-dir",
                &conf_dir,
            ][..],
            "would both be",
        ),
    ] {
        let mut args = args.to_vec();
        args.extend(["--only", "loopback"]);
        node.assert_refused(&args, &[needle]);
    }

    let out = node.install(&[
        "--only",
        "loopback",
        "--plugin",
        "src/a.wasm",
        "--policy",
        "src/a.json",
        "--plugin",
        "src/b.wasm",
        "--name",
        "bee",
        "--policy",
        "src/b.json",
        "--conflist",
        "src/10-a.conflist",
        "--conflist",
        "src/20-bee.conflist",
        "--conf-dir",
        &conf_dir,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let bin = node.path("bin");
    for name in ["a", "bee", "loopback"] {
        assert_eq!(
            std::fs::read_link(bin.join(name)).unwrap(),
            Path::new("wasmcni"),
            "{name}"
        );
    }
    assert_eq!(std::fs::read(node.path("plugins/a.wasm")).unwrap(), wasm);
    assert_eq!(std::fs::read(node.path("plugins/bee.wasm")).unwrap(), bee);
    let entry = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(node.path(&format!("policy.d/{name}.json"))).unwrap())
            .unwrap()
    };
    assert_eq!(
        entry("a"),
        json!({"sha256": sha256(&wasm), "container": {"read": true, "modify": true}})
    );
    assert_eq!(
        entry("bee"),
        json!({"sha256": sha256(&bee), "container": {"read": true}})
    );
    for file in ["10-a.conflist", "20-bee.conflist"] {
        assert_eq!(
            std::fs::read(node.path("net.d").join(file)).unwrap(),
            std::fs::read(node.path("src").join(file)).unwrap(),
            "{file}"
        );
    }
    assert_eq!(
        artifact_components(&bin.join(".wasmcni-cache")),
        ["a", "bee", "loopback"]
    );

    // Each runs under its own entry: `a` may bring lo up, `bee` may not.
    let ns = Netns::new("manya");
    let r = node.add("a", &ns);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(ns.lo_up());
    let ns = Netns::new("manyb");
    let r = node.add("bee", &ns);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("plugins.bee.container.modify"), "{r:?}");
    assert!(!ns.lo_up());
}

/// Issue 27 (1): install refuses to make live what wasmcni would refuse to
/// run, before it writes anything (no conflist, no link, no policy; exit
/// non-zero), naming each problem, its file and what to change: a plugin
/// the network names whose entry pins another build; a network naming a
/// type that will not be in the bin dir, a standard one `--only` leaves
/// out, or a `wasmcni-chain` member wasmcni cannot run. `--allow-broken`
/// installs it all the same, warning (it used to warn and go live).
#[test]
fn install_refuses_a_network_wasmcni_would_refuse_unless_allowed() {
    support::require_root();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let sha = sha256(&wasm);
    let net = |file: &str, plugins: Value| {
        std::fs::write(
            node.path("src").join(file),
            json!({"cniVersion": "1.0.0", "name": "n", "plugins": plugins}).to_string(),
        )
        .unwrap();
    };
    net(
        "10-mine.conflist",
        json!([{"type": "loopback"}, {"type": "myplugin"}]),
    );
    net(
        "20-missing.conflist",
        json!([{"type": "loopback"}, {"type": "nosuch"}]),
    );
    net(
        "30-chain.conflist",
        json!([{"type": "wasmcni-chain",
                "plugins": [{"type": "loopback"}, {"type": "nomember"}]}]),
    );
    net("40-bridge.conflist", json!([{"type": "bridge"}]));
    let conf_dir = node.path("net.d").display().to_string();
    let network = |file: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "--only",
            "loopback",
            "--conflist",
            &format!("src/{file}"),
            "--conf-dir",
            &conf_dir,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let refused = |args: Vec<String>, needles: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        node.assert_refused(&args, needles);
    };

    // The plugin, with its entry, from an earlier run.
    let out = node.install(&[
        "--only",
        "loopback",
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // Its entry, edited to pin another build (no longer install's).
    let mut edited = node.entry();
    edited["sha256"] = json!("ab".repeat(32));
    std::fs::write(node.path("policy.d/myplugin.json"), edited.to_string()).unwrap();
    let entry_path = node.path("policy.d/myplugin.json").display().to_string();
    refused(
        network("10-mine.conflist", &[]),
        &[
            "refusing to install what wasmcni would refuse to run (nothing was changed)",
            "plugin \"myplugin\" would be REFUSED on every run",
            &format!("pins it to {}", "ab".repeat(32)),
            &format!("set `sha256` in {entry_path} to {sha}"),
            "--allow-broken",
        ],
    );
    let mut pinned = edited.clone();
    pinned["sha256"] = json!(sha);
    std::fs::write(node.path("policy.d/myplugin.json"), pinned.to_string()).unwrap();

    let bin = node.path("bin").display().to_string();
    refused(
        network("20-missing.conflist", &[]),
        &[
            "src/20-missing.conflist names plugin type \"nosuch\"",
            &format!("{bin}/nosuch will not exist"),
            "--plugin nosuch.wasm",
        ],
    );
    refused(
        network("30-chain.conflist", &["--only", "loopback,wasmcni-chain"]),
        &[
            "src/30-chain.conflist: wasmcni-chain member plugins[1].type \"nomember\" is not a \
             plugin wasmcni can run",
            "nomember.wasm",
        ],
    );
    refused(
        network("30-chain.conflist", &[]),
        &[
            "names plugin type \"wasmcni-chain\"",
            "add wasmcni-chain to --only",
        ],
    );
    refused(
        network("40-bridge.conflist", &[]),
        &["names plugin type \"bridge\"", "add bridge to --only"],
    );
    // The network whose plugins all run goes live.
    let out = node.install(
        &network("10-mine.conflist", &[])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(node.path("net.d/10-mine.conflist").is_file());

    // --allow-broken: installed, each problem a warning.
    let args = network("20-missing.conflist", &["--allow-broken"]);
    let out = node.install(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARNING: src/20-missing.conflist names plugin type \"nosuch\"")
            && err.contains("installing anyway: --allow-broken"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read(node.path("net.d/20-missing.conflist")).unwrap(),
        std::fs::read(node.path("src/20-missing.conflist")).unwrap()
    );
}

/// Issue 27 (1): the DaemonSet installs strictly: its arguments never ask
/// to go live broken (nor to replace what is not wasmcni's).
#[test]
fn the_daemonset_installs_strictly() {
    let args = manifest_args();
    for flag in ["--allow-broken", "--force"] {
        assert!(
            !args.iter().any(|a| a.starts_with(flag)),
            "the manifest passes {flag}: {args:?}"
        );
    }
}

/// Issue 27 (2): with `--conflist` and no `--only`, install links only the
/// standard plugins the conflist names (its types, wasmcni-chain and the
/// chain's members), so a node carrying kubernetes-cni's native plugins
/// needs no `--force` (it refused, and its DaemonSet pod crash-looped);
/// without `--conflist`, every standard plugin, as before. A refused
/// `--only` leaves no bin dir behind (it left an empty one).
#[test]
fn install_links_what_the_conflist_names_by_default() {
    support::require_root();
    let node = Node::new();
    let bin = node.path("bin");
    node.assert_refused(
        &["--only", "nosuch"],
        &["\"nosuch\" is not a standard plugin"],
    );
    assert!(!bin.exists(), "a refused run made the bin dir");

    std::fs::create_dir(&bin).unwrap();
    for (name, bytes) in [
        ("bridge", "native bridge"),
        ("host-local", "native host-local"),
    ] {
        std::fs::write(bin.join(name), bytes).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        node.path("src/10-net.conflist"),
        json!({"cniVersion": "1.0.0", "name": "net", "plugins": [
            {"type": "loopback"},
            {"type": "wasmcni-chain", "plugins": [{"type": "tuning"}, {"type": "bandwidth"}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let conf_dir = node.path("net.d").display().to_string();
    let out = node.install(&["--conflist", "src/10-net.conflist", "--conf-dir", &conf_dir]);
    assert!(out.status.success(), "{}", text(&out));
    let mut linked: Vec<String> = std::fs::read_dir(&bin)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::read_link(p).is_ok_and(|t| t == Path::new("wasmcni")))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    linked.sort();
    assert_eq!(
        linked,
        ["bandwidth", "loopback", "tuning", "wasmcni-chain"],
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read(bin.join("bridge")).unwrap(), b"native bridge");
    assert_eq!(
        std::fs::read(bin.join("host-local")).unwrap(),
        b"native host-local"
    );
    // loopback; tuning and bandwidth: the standard component.
    assert_eq!(
        artifact_components(&bin.join(".wasmcni-cache")),
        ["loopback", "standard"]
    );
    assert!(node.path("net.d/10-net.conflist").is_file());

    // A standard type the conflist names that the node has as a native
    // plugin is still a conflict: wasmcni's was asked for.
    std::fs::write(
        node.path("src/20-bridge.conflist"),
        json!({"cniVersion": "1.0.0", "name": "br", "plugins": [{"type": "bridge"}]}).to_string(),
    )
    .unwrap();
    node.assert_refused(
        &[
            "--conflist",
            "src/20-bridge.conflist",
            "--conf-dir",
            &conf_dir,
        ],
        &[
            "refusing to replace files that are not wasmcni's own (use --force)",
            "bin/bridge",
            "leave its name out of --only",
        ],
    );
    // ...unless --only leaves it to the native plugin, which the network
    // then runs (install says so).
    let out = node.install(&[
        "--only",
        "loopback",
        "--conflist",
        "src/20-bridge.conflist",
        "--conf-dir",
        &conf_dir,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a native binary, so the network runs it"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read(bin.join("bridge")).unwrap(), b"native bridge");

    // Without --conflist: every standard plugin, as before (a conflict).
    node.assert_refused(&[], &["use --force", "bin/bridge", "bin/host-local"]);
}

/// Every file and symlink under `root` (not directories): its bytes' sha256
/// and mode, or its link target.
fn files(root: &Path) -> BTreeMap<PathBuf, String> {
    tree(root)
        .into_keys()
        .filter_map(|rel| {
            let path = root.join(&rel);
            let m = std::fs::symlink_metadata(&path).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("-> {:?}", std::fs::read_link(&path).unwrap())
            } else if m.is_file() {
                format!(
                    "{} mode {:o}",
                    sha256(&std::fs::read(&path).unwrap()),
                    m.mode() & 0o7777
                )
            } else {
                return None;
            };
            Some((rel, what))
        })
        .collect()
}

fn assert_same_files(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
    let keys: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{k:?}: {:?} -> {:?}", before.get(k), after.get(k)))
        .collect();
    assert!(diff.is_empty(), "files differ:\n{}", diff.join("\n"));
}

/// Issue 27 (3): `--force` keeps what it replaces (a native binary, with
/// its mode; a link to one) in `DIR/.wasmcni-backup/`, and says so on a
/// line of its own; `wasmcni uninstall` removes exactly what install wrote
/// (links, executable, cache, plugin, entry, conflist, policy file,
/// records) and puts every backup back byte for byte; a file edited since
/// install wrote it is left alone, with a warning.
#[test]
fn uninstall_removes_what_install_wrote_and_restores_what_force_replaced() {
    support::require_root();
    let node = Node::new();
    let bin = node.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let native = b"\x7fELF native bridge, not wasmcni's".to_vec();
    std::fs::write(bin.join("bridge"), &native).unwrap();
    std::fs::set_permissions(bin.join("bridge"), std::fs::Permissions::from_mode(0o4750)).unwrap();
    std::os::unix::fs::symlink("/usr/libexec/cni/portmap", bin.join("portmap")).unwrap();
    std::fs::write(bin.join("calico"), b"another plugin").unwrap();
    std::fs::create_dir(node.path("net.d")).unwrap();
    std::fs::write(node.path("net.d/05-other.conflist"), b"{}").unwrap();
    std::fs::write(node.path("net.d/10-net.conflist"), b"the operator's own").unwrap();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    std::fs::write(
        node.path("src/10-net.conflist"),
        json!({"cniVersion": "1.0.0", "name": "net",
               "plugins": [{"type": "bridge"}, {"type": "myplugin"}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        node.path("src/policy.json"),
        json!({"plugins": {"loopback": {"container": {"read": true, "modify": true}}}}).to_string(),
    )
    .unwrap();
    let [conf_dir, target] =
        [node.path("net.d"), node.path("etc/policy.json")].map(|p| p.display().to_string());
    let install = || {
        node.install(&[
            "--force",
            "--only",
            "bridge,loopback,portmap",
            "--plugin",
            "src/myplugin.wasm",
            "--policy",
            "src/entry.json",
            "--conflist",
            "src/10-net.conflist",
            "--conf-dir",
            &conf_dir,
            "--policy-file",
            "src/policy.json",
            "--policy-target",
            &target,
        ])
    };
    let uninstall = || {
        Command::new(node.path("tool/wasmcni"))
            .arg("uninstall")
            .arg(&bin)
            .arg("--plugin-dir")
            .arg(node.path("plugins"))
            .arg("--policy-dir")
            .arg(node.path("policy.d"))
            .args(["--conf-dir", &conf_dir, "--policy-target", &target])
            .env_clear()
            .current_dir(node.dir.path())
            .output()
            .unwrap()
    };
    let before = files(node.dir.path());

    let out = install();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let backup = bin.join(".wasmcni-backup");
    for line in [
        format!(
            "{}: replaced a native binary with a link to wasmcni (backup: {})",
            bin.join("bridge").display(),
            backup.join("bridge").display()
        ),
        format!(
            "{}: replaced a link to /usr/libexec/cni/portmap with a link to wasmcni (backup: {})",
            bin.join("portmap").display(),
            backup.join("portmap").display()
        ),
        format!("{}: linked to wasmcni", bin.join("loopback").display()),
        format!(
            "{}/10-net.conflist: replaced a file that was not wasmcni's (backup: {}/.wasmcni-backup/10-net.conflist)",
            conf_dir, conf_dir
        ),
    ] {
        assert!(stdout.lines().any(|l| l == line), "no {line:?} in {}", text(&out));
    }
    assert_eq!(std::fs::read(backup.join("bridge")).unwrap(), native);
    let mode = std::fs::metadata(backup.join("bridge")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o4750);
    assert_eq!(
        std::fs::read_link(backup.join("portmap")).unwrap(),
        Path::new("/usr/libexec/cni/portmap")
    );
    // `list` does not see the backups.
    let out = list(&node, &["--bin-dir", &bin.display().to_string()]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("backup"),
        "{}",
        text(&out)
    );

    let out = uninstall();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        text(&out)
    );
    assert_same_files(&before, &files(node.dir.path()));
    for hidden in [".wasmcni-backup", ".wasmcni-cache"] {
        assert!(!bin.join(hidden).exists(), "{hidden} left");
    }

    // Installed again, the conflist then edited on the node: uninstall
    // leaves it (and the backup of the operator's original) and says so;
    // everything else goes.
    let out = install();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(node.path("net.d/10-net.conflist"), b"edited since").unwrap();
    let out = uninstall();
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{conf_dir}/10-net.conflist was changed since install wrote it: left alone"
        )),
        "{}",
        text(&out)
    );
    // Said once, counted once (its backup is not a second file left, nor
    // was it "replaced since").
    assert!(
        err.contains("warning: 1 file(s) left in place"),
        "{}",
        text(&out)
    );
    assert!(!err.contains("it was replaced since"), "{}", text(&out));
    let mut expected = before.clone();
    let edited = PathBuf::from("net.d/10-net.conflist");
    expected.insert(
        edited.clone(),
        format!("{} mode 644", sha256(b"edited since")),
    );
    expected.insert(
        PathBuf::from("net.d/.wasmcni-backup/10-net.conflist"),
        before[&edited].clone(),
    );
    assert_same_files(&expected, &files(node.dir.path()));
}

/// Issue 27 (3): `install --prune` removes the standard links a narrower
/// `--only` no longer asks for (putting back what `--force` replaced
/// there) and their artifacts; third-party links stay; a link a network
/// in the conf dir names is not pruned (refused, nothing changed).
#[test]
fn install_prune_removes_the_links_a_narrower_only_no_longer_asks_for() {
    support::require_root();
    let node = Node::new();
    let bin = node.path("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("ptp"), b"native ptp").unwrap();
    std::fs::set_permissions(bin.join("ptp"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    let out = node.install(&[
        "--force",
        "--only",
        "loopback,bridge,ptp,tuning,wasmcni-chain",
        "--plugin",
        "src/myplugin.wasm",
        "--policy",
        "src/entry.json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::create_dir(node.path("net.d")).unwrap();
    std::fs::write(
        node.path("net.d/10-br.conflist"),
        json!({"cniVersion": "1.0.0", "name": "br", "plugins": [{"type": "bridge"}]}).to_string(),
    )
    .unwrap();
    let conf_dir = node.path("net.d").display().to_string();

    node.assert_refused(
        &["--only", "loopback", "--prune", "--conf-dir", &conf_dir],
        &[&format!(
            "--prune would remove {}, which {conf_dir}/10-br.conflist names: add bridge to --only",
            bin.join("bridge").display()
        )],
    );
    // Without --prune a narrower --only leaves the other links alone.
    let before = tree(&bin);
    let out = node.install(&["--only", "loopback,bridge", "--conf-dir", &conf_dir]);
    assert!(out.status.success(), "{}", text(&out));
    assert_unchanged(&before, &tree(&bin));

    let out = node.install(&[
        "--only",
        "loopback,bridge",
        "--prune",
        "--conf-dir",
        &conf_dir,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "{}: pruned (not linked any more); put back what --force replaced",
            bin.join("ptp").display()
        )) && stdout.contains(&format!(
            "{}: pruned (not linked any more)",
            bin.join("tuning").display()
        )),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read(bin.join("ptp")).unwrap(), b"native ptp");
    for gone in ["tuning", "wasmcni-chain"] {
        assert!(std::fs::symlink_metadata(bin.join(gone)).is_err(), "{gone}");
    }
    for kept in ["loopback", "bridge", "myplugin"] {
        assert_eq!(
            std::fs::read_link(bin.join(kept)).unwrap(),
            Path::new("wasmcni"),
            "{kept}"
        );
    }
    assert!(!bin.join(".wasmcni-backup").exists());
    // bridge's is the standard component.
    assert_eq!(
        artifact_components(&bin.join(".wasmcni-cache")),
        ["loopback", "myplugin", "standard"]
    );
}

/// Install checks the policy dir as a run reads it: an entry file, or the
/// directory, that others could write is refused by every run, so install
/// refuses to go live on it (it used to read the entry as any file).
#[test]
fn install_refuses_a_policy_entry_or_dir_others_could_write() {
    use std::os::unix::fs::PermissionsExt;
    support::require_root();
    let node = Node::new();
    std::fs::create_dir(node.path("policy.d")).unwrap();
    let entry = node.path("policy.d/loopback.json");
    std::fs::write(
        &entry,
        json!({"container": {"read": true, "modify": true}}).to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o664)).unwrap();
    node.assert_refused(
        &["--only", "loopback"],
        &["loopback", "writable by group or others"],
    );
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(
        node.path("policy.d"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    node.assert_refused(&["--only", "loopback"], &["the policy dir"]);
    std::fs::set_permissions(
        node.path("policy.d"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let out = node.install(&["--only", "loopback"]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Issue 51: a plugin installed by reference (`--plugin oci://…`) from a
/// real registry on loopback: pulled, its signature verified against the
/// operator's trust file, copied into the plugin dir, pinned by its
/// sha256, its origin recorded and listed, and run by libcni; a build
/// that fails the trust rule, or a registry that is down, installs nothing
/// and leaves the plugin installed before in place.
#[test]
fn a_plugin_installs_by_reference_verified_pinned_and_runs_in_libcni() {
    support::require_root();
    let mut reg = support::registry::Registry::start();
    let host = reg.host.clone();
    let node = Node::new();
    let wasm = std::fs::read(support::fixture("loopback")).unwrap();
    let sha = sha256(&wasm);
    let keys = repo().join("tests/oci-keys");
    let push = |file: &Path, tag: &str, sign: bool| {
        let mut cmd = Command::new(node.path("tool/wasmcni"));
        cmd.arg("push")
            .arg(file)
            .arg(format!("{}/acme/myplugin:{tag}", host))
            .args(["--plain-http", &host])
            .env_clear()
            .env("COSIGN_PASSWORD", "spike");
        if sign {
            cmd.arg("--sign").arg(keys.join("cosign.key"));
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.lines()
            .next()
            .unwrap()
            .split_once('@')
            .unwrap()
            .1
            .to_owned()
    };
    let digest = push(&support::fixture("loopback"), "1.0", true);
    std::fs::write(
        node.path("trust.json"),
        json!({"keys": {"acme": keys.join("cosign.pub")}, "requireSignature": true}).to_string(),
    )
    .unwrap();
    let reference = format!("oci://{}/acme/myplugin:1.0", host);
    let args = |reference: &str| -> Vec<String> {
        [
            "--plugin",
            reference,
            "--policy",
            "src/entry.json",
            "--plain-http",
            &host,
            "--trust",
            "trust.json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let install = |reference: &str| {
        let a = args(reference);
        node.install(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = install(&reference);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read(node.path("plugins/myplugin.wasm")).unwrap(),
        wasm
    );
    assert_eq!(node.entry()["sha256"], sha.as_str());
    let origin: Value =
        serde_json::from_slice(&std::fs::read(node.path("plugins/myplugin.origin.json")).unwrap())
            .unwrap();
    assert_eq!(
        origin,
        json!({"reference": format!("{}/acme/myplugin:1.0", host), "digest": digest,
               "sha256": sha, "signer": "acme"})
    );
    let owned = std::fs::read_to_string(node.path("plugins/.wasmcni-owned")).unwrap();
    assert!(
        owned.contains("myplugin.origin.json") && owned.contains("myplugin.wasm"),
        "{owned}"
    );
    // Idempotent.
    let again = install(&reference);
    assert!(again.status.success(), "{}", text(&again));

    // `wasmcni list` shows where it came from and who signed it.
    let list = Command::new(node.path("tool/wasmcni"))
        .args(["list", "--json"])
        .env_clear()
        .envs(node.env())
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", text(&list));
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "myplugin")
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    assert_eq!(row["source"]["digest"], digest.as_str(), "{row}");
    assert_eq!(row["source"]["signer"], "acme", "{row}");
    assert_eq!(row["policy"]["valid"], true, "{row}");

    // The real libcni runs it.
    let netnode = Netns::new("ocin");
    let ctr = Netns::new("ocic");
    let conflist = node.path("oci.conflist");
    std::fs::write(
        &conflist,
        json!({"cniVersion": "1.0.0", "name": "oci", "plugins": [{"type": "myplugin"}]})
            .to_string(),
    )
    .unwrap();
    let call = |cmd: &str| node.libcni(&netnode, &conflist, &ctr, "oci0", cmd);
    let add = call("add");
    assert_eq!(add.code, 0, "{add:?}");
    assert!(ctr.lo_up());
    let del = call("del");
    assert_eq!(del.code, 0, "{del:?}");

    // The trust rule holds for a file too: it carries no signature.
    std::fs::write(node.path("src/myplugin.wasm"), &wasm).unwrap();
    node.assert_refused(
        &["--plugin", "src/myplugin.wasm", "--trust", "trust.json"],
        &[
            "requires plugin \"myplugin\" to be signed",
            "--allow-unsigned",
        ],
    );
    let unsigned_file = node.install(&[
        "--plugin",
        "src/myplugin.wasm",
        "--trust",
        "trust.json",
        "--allow-unsigned",
    ]);
    assert!(unsigned_file.status.success(), "{}", text(&unsigned_file));

    // An unsigned build under a new tag: refused by the trust rule,
    // naming the reference, the digest and what is missing; nothing
    // changes.
    let unsigned = push(&support::fixture("scripted"), "2.0", false);
    node.assert_refused(
        &args(&format!("oci://{}/acme/myplugin:2.0", host))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[
            "acme/myplugin:2.0",
            &unsigned,
            "no valid signature by acme",
            "no signature",
        ],
    );
    // The registry down: refused, nothing changes, the plugin installed
    // before still runs.
    reg.stop();
    node.assert_refused(
        &args(&reference)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[&format!("the registry {host}"), "onnection refused"],
    );
    assert_eq!(
        std::fs::read(node.path("plugins/myplugin.wasm")).unwrap(),
        wasm
    );
    let add = call("add");
    assert_eq!(add.code, 0, "{add:?}");
    let del = call("del");
    assert_eq!(del.code, 0, "{del:?}");
}

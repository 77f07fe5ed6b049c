//! Driving plugins the way a runtime does: the real libcni (Debian's
//! golang-github-appc-cni-dev 1.1.2) through the Go driver in
//! tests/libcni/, against an installed wasmcni bin dir or the reference
//! plugins in /usr/lib/cni.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::Netns;

/// The Go driver, built offline from Debian's packages once per run: at
/// a path named by a hash of its source and the Go toolchain's version, so
/// the test binaries that run side by side (and the VM, which sees this
/// machine's target directory) share one build instead of linking their
/// own (each `go build` is seconds here, tens of seconds under the VM's
/// emulation).
pub fn driver() -> &'static Path {
    static DRIVER: OnceLock<PathBuf> = OnceLock::new();
    DRIVER.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/libcni");
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::fs::read(src.join("main.go"))
            .expect("tests/libcni/main.go")
            .hash(&mut h);
        let go = Command::new("go")
            .arg("version")
            .output()
            .expect("running `go` (apt-get install golang-go golang-github-appc-cni-dev)");
        go.stdout.hash(&mut h);
        let out = tmp.join(format!("cnidriver-{:016x}", h.finish()));
        if out.exists() {
            return out;
        }
        // Built under a name of its own, then renamed: a binary running
        // beside this one sees the whole driver or none.
        let partial = tmp.join(format!("cnidriver.{}.partial", std::process::id()));
        let st = Command::new("go")
            .args(["build", "-o"])
            .arg(&partial)
            .arg(".")
            .current_dir(&src)
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", tmp.join("gocache"))
            .status()
            .expect("running `go` (apt-get install golang-go golang-github-appc-cni-dev)");
        assert!(st.success(), "building the libcni driver failed");
        std::fs::rename(&partial, &out).expect("renaming the built libcni driver");
        out
    })
}

/// An installed wasmcni bin dir (`wasmcni install`), shared by the tests
/// of one test binary.
pub fn bin_dir() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        super::require_root();
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bin-{}", std::process::id()));
        let out = Command::new(super::wasmcni())
            .arg("install")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "wasmcni install: {out:?}");
        dir
    })
}

/// What a driver run printed.
#[derive(Debug)]
pub struct Drive {
    /// Exit code.
    pub code: i32,
    /// Stdout (the result, for ADD).
    pub stdout: String,
    /// Stderr (with a `CNI-ERROR: {json}` line for a plugin's error).
    pub stderr: String,
    /// Wall time of the libcni call alone in µs (`-timing`), without the
    /// driver's own start-up: what a runtime calling libcni waits for.
    pub elapsed_us: Option<u64>,
}

impl Drive {
    /// The result JSON of a successful ADD.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("driver stdout is not JSON ({e}): {self:?}"))
    }

    /// The plugin's CNI error, if it failed with one.
    pub fn cni_error(&self) -> Option<Value> {
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix("CNI-ERROR: "))
            .and_then(|j| serde_json::from_str(j).ok())
    }
}

/// One runtime call through libcni.
pub struct Call<'a> {
    /// Run inside this namespace (the node); plugins inherit it.
    pub node: &'a Netns,
    /// The plugin directory.
    pub bin: &'a Path,
    /// `add`, `check`, `del`.
    pub cmd: &'a str,
    /// The conflist file.
    pub conflist: &'a Path,
    /// The container's namespace.
    pub netns: &'a Path,
    /// Container ID.
    pub cid: &'a str,
    /// Interface name.
    pub ifname: &'a str,
    /// libcni's result cache.
    pub cache: &'a Path,
    /// CNI_ARGS.
    pub args: &'a str,
    /// Capability arguments (runtimeConfig), JSON.
    pub capargs: &'a str,
    /// Extra environment for the plugins (WASMCNI_*).
    pub env: &'a [(String, String)],
}

impl Call<'_> {
    /// Runs it under `ip netns exec NODE`: the node's namespace, and a
    /// mount namespace of its own with the node's /sys (what a plugin
    /// reading /sys/class/net must see).
    pub fn run(&self) -> Drive {
        let mut c = Command::new(super::ip_exe());
        c.args(["netns", "exec", &self.node.name]).arg(driver());
        self.finish(c)
    }

    /// Runs it in the node's network namespace only (setns before exec),
    /// as a runtime calling libcni from the host's namespace does: no copy
    /// of the mount table per call. `ip netns exec` copies it, and with a
    /// bind mount per container namespace under /run/netns that copy and
    /// its teardown grow with the number of containers (the benchmark's
    /// sequential run measured the harness, not the plugins, with it).
    pub fn run_setns(&self) -> Drive {
        self.finish(self.node.command(driver()))
    }

    fn finish(&self, mut c: Command) -> Drive {
        c.args(["-cmd", self.cmd, "-bindir"])
            .arg(self.bin)
            .arg("-cachedir")
            .arg(self.cache)
            .arg("-conflist")
            .arg(self.conflist)
            .arg("-netns")
            .arg(self.netns)
            .args(["-cid", self.cid, "-ifname", self.ifname, "-timing"]);
        if !self.args.is_empty() {
            c.args(["-args", self.args]);
        }
        if !self.capargs.is_empty() {
            c.args(["-capargs", self.capargs]);
        }
        c.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        // In tests/vm/ the plugins load from the VM's persistent artifact
        // cache, where `wasmcni install` compiled them (tests/vm/run sets
        // it): a compile under emulation would outlast the deadline.
        if let Some(d) = std::env::var_os("WASMCNI_CACHE_DIR").filter(|_| super::vm::inside()) {
            c.env("WASMCNI_CACHE_DIR", d);
        }
        // And under emulation, on a loaded machine, a bridge ADD has taken
        // longer than the default deadline (10 s; a CI run failed so):
        // the VM's deadline, as for every other test there
        // (`support::test_env`).
        // And libcni's own deadline for the call (the driver's -timeout,
        // 60 s): a CI run's first VM cases, started beside the installer
        // image's release build and the soak, took a bridge ADD past it.
        if super::vm::inside() {
            c.env("WASMCNI_DEADLINE_MS", "600000");
            c.args(["-timeout", "600s"]);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        let out = c.output().expect("running the libcni driver");
        let mut elapsed_us = None;
        let stderr = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| match l.strip_prefix("cnidriver-elapsed-us: ") {
                Some(n) => {
                    elapsed_us = n.trim().parse().ok();
                    false
                }
                None => true,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        Drive {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
            elapsed_us,
        }
    }
}

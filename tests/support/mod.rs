//! Shared test support: real network namespaces, running wasmcni and the
//! reference plugins the way a runtime does, and kernel-state snapshots.
//!
//! Tests that need root fail (never skip) without it: a test that cannot
//! run must not pass.
// The tests read their own environment (CI, paths); the host reads
// its settings through crate::config only (host/clippy.toml).
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

pub mod cni;
pub mod net;
pub mod registry;
pub mod vm;
pub mod world;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// The wasmcni executable under test.
pub fn wasmcni() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wasmcni"))
}

/// Where the test-fixture plugins (hostile guests) were built.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("WASMCNI_FIXTURES")).join(format!("{name}.wasm"))
}

/// The reference plugins (Debian's containernetworking-plugins).
pub const REFERENCE_DIR: &str = "/usr/lib/cni";

/// The netavark the tests and the netavark bench drive:
/// `$WASMCNI_NETAVARK`, else the one tests/netavark/setup builds (`make
/// setup` runs it). Fails when it is not there.
pub fn netavark() -> PathBuf {
    let path = std::env::var_os("WASMCNI_NETAVARK")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/wasmcni/netavark-2.1.0/bin/netavark")
        });
    assert!(
        path.is_file(),
        "this needs netavark at {} (tests/netavark/setup builds it; `make setup` runs it)",
        path.display()
    );
    path
}

/// The value of `name`, a switch that narrows or defuses a test (one
/// case file, fewer fuzz cases, one plugin) while developing. Under
/// `CI=true` a set switch fails the test instead: CI runs every test in
/// full, and a switch left in its environment must not make it pass on
/// less.
pub fn narrowing_switch(name: &str) -> Option<String> {
    let v = std::env::var(name).ok()?;
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{name}={v} narrows this test, and CI=true runs every test in full: unset {name}"
    );
    Some(v)
}

/// Runs `each(state, item)` for every item on `WASMCNI_TEST_JOBS` threads
/// (default 2), each thread with a state of its own from `init(thread)`
/// (its sandboxes: namespaces, IPAM and record directories). For tests
/// that run many independent sandboxed runs, most of whose time is
/// waiting (the kernel's duplicate address detection, processes
/// starting; in tests/vm/, on two emulated cores). The first panic stops
/// every thread from taking another item, and is the test's.
pub fn in_parallel<T: Sync, S>(
    items: &[T],
    init: impl Fn(usize) -> S + Sync,
    each: impl Fn(&mut S, &T) + Sync,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let jobs = std::env::var("WASMCNI_TEST_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(2)
        .clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for thread in 0..jobs {
            let (init, each, next, failed) = (&init, &each, &next, &failed);
            s.spawn(move || {
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut state = None;
                    while !failed.load(SeqCst) {
                        let Some(item) = items.get(next.fetch_add(1, SeqCst)) else {
                            return;
                        };
                        each(state.get_or_insert_with(|| init(thread)), item);
                    }
                }));
                if let Err(e) = run {
                    failed.store(true, SeqCst);
                    std::panic::resume_unwind(e);
                }
            });
        }
    });
}

/// Fails the test unless we are root with `ip` available.
pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (network namespaces); run the suite as root, as CI does"
    );
    assert!(
        Command::new("ip")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs iproute2's `ip` (apt-get install iproute2)"
    );
}

/// A private temporary directory under target/ (every directory above it
/// is root's and not world-writable, unlike /tmp: wasmcni refuses a
/// policy file on a path others could change).
pub fn private_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir in target/")
}

/// A shared artifact cache for the whole test run, so each plugin is
/// compiled once (in target/, never in the repo's sources).
pub fn cache_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasmcni-cache");
    std::fs::create_dir_all(&d).unwrap();
    d
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    /// Its name.
    pub name: String,
    /// Its path (/run/netns/NAME).
    pub path: PathBuf,
}

impl Netns {
    /// Creates a fresh namespace with a unique name.
    pub fn new(tag: &str) -> Netns {
        require_root();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("wcni-{tag}-{}-{n}", std::process::id());
        let st = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(st.success(), "ip netns add {name} failed");
        Netns {
            path: PathBuf::from("/run/netns").join(&name),
            name,
        }
    }

    /// Runs `ip -n NAME ARGS...` and returns stdout; panics on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip -n {} {:?}: {}",
            self.name,
            args,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `ip -n NAME ARGS...` (with `-j` among them) as JSON; panics on
    /// failure.
    pub fn ip_json(&self, args: &[&str]) -> Value {
        let out = self.ip(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip {args:?}: {e}: {out}"))
    }

    /// Links, addresses and routes (all tables), as `ip -j` reports them,
    /// with counters and other volatile fields removed.
    ///
    /// Taken once IPv6 duplicate address detection has settled: an
    /// address on a link with carrier is tentative for about a second,
    /// and its local route appears only after, so a snapshot taken
    /// meanwhile would differ from the next one for nobody's doing (a
    /// CI run failed on it). And once every link's operational state
    /// follows its carrier: the kernel updates it from a work queue (up to a
    /// second later), so a bridge whose last port just went still read
    /// `UP` without carrier, then `NO-CARRIER`/`DOWN` (a CI run failed on
    /// that too). And once every IPv6 address past detection on a link with
    /// carrier has its local route: the kernel adds it from the same work
    /// queue, after the address shows (with `nodad` the address is never
    /// tentative, so the wait above does not cover it; a CI run failed on a
    /// borrowed link's restored address). Waits at most 10 s (on a loaded
    /// machine detection has outlasted 3 s: a CI rehearsal failed so, with
    /// an address still tentative); a state still
    /// pending then is reported as it is.
    pub fn snapshot(&self) -> Value {
        self.snapshot_settling().0
    }

    /// [`Netns::snapshot`], and whether the state had settled when it was
    /// taken (false: the wait ran out).
    pub fn snapshot_settling(&self) -> (Value, bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // Settled is judged on the dump as the kernel gave it: the
            // normalising below drops the very flags and routes it reads
            // (with them dropped first, every snapshot of a link with an
            // IPv6 address waited the whole 10 s; CI ran past its limit).
            let mut v = self.snapshot_now();
            let settled = !dad_pending(&v["addrs"])
                && !operstate_pending(&v["links"])
                && !local_route_pending(&v["addrs"], &v["routes6"]);
            if settled || std::time::Instant::now() >= deadline {
                normalize_snapshot(&mut v);
                return (v, settled);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn snapshot_now(&self) -> Value {
        // Two execs of `ip -batch` (each exec counts under the VM's
        // emulation: ~0.25 s): links, addresses, routes, IPv4 rules and
        // permanent neighbour entries with details; IPv6 routes and rules.
        // Permanent neighbour entries only: an operator's (or a plugin's)
        // static ARP and ND entries; the kernel's own come and go with
        // traffic.
        let d = self.ip_batch(
            &["-j", "-d"],
            &[
                "link show",
                "addr show",
                "route show table all",
                "rule show",
                "neigh show nud permanent",
            ],
        );
        let [links, addrs, routes4, mut rules4, neighbours] =
            <[Value; 5]>::try_from(d).expect("five dumps");
        // `-d` adds each rule's protocol even where plain `ip rule show`
        // leaves it out (unspecified, or the kernel's own rules): as
        // without `-d`.
        for r in rules4.as_array_mut().into_iter().flatten() {
            if let Some(m) = r.as_object_mut() {
                if m.get("protocol")
                    .is_some_and(|p| p == "kernel" || p == "unspec")
                {
                    m.remove("protocol");
                }
            }
        }
        let [routes6, rules6] = <[Value; 2]>::try_from(
            self.ip_batch(&["-j", "-6"], &["route show table all", "rule show"]),
        )
        .expect("two dumps");
        serde_json::json!({
            "links": links,
            "addrs": addrs,
            "routes4": routes4,
            "routes6": routes6,
            "rules4": rules4,
            "rules6": rules6,
            "neighbours": neighbours,
        })
    }

    /// `ip -n NAME FLAGS... -batch -` with `commands`, one per line: what
    /// each printed, as JSON (`ip -j` prints `[]` for an empty list).
    fn ip_batch(&self, flags: &[&str], commands: &[&str]) -> Vec<Value> {
        let out = Command::new("ip")
            .args(["-n", &self.name])
            .args(flags)
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                let mut text = commands.join("\n");
                text.push('\n');
                c.stdin.take().expect("stdin").write_all(text.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(out.status.success(), "ip -n {} -batch: {out:?}", self.name);
        let dumps: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("ip -n {} -batch {commands:?}: {e}", self.name));
        assert_eq!(
            dumps.len(),
            commands.len(),
            "ip -n {} -batch {commands:?} printed {} dumps: {out:?}",
            self.name,
            dumps.len()
        );
        dumps
    }

    /// Every network setting of the namespace: each readable, writable
    /// file under `/proc/sys/net` (the whole tree, so that any propagation
    /// of a write shows up), as sorted `path:value` lines.
    pub fn sysctls(&self) -> Vec<String> {
        // Read in-process by a thread that joined the namespace (what
        // /proc/sys/net shows follows the reading thread's namespace): no
        // exec per snapshot, which counts under the VM's emulation.
        let ns = std::fs::File::open(&self.path).expect("open netns");
        let mut lines = std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                let mut lines = Vec::new();
                read_settings(Path::new("/proc/sys/net"), &mut lines);
                lines
            })
            .join()
            .expect("sysctl reader")
        });
        assert!(
            lines.len() > 100,
            "reading /proc/sys/net in {} gave {} settings",
            self.name,
            lines.len(),
        );
        lines.sort();
        lines
    }

    /// Sets a network setting (`net.ipv4.ip_forward`, ...) in the namespace.
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let st = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c"])
            .arg(format!("echo {value} > {path}"))
            .status()
            .unwrap();
        assert!(st.success(), "setting {key}={value} in {}", self.name);
    }

    /// Links, addresses, routes and sysctls: everything a plugin could
    /// change.
    pub fn full_snapshot(&self) -> Value {
        let mut v = self.snapshot();
        v["sysctls"] = serde_json::json!(self.sysctls());
        // Only bridges and their ports have VLANs: without either, `bridge
        // vlan show` prints `[]` (one exec fewer per snapshot).
        let bridged = v["links"].as_array().into_iter().flatten().any(|l| {
            l["linkinfo"]["info_kind"] == "bridge" || l["linkinfo"]["info_slave_kind"] == "bridge"
        });
        v["vlans"] = if bridged {
            self.bridge_vlans()
        } else {
            Value::Array(Vec::new())
        };
        v["tc"] = self.traffic_control();
        v
    }

    /// The whole nftables ruleset of the namespace (`nft -j list
    /// ruleset`; wasmcni's rules have no counters). Panics when nft is
    /// missing or fails: a snapshot without the ruleset would let every
    /// undo test pass without looking at rules.
    pub fn nftables(&self) -> Value {
        serde_json::from_str(&self.nft(&["-j", "list", "ruleset"])).expect("nft -j output")
    }

    /// `nft ARGS...` inside the namespace; panics on failure (the test
    /// needs Debian's `nftables`).
    ///
    /// A failure that says nothing (a CI run saw one: a listing whose
    /// netlink dump was interrupted, or the process ended by a signal) is
    /// tried again, twice at most; one that persists still panics, with
    /// its exit status.
    pub fn nft(&self, args: &[&str]) -> String {
        let mut tries = 0;
        loop {
            tries += 1;
            let out = self
                .command("nft")
                .args(args)
                .output()
                .expect("this test needs nft (apt-get install nftables)");
            if out.status.success() {
                return String::from_utf8(out.stdout).unwrap();
            }
            if out.stderr.is_empty() && tries < 3 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            panic!(
                "nft {args:?} in {} ({}, try {tries}): {}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// `program`, to run in this network namespace alone: setns(2) between
    /// fork and exec, not `ip netns exec` (one exec fewer, which counts
    /// under the VM's emulation, and no copy of the mount table).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let ns = std::fs::File::open(&self.path)
            .unwrap_or_else(|e| panic!("open {}: {e}", self.path.display()));
        let mut c = Command::new(program);
        // SAFETY: setns(2) only, between fork and exec.
        unsafe {
            c.pre_exec(move || {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)
            });
        }
        c
    }

    /// The rules of wasmcni's `inet` table as `nft -j` lists them, each
    /// `{chain, comment, expr}` (handles and counters dropped); none when
    /// the table is missing.
    pub fn wasmcni_rules(&self) -> Vec<Value> {
        let out = self
            .command("nft")
            .args(["-j", "list", "table", "inet", "wasmcni"])
            .output()
            .expect("this test needs nft (apt-get install nftables)");
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("No such file or directory"),
                "nft list table inet wasmcni in {}: {err}",
                self.name
            );
            return Vec::new();
        }
        let v: Value = serde_json::from_slice(&out.stdout).expect("nft -j output");
        v["nftables"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|o| o.get("rule").cloned())
            .map(|r| serde_json::json!({"chain": r["chain"], "comment": r["comment"], "expr": r["expr"], "handle": r["handle"]}))
            .collect()
    }

    /// Every qdisc (`tc -d -j qdisc show`: kind, handle, parent, options
    /// such as a `tbf`'s rate, burst, latency and link layer) and the
    /// filters of every `ingress` qdisc (`tc -j filter show dev DEV
    /// ingress`: match, flowid, actions with their redirect target).
    pub fn traffic_control(&self) -> Value {
        let tc = |args: &[&str]| -> Value {
            let out = Command::new("tc")
                .arg("-n")
                .arg(&self.name)
                .args(args)
                .output()
                .expect("tc (iproute2)");
            assert!(
                out.status.success(),
                "tc -n {} {args:?}: {out:?}",
                self.name
            );
            let text = String::from_utf8_lossy(&out.stdout);
            if text.trim().is_empty() {
                Value::Array(vec![])
            } else {
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("tc {args:?}: {e}: {text}"))
            }
        };
        let mut qdiscs = tc(&["-d", "-j", "qdisc", "show"]);
        // Listed in link index order: a link moved away and back keeps its
        // qdiscs but may list elsewhere. The set is what counts.
        if let Some(a) = qdiscs.as_array_mut() {
            a.sort_by_cached_key(|q| q.to_string());
        }
        let filters: Vec<Value> = qdiscs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|q| q["kind"] == "ingress" || q["kind"] == "clsact")
            .filter_map(|q| q["dev"].as_str())
            .map(|dev| {
                serde_json::json!({"dev": dev,
                    "filters": tc(&["-j", "filter", "show", "dev", dev, "ingress"])})
            })
            .collect();
        serde_json::json!({"qdiscs": qdiscs, "filters": filters})
    }

    /// The VLANs of every bridge and bridge port (`bridge -j vlan show`;
    /// empty on a kernel without bridge VLAN filtering).
    pub fn bridge_vlans(&self) -> Value {
        let out = Command::new("bridge")
            .args(["-n", &self.name, "-j", "vlan", "show"])
            .output()
            .expect("bridge (iproute2)");
        assert!(out.status.success(), "bridge vlan show: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        if text.trim().is_empty() {
            Value::Array(vec![])
        } else {
            serde_json::from_str(&text).expect("bridge -j vlan show")
        }
    }

    /// Whether `lo` is administratively up.
    pub fn lo_up(&self) -> bool {
        let v: Value = serde_json::from_str(&self.ip(&["-j", "link", "show", "lo"])).unwrap();
        v[0]["flags"].as_array().unwrap().iter().any(|f| f == "UP")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Appends `path:line` for every line of every setting under `dir` that
/// its owner may read and write (as `find -perm -600 -exec grep -H`).
fn read_settings(dir: &Path, out: &mut Vec<String>) {
    // Few system calls per setting (each counts under the VM's
    // emulation, and a namespace has over a thousand): the entry's type
    // from the directory listing (no stat), an `openat` from the
    // directory, one read. Opening for writing succeeds for root exactly
    // where the setting's owner bits are `rw` (procfs checks the mode even
    // for root): the writable settings, which a plugin could change; it
    // writes nothing.
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::Mode;
    use std::io::Read;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let Ok(dfd) = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let mut buf = vec![0u8; 512];
    for e in rd.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            read_settings(&e.path(), out);
            continue;
        }
        let Ok(fd) = openat(
            &dfd,
            e.file_name().as_os_str(),
            OFlag::O_RDWR | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        ) else {
            continue;
        };
        let mut f = std::fs::File::from(fd);
        // A setting's whole value comes in one read when it fits (procfs
        // renders it at once): a read that fills the buffer goes on. Not
        // a larger buffer: procfs allocates and zeroes one as large for
        // every read (64 KiB made the VM's reads 2.4x slower).
        let mut data = Vec::new();
        loop {
            match f.read(&mut buf) {
                Ok(n) => {
                    data.extend_from_slice(&buf[..n]);
                    if n < buf.len() {
                        break;
                    }
                }
                Err(_) => {
                    data.clear();
                    break;
                }
            }
        }
        if data.is_empty() {
            continue;
        }
        let path = e.path();
        for line in String::from_utf8_lossy(&data).lines() {
            out.push(format!("{}:{line}", path.display()));
        }
    }
}

/// Where two JSON values differ, as `path: left != right` lines (for
/// readable assertion messages on large snapshots).
pub fn json_diff(a: &Value, b: &Value) -> Vec<String> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    let (l, r) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    walk(&format!("{path}.{k}"), l, r, out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (l, r)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), l, r, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {a} != {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", a, b, &mut out);
    out
}

/// Asserts two snapshots are equal, showing only where they differ.
#[track_caller]
pub fn assert_same(before: &Value, after: &Value, what: &str) {
    let d = json_diff(before, after);
    assert!(
        d.is_empty(),
        "{what}: kernel state differs:\n{}",
        d.join("\n")
    );
}

/// Removes fields that differ between two otherwise identical namespaces
/// or between two moments (lifetimes, counters, namespace ids).
/// Whether an address of a link with carrier is still in duplicate
/// address detection (`ip -j addr` output).
fn dad_pending(addrs: &Value) -> bool {
    addrs.as_array().is_some_and(|links| {
        links.iter().any(|l| {
            l["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "LOWER_UP"))
                && l["addr_info"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|i| i["tentative"] == true && i["dadfailed"] != true)
                })
        })
    })
}

/// Whether an IPv6 address that is past duplicate address detection, on a
/// link that is up with carrier, has no local route yet (`ip -j addr` and
/// `ip -j -6 route show table all` output). The kernel adds that route
/// when detection completes, from a work queue, also for `nodad`
/// addresses, which never show as tentative.
fn local_route_pending(addrs: &Value, routes6: &Value) -> bool {
    let routes = routes6.as_array().map(Vec::as_slice).unwrap_or_default();
    let has_local = |a: &str| {
        routes
            .iter()
            .any(|r| r["type"] == "local" && r["dst"].as_str() == Some(a))
    };
    addrs.as_array().is_some_and(|links| {
        links.iter().any(|l| {
            let flags = l["flags"].as_array();
            let has = |f: &str| flags.is_some_and(|fl| fl.iter().any(|x| x == f));
            has("UP")
                && has("LOWER_UP")
                && l["addr_info"].as_array().is_some_and(|a| {
                    a.iter().any(|i| {
                        i["family"] == "inet6"
                            && i["tentative"] != true
                            && i["dadfailed"] != true
                            && i["local"].as_str().is_some_and(|x| !has_local(x))
                    })
                })
        })
    })
}

/// Whether a link that is up has a carrier its operational state does not
/// show yet (`ip -j link` output): `UP` without `LOWER_UP`, or `LOWER_UP`
/// and `DOWN`.
fn operstate_pending(links: &Value) -> bool {
    links.as_array().is_some_and(|links| {
        links.iter().any(|l| {
            let flags = l["flags"].as_array();
            let has = |f: &str| flags.is_some_and(|fl| fl.iter().any(|x| x == f));
            has("UP")
                && match l["operstate"].as_str() {
                    Some("UP") => !has("LOWER_UP"),
                    Some("DOWN") => has("LOWER_UP"),
                    _ => false,
                }
        })
    })
}

/// A settled snapshot as tests compare it: volatile fields gone
/// ([`scrub`]), routes as a set. The kernel lists routes of one prefix in
/// the order they were added (a link that comes back re-adds its
/// fe80::/64 last): the set is what counts. A link-local address's local
/// route comes when the kernel's duplicate address detection is done (a
/// second or so after the link comes up; until then the address is
/// `tentative`): a snapshot of a machine so loaded that detection outlasts
/// the wait may come before or after it, by no plugin's doing.
fn normalize_snapshot(v: &mut Value) {
    scrub(v);
    for key in ["routes4", "routes6"] {
        if let Some(routes) = v[key].as_array_mut() {
            routes.retain(|r| {
                !(r["type"] == "local" && r["dst"].as_str().is_some_and(|d| d.starts_with("fe80:")))
            });
            routes.sort_by_cached_key(|r| r.to_string());
        }
    }
}

fn scrub(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in [
                "valid_life_time",
                "preferred_life_time",
                "stats",
                "stats64",
                "link_netnsid",
                "netns_immutable",
                // Duplicate address detection under way (see above).
                "tentative",
            ] {
                m.remove(k);
            }
            // A bridge's running timers.
            m.retain(|k, _| !k.ends_with("_timer"));
            for (_, x) in m.iter_mut() {
                scrub(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// What a plugin run produced.
#[derive(Debug)]
pub struct Run {
    /// Exit status code.
    pub code: i32,
    /// Stdout.
    pub stdout: String,
    /// Stderr.
    pub stderr: String,
}

impl Run {
    /// Stdout as JSON; panics with the output if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts a CNI error with `code`, a non-zero exit, and a message
    /// containing `needle`.
    pub fn assert_cni_error(&self, code: u64, needle: &str) {
        assert_ne!(self.code, 0, "expected failure: {self:?}");
        let v = self.json();
        assert_eq!(v["code"].as_u64(), Some(code), "wrong code: {self:?}");
        let msg = format!(
            "{} {}",
            v["msg"].as_str().unwrap_or(""),
            v["details"].as_str().unwrap_or("")
        );
        assert!(
            msg.contains(needle),
            "message {msg:?} does not mention {needle:?}"
        );
        assert!(
            !self.stdout.contains("panicked") && !self.stderr.contains("panicked"),
            "panic: {self:?}"
        );
    }
}

/// One plugin invocation: `exe` run with argv[0] = `argv0`, exactly the
/// given environment (plus the test cache), and `stdin`.
pub struct Invoke<'a> {
    netns: Option<String>,
    exe: PathBuf,
    argv0: Option<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: &'a [u8],
}

impl<'a> Invoke<'a> {
    /// wasmcni acting as plugin `name` (multi-call, argv[0] = name).
    pub fn wasmcni_as(name: &str, stdin: &'a [u8]) -> Invoke<'a> {
        Invoke {
            netns: None,
            exe: wasmcni(),
            argv0: Some(name.to_owned()),
            args: vec![],
            env: test_env(),
            stdin,
        }
    }

    /// `wasmcni run TARGET`.
    pub fn wasmcni_run(target: &str, stdin: &'a [u8]) -> Invoke<'a> {
        Invoke {
            netns: None,
            exe: wasmcni(),
            argv0: None,
            args: vec!["run".into(), target.into()],
            env: test_env(),
            stdin,
        }
    }

    /// An executable file (a reference plugin, or an installed link).
    pub fn exe(path: impl AsRef<Path>, stdin: &'a [u8]) -> Invoke<'a> {
        Invoke {
            netns: None,
            exe: path.as_ref().to_owned(),
            argv0: None,
            args: vec![],
            // A wasmcni link's records and audit stay in target/ (a
            // reference plugin ignores these); its artifact cache is its
            // own (an installed link's, beside the executable).
            env: test_env()
                .into_iter()
                .filter(|(k, _)| k != "WASMCNI_CACHE_DIR")
                .collect(),
            stdin,
        }
    }

    /// Adds a command-line argument.
    pub fn arg(mut self, a: impl AsRef<str>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, k: &str, v: impl AsRef<str>) -> Self {
        self.env.push((k.into(), v.as_ref().into()));
        self
    }

    /// The usual CNI environment for `command` in `netns`.
    pub fn cni(self, command: &str, netns: &Path, ifname: &str) -> Self {
        self.env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", "ctr-test-1")
            .env("CNI_NETNS", netns.display().to_string())
            .env("CNI_IFNAME", ifname)
            .env("CNI_PATH", REFERENCE_DIR)
    }

    /// Runs it inside namespace `ns` (`ip netns exec`), which then is the
    /// "host" namespace as wasmcni sees it. Not with a multi-call argv[0].
    pub fn in_netns(mut self, ns: &Netns) -> Self {
        self.netns = Some(ns.name.clone());
        self
    }

    /// Runs it.
    pub fn run(self) -> Run {
        self.spawn().wait()
    }

    /// Starts it, its stdin written and closed, and returns at once.
    pub fn spawn(self) -> Running {
        let mut cmd = match &self.netns {
            Some(ns) => {
                assert!(self.argv0.is_none(), "in_netns cannot set argv[0]");
                let mut c = Command::new(ip_exe());
                c.args(["netns", "exec", ns]).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        if let Some(a0) = &self.argv0 {
            cmd.arg0(a0);
        }
        cmd.args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {:?}: {e}", self.exe));
        child.stdin.take().unwrap().write_all(self.stdin).unwrap();
        Running { child: Some(child) }
    }
}

/// An invocation running in the background ([`Invoke::spawn`]); killed
/// (SIGKILL, stopped or not) if dropped before [`Running::wait`], so that
/// a failed test leaves no process behind.
pub struct Running {
    child: Option<std::process::Child>,
}

impl Running {
    fn child(&mut self) -> &mut std::process::Child {
        self.child.as_mut().expect("not waited for")
    }

    /// Its process ID (wasmcni's: `ip netns exec` execs it in place).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("not waited for").id()
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        self.child().try_wait().expect("try_wait").is_some()
    }

    /// Whether it is stopped (state `T` in /proc/PID/stat: a SIGSTOP, as
    /// `WASMCNI_FAULT=pause:STEP` sends itself).
    pub fn stopped(&self) -> bool {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("T")
    }

    /// Whether it waits for an `flock` (a `->` line of /proc/locks, which
    /// lists a blocked request under the waiting process's ID).
    pub fn waits_for_flock(&self) -> bool {
        let pid = self.pid().to_string();
        std::fs::read_to_string("/proc/locks")
            .expect("/proc/locks")
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&"->") && f.get(2) == Some(&"FLOCK") && f.get(5) == Some(&&*pid)
            })
    }

    /// Sends it SIGCONT.
    pub fn resume(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::Signal::SIGCONT,
        )
        .expect("SIGCONT");
    }

    /// Waits for it to end; also answers the CPU time (user and system)
    /// it used (wait4(2)'s rusage: its own and its waited-for children's).
    /// What a test bounds by how much work a process did: unlike wall
    /// time, a loaded machine does not stretch it by seconds.
    pub fn wait_cpu(mut self) -> (Run, std::time::Duration) {
        use std::io::Read;
        let mut child = self.child.take().expect("not waited for");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let out = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = stdout.read_to_end(&mut b);
            b
        });
        let err = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = stderr.read_to_end(&mut b);
            b
        });
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, which std has not reaped (it
        // is never waited for through `child` afterwards).
        let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
        assert!(pid > 0, "wait4: {}", std::io::Error::last_os_error());
        drop(child);
        let tv = |t: libc::timeval| {
            std::time::Duration::from_secs(t.tv_sec as u64)
                + std::time::Duration::from_micros(t.tv_usec as u64)
        };
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        };
        let run = Run {
            code,
            stdout: String::from_utf8_lossy(&out.join().expect("stdout")).into_owned(),
            stderr: String::from_utf8_lossy(&err.join().expect("stderr")).into_owned(),
        };
        (run, tv(ru.ru_utime) + tv(ru.ru_stime))
    }

    /// Waits for it to end.
    pub fn wait(mut self) -> Run {
        let out = self
            .child
            .take()
            .expect("not waited for")
            .wait_with_output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Running {
    /// Waits (at most 60 s, else fails) until it stopped itself
    /// (`WASMCNI_FAULT=pause:<step>`: SIGSTOP at that step).
    pub fn wait_paused(&mut self) {
        wait_until(
            "the paused invocation to stop",
            std::time::Duration::from_secs(60),
            || {
                assert!(!self.exited(), "it ended instead of pausing");
                self.stopped()
            },
        );
    }

    /// Waits (at most 60 s, else fails) until it either ended or waits for
    /// a `flock` someone holds. Answers whether it ended.
    pub fn wait_ended_or_blocked(&mut self) -> bool {
        let mut ended = false;
        wait_until(
            "the invocation to end or wait for a lock",
            std::time::Duration::from_secs(60),
            || {
                ended = self.exited();
                ended || self.waits_for_flock()
            },
        );
        ended
    }
}

/// Polls `done` (every 20 ms) until it holds; fails the test, naming
/// `what`, after `timeout`.
pub fn wait_until(what: &str, timeout: std::time::Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The environment every wasmcni run in the tests gets: the shared
/// artifact cache, and the audit log in target/ (never the node's).
fn test_env() -> Vec<(String, String)> {
    let mut env = vec![
        // The VM's own persistent cache where tests/vm/run gives one.
        (
            "WASMCNI_CACHE_DIR".into(),
            std::env::var("WASMCNI_CACHE_DIR")
                .ok()
                .filter(|_| vm::inside())
                .unwrap_or_else(|| cache_dir().display().to_string()),
        ),
        (
            "WASMCNI_AUDIT".into(),
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join("audit.jsonl")
                .display()
                .to_string(),
        ),
        // Attachment records stay in target/, never in the machine's
        // /var/lib/wasmcni (tests that read them set their own).
        (
            "WASMCNI_STATE_DIR".into(),
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join("wasmcni-state")
                .display()
                .to_string(),
        ),
    ];
    // Under the VM's emulation a debug build compiles a plugin (cache
    // miss) slower than the default deadline allows; tests that check
    // deadlines set their own and do not run there.
    if vm::inside() {
        env.push(("WASMCNI_DEADLINE_MS".into(), "600000".into()));
    }
    env
}

/// The absolute path of `ip` (the tests clear the environment).
pub fn ip_exe() -> PathBuf {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("iproute2's ip")
}

/// A loopback network config in `version`.
pub fn loopback_conf(version: &str) -> Vec<u8> {
    format!(r#"{{"cniVersion":"{version}","name":"lo-net","type":"loopback"}}"#).into_bytes()
}

/// `s` with every MAC address (`aa:bb:cc:dd:ee:ff`) replaced by `<mac>`:
/// what differs by construction between two runs.
pub fn mask_macs(s: &str) -> String {
    if !s.contains(':') {
        return s.to_owned();
    }
    replace_at(s, is_mac_at, 17, "<mac>")
}

/// `s` with every generated host veth name (`veth` and 8 hex digits)
/// replaced by `<veth>`.
pub fn mask_veths(s: &str) -> String {
    if !s.contains("veth") {
        return s.to_owned();
    }
    replace_at(s, is_veth_at, 12, "<veth>")
}

fn is_mac_at(b: &[u8], i: usize) -> bool {
    b.len() >= i + 17
        && (0..6).all(|k| {
            let j = i + k * 3;
            b[j].is_ascii_hexdigit() && b[j + 1].is_ascii_hexdigit() && (k == 5 || b[j + 2] == b':')
        })
}

fn is_veth_at(b: &[u8], i: usize) -> bool {
    b.len() >= i + 12
        && &b[i..i + 4] == b"veth"
        && b[i + 4..i + 12]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// Replaces every `len`-byte match of `at` in `s` with `with`. A match
/// starts and ends on ASCII bytes (both tests ask for them), so every
/// slice below is on a character boundary. Runs between matches are
/// copied whole: the snapshots of a VM case hold thousands of lines, and
/// a character at a time (in a debug build) was a tenth of the VM's time.
fn replace_at(s: &str, at: fn(&[u8], usize) -> bool, len: usize, with: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut copied, mut i) = (0, 0);
    while i + len <= b.len() {
        if at(b, i) {
            out.push_str(&s[copied..i]);
            out.push_str(with);
            i += len;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&s[copied..]);
    out
}

/// Fails the test unless everything tests/cri/sandbox.sh needs is here
/// (containerd, runc, the tools its checks use, Debian's grpc for Python).
pub fn require_cri() {
    require_root();
    for tool in [
        "containerd",
        "ctr",
        "containerd-shim-runc-v2",
        "runc",
        "unshare",
        "busybox",
        "nft",
        "iptables-save",
        "tc",
        "/usr/lib/cni/bridge",
    ] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "this test needs {tool} (apt-get install containerd runc busybox-static nftables \
             iptables iproute2 containernetworking-plugins; `make setup` does)"
        );
    }
    assert!(
        Command::new("/usr/bin/python3")
            .args(["-c", "import grpc, grpc_tools.protoc, google.protobuf"])
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs Debian's python3-grpcio, python3-grpc-tools and python3-protobuf \
         (`make setup` installs them)"
    );
}

//! A real Kubernetes runtime: Debian's containerd (1.6) and its CRI plugin,
//! driven over the CRI API (runtime.v1, gRPC) as the kubelet drives it, by
//! a small Python client (tests/cri/cri.py, its protobuf compiled at test
//! time from tests/cri/cri.proto). containerd runs in network and mount
//! namespaces of its own (tests/cri/sandbox.sh), with its own root, state
//! and socket, so the machine's network and CNI state are never touched.
//! Its CNI bin dir is an installed wasmcni bin dir (`wasmcni install`) or,
//! as the control, Debian's reference plugins; the network is bridge
//! (isGateway, ipMasq) + host-local + portmap + bandwidth + tuning, and the
//! pod sandbox image is busybox-static, imported with `ctr images import`.
//! Each case runs against both:
//! - `hostport`: a pod with a hostPort and bandwidth annotations (containerd
//!   sends both capability arguments with Go field names) and an httpd
//!   container: the port answers at the node-side address of the pod
//!   network, ingress and egress tbf qdiscs are in place;
//! - `sequential`, `parallel`: 20 pods in a row, then 8 at once;
//! - `fail_plain`, `fail_hostport`: a runtime handler whose network's last
//!   member (tuning, a sysctl that does not exist) fails ADD: RunPodSandbox
//!   fails, and containerd's own cleanup leaves nothing;
//! - `restart`: containerd killed and started again on the same root, then
//!   Stop/Remove of a pod made before;
//! - after every Remove: no veth, ifb, reservation, netns, libcni cache
//!   entry, wasmcni record, wasmcni nftables rule, or rule naming the pod.
//!
//! Each side runs once (all its cases, about 20 s); the tests of a side
//! read that run's report. The soak (`tests/cri/soak.py`) is
//! tests/soak.rs.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// One sandbox at a time: two containerds and their pods on two cores
/// would slow both enough to matter to the timed waits.
static TURN: Mutex<()> = Mutex::new(());

/// The run of each side: reference, wasmcni.
static RUNS: [OnceLock<SideRun>; 2] = [OnceLock::new(), OnceLock::new()];

/// What tests/cri/sandbox.sh printed for one side.
struct SideRun {
    ok: bool,
    status: String,
    stdout: String,
    stderr: String,
    /// Each `result {json}` line, by case name.
    results: BTreeMap<String, Value>,
}

impl SideRun {
    /// The debugging part of the report: everything but the results.
    fn context(&self) -> String {
        let rest: Vec<&str> = self
            .stdout
            .lines()
            .filter(|l| !l.starts_with("result "))
            .collect();
        format!(
            "sandbox {}\n{}\n{}",
            self.status,
            rest.join("\n"),
            self.stderr
        )
    }
}

/// Runs (once) every case against `side`, in a sandbox of its own.
fn side(side: &str) -> &'static SideRun {
    let i = match side {
        "reference" => 0,
        "wasmcni" => 1,
        _ => unreachable!("{side}"),
    };
    RUNS[i].get_or_init(|| {
        support::require_cri();
        let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        let work = support::private_tempdir();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cri/sandbox.sh");
        let t = std::time::Instant::now();
        let out = Command::new("unshare")
            .args(["-n", "-m"])
            .arg(&script)
            .arg(support::wasmcni())
            .arg(work.path())
            .args(["cases", side])
            // The test run's compiled plugins: `wasmcni install` finds
            // them there, and the plugins containerd runs load them.
            .env("WASMCNI_CACHE_DIR", support::cache_dir())
            .output()
            .expect("running containerd in a sandbox");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let results = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("result "))
            .map(|j| {
                let v: Value = serde_json::from_str(j).unwrap_or_else(|e| panic!("{e}: {j}"));
                (v["case"].as_str().unwrap_or("?").to_owned(), v)
            })
            .collect::<BTreeMap<_, _>>();
        eprintln!(
            "containerd CRI against {side}: {:.1} s; per case (ms): {}",
            t.elapsed().as_secs_f64(),
            results
                .iter()
                .map(|(k, v)| format!("{k} {}", v["ms"]))
                .collect::<Vec<_>>()
                .join(", ")
        );
        SideRun {
            ok: out.status.success(),
            status: out.status.to_string(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            results,
        }
    })
}

/// The report of `case` against `side`, after the checks every case
/// shares: it ran without error and left nothing.
fn case(side_name: &str, case: &str) -> (&'static Value, impl Fn(&str) -> String) {
    let run = side(side_name);
    assert!(
        run.ok,
        "the sandbox against {side_name} failed:\n{}",
        run.context()
    );
    let (side_name, case) = (side_name.to_owned(), case.to_owned());
    let r = run.results.get(&case).unwrap_or_else(|| {
        panic!(
            "no result for {case} against {side_name}:\n{}",
            run.context()
        )
    });
    let what = move |msg: &str| -> String {
        format!(
            "{side_name} {case}: {msg}\n{}\n{}",
            serde_json::to_string_pretty(r).unwrap(),
            run.context()
        )
    };
    assert!(r.get("error").is_none(), "{}", what("a CRI call failed"));
    let left = &r["left"];
    let dirty: Vec<&String> = left
        .as_object()
        .unwrap_or_else(|| panic!("{}", what("no `left`")))
        .iter()
        .filter(|(_, v)| v.as_array().is_none_or(|a| !a.is_empty()))
        .map(|(k, _)| k)
        .collect();
    assert!(
        dirty.is_empty(),
        "{}",
        what(&format!("left behind after Remove: {dirty:?}"))
    );
    (r, what)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A pod with a hostPort (18080 -> 80) and bandwidth annotations (ingress
/// 10M, egress 20M), serving with busybox httpd.
fn hostport(side_name: &str) {
    let (r, what) = case(side_name, "hostport");
    assert_eq!(
        r["direct"],
        "served-by-the-pod",
        "{}",
        what("the pod's own address")
    );
    assert_eq!(
        r["hostport"],
        "served-by-the-pod",
        "{}",
        what("the hostPort at the node-side address")
    );
    let (mine, theirs) = if side_name == "wasmcni" {
        ("dnat-wasmcni", "dnat-iptables")
    } else {
        ("dnat-iptables", "dnat-wasmcni")
    };
    assert!(
        !strings(&r[mine]).is_empty() && strings(&r[theirs]).is_empty(),
        "{}",
        what(&format!("the DNAT is {side_name}'s ({mine})"))
    );
    let tbf = r["tbf"].as_array().cloned().unwrap_or_default();
    let has = |ifb: bool, rate: &str| {
        tbf.iter()
            .any(|q| q["ifb"] == Value::Bool(ifb) && q["rate"] == rate)
    };
    assert!(
        has(false, "10Mbit"),
        "{}",
        what("ingress: a 10Mbit tbf on the host veth")
    );
    assert!(
        has(true, "20Mbit"),
        "{}",
        what("egress: a 20Mbit tbf on an ifb")
    );
    let audited = r["wasmcni-audited"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if side_name == "wasmcni" {
        for call in [
            "bridge ADD",
            "portmap ADD",
            "bandwidth ADD",
            "tuning ADD",
            "bridge DEL",
        ] {
            assert!(
                audited.contains_key(call),
                "{}",
                what(&format!("wasmcni served {call}"))
            );
        }
    } else {
        assert!(audited.is_empty(), "{}", what("wasmcni ran no plugin"));
    }
}

fn sequential(side_name: &str) {
    let (r, what) = case(side_name, "sequential");
    let ips = strings(&r["ips"]);
    assert_eq!(ips.len(), 20, "{}", what("20 pods"));
    assert!(
        ips.iter().all(|ip| ip.starts_with("10.88.0.")),
        "{}",
        what("addresses from the network")
    );
    assert!(
        r["dirty"].as_array().is_some_and(Vec::is_empty),
        "{}",
        what("something left after a pod's Remove")
    );
}

fn parallel(side_name: &str) {
    let (r, what) = case(side_name, "parallel");
    assert_eq!(r["distinct-ips"], 8, "{}", what("8 pods, 8 addresses"));
    assert_eq!(
        r["veths-while-running"],
        8,
        "{}",
        what("8 veths while they ran")
    );
}

/// RunPodSandbox on the network whose last member fails ADD.
fn failing(side_name: &str, name: &str) {
    let (r, what) = case(side_name, name);
    let failed = r["failed"].as_str().unwrap_or("");
    assert!(
        failed.contains(r#"plugin type="tuning" failed (add)"#)
            && failed.contains("no_such_setting"),
        "{}",
        what("RunPodSandbox fails in tuning's ADD, the chain's last member")
    );
}

fn restart(side_name: &str) {
    let (r, what) = case(side_name, "restart");
    assert_eq!(
        r["state-after-restart"],
        "SANDBOX_READY",
        "{}",
        what("the pod survives containerd's restart")
    );
    assert_eq!(
        r["ip-after-restart"],
        r["ip"],
        "{}",
        what("containerd recovers its address")
    );
}

#[test]
fn reference_hostport_and_bandwidth() {
    hostport("reference");
}

#[test]
fn wasmcni_hostport_and_bandwidth() {
    hostport("wasmcni");
}

#[test]
fn reference_20_pods_in_a_row() {
    sequential("reference");
}

#[test]
fn wasmcni_20_pods_in_a_row() {
    sequential("wasmcni");
}

#[test]
fn reference_8_pods_at_once() {
    parallel("reference");
}

#[test]
fn wasmcni_8_pods_at_once() {
    parallel("wasmcni");
}

#[test]
fn reference_failing_chain_leaves_nothing() {
    failing("reference", "fail-plain");
}

#[test]
fn wasmcni_failing_chain_leaves_nothing() {
    failing("wasmcni", "fail-plain");
}

#[test]
fn reference_failing_chain_with_hostport_and_bandwidth_leaves_nothing() {
    failing("reference", "fail-hostport");
}

#[test]
fn wasmcni_failing_chain_with_hostport_and_bandwidth_leaves_nothing() {
    failing("wasmcni", "fail-hostport");
}

#[test]
fn reference_pod_outlives_a_containerd_restart() {
    restart("reference");
}

#[test]
fn wasmcni_pod_outlives_a_containerd_restart() {
    restart("wasmcni");
}

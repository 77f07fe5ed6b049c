//! IPAM state under pressure: many ADDs at once (S4), a process killed at
//! every step of a reservation (S5), the on-disk layout shared with the
//! reference host-local in both directions, and the spec 1.1 verbs GC and
//! STATUS invoked the way libcni 1.2+ invokes them (Debian's libcni 1.1.2
//! predates them). Plugins run from an installed wasmcni bin dir, each
//! invocation its own process, inside a sandboxed node namespace.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::cni::bin_dir;
use support::{Invoke, Netns, Run, REFERENCE_DIR};

/// A node with containers, an IPAM data dir and a policy granting it.
struct Node {
    node: Netns,
    ctrs: Vec<Netns>,
    dir: tempfile::TempDir,
}

impl Node {
    fn new(tag: &str, containers: usize) -> Node {
        let node = Netns::new(&format!("{tag}n"));
        node.ip(&["link", "set", "lo", "up"]);
        let ctrs = (0..containers)
            .map(|i| Netns::new(&format!("{tag}{i}")))
            .collect();
        let dir = support::private_tempdir();
        let policy = dir.path().join("policy.json");
        std::fs::write(
            &policy,
            json!({"plugins": {"host-local": {"ipam-roots": [dir.path().join("data")]}}})
                .to_string(),
        )
        .expect("policy");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        Node { node, ctrs, dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn net_dir(&self, network: &str) -> PathBuf {
        self.data().join(network)
    }

    /// A network config with `plugin` and this node's data dir.
    fn conf(&self, v: Value) -> Vec<u8> {
        v.to_string()
            .replace(
                "\"@data\"",
                &Value::from(self.data().display().to_string()).to_string(),
            )
            .into_bytes()
    }

    /// Runs `exe` (a wasmcni link or a reference plugin) for container
    /// `ctr` with `command` and `conf`.
    fn run(
        &self,
        exe: &Path,
        command: &str,
        ctr: usize,
        conf: &[u8],
        extra: &[(&str, &str)],
    ) -> Run {
        let mut inv = Invoke::exe(exe, conf)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("ctr{ctr}"))
            .env("CNI_NETNS", self.ctrs[ctr].path.display().to_string())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", REFERENCE_DIR)
            .env(
                "WASMCNI_POLICY",
                self.dir.path().join("policy.json").display().to_string(),
            )
            .env("WASMCNI_AUDIT", "off")
            .env(
                "WASMCNI_STATE_DIR",
                self.dir.path().join("state").display().to_string(),
            )
            .in_netns(&self.node);
        for (k, v) in extra {
            inv = inv.env(k, v);
        }
        inv.run()
    }

    /// Reservation files of `network`: address → contents.
    fn reservations(&self, network: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = std::fs::read_dir(self.net_dir(network))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.parse::<std::net::IpAddr>().ok()?;
                        Some((name, std::fs::read_to_string(e.path()).unwrap_or_default()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Every file name in `network`'s directory.
    fn files(&self, network: &str) -> BTreeSet<String> {
        std::fs::read_dir(self.net_dir(network))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The node's links whose name starts with `prefix`.
    fn links(&self, prefix: &str) -> usize {
        let v: Value = serde_json::from_str(&self.node.ip(&["-j", "link", "show"])).expect("json");
        v.as_array()
            .expect("links")
            .iter()
            .filter(|l| l["ifname"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .count()
    }
}

fn wasm(plugin: &str) -> PathBuf {
    bin_dir().join(plugin)
}

fn reference(plugin: &str) -> PathBuf {
    Path::new(REFERENCE_DIR).join(plugin)
}

/// The address a result gives, without its prefix length.
fn address(run: &Run) -> String {
    let v = run.json();
    v["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("no address in {run:?}"))
        .to_owned()
}

/// Runs `f(i)` for every i in 0..n on its own thread, at once.
fn parallel<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let f = &f;
                s.spawn(move || f(i))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    })
}

fn bridge_conf(node: &Node, bridge: &str, ipam: Value) -> Vec<u8> {
    let mut ipam = ipam;
    ipam["type"] = json!("host-local");
    ipam["dataDir"] = json!("@data");
    node.conf(
        json!({"cniVersion": "1.0.0", "name": "s4net", "type": "bridge",
        "bridge": bridge, "isGateway": true, "ipam": ipam}),
    )
}

/// S4: 64 ADDs of distinct containers at once, each its own process: no
/// address twice; then a /28 that holds 13: exactly 13 succeed, the rest
/// get a clean "exhausted" error and leave no veth and no reservation (the
/// reference leaks a host veth for each); after the DELs only the lock and
/// the last-reserved record remain. Twice over.
#[test]
fn s4_concurrent_adds_never_share_an_address_and_leave_nothing() {
    const N: usize = 64;
    let node = Node::new("s4", N);
    for round in 0..2 {
        // A /24: everyone gets an address, each a different one.
        let conf = bridge_conf(&node, "cnis4a", json!({"subnet": "10.44.0.0/24"}));
        let adds = parallel(N, |i| node.run(&wasm("bridge"), "ADD", i, &conf, &[]));
        for (i, r) in adds.iter().enumerate() {
            assert_eq!(r.code, 0, "round {round}, ADD {i}: {r:?}");
        }
        let addrs: BTreeSet<String> = adds.iter().map(address).collect();
        assert_eq!(addrs.len(), N, "an address was given twice: {addrs:?}");
        assert_eq!(node.reservations("s4net").len(), N);
        assert_eq!(node.links("veth"), N);
        let dels = parallel(N, |i| node.run(&wasm("bridge"), "DEL", i, &conf, &[]));
        assert!(dels.iter().all(|r| r.code == 0), "{dels:?}");
        assert_eq!(node.links("veth"), 0, "round {round}: veths left");
        assert_eq!(
            node.files("s4net"),
            BTreeSet::from(["lock".to_owned(), "last_reserved_ip.0".to_owned()]),
            "round {round}: state left after the DELs"
        );

        // A /28: .2 to .14 (.1 is the gateway), 13 addresses for 64.
        let conf = bridge_conf(&node, "cnis4b", json!({"subnet": "10.45.0.0/28"}));
        let adds = parallel(N, |i| node.run(&wasm("bridge"), "ADD", i, &conf, &[]));
        let ok: Vec<&Run> = adds.iter().filter(|r| r.code == 0).collect();
        assert_eq!(ok.len(), 13, "round {round}: {} succeeded", ok.len());
        for r in adds.iter().filter(|r| r.code != 0) {
            r.assert_cni_error(
                999,
                "no IP addresses available in range set: 10.45.0.1-10.45.0.14",
            );
        }
        let addrs: BTreeSet<String> = ok.iter().map(|r| address(r)).collect();
        assert_eq!(addrs.len(), 13, "{addrs:?}");
        assert_eq!(node.reservations("s4net").len(), 13);
        assert_eq!(
            node.links("veth"),
            13,
            "round {round}: a failed ADD left its veth"
        );
        let dels = parallel(N, |i| node.run(&wasm("bridge"), "DEL", i, &conf, &[]));
        assert!(dels.iter().all(|r| r.code == 0), "{dels:?}");
        assert_eq!(node.links("veth"), 0);
        assert_eq!(
            node.files("s4net"),
            BTreeSet::from(["lock".to_owned(), "last_reserved_ip.0".to_owned()])
        );
    }
}

fn host_local_conf(node: &Node, subnet: &str) -> Vec<u8> {
    node.conf(
        json!({"cniVersion": "1.0.0", "name": "s5net", "type": "host-local",
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": "@data"}}),
    )
}

/// Every reservation file holds a whole `<id>\r\n<ifname>`, and no
/// temporary file outlives the next holder of the lock.
fn assert_whole(node: &Node, network: &str, what: &str) {
    for (ip, contents) in node.reservations(network) {
        let (id, ifname) = contents
            .split_once("\r\n")
            .unwrap_or_else(|| panic!("{what}: {ip} holds {contents:?}"));
        assert!(
            id.starts_with("ctr") && ifname == "eth0",
            "{what}: {ip} holds {contents:?}"
        );
    }
}

/// S5: a process killed at each step of a reservation (the file written,
/// linked under its name, the last-reserved record written, cut to
/// length), and
/// at random instants: never an empty or partial reservation, never an
/// address both held and handed out again, and DEL releases what the
/// killed ADD held.
#[test]
fn s5_a_kill_at_any_step_leaves_no_partial_reservation() {
    let node = Node::new("s5", 3);
    let conf = host_local_conf(&node, "10.55.0.0/24");
    for step in ["written", "linked", "last-written", "last-cut"] {
        let fault = format!("ipam:{step}");
        let killed = node.run(
            &wasm("host-local"),
            "ADD",
            0,
            &conf,
            &[("WASMCNI_FAULT", &fault)],
        );
        assert_eq!(killed.code, -1, "{step}: not killed: {killed:?}");
        assert_whole(&node, "s5net", step);
        // The next ADD works, and never gets an address someone holds.
        let next = node.run(&wasm("host-local"), "ADD", 1, &conf, &[]);
        assert_eq!(next.code, 0, "{step}: {next:?}");
        assert_whole(&node, "s5net", step);
        let held: Vec<String> = node
            .reservations("s5net")
            .into_iter()
            .map(|(ip, _)| ip)
            .collect();
        assert!(held.contains(&address(&next)), "{step}: {held:?}");
        assert!(
            !node.files("s5net").iter().any(|f| f.starts_with('.')),
            "{step}: a temporary file outlived the next lock holder: {:?}",
            node.files("s5net")
        );
        // DEL releases whatever the killed ADD left, and the other's.
        for c in [0, 1] {
            let del = node.run(&wasm("host-local"), "DEL", c, &conf, &[]);
            assert_eq!(del.code, 0, "{step}: {del:?}");
        }
        assert!(
            node.reservations("s5net").is_empty(),
            "{step}: {:?}",
            node.reservations("s5net")
        );
    }
    // Killed at random instants, many times over.
    for i in 0..30u64 {
        let conf = host_local_conf(&node, "10.56.0.0/24");
        let dir = node.dir.path().display().to_string();
        let exe = wasm("host-local");
        let mut child = std::process::Command::new(support::ip_exe())
            .args(["netns", "exec", &node.node.name])
            .arg(&exe)
            .env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "ctr2")
            .env("CNI_NETNS", node.ctrs[2].path.display().to_string())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", REFERENCE_DIR)
            .env("WASMCNI_POLICY", format!("{dir}/policy.json"))
            .env("WASMCNI_AUDIT", "off")
            .env("WASMCNI_STATE_DIR", format!("{dir}/state"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        {
            use std::io::Write;
            let _ = child.stdin.take().expect("stdin").write_all(&conf);
        }
        std::thread::sleep(std::time::Duration::from_micros(500 * (i % 20)));
        let _ = child.kill();
        let _ = child.wait();
        assert_whole(&node, "s5net", &format!("random kill {i}"));
        let del = node.run(&wasm("host-local"), "DEL", 2, &conf, &[]);
        assert_eq!(del.code, 0, "{del:?}");
        assert!(node.reservations("s5net").is_empty());
    }
}

/// A node can switch between the reference host-local and wasmcni's in
/// either direction without losing or duplicating an allocation: both
/// read and write the same files, and either side's DEL releases.
#[test]
fn reservations_are_shared_with_the_reference_host_local() {
    let node = Node::new("compat", 4);
    let conf = node.conf(
        json!({"cniVersion": "1.0.0", "name": "compat", "type": "host-local",
        "ipam": {"type": "host-local", "subnet": "10.57.0.0/24", "dataDir": "@data"}}),
    );
    let order = [
        (reference("host-local"), 0, "10.57.0.2"),
        (wasm("host-local"), 1, "10.57.0.3"),
        (reference("host-local"), 2, "10.57.0.4"),
        (wasm("host-local"), 3, "10.57.0.5"),
    ];
    for (exe, ctr, want) in &order {
        let r = node.run(exe, "ADD", *ctr, &conf, &[]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(address(&r), *want, "{}: {r:?}", exe.display());
    }
    // Each side sees the other's reservation as taken (a duplicate ADD is
    // refused by both), and CHECK finds it.
    for (exe, ctr) in [(wasm("host-local"), 0), (reference("host-local"), 1)] {
        let again = node.run(&exe, "ADD", ctr, &conf, &[]);
        again.assert_cni_error(999, "duplicate allocation is not allowed");
        let check = node.run(&exe, "CHECK", ctr, &conf, &[]);
        assert_eq!(check.code, 0, "{check:?}");
    }
    // DEL from the other side releases.
    for (exe, ctr) in [(wasm("host-local"), 0), (reference("host-local"), 1)] {
        let del = node.run(&exe, "DEL", ctr, &conf, &[]);
        assert_eq!(del.code, 0, "{del:?}");
    }
    let left: Vec<String> = node
        .reservations("compat")
        .into_iter()
        .map(|(ip, _)| ip)
        .collect();
    assert_eq!(left, ["10.57.0.4", "10.57.0.5"]);
    // Round robin continues from the same record, whoever wrote it.
    let r = node.run(&reference("host-local"), "ADD", 0, &conf, &[]);
    assert_eq!(address(&r), "10.57.0.6", "{r:?}");
    let r = node.run(&wasm("host-local"), "ADD", 1, &conf, &[]);
    assert_eq!(address(&r), "10.57.0.7", "{r:?}");
}

/// GC (spec 1.1), as libcni 1.2+ sends it: the network config with
/// `cni.dev/valid-attachments` (and the older draft's
/// `cni.dev/attachments`), `CNI_COMMAND=GC`, no container. Every
/// reservation not held by a valid attachment is released, through bridge
/// (which forwards GC to its IPAM) and host-local alike. STATUS is
/// forwarded to the IPAM plugin: ready, or code 50.
#[test]
fn gc_releases_what_no_valid_attachment_holds_and_status_reports_readiness() {
    let node = Node::new("gc", 3);
    let base = json!({"cniVersion": "1.1.0", "name": "gcnet", "type": "bridge",
        "bridge": "cnigc0", "isGateway": true,
        "ipam": {"type": "host-local", "subnet": "10.58.0.0/24", "dataDir": "@data"}});
    let conf = node.conf(base.clone());
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        for c in 0..3 {
            let r = node.run(&wasm("bridge"), "ADD", c, &conf, &[]);
            assert_eq!(r.code, 0, "{r:?}");
        }
        assert_eq!(node.reservations("gcnet").len(), 3);
        let mut gc = base.clone();
        gc[key] = json!([{"containerID": "ctr0", "ifname": "eth0"}]);
        let gc = node.conf(gc);
        let r = Invoke::exe(wasm("bridge"), &gc)
            .env("CNI_COMMAND", "GC")
            .env("CNI_PATH", REFERENCE_DIR)
            .env(
                "WASMCNI_POLICY",
                node.dir.path().join("policy.json").display().to_string(),
            )
            .env("WASMCNI_AUDIT", "off")
            .in_netns(&node.node)
            .run();
        assert_eq!(r.code, 0, "{key}: {r:?}");
        let left = node.reservations("gcnet");
        assert_eq!(left.len(), 1, "{key}: {left:?}");
        assert_eq!(left[0].1, "ctr0\r\neth0", "{key}");
        for c in 0..3 {
            let r = node.run(&wasm("bridge"), "DEL", c, &conf, &[]);
            assert_eq!(r.code, 0, "{r:?}");
        }
        assert!(node.reservations("gcnet").is_empty());
    }
    // STATUS: ready; and not ready (code 50) when the IPAM state cannot be
    // kept where the config says.
    let status = |conf: &[u8]| {
        Invoke::exe(wasm("bridge"), conf)
            .env("CNI_COMMAND", "STATUS")
            .env("CNI_PATH", REFERENCE_DIR)
            .env(
                "WASMCNI_POLICY",
                node.dir.path().join("policy.json").display().to_string(),
            )
            .env("WASMCNI_AUDIT", "off")
            .in_netns(&node.node)
            .run()
    };
    let r = status(&conf);
    assert_eq!(r.code, 0, "{r:?}");
    let mut elsewhere = base.clone();
    elsewhere["ipam"]["dataDir"] = json!("/var/lib/wasmcni-test-not-granted");
    status(&node.conf(elsewhere)).assert_cni_error(50, "");
    // And not ready (50) while every address is taken (the spec after
    // 1.1.0: resources exhausted), ready again once one is released.
    let mut small = base;
    small["ipam"]["rangeStart"] = json!("10.58.0.2");
    small["ipam"]["rangeEnd"] = json!("10.58.0.3");
    let small = node.conf(small);
    for c in 0..2 {
        assert_eq!(status(&small).code, 0, "an address is left");
        let r = node.run(&wasm("bridge"), "ADD", c, &small, &[]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    status(&small).assert_cni_error(
        50,
        "no IP addresses available in range set: 10.58.0.2-10.58.0.3",
    );
    let r = node.run(&wasm("bridge"), "ADD", 2, &small, &[]);
    assert_ne!(r.code, 0, "STATUS said so: {r:?}");
    let r = node.run(&wasm("bridge"), "DEL", 0, &small, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(status(&small).code, 0, "{:?}", status(&small));
    for c in 1..3 {
        let r = node.run(&wasm("bridge"), "DEL", c, &small, &[]);
        assert_eq!(r.code, 0, "{r:?}");
    }
}

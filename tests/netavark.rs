//! wasmcni as a netavark plugin (Podman 5 and later), driven by a real
//! netavark (2.1.0, built from crates.io by tests/netavark/setup, which
//! `make test` runs; `$WASMCNI_NETAVARK` overrides where it is). Each test
//! has a node namespace of its own, in which netavark runs (`ip netns
//! exec`), and container namespaces; the node's bin dir is an installed
//! wasmcni (netavark's `--plugin-directory`), its policy, state root, run
//! dir, audit log and IPAM data are the test's:
//! - a network of bridge + host-local + portmap served by wasmcni beside
//!   one of netavark's own bridge driver (the control): `netavark create`
//!   checks it, `setup` gives the container the address Podman assigned,
//!   it reaches its gateway, a published port reaches a busybox httpd in
//!   it, and `teardown` leaves no link, reservation, rule, record or cached
//!   result;
//! - ten setups and teardowns in a row leave the node as the first did;
//! - a chain that fails after bridge leaves nothing, and netavark reports
//!   the member and the CNI error;
//! - `create` refuses a network wasmcni could not run, naming why;
//! - `teardown` completes with the namespace gone, and with the conflist
//!   removed since `setup`.

// Tests read their own environment (paths); the host reads its settings
// through crate::config only (host/clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use support::net::Net;
use support::Netns;

/// Held by each test while it runs: the tests take turns. One of twelve
/// runs failed once while everything ran beside `precompile` (17 plugins
/// compiled by a debug build) and two other builds on the machine's two
/// cores; a plugin's 10 s deadline is the suspect.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A node running netavark, with a wasmcni network `devnet` (10.61.0.0/24)
/// and netavark's own bridge network `ctlnet` (10.62.0.0/24).
struct Node {
    net: Net,
    conflist: PathBuf,
}

/// What netavark printed.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("netavark's stdout is not JSON ({e}): {self:?}"))
    }
}

const ID: &str = "2f259bab93aaaaa2542ba43ef33eb990d0999ee1b9924b557b7be53c0b7a1bb9";

impl Node {
    fn new(tag: &str, chain: Value) -> Node {
        support::require_root();
        let net = Net::new(tag);
        let conflist = net.dir.path().join("devnet.conflist");
        std::fs::create_dir_all(net.dir.path().join("netavark")).expect("netavark's config dir");
        let node = Node { net, conflist };
        node.write_conflist(chain);
        node
    }

    /// Writes the conflist: bridge + host-local, then `rest`.
    fn write_conflist(&self, rest: Value) {
        let mut plugins = vec![json!({
            "type": "bridge", "bridge": "cni-nv0", "isGateway": true,
            "capabilities": {"ips": true},
            "ipam": {"type": "host-local", "dataDir": self.net.data(),
                     "ranges": [[{"subnet": "10.61.0.0/24", "gateway": "10.61.0.1"}]],
                     "routes": [{"dst": "0.0.0.0/0"}]}})];
        plugins.extend(rest.as_array().cloned().unwrap_or_default());
        std::fs::write(
            &self.conflist,
            json!({"cniVersion": "1.0.0", "name": "devnet", "plugins": plugins}).to_string(),
        )
        .expect("conflist");
    }

    fn wasmcni_network(&self) -> Value {
        json!({
            "name": "wnet", "id": ID, "driver": "wasmcni",
            "ipv6_enabled": false, "internal": false, "dns_enabled": false,
            "options": {"conflist": self.conflist},
            "subnets": [{"subnet": "10.61.0.0/24", "gateway": "10.61.0.1"}],
            "ipam_options": {"driver": "host-local"}})
    }

    fn control_network() -> Value {
        json!({
            "name": "ctlnet", "id": ID.replace('2', "3"), "driver": "bridge",
            "network_interface": "ctl0",
            "ipv6_enabled": false, "internal": false, "dns_enabled": false,
            "subnets": [{"subnet": "10.62.0.0/24", "gateway": "10.62.0.1"}],
            "ipam_options": {"driver": "host-local"}})
    }

    /// netavark's input for attaching container `cid` to `network` with
    /// `static_ip`, and port mappings.
    fn options(cid: &str, network: &Value, static_ip: &str, ports: Value) -> Value {
        let name = network["name"].as_str().expect("name");
        json!({
            "container_id": cid, "container_name": format!("name-{cid}"),
            "networks": {name: {"interface_name": "eth0", "static_ips": [static_ip]}},
            "network_info": {name: network},
            "port_mappings": ports})
    }

    /// Runs netavark in the node with `args` and `stdin`.
    fn netavark(&self, args: &[&str], stdin: &Value) -> Out {
        self.netavark_in(support::cni::bin_dir(), args, stdin)
    }

    /// [`Node::netavark`] with `plugins` as its plugin directory.
    fn netavark_in(&self, plugins: &Path, args: &[&str], stdin: &Value) -> Out {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.net.node.name])
            .arg(support::netavark())
            .arg("--config")
            .arg(self.net.dir.path().join("netavark"))
            .args(["--rootless", "false", "--firewall-driver", "nftables"])
            .arg("--plugin-directory")
            .arg(plugins)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("WASMCNI_RUN_DIR", self.run_dir())
            .envs(self.net.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("netavark");
        {
            use std::io::Write;
            let mut input = child.stdin.take().expect("stdin");
            input
                .write_all(stdin.to_string().as_bytes())
                .expect("netavark's stdin");
        }
        let out = child.wait_with_output().expect("netavark");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn setup(&self, ctr: &Netns, opts: &Value) -> Out {
        self.netavark(&["setup", &ctr.path.display().to_string()], opts)
    }

    fn teardown(&self, ctr: &Path, opts: &Value) -> Out {
        self.netavark(&["teardown", &ctr.display().to_string()], opts)
    }

    fn run_dir(&self) -> PathBuf {
        self.net.dir.path().join("run")
    }

    /// The node's veths.
    fn veths(&self) -> usize {
        let s = self.net.node.ip(&["-j", "link", "show", "type", "veth"]);
        serde_json::from_str::<Value>(&s)
            .map(|v| v.as_array().map_or(0, Vec::len))
            .unwrap_or(0)
    }

    /// Files below the state root and the run dir's `netavark/` (attachment
    /// records, plugin state, cached results).
    fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        // (Not the state root's registry of IPAM data dirs, `ipam-stores`,
        // which outlives attachments by design.)
        for d in [
            self.net.dir.path().join("state"),
            self.run_dir().join("netavark"),
        ] {
            walk(&d, &mut out);
        }
        out.retain(|p| !p.ends_with("/state/ipam-stores"));
        out
    }

    /// The node's links (name and kind), IPv4 addresses and IPv4 routes
    /// of every table: what a setup could leave. (Not the bridge's carrier
    /// or its IPv6 link-local address, which the kernel changes on its own
    /// time once its ports come and go.)
    fn state(&self) -> Value {
        let ip = |args: &[&str]| -> Value {
            serde_json::from_str(&self.net.node.ip(args)).expect("ip -j")
        };
        let links: Vec<Value> = ip(&["-d", "-j", "link", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| json!([l["ifname"], l["linkinfo"]["info_kind"]]))
            .collect();
        let addrs: Vec<Value> = ip(&["-j", "-4", "addr", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let local: Vec<Value> = a["addr_info"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| json!([i["local"], i["prefixlen"]]))
                    .collect();
                json!([a["ifname"], local])
            })
            .collect();
        let routes: Vec<Value> = ip(&["-j", "-4", "route", "show", "table", "all"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| json!([r["table"], r["type"], r["dst"], r["dev"], r["gateway"]]))
            .collect();
        json!({"links": links, "addrs": addrs, "routes": routes})
    }

    fn assert_clean(&self, what: &str) {
        assert_eq!(self.veths(), 0, "{what}: veths left on the node");
        assert_eq!(self.net.reservations(), Vec::<String>::new(), "{what}");
        assert_eq!(self.net.node.wasmcni_rules(), Vec::<Value>::new(), "{what}");
        assert_eq!(self.leftovers(), Vec::<String>::new(), "{what}");
    }
}

fn walk(d: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p.display().to_string());
        }
    }
}

/// Runs `args` in `ns`.
fn in_ns(ns: &Netns, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .args(args)
        .output()
        .expect("ip netns exec")
}

/// The address of eth0 in `ns`, and its MAC.
fn eth0(ns: &Netns) -> (String, String) {
    let s = ns.ip(&["-j", "-4", "addr", "show", "eth0"]);
    let v: Value = serde_json::from_str(&s).expect("ip -j");
    let a = &v[0]["addr_info"][0];
    let addr = format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]);
    let l: Value =
        serde_json::from_str(&ns.ip(&["-j", "link", "show", "eth0"])).expect("ip -j link");
    (addr, l[0]["address"].as_str().unwrap_or("").to_owned())
}

#[test]
fn netavark_runs_a_wasmcni_network_with_a_published_port_beside_its_own_bridge() {
    let _turn = turn();
    let node = Node::new(
        "nva",
        json!([{"type": "portmap", "capabilities": {"portMappings": true}},
               {"type": "tuning", "capabilities": {"mac": true}}]),
    );
    // `netavark create` hands the network to wasmcni, which checks it and
    // returns it.
    let created = node.netavark(
        &["create"],
        &json!({"network": node.wasmcni_network(),
                "used": {"interfaces": [], "names": {}, "subnets": []},
                "options": {"subnet_pools": [], "check_used_subnets": false}}),
    );
    assert_eq!(created.code, 0, "{created:?}");
    let network = created.json();
    assert_eq!(network["driver"], "wasmcni", "{created:?}");
    assert_eq!(network["options"]["conflist"], json!(node.conflist));

    let ctr = &node.net.ctr;
    let control = Netns::new("nvctl");
    let opts = Node::options(
        "ctr-a",
        &network,
        "10.61.0.50",
        json!([{"container_port": 80, "host_ip": "", "host_port": 18080, "protocol": "tcp", "range": 1}]),
    );
    let mut opts = opts;
    opts["networks"]["wnet"]["static_mac"] = json!("0a:58:0a:3d:00:32");
    let ctl_opts = Node::options("ctr-b", &Node::control_network(), "10.62.0.50", json!([]));
    let up = node.setup(ctr, &opts);
    assert_eq!(up.code, 0, "{up:?}");
    let ctl_up = node.setup(&control, &ctl_opts);
    assert_eq!(ctl_up.code, 0, "the control: {ctl_up:?}");

    // The status block: the address Podman assigned, the gateway, the MAC.
    let (addr, mac) = eth0(ctr);
    assert_eq!(addr, "10.61.0.50/24");
    assert_eq!(mac, "0a:58:0a:3d:00:32", "the static MAC, through tuning");
    assert_eq!(
        up.json()["wnet"],
        json!({"dns_search_domains": [], "dns_server_ips": [],
               "interfaces": {"eth0": {"mac_address": mac, "subnets": [
                   {"ipnet": "10.61.0.50/24", "gateway": "10.61.0.1"}]}}}),
        "{up:?}"
    );
    assert_eq!(eth0(&control).0, "10.62.0.50/24");
    for (ns, gw) in [(ctr, "10.61.0.1"), (&control, "10.62.0.1")] {
        let ping = in_ns(ns, &["ping", "-c", "1", "-W", "2", gw]);
        assert!(ping.status.success(), "{} reaches {gw}: {ping:?}", ns.name);
    }

    // The published port reaches a busybox httpd in the container.
    let www = node.net.dir.path().join("www");
    std::fs::create_dir_all(&www).expect("www");
    std::fs::write(www.join("index.html"), "through-netavark\n").expect("index");
    let mut httpd = Command::new("ip")
        .args([
            "netns", "exec", &ctr.name, "busybox", "httpd", "-f", "-p", "80", "-h",
        ])
        .arg(&www)
        .spawn()
        .expect("busybox httpd");
    let mut reply = String::new();
    let mut why = String::new();
    for _ in 0..50 {
        // (busybox's wget crashes on a refused connection: nc speaks the
        // request.)
        let o = in_ns(
            &node.net.node,
            &[
                "sh",
                "-c",
                "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 2 10.61.0.1 18080",
            ],
        );
        reply = String::from_utf8_lossy(&o.stdout).into_owned();
        why = String::from_utf8_lossy(&o.stderr).into_owned();
        if reply.starts_with("HTTP/1.1 200") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = httpd.kill();
    let _ = httpd.wait();
    assert!(
        reply.starts_with("HTTP/1.1 200") && reply.ends_with("\r\n\r\nthrough-netavark\n"),
        "{reply:?}: node port 18080: {why}\n{}",
        node.net.node.nft(&["list", "ruleset"])
    );

    // The audit log names the members' calls.
    let audit = std::fs::read_to_string(node.net.dir.path().join("audit.jsonl")).expect("audit");
    for p in ["bridge", "host-local", "portmap", "tuning"] {
        assert!(
            audit.contains(&format!("\"plugin\":\"{p}\"")),
            "no audit record of {p}"
        );
    }
    assert!(
        !node.leftovers().is_empty(),
        "setup keeps a record and its result"
    );

    let down = node.teardown(&ctr.path, &opts);
    assert_eq!((down.code, down.stdout.trim()), (0, ""), "{down:?}");
    let ctl_down = node.teardown(&control.path, &ctl_opts);
    assert_eq!(ctl_down.code, 0, "{ctl_down:?}");
    assert!(!node.net.has_eth0(), "eth0 left in the container");
    node.assert_clean("after teardown");
}

#[test]
fn ten_setups_and_teardowns_in_a_row_leave_the_node_as_the_first_did() {
    let _turn = turn();
    let node = Node::new(
        "nvb",
        json!([{"type": "portmap", "capabilities": {"portMappings": true}}]),
    );
    let network = node.wasmcni_network();
    let mut first = None;
    for i in 0..10 {
        let opts = Node::options(
            &format!("ctr-{i}"),
            &network,
            &format!("10.61.0.{}", 10 + i),
            json!([{"container_port": 80, "host_ip": "", "host_port": 18080, "protocol": "tcp,udp", "range": 2}]),
        );
        let up = node.setup(&node.net.ctr, &opts);
        assert_eq!(up.code, 0, "setup {i}: {up:?}");
        assert_eq!(eth0(&node.net.ctr).0, format!("10.61.0.{}/24", 10 + i));
        // Two ports, TCP and UDP: four DNAT rules while it is up.
        let ruleset = node.net.node.nft(&["list", "table", "inet", "wasmcni"]);
        let dnat = format!("dnat ip to 10.61.0.{}:", 10 + i);
        assert_eq!(ruleset.matches(&dnat).count(), 4, "setup {i}: {ruleset}");
        let down = node.teardown(&node.net.ctr.path, &opts);
        assert_eq!(down.code, 0, "teardown {i}: {down:?}");
        node.assert_clean(&format!("after teardown {i}"));
        let snap = node.state();
        match &first {
            None => first = Some(snap),
            Some(f) => support::assert_same(f, &snap, &format!("the node after teardown {i}")),
        }
    }
}

#[test]
fn a_failing_chain_leaves_nothing_and_netavark_names_the_member() {
    let _turn = turn();
    let node = Node::new(
        "nvc",
        json!([{"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.no_such_setting": "1"}}]),
    );
    let before = node.net.node.snapshot();
    let opts = Node::options("ctr-f", &node.wasmcni_network(), "10.61.0.7", json!([]));
    let up = node.setup(&node.net.ctr, &opts);
    assert_eq!(up.code, 1, "{up:?}");
    let err = up.json()["error"].as_str().unwrap_or("").to_owned();
    for needle in [
        "plugin \"wasmcni\" failed",
        "plugins[1] (tuning) failed",
        "no_such_setting",
    ] {
        assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    }
    assert!(
        up.stderr.contains("the whole chain is undone"),
        "wasmcni's stderr reaches netavark's: {up:?}"
    );
    assert!(!node.net.has_eth0(), "eth0 left in the container");
    node.assert_clean("after the failed setup");
    // The bridge the failed ADD made is undone too: the node is as before.
    support::assert_same(&before, &node.net.node.snapshot(), "the node");
}

#[test]
fn create_refuses_a_network_wasmcni_could_not_run() {
    let _turn = turn();
    let node = Node::new("nvd", json!([{"type": "no-such-plugin"}]));
    let create = |network: Value| {
        node.netavark(
            &["create"],
            &json!({"network": network,
                    "used": {"interfaces": [], "names": {}, "subnets": []},
                    "options": {"subnet_pools": [], "check_used_subnets": false}}),
        )
    };
    let mut no_list = node.wasmcni_network();
    no_list["options"] = json!({});
    let mut no_ips = node.wasmcni_network();
    no_ips["options"] = json!({"conflist-json": json!({"cniVersion": "1.0.0", "name": "x",
        "plugins": [{"type": "bridge"}]}).to_string()});
    for (network, needle) in [
        (node.wasmcni_network(), "plugins[1].type \"no-such-plugin\""),
        (no_list, "set option \"conflist\""),
        (no_ips, "declares the \"ips\" capability"),
    ] {
        let out = create(network);
        assert_eq!(out.code, 1, "{out:?}");
        let err = out.json()["error"].as_str().unwrap_or("").to_owned();
        assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    }
    assert_eq!(node.leftovers(), Vec::<String>::new());
}

#[test]
fn teardown_completes_with_the_namespace_gone_or_the_conflist_removed() {
    let _turn = turn();
    let node = Node::new(
        "nve",
        json!([{"type": "portmap", "capabilities": {"portMappings": true}}]),
    );
    let network = node.wasmcni_network();
    let ports = json!([{"container_port": 80, "host_ip": "", "host_port": 18081, "protocol": "tcp", "range": 1}]);
    // The namespace deleted before teardown.
    let gone = Netns::new("nvgone");
    let opts = Node::options("ctr-g", &network, "10.61.0.20", ports.clone());
    assert_eq!(node.setup(&gone, &opts).code, 0);
    let path = gone.path.clone();
    drop(gone);
    let down = node.teardown(&path, &opts);
    assert_eq!(down.code, 0, "{down:?}");
    // The node's end of the veth goes with the namespace, as with the
    // reference bridge: the kernel deletes the pair when it destroys the
    // namespace, in a work queue, a moment after `ip netns del` returned
    // (a run failed on it under load).
    support::wait_until(
        "the kernel to delete the gone namespace's veth pair",
        std::time::Duration::from_secs(10),
        || node.veths() == 0,
    );
    node.assert_clean("teardown with the namespace gone");
    // The conflist removed after setup: the list the setup ran is used.
    let opts = Node::options("ctr-h", &network, "10.61.0.21", ports.clone());
    assert_eq!(node.setup(&node.net.ctr, &opts).code, 0);
    std::fs::remove_file(&node.conflist).expect("rm conflist");
    let down = node.teardown(&node.net.ctr.path, &opts);
    assert_eq!(down.code, 0, "{down:?}");
    assert!(!node.net.has_eth0());
    node.assert_clean("teardown with the conflist removed");
    // The conflist renamed its network since the setup: the teardown is
    // the setup's network's.
    node.write_conflist(json!([{"type": "portmap", "capabilities": {"portMappings": true}}]));
    let opts = Node::options("ctr-j", &network, "10.61.0.22", ports.clone());
    assert_eq!(node.setup(&node.net.ctr, &opts).code, 0);
    let text = std::fs::read_to_string(&node.conflist).expect("conflist");
    std::fs::write(&node.conflist, text.replace("\"devnet\"", "\"renamed\"")).expect("rename");
    let down = node.teardown(&node.net.ctr.path, &opts);
    assert_eq!(down.code, 0, "{down:?}");
    node.assert_clean("teardown with the network renamed");
    // The conflist removed and the kept result gone too (a reboot empties
    // the run dir): no list to run, as for libcni without the config. The
    // host tears down what the setup's records hold (the container's link,
    // the reservation, the rules), and says what only the list's DEL could
    // take back (bridge's changes to the shared bridge).
    node.write_conflist(json!([{"type": "portmap", "capabilities": {"portMappings": true}}]));
    let opts = Node::options("ctr-l", &network, "10.61.0.24", ports.clone());
    assert_eq!(node.setup(&node.net.ctr, &opts).code, 0);
    std::fs::remove_file(&node.conflist).expect("rm conflist");
    std::fs::remove_dir_all(node.run_dir().join("netavark")).expect("rm kept results");
    let down = node.teardown(&node.net.ctr.path, &opts);
    assert_eq!(down.code, 1, "{down:?}");
    assert!(
        down.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("the records of network \"devnet\"")
                && e.contains("only the plugin's DEL takes back")),
        "{down:?}"
    );
    assert!(!node.net.has_eth0());
    assert_eq!(node.veths(), 0);
    assert_eq!(node.net.reservations(), Vec::<String>::new());
    assert_eq!(node.net.node.wasmcni_rules(), Vec::<Value>::new());
    // The list back: the teardown completes, and leaves nothing.
    node.write_conflist(json!([{"type": "portmap", "capabilities": {"portMappings": true}}]));
    let down = node.teardown(&node.net.ctr.path, &opts);
    assert_eq!(down.code, 0, "{down:?}");
    node.assert_clean("teardown once the conflist is back");
    // The list inline (conflist-json), set up and torn down.
    node.write_conflist(json!([{"type": "portmap", "capabilities": {"portMappings": true}}]));
    let mut inline = network.clone();
    inline["options"] =
        json!({"conflist-json": std::fs::read_to_string(&node.conflist).expect("conflist")});
    let opts = Node::options("ctr-k", &inline, "10.61.0.23", ports);
    let up = node.setup(&node.net.ctr, &opts);
    assert_eq!(up.code, 0, "{up:?}");
    assert_eq!(eth0(&node.net.ctr).0, "10.61.0.23/24");
    let down = node.teardown(&node.net.ctr.path, &opts);
    assert_eq!(down.code, 0, "{down:?}");
    node.assert_clean("teardown of an inline list");
}

#[test]
fn install_makes_a_netavark_plugin_directory_that_answers_info() {
    let _turn = turn();
    support::require_root();
    let dir = support::private_tempdir();
    let plugins = dir.path().join("netavark-plugins");
    // As docs/podman-netavark.md says: the executable alone, its plugins
    // precompiled beside it; a setup through it compiles nothing.
    let only = dir.path().join("only-wasmcni");
    std::fs::create_dir_all(&only).expect("dir");
    std::fs::copy(support::wasmcni(), only.join("wasmcni")).expect("copy");
    let pre = Command::new(only.join("wasmcni"))
        .arg("precompile")
        .output()
        .expect("wasmcni precompile");
    assert!(pre.status.success(), "{pre:?}");
    let cache = || {
        let mut v: Vec<String> = std::fs::read_dir(only.join(".wasmcni-cache"))
            .expect("the cache beside it")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            // (Artifacts; a first load stamps one it checked, `.ok`.)
            .filter(|n| n.ends_with(".cwasm"))
            .collect();
        v.sort();
        v
    };
    let before = cache();
    assert!(!before.is_empty());
    let node = Node::new(
        "nvi",
        json!([{"type": "portmap", "capabilities": {"portMappings": true}}]),
    );
    let opts = Node::options("ctr-i", &node.wasmcni_network(), "10.61.0.9", json!([]));
    let up = node.netavark_in(
        &only,
        &["setup", &node.net.ctr.path.display().to_string()],
        &opts,
    );
    assert_eq!(up.code, 0, "{up:?}");
    let down = node.netavark_in(
        &only,
        &["teardown", &node.net.ctr.path.display().to_string()],
        &opts,
    );
    assert_eq!(down.code, 0, "{down:?}");
    assert_eq!(cache(), before, "a setup compiled a plugin");
    node.assert_clean("after teardown");
    // Only the chain runner: the directory is netavark's, not a CNI bin dir.
    let out = Command::new(support::wasmcni())
        .arg("install")
        .arg(&plugins)
        .args(["--only", "wasmcni-chain"])
        .output()
        .expect("wasmcni install");
    assert!(out.status.success(), "{out:?}");
    let info = Command::new(plugins.join("wasmcni"))
        .arg("info")
        .stdin(Stdio::null())
        .output()
        .expect("wasmcni info");
    assert!(info.status.success(), "{info:?}");
    let v: Value = serde_json::from_slice(&info.stdout).expect("info is JSON");
    assert_eq!(v["api_version"], "1.0.0");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    // A bad input is netavark's error JSON, naming what is wrong.
    let mut child = Command::new(plugins.join("wasmcni"))
        .args(["setup", "/run/netns/none"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("wasmcni setup");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(br#"{"container_id": "c"}"#).expect("stdin");
    }
    let out = child.wait_with_output().expect("wasmcni setup");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("error JSON");
    let err = v["error"].as_str().unwrap_or("");
    assert!(err.contains("missing field `network`"), "{err}");
    // Without the namespace argument: the error JSON, not a usage text.
    let out = Command::new(plugins.join("wasmcni"))
        .arg("setup")
        .stdin(Stdio::null())
        .output()
        .expect("wasmcni setup");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("error JSON");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("namespace path argument is missing")),
        "{v}"
    );
}

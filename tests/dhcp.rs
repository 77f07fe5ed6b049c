//! The `dhcp` plugin and its daemon against a real DHCP server (Debian's
//! dnsmasq) through the real libcni: a server namespace running dnsmasq
//! on one end of a veth pair, the node namespace holding the other end as
//! the macvlan master, the container namespace, and `wasmcni
//! dhcp-daemon` in the node namespace with its own socket and state
//! directory (never the node's /run/wasmcni or /var/lib/wasmcni).
//!
//! macvlan + dhcp: ADD gets a lease the server's lease file shows, a short
//! T1 makes the daemon renew it (the file's expiry moves), a daemon
//! killed and started again resumes it (and renews it again), CHECK reads
//! it, DEL releases it (gone from the server's file and the daemon's
//! state); a server that never answers fails the ADD with a clear error in
//! bounded time, leaving nothing; a `daemonSocketPath` other than the
//! granted one is refused; a namespace the runtime removes without a DEL
//! has its lease released; STATUS is 50 while no daemon listens; a rogue
//! server's lease is not the attachment's own address (no host route to
//! it takes the node's LAN route).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::net::Net;
use support::world::{policy_with, wide, World};
use support::{wait_until, Netns};

/// A process killed (and reaped) on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A DHCP server's LAN: a server namespace linked to a node namespace by
/// a veth pair (`dsrv` there, with `server`; `dup0` in the node, up), its
/// files (lease file, logs) in `dir`.
struct Lan {
    srv: Netns,
    dir: PathBuf,
    leases: PathBuf,
}

impl Lan {
    fn new(tag: &str, node: &Netns, dir: &Path, server: &str) -> Lan {
        assert!(
            Command::new("dnsmasq")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "this test needs dnsmasq (apt-get install dnsmasq-base; `make setup` installs it)"
        );
        let srv = Netns::new(&format!("{tag}s"));
        let st = Command::new("ip")
            .args([
                "-n", &srv.name, "link", "add", "dsrv", "type", "veth", "peer", "name", "dup0",
                "netns", &node.name,
            ])
            .status()
            .expect("ip link add");
        assert!(st.success(), "veth pair");
        srv.ip(&["addr", "add", server, "dev", "dsrv"]);
        srv.ip(&["link", "set", "dsrv", "up"]);
        srv.ip(&["link", "set", "lo", "up"]);
        node.ip(&["link", "set", "dup0", "up"]);
        Lan {
            srv,
            dir: dir.to_owned(),
            leases: dir.join("dnsmasq.leases"),
        }
    }

    /// dnsmasq on `dsrv`, leasing from `range` (dnsmasq's `--dhcp-range`;
    /// 2 minutes is its least lease time), renewal after 2 s and
    /// rebinding after 4 s.
    fn dnsmasq(&self, range: &str) -> Killed {
        let dir = &self.dir;
        let child = self
            .srv
            .command("dnsmasq")
            .arg("--conf-file=/dev/null")
            .arg("--keep-in-foreground")
            .args([
                "--no-resolv",
                "--no-hosts",
                "--port=0",
                "--no-ping",
                "--bind-interfaces",
            ])
            .args(["--interface=dsrv", "--dhcp-authoritative", "-u", "root"])
            .arg(format!("--dhcp-range={range}"))
            .arg("--dhcp-option=option:T1,2")
            .arg("--dhcp-option=option:T2,4")
            .arg(format!("--dhcp-leasefile={}", self.leases.display()))
            .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
            .arg(format!(
                "--log-facility={}",
                dir.join("dnsmasq.log").display()
            ))
            .arg("--log-dhcp")
            .stdin(Stdio::null())
            .spawn()
            .expect("dnsmasq");
        let k = Killed(child);
        wait_until("dnsmasq's log", Duration::from_secs(10), || {
            std::fs::read_to_string(dir.join("dnsmasq.log"))
                .is_ok_and(|l| l.contains("DHCP, sockets bound"))
        });
        k
    }

    /// `wasmcni dhcp-daemon` in `node`, listening on `socket`, its state
    /// in `state`, its log in `dir`/daemon.log.
    fn daemon(&self, node: &Netns, socket: &Path, state: &Path) -> Killed {
        let _ = std::fs::remove_file(socket);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .expect("log");
        let child = node
            .command(support::wasmcni())
            .args([
                "dhcp-daemon",
                "--timeout",
                "3",
                "--check-interval",
                "1",
                "--socket",
            ])
            .arg(socket)
            .arg("--state-dir")
            .arg(state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("daemon");
        let k = Killed(child);
        wait_until("the daemon's socket", Duration::from_secs(10), || {
            std::os::unix::net::UnixStream::connect(socket).is_ok()
        });
        k
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// The server's lease of `ip`: its expiry (seconds since the epoch).
    fn server_lease(&self, ip: &str) -> Option<u64> {
        let text = std::fs::read_to_string(&self.leases).unwrap_or_default();
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&ip)).then(|| f[0].parse().unwrap_or(0))
        })
    }
}

/// The sandbox: the LAN of 10.77.0.0/24 (the server 10.77.0.1) with
/// `dup0` as the macvlan master, the policy granting `dhcp` the test's
/// own daemon socket.
struct Sandbox {
    net: Net,
    lan: Lan,
    socket: PathBuf,
    state: PathBuf,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let net = Net::new(tag);
        let dir = net.dir.path().to_owned();
        let lan = Lan::new(tag, &net.node, &dir, "10.77.0.1/24");
        let socket = dir.join("dhcp.sock");
        // The bundled entry, with the test's socket.
        std::fs::write(
            dir.join("policy.json"),
            json!({"plugins": {"dhcp": {
                "dhcp": {"socket": socket},
                "container": {"read": true, "modify": true}
            }}})
            .to_string(),
        )
        .expect("policy");
        Sandbox {
            lan,
            socket,
            state: dir.join("dhcp-state"),
            net,
        }
    }

    fn dnsmasq(&self) -> Killed {
        self.lan.dnsmasq("10.77.0.50,10.77.0.99,255.255.255.0,2m")
    }

    fn daemon(&self) -> Killed {
        self.lan.daemon(&self.net.node, &self.socket, &self.state)
    }

    fn log(&self, name: &str) -> String {
        self.lan.log(name)
    }

    fn server_lease(&self, ip: &str) -> Option<u64> {
        self.lan.server_lease(ip)
    }

    fn conflist(&self, ipam: Value) -> PathBuf {
        self.net.conflist(
            "1.0.0",
            &json!({"type": "macvlan", "master": "dup0", "ipam": ipam}),
        )
    }

    fn call(&self, cmd: &str, conflist: &Path) -> support::cni::Drive {
        self.net.call(cmd, conflist, &self.net.ctr.path, "", "")
    }

    /// STATUS of macvlan with `ipam`, as libcni 1.2+ invokes it (Debian's
    /// libcni 1.1.2 has no STATUS): macvlan asks its IPAM.
    fn status(&self, ipam: Value) -> support::Run {
        let conf = json!({"cniVersion": "1.1.0", "name": "devnet", "type": "macvlan",
                          "master": "dup0", "ipam": ipam})
        .to_string();
        let bin = support::cni::bin_dir();
        let mut inv = support::Invoke::exe(bin.join("macvlan"), conf.as_bytes())
            .env("CNI_COMMAND", "STATUS")
            .env("CNI_PATH", bin.display().to_string());
        for (k, v) in &self.net.env {
            inv = inv.env(k, v);
        }
        inv.in_netns(&self.net.node).run()
    }

    /// The daemon's kept leases.
    fn kept(&self) -> Vec<String> {
        kept(&self.state)
    }
}

/// The leases a daemon keeps in `state`.
fn kept(state: &Path) -> Vec<String> {
    std::fs::read_dir(state)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn macvlan_dhcp_through_libcni_renews_releases_and_survives_a_daemon_restart() {
    let s = Sandbox::new("dhcp");
    let _server = s.dnsmasq();
    let mut daemon = s.daemon();
    let conflist = s.conflist(json!({"type": "dhcp", "request": [{"option": "121"}]}));

    let add = s.call("add", &conflist);
    assert_eq!(
        add.code,
        0,
        "ADD: {add:?}\n{}\n{}",
        s.log("daemon.log"),
        s.log("dnsmasq.log")
    );
    let result = add.json();
    let cidr = result["ips"][0]["address"]
        .as_str()
        .expect("an address")
        .to_owned();
    let ip = cidr.split('/').next().expect("ip").to_owned();
    assert!(
        cidr.starts_with("10.77.0.") && cidr.ends_with("/24"),
        "{result}"
    );
    assert_eq!(result["ips"][0]["gateway"], "10.77.0.1", "{result}");
    assert_eq!(
        result["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.77.0.1"}]),
        "the router's default route (dnsmasq sends no option 121): {result}"
    );
    assert_eq!(s.net.eth0_v4(), vec![cidr.clone()], "the address on eth0");
    let first = s
        .server_lease(&ip)
        .unwrap_or_else(|| panic!("no lease of {ip}: {}", s.log("dnsmasq.log")));
    assert_eq!(s.kept().len(), 1, "the daemon keeps the lease");
    // The client identifier is the reference's (container/network/ifname).
    // dnsmasq writes its log behind its lease file.
    wait_until("dnsmasq's log of it", Duration::from_secs(5), || {
        s.log("dnsmasq.log").contains("DHCPACK(dsrv)")
    });

    // T1 is 2 s: the daemon renews, the server's expiry moves.
    let mut renewed = 0;
    wait_until("a renewal", Duration::from_secs(15), || {
        renewed = s.server_lease(&ip).unwrap_or(0);
        renewed > first
    });
    // The server wrote its file before the daemon read the ACK.
    wait_until("the daemon's renewal", Duration::from_secs(5), || {
        s.log("daemon.log").contains("renewed")
    });

    // The daemon is killed and started again: it resumes the lease from
    // its state directory and keeps renewing it.
    drop(std::mem::replace(
        &mut daemon,
        Killed(Command::new("true").spawn().expect("true")),
    ));
    daemon = s.daemon();
    wait_until(
        "a renewal after the restart",
        Duration::from_secs(15),
        || s.server_lease(&ip).unwrap_or(0) > renewed,
    );
    assert!(
        s.log("daemon.log").contains("resuming the lease"),
        "{}",
        s.log("daemon.log")
    );
    let check = s.call("check", &conflist);
    assert_eq!(check.code, 0, "CHECK after the restart: {check:?}");

    // DEL releases it: the server's lease file no longer has it.
    let del = s.call("del", &conflist);
    assert_eq!(del.code, 0, "DEL: {del:?}");
    wait_until("the server's lease gone", Duration::from_secs(5), || {
        s.server_lease(&ip).is_none()
    });
    // dnsmasq writes its log behind its lease file.
    wait_until("dnsmasq's log of it", Duration::from_secs(5), || {
        s.log("dnsmasq.log").contains("DHCPRELEASE(dsrv)")
    });
    assert!(s.kept().is_empty(), "daemon state left: {:?}", s.kept());
    assert!(!s.net.has_eth0(), "eth0 left after DEL");
    let again = s.call("del", &conflist);
    assert_eq!(again.code, 0, "DEL again: {again:?}");
    drop(daemon);
}

#[test]
fn a_server_that_never_answers_fails_in_bounded_time_leaving_nothing() {
    // No dnsmasq: nothing answers on the link.
    let s = Sandbox::new("dhcpq");
    let daemon = s.daemon();
    let before = s.net.ctr.snapshot();
    let conflist = s.conflist(json!({"type": "dhcp"}));
    // Made once per binary, outside the time measured.
    support::cni::driver();
    support::cni::bin_dir();
    let start = Instant::now();
    let add = s.call("add", &conflist);
    let took = start.elapsed();
    assert_ne!(add.code, 0, "ADD with no server succeeded: {add:?}");
    let err = add
        .cni_error()
        .unwrap_or_else(|| panic!("no CNI error: {add:?}"));
    let msg = err["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("no DHCP offer from any server on eth0 within 3."),
        "not a clear error: {err}"
    );
    // The daemon's --timeout is 3 s; libcni, the plugin's start and its
    // undo on top (under a loaded CI machine: generously).
    assert!(took < Duration::from_secs(12), "ADD took {took:?}");
    assert!(!s.net.has_eth0(), "eth0 left after the failed ADD");
    support::assert_same(
        &before,
        &s.net.ctr.snapshot(),
        "container after the failed ADD",
    );
    assert!(s.kept().is_empty(), "daemon state left: {:?}", s.kept());
    let del = s.call("del", &conflist);
    assert_eq!(del.code, 0, "DEL after the failed ADD: {del:?}");

    // A daemonSocketPath other than the granted socket is refused.
    let other = s.conflist(json!({"type": "dhcp", "daemonSocketPath": "/run/cni/dhcp.sock"}));
    let add = s.call("add", &other);
    assert_ne!(add.code, 0, "ADD with another socket succeeded: {add:?}");
    assert!(
        add.stderr.contains("daemonSocketPath") && add.stderr.contains("plugins.dhcp.dhcp"),
        "{add:?}"
    );
    assert!(!s.net.has_eth0(), "eth0 left after the refused ADD");
    assert!(s.kept().is_empty(), "daemon state left: {:?}", s.kept());

    // STATUS (the spec after 1.1.0): ready while a daemon listens (a
    // server need not answer); not ready (50) once none does.
    let st = s.status(json!({"type": "dhcp"}));
    assert_eq!(st.code, 0, "STATUS with the daemon listening: {st:?}");
    drop(daemon);
    s.status(json!({"type": "dhcp"}))
        .assert_cni_error(50, "the DHCP daemon is not running");
    // A socket not granted is refused, not merely "not running".
    let st = s.status(json!({"type": "dhcp", "daemonSocketPath": "/run/cni/dhcp.sock"}));
    assert_ne!(st.code, 0, "{st:?}");
    assert!(st.stderr.contains("daemonSocketPath"), "{st:?}");
}

/// The runtime removes the container's namespace without a DEL: the
/// daemon, which sees the path no longer name the namespace it was
/// handed, releases the lease and lets the namespace go (it keeps no
/// container's namespace alive).
#[test]
fn a_namespace_removed_without_del_has_its_lease_released() {
    let s = Sandbox::new("dhcpg");
    let _server = s.dnsmasq();
    let _daemon = s.daemon();
    let conflist = s.conflist(json!({"type": "dhcp"}));
    let add = s.call("add", &conflist);
    assert_eq!(add.code, 0, "ADD: {add:?}\n{}", s.log("daemon.log"));
    let cidr = add.json()["ips"][0]["address"]
        .as_str()
        .expect("an address")
        .to_owned();
    let ip = cidr.split('/').next().expect("ip").to_owned();
    assert!(s.server_lease(&ip).is_some(), "{}", s.log("dnsmasq.log"));
    let st = Command::new("ip")
        .args(["netns", "del", &s.net.ctr.name])
        .status()
        .expect("ip netns del");
    assert!(st.success());
    // --check-interval is 1 s.
    wait_until("the lease released", Duration::from_secs(10), || {
        s.server_lease(&ip).is_none()
    });
    wait_until("the daemon's word of it", Duration::from_secs(5), || {
        s.log("daemon.log").contains("gone: released")
    });
    assert!(s.kept().is_empty(), "daemon state left: {:?}", s.kept());
}

/// S13, the review of dhcp: whatever answers DHCP on the container's link
/// chooses the lease's address, so it is not the attachment's own. A
/// rogue server leases the container an address of the node's LAN
/// (10.79.0.60, inside the node's connected 10.79.0.0/24 on `dup0`). A
/// host route to it through the plugin's own veth, a /32 that an owned
/// address would allow (ptp's host route to its container), is refused:
/// it would take the node's traffic for that LAN host. (With the lease's
/// address owned, as first built, the route went in.)
#[test]
fn a_rogue_servers_lease_is_not_the_attachments_own_address() {
    let world = World::new("dhcpo");
    let dir = world.dir.path().to_owned();
    let lan = Lan::new("dhcpo", &world.node, &dir, "10.79.0.1/24");
    world
        .node
        .ip(&["addr", "add", "10.79.0.2/24", "dev", "dup0"]);
    // The container's link on the LAN, as an interface plugin made it.
    world.node.ip(&[
        "link", "add", "link", "dup0", "name", "dhmv0", "type", "macvlan", "mode", "bridge",
    ]);
    world
        .node
        .ip(&["link", "set", "dhmv0", "netns", &world.ctr.name]);
    world
        .ctr
        .ip(&["link", "set", "dhmv0", "name", "eth0", "up"]);
    let _server = lan.dnsmasq("10.79.0.60,10.79.0.60,255.255.255.0,2m");
    let (socket, state) = (dir.join("dhcp.sock"), dir.join("dhcp-state"));
    let _daemon = lan.daemon(&world.node, &socket, &state);
    let mut entry = wide();
    entry["dhcp"] = json!({"socket": socket});
    let policy = policy_with(entry);
    let route = json!({"call": "route.add", "ns": "host", "destination": "10.79.0.60/32",
                       "link": "cnitestv0"});
    let add = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "dhcp.acquire", "timeout-ms": 5000},
        {"call": "link.create-veth", "ns": "host", "name": "cnitestv0",
         "peer-ns": "container", "peer-name": "veth1"},
        {"call": "link.set-up", "ns": "host", "link": "cnitestv0", "up": true},
        route]});
    let run = world.run("ADD", &policy, &add, &[]);
    assert_eq!(run.code, 0, "{run:?}\n{}", lan.log("daemon.log"));
    let r = run.json()["results"].clone();
    assert_eq!(
        r[0]["ok"],
        "10.79.0.60/24",
        "the rogue server's lease: {r}\n{}\n{}",
        lan.log("daemon.log"),
        lan.log("dnsmasq.log")
    );
    assert!(r[1].get("ok").is_some() && r[2].get("ok").is_some(), "{r}");
    assert_eq!(
        r[3]["error"], "access-denied",
        "a host route to the lease: {r}"
    );
    let why = "host route to 10.79.0.60/32 is more specific than the node's route to 10.79.0.0/24";
    assert!(
        world
            .audit()
            .iter()
            .any(|a| a["outcome"] == "denied"
                && a["reason"].as_str().is_some_and(|x| x.contains(why))),
        "no denial saying {why:?} in {:#?}",
        world.audit()
    );
    let routes = world.node.ip(&["route", "show", "10.79.0.60/32"]);
    assert!(!routes.contains("cnitestv0"), "the route went in: {routes}");
    // The plugin's DEL gives the lease back.
    let del = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted",
                     "ops": [{"call": "dhcp.release"}]});
    let run = world.run("DEL", &policy, &del, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.json()["results"][0].get("ok").is_some(), "{run:?}");
    wait_until("the lease released", Duration::from_secs(5), || {
        lan.server_lease("10.79.0.60").is_none()
    });
    assert!(
        kept(&state).is_empty(),
        "daemon state left: {:?}",
        kept(&state)
    );
}

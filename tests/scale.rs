//! ADD and DEL cost what their own attachment needs, not what the node
//! holds (issue 26): a bridge + host-local ADD and DEL are traced with
//! strace on a network of 10 attachments and again on one of 200, and
//!
//! - the netlink dump requests (`NLM_F_DUMP`) they send are the same
//!   number, of the same kinds;
//! - the bytes the kernel answers on netlink do not grow with the node
//!   (a dump of every link, port or address would: ~1 KiB per link);
//! - the attachment records and other files they open, and the
//!   directory reads they make, do not grow with the number of
//!   attachments.
//!
//! - host-local's reservation files opened do not grow either: ADD (the
//!   duplicate-address check) and DEL (release by owner) read their own
//!   attachment's, through the network's owner index, where the
//!   reference's `GetByID` reads every file of the network.
//!
//! Counts, not timings: the same on a loaded machine.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use support::net::Net;
use support::{Invoke, Netns};

/// What one traced call did, from strace's log.
#[derive(Debug, Default, PartialEq)]
struct Trace {
    /// Netlink dump requests, by message type (`RTM_GETLINK`, ...).
    dumps: BTreeMap<String, usize>,
    /// Netlink requests in all.
    requests: usize,
    /// Requests for one link (`RTM_GETLINK` without `NLM_F_DUMP`).
    link_reads: usize,
    /// Bytes received on netlink sockets.
    received: usize,
    /// Files opened under the state root (attachment records).
    state_opens: usize,
    /// Files opened under the IPAM data dir (reservations).
    ipam_opens: usize,
    /// Other files opened.
    opens: usize,
    /// Directory reads (`getdents64` calls) under the state root.
    state_dir_reads: usize,
    /// Directory reads under the IPAM data dir.
    ipam_dir_reads: usize,
    /// Other directory reads.
    dir_reads: usize,
    /// Lookups of a directory below `/proc/sys/net` from its top (an open
    /// of `/proc/sys/net/...`): the kernel compares one entry per network
    /// namespace on the node for each.
    proc_sys_net: usize,
}

/// The network: bridge + host-local on a /16, on a node ([`Net`]: its
/// own policy, IPAM data dir, audit log and state root).
struct Network {
    net: Net,
    conf: Vec<u8>,
    ctrs: Vec<Netns>,
}

impl Network {
    fn new() -> Network {
        let net = Net::new("scale");
        let conf = json!({"cniVersion": "1.0.0", "name": "scalenet", "type": "bridge",
            "bridge": "cniscale0", "isGateway": true,
            "ipam": {"type": "host-local", "subnet": "10.60.0.0/16", "dataDir": net.data()}})
        .to_string()
        .into_bytes();
        Network {
            net,
            conf,
            ctrs: Vec::new(),
        }
    }

    /// `wasmcni run bridge` for `command` of container `cid` (in `ctr`),
    /// in the node, with this network's policy, audit log and state root;
    /// `wrap`: a command to run it under (strace).
    fn invoke(&self, command: &str, cid: &str, ctr: &Path, wrap: &[String]) -> support::Run {
        let exe = support::wasmcni();
        let mut inv = if wrap.is_empty() {
            Invoke::exe(&exe, &self.conf).arg("run").arg("bridge")
        } else {
            let mut i = Invoke::exe(&wrap[0], &self.conf);
            for a in &wrap[1..] {
                i = i.arg(a);
            }
            i.arg(exe.display().to_string()).arg("run").arg("bridge")
        };
        inv = inv
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", ctr.display().to_string())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", support::REFERENCE_DIR)
            .env(
                "WASMCNI_CACHE_DIR",
                support::cache_dir().display().to_string(),
            );
        for (k, v) in &self.net.env {
            inv = inv.env(k, v);
        }
        inv.in_netns(&self.net.node).run()
    }

    /// ADDs containers until the network has `n`.
    fn fill(&mut self, n: usize) {
        while self.ctrs.len() < n {
            let ctr = Netns::new("scale-c");
            let cid = format!("fill{}", self.ctrs.len());
            let run = self.invoke("ADD", &cid, &ctr.path, &[]);
            assert_eq!(run.code, 0, "ADD {cid}: {run:?}");
            self.ctrs.push(ctr);
        }
    }

    /// ADD then DEL of one more container, each traced.
    fn trace_add_del(&self, cid: &str) -> (Trace, Trace) {
        let ctr = Netns::new("scale-p");
        let out = |what: &str| self.net.dir.path().join(format!("{cid}.{what}.strace"));
        // `-ff`: one log per process (a call is never split in two lines
        // by another process's), each `<log>.<pid>`.
        let wrap = |log: &PathBuf| -> Vec<String> {
            [
                "strace",
                "-ff",
                "-qq",
                "-yy",
                "-X",
                "raw",
                "-e",
                "trace=sendto,sendmsg,recvfrom,recvmsg,openat,openat2,open,getdents64",
                "-e",
                "signal=none",
                "-o",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([log.display().to_string()])
            .collect()
        };
        let (add_log, del_log) = (out("add"), out("del"));
        let add = self.invoke("ADD", cid, &ctr.path, &wrap(&add_log));
        assert_eq!(add.code, 0, "traced ADD {cid}: {add:?}");
        let del = self.invoke("DEL", cid, &ctr.path, &wrap(&del_log));
        assert_eq!(del.code, 0, "traced DEL {cid}: {del:?}");
        let (state, data) = (self.net.dir.path().join("state"), self.net.data());
        (
            parse(&add_log, &state, &data),
            parse(&del_log, &state, &data),
        )
    }
}

/// Reads the strace logs `<log>.<pid>` (`-X raw`: flags and types as
/// numbers, which differ less between strace versions than their names);
/// a file is the state root's if its path (the argument, or with `-yy`
/// the directory descriptor it is opened below) is below `state`, the
/// IPAM data dir's if below `data`.
fn parse(log: &Path, state: &Path, data: &Path) -> Trace {
    const NLM_F_DUMP: u64 = 0x300;
    const RTM_GETLINK: &str = "0x12";
    let (dir, stem) = (
        log.parent().unwrap(),
        log.file_name().unwrap().to_str().unwrap(),
    );
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.strip_prefix(stem).is_some_and(|r| r.starts_with('.')) {
            text.push_str(&std::fs::read_to_string(e.path()).unwrap());
        }
    }
    let (state, data) = (
        format!("{}/", state.display()),
        format!("{}/", data.display()),
    );
    // Below it, or it itself: as a descriptor (`<DIR>`) or a path (`"DIR"`).
    let below = |rest: &str, dir: &str| {
        let bare = dir.trim_end_matches('/');
        rest.contains(dir)
            || rest.contains(&format!("{bare}>"))
            || rest.contains(&format!("{bare}\""))
    };
    let mut t = Trace::default();
    let mut flags_read = 0;
    for line in text.lines() {
        let Some((call, rest)) = line.split_once('(') else {
            continue;
        };
        // Without a pid column (`-ff`); an unfinished call has no result.
        let call = call.trim();
        let ret: Option<usize> = rest
            .rsplit_once(" = ")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok());
        let netlink = rest.contains("NETLINK");
        if matches!(call, "openat" | "openat2" | "open") && rest.contains("\"/proc/sys/net/") {
            t.proc_sys_net += 1;
        }
        match call {
            "sendto" | "sendmsg" if netlink => {
                // Each message header of the request.
                for hdr in rest.split("nlmsg_type=").skip(1) {
                    t.requests += 1;
                    let ty = hdr.split([',', '}']).next().unwrap_or("").to_owned();
                    let Some(flags) = hdr
                        .split_once("nlmsg_flags=")
                        .and_then(|(_, f)| f.split([',', '}']).next())
                        .and_then(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
                    else {
                        continue;
                    };
                    flags_read += 1;
                    if flags & NLM_F_DUMP == NLM_F_DUMP {
                        *t.dumps.entry(ty).or_default() += 1;
                    } else if ty == RTM_GETLINK {
                        t.link_reads += 1;
                    }
                }
            }
            "recvfrom" | "recvmsg" if netlink => t.received += ret.unwrap_or(0),
            "openat" | "openat2" | "open" if below(rest, &state) => t.state_opens += 1,
            "openat" | "openat2" | "open" if below(rest, &data) => t.ipam_opens += 1,
            "openat" | "openat2" | "open" => t.opens += 1,
            "getdents64" if below(rest, &state) => t.state_dir_reads += 1,
            "getdents64" if below(rest, &data) => t.ipam_dir_reads += 1,
            "getdents64" => t.dir_reads += 1,
            _ => {}
        }
    }
    assert!(
        t.requests > 0 && flags_read == t.requests,
        "netlink requests found in {log:?}: {}, their flags read: {flags_read}: is strace's \
         output what this test reads?\n{text}",
        t.requests
    );
    assert!(
        t.state_opens > 0,
        "no open below the state root {state} found in {log:?}: is strace's output what this \
         test reads?\n{text}"
    );
    t
}

/// What may differ between the call at 10 and at 200 attachments for
/// nobody's growth: names one digit longer, a few more bytes of a
/// directory, a file read once per boot.
fn assert_flat(what: &str, small: &Trace, large: &Trace) {
    assert_eq!(
        small.dumps, large.dumps,
        "{what}: netlink dump requests at 10 vs 200 attachments"
    );
    assert!(
        large.requests <= small.requests + 2,
        "{what}: netlink requests grew from {} to {}",
        small.requests,
        large.requests
    );
    assert!(
        large.received <= small.received + small.received / 10 + 4096,
        "{what}: netlink bytes received grew from {} to {} (a reply that grows with the node)\n\
         at 10: {small:?}\nat 200: {large:?}",
        small.received,
        large.received
    );
    for (kind, s, l) in [
        (
            "attachment records opened",
            small.state_opens,
            large.state_opens,
        ),
        ("other files opened", small.opens, large.opens),
        (
            "reservation files opened",
            small.ipam_opens,
            large.ipam_opens,
        ),
        (
            "state directory reads",
            small.state_dir_reads,
            large.state_dir_reads,
        ),
        ("other directory reads", small.dir_reads, large.dir_reads),
    ] {
        assert!(
            l <= s + 2,
            "{what}: {kind} grew from {s} to {l} (a scan)\nat 10: {small:?}\nat 200: {large:?}",
        );
    }
}

#[test]
fn add_and_del_do_not_grow_with_the_node() {
    support::require_root();
    assert!(
        std::process::Command::new("strace")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs strace (apt-get install strace; `make test` installs it)"
    );
    let mut net = Network::new();
    net.fill(10);
    // The fill's untraced ADDs wrote the artifact's verification stamp
    // and the boot marker: no traced call writes them.
    let (a10, d10) = net.trace_add_del("probe10");
    net.fill(200);
    let (a200, d200) = net.trace_add_del("probe200");
    println!("ADD at 10: {a10:?}\nADD at 200: {a200:?}\nDEL at 10: {d10:?}\nDEL at 200: {d200:?}");
    assert_flat("ADD", &a10, &a200);
    assert_flat("DEL", &d10, &d200);
    // A setting below /proc/sys/net costs a lookup of its directory in
    // each namespace the call works in, which grows with the namespaces
    // on the node (about 1 ms each at 2000): IPv6's in the node and in
    // the container (accept_ra, accept_dad); IPv4's (ip_forward,
    // arp_notify) go over netlink.
    assert!(
        a200.proc_sys_net <= 2,
        "ADD looked up {} directories below /proc/sys/net (at most 2: ipv6 in the node and \
         in the container)\n{a200:?}",
        a200.proc_sys_net
    );
    // A host call reads a link from the kernel once until something
    // changes (`Netlink::keep_links`): 30 link reads in this ADD, where
    // every check of every call asking the kernel again made 40.
    assert!(
        a200.link_reads <= 32,
        "ADD read a link {} times (at most 32: once per host call until a change)\n{a200:?}",
        a200.link_reads
    );
    for (i, ctr) in net.ctrs.iter().enumerate() {
        let run = net.invoke("DEL", &format!("fill{i}"), &ctr.path, &[]);
        assert_eq!(run.code, 0, "DEL fill{i}: {run:?}");
    }
}

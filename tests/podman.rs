//! A real runtime: Debian's podman (4.3, CNI backend), each test in a
//! network and mount namespace of its own (tests/podman/*.sh), so the
//! machine's network is never touched:
//! - a container on a network of the shape podman writes (bridge with
//!   ipMasq + host-local + portmap + firewall + tuning) served by an
//!   installed wasmcni bin dir: the container reaches its gateway, the node
//!   reaches the container's server through its published port (`-p
//!   18080:80`, portmap's DNAT); when it is removed, DEL leaves no veth, no
//!   reservation and no nftables table;
//! - `podman run` retried 100 times on a network whose chain fails ADD
//!   after bridge: what podman's cleanup (the list's DEL, right after the
//!   failed ADD) leaves, for the reference plugins, the same list served by
//!   wasmcni, and the same members as one `wasmcni-chain`;
//! - a container on a macvlan + dhcp network, its lease from dnsmasq
//!   through `wasmcni dhcp-daemon`: renewed while it runs, released when
//!   podman removes it.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// Held by each test while it runs podman: the tests take turns. The
/// published-port check missed its reply once while the retry test's 600
/// `podman run`s ran beside it (on a machine loaded by qemu VM tests too).
static PODMAN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    PODMAN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Fails the test unless we are root and have `tools`.
fn require(tools: &[&str]) {
    support::require_root();
    for tool in tools {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "this test needs {tool} (apt-get install podman runc busybox-static nftables \
             iptables containernetworking-plugins; `make test` does)"
        );
    }
}

/// Runs `tests/podman/SCRIPT WASMCNI BINDIR WORKDIR ARGS...` in new network
/// and mount namespaces.
fn sandboxed(script: &str, args: &[&str]) -> Output {
    let work = support::private_tempdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/podman")
        .join(script);
    Command::new("unshare")
        .args(["-n", "-m"])
        .arg(&script)
        .arg(support::wasmcni())
        .arg(work.path().join("bin"))
        .arg(work.path())
        .args(args)
        .output()
        .expect("running podman in a sandbox")
}

#[test]
fn podman_runs_a_container_with_a_published_port_on_a_wasmcni_network() {
    require(&["podman", "runc", "busybox", "nft"]);
    let _turn = turn();
    let out = sandboxed("run.sh", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("inet 10.59.0.2/24"),
        "the container's address: {stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 packets transmitted, 1 packets received"),
        "the container reaches its gateway: {stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("DNAT rules while running: 1"),
        "portmap installed the mapping podman asked for: {stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("node port 18080 answered: through-portmap"),
        "the published port reaches the container: {stdout}\n{stderr}"
    );
    let rules = stdout
        .split("== ruleset while running")
        .nth(1)
        .and_then(|r| r.split("== end ruleset").next())
        .unwrap_or("");
    for (what, needle) in [
        (
            "bridge's ipMasq",
            "ip saddr 10.59.0.2 ip daddr != 10.59.0.0/24",
        ),
        (
            "the firewall plugin's forward rule",
            "ip saddr 10.59.0.2 meta mark set",
        ),
        ("portmap's DNAT", "tcp dport 18080 dnat ip to 10.59.0.2:80"),
    ] {
        assert!(rules.contains(needle), "{what} ({needle}) not in:\n{rules}");
    }
    let after = stdout.split("== after").nth(1).unwrap_or("");
    assert!(
        after.contains("reservations: last_reserved_ip.0 lock \n"),
        "DEL released the address: {after}"
    );
    assert!(after.contains("veths: 0"), "DEL removed the veth: {after}");
    for p in ["bridge", "portmap", "firewall", "tuning"] {
        assert!(
            after.contains(&format!(" {p} calls")) && !after.contains(&format!(" 0 {p} calls")),
            "{p}'s calls were audited: {after}"
        );
    }
    assert!(
        after.contains("wasmcni tables: 0"),
        "DEL removed the port mapping and its tables: {after}"
    );
}

/// podman 4's CNI backend on a macvlan + dhcp network: the lease from
/// dnsmasq through `wasmcni dhcp-daemon` (default socket and state
/// directory, tmpfs of the sandbox), renewed while the container runs,
/// released when podman removes it (tests/podman/dhcp.sh).
#[test]
fn podman_runs_a_container_on_a_macvlan_dhcp_network_leased_by_dnsmasq() {
    require(&["podman", "runc", "busybox", "dnsmasq"]);
    let _turn = turn();
    let out = sandboxed("dhcp.sh", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lease = stdout
        .lines()
        .find_map(|l| l.strip_prefix("lease while running: "))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no lease while the container ran: {stdout}\n{stderr}"));
    assert!(lease.starts_with("10.78.0."), "{stdout}");
    assert!(
        stdout.contains(&format!("inet {lease}/24")),
        "the container has the leased address: {stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("renewed: no"),
        "the daemon renewed the lease: {stdout}\n{stderr}"
    );
    let after = stdout.split("== after").nth(1).unwrap_or("");
    for (what, needle) in [
        ("DEL released the lease", "server leases: 0"),
        ("the daemon forgot it", "daemon leases: 0"),
        ("the macvlan went with the container", "macvlans: 0"),
    ] {
        assert!(after.contains(needle), "{what}: {stdout}\n{stderr}");
    }
}

/// How many times podman runs each failing network.
const TRIES: usize = 100;

/// What tests/podman/failing.sh reported for one network: its
/// `key value` pairs.
struct Case {
    line: String,
    fields: BTreeMap<String, String>,
}

impl Case {
    fn get(&self, key: &str) -> &str {
        self.fields
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in: {}", self.line))
    }

    fn count(&self, key: &str) -> usize {
        self.get(key)
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {e} in: {}", self.line))
    }
}

/// A chain of bridge (host-local, ipMasq) and a plugin that fails ADD, run
/// by podman 100 times: podman runs the list's DEL right after each failed
/// ADD (then removes the container and its namespace, with the veth in it).
/// What that cleanup leaves depends on the failing plugin's DEL, not on who
/// serves the chain:
/// - tuning with a sysctl that does not exist fails ADD, and its DEL
///   succeeds: libcni's DEL goes on to bridge's, and nothing is left, for
///   the reference plugins as for wasmcni (podman's cleanup is enough;
///   the reference leaks nothing here);
/// - portmap with a config it cannot parse (`"snat": "yes"`) fails ADD;
///   the reference's DEL fails on it too, libcni's DEL stops there,
///   bridge's DEL never runs, and the reference list leaks one address and
///   its masquerade rules per try; wasmcni's portmap DEL reads what it can
///   of its config and succeeds, so the same list on wasmcni leaves
///   nothing; as one `wasmcni-chain` plugin the failed ADD is undone before
///   podman sees the error, and nothing is left.
///
/// The failing member is a standard plugin's bad config (as in
/// tests/chain.rs), not the `scripted` fixture: podman runs VERSION of
/// every list member each time it loads the networks, and drops a network
/// whose member's answer is no version answer (`network not found`,
/// measured); the fixture, given only `cniVersion` on stdin, prints its
/// report.
#[test]
fn podmans_cleanup_of_100_failed_adds_leaves_nothing_of_a_wasmcni_chain() {
    require(&[
        "podman",
        "runc",
        "busybox",
        "nft",
        "iptables-save",
        "/usr/lib/cni/bridge",
    ]);
    let _turn = turn();
    let out = sandboxed("failing.sh", &[&TRIES.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // `case IMPL FAILER: key value key value ...`, by "IMPL FAILER".
    let cases: BTreeMap<&str, Case> = stdout
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("case ")?.split_once(": ")?;
            let words: Vec<&str> = rest.split(' ').collect();
            let fields = words
                .chunks(2)
                .map(|kv| (kv[0].to_owned(), kv.get(1).unwrap_or(&"").to_string()))
                .collect();
            Some((
                name,
                Case {
                    line: l.to_owned(),
                    fields,
                },
            ))
        })
        .collect();
    let all = [
        ("reference", "tuning"),
        ("reference", "portmap"),
        ("wasmcni", "tuning"),
        ("wasmcni", "portmap"),
        ("chain", "tuning"),
        ("chain", "portmap"),
    ];
    let case = |implementation: &str, failer: &str| {
        cases
            .get(format!("{implementation} {failer}").as_str())
            .unwrap_or_else(|| panic!("no {implementation} {failer} case in:\n{stdout}\n{stderr}"))
    };
    let report: Vec<String> = all
        .iter()
        .map(|&(implementation, failer)| {
            let c = case(implementation, failer);
            format!(
                "{:<15} {failer} failing ADD{}: {} reservations, {} iptables and {} \
                 nftables rules, {} veths, {} wasmcni records left after {TRIES} runs \
                 ({} ms a run)",
                match implementation {
                    "reference" => "reference list,",
                    "wasmcni" => "wasmcni list,",
                    _ => "wasmcni-chain,",
                },
                if failer == "tuning" || implementation != "reference" {
                    ""
                } else {
                    " and DEL"
                },
                c.count("reservations"),
                c.count("iptables-rules"),
                c.count("nft-rules"),
                c.count("veths"),
                c.count("records"),
                c.count("ms") / TRIES,
            )
        })
        .collect();
    eprintln!("{}", report.join("\n"));
    for &(implementation, failer) in &all {
        let c = case(implementation, failer);
        let what = format!("{implementation}, {failer} failing: {}", c.line);
        // Every run reached the failing plugin's ADD, and failed there.
        assert_eq!(c.count("tries"), TRIES, "{what}");
        assert_eq!(c.count("failed-add"), TRIES, "{what}\n{stdout}");
        if implementation == "reference" {
            assert_eq!(c.count("wasmcni-bridge-adds"), 0, "{what}");
            assert_eq!(c.count("records"), 0, "{what}");
        } else {
            // wasmcni's bridge made an attachment for every container.
            assert_eq!(c.count("wasmcni-bridge-adds"), TRIES, "{what}");
        }
        if implementation != "chain" {
            // host-local reserved a new address on every try (its
            // round-robin went on from the last one each time).
            assert_eq!(
                c.get("last-reserved"),
                format!("{}.{}", c.get("subnet"), TRIES + 1),
                "{what}"
            );
        }
        // Podman removed every container and its namespace, and the
        // host veth with it, whatever DEL did.
        for key in ["veths", "netns", "containers"] {
            assert_eq!(c.count(key), 0, "{key}: {what}");
        }
        if implementation != "reference" || failer == "tuning" {
            for key in ["reservations", "nft-rules", "iptables-rules", "records"] {
                assert_eq!(c.count(key), 0, "{key} leaked: {what}");
            }
        } else {
            // The reference: libcni stopped the DEL at portmap, whose DEL
            // fails on the config as its ADD does: bridge's DEL never ran.
            assert_eq!(
                c.count("reservations"),
                TRIES,
                "the plain list leaks one address per try: {what}"
            );
            assert!(
                c.count("iptables-rules") >= TRIES,
                "a masquerade rule per try: {what}"
            );
            assert_eq!(c.count("nft-rules"), 0, "{what}");
        }
    }
}

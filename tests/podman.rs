//! A real runtime: Debian's podman (4.3, CNI backend) runs a container on a
//! network of the shape podman writes (bridge with ipMasq + host-local +
//! portmap + firewall + tuning) served by an installed wasmcni bin dir: the container reaches its gateway, the node reaches the container's
//! server through its published port (`-p 18080:80`, portmap's DNAT); when
//! it is removed, DEL leaves no veth, no reservation and no nftables table. Runs in a network and mount namespace of its
//! own (tests/podman/run.sh), so the machine's network is never touched.

mod support;

use std::process::Command;

#[test]
fn podman_runs_a_container_with_a_published_port_on_a_wasmcni_network() {
    support::require_root();
    for tool in ["podman", "runc", "busybox"] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "this test needs {tool} (apt-get install podman runc busybox-static; `make test` does)"
        );
    }
    let work = support::private_tempdir();
    let bin = work.path().join("bin");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/podman/run.sh");
    let out = Command::new("unshare")
        .args(["-n", "-m"])
        .arg(&script)
        .arg(support::wasmcni())
        .arg(&bin)
        .arg(work.path())
        .output()
        .expect("running podman in a sandbox");
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

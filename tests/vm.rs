//! tests/vm/run, the VM runner the kernel tests of link kinds this
//! machine's kernel lacks run in: it boots, sees this machine's files, has
//! every link kind, loads modules on demand, passes the environment, and
//! returns the command's output and exit status.

mod support;

use std::process::Command;

#[test]
fn the_vm_runs_a_command_on_a_kernel_with_every_link_kind_and_returns_its_status() {
    support::require_root();
    let script = "set -e; \
        ip link add p0 type veth peer name p1; \
        ip link add d0 type dummy; \
        ip link add link p0 name v5 type vlan id 5; \
        ip link add link p0 name iv0 type ipvlan mode l3; \
        ip link add link p1 name mv0 type macvlan mode bridge; \
        ip link add vrf0 type vrf table 10; \
        ip link add br0 type bridge vlan_filtering 1; \
        ip link add ifb0 type ifb; \
        ip -br link show type dummy | grep -c . ; \
        ip netns add t1; ip -n t1 link set lo up; ip netns del t1; \
        test -x \"$1\"; \
        mkdir -p /mnt/host; mount -t virtiofs root /mnt/host; mount -o remount,rw /mnt/host; \
        if touch \"/mnt/host$2\"; then echo host-writable; fi; \
        touch \"$2\"; test -f \"$2\"; \
        touch \"$WASMCNI_CACHE_DIR/$3\"; \
        echo \"in-vm=$WASMCNI_IN_VM passed=$PASSED_ON cwd=$(pwd)\"; \
        exit 7";
    // A file the VM writes (under its RAM overlay, and straight to the
    // shared files, which must be read-only).
    let probe = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("vm-probe-{}", std::process::id()));
    // The one directory the VM may write: its artifact cache, kept across
    // boots (target/vm/cache, at the same path inside).
    let cache_probe = format!("probe-{}", std::process::id());
    let t = std::time::Instant::now();
    let out = Command::new(support::vm::runner())
        .env("WASMCNI_PASSED_ON", "yes")
        .args([
            "--",
            "sh",
            "-c",
            &script.replace("$PASSED_ON", "$WASMCNI_PASSED_ON"),
            "sh",
        ])
        .arg(support::wasmcni())
        .arg(&probe)
        .arg(&cache_probe)
        .output()
        .expect("tests/vm/run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "VM boot + command + power-off: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stdout.contains("host-writable"), "{stdout}");
    assert!(!probe.exists(), "the VM wrote {}", probe.display());
    let cached = support::vm::runner()
        .parent()
        .expect("tests/vm")
        .join("../../target/vm/cache")
        .join(&cache_probe);
    assert!(
        cached.exists(),
        "the VM's cache write did not land: {stdout}"
    );
    std::fs::remove_file(&cached).expect("remove the cache probe");
    // `numdummies=0`: only the dummy the script made.
    assert!(stdout.lines().any(|l| l.trim() == "1"), "{stdout}");
    let cwd = std::env::current_dir().expect("cwd");
    assert!(
        stdout.contains(&format!("in-vm=1 passed=yes cwd={}", cwd.display())),
        "{stdout}"
    );
    // A command that cannot start: the shell's status comes back, not 0.
    let out = Command::new(support::vm::runner())
        .args(["--", "/nonexistent/command"])
        .output()
        .expect("tests/vm/run");
    assert_eq!(out.status.code(), Some(127), "{out:?}");
}

#[test]
fn kernel_has_tells_link_kinds_apart_and_the_vm_has_them_all() {
    support::require_root();
    // If this machine's kernel ever gains these kinds, the VM tests run
    // here directly; the runner test above still checks the VM.
    for kind in ["dummy", "vlan", "ipvlan", "vrf", "bridge-vlan"] {
        let has = support::vm::kernel_has(kind);
        eprintln!("{kind}: {}", if has { "here" } else { "VM only" });
        if support::vm::inside() {
            assert!(has, "the VM kernel lacks {kind}");
        }
    }
    assert!(support::vm::kernel_has("veth"));
    assert!(!support::vm::kernel_has("no-such-kind0"));
}

//! Tests that need link kinds this machine's kernel lacks (dummy, vlan,
//! ipvlan, vrf, bridge vlan filtering) run inside tests/vm/: a qemu VM
//! whose kernel has them, seeing this machine's files read-only under a
//! throwaway writable layer. A test asks [`kernel_has`]; where a kind is
//! missing it calls [`rerun_this_test`], which runs the same test binary,
//! filtered to that one test, inside the VM and fails unless it passes
//! there. Nothing is skipped: without qemu or the VM kernel the test fails
//! (`make setup` installs both).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// True inside tests/vm/ (its stage 2 sets `WASMCNI_IN_VM=1`).
pub fn inside() -> bool {
    std::env::var_os("WASMCNI_IN_VM").is_some()
}

/// Whether this kernel can make a link of `kind` (`ip link add … type
/// KIND`), tried in a throwaway network namespace. `bridge-vlan` stands
/// for a bridge with vlan filtering.
pub fn kernel_has(kind: &str) -> bool {
    static SEEN: Mutex<Vec<(String, bool)>> = Mutex::new(Vec::new());
    if let Some((_, has)) = SEEN.lock().unwrap().iter().find(|(k, _)| k == kind) {
        return *has;
    }
    let make = match kind {
        "vlan" => "ip link add link p0 name k0 type vlan id 5",
        "macvlan" | "ipvlan" | "macvtap" => &format!("ip link add link p0 name k0 type {kind}"),
        "bridge-vlan" => "ip link add k0 type bridge vlan_filtering 1",
        "vrf" => "ip link add k0 type vrf table 10",
        k if k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
        {
            &format!("ip link add k0 type {k}")
        }
        k => panic!("unknown link kind {k:?}"),
    };
    let script = format!("ip link add p0 type veth peer name p1 && {make}");
    let has = Command::new("unshare")
        .args(["-n", "sh", "-c", &script])
        .output()
        .expect("unshare -n (util-linux)")
        .status
        .success();
    SEEN.lock().unwrap().push((kind.to_owned(), has));
    has
}

/// tests/vm/run, the VM runner.
pub fn runner() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vm/run")
}

/// The VM's artifact cache (tests/vm/run shares it with the VM, at the
/// same path).
fn vm_cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/vm/cache")
}

/// Compiles the standard plugins and every test fixture into the VM's
/// artifact cache here, for the CPU level the VM compiles for
/// (`WASMCNI_CPU=x86-64-v2`, which tests/vm/run sets inside), so the VM
/// loads them instead of compiling each under emulation (minutes, not
/// seconds). Quick when done: an artifact already there is only checked.
fn precompile_for_the_vm() {
    let fixtures: Vec<PathBuf> = std::fs::read_dir(env!("WASMCNI_FIXTURES"))
        .expect("the fixtures' directory")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    let out = Command::new(super::wasmcni())
        .arg("precompile")
        .arg("--cache-dir")
        .arg(vm_cache())
        .args(&fixtures)
        .env("WASMCNI_CPU", "x86-64-v2")
        .output()
        .expect("running wasmcni precompile");
    assert!(
        out.status.success(),
        "precompiling for the VM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the test `name` of the current test binary inside the VM (one
/// boot) and panics, with the VM's output, unless it passed there.
pub fn rerun_this_test(name: &str) {
    assert!(!inside(), "{name}: already inside the VM");
    precompile_for_the_vm();
    let exe = std::env::current_exe().expect("current test binary");
    let t = std::time::Instant::now();
    let out = Command::new(runner())
        .arg("--")
        .arg(&exe)
        .args([
            name,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--color=never",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", runner().display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "--- {name} in the VM ({:.1} s) ---\n{text}--- end of VM output ---",
        t.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "{name} failed inside the VM ({}); its output is above",
        out.status
    );
    assert!(
        text.contains("test result: ok. 1 passed"),
        "{name}: the VM did not run the test; its output is above"
    );
}

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

/// The tests of each test binary (by crate name) that run in the VM on a
/// kernel without the link kinds they need. The first of a binary's tests
/// to need the VM runs every one of them that the binary's own filter
/// selects, in one boot (each in a process of its own): a boot costs ten
/// seconds and more under emulation, and boots take turns. A test that
/// asks for the VM must be listed here ([`rerun_this_test`] panics
/// otherwise), and a listed name that is no test fails the boot's run.
const IN_THE_VM: &[(&str, &[&str])] = &[
    (
        "bridge_vlan",
        &[
            "trunk_and_access_ports_get_upstreams_vlan_tables",
            "a_port_joins_only_vlans_the_network_config_names",
            "a_port_joins_the_vlans_the_network_config_names",
            "the_undo_of_a_failed_add_restores_a_ports_vlans",
        ],
    ),
    (
        "device_plugins",
        &[
            "dummy_through_libcni",
            "dummy_needs_ipam_and_a_failed_add_leaves_nothing",
        ],
    ),
    (
        "fault",
        &[
            "s6_bridge_vlan_gateway_add_is_undone_at_every_host_call",
            "s6_vrf_add_is_undone_at_every_host_call",
            "s6_ipvlan_add_is_undone_at_every_host_call",
            "s6_vlan_add_is_undone_at_every_host_call",
            "s6_dummy_add_is_undone_at_every_host_call",
        ],
    ),
    (
        "meta_plugins",
        &["vrf_adds_of_two_interfaces_at_once_bind_different_tables"],
    ),
    (
        "netlink",
        &[
            "dummy_vlan_filtering_ipvlan_vlan",
            "bridge_port_vlans_are_read_added_and_deleted",
        ],
    ),
    (
        "plugins",
        &["cases_needing_other_link_types_run_on_a_kernel_that_has_them"],
    ),
    (
        "undo",
        &[
            "a_failed_add_takes_back_only_the_l3mdev_rule_its_vrf_brought",
            "a_failed_add_keeps_the_l3mdev_rules_another_attachments_vrf_needs",
            "a_vrf_made_after_an_undo_took_the_l3mdev_rules_gets_them",
        ],
    ),
];

/// What one test printed in the VM, and whether it passed there.
struct Outcome {
    passed: bool,
    secs: f64,
    text: String,
}

/// Whether this test binary's command line selects the test `name` (its
/// filters, `--exact`, `--skip`): only those of a batch are run.
fn selected(name: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    let matches = |f: &str| if exact { name == f } else { name.contains(f) };
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skips.extend(it.next()),
            "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" | "--shuffle-seed" => {
                it.next();
            }
            a if a.starts_with('-') => {}
            a => filters.push(a),
        }
    }
    (filters.is_empty() || filters.iter().any(|f| matches(f))) && !skips.iter().any(|s| matches(s))
}

/// Runs `names` of the current test binary inside the VM, one boot, each
/// test in a process of its own (tests/vm/run-tests).
fn run_in_one_boot(names: &[&str]) -> Vec<(String, Outcome)> {
    let exe = std::env::current_exe().expect("current test binary");
    let runner_of_tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vm/run-tests");
    let out = Command::new(runner())
        .args(["--timeout", &(1800 * names.len()).to_string(), "--"])
        .arg(&runner_of_tests)
        .arg(&exe)
        .args(names)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", runner().display()));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    names
        .iter()
        .map(|&name| {
            let begin = format!("wasmcni-vm-test: begin {name}\n");
            let outcome = match all.find(&begin) {
                None => Outcome {
                    passed: false,
                    secs: 0.0,
                    text: format!(
                        "(the VM did not run it: {}; all it printed:)\n{all}",
                        out.status
                    ),
                },
                Some(at) => {
                    let rest = &all[at + begin.len()..];
                    let end = format!("wasmcni-vm-test: end {name} ");
                    match rest.find(&end) {
                        None => Outcome {
                            passed: false,
                            secs: 0.0,
                            text: format!("{rest}\n(it did not end: {})", out.status),
                        },
                        Some(e) => {
                            let text = rest[..e].to_owned();
                            let mut tail = rest[e + end.len()..].split_whitespace();
                            let rc = tail.next().unwrap_or("?");
                            let secs = tail.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
                            Outcome {
                                passed: rc == "0" && text.contains("test result: ok. 1 passed"),
                                secs,
                                text,
                            }
                        }
                    }
                }
            };
            (name.to_owned(), outcome)
        })
        .collect()
}

/// Runs the test `name` of the current test binary inside the VM and
/// panics, with the VM's output, unless it passed there. The first such
/// call of a binary runs all its selected tests listed in [`IN_THE_VM`]
/// in one boot; the others take their outcome from it.
pub fn rerun_this_test(name: &str) {
    assert!(!inside(), "{name}: already inside the VM");
    static BOOT: Mutex<()> = Mutex::new(());
    static DONE: Mutex<Vec<(String, Outcome)>> = Mutex::new(Vec::new());
    let exe = std::env::current_exe().expect("current test binary");
    let stem = exe
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("test binary name");
    let krate = stem.rsplit_once('-').map_or(stem, |(k, _)| k);
    let batch: &[&str] = IN_THE_VM
        .iter()
        .find(|(k, _)| *k == krate)
        .map(|(_, b)| *b)
        .filter(|b| b.contains(&name))
        .unwrap_or_else(|| {
            panic!("{krate}::{name} runs in the VM: list it in tests/support/vm.rs IN_THE_VM")
        });
    let outcome = {
        let _boot = BOOT.lock().unwrap_or_else(|e| e.into_inner());
        let mine = |done: &mut Vec<(String, Outcome)>| {
            let at = done.iter().position(|(n, _)| n == name)?;
            Some(done.swap_remove(at).1)
        };
        let have = mine(&mut DONE.lock().unwrap());
        match have {
            Some(o) => o,
            None => {
                precompile_for_the_vm();
                // Built here, where it takes seconds, not under emulation.
                super::cni::driver();
                let names: Vec<&str> = std::iter::once(name)
                    .chain(batch.iter().copied().filter(|&n| n != name && selected(n)))
                    .collect();
                let mut done = DONE.lock().unwrap();
                done.extend(run_in_one_boot(&names));
                mine(&mut done).expect("the boot's outcome of this test")
            }
        }
    };
    eprintln!(
        "--- {name} in the VM ({:.1} s) ---\n{}--- end of VM output ---",
        outcome.secs, outcome.text
    );
    assert!(
        outcome.passed,
        "{name} failed inside the VM; its output is above"
    );
}

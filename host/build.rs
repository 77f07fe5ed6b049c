//! Builds the standard plugins (every crate under `guests/`) for
//! `wasm32-wasip2` and embeds them, as wasmtime's test-programs do: a nested
//! `cargo build` into its own target directory.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn main() {
    // Every CNI call is a fresh process, so start-up is the hot path: a
    // non-PIE executable needs no run-time relocation of its ~25k relative
    // relocations (measured: `wasmcni --version` 2.1 ms -> see README).
    // On musl, only with `-C relocation-model=static` (.cargo/config.toml):
    // musl's static-pie start code crashes in a -no-pie executable.
    let musl = env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("musl");
    let static_model = env::var("CARGO_ENCODED_RUSTFLAGS")
        .unwrap_or_default()
        .split('\x1f')
        .any(|f| f == "relocation-model=static" || f == "-Crelocation-model=static");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") && (!musl || static_model) {
        println!("cargo:rustc-link-arg-bin=wasmcni=-no-pie");
        // Resolve libc symbols when first called, not all ~200 at start-up.
        println!("cargo:rustc-link-arg-bin=wasmcni=-Wl,-z,lazy");
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    // The functions a warm plugin run executes, packed together at the start
    // of .text (see hot-symbols.sh): the kernel maps 64 KiB around every
    // page fault in the executable, so scattered hot code costs RSS. rustc
    // links x86_64-unknown-linux-gnu with lld, which takes the list; names
    // it does not find (a stale list) are ignored.
    let hot = manifest.join("hot-symbols.txt");
    println!("cargo:rerun-if-changed={}", hot.display());
    if env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu") && hot.exists() {
        println!(
            "cargo:rustc-link-arg-bin=wasmcni=-Wl,--symbol-ordering-file={}",
            hot.display()
        );
        println!("cargo:rustc-link-arg-bin=wasmcni=-Wl,--no-warn-symbol-ordering");
    }
    let root = manifest.parent().expect("workspace root").to_owned();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    for dir in ["wit", "guest-sdk", "guests"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );

    println!(
        "cargo:rerun-if-changed={}",
        root.join("tests").join("fixtures").display()
    );
    // Standard plugins are embedded; test fixtures (hostile plugins) are
    // only built, for the integration tests to run by path.
    // Plugins are the binary crates; a library under guests/ (code the
    // plugins share) is built as their dependency, never embedded.
    let guests: Vec<String> = crates_in(&root.join("guests"))
        .into_iter()
        .filter(|g| root.join("guests").join(g).join("src/main.rs").is_file())
        .collect();
    let fixtures = crates_in(&root.join("tests").join("fixtures"));

    let target_dir = root.join("target").join("guests");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--profile", "guest", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(&target_dir);
    for g in guests.iter().chain(&fixtures) {
        cmd.args(["-p", g]);
    }
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("running cargo to build the guests");
    if !status.success() {
        panic!(
            "building the guest plugins for wasm32-wasip2 failed (is the target installed? `rustup target add wasm32-wasip2`)"
        );
    }

    let built = target_dir.join("wasm32-wasip2").join("guest");
    println!("cargo:rustc-env=WASMCNI_FIXTURES={}", path_str(&built));
    let mut table = String::from("/// (name, component, sha256) of every standard plugin.\npub static BUNDLED: &[(&str, &[u8], &str)] = &[\n");
    for g in &guests {
        let wasm = target_dir
            .join("wasm32-wasip2")
            .join("guest")
            .join(format!("{g}.wasm"));
        let bytes = fs::read(&wasm).unwrap_or_else(|e| panic!("reading {}: {e}", wasm.display()));
        let dest = out.join(format!("{g}.wasm"));
        fs::write(&dest, &bytes).expect("writing embedded plugin");
        let sha = hex::encode(Sha256::digest(&bytes));
        table.push_str(&format!(
            "    ({g:?}, include_bytes!({:?}), {sha:?}),\n",
            path_str(&dest)
        ));
    }
    table.push_str("];\n");
    fs::write(out.join("bundled.rs"), table).expect("writing bundled.rs");
}

/// The package names of the crates directly under `dir`, sorted.
fn crates_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().join("Cargo.toml").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("UTF-8 path").to_owned()
}

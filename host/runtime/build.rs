//! Builds the standard plugins (every crate under `guests/`) and the test
//! fixtures (`tests/fixtures/`) for `wasm32-wasip2`, and embeds the
//! plugins, as wasmtime's test-programs do: a nested `cargo build` into its
//! own target directory (`target/guests`; the `wasmcni` crate's build
//! script points the integration tests at the fixtures there).
#![allow(clippy::disallowed_methods)] // a build script reads cargo's environment

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .expect("workspace root")
        .to_owned();
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

    // The standard plugins are carried as one zstd stream (a long window,
    // so what they share — the SDK, serde, std — is stored once: 6.5 MB of
    // components in about 0.5 MB), decompressed only when a plugin is
    // compiled or inspected; a run from a precompiled artifact never
    // reads it.
    let mut bundle = Vec::new();
    let mut table = String::from(
        "/// (name, byte range in the decompressed bundle, sha256) of every standard plugin.\n\
         pub static BUNDLED: &[(&str, core::ops::Range<usize>, &str)] = &[\n",
    );
    for g in &guests {
        let wasm = target_dir
            .join("wasm32-wasip2")
            .join("guest")
            .join(format!("{g}.wasm"));
        let bytes = fs::read(&wasm).unwrap_or_else(|e| panic!("reading {}: {e}", wasm.display()));
        let sha = hex::encode(Sha256::digest(&bytes));
        let start = bundle.len();
        bundle.extend_from_slice(&bytes);
        table.push_str(&format!(
            "    ({g:?}, {start}..{}, {sha:?}),\n",
            bundle.len()
        ));
    }
    table.push_str("];\n");
    table.push_str(&format!(
        "/// The decompressed bundle's length.\npub const BUNDLE_LEN: usize = {};\n",
        bundle.len()
    ));
    let compressed = compress(&bundle);
    let dest = out.join("bundled.zst");
    fs::write(&dest, compressed).expect("writing the bundle");
    table.push_str(&format!(
        "/// Every standard plugin, one zstd stream.\npub static BUNDLE: &[u8] = include_bytes!({:?});\n",
        path_str(&dest)
    ));
    fs::write(out.join("bundled.rs"), table).expect("writing bundled.rs");
}

/// zstd at level 19 with a window that holds the whole bundle (at most
/// 2^27 bytes, the most a decoder accepts by default).
fn compress(bytes: &[u8]) -> Vec<u8> {
    let window_log = bytes
        .len()
        .next_power_of_two()
        .trailing_zeros()
        .clamp(10, 27);
    let mut enc = zstd::bulk::Compressor::new(19).expect("zstd compressor");
    enc.set_parameter(zstd::zstd_safe::CParameter::WindowLog(window_log))
        .expect("zstd window");
    enc.set_parameter(zstd::zstd_safe::CParameter::EnableLongDistanceMatching(
        true,
    ))
    .expect("zstd long distance matching");
    enc.compress(bytes).expect("compressing the bundle")
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

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
    // The standard plugins: most are carried by one component,
    // guests/standard, which runs the plugin its program name names; each
    // of those is a library crate and a path dependency of that crate, and
    // its name is the dependency's. A plugin crate with a src/main.rs
    // (loopback) is a component of its own. Test fixtures (hostile plugins)
    // are only built, for the integration tests to run by path.
    let carried = standard_plugins(&root.join("guests").join(STANDARD).join("Cargo.toml"));
    let own: Vec<String> = crates_in(&root.join("guests"))
        .into_iter()
        .filter(|g| g != STANDARD && root.join("guests").join(g).join("src/main.rs").is_file())
        .collect();
    let fixtures = crates_in(&root.join("tests").join("fixtures"));

    let target_dir = root.join("target").join("guests");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--profile", "guest", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(&target_dir);
    cmd.args(["-p", STANDARD]);
    for g in own.iter().chain(&fixtures) {
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

    // The standard components are carried as one zstd stream (a long
    // window: what they share, std, serde and the SDK, is stored once),
    // decompressed only when one is compiled or inspected: a run from a
    // precompiled artifact never reads it.
    let mut bundle = Vec::new();
    let mut table = String::from(
        "/// (name, component, byte range of the component in the decompressed\n\
         /// bundle, its sha256) of every standard plugin.\n\
         pub static BUNDLED: &[(&str, &str, core::ops::Range<usize>, &str)] = &[\n",
    );
    let mut rows = Vec::new();
    for component in std::iter::once(STANDARD).chain(own.iter().map(String::as_str)) {
        let wasm = target_dir
            .join("wasm32-wasip2")
            .join("guest")
            .join(format!("{component}.wasm"));
        let bytes = fs::read(&wasm).unwrap_or_else(|e| panic!("reading {}: {e}", wasm.display()));
        let sha = hex::encode(Sha256::digest(&bytes));
        let range = bundle.len()..bundle.len() + bytes.len();
        bundle.extend_from_slice(&bytes);
        let names: Vec<&str> = if component == STANDARD {
            carried.iter().map(String::as_str).collect()
        } else {
            vec![component]
        };
        for name in names {
            rows.push((
                name.to_owned(),
                component.to_owned(),
                range.clone(),
                sha.clone(),
            ));
        }
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, component, range, sha) in rows {
        table.push_str(&format!(
            "    ({name:?}, {component:?}, {}..{}, {sha:?}),\n",
            range.start, range.end
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
        "/// The standard components, one zstd stream.\npub static BUNDLE: &[u8] = include_bytes!({:?});\n",
        path_str(&dest)
    ));
    fs::write(out.join("bundled.rs"), table).expect("writing bundled.rs");
}

/// The crate under guests/ that is the standard plugins' component.
const STANDARD: &str = "standard";

/// The standard plugins the standard component carries: the path
/// dependencies in its manifest's `[dependencies]` (`name = { path =
/// "../name" }`), in its order. Each must be a library crate under
/// guests/ named as its directory (a plugin name), carried once, and not
/// a component of its own (a crate with a src/main.rs).
fn standard_plugins(manifest: &Path) -> Vec<String> {
    let text = fs::read_to_string(manifest)
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    let guests = manifest.parent().and_then(Path::parent).expect("guests/");
    let mut names: Vec<String> = Vec::new();
    let mut section = "";
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[dependencies]" || line.starts_with('#') || !line.contains("path") {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{}: cannot read {line:?}", manifest.display()));
        let name = key.trim().to_owned();
        let expected = format!("{{ path = \"../{name}\" }}");
        assert_eq!(
            value.trim(),
            expected,
            "{}: a carried plugin is `NAME = {{ path = \"../NAME\" }}`",
            manifest.display()
        );
        // As plugins::valid_name (a build script cannot call it).
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        assert!(ok, "{}: {name:?} is not a plugin name", manifest.display());
        let dir = guests.join(&name);
        assert!(
            dir.join("src/lib.rs").is_file() && !dir.join("src/main.rs").exists(),
            "guests/{name}: a plugin the standard component carries is a library (src/lib.rs, no src/main.rs)"
        );
        assert!(!names.contains(&name), "{name} is listed twice");
        names.push(name);
    }
    assert!(
        !names.is_empty(),
        "no standard plugins in {}",
        manifest.display()
    );
    names
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

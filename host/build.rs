//! Link options of the `wasmcni` executable, and where the integration
//! tests find the test fixtures (built by `wasmcni-runtime`'s build
//! script, which this crate depends on, so they exist before any test is
//! compiled).
#![allow(clippy::disallowed_methods)] // a build script reads cargo's environment

use std::env;
use std::path::PathBuf;

fn main() {
    // Every CNI call is a fresh process, so start-up is the hot path: a
    // non-PIE executable needs no run-time relocation of its ~25k relative
    // relocations (each CNI call would pay for them at start-up). The glibc
    // build is static besides (.cargo/config.toml: crt-static and
    // relocation-model=static; then `-z lazy` below has nothing to do).
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
    // A release executable carries no symbol table (5.7 MB of 27 MB; a
    // panic's backtrace then names no function). Stripped here, at the
    // link, not by the profile's `strip = true`: the profile is hashed
    // into every crate's symbol names, and host/hot-symbols.sh needs a
    // build with the same names and its symbols (WASMCNI_KEEP_SYMBOLS=1).
    // Not when the build asks for debug info (a profiling profile that
    // inherits release with `debug = true`): --strip-all would take it.
    println!("cargo:rerun-if-env-changed=WASMCNI_KEEP_SYMBOLS");
    let keep = env::var("WASMCNI_KEEP_SYMBOLS").is_ok_and(|v| !v.is_empty() && v != "0");
    if env::var("PROFILE").as_deref() == Ok("release")
        && env::var("DEBUG").as_deref() == Ok("false")
        && env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && !keep
    {
        println!("cargo:rustc-link-arg-bin=wasmcni=-Wl,--strip-all");
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    // The functions a warm plugin run executes, packed together at the start
    // of .text (see hot-symbols.sh): the kernel maps 64 KiB around every
    // page fault in the executable, so scattered hot code costs RSS. A list
    // per target (the symbol names differ: the target is in every crate's
    // hash), handed to rustc's own lld (`gcc-ld/ld.lld`, which `cc` is told
    // to use: rustc links x86_64-unknown-linux-gnu with it already, the musl
    // target with the system linker, which takes no such list), through
    // link/ordered-link (`cc -wrapper`), which first maps each function
    // ThinLTO renamed (NAME.llvm.N, N changing with its module's code) to
    // its name in this build. Names lld does not find (a stale list) are
    // ignored; without the list or the lld (a distribution's rustc) the
    // build is the same, its hot code scattered.
    let target = env::var("TARGET").unwrap_or_default();
    let list = match target.as_str() {
        "x86_64-unknown-linux-gnu" => Some("hot-symbols.txt"),
        "x86_64-unknown-linux-musl" => Some("hot-symbols-musl.txt"),
        _ => None,
    };
    if let Some(list) = list {
        let hot = manifest.join(list);
        println!("cargo:rerun-if-changed={}", hot.display());
        match (hot.exists(), rustc_lld()) {
            (true, Some(lld)) => {
                println!("cargo:rustc-link-arg-bin=wasmcni=-fuse-ld=lld");
                println!("cargo:rustc-link-arg-bin=wasmcni=-B{}", lld.display());
                // `cc -wrapper PROG`: cc runs the linker through PROG. For
                // release builds (the list names their functions), where
                // the linker driver takes it (gcc does; clang does not),
                // and PROG's path has no comma (it would split it).
                let wrapper = manifest.join("link/ordered-link");
                println!("cargo:rerun-if-changed={}", wrapper.display());
                if let Some(w) = wrapper.to_str().filter(|w| !w.contains(',')) {
                    if env::var("PROFILE").as_deref() == Ok("release") && takes_wrapper(w) {
                        println!("cargo:rustc-link-arg-bin=wasmcni=-wrapper");
                        println!("cargo:rustc-link-arg-bin=wasmcni={w}");
                    }
                }
                println!(
                    "cargo:rustc-link-arg-bin=wasmcni=-Wl,--symbol-ordering-file={}",
                    hot.display()
                );
                println!("cargo:rustc-link-arg-bin=wasmcni=-Wl,--no-warn-symbol-ordering");
            }
            (true, None) => println!(
                "cargo:warning=this toolchain has no gcc-ld/ld.lld: wasmcni is linked without \
                 its hot-symbol order (a larger peak RSS per CNI call)"
            ),
            (false, _) => {}
        }
    }
    let root = manifest.parent().expect("workspace root");
    let fixtures = root.join("target/guests/wasm32-wasip2/guest");
    println!(
        "cargo:rustc-env=WASMCNI_FIXTURES={}",
        fixtures.to_str().expect("UTF-8 path")
    );
}

/// Whether the linker driver rustc runs takes `-wrapper PROG`:
/// preprocessing nothing with PROG as the wrapper succeeds (the wrapped
/// subcommand's output is not used). The driver is the one the flags name
/// (`-C linker=`), else the target's configured one (cargo's
/// `RUSTC_LINKER`), else `cc`.
fn takes_wrapper(prog: &str) -> bool {
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let mut flags = flags.split('\x1f');
    let mut from_flags = None;
    while let Some(f) = flags.next() {
        let f = if f == "-C" {
            flags.next().unwrap_or("")
        } else {
            f
        };
        if let Some(l) = f.strip_prefix("-Clinker=").or(f.strip_prefix("linker=")) {
            from_flags = Some(l.to_owned());
        }
    }
    let cc = from_flags
        .map(Into::into)
        .or_else(|| env::var_os("RUSTC_LINKER"))
        .unwrap_or_else(|| "cc".into());
    std::process::Command::new(cc)
        .args([
            "-wrapper",
            prog,
            "-E",
            "-x",
            "c",
            "/dev/null",
            "-o",
            "/dev/null",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The directory of rustc's own `ld.lld` driver shim (`-B` for `cc`):
/// `<sysroot>/lib/rustlib/<host>/bin/gcc-ld`, shipped with every rustup
/// toolchain. None when the toolchain has none (a distribution's rustc).
fn rustc_lld() -> Option<PathBuf> {
    let rustc = env::var_os("RUSTC")?;
    let out = std::process::Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let dir = sysroot
        .join("lib/rustlib")
        .join(env::var("HOST").ok()?)
        .join("bin/gcc-ld");
    dir.join("ld.lld").exists().then_some(dir)
}

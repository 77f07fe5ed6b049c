//! The wasmtime engine and its precompiled artifacts.
//!
//! One [`wasmtime::Config`] is used both to precompile and to load, so an
//! artifact is always for the engine that loads it. Artifacts are keyed by
//! (plugin sha256, engine fingerprint) and carry an XXH3-128 checksum of
//! their own bytes: a stale artifact is never looked up, and a foreign,
//! truncated or corrupt one fails verification and is rebuilt, never loaded.
//!
//! Why XXH3 and not sha256: the checksum guards against truncation and
//! corruption (a crash mid-write, a bad disk, a file from elsewhere), not
//! against an attacker — the directory must be root-owned and not group- or
//! world-writable, and whoever can write there can replace wasmcni itself.
//! Loading is the hot path of every CNI call: software sha256 over the
//! ~750 KB artifact cost ~10 ms on these machines (no SHA extensions);
//! XXH3 costs well under 0.1 ms.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, Strategy};

use crate::plugins::Plugin;

/// Magic that ends every artifact file, before the digest.
const TRAILER_MAGIC: &[u8; 8] = b"WCNIART2";
const TRAILER_LEN: usize = 8 + 16;

fn checksum(bytes: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes()
}

/// The engine configuration: component model, epoch interruption for
/// deadlines, and the Cranelift compiler. Used for both precompiling and
/// loading.
///
/// Why Cranelift and not the Winch baseline compiler: `wasmcni install`
/// precompiles every plugin, so compile time is paid once per plugin
/// version, while the code's size and speed are paid by every call.
/// Measured on the 2-core VM (release build, glibc, executed directly and
/// interleaved with the reference, 300 runs; docs/performance.md, issue
/// 26, tenth step):
/// - install of the 17 plugins: 1.1-1.2 s (Winch 0.3 s);
/// - the artifacts: 3.01 MB (Winch 5.17 MB); loopback's 0.81 MB (1.29);
/// - loopback ADD 3.13 ms (Winch 3.90), peak RSS 4.7-4.8 MiB (5.0-5.1);
/// - bridge + host-local ADD 7.93 ms (Winch 8.91).
///
/// A process whose plugin has no Cranelift artifact yet (not precompiled:
/// a plugin added after `wasmcni install`, a cache lost) runs under
/// [`first_run_config`] instead ([`engine_for`]). Debug builds optimize
/// Cranelift (Cargo.toml), or each test's install would compile for 15 s.
pub fn config() -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    c.strategy(Strategy::Cranelift);
    // No wasm offsets in a trap's backtrace (the function names a plugin's
    // name section gives stay; the standard plugins are built stripped, so
    // theirs read `<wasm function N>` either way): 9% of every artifact
    // (measured on bridge: 1,956,736 -> 1,776,432 bytes,
    // `examples/compile_time.rs`).
    c.generate_address_map(false);
    // No native unwind information (`.eh_frame`) in the artifacts: it only
    // serves third-party unwinders walking through wasm frames (a
    // debugger, a profiler; wasmtime's own backtraces and its handling of
    // a host function's panic do not use it), and loading an artifact
    // registered every function's entry with the unwinder, which the musl
    // build's (LLVM libunwind) does eagerly: 0.18M instructions of a
    // warm loopback ADD's 2.55M (callgrind).
    c.native_unwind_info(false);
    if let Ok(Some(preset)) = cpu_preset() {
        // Compile for the named x86-64 level instead of the features this
        // machine's CPU has: what one machine compiles, another of that
        // level loads (wasmtime checks the features when it loads an
        // artifact). The tests' VM, whose emulated CPU is not this
        // machine's, runs with artifacts this machine compiled.
        // SAFETY: `preset` is a Cranelift x86 preset (a set of ISA
        // features, no code-generation setting); an artifact compiled
        // with it is loaded only where the CPU has those features.
        if c.target(HOST_TRIPLE).is_ok() {
            unsafe {
                c.cranelift_flag_enable(preset);
            }
        }
    }
    c
}

/// The target triple wasmcni runs on (and compiles plugins for).
const HOST_TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The Cranelift preset `WASMCNI_CPU` names: `None` for `native` (or
/// unset), the features of this machine's CPU.
fn cpu_preset() -> wasmtime::Result<Option<&'static str>> {
    match crate::config::get().cpu.as_deref() {
        None | Some("native") => Ok(None),
        Some("x86-64-v2") if cfg!(target_arch = "x86_64") => Ok(Some("x86-64-v2")),
        Some(other) => Err(wasmtime::format_err!(
            "WASMCNI_CPU={other:?}: expected `native` or `x86-64-v2`"
        )),
    }
}

/// Builds the engine: [`config`]'s, the one `wasmcni install` and
/// `precompile` compile with.
pub fn engine() -> wasmtime::Result<Engine> {
    cpu_preset()?;
    Engine::new(&config())
}

/// [`config`] with the Winch baseline compiler: for a process whose plugin
/// has no precompiled artifact, which compiles it before it runs. Winch
/// compiles about 4 times faster than Cranelift (a first loopback ADD, the
/// artifact compiled and stored: ~80 ms against ~300 ms; issue 2's floor
/// is 150 ms), and its code is larger and slower. Its artifacts have a
/// fingerprint of their own, so both kinds can sit in one cache;
/// `wasmcni install` replaces them with Cranelift's.
pub fn first_run_config() -> Config {
    let mut c = config();
    c.strategy(Strategy::Winch);
    c
}

/// The engine for a process whose top-level plugin is `top`: [`engine`]
/// when `cache` holds a Cranelift artifact of `top` (what `wasmcni
/// install` leaves) and is trusted (one it would load from), else one of
/// [`first_run_config`]. A plugin the process
/// delegates to is loaded, or compiled, under the same engine.
pub fn engine_for(top: &Plugin, cache: Option<&ArtifactCache>) -> wasmtime::Result<Engine> {
    let engine = engine()?;
    // An untrusted cache is not loaded from (`load`), so its artifacts do
    // not count: without this check, every call would compile with
    // Cranelift (about four times Winch's time) and throw the code away.
    let precompiled = cache.is_some_and(|c| {
        c.path_for(top, &fingerprint(&engine)).is_file() && c.check_trusted(false).is_ok()
    });
    if precompiled {
        Ok(engine)
    } else {
        Engine::new(&first_run_config())
    }
}

/// A short, stable fingerprint of everything that makes an artifact
/// loadable by `engine`: the wasmtime version and its compilation settings.
/// Made once per process and engine (choosing the engine and loading the
/// artifact both need it, and hashing every setting is not free).
pub fn fingerprint(engine: &Engine) -> String {
    static MADE: PerProcess<String> = PerProcess::new();
    MADE.get_or_make(engine, "", || Ok(fingerprint_of(engine)))
        .unwrap_or_else(|_| fingerprint_of(engine))
}

fn fingerprint_of(engine: &Engine) -> String {
    // DefaultHasher uses fixed keys: stable for one build of wasmcni, which
    // is what an artifact must match anyway (the version is mixed in too).
    let mut h = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let mut d = Sha256::new();
    d.update(b"wasmtime-48;wasmcni-");
    d.update(env!("CARGO_PKG_VERSION").as_bytes());
    d.update(h.finish().to_le_bytes());
    hex::encode(&d.finalize()[..8])
}

/// Where artifacts live.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    /// Set once the directory passed [`ArtifactCache::check_trusted`]:
    /// choosing the engine and loading the artifact both ask, in the same
    /// process, microseconds apart.
    trusted: std::sync::OnceLock<()>,
}

/// Why the cache could not be used (the plugin is then compiled in memory).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory is writable by someone other than its owner, or owned
    /// by another user: artifacts are native code and are not loaded from it.
    #[error(
        "artifact directory {0:?} is not owned by us or is group/world-writable; not using it"
    )]
    Untrusted(PathBuf),
    /// An I/O failure.
    #[error("artifact directory {path:?}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl ArtifactCache {
    /// The cache in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> ArtifactCache {
        ArtifactCache {
            dir: dir.into(),
            trusted: std::sync::OnceLock::new(),
        }
    }

    /// The default location: `$WASMCNI_CACHE_DIR`, else `.wasmcni-cache`
    /// beside the wasmcni executable (so `wasmcni install DIR` keeps them
    /// beside the plugin links).
    pub fn default_location() -> Option<ArtifactCache> {
        if let Some(d) = &crate::config::get().cache_dir {
            return Some(ArtifactCache::new(d.clone()));
        }
        let exe = std::env::current_exe().ok()?;
        Some(ArtifactCache::new(exe.parent()?.join(".wasmcni-cache")))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact path for a plugin under an engine fingerprint (one
    /// for all the standard plugins: they are one component).
    pub fn path_for(&self, plugin: &Plugin, fingerprint: &str) -> PathBuf {
        self.dir.join(format!(
            "{}-{}-{}.cwasm",
            plugin.component_name(),
            &plugin.sha256()[..16],
            fingerprint
        ))
    }

    fn check_trusted(&self, create: bool) -> Result<(), CacheError> {
        if self.trusted.get().is_some() {
            return Ok(());
        }
        let io = |source| CacheError::Io {
            path: self.dir.clone(),
            source,
        };
        let meta = match fs::metadata(&self.dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(&self.dir)
                    .map_err(io)?;
                fs::metadata(&self.dir).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let euid = nix::unistd::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != euid || meta.permissions().mode() & 0o022 != 0 {
            return Err(CacheError::Untrusted(self.dir.clone()));
        }
        let _ = self.trusted.set(());
        Ok(())
    }

    /// Loads a verified artifact, if there is one.
    ///
    /// The file is checked with a streaming read (no copy kept), then mapped
    /// by wasmtime: code and memory images are paged in lazily from the page
    /// cache instead of being read and copied on every call.
    ///
    /// The checksum is read in full once per file version: after it passed,
    /// a stamp beside the artifact records the file's identity (inode,
    /// size, ctime). Any write to the file, or replacing it, changes that
    /// identity (ctime cannot be set from user space), so the next load
    /// verifies again.
    fn load(&self, engine: &Engine, path: &Path) -> Option<Component> {
        self.check_trusted(false).ok()?;
        let id = identity(&fs::metadata(path).ok()?);
        let stamp = stamp_path(path);
        if fs::read_to_string(&stamp).ok().as_deref() != Some(id.as_str()) {
            verify_file(path)?;
            // Best effort: without a stamp the next load verifies again.
            let _ = fs::write(&stamp, &id);
        }
        // SAFETY: the file was produced by `Engine::precompile_component`
        // with this same configuration (the fingerprint is in its name),
        // lives in a directory only we can write (checked above), is only
        // ever replaced by rename (never modified in place, so the mapping
        // stays valid), and its checksum matches, so it is not truncated or
        // corrupted. wasmtime additionally checks its header against this
        // engine, and parses the ELF by its headers, so the trailer after
        // it is not part of the artifact.
        unsafe { Component::deserialize_file(engine, path) }.ok()
    }

    /// Writes an artifact atomically (temporary file + rename).
    fn store(&self, path: &Path, artifact: &[u8]) -> Result<(), CacheError> {
        self.check_trusted(true)?;
        let io = |source| CacheError::Io {
            path: path.to_owned(),
            source,
        };
        // The pid alone is not unique where processes of several pid
        // namespaces share the cache (containers, a VM sharing it).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = path.with_extension(format!("tmp{}-{nanos}", std::process::id()));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(io)?;
        let digest = checksum(artifact);
        let res = f
            .write_all(artifact)
            .and_then(|_| f.write_all(TRAILER_MAGIC))
            .and_then(|_| f.write_all(&digest))
            .and_then(|_| f.sync_all())
            .and_then(|_| fs::rename(&tmp, path));
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res.map_err(io)
    }
}

/// A file version's identity: inode, size and change time.
fn identity(meta: &fs::Metadata) -> String {
    format!(
        "{} {} {}.{:09}",
        meta.ino(),
        meta.len(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

/// Where the verification stamp of an artifact lives.
pub fn stamp_path(artifact: &Path) -> PathBuf {
    artifact.with_extension("cwasm.ok")
}

/// Streams a file through the checksum; returns the artifact's length when
/// the trailer matches.
fn verify_file(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut f = fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let body_len = len.checked_sub(TRAILER_LEN as u64)?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut left = body_len;
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).ok()?);
        f.read_exact(&mut buf[..want]).ok()?;
        hasher.update(&buf[..want]);
        left -= want as u64;
    }
    let mut trailer = [0u8; TRAILER_LEN];
    f.read_exact(&mut trailer).ok()?;
    let (magic, digest) = trailer.split_at(8);
    (magic == TRAILER_MAGIC && hasher.digest128().to_le_bytes() == digest).then_some(body_len)
}

/// What `bytes` are, when they are not a WebAssembly component: a one-line
/// explanation naming `what` (the plugin's file or name) and what to do,
/// for the error a runtime sees instead of the compiler's (which dumps the
/// bytes it did not expect). `None`: it starts as a component does (it may
/// still fail to validate; that error names the offset).
pub fn not_a_component(what: &str, bytes: &[u8]) -> Option<String> {
    const BUILD: &str = "build it with `cargo build --target wasm32-wasip2`";
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    let why = if bytes.is_empty() {
        "is empty, not a WebAssembly component".to_owned()
    } else if starts(b"\0asm") {
        match bytes.get(4..8) {
            // Version 0x0d, layer 1: the component encoding.
            Some([0x0d, 0x00, 0x01, 0x00]) => return None,
            Some([0x01, 0x00, 0x00, 0x00]) => format!(
                "is a core WebAssembly module, not a component: {BUILD} (not wasm32-wasip1 or \
                 wasm32-unknown-unknown), or wrap it with `wasm-tools component new`"
            ),
            _ => "starts as WebAssembly but has an encoding version wasmcni does not know \
                  (not a WASI 0.2 component)"
                .to_owned(),
        }
    } else if starts(b"\x7fELF")
        && bytes.len() >= TRAILER_LEN
        && bytes[bytes.len() - TRAILER_LEN..].starts_with(TRAILER_MAGIC)
    {
        "is a precompiled wasmcni artifact (.cwasm), not a WebAssembly component: use the \
         `.wasm` file"
            .to_owned()
    } else if starts(b"\x7fELF") {
        format!("is a native ELF executable, not a WebAssembly component: {BUILD}")
    } else if starts(b"MZ")
        || starts(&[0xfe, 0xed, 0xfa, 0xce])
        || starts(&[0xfe, 0xed, 0xfa, 0xcf])
        || starts(&[0xce, 0xfa, 0xed, 0xfe])
        || starts(&[0xcf, 0xfa, 0xed, 0xfe])
        || starts(&[0xca, 0xfe, 0xba, 0xbe])
    {
        format!("is a native executable (Windows or macOS), not a WebAssembly component: {BUILD}")
    } else if starts(b"#!") {
        format!("is a script, not a WebAssembly component: {BUILD}")
    } else if bytes.trim_ascii_start().starts_with(b"(") {
        "is WebAssembly text, not a binary component: convert it with `wasm-tools parse`".to_owned()
    } else {
        format!("is not a WebAssembly component (it does not start with `\\0asm`): {BUILD}")
    };
    Some(format!("{what} {why}"))
}

/// Loads `plugin`, from its artifact if a valid one exists, else by
/// compiling it (and storing the artifact when `cache` allows).
///
/// A component is loaded once per process and engine: the standard plugins
/// are one component, so a plugin that runs another in the same process
/// (bridge its IPAM plugin, a chain its members) maps and registers it
/// once.
pub fn load(
    engine: &Engine,
    plugin: &Plugin,
    cache: Option<&ArtifactCache>,
) -> wasmtime::Result<Component> {
    static LOADED: PerProcess<Component> = PerProcess::new();
    LOADED.get_or_make(engine, plugin.sha256(), || {
        load_uncached(engine, plugin, cache)
    })
}

/// What is made once per process, engine and component (sha256): kept for
/// the process's life (a process about to exit does not tear it down).
pub(crate) struct PerProcess<T>(std::sync::Mutex<Vec<(Engine, String, T)>>);

impl<T: Clone> PerProcess<T> {
    /// None yet.
    pub(crate) const fn new() -> PerProcess<T> {
        PerProcess(std::sync::Mutex::new(Vec::new()))
    }

    /// The one made for `engine` and `sha256`, else what `make` makes
    /// (kept when it succeeds; the lock is not held while it runs).
    pub(crate) fn get_or_make(
        &self,
        engine: &Engine,
        sha256: &str,
        make: impl FnOnce() -> wasmtime::Result<T>,
    ) -> wasmtime::Result<T> {
        let found = |made: &[(Engine, String, T)]| {
            made.iter()
                .find(|(e, sha, _)| Engine::same(e, engine) && sha == sha256)
                .map(|(_, _, t)| t.clone())
        };
        if let Some(t) = found(&self.0.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(t);
        }
        let t = make()?;
        let mut made = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if found(&made).is_none() {
            made.push((engine.clone(), sha256.to_owned(), t.clone()));
        }
        Ok(t)
    }
}

fn load_uncached(
    engine: &Engine,
    plugin: &Plugin,
    cache: Option<&ArtifactCache>,
) -> wasmtime::Result<Component> {
    let fp = fingerprint(engine);
    if let Some(cache) = cache {
        let path = cache.path_for(plugin, &fp);
        if let Some(c) = cache.load(engine, &path) {
            return Ok(c);
        }
        let artifact = engine.precompile_component(plugin.wasm())?;
        match cache.store(&path, &artifact) {
            Ok(()) => log::debug!("compiled {} and stored {path:?}", plugin.name()),
            Err(e) => log::warn!("{e}"),
        }
        // SAFETY: produced just now by this engine from the plugin's bytes.
        let c = unsafe { Component::deserialize(engine, &artifact) }?;
        return Ok(c);
    }
    Component::new(engine, plugin.wasm())
}

/// Precompiles `plugin` into `cache`, replacing any artifact that does not
/// verify. Returns the artifact path.
pub fn precompile(
    engine: &Engine,
    plugin: &Plugin,
    cache: &ArtifactCache,
) -> anyhow::Result<PathBuf> {
    let path = cache.path_for(plugin, &fingerprint(engine));
    if cache.load(engine, &path).is_none() {
        let artifact = engine.precompile_component(plugin.wasm())?;
        cache.store(&path, &artifact)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_detects_truncation_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cwasm");
        let check = |bytes: &[u8]| {
            fs::write(&path, bytes).unwrap();
            verify_file(&path)
        };
        let body = vec![7u8; 200_000];
        let mut file = body.clone();
        file.extend_from_slice(TRAILER_MAGIC);
        file.extend_from_slice(&checksum(&body));
        assert_eq!(check(&file), Some(body.len() as u64));
        assert_eq!(check(&file[..file.len() - 1]), None);
        let mut flipped = file.clone();
        flipped[100_003] ^= 1;
        assert_eq!(check(&flipped), None);
        assert_eq!(check(b"short"), None);
        assert_eq!(check(b""), None);
    }

    #[test]
    fn what_is_not_a_component_is_named() {
        let says = |bytes: &[u8], needle: &str| {
            let m = not_a_component("p", bytes).expect("not a component");
            assert!(m.starts_with("p ") && m.contains(needle), "{m}");
            assert!(!m.contains('\n') && !m.contains("0x"), "{m}");
        };
        says(b"\x7fELF\x02\x01\x01rest", "native ELF executable");
        says(b"\0asm\x01\0\0\0", "core WebAssembly module");
        says(b"\0asm\x09\0\0\0", "encoding version");
        says(b"MZ\x90\0", "native executable");
        says(b"#!/bin/sh\n", "script");
        says(b"  (component)", "WebAssembly text");
        says(b"", "empty");
        let mut artifact = b"\x7fELF\x02\x01".to_vec();
        artifact.extend_from_slice(TRAILER_MAGIC);
        artifact.extend_from_slice(&[0u8; 16]);
        says(&artifact, "precompiled");
        says(b"hello", "does not start with");
        assert_eq!(not_a_component("p", b"\0asm\x0d\0\x01\0"), None);
    }

    #[test]
    fn fingerprint_is_stable_for_one_config() {
        let a = engine().unwrap();
        let b = engine().unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a).len(), 16);
    }

    #[test]
    fn a_plugin_runs_under_cranelift_once_precompiled_and_under_winch_before() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("cache"));
        let plugin = crate::plugins::bundled()
            .find(|p| p.name() == "loopback")
            .unwrap();
        let winch_engine = Engine::new(&first_run_config()).unwrap();
        let (cranelift, winch) = (fingerprint(&engine().unwrap()), fingerprint(&winch_engine));
        // Their artifacts are told apart by name.
        assert_ne!(cranelift, winch);
        let runs_under =
            |cache: Option<&ArtifactCache>| fingerprint(&engine_for(&plugin, cache).unwrap());
        assert_eq!(runs_under(Some(&cache)), winch);
        assert_eq!(runs_under(None), winch);
        // A first run's artifact does not make the next runs Cranelift's.
        precompile(&winch_engine, &plugin, &cache).unwrap();
        assert_eq!(runs_under(Some(&cache)), winch);
        // `wasmcni install`'s does.
        precompile(&engine().unwrap(), &plugin, &cache).unwrap();
        assert_eq!(runs_under(Some(&cache)), cranelift);
        // A cache that became untrusted after install is not loaded from:
        // its Cranelift artifact must not make every call compile with
        // Cranelift. (Each process sees the cache afresh: a new instance.)
        std::fs::set_permissions(cache.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(runs_under(Some(&ArtifactCache::new(cache.dir()))), winch);
        std::fs::set_permissions(cache.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            runs_under(Some(&ArtifactCache::new(cache.dir()))),
            cranelift
        );
    }
}

//! The wasmtime engine and its precompiled artifacts.
//!
//! One [`wasmtime::Config`] is used both to precompile and to load, so an
//! artifact is always for the engine that loads it. Artifacts are keyed by
//! (plugin sha256, engine fingerprint) and carry a sha256 trailer over their
//! own bytes: a stale artifact is never looked up, and a foreign, truncated
//! or corrupt one fails verification and is rebuilt, never loaded.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, OptLevel};

use crate::plugins::Plugin;

/// Magic that ends every artifact file, before the digest.
const TRAILER_MAGIC: &[u8; 8] = b"WCNIART1";
const TRAILER_LEN: usize = 8 + 32;

/// The engine configuration: component model, epoch interruption for
/// deadlines, optimised code. Used for both precompiling and loading.
pub fn config() -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    c.cranelift_opt_level(OptLevel::Speed);
    c
}

/// Builds the engine.
pub fn engine() -> wasmtime::Result<Engine> {
    Engine::new(&config())
}

/// A short, stable fingerprint of everything that makes an artifact
/// loadable by `engine`: the wasmtime version and its compilation settings.
pub fn fingerprint(engine: &Engine) -> String {
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
}

/// Why the cache could not be used (the plugin is then compiled in memory).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory is writable by someone other than its owner, or owned
    /// by another user: artifacts are native code and are not loaded from it.
    #[error("artifact directory {0:?} is not owned by us or is group/world-writable; not using it")]
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
        ArtifactCache { dir: dir.into() }
    }

    /// The default location: `$WASMCNI_CACHE_DIR`, else `.wasmcni-cache`
    /// beside the wasmcni executable (so `wasmcni install DIR` keeps them
    /// beside the plugin links).
    pub fn default_location() -> Option<ArtifactCache> {
        if let Some(d) = std::env::var_os("WASMCNI_CACHE_DIR").filter(|d| !d.is_empty()) {
            return Some(ArtifactCache::new(d));
        }
        let exe = std::env::current_exe().ok()?;
        Some(ArtifactCache::new(exe.parent()?.join(".wasmcni-cache")))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact path for a plugin under an engine fingerprint.
    pub fn path_for(&self, plugin: &Plugin, fingerprint: &str) -> PathBuf {
        self.dir.join(format!(
            "{}-{}-{}.cwasm",
            plugin.name(),
            &plugin.sha256()[..16],
            fingerprint
        ))
    }

    fn check_trusted(&self, create: bool) -> Result<(), CacheError> {
        let io = |source| CacheError::Io {
            path: self.dir.clone(),
            source,
        };
        let meta = match fs::metadata(&self.dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                fs::DirBuilder::new().recursive(true).mode(0o755).create(&self.dir).map_err(io)?;
                fs::metadata(&self.dir).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let euid = nix::unistd::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != euid || meta.permissions().mode() & 0o022 != 0 {
            return Err(CacheError::Untrusted(self.dir.clone()));
        }
        Ok(())
    }

    /// Loads a verified artifact, if there is one.
    fn load(&self, engine: &Engine, path: &Path) -> Option<Component> {
        self.check_trusted(false).ok()?;
        let bytes = fs::read(path).ok()?;
        let body = verify(&bytes)?;
        // SAFETY: `body` was produced by `Engine::precompile_component` with
        // this same configuration (the fingerprint is in the file name),
        // lives in a directory only we can write, and its sha256 trailer
        // matches, so it is not truncated or altered. wasmtime additionally
        // checks its header against this engine.
        unsafe { Component::deserialize(engine, body) }.ok()
    }

    /// Writes an artifact atomically (temporary file + rename).
    fn store(&self, path: &Path, artifact: &[u8]) -> Result<(), CacheError> {
        self.check_trusted(true)?;
        let io = |source| CacheError::Io {
            path: path.to_owned(),
            source,
        };
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(io)?;
        let digest = Sha256::digest(artifact);
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

/// Checks an artifact file's trailer and returns the artifact proper.
fn verify(bytes: &[u8]) -> Option<&[u8]> {
    let split = bytes.len().checked_sub(TRAILER_LEN)?;
    let (body, trailer) = bytes.split_at(split);
    let (magic, digest) = trailer.split_at(8);
    (magic == TRAILER_MAGIC && Sha256::digest(body).as_slice() == digest).then_some(body)
}

/// How a component was obtained (for logs and the benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Loaded from a verified artifact.
    Artifact,
    /// Compiled now, and the artifact written for next time.
    CompiledAndStored,
    /// Compiled now; no artifact could be written.
    CompiledOnly,
}

/// Loads `plugin`, from its artifact if a valid one exists, else by
/// compiling it (and storing the artifact when `cache` allows).
pub fn load(
    engine: &Engine,
    plugin: &Plugin,
    cache: Option<&ArtifactCache>,
) -> wasmtime::Result<(Component, Source)> {
    let fp = fingerprint(engine);
    if let Some(cache) = cache {
        let path = cache.path_for(plugin, &fp);
        if let Some(c) = cache.load(engine, &path) {
            return Ok((c, Source::Artifact));
        }
        let artifact = engine.precompile_component(plugin.wasm())?;
        let source = match cache.store(&path, &artifact) {
            Ok(()) => Source::CompiledAndStored,
            Err(e) => {
                log::warn!("{e}");
                Source::CompiledOnly
            }
        };
        // SAFETY: produced just now by this engine from the plugin's bytes.
        let c = unsafe { Component::deserialize(engine, &artifact) }?;
        return Ok((c, source));
    }
    Ok((Component::new(engine, plugin.wasm())?, Source::CompiledOnly))
}

/// Precompiles `plugin` into `cache`, replacing any artifact that does not
/// verify. Returns the artifact path.
pub fn precompile(engine: &Engine, plugin: &Plugin, cache: &ArtifactCache) -> anyhow::Result<PathBuf> {
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
        let body = b"artifact bytes".to_vec();
        let mut file = body.clone();
        file.extend_from_slice(TRAILER_MAGIC);
        file.extend_from_slice(&Sha256::digest(&body));
        assert_eq!(verify(&file), Some(&body[..]));
        assert_eq!(verify(&file[..file.len() - 1]), None);
        let mut flipped = file.clone();
        flipped[3] ^= 1;
        assert_eq!(verify(&flipped), None);
        assert_eq!(verify(b"short"), None);
    }

    #[test]
    fn fingerprint_is_stable_for_one_config() {
        let a = engine().unwrap();
        let b = engine().unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a).len(), 16);
    }
}

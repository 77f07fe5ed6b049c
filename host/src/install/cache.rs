//! The artifact cache the installed plugins load from: precompiled
//! (`wasmcni precompile`, and install after linking), its stale artifacts
//! removed.

use std::fs;
use std::path::PathBuf;

use anyhow::Context;

use crate::engine::{self, ArtifactCache};
use crate::plugins::{self, Plugin};

/// Removes artifacts in `cache` for other plugin builds or engines.
pub(super) fn remove_stale(
    cache: &ArtifactCache,
    engine: &wasmtime::Engine,
    keep: &[Plugin],
) -> anyhow::Result<()> {
    let fp = engine::fingerprint(engine);
    let mut wanted: Vec<PathBuf> = keep.iter().map(|p| cache.path_for(p, &fp)).collect();
    wanted.extend(wanted.clone().iter().map(|p| engine::stamp_path(p)));
    let entries = match fs::read_dir(cache.dir()) {
        // Nothing was precompiled (`--only wasmcni-chain`): nothing stale.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r.with_context(|| format!("reading the artifact cache {:?}", cache.dir()))?,
    };
    for entry in entries {
        let path = entry?.path();
        let ours = path.extension().is_some_and(|e| e == "cwasm" || e == "ok");
        if ours && !wanted.contains(&path) {
            fs::remove_file(&path).with_context(|| format!("removing stale artifact {path:?}"))?;
        }
    }
    Ok(())
}

/// Precompiles the standard plugins and `extra` into the cache.
pub fn precompile(extra: &[PathBuf], cache_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let cache = match cache_dir {
        Some(d) => ArtifactCache::new(d),
        None => ArtifactCache::default_location().context("no cache directory")?,
    };
    let engine = engine::engine()?;
    let mut all: Vec<Plugin> = plugins::bundled().collect();
    for path in extra {
        all.push(Plugin::from_path(path)?);
    }
    for p in &all {
        println!(
            "{}: {}",
            p.name(),
            engine::precompile(&engine, p, &cache)?.display()
        );
    }
    Ok(())
}

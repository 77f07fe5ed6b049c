//! `wasmcni install` and `wasmcni precompile`.

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::engine::{self, ArtifactCache};
use crate::plugins::{self, Plugin};

/// A marker carried in the wasmcni executable so `install` can recognise
/// its own binary in a bin dir.
#[used]
static MARKER: [u8; 32] = *b"wasmcni-multicall-binary-marker1";

/// What is at a path we want to write.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    Nothing,
    Ours,
    Foreign,
}

fn existing(path: &Path, link_target: Option<&str>) -> anyhow::Result<Existing> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Nothing),
        Err(e) => return Err(e).with_context(|| format!("inspecting {path:?}")),
    };
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path)?;
        return Ok(if link_target.is_some_and(|t| target == Path::new(t)) {
            Existing::Ours
        } else {
            Existing::Foreign
        });
    }
    if link_target.is_none() && meta.is_file() && contains_marker(path)? {
        return Ok(Existing::Ours);
    }
    Ok(Existing::Foreign)
}

fn contains_marker(path: &Path) -> anyhow::Result<bool> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(512 << 20)
        .read_to_end(&mut bytes)?;
    Ok(bytes.windows(MARKER.len()).any(|w| w == MARKER))
}

/// Installs wasmcni into `dir` as a CNI bin dir. Idempotent; refuses to
/// replace a file that is not its own unless `force`.
pub fn install(dir: &Path, force: bool) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {dir:?}"))?;
    let dir = dir.canonicalize()?;
    let bin = dir.join(crate::cli::SELF_NAME);
    let bundled: Vec<Plugin> = plugins::bundled().collect();

    // Check everything before changing anything.
    let mut plan = vec![(bin.clone(), existing(&bin, None)?)];
    for p in &bundled {
        let path = dir.join(p.name());
        let state = existing(&path, Some(crate::cli::SELF_NAME))?;
        plan.push((path, state));
    }
    let foreign: Vec<&PathBuf> = plan
        .iter()
        .filter(|(_, s)| *s == Existing::Foreign)
        .map(|(p, _)| p)
        .collect();
    if !foreign.is_empty() && !force {
        bail!(
            "refusing to replace files that are not wasmcni's own (use --force): {}",
            foreign
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    let exe = std::env::current_exe()?.canonicalize()?;
    if exe != bin {
        let tmp = dir.join(format!(".wasmcni.tmp{}", std::process::id()));
        fs::copy(&exe, &tmp).with_context(|| format!("copying {exe:?} to {tmp:?}"))?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
        fs::rename(&tmp, &bin)?;
    }
    for (path, state) in plan.iter().skip(1) {
        if *state == Existing::Ours {
            continue;
        }
        if *state == Existing::Foreign {
            fs::remove_file(path).with_context(|| format!("removing {path:?}"))?;
        }
        std::os::unix::fs::symlink(crate::cli::SELF_NAME, path)
            .with_context(|| format!("linking {path:?}"))?;
    }

    // The cache the installed plugins will load from: `$WASMCNI_CACHE_DIR`
    // if set (as it is read at run time), else the one beside them, which
    // is the install's own to prune.
    let shared = std::env::var_os("WASMCNI_CACHE_DIR").filter(|d| !d.is_empty());
    let cache = ArtifactCache::new(match &shared {
        Some(d) => std::path::PathBuf::from(d),
        None => dir.join(".wasmcni-cache"),
    });
    let engine = engine::engine()?;
    for p in &bundled {
        let artifact = engine::precompile(&engine, p, &cache)?;
        println!(
            "{} -> wasmcni ({})",
            dir.join(p.name()).display(),
            artifact.display()
        );
    }
    if shared.is_none() {
        remove_stale(&cache, &engine, &bundled)?;
    }
    Ok(())
}

/// Removes artifacts in `cache` for other plugin builds or engines.
fn remove_stale(
    cache: &ArtifactCache,
    engine: &wasmtime::Engine,
    keep: &[Plugin],
) -> anyhow::Result<()> {
    let fp = engine::fingerprint(engine);
    let mut wanted: Vec<PathBuf> = keep.iter().map(|p| cache.path_for(p, &fp)).collect();
    wanted.extend(wanted.clone().iter().map(|p| engine::stamp_path(p)));
    for entry in fs::read_dir(cache.dir())? {
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

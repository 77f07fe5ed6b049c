//! The bin dir: where it is, which standard names install links to
//! wasmcni there, and what `--force` keeps of what a link or the
//! executable replaces.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::backup;
use super::network::Network;
use super::Options;
use crate::plugins::Plugin;

/// The standard names install links: those `--only` lists, the chain
/// runner's included (a node that chose which names wasmcni takes gets no
/// other); without `--only`, those the networks it installs name (their
/// types, and the members of a `wasmcni-chain`), else every standard
/// plugin and the chain runner.
pub(super) fn link_names<'a>(
    opts: &'a Options,
    networks: &'a [Network],
    bundled: &'a [Plugin],
) -> anyhow::Result<Vec<&'a str>> {
    let standard =
        |name: &str| name == crate::chain::NAME || bundled.iter().any(|p| p.name() == name);
    let Some(only) = &opts.only else {
        if networks.is_empty() {
            return Ok(bundled
                .iter()
                .map(Plugin::name)
                .chain([crate::chain::NAME])
                .collect());
        }
        let mut names: Vec<&str> = Vec::new();
        let named = networks.iter().flat_map(|n| &n.types);
        for name in named.flat_map(|t| std::iter::once(&t.ty).chain(&t.members)) {
            if standard(name) && !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        return Ok(names);
    };
    let mut names = Vec::new();
    for name in only.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if !standard(name) {
            bail!(
                "--only: {name:?} is not a standard plugin; the standard plugins are: {} \
                 (and the chain runner, {})",
                bundled
                    .iter()
                    .map(Plugin::name)
                    .collect::<Vec<_>>()
                    .join(", "),
                crate::chain::NAME
            );
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        bail!("--only: no plugin named (give standard plugin names, comma-separated)");
    }
    Ok(names)
}

/// Before `--force` replaces `path` in the bin dir (`foreign`: it is not
/// wasmcni's), keeps it ([`backup::keep`]): what it was (`a native
/// binary`, `a link to X`), and where the backup is.
pub(super) fn keep_foreign(
    dir: &Path,
    foreign: bool,
    path: &Path,
) -> anyhow::Result<Option<(String, PathBuf)>> {
    if !foreign {
        return Ok(None);
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{path:?}: no file name"))?;
    let meta = fs::symlink_metadata(path).with_context(|| format!("inspecting {path:?}"))?;
    let what = if meta.file_type().is_symlink() {
        format!(
            "a link to {}",
            fs::read_link(path).unwrap_or_default().display()
        )
    } else if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
        "a native binary".to_owned()
    } else {
        "a file that was not wasmcni's".to_owned()
    };
    Ok(Some((what, backup::keep(dir, name)?)))
}

/// The bin dir `given`, resolved: its canonical path if it exists, else
/// its absolute path (made only once install writes).
pub(super) fn bin_dir_path(given: &Path) -> anyhow::Result<PathBuf> {
    match given.canonicalize() {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::path::absolute(given).with_context(|| format!("resolving {given:?}"))
        }
        Err(e) => Err(e).with_context(|| format!("resolving {given:?}")),
    }
}

//! What `--force` replaced, kept to be put back.
//!
//! Before install replaces a file that is not its own (a native plugin in
//! the bin dir, a conflist or policy someone else wrote), it copies it to
//! `.wasmcni-backup/NAME` in the same directory: a file with its bytes
//! and mode, a symlink as a symlink. `wasmcni uninstall`, and `install
//! --prune` for a link it removes, rename the backup back over what
//! install put there: one step, so a runtime looking the name up finds
//! wasmcni's or the original, never nothing. Runtimes and wasmcni read no
//! hidden directory (libcni skips directories in the conf dir; a policy
//! dir entry must end in `.json`; `list` skips hidden names).

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::files::{create_dir, create_file, plain, write_atomic_with};

/// The directory, in each directory install writes to, that holds what
/// `--force` replaced there.
pub const BACKUP_DIR: &str = ".wasmcni-backup";

/// Where `dir/name`'s backup is.
pub(crate) fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(BACKUP_DIR).join(name)
}

/// Whether `dir/name` has a backup.
pub(crate) fn has(dir: &Path, name: &str) -> bool {
    fs::symlink_metadata(path(dir, name)).is_ok()
}

/// Copies `dir/name` (a file, its mode kept; or a symlink) to its backup,
/// replacing an older backup of that name (what was there last is what
/// uninstall puts back). Returns the backup's path.
pub(crate) fn keep(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let from = dir.join(name);
    let backups = dir.join(BACKUP_DIR);
    match fs::symlink_metadata(&backups) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("{backups:?} is not a directory: not keeping {from:?} there"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_dir(&backups)?;
        }
        Err(e) => return Err(e).with_context(|| format!("inspecting {backups:?}")),
    }
    let to = backups.join(name);
    let meta = fs::symlink_metadata(&from).with_context(|| format!("inspecting {from:?}"))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(&from).with_context(|| format!("reading {from:?}"))?;
        write_atomic_with(&to, |tmp| std::os::unix::fs::symlink(&target, tmp))?;
    } else if meta.is_file() {
        let mode = meta.permissions().mode() & 0o7777;
        // Never through a symlink put there since it was looked at.
        let src = fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&from)
            .with_context(|| format!("reading {from:?}"))?;
        write_atomic_with(&to, |tmp| {
            use std::io::Seek;
            (&src).rewind()?;
            create_file(tmp, mode, &mut &src)
        })?;
    } else {
        bail!("{from:?} is neither a file nor a link: install replaces no such thing");
    }
    Ok(to)
}

/// Renames `dir/name`'s backup back over `dir/name`; `None` if it has
/// none.
pub(crate) fn restore(dir: &Path, name: &str) -> anyhow::Result<Option<PathBuf>> {
    if !has(dir, name) {
        return Ok(None);
    }
    let backup = path(dir, name);
    let to = dir.join(name);
    fs::rename(&backup, &to).with_context(|| format!("restoring {to:?} from {backup:?}"))?;
    Ok(Some(backup))
}

/// The names `dir` has backups of.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir.join(BACKUP_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| plain(n))
        .collect();
    names.sort();
    names
}

/// Removes `dir`'s backup directory once it holds nothing.
pub(crate) fn tidy(dir: &Path) {
    let _ = fs::remove_dir(dir.join(BACKUP_DIR));
}

//! Whether a policy can be trusted: the file, and every directory on its
//! path (as given, and as resolved through symlinks), must belong to root
//! (or the user running wasmcni) and not be writable by group or others,
//! as sshd's StrictModes asks; a policy anyone can edit or replace grants
//! nothing.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::PolicyError;

/// The largest policy file wasmcni reads.
const MAX_POLICY_FILE: u64 = 1 << 20;

/// Reads a policy file if it is trusted. A missing file is `None` unless
/// `required`.
pub(super) fn read_trusted(path: &Path, required: bool) -> Result<Option<String>, PolicyError> {
    let io = |source| PolicyError::Io {
        path: path.to_owned(),
        source,
    };
    let untrusted = |why: String| PolicyError::Untrusted {
        path: path.to_owned(),
        why,
    };
    // As sshd's StrictModes: whoever can write a directory on the way to
    // the file can replace it (or a symlink to it), so every directory the
    // path passes through, following each symlink, must be as trusted as
    // the file; checked before the file is opened.
    let absolute = std::path::absolute(path).map_err(io)?;
    let real = match resolve_trusted(&absolute) {
        Ok(p) => p,
        Err(Resolve::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok(None)
        }
        Err(Resolve::Io(e)) => return Err(io(e)),
        Err(Resolve::Untrusted(why)) => return Err(untrusted(why)),
    };
    // Never blocks (a FIFO), never follows a symlink put there since.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&real)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    trusted_owner("the file", meta.uid(), meta.mode()).map_err(untrusted)?;
    if meta.len() > MAX_POLICY_FILE {
        return Err(untrusted(format!("larger than {MAX_POLICY_FILE} bytes")));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_POLICY_FILE), &mut text)
        .map_err(io)?;
    Ok(Some(text))
}

/// Why a path could not be resolved.
pub(super) enum Resolve {
    Io(std::io::Error),
    Untrusted(String),
}

/// Resolves absolute `path` component by component, following symlinks
/// (at most 40), and checks every directory it passes through, those a
/// symlink leads through included. Returns the path without symlinks.
pub(super) fn resolve_trusted(path: &Path) -> Result<PathBuf, Resolve> {
    use std::path::Component;
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    let check_dir = |dir: &Path| -> Result<(), Resolve> {
        let meta = std::fs::metadata(dir).map_err(Resolve::Io)?;
        trusted_owner(
            &format!("directory {}", dir.display()),
            meta.uid(),
            meta.mode(),
        )
        .map_err(Resolve::Untrusted)
    };
    check_dir(&at)?;
    while let Some(name) = pending.pop() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let meta = std::fs::symlink_metadata(&next).map_err(Resolve::Io)?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return Err(Resolve::Untrusted("too many symlinks".into()));
            }
            let target = std::fs::read_link(&next).map_err(Resolve::Io)?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for c in target.components().rev() {
                match c {
                    Component::Normal(n) => pending.push(n.to_owned()),
                    Component::ParentDir => pending.push("..".into()),
                    _ => {}
                }
            }
            continue;
        }
        at = next;
        if meta.is_dir() {
            check_dir(&at)?;
        }
    }
    Ok(at)
}

/// Whether directory `path` (or, while it does not exist yet, the nearest
/// directory above it) and every directory on the way to it, symlinks
/// followed, are root's (or the user's running wasmcni) and not writable
/// by group or others, as for a policy file: the reason if not.
pub fn check_trusted_dir(path: &Path) -> Result<(), String> {
    let mut at = path.to_path_buf();
    while !at.exists() {
        if !at.pop() {
            break;
        }
    }
    match resolve_trusted(&at) {
        Ok(_) => Ok(()),
        Err(Resolve::Untrusted(why)) => Err(why),
        Err(Resolve::Io(e)) => Err(format!("{}: {e}", at.display())),
    }
}

/// Whether `uid` and `mode` are those of a file only root (or the user
/// running wasmcni) can change; the reason if not.
fn trusted_owner(what: &str, uid: u32, mode: u32) -> Result<(), String> {
    let euid = nix::unistd::geteuid().as_raw();
    if uid != 0 && uid != euid {
        return Err(format!("{what} is owned by uid {uid}"));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{what} is writable by group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

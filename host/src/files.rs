//! The file primitives install writes and reads with: a replacement in one
//! step (never through what is at a temporary name), exclusive creation,
//! the plain names it writes under, and bounded reads of what it is given.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context};

/// A plain file name: no path separator, no newline, not hidden.
pub(crate) fn plain(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\n', '\r', '\0'])
        && name.len() <= 255
}

/// Replaces `path` atomically: `create` makes the new file or symlink at
/// a fresh temporary name beside it, which is then renamed over `path`
/// (a runtime looking `path` up at any moment finds the old or the new,
/// never nothing). `create` must create exclusively (`O_EXCL`,
/// `symlink`), so that whatever is already at a temporary name (another
/// writer's file, a planted symlink) is never followed nor removed: such a
/// name is skipped for the next.
pub(crate) fn write_atomic_with(
    path: &Path,
    create: impl Fn(&Path) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for _ in 0..64 {
        // Hidden and with a suffix no CNI or policy loader reads. The pid
        // alone is not unique across pid namespaces (every installer is
        // pid 1): the time and a counter make it so, and the exclusive
        // creation makes a name that is taken harmless.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(
            ".{file}.wasmcni-tmp{}-{nanos}-{n}",
            std::process::id()
        ));
        match create(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                // Only ever ours: it did not exist before.
                let _ = fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("writing {path:?} (through {tmp:?})"));
            }
        }
        if let Err(e) = fs::rename(&tmp, path) {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("replacing {path:?} with {tmp:?}"));
        }
        return Ok(());
    }
    bail!("writing {path:?}: could not find a free temporary name in {dir:?}")
}

/// Creates `path` exclusively (never through a symlink) with `mode` and
/// fills it from `bytes`.
pub(crate) fn create_file(path: &Path, mode: u32, bytes: &mut dyn Read) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    std::io::copy(bytes, &mut f)?;
    // The umask may have narrowed the mode.
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    f.sync_all()
}

/// Writes `path` atomically (a temporary file beside it, then rename),
/// mode 0644.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic_with(path, |tmp| create_file(tmp, 0o644, &mut &bytes[..]))
}

pub(crate) fn create_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .with_context(|| format!("creating {dir:?}"))
}

/// Reads a file given on the command line, with a size bound.
pub(crate) fn read_input(path: &Path, what: &str, max: u64) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .with_context(|| format!("reading {what} {path:?}"))?;
    if bytes.len() as u64 > max {
        bail!("{what} {path:?} is larger than {} KiB", max >> 10);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_never_goes_through_what_is_at_a_temporary_name() {
        let d = tempfile::tempdir().unwrap();
        let d = d.path();
        fs::write(d.join("victim"), b"victim").unwrap();
        let target = d.join("f");
        std::os::unix::fs::symlink(d.join("victim"), &target).unwrap();
        // The first temporary name is taken (a symlink planted there, as
        // by someone who guessed it): it is neither written through nor
        // removed, and the next name is used.
        let planted = std::cell::RefCell::new(Vec::new());
        write_atomic_with(&target, |tmp| {
            if planted.borrow().is_empty() {
                std::os::unix::fs::symlink(d.join("victim"), tmp).unwrap();
                planted.borrow_mut().push(tmp.to_owned());
            }
            create_file(tmp, 0o644, &mut &b"new"[..])
        })
        .unwrap();
        assert_eq!(fs::read(d.join("victim")).unwrap(), b"victim");
        let planted = &planted.borrow()[0];
        assert_eq!(fs::read_link(planted).unwrap(), d.join("victim"));
        // The target (a symlink) was replaced, not followed.
        assert!(fs::symlink_metadata(&target).unwrap().is_file());
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // A failure removes only its own temporary.
        let err = write_atomic_with(&d.join("g"), |tmp| {
            fs::write(tmp, b"partial")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("disk full"), "{err:#}");
        let mut names: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
    }
}

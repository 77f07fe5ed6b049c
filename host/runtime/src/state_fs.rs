//! The state root's file primitives, shared by the attachment records
//! ([`crate::record`]) and plugin state ([`crate::plugin_state`]): a name
//! as a path component that cannot reach outside its directory, bounded
//! reads, whole-file writes by rename (and in place, for a cache),
//! removal that prunes emptied
//! directories, and the walk over `<network>/<container id>/<ifname>/`.
//! The state root is handed in; nothing here knows what a record says.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, OpenOptions};

/// A path component for `name`: itself if it is a plain file name
/// (letters, digits, `_`, `.`, `-`, not starting with `.`, at most 128
/// bytes), else `#` and a digest.
pub(crate) fn component(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if plain {
        name.to_owned()
    } else {
        use sha2::{Digest, Sha256};
        format!("#{}", hex::encode(&Sha256::digest(name.as_bytes())[..20]))
    }
}

/// The file `path` below `root`, at most `max` bytes of it; `None` if
/// either is missing.
///
/// # Ambient Authority
/// Opens `root` by path (the host's state root).
pub(crate) fn read_bounded(root: &Path, path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let root = match Dir::open_ambient_dir(root, ambient_authority()) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let file = match root.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut text = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(file, max), &mut text)?;
    Ok(Some(text))
}

/// Writes `text` as `dir/file` below `root` whole: a temporary file,
/// renamed over the old one (directories 0700, the file 0600). A `kill -9`
/// at any instant leaves the old file or the new one. Nothing is synced to
/// disk, as for the IPAM state ([`crate::ipam`]) and the reference: a kill
/// cannot lose the page cache, a sync would cost every ADD a disk flush,
/// and after a power loss the kernel state a record speaks of is gone
/// anyway; a file a crash left empty or torn does not parse, and is set
/// aside ([`crate::record::Location::load_or_quarantine`]).
///
/// # Ambient Authority
/// Creates `root` by path (the host's state root).
pub(crate) fn write_atomic(root: &Path, dir: &Path, file: &str, text: &[u8]) -> io::Result<()> {
    let dir = state_dir(root, dir)?;
    let tmp = format!(".{file}.tmp");
    let mut f = create_fresh(&dir, &tmp, 0o600)?;
    f.write_all(text)?;
    drop(f);
    dir.rename(&tmp, &dir, file)
}

/// Creates file `name` of `dir` (`mode`) holding `data`, whole or not at
/// all; false if the name exists. The data goes into an unnamed file
/// (`O_TMPFILE`), which is then linked under its name (`linkat`, which
/// fails if the name exists, as `O_EXCL` does): a kill at any instant,
/// or a full file system, leaves no file or the whole one, never an
/// empty or partial one under the name. The kill points for tests are
/// `FAULT:opened`, `FAULT:written` and `FAULT:linked`
/// ([`crate::fault::at`]). On a file system without `O_TMPFILE`, a named
/// temporary file (`tmp_prefix`, the name, `.tmp`) is linked, then removed (a
/// kill may leave that temporary file, never a partial `name`).
pub(crate) fn create_whole(
    dir: &Dir,
    name: &str,
    data: &[u8],
    mode: u32,
    fault: &str,
    tmp_prefix: &str,
) -> io::Result<bool> {
    use nix::fcntl::{AtFlags, OFlag};
    use std::os::fd::AsFd;
    let dirfd = dir.as_fd();
    match nix::fcntl::openat(
        dirfd,
        ".",
        OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::from_bits_truncate(mode),
    ) {
        Ok(fd) => {
            let mut f = std::fs::File::from(fd);
            crate::fault::at(fault, "opened");
            f.write_all(data)?;
            crate::fault::at(fault, "written");
            // Give the finished file its name; EEXIST if taken.
            let linked =
                nix::unistd::linkat(&f, "", dirfd, name, AtFlags::AT_EMPTY_PATH).or_else(|_| {
                    // Without CAP_DAC_READ_SEARCH, through /proc.
                    let proc = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
                    nix::unistd::linkat(
                        nix::fcntl::AT_FDCWD,
                        proc.as_str(),
                        dirfd,
                        name,
                        AtFlags::AT_SYMLINK_FOLLOW,
                    )
                });
            match linked {
                Ok(()) => {
                    crate::fault::at(fault, "linked");
                    Ok(true)
                }
                Err(nix::errno::Errno::EEXIST) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        Err(nix::errno::Errno::EOPNOTSUPP | nix::errno::Errno::EISDIR) => {
            // Not ending as `name` does: a walk that picks files by their
            // extension (`.intent`) must not take it for one.
            let tmp = format!("{tmp_prefix}{name}.tmp");
            let mut f = create_fresh(dir, &tmp, mode)?;
            let written = f.write_all(data);
            let r = written.and_then(|()| dir.hard_link(&tmp, dir, name));
            let _ = dir.remove_file(&tmp);
            match r {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// A temporary file `name` of `dir` made anew (`mode`): whatever a killed
/// writer or anyone else left under the name is removed first, and the
/// file is created with `O_EXCL`, so a link planted in between is refused,
/// never written through.
pub(crate) fn create_fresh(dir: &Dir, name: &str, mode: u32) -> io::Result<cap_std::fs::File> {
    match dir.remove_file(name) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    {
        use cap_std::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    dir.open_with(name, &opts)
}

/// Writes `text` as `dir/file` below `root` over the file's old bytes and
/// then cuts the file to its length: for a file that is only a cache, one
/// whose torn or mixed content (a kill between the write and the cut, a
/// power loss) fails to parse or fails its own checks and is rebuilt (the
/// IPAM owner index). Why not by rename: replacing a file frees its block,
/// and on a file system mounted with `discard` (these machines' ext4)
/// freeing a block is a synchronous discard inside the `rename`: 0.15 ms
/// median, up to 100 ms measured. A name that is a symlink, or a file
/// that is not a regular one with one link, is replaced by rename
/// ([`write_atomic`]): the write never goes through it.
///
/// # Ambient Authority
/// Creates `root` by path (the host's state root).
pub(crate) fn write_in_place(root: &Path, dir: &Path, file: &str, text: &[u8]) -> io::Result<()> {
    let d = state_dir(root, dir)?;
    let Some(f) = open_in_place(&d, file, 0o600)? else {
        return write_atomic(root, dir, file, text);
    };
    use std::os::unix::fs::FileExt;
    f.write_all_at(text, 0)?;
    f.set_len(text.len() as u64)
}

/// `file` of `dir` opened for writing in place (made, `mode`, when
/// missing), or `None` if it must be replaced instead: a symlink, a FIFO,
/// a device, anything but a regular file with one link (writing through a
/// link would change another name's contents). One `openat` with
/// `O_NOFOLLOW` on the directory's descriptor, never a path resolution of
/// cap-std's own (which, where `openat2` is missing or refused, follows a
/// final symlink that stays inside the directory); `O_NONBLOCK`: a FIFO
/// never blocks the open, under a lock every ADD of the network waits
/// for.
pub(crate) fn open_in_place(dir: &Dir, file: &str, mode: u32) -> io::Result<Option<std::fs::File>> {
    use nix::errno::Errno;
    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::{Mode, SFlag};
    use std::os::fd::AsFd;
    if file.is_empty() || file.contains('/') || file == "." || file == ".." {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad file name"));
    }
    // Not even opened when it is something else already (a device's open
    // may act).
    match nix::sys::stat::fstatat(dir.as_fd(), file, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG => {
            return Ok(None)
        }
        Ok(_) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = match nix::fcntl::openat(
        dir.as_fd(),
        file,
        OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode),
    ) {
        Ok(fd) => fd,
        // Swapped for a symlink, a FIFO or a directory since the check.
        Err(Errno::ELOOP | Errno::ENXIO | Errno::EISDIR | Errno::ETXTBSY) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let f = std::fs::File::from(fd);
    let meta = f.metadata()?;
    use std::os::unix::fs::MetadataExt;
    Ok((meta.file_type().is_file() && meta.nlink() == 1).then_some(f))
}

/// Directory `dir` below `root`, each made when missing (`dir` and those
/// above it below `root` private to root: 0700). Opened first, made only
/// when that fails: an ADD's writes after its first find them there.
///
/// # Ambient Authority
/// Opens (and makes) `root` by path (the host's state root).
pub(crate) fn state_dir(root: &Path, dir: &Path) -> io::Result<Dir> {
    let root = match Dir::open_ambient_dir(root, ambient_authority()) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(root)?;
            Dir::open_ambient_dir(root, ambient_authority())?
        }
        r => r?,
    };
    match root.open_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut builder = DirBuilder::new();
            builder.recursive(true);
            {
                use cap_std::fs::DirBuilderExt;
                builder.mode(0o700);
            }
            root.create_dir_with(dir, &builder)?;
            root.open_dir(dir)
        }
        r => r,
    }
}

/// Removes `dir/file` below `root`, and the directories above it it
/// leaves empty, up to (not including) `top`.
///
/// # Ambient Authority
/// Opens `root` by path (the host's state root).
pub(crate) fn remove_pruning(root: &Path, dir: &Path, file: &str, top: &Path) -> io::Result<()> {
    let root = match Dir::open_ambient_dir(root, ambient_authority()) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match root.remove_file(dir.join(file)) {
        // Gone already: the directories above may still be emptied (a
        // record's intent log removed just before).
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // A replacement a kill cut off before its rename ([`write_atomic`]'s
    // temporary file): it goes with the file (the hour soak found one
    // left, and with it the attachment's directory, by a killed ADD).
    let _ = root.remove_file(dir.join(format!(".{file}.tmp")));
    let mut d = dir.to_owned();
    while d.parent().is_some() && d != top {
        // Not empty (another plugin's file, another attachment): stop.
        if root.remove_dir(&d).is_err() {
            break;
        }
        d.pop();
    }
    Ok(())
}

/// The files with one of `exts` three levels below `dir` (container,
/// ifname, file).
pub(crate) fn walk(dir: &Path, exts: &[&str], errors: &mut Vec<String>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut level = vec![dir.to_owned()];
    for depth in 0..3 {
        let mut next = Vec::new();
        for d in level {
            let entries = match std::fs::read_dir(&d) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    errors.push(format!("{}: {e}", d.display()));
                    continue;
                }
            };
            for e in entries.flatten() {
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                if depth < 2 && ft.is_dir() {
                    next.push(p);
                } else if depth == 2
                    && ft.is_file()
                    && p.extension().is_some_and(|x| exts.iter().any(|e| x == *e))
                {
                    out.push(p);
                }
            }
        }
        level = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store killed between its temporary file and the rename leaves
    /// `.FILE.tmp`; removing the file takes it too, and the attachment's
    /// directories with it.
    #[test]
    fn removing_a_file_takes_a_replacement_a_kill_cut_off() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = Path::new("attachments/net/ctr/eth0");
        write_atomic(root.path(), dir, "bridge.json", b"{}").expect("store");
        std::fs::write(root.path().join(dir).join(".bridge.json.tmp"), b"{").expect("tmp");
        remove_pruning(root.path(), dir, "bridge.json", Path::new("attachments")).expect("remove");
        assert!(
            !root.path().join("attachments/net").exists(),
            "left: {:?}",
            std::fs::read_dir(root.path().join(dir))
                .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        );
    }
}

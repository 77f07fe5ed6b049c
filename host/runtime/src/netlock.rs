//! A per-network lock between concurrent invocations on one node, for the
//! two moments that race on a link the network's attachments share: a
//! plugin enslaving its link to the shared bridge, and the undo of a failed
//! ADD deleting the bridge it created (only if no other attachment's link
//! is enslaved to it by then). Whichever comes second sees the other's
//! result: the undo keeps a bridge that gained a port, and the enslaving
//! fails cleanly (ENODEV) on a bridge that is gone.
//!
//! The lock is `flock` on `<run dir>/net/<network>.lock` (`$WASMCNI_RUN_DIR`,
//! default `/run/wasmcni`, a tmpfs that starts empty at boot).
//!
//! Two more are per namespace (keyed by its nsfs inode): the settings
//! lock ([`sysctl_lock`]), and the routing-table lock ([`tables_lock`])
//! a plugin takes before it chooses a table.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

/// The default run directory.
pub const DEFAULT_RUN_DIR: &str = "/run/wasmcni";

/// A held network lock; released when dropped.
#[derive(Debug)]
pub struct NetworkLock {
    _file: File,
}

/// Takes the lock of `network` (blocking: it is held only around one
/// netlink call). `None` if the network name cannot name a file or the
/// lock cannot be taken: the caller goes on unlocked (the race it closes
/// is narrow, and refusing would fail every ADD on a read-only /run).
pub fn lock(network: &str) -> Option<NetworkLock> {
    if !crate::ipam::valid_network_name(network) {
        crate::netlink::note_change();
        return None;
    }
    lock_named(network)
}

/// The lock that serializes writes of settings that apply to all links of
/// the namespace with inode `ino` (see `caps::sysctl`): concurrent ADDs
/// that all find `ip_forward` off then write it once, not each with its
/// own record of the whole settings tree.
pub fn sysctl_lock(ino: u64) -> Option<NetworkLock> {
    lock_named(&format!(".sysctl-{ino}"))
}

/// The lock that serializes, in the namespace with inode `ino`, making a
/// VRF with the check of whether it brought the `l3mdev` rules, and the
/// undo that deletes them with the check that no other VRF needs them.
pub fn l3mdev_lock(ino: u64) -> Option<NetworkLock> {
    lock_named(&format!(".l3mdev-{ino}"))
}

/// The routing-table lock of the namespace with inode `ino` (the route
/// interface's `lock-tables`), waiting at most until `deadline`: its
/// file, which holds the lock until it is closed (the invocation keeps it
/// to its end). Unlike the locks above, a lock that cannot be taken is
/// the caller's error (`io::ErrorKind::TimedOut` at the deadline), with
/// the file's path: going on unlocked would let two interfaces of one
/// container route by one table.
pub fn tables_lock(ino: u64, deadline: Instant) -> Result<File, (PathBuf, io::Error)> {
    let path = lock_path(&format!(".tables-{ino}"));
    lock_until(&path, deadline).map_err(|e| (path, e))
}

/// The lock under which the first ADD of a boot reconciles the records of
/// state root `root` (`<run dir>/net/.reconcile-<hash of the root's
/// path>.lock`), waiting at most until `deadline`. A file in the run
/// directory (0700), never the state root itself: anyone who may read a
/// directory may `flock` it, and so could hold every first ADD of a boot.
pub fn reconcile_lock(
    root: &std::path::Path,
    deadline: Instant,
) -> Result<File, (PathBuf, io::Error)> {
    use sha2::{Digest, Sha256};
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(root.as_os_str().as_bytes());
    let path = lock_path(&format!(".reconcile-{}", hex::encode(&digest[..8])));
    lock_until(&path, deadline).map_err(|e| (path, e))
}

/// `flock(LOCK_EX)` on the lock file `path`, waiting at most until
/// `deadline`.
fn lock_until(path: &std::path::Path, deadline: Instant) -> io::Result<File> {
    let file = open_lock(path)?;
    crate::ipam::take_lock(&file, deadline)?;
    Ok(file)
}

/// The run directory (`$WASMCNI_RUN_DIR`, else [`DEFAULT_RUN_DIR`]).
pub(crate) fn run_dir() -> PathBuf {
    crate::config::get()
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR))
}

/// `<run dir>/net/<name>.lock`.
fn lock_path(name: &str) -> PathBuf {
    run_dir().join("net").join(format!("{name}.lock"))
}

/// Opens (creates) a lock file, and the run directory's `net/` (0700).
fn open_lock(path: &std::path::Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

fn lock_named(network: &str) -> Option<NetworkLock> {
    // What another invocation changed before it let go is read afresh, not
    // from a link answer kept before (`Netlink::keep_links`); so too when
    // the lock cannot be taken and the caller goes on unlocked. (Nothing
    // is read while this waits.)
    crate::netlink::note_change();
    let file = open_lock(&lock_path(network)).ok()?;
    // SAFETY: flock on a descriptor we own.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    (r == 0).then_some(NetworkLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lock_is_free_once_closed_and_a_held_one_times_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("net/.tables-4026531840.lock");
        let soon = || Instant::now() + Duration::from_millis(100);
        drop(lock_until(&path, soon()).expect("free lock"));
        let _held = lock_until(&path, soon()).expect("released when closed");
        // Another namespace's is another lock.
        let _other = lock_until(&dir.path().join("net/.tables-1.lock"), soon()).expect("other");
        // Another open file (another invocation) waits, then gives up.
        // (Last: its waiting thread stays blocked on the lock.)
        let e = lock_until(&path, soon()).expect_err("held");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }
}

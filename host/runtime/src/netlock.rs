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

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

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

fn lock_named(network: &str) -> Option<NetworkLock> {
    let dir = crate::config::get()
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR))
        .join("net");
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join(format!("{network}.lock")))
        .ok()?;
    // SAFETY: flock on a descriptor we own.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    (r == 0).then_some(NetworkLock { _file: file })
}

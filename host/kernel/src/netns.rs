//! Network namespace handles.
//!
//! The container's namespace is opened once, from `CNI_NETNS`, and verified
//! before any plugin code runs: it must be an nsfs file for a *network*
//! namespace, and not the namespace wasmcni itself runs in (a reused
//! `/proc/<pid>/ns/net` path once made a DEL take down the host's `lo`).
//! Afterwards only the open descriptor is used, never the path, so the path
//! cannot be swapped under us.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which namespace a handle stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The container's (`CNI_NETNS`).
    Container,
    /// The node's: the one wasmcni was started in.
    Host,
}

impl Kind {
    /// Its name in policies, audit records and messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Container => "container",
            Kind::Host => "host",
        }
    }
}

/// An open, verified network namespace.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    kind: Kind,
    path: PathBuf,
    /// This handle's own number, which keys what a thread keeps for the
    /// namespace while inside it ([`inside`]); never reused in a process.
    id: u64,
    /// The namespace's inode number, read once at open.
    ino: u64,
}

/// Why a namespace could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The path does not exist.
    #[error("CNI_NETNS {0:?} does not exist")]
    Missing(PathBuf),
    /// The path is not a namespace file at all.
    #[error("CNI_NETNS {0:?} is not a network namespace (not an nsfs file)")]
    NotNsfs(PathBuf),
    /// A namespace, but not a network one.
    #[error("CNI_NETNS {0:?} is a namespace, but not a network namespace")]
    NotNetwork(PathBuf),
    /// The host's own network namespace.
    #[error("CNI_NETNS {0:?} is wasmcni's own (the host's) network namespace")]
    HostNamespace(PathBuf),
    /// The kernel refused to open it (for `/proc/<pid>/ns/net`: the
    /// process is one wasmcni may not inspect).
    #[error(
        "CNI_NETNS {0:?} cannot be opened: permission denied (the kernel refuses wasmcni \
         access to this namespace, e.g. /proc/<pid>/ns/net of a process outside its reach); \
         it cannot be the container's network namespace"
    )]
    Denied(PathBuf),
    /// Anything else the kernel said.
    #[error("CNI_NETNS {path:?}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

mod ioctl {
    // NS_GET_NSTYPE: _IO(0xb7, 0x3), see ioctl_ns(2).
    nix::ioctl_none!(ns_get_nstype, 0xb7, 0x3);
}
use ioctl::ns_get_nstype;

impl NetNs {
    /// Opens and verifies the container namespace at `path`.
    pub fn open_container(path: &Path) -> Result<NetNs, NetnsError> {
        let io_err = |source: io::Error| NetnsError::Io {
            path: path.to_owned(),
            source,
        };
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(NetnsError::Missing(path.to_owned()))
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(NetnsError::Denied(path.to_owned()))
            }
            Err(e) => return Err(io_err(e)),
        };
        let fs = nix::sys::statfs::fstatfs(file.as_fd()).map_err(|e| io_err(e.into()))?;
        if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
            return Err(NetnsError::NotNsfs(path.to_owned()));
        }
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
        let nstype = unsafe { ns_get_nstype(file.as_raw_fd()) }.map_err(|e| io_err(e.into()))?;
        if nstype != libc::CLONE_NEWNET {
            return Err(NetnsError::NotNetwork(path.to_owned()));
        }
        let meta = file.metadata().map_err(io_err)?;
        let own = std::fs::metadata("/proc/self/ns/net").map_err(io_err)?;
        if (meta.dev(), meta.ino()) == (own.dev(), own.ino()) {
            return Err(NetnsError::HostNamespace(path.to_owned()));
        }
        Ok(NetNs {
            file,
            kind: Kind::Container,
            path: path.to_owned(),
            id: next_id(),
            ino: meta.ino(),
        })
    }

    /// Opens the namespace wasmcni runs in.
    pub fn open_host() -> Result<NetNs, NetnsError> {
        let path = PathBuf::from("/proc/self/ns/net");
        let io_err = |source| NetnsError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io_err)?;
        let ino = file.metadata().map_err(io_err)?.ino();
        Ok(NetNs {
            file,
            kind: Kind::Host,
            path,
            id: next_id(),
            ino,
        })
    }

    /// A second handle to the same namespace (a delegate's).
    pub fn try_clone(&self) -> io::Result<NetNs> {
        Ok(NetNs {
            file: self.file.try_clone()?,
            kind: self.kind,
            path: self.path.clone(),
            id: next_id(),
            ino: self.ino,
        })
    }

    /// The namespace's inode number (its identity on this node).
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Which namespace this is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The namespace file, to hand to the kernel (`IFLA_NET_NS_FD`).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The path it was opened from (for messages only; never reopened).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` inside this namespace, on the calling thread, and returns
    /// its result: the thread enters the namespace (`setns`), runs `f`,
    /// and goes back to where it was before it returns, whether `f`
    /// returned or unwound; a thread that cannot go back aborts the
    /// process rather than run anything else in the wrong namespace.
    /// Sockets created by `f` stay bound to this namespace. (A thread of
    /// its own per namespace, as before, cost every entry a wake-up of
    /// another thread, 50–100 µs on these machines, against ~1 µs for a
    /// `setns`.) Calls nest: one for the namespace the thread is already
    /// in runs `f` as it is.
    pub fn run_inside<T>(&self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let was = INSIDE.with(Cell::get);
        match (self.kind, was) {
            (Kind::Host, None) => return f(),
            (_, Some(now)) if now.id == self.id => return f(),
            _ => {}
        }
        let back = match was {
            Some(now) => now.fd,
            None => home()?,
        };
        enter(self.file.as_fd())?;
        let _back = GoBack { fd: back, was };
        INSIDE.with(|i| {
            i.set(Some(Inside {
                id: self.id,
                fd: self.file.as_raw_fd(),
            }))
        });
        f()
    }
}

impl Drop for NetNs {
    /// Drops what the thread keeps for this handle's namespace (sockets,
    /// held directories): a kept socket would keep a deleted namespace
    /// alive.
    fn drop(&mut self) {
        if let Some(forget) = ON_DROP.get() {
            forget(self.id);
        }
    }
}

/// What a module above this one keeps per handle, dropped with the handle
/// (the sysctl tree's held directories and route socket,
/// [`crate::sysctl`]): that module registers it ([`on_drop`]), so that
/// this module names none above it.
static ON_DROP: std::sync::OnceLock<fn(u64)> = std::sync::OnceLock::new();

/// Has `forget` called with a handle's id when the handle is dropped, in
/// the dropping thread. One module keeps such state: a second `forget`
/// is a bug.
pub(crate) fn on_drop(forget: fn(u64)) {
    if ON_DROP.set(forget).is_err() {
        debug_assert!(
            ON_DROP
                .get()
                .is_some_and(|f| std::ptr::fn_addr_eq(*f, forget)),
            "a second per-handle state"
        );
    }
}

/// What a thread inside a namespace other than wasmcni's knows of it.
#[derive(Clone, Copy)]
struct Inside {
    /// The handle's [`NetNs::id`].
    id: u64,
    /// The handle's descriptor, open for as long as the thread is inside
    /// (the handle is borrowed by the [`NetNs::run_inside`] it is in).
    fd: RawFd,
}

thread_local! {
    /// The namespace the calling thread is in, if not wasmcni's own.
    static INSIDE: Cell<Option<Inside>> = const { Cell::new(None) };
}

/// The handle the calling thread is inside of ([`NetNs::run_inside`]), by
/// its number; `None` in wasmcni's own namespace. What a thread keeps for
/// a namespace is kept under this.
pub(crate) fn inside() -> Option<u64> {
    INSIDE.with(Cell::get).map(|i| i.id)
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The namespace the calling thread is in outside [`NetNs::run_inside`]
/// (for wasmcni's threads: wasmcni's own; a test's thread may have made
/// one of its own), opened the first time the thread leaves it and kept
/// for the thread's life.
fn home() -> io::Result<RawFd> {
    thread_local! {
        static HOME: std::cell::OnceCell<File> = const { std::cell::OnceCell::new() };
    }
    HOME.with(|h| {
        if let Some(f) = h.get() {
            return Ok(f.as_raw_fd());
        }
        let f = File::open("/proc/thread-self/ns/net")?;
        Ok(h.get_or_init(|| f).as_raw_fd())
    })
}

fn enter(fd: BorrowedFd<'_>) -> io::Result<()> {
    nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
}

/// Takes the thread back where it was when dropped.
struct GoBack {
    fd: RawFd,
    was: Option<Inside>,
}

impl Drop for GoBack {
    fn drop(&mut self) {
        // SAFETY: `fd` is the thread's home namespace (open for the
        // thread's life) or the handle of an enclosing `run_inside`, which
        // borrows it until after this guard is gone.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        if let Err(e) = enter(fd) {
            eprintln!("wasmcni: cannot leave a network namespace ({e}); aborting");
            std::process::abort();
        }
        INSIDE.with(|i| i.set(self.was));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The namespace the calling thread is in, by inode.
    fn here() -> u64 {
        std::fs::metadata("/proc/thread-self/ns/net")
            .expect("the thread's namespace")
            .ino()
    }

    /// Enters a new network namespace on the calling thread (never the
    /// machine's) and opens it as a container's.
    fn new_ns() -> Option<NetNs> {
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            #[allow(clippy::disallowed_methods)] // CI decides: fail, not skip
            let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
            assert!(!ci, "this test needs root (a network namespace): {e}");
            return None;
        }
        Some(NetNs::open_container(Path::new("/proc/thread-self/ns/net")).expect("the new one"))
    }

    /// `run_inside` runs its job on the calling thread, inside the
    /// namespace, and takes the thread back where it was: after a return,
    /// after an error, after a panic, and from a nested call for another
    /// namespace. What the thread keeps for a namespace (a sysctl's route
    /// socket) is that namespace's.
    #[test]
    fn a_job_runs_inside_on_the_calling_thread_and_the_thread_comes_back() {
        // It writes sysctls (changes, for a test that watches for them).
        let _serial = crate::changes_serial();
        std::thread::spawn(|| {
            let Some(a) = new_ns() else {
                return; // not root, outside CI (asserted above)
            };
            let b = new_ns().expect("a second namespace");
            assert_ne!(a.ino(), b.ino());
            let home = here();
            assert_eq!(home, b.ino());
            let tid = nix::unistd::gettid();

            let (was, on) = a
                .run_inside(|| Ok((here(), nix::unistd::gettid())))
                .unwrap();
            assert_eq!((was, on), (a.ino(), tid), "inside a, on this thread");
            assert_eq!(here(), home, "back after a return");

            let err = a.run_inside(|| -> io::Result<()> { Err(io::Error::other("no")) });
            assert!(err.is_err());
            assert_eq!(here(), home, "back after an error");

            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                a.run_inside(|| -> io::Result<()> { panic!("in the job") })
            }));
            assert!(panicked.is_err());
            assert_eq!(here(), home, "back after a panic");
            assert_eq!(super::inside(), None);

            let home_handle = NetNs::open_host().expect("the process's namespace");
            let seen = a
                .run_inside(|| {
                    let in_a = here();
                    let in_b = b.run_inside(|| Ok(here()))?;
                    let again = here();
                    let same = a.run_inside(|| Ok(here()))?;
                    Ok((in_a, in_b, again, same))
                })
                .unwrap();
            assert_eq!(seen, (a.ino(), b.ino(), a.ino(), a.ino()), "nested");
            assert_eq!(here(), home, "back after nesting");
            // The process's own namespace is not this thread's (it made
            // its own): a host handle's job still runs where it is.
            assert_eq!(home_handle.run_inside(|| Ok(here())).unwrap(), home);

            // Each namespace's IPv4 forwarding, set apart, read back apart
            // (the route socket kept for each is its own).
            crate::sysctl::write(&a, "net.ipv4.ip_forward", "1").unwrap();
            crate::sysctl::write(&b, "net.ipv4.ip_forward", "0").unwrap();
            assert_eq!(crate::sysctl::read(&a, "net.ipv4.ip_forward").unwrap(), "1");
            assert_eq!(crate::sysctl::read(&b, "net.ipv4.ip_forward").unwrap(), "0");
            assert_eq!(here(), home);
        })
        .join()
        .expect("the test thread");
    }
}

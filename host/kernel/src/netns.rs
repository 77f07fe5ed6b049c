//! Network namespace handles.
//!
//! The container's namespace is opened once, from `CNI_NETNS`, and verified
//! before any plugin code runs: it must be an nsfs file for a *network*
//! namespace, and not the namespace wasmcni itself runs in (a reused
//! `/proc/<pid>/ns/net` path once made a DEL take down the host's `lo`).
//! Afterwards only the open descriptor is used, never the path, so the path
//! cannot be swapped under us.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Which namespace a handle stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The container's (`CNI_NETNS`).
    Container,
    /// The node's: the one wasmcni was started in.
    Host,
}

/// An open, verified network namespace.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    kind: Kind,
    path: PathBuf,
    /// The thread that acts inside the namespace ([`NetNs::run_inside`]).
    worker: std::sync::OnceLock<std::sync::mpsc::Sender<Job>>,
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
            worker: std::sync::OnceLock::new(),
        })
    }

    /// Opens the namespace wasmcni runs in.
    pub fn open_host() -> Result<NetNs, NetnsError> {
        let path = PathBuf::from("/proc/self/ns/net");
        let file = File::open(&path).map_err(|source| NetnsError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(NetNs {
            file,
            kind: Kind::Host,
            path,
            worker: std::sync::OnceLock::new(),
        })
    }

    /// A second handle to the same namespace (a delegate's).
    pub fn try_clone(&self) -> io::Result<NetNs> {
        Ok(NetNs {
            file: self.file.try_clone()?,
            kind: self.kind,
            path: self.path.clone(),
            worker: std::sync::OnceLock::new(),
        })
    }

    /// The namespace's inode number (its identity on this node).
    pub fn ino(&self) -> u64 {
        self.file.metadata().map(|m| m.ino()).unwrap_or(0)
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

    /// Runs `f` on a thread of wasmcni's that has entered this namespace,
    /// and returns its result. The thread is this handle's own, started on
    /// first use (a thread per call would cost every sysctl ~0.1 ms), and
    /// runs nothing but the jobs handed to it here, one at a time, so no
    /// other code ever runs in the wrong namespace. Sockets created by `f`
    /// stay bound to this namespace.
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        if self.kind == Kind::Host {
            // wasmcni never leaves the host namespace on its own threads.
            return f();
        }
        let worker = self.worker()?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<T>>(1);
        let job = move || {
            let _ = tx.send(f());
        };
        let job: Box<dyn FnOnce() + Send + '_> = Box::new(job);
        // SAFETY: the job borrows from this frame; it is made 'static only
        // to cross the channel. This function does not return before the
        // job is gone: `rx.recv()` returns once the job has sent its
        // result, or once its sender was dropped, which happens after `f`
        // has returned or unwound (and its borrows ended), or when the
        // worker dropped the job without running it.
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
        worker
            .send(job)
            .map_err(|_| io::Error::other("namespace thread stopped"))?;
        rx.recv()
            .map_err(|_| io::Error::other("namespace thread panicked"))?
    }

    /// The thread that runs jobs inside this namespace, started on first use.
    fn worker(&self) -> io::Result<&std::sync::mpsc::Sender<Job>> {
        if let Some(w) = self.worker.get() {
            return Ok(w);
        }
        let fd = self.file.try_clone()?;
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<io::Result<()>>(1);
        std::thread::Builder::new()
            .name("wasmcni-netns".into())
            .spawn(move || {
                let entered = nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from);
                let ok = entered.is_ok();
                let _ = ready_tx.send(entered);
                if ok {
                    for job in rx {
                        job();
                    }
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("namespace thread failed to start"))??;
        Ok(self.worker.get_or_init(|| tx))
    }
}

/// A job for a namespace thread.
type Job = Box<dyn FnOnce() + Send + 'static>;

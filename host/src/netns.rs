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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        })
    }

    /// A second handle to the same namespace (a delegate's).
    pub fn try_clone(&self) -> io::Result<NetNs> {
        Ok(NetNs {
            file: self.file.try_clone()?,
            kind: self.kind,
            path: self.path.clone(),
        })
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

    /// Runs `f` on a fresh thread that has entered this namespace, and
    /// returns its result. The thread is ours and ends with `f`, so no other
    /// code ever runs in the wrong namespace. Sockets created by `f` stay
    /// bound to this namespace.
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        if self.kind == Kind::Host {
            // wasmcni never leaves the host namespace on its own threads.
            return f();
        }
        let fd = self.file.as_fd();
        std::thread::scope(|s| {
            // `Builder::spawn_scoped`, not `spawn`: failing to create the
            // thread is an error for the caller, not a panic.
            std::thread::Builder::new()
                .name("wasmcni-netns".into())
                .spawn_scoped(s, move || {
                    nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(io::Error::from)?;
                    f()
                })?
                .join()
                .map_err(|_| io::Error::other("namespace thread panicked"))?
        })
    }
}

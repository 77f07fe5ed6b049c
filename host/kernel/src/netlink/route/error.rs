//! The one failure of every rtnetlink request: the kernel's errno, the
//! socket's, or an answer that could not be decoded.

use std::io;

/// A netlink failure.
#[derive(Debug, thiserror::Error)]
pub enum NlError {
    /// The kernel answered with an errno.
    #[error("kernel: {}", io::Error::from_raw_os_error(*.0))]
    Kernel(i32),
    /// The socket failed.
    #[error("netlink socket: {0}")]
    Io(#[from] io::Error),
    /// The kernel's answer could not be decoded.
    #[error("netlink decode: {0}")]
    Decode(String),
}

impl NlError {
    /// The errno this failure stands for.
    pub fn errno(&self) -> i32 {
        match self {
            NlError::Kernel(e) => *e,
            NlError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            NlError::Decode(_) => libc::EIO,
        }
    }
}

pub(super) fn einval<T>() -> Result<T, NlError> {
    Err(NlError::Kernel(libc::EINVAL))
}

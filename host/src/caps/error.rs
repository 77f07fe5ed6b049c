//! Guest-visible errors and traps are different things: a [`CapError`] is
//! either a WIT `error-code` the plugin sees and can handle, or a trap that
//! ends the plugin.

use super::bindings::wasmcni::plugin::types::{ErrorCode, Host};
use super::StoreData;

/// The error type of every capability call.
#[derive(Debug)]
pub enum CapError {
    /// Returned to the guest.
    Code(ErrorCode),
    /// Ends the guest with a trap.
    Trap(wasmtime::Error),
}

impl From<ErrorCode> for CapError {
    fn from(code: ErrorCode) -> Self {
        CapError::Code(code)
    }
}

impl Host for StoreData {
    fn convert_error_code(&mut self, err: CapError) -> wasmtime::Result<ErrorCode> {
        match err {
            CapError::Code(c) => Ok(c),
            CapError::Trap(t) => Err(t),
        }
    }
}

/// The one errno → `error-code` mapping (each case's WIT doc names its errnos).
pub fn from_errno(errno: i32) -> ErrorCode {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ESRCH => ErrorCode::NotFound,
        libc::EEXIST => ErrorCode::AlreadyExists,
        libc::EINVAL => ErrorCode::InvalidArgument,
        libc::EBUSY => ErrorCode::Busy,
        libc::EPERM | libc::EACCES => ErrorCode::NotPermitted,
        libc::EOPNOTSUPP | libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT => ErrorCode::NotSupported,
        libc::ENOBUFS | libc::ENOMEM | libc::ENOSPC => ErrorCode::OutOfResources,
        libc::EADDRNOTAVAIL => ErrorCode::AddressNotAvailable,
        libc::ENETUNREACH | libc::EHOSTUNREACH => ErrorCode::Unreachable,
        libc::EAGAIN | libc::EINTR => ErrorCode::TryAgain,
        libc::ERANGE | libc::EOVERFLOW => ErrorCode::OutOfRange,
        _ => ErrorCode::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_map_to_their_documented_cases() {
        assert_eq!(from_errno(libc::ENODEV), ErrorCode::NotFound);
        assert_eq!(from_errno(libc::EEXIST), ErrorCode::AlreadyExists);
        assert_eq!(from_errno(libc::EPERM), ErrorCode::NotPermitted);
        assert_eq!(from_errno(libc::EOPNOTSUPP), ErrorCode::NotSupported);
        assert_eq!(from_errno(libc::EIO), ErrorCode::Other);
    }
}

//! Guest-visible errors and traps are different things: a [`CapError`] is
//! either a WIT `error-code` the plugin sees and can handle, or a trap that
//! ends the plugin.

use super::bindings::wasmcni::plugin::types::{ErrorCode, Host};
use super::StoreData;
use crate::audit::Outcome;

/// The error type of every capability call.
#[derive(Debug)]
pub enum CapError {
    /// wasmcni rejected an argument (`invalid-argument`, `not-found`, ...).
    Code(ErrorCode),
    /// The policy or an invariant refused the call (`access-denied`); the
    /// reason goes to the audit log and, if the plugin fails, to the
    /// runtime ([`Denial`]).
    Denied(Denial),
    /// An argument is larger than wasmcni accepts (`limit-exceeded`).
    Limit(String),
    /// The kernel failed with this errno.
    Kernel(i32),
    /// Ends the guest with a trap.
    Trap(wasmtime::Error),
    /// An undo step was carried out only in part (what is not back).
    Incomplete(String),
}

/// Why a call was refused.
///
/// `reason` may reach the runtime (the CNI error's `details`, when the
/// plugin fails), so it holds only what the plugin could learn anyway: the
/// call's own arguments, and either the field path of the plugin's own
/// policy entry that would allow the call (`plugins.NAME.container.read is
/// false`) or the invariant no policy waives. Never other plugins' entries,
/// the contents of the plugin's own grant, or other attachments' identities:
/// those go in `audit_only`, which only the root-only audit log records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// Why, as the runtime may see it.
    pub reason: String,
    /// More, for the audit log alone.
    pub audit_only: Option<String>,
}

impl Denial {
    /// The reason plus what only the audit log may record.
    pub fn for_audit(&self) -> String {
        match &self.audit_only {
            Some(more) => format!("{} ({more})", self.reason),
            None => self.reason.clone(),
        }
    }
}

impl CapError {
    /// A refusal whose whole reason may reach the runtime.
    pub fn denied(reason: impl Into<String>) -> CapError {
        CapError::Denied(Denial {
            reason: reason.into(),
            audit_only: None,
        })
    }

    /// A refusal with more for the audit log than for the runtime.
    pub fn denied_with(reason: impl Into<String>, audit_only: impl Into<String>) -> CapError {
        CapError::Denied(Denial {
            reason: reason.into(),
            audit_only: Some(audit_only.into()),
        })
    }
}

/// The trap that ends a plugin which used up its budget of capability calls.
#[derive(Debug, thiserror::Error)]
#[error("plugin exceeded its budget of {0} host calls")]
pub struct BudgetExceeded(pub u64);

impl From<ErrorCode> for CapError {
    fn from(code: ErrorCode) -> Self {
        CapError::Code(code)
    }
}

impl CapError {
    /// What the guest sees.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            CapError::Code(c) => Some(*c),
            CapError::Denied(_) => Some(ErrorCode::AccessDenied),
            CapError::Limit(_) => Some(ErrorCode::LimitExceeded),
            CapError::Kernel(e) => Some(from_errno(*e)),
            CapError::Incomplete(_) => Some(ErrorCode::Other),
            CapError::Trap(_) => None,
        }
    }

    /// How the audit log records it.
    pub fn outcome(&self) -> Outcome {
        match self {
            CapError::Denied(d) => Outcome::Denied {
                reason: d.for_audit(),
            },
            CapError::Limit(reason) => Outcome::LimitExceeded {
                reason: reason.clone(),
            },
            CapError::Kernel(e) => Outcome::Error {
                error: code_name(from_errno(*e)).to_owned(),
                errno: Some(*e),
            },
            CapError::Code(c) => Outcome::Error {
                error: code_name(*c).to_owned(),
                errno: None,
            },
            CapError::Trap(t) => Outcome::Error {
                error: format!("trap: {t}"),
                errno: None,
            },
            CapError::Incomplete(what) => Outcome::Error {
                error: format!("incomplete: {what}"),
                errno: None,
            },
        }
    }
}

impl Host for StoreData {
    fn convert_error_code(&mut self, err: CapError) -> wasmtime::Result<ErrorCode> {
        match err.code() {
            Some(c) => Ok(c),
            None => match err {
                CapError::Trap(t) => Err(t),
                _ => Ok(ErrorCode::Other),
            },
        }
    }
}

/// The WIT name of an error code.
pub fn code_name(c: ErrorCode) -> &'static str {
    match c {
        ErrorCode::AccessDenied => "access-denied",
        ErrorCode::LimitExceeded => "limit-exceeded",
        ErrorCode::NotFound => "not-found",
        ErrorCode::AlreadyExists => "already-exists",
        ErrorCode::InvalidArgument => "invalid-argument",
        ErrorCode::Busy => "busy",
        ErrorCode::NotPermitted => "not-permitted",
        ErrorCode::NotSupported => "not-supported",
        ErrorCode::OutOfResources => "out-of-resources",
        ErrorCode::AddressNotAvailable => "address-not-available",
        ErrorCode::Unreachable => "unreachable",
        ErrorCode::TryAgain => "try-again",
        ErrorCode::OutOfRange => "out-of-range",
        ErrorCode::Other => "other",
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

    #[test]
    fn denials_reach_the_guest_as_access_denied() {
        assert_eq!(CapError::denied("x").code(), Some(ErrorCode::AccessDenied));
        assert_eq!(
            CapError::Kernel(libc::EEXIST).code(),
            Some(ErrorCode::AlreadyExists)
        );
    }
}

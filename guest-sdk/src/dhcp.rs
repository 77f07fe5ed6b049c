//! DHCPv4 leases for the attachment's interface, obtained and renewed by
//! wasmcni's DHCP daemon (`wasmcni dhcp-daemon`) inside the container
//! namespace: what the `dhcp` IPAM plugin is made of.
//!
//! The plugin names no namespace, interface or client: the host hands the
//! daemon the container namespace it opened from `CNI_NETNS`, `CNI_IFNAME`
//! and the client identifier `<CNI_CONTAINERID>/<network>/<CNI_IFNAME>`,
//! so a plugin reaches only its own attachment's lease. An ADD's lease is
//! released if the ADD fails; the daemon renews it until [`release`] (DEL)
//! or until the container's namespace is gone. The interface must be up
//! before [`acquire`] (the daemon sends from it).
//!
//! # Capabilities
//! Needs `"dhcp": {"socket": PATH}` in the plugin's policy entry (and
//! `container.modify` to bring the interface up).
//!
//! # Example: a lease
//! ```no_run
//! use guest_sdk::dhcp::{self, LeaseRequest};
//!
//! let lease = dhcp::acquire(&LeaseRequest {
//!     socket: None,
//!     request: vec![1, 3],
//!     provide: vec![],
//!     broadcast: false,
//!     timeout_ms: 10_000,
//! });
//! ```

use crate::bindings::wasmcni::plugin::dhcp as wit;
pub use crate::bindings::wasmcni::plugin::dhcp::{Lease, LeaseRequest, LeaseRoute, ProvidedOption};
use crate::cni::Error;
use crate::net::HostError;

/// Why a DHCP call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DhcpError {
    /// The host refused or failed the call (`access-denied`: not granted).
    Host(HostError),
    /// The daemon's answer: no server answered in time, a NAK, no daemon
    /// listening on the socket.
    Failed(String),
}

impl std::fmt::Display for DhcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DhcpError::Host(e) => e.fmt(f),
            DhcpError::Failed(m) => f.write_str(m),
        }
    }
}

impl From<DhcpError> for Error {
    /// Code 999 ("internal"), as the reference's daemon errors are.
    fn from(e: DhcpError) -> Error {
        Error::internal(e.to_string())
    }
}

fn flatten<T>(
    operation: &'static str,
    r: Result<Result<T, String>, crate::net::ErrorCode>,
) -> Result<T, DhcpError> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(m)) => Err(DhcpError::Failed(m)),
        Err(code) => Err(DhcpError::Host(HostError {
            operation,
            object: "this attachment's DHCP lease".into(),
            code,
        })),
    }
}

/// Obtains a lease for the attachment's interface (ADD), or the one the
/// daemon holds for it in this namespace already.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn acquire(request: &LeaseRequest) -> Result<Lease, DhcpError> {
    crate::require_host("dhcp.acquire");
    flatten("dhcp.acquire", wit::acquire(request))
}

/// The lease the daemon holds for the attachment (CHECK).
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn current(socket: Option<&str>) -> Result<Lease, DhcpError> {
    crate::require_host("dhcp.current");
    flatten("dhcp.current", wit::current(socket))
}

/// Whether a DHCP daemon listens on the socket (STATUS): a connection is
/// accepted or queued; the error says why not.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn listening(socket: Option<&str>) -> Result<(), DhcpError> {
    crate::require_host("dhcp.listening");
    flatten("dhcp.listening", wit::listening(socket))
}

/// Releases the attachment's lease (DEL); none held is no error.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn release(socket: Option<&str>) -> Result<(), DhcpError> {
    crate::require_host("dhcp.release");
    flatten("dhcp.release", wit::release(socket))
}

//! Typed, safe wrappers over wasmcni's capability imports.
//!
//! Every call goes to the host, which checks it against the plugin's policy
//! and performs it. A failed call is a [`HostError`] that names the
//! operation, the object and the reason; it converts into a CNI error with
//! `?` inside a plugin's command functions.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bindings::wasmcni::plugin::{address, link, netns};
use crate::cni::Error;

pub use crate::bindings::wasmcni::plugin::address::{AddressInfo, Scope};
pub use crate::bindings::wasmcni::plugin::link::{LinkInfo, OperState};
pub use crate::bindings::wasmcni::plugin::netns::NetnsKind;
pub use crate::bindings::wasmcni::plugin::types::{ErrorCode, IpAddress, IpFamily, IpPrefix};

/// A failed host call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    /// The WIT function, e.g. `link.set-up`.
    pub operation: &'static str,
    /// What it acted on, e.g. `lo in the container netns`.
    pub object: String,
    /// Why it failed.
    pub code: ErrorCode,
}

impl HostError {
    /// Whether the object did not exist.
    pub fn is_not_found(&self) -> bool {
        self.code == ErrorCode::NotFound
    }
}

fn describe(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::AccessDenied => "access denied by wasmcni policy",
        ErrorCode::LimitExceeded => "a wasmcni limit was exceeded",
        ErrorCode::NotFound => "not found",
        ErrorCode::AlreadyExists => "already exists",
        ErrorCode::InvalidArgument => "invalid argument",
        ErrorCode::Busy => "busy",
        ErrorCode::NotPermitted => "not permitted by the kernel",
        ErrorCode::NotSupported => "not supported by the kernel",
        ErrorCode::OutOfResources => "out of kernel resources",
        ErrorCode::AddressNotAvailable => "address not available",
        ErrorCode::Unreachable => "unreachable",
        ErrorCode::TryAgain => "temporarily unavailable, try again",
        ErrorCode::OutOfRange => "value out of range",
        ErrorCode::Other => "failed (see the wasmcni audit log for the errno)",
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.operation,
            self.object,
            describe(self.code)
        )
    }
}

impl std::error::Error for HostError {}

impl From<HostError> for Error {
    /// Host-call failures become code 999 ("internal"), as any untyped error
    /// does in the reference Go skel; the message names operation and object.
    fn from(e: HostError) -> Error {
        Error::internal(e.to_string())
    }
}

/// A network namespace the plugin was given.
///
/// # Capabilities
/// A handle by itself grants nothing; every operation on it is checked by
/// the host against the plugin's policy for this namespace.
pub struct Netns {
    inner: netns::Netns,
    kind: NetnsKind,
}

impl fmt::Debug for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Netns").field("kind", &self.kind).finish()
    }
}

fn kind_name(kind: NetnsKind) -> &'static str {
    match kind {
        NetnsKind::Container => "the container netns",
        NetnsKind::Host => "the host netns",
    }
}

impl Netns {
    /// The container's namespace (`CNI_NETNS`). Not found when the runtime
    /// gave none or, on DEL, it is already gone.
    pub fn container() -> Result<Netns, HostError> {
        netns::container()
            .map(|inner| Netns {
                inner,
                kind: NetnsKind::Container,
            })
            .map_err(|code| HostError {
                operation: "netns.container",
                object: "CNI_NETNS".into(),
                code,
            })
    }

    /// The node's namespace, if the plugin's policy grants any right there.
    pub fn host() -> Result<Netns, HostError> {
        netns::host()
            .map(|inner| Netns {
                inner,
                kind: NetnsKind::Host,
            })
            .map_err(|code| HostError {
                operation: "netns.host",
                object: "host netns".into(),
                code,
            })
    }

    /// Which namespace this is.
    pub fn kind(&self) -> NetnsKind {
        self.kind
    }

    fn err(
        &self,
        operation: &'static str,
        what: impl fmt::Display,
    ) -> impl FnOnce(ErrorCode) -> HostError {
        let object = format!("{what} in {}", kind_name(self.kind));
        move |code| HostError {
            operation,
            object,
            code,
        }
    }

    /// Looks a link up by name.
    pub fn link(&self, name: &str) -> Result<LinkInfo, HostError> {
        link::get_by_name(&self.inner, name)
            .map_err(self.err("link.get-by-name", format_args!("link {name:?}")))
    }

    /// Looks a link up by index.
    pub fn link_by_index(&self, index: u32) -> Result<LinkInfo, HostError> {
        link::get_by_index(&self.inner, index)
            .map_err(self.err("link.get-by-index", format_args!("link #{index}")))
    }

    /// Every link.
    pub fn links(&self) -> Result<Vec<LinkInfo>, HostError> {
        link::list(&self.inner).map_err(self.err("link.list", "links"))
    }

    /// Sets a link administratively up or down.
    pub fn set_link_up(&self, link: &LinkInfo, up: bool) -> Result<(), HostError> {
        link::set_up(&self.inner, link.index, up)
            .map_err(self.err("link.set-up", format_args!("link {:?}", link.name)))
    }

    /// The addresses of one link (or all links), of one family (or both),
    /// in the kernel's order.
    pub fn addresses(
        &self,
        link: Option<&LinkInfo>,
        family: Option<IpFamily>,
    ) -> Result<Vec<AddressInfo>, HostError> {
        let what = match link {
            Some(l) => format!("addresses of {:?}", l.name),
            None => "addresses".to_owned(),
        };
        address::list(&self.inner, link.map(|l| l.index), family)
            .map_err(self.err("address.list", what))
    }
}

/// Converts a WIT address to `std`'s.
pub fn to_ip(a: &IpAddress) -> IpAddr {
    match *a {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h))
        }
    }
}

/// Formats a prefix as CIDR text, e.g. `127.0.0.1/8`.
pub fn cidr(p: &IpPrefix) -> String {
    format!("{}/{}", to_ip(&p.address), p.prefix_len)
}

/// A MAC address as `aa:bb:cc:dd:ee:ff` text.
pub fn mac_string(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

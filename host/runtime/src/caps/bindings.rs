//! The host side of the WIT world: the generated bindings, the error type
//! every capability call returns ([`CapError`]: an `error-code` the plugin
//! sees, or a trap), the host sides of the two resources ([`NsHandle`],
//! [`StoreHandle`]), and the WIT record of a kernel link ([`Link`]). The
//! bottom of the capability layer: it knows no invocation context.
//!
//! Guest-visible errors and traps are different things: a [`CapError`] is
//! either a WIT `error-code` the plugin sees and can handle, or a trap that
//! ends the plugin.

use netlink_packet_route::link::{
    InfoData, LinkAttribute, LinkFlags, LinkInfo as NlInfo, LinkMessage, State,
};

use crate::audit::Outcome;
use crate::netlink::NlError;
use crate::netns::Kind;

#[allow(missing_docs)]
mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "wasmcni:plugin/plugin",
        imports: { default: trappable },
        trappable_error_type: {
            "wasmcni:plugin/types.error-code" => crate::caps::bindings::CapError,
        },
        with: {
            "wasmcni:plugin/netns.netns": crate::caps::bindings::NsHandle,
            "wasmcni:plugin/ipam-store.store": crate::caps::bindings::StoreHandle,
        },
    });
}

/// Host bindings generated from `wit/` (documented there).
pub use generated::*;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wasmcni::plugin::link::{LinkInfo, OperState};
pub use wasmcni::plugin::types::ErrorCode;
use wasmcni::plugin::types::{IpAddress, IpPrefix, Scope};

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
///
/// Only [`super::authority`] makes one: its fields are private, and
/// [`Denial::new`] takes a token only that module can make (and nothing can
/// copy), so no other module can forge a refusal nor rewrite one.
#[derive(Debug, PartialEq, Eq)]
pub struct Denial {
    /// Why, as the runtime may see it.
    reason: String,
    /// More, for the audit log alone.
    audit_only: Option<String>,
    /// What refused it, as the audit record says it for tools.
    refusal: crate::audit::Refusal,
    /// Made by [`super::authority`], the only module that decides refusals.
    decided: super::authority::decided::Decided,
}

impl Denial {
    /// A refusal [`super::authority`] decided (`decided`: its token).
    pub(super) fn new(
        reason: String,
        refusal: crate::audit::Refusal,
        decided: super::authority::decided::Decided,
    ) -> Denial {
        Denial {
            reason,
            audit_only: None,
            refusal,
            decided,
        }
    }

    /// Why, as the runtime may see it.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// More, for the audit log alone.
    pub fn audit_only(&self) -> Option<&str> {
        self.audit_only.as_deref()
    }

    /// What refused it, as the audit record says it for tools.
    pub fn refusal(&self) -> &crate::audit::Refusal {
        &self.refusal
    }

    /// The reason plus what only the audit log may record.
    pub fn for_audit(&self) -> String {
        match &self.audit_only {
            Some(more) => format!("{} ({more})", self.reason),
            None => self.reason.clone(),
        }
    }
}

impl CapError {
    /// The same refusal with `more` for the audit log alone.
    pub fn audit_only(mut self, more: impl Into<String>) -> CapError {
        if let CapError::Denied(d) = &mut self {
            d.audit_only = Some(more.into());
        }
        self
    }

    /// The same refusal, about node link `name` (index `index`).
    pub fn about_link(mut self, name: &str, index: u32) -> CapError {
        if let CapError::Denied(d) = &mut self {
            d.refusal.link = Some(crate::audit::LinkRef {
                name: name.to_owned(),
                index,
            });
        }
        self
    }
}

/// The trap that ends a plugin which used up its budget of capability calls.
#[derive(Debug, thiserror::Error)]
#[error("plugin exceeded its budget of {0} host calls")]
pub struct BudgetExceeded(pub u64);

impl From<ErrorCode> for CapError {
    fn from(code: ErrorCode) -> Self {
        // A refusal is a Denial, which only the authority module makes: a
        // bare `access-denied` code would be one decided elsewhere.
        debug_assert!(
            code != ErrorCode::AccessDenied,
            "access-denied is a refusal: caps::authority decides it"
        );
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
                refusal: d.refusal.clone(),
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

impl From<&NlError> for CapError {
    fn from(e: &NlError) -> Self {
        CapError::Kernel(e.errno())
    }
}

impl From<NlError> for CapError {
    fn from(e: NlError) -> Self {
        CapError::Kernel(e.errno())
    }
}

/// A handle the plugin passed that is not in its resource table: the
/// guest broke the component model's rules, so the call traps.
impl From<wasmtime::component::ResourceTableError> for CapError {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        CapError::Trap(e.into())
    }
}

impl From<std::io::Error> for CapError {
    fn from(e: std::io::Error) -> Self {
        CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// The host side of a `netns` resource: which namespace it stands for. The
/// namespace itself lives in the invocation context, opened once.
#[derive(Debug, Clone, Copy)]
pub struct NsHandle {
    pub(super) kind: Kind,
}

impl NsHandle {
    /// Which namespace.
    pub fn kind(&self) -> Kind {
        self.kind
    }
}

/// The host side of a `store` resource: the open, locked network state.
#[derive(Debug)]
pub struct StoreHandle {
    pub(super) store: crate::ipam::NetworkStore,
}

/// A link as the capability code sees it: the WIT record.
pub(super) type Link = LinkInfo;

impl LinkInfo {
    /// The WIT record of a kernel link message (`owned` is set by the
    /// caller, who knows the namespace).
    pub(super) fn from_message(msg: LinkMessage) -> LinkInfo {
        let mut info = LinkInfo {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mtu: 0,
            mac: Vec::new(),
            up: msg.header.flags.contains(LinkFlags::Up),
            loopback: msg.header.flags.contains(LinkFlags::Loopback),
            oper_state: OperState::Unknown,
            master: None,
            alias: None,
            promiscuous: msg.header.flags.contains(LinkFlags::Promisc),
            allmulticast: msg.header.flags.contains(LinkFlags::Allmulti),
            txqlen: 0,
            vrf_table: None,
            parent_index: None,
            owned: false,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => info.name = n,
                LinkAttribute::Mtu(m) => info.mtu = m,
                LinkAttribute::TxQueueLen(q) => info.txqlen = q,
                LinkAttribute::Address(a) => info.mac = a,
                LinkAttribute::Controller(m) => info.master = Some(m),
                LinkAttribute::IfAlias(a) => info.alias = Some(a),
                LinkAttribute::Link(p) => info.parent_index = Some(p),
                LinkAttribute::OperState(s) => {
                    info.oper_state = match s {
                        State::NotPresent => OperState::NotPresent,
                        State::Down => OperState::Down,
                        State::LowerLayerDown => OperState::LowerLayerDown,
                        State::Testing => OperState::Testing,
                        State::Dormant => OperState::Dormant,
                        State::Up => OperState::Up,
                        _ => OperState::Unknown,
                    }
                }
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        match i {
                            NlInfo::Kind(k) => info.kind = Some(k.to_string()),
                            NlInfo::Data(InfoData::Vrf(v)) => {
                                for x in v {
                                    if let netlink_packet_route::link::InfoVrf::TableId(t) = x {
                                        info.vrf_table = Some(t);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        info
    }
}

/// A kernel address as its WIT value.
pub(crate) fn ip_to_wit(ip: IpAddr) -> IpAddress {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            IpAddress::Ipv4((o[0], o[1], o[2], o[3]))
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            IpAddress::Ipv6((s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]))
        }
    }
}

/// A WIT address as the kernel's.
pub(crate) fn ip_from_wit(ip: IpAddress) -> IpAddr {
    match ip {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h))
        }
    }
}

/// A WIT prefix, checked: the length fits the family.
pub(crate) fn prefix_from_wit(p: IpPrefix) -> Result<(IpAddr, u8), CapError> {
    let ip = ip_from_wit(p.address);
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if p.prefix_len > max {
        return Err(ErrorCode::InvalidArgument.into());
    }
    Ok((ip, p.prefix_len))
}

/// `RT_SCOPE_*` value of a WIT scope.
pub(crate) fn scope_value(s: Scope) -> u8 {
    match s {
        Scope::Universe => 0,
        Scope::Site => 200,
        Scope::Link => 253,
        Scope::Host => 254,
        Scope::Nowhere => 255,
    }
}

/// WIT scope of an `RT_SCOPE_*` value.
pub(crate) fn scope_from_value(v: u8) -> Scope {
    match v {
        0 => Scope::Universe,
        200 => Scope::Site,
        253 => Scope::Link,
        254 => Scope::Host,
        _ => Scope::Nowhere,
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
    fn kernel_errors_reach_the_guest_as_their_code() {
        // (Refusals: `authority::call`'s tests.)
        assert_eq!(
            CapError::Kernel(libc::EEXIST).code(),
            Some(ErrorCode::AlreadyExists)
        );
    }
}

//! One grant a call needed ([`Need`]), as a policy field path and value,
//! and the namespace it is about.

use std::fmt;
use std::path::PathBuf;

use wasmcni_runtime::netns::Kind;
use wasmcni_runtime::policy::LinkKind;

/// One grant a call needed, as a policy field path and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// A host entry at all (`host: {}`): a handle to the node namespace.
    Host,
    /// `read`.
    Read(Kind),
    /// `create: [kind]`.
    Create(Kind, LinkKind),
    /// `modify`.
    Modify(Kind),
    /// `move`.
    Move(Kind),
    /// `addresses`.
    Addresses(Kind),
    /// `routes`.
    Routes(Kind),
    /// `announce`.
    Announce(Kind),
    /// `traffic-control`.
    TrafficControl(Kind),
    /// `config-vlans`.
    ConfigVlans(Kind),
    /// `host.firewall.<kind>` (`port-mappings`, `masquerade`, ...).
    Firewall(String),
    /// `sysctls: [pattern]`.
    Sysctl(Kind, String),
    /// `host.names: [pattern]`.
    Name(String),
    /// A host link name the record does not tell (a link moved into the
    /// node under its own name): `names` cannot be derived.
    UnknownName,
    /// `host.prefixes: [network]`.
    Prefix(ipnet::IpNet),
    /// `host.links: [name]`.
    Links(String),
    /// `host.masters: [name]`.
    Masters(String),
    /// `host.bridges: [name]`.
    Bridges(String),
    /// `ipam-roots: [dir]`.
    IpamRoot(PathBuf),
    /// `delegates: [name]`.
    Delegate(String),
    /// `attachment-state`.
    AttachmentState,
    /// `dhcp.socket` (the default daemon's).
    Dhcp,
}

fn ns_name(k: Kind) -> &'static str {
    match k {
        Kind::Container => "container",
        Kind::Host => "host",
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        match self {
            Need::Host => write!(f, "host"),
            Need::Read(k) => write!(f, "{}.read", ns_name(*k)),
            Need::Create(k, kind) => write!(f, "{}.create: [{}]", ns_name(*k), q(kind.name())),
            Need::Modify(k) => write!(f, "{}.modify", ns_name(*k)),
            Need::Move(k) => write!(f, "{}.move", ns_name(*k)),
            Need::Addresses(k) => write!(f, "{}.addresses", ns_name(*k)),
            Need::Routes(k) => write!(f, "{}.routes", ns_name(*k)),
            Need::Announce(k) => write!(f, "{}.announce", ns_name(*k)),
            Need::TrafficControl(k) => write!(f, "{}.traffic-control", ns_name(*k)),
            Need::ConfigVlans(k) => write!(f, "{}.config-vlans", ns_name(*k)),
            Need::Firewall(field) => write!(f, "host.firewall.{field}"),
            Need::Sysctl(k, p) => write!(f, "{}.sysctls: [{}]", ns_name(*k), q(p)),
            Need::Name(p) => write!(f, "host.names: [{}]", q(p)),
            Need::UnknownName => write!(f, "host.names: [the link's name]"),
            Need::Prefix(n) => write!(f, "host.prefixes: [{}]", q(&n.to_string())),
            Need::Links(n) => write!(f, "host.links: [{}]", q(n)),
            Need::Masters(n) => write!(f, "host.masters: [{}]", q(n)),
            Need::Bridges(n) => write!(f, "host.bridges: [{}]", q(n)),
            Need::IpamRoot(p) => write!(f, "ipam-roots: [{}]", q(&p.display().to_string())),
            Need::Delegate(n) => write!(f, "delegates: [{}]", q(n)),
            Need::AttachmentState => write!(f, "attachment-state"),
            Need::Dhcp => write!(f, "dhcp.socket"),
        }
    }
}

/// The namespace a need is about, if one.
pub(super) fn need_kind(n: &Need) -> Option<Kind> {
    match n {
        Need::Read(k)
        | Need::Create(k, _)
        | Need::Modify(k)
        | Need::Move(k)
        | Need::Addresses(k)
        | Need::Routes(k)
        | Need::Announce(k)
        | Need::TrafficControl(k)
        | Need::ConfigVlans(k)
        | Need::Sysctl(k, _) => Some(*k),
        Need::Host
        | Need::Name(_)
        | Need::UnknownName
        | Need::Prefix(_)
        | Need::Links(_)
        | Need::Masters(_)
        | Need::Bridges(_)
        | Need::Firewall(_) => Some(Kind::Host),
        Need::IpamRoot(_) | Need::Delegate(_) | Need::AttachmentState | Need::Dhcp => None,
    }
}

pub(super) fn push<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

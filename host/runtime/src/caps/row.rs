//! A row of the capability catalog ([`Entry`]): what one host function may
//! do, the policy field that grants it (in prose, and as [`Grant`]s read
//! from its audit record), and how the journal undoes it. Each interface
//! module holds its own rows, next to its host functions, and names its row
//! in every call it makes (`StoreData::cap`); `catalog` lists them all.

use crate::policy::{LinkKind, NsGrant};

/// One host function.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// `interface.function`, as in the audit log.
    pub call: &'static str,
    /// Its parameters, as the WIT function names them (a method's
    /// `self` aside): the keys of its audit record's `args`.
    pub args: &'static [&'static str],
    /// What it can do to the kernel.
    pub authority: &'static str,
    /// The policy field(s) that grant it, and the invariants on top.
    pub policy: &'static str,
    /// What the journal does if ADD fails.
    pub undo: &'static str,
    /// Whether it changes the kernel (or sends a packet, or IPAM state):
    /// only ADD and DEL may make such calls, and GC those with `in_gc`.
    pub mutates: bool,
    /// Whether GC may make it although it changes something (releasing
    /// reservations of attachments that are gone, running delegates' GC).
    pub in_gc: bool,
    /// The grants it needs, read from its audit record's arguments: the
    /// machine-readable part of `policy`, from which `wasmcni policy
    /// suggest` derives an entry (a new host function needs only its row).
    /// Empty when `policy` names no field.
    pub needs: &'static [Grant],
}

/// Which namespace a grant is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    /// The one the call acts in (its `ns` argument).
    Call,
    /// The one the argument names (`peer-ns`, `target`, `master-ns`), if
    /// it names one.
    Arg(&'static str),
}

/// A right of a namespace grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// `read`.
    Read,
    /// `create: [kind]`.
    Create(LinkKind),
    /// `modify`.
    Modify,
    /// `move`.
    Move,
    /// `addresses`.
    Addresses,
    /// `routes`.
    Routes,
    /// `announce`.
    Announce,
    /// `traffic-control`.
    TrafficControl,
    /// `config-vlans`.
    ConfigVlans,
}

impl Right {
    /// The field of a namespace's grant (`container.F`, `host.F`) that
    /// gives it.
    pub fn field(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Create(_) => "create",
            Right::Modify => "modify",
            Right::Move => "move",
            Right::Addresses => "addresses",
            Right::Routes => "routes",
            Right::Announce => "announce",
            Right::TrafficControl => "traffic-control",
            Right::ConfigVlans => "config-vlans",
        }
    }

    /// As a policy writes it: the field, and `create: [KIND]` for a link
    /// kind.
    pub fn written(self) -> String {
        match self {
            Right::Create(k) => format!("create: [{}]", k.name()),
            r => r.field().to_owned(),
        }
    }

    /// Whether namespace grant `g` gives it.
    pub fn granted_by(self, g: &NsGrant) -> bool {
        match self {
            Right::Read => g.read,
            Right::Create(k) => g.may_create(k),
            Right::Modify => g.modify,
            Right::Move => g.move_links,
            Right::Addresses => g.addresses,
            Right::Routes => g.routes,
            Right::Announce => g.announce,
            Right::TrafficControl => g.traffic_control,
            Right::ConfigVlans => g.config_vlans,
        }
    }

    /// Takes it out of `g` (the tests' grant just short of a call's).
    #[cfg(test)]
    pub fn revoke(self, g: &mut NsGrant) {
        match self {
            Right::Read => g.read = false,
            Right::Create(k) => g.create.retain(|c| *c != k),
            Right::Modify => g.modify = false,
            Right::Move => g.move_links = false,
            Right::Addresses => g.addresses = false,
            Right::Routes => g.routes = false,
            Right::Announce => g.announce = false,
            Right::TrafficControl => g.traffic_control = false,
            Right::ConfigVlans => g.config_vlans = false,
        }
    }
}

/// What a host link the plugin did not create needs granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkGrant {
    /// `links`: a call a bridge the network shares does not take.
    Links,
    /// `bridges` when it is a bridge (a call a shared bridge takes), else
    /// `links`.
    Shared,
    /// As [`LinkGrant::Shared`] when the boolean argument is true (a bridge
    /// brought up, made promiscuous), else [`LinkGrant::Links`].
    SharedIf(&'static str),
    /// `masters`: used as a master, never changed.
    Masters,
}

/// A grant a call needs, in terms of its audit arguments (named by their
/// key in the record's `args`; a dot goes into an object, as
/// `route.destination`). A call's record either names the namespace it
/// acts in (`ns`) or acts in none: the grants about a namespace (all but
/// [`Grant::IpamRoot`], [`Grant::Delegate`] and [`Grant::AttachmentState`])
/// are read only from the former, the others only from the latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A `host` entry, alone: a handle to the node namespace (the call
    /// acts in the host's, its record names no `ns`).
    HostEntry,
    /// A right in a namespace.
    Right(Ns, Right),
    /// A routing table taken: `routes` where rules may be added (the
    /// container namespace), in the host's the right to create a VRF.
    Tables,
    /// The argument names a new link in the namespace: in the host's, a
    /// name `names` must match (no name: the link keeps its own).
    NewName(&'static str, Ns),
    /// The argument is the index of a link in the namespace: in the
    /// host's, a link the plugin did not create needs the [`LinkGrant`].
    NodeLink(&'static str, Ns, LinkGrant),
    /// The argument (`addr/len`, an address or a route's destination) in
    /// the host namespace: its network inside `prefixes`.
    Prefix(&'static str),
    /// The argument is an object whose key is a firewall rule kind:
    /// `host.firewall.<kind>`.
    FirewallRules(&'static str),
    /// The argument lists firewall kinds: `host.firewall.<kind>` each.
    FirewallKinds(&'static str),
    /// The argument is a sysctl key: `sysctls`; in the host namespace the
    /// link a per-link key names, if the plugin did not create it, needs
    /// [`LinkGrant::Shared`] (`true`: a call a shared bridge takes) or
    /// [`LinkGrant::Links`].
    Sysctl(&'static str, bool),
    /// The argument is an IPAM data dir (absent: the default): under
    /// `ipam-roots`.
    IpamRoot(&'static str),
    /// The argument is a delegate's plugin type: in `delegates`.
    Delegate(&'static str),
    /// `attachment-state`.
    AttachmentState,
    /// `dhcp` (its `socket`).
    Dhcp,
}

pub(super) const READ: &[Grant] = &[Grant::Right(Ns::Call, Right::Read)];

/// `modify`, and the link `index` names as `links` in the host namespace.
pub(super) const MODIFY_LINK: &[Grant] = &[
    Grant::Right(Ns::Call, Right::Modify),
    Grant::NodeLink("index", Ns::Call, LinkGrant::Links),
];

/// `traffic-control`, and the link `index` names as `links` in the host
/// namespace.
pub(super) const TRAFFIC_CONTROL: &[Grant] = &[
    Grant::Right(Ns::Call, Right::TrafficControl),
    Grant::NodeLink("index", Ns::Call, LinkGrant::Links),
];

pub(super) const ATTACHMENT_STATE: &[Grant] = &[Grant::AttachmentState];

pub(super) const DHCP: &[Grant] = &[Grant::Dhcp];

pub(super) const HOST_LINK: &str = "host: only links of this attachment (alias mark, or created in the same call) or matching `links`; \
     a bridge the network shares only as its row says";

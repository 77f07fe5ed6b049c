//! The capability reference: every host function a plugin can import, with
//! the authority it exercises, the policy field that grants it (in prose,
//! and as [`Grant`]s read from its audit record), and how the journal undoes
//! it. `docs/capabilities.md` is generated from this table ([`markdown`]); a
//! unit test fails when a WIT function has no entry or the document is out
//! of date (`make docs` regenerates it).

use crate::policy::LinkKind;

/// One host function.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// `interface.function`, as in the audit log.
    pub call: &'static str,
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
}

const READ: &[Grant] = &[Grant::Right(Ns::Call, Right::Read)];

/// `modify`, and the link `index` names as `links` in the host namespace.
const MODIFY_LINK: &[Grant] = &[
    Grant::Right(Ns::Call, Right::Modify),
    Grant::NodeLink("index", Ns::Call, LinkGrant::Links),
];

/// `traffic-control`, and the link `index` names as `links` in the host
/// namespace.
const TRAFFIC_CONTROL: &[Grant] = &[
    Grant::Right(Ns::Call, Right::TrafficControl),
    Grant::NodeLink("index", Ns::Call, LinkGrant::Links),
];

const ATTACHMENT_STATE: &[Grant] = &[Grant::AttachmentState];

const HOST_LINK: &str = "host: only links of this attachment (alias mark, or created in the same call) or matching `links`; \
     a bridge the network shares only as its row says";

/// Every host function, in WIT order.
pub const ENTRIES: &[Entry] = &[
    Entry {
        call: "netns.container",
        authority: "handle to the container namespace (CNI_NETNS, verified nsfs, not the host's)",
        policy: "none (always)",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "netns.host",
        authority: "handle to the node namespace",
        policy: "`host` entry present",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[Grant::HostEntry],
    },
    Entry {
        call: "netns.[method]netns.kind",
        authority: "none: says which namespace a handle is",
        policy: "none",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "link.get-by-name",
        authority: "read one link",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "link.get-by-index",
        authority: "read one link",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "link.list",
        authority: "read every link",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "link.find-devices",
        authority: "read the links a sysfs device path or PCI address names (host only)",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "link.create-veth",
        authority: "create a veth pair, peer born in the other namespace",
        policy: "`create: [veth]` in both namespaces; host end named per `names`, marked; two more links within `max-links`",
        undo: "delete the pair",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Veth)), Grant::NewName("name", Ns::Call), Grant::Right(Ns::Arg("peer-ns"), Right::Create(LinkKind::Veth)), Grant::NewName("peer-name", Ns::Arg("peer-ns"))],
    },
    Entry {
        call: "link.create-bridge",
        authority: "create a bridge",
        policy: "`create: [bridge]`; host: named per `names`, marked; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Bridge)), Grant::NewName("name", Ns::Call)],
    },
    Entry {
        call: "link.create-dummy",
        authority: "create a dummy link",
        policy: "`create: [dummy]`; host: named per `names`, marked; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Dummy)), Grant::NewName("name", Ns::Call)],
    },
    Entry {
        call: "link.create-vrf",
        authority: "create a VRF device bound to a routing table (not local or main)",
        policy: "`create` lists `vrf` for the namespace; host: name per `names`; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Vrf)), Grant::NewName("name", Ns::Call)],
    },
    Entry {
        call: "link.create-tap",
        authority: "create a persistent tap (/dev/net/tun)",
        policy: "`create: [tap]`; host: named per `names`, marked; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Tap)), Grant::NewName("name", Ns::Call)],
    },
    Entry {
        call: "link.create-macvlan",
        authority: "create a macvlan on a master, born in a namespace",
        policy:
            "`create: [macvlan]` where born; host: named per `names`; master: host `masters` (read-only use), own or `links`; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Macvlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
    },
    Entry {
        call: "link.create-ipvlan",
        authority: "create an ipvlan on a master, born in a namespace",
        policy: "`create: [ipvlan]` where born; host: named per `names`; master as for macvlan; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Ipvlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
    },
    Entry {
        call: "link.create-vlan",
        authority: "create an 802.1Q vlan on a master, born in a namespace",
        policy: "`create: [vlan]` where born; host: named per `names`; master as for macvlan; within `max-links`",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Vlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
    },
    Entry {
        call: "link.move-to",
        authority: "move a link between the two namespaces",
        policy: "`move` in both; host source: own, `links` or `config-links`; moved into host: named per `names` (or the config's `device`), marked; a link the attachment's ADD took from the host: back under its recorded name",
        undo: "move it back under its old name and index, then restore its per-link sysctls, MTU, MAC, alias, master, hairpin and port VLANs, promiscuity, admin state, addresses and routes (all tables)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Move), Grant::Right(Ns::Arg("target"), Right::Move), Grant::NewName("new-name", Ns::Arg("target")), Grant::NodeLink("index", Ns::Call, LinkGrant::Links)],
    },
    Entry {
        call: "link.set-up",
        authority: "set a link up or down",
        policy: "`modify`; host: own or `links`; a stacked link whose up passes promiscuity to its lower device: lower own or `links`",
        undo: "restore the old state (and the routes setting it down flushed)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::SharedIf("up"))],
    },
    Entry {
        call: "link.set-mtu",
        authority: "change a link's MTU",
        policy: "`modify`; host: own or `links`",
        undo: "restore the old MTU (and the addresses and routes a small MTU drops)",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.set-mac",
        authority: "change a link's hardware address",
        policy: "`modify`; host: own or `links`; passthru macvlan: lower own or `links`",
        undo: "restore the old address",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.set-master",
        authority: "enslave a link to a bridge, or free it",
        policy: "`modify` on the link and on the master; host: both own or `links`",
        undo: "restore the old master (a port that left a bridge: then its VLANs)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::Links), Grant::NodeLink("master", Ns::Call, LinkGrant::Shared)],
    },
    Entry {
        call: "link.set-hairpin",
        authority: "set hairpin mode of a bridge port",
        policy: "`modify`; host: own or `links`",
        undo: "restore the old mode",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.port-vlans",
        authority: "read the VLANs of a bridge port",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "link.set-port-vlans",
        authority: "set the VLANs of a bridge port",
        policy: "`modify`; host: own or `links` (never a shared link); a VLAN the port is not in: only one the network config names (`vlan`, `vlanTrunk`, VLAN 1 native on a trunk), with `config-vlans`",
        undo: "put the old VLAN list back",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::Links), Grant::Right(Ns::Call, Right::ConfigVlans)],
    },
    Entry {
        call: "link.share",
        authority: "hand a host link this call created to its network (network mark)",
        policy: "`modify` in the host namespace; only links created in the same call",
        undo: "none of its own (the link's creation is undone by deleting it)",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.set-promiscuous",
        authority: "set or clear IFF_PROMISC",
        policy: "`modify`; host: own or `links`; a macvlan/ipvlan/vlan: its lower device own or `links` (never a `masters` link)",
        undo: "restore the old flag",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::SharedIf("on"))],
    },
    Entry {
        call: "link.set-allmulticast",
        authority: "set or clear IFF_ALLMULTI",
        policy: "`modify`; host: own or `links`; a macvlan/ipvlan/vlan: its lower device own or `links`",
        undo: "restore the old flag",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.set-txqlen",
        authority: "set the transmit queue length (IFLA_TXQLEN)",
        policy: "`modify`; host: own or `links`",
        undo: "restore the old length",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.set-name",
        authority: "rename a link",
        policy: "`modify`; host: own or `links`, new name per `names`",
        undo: "restore the old name",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::Links), Grant::NewName("name", Ns::Call)],
    },
    Entry {
        call: "link.set-alias",
        authority: "set a link's alias",
        policy: "`modify`; container only (host alias is the mark)",
        undo: "restore the old alias",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "link.delete",
        authority: "delete a link",
        policy: "`modify`; host: own or `links`; during ADD only links created in the same call (and still there: a link the kernel deleted along with another is forgotten)",
        undo: "none needed (only links created in this ADD)",
        mutates: true,
        in_gc: false,
        needs: MODIFY_LINK,
    },
    Entry {
        call: "address.list",
        authority: "read addresses",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "address.add",
        authority: "add an address to a link",
        policy: "`addresses`; the address never another attachment's reservation in any network's IPAM state; host: link own or `links`, address inside `prefixes`, and on an own link no connected prefix covering another attachment's reservation; marked IFA_PROTO 87",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Addresses), Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared), Grant::Prefix("prefix")],
    },
    Entry {
        call: "address.delete",
        authority: "delete an address of a link",
        policy: "`addresses`; host: link own or `links`, and only addresses wasmcni added (IFA_PROTO 87)",
        undo: "add it back (with the link's other addresses and routes the kernel drops along)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Addresses), Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared)],
    },
    Entry {
        call: "address.announce",
        authority: "send one gratuitous ARP from a link",
        policy: "`announce`; host: link own or `links`",
        undo: "none (a packet)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Announce), Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared)],
    },
    Entry {
        call: "route.list",
        authority: "read routes",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "route.add",
        authority: "add a route",
        policy: "`routes`; host: main table, destination inside `prefixes` and covering no other attachment's reservation in any network's IPAM state, through a link own or `links`, marked with protocol 87",
        undo: "delete it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Routes), Grant::Prefix("route.destination"), Grant::NodeLink("route.link-index", Ns::Call, LinkGrant::Links)],
    },
    Entry {
        call: "route.replace",
        authority: "add or replace a route",
        policy: "`routes`; host: as add, and only replacing wasmcni's routes",
        undo: "put the old route back, or delete",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Routes), Grant::Prefix("route.destination"), Grant::NodeLink("route.link-index", Ns::Call, LinkGrant::Links)],
    },
    Entry {
        call: "route.list-rules",
        authority: "list the to-table policy routing rules",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "route.lock-tables",
        authority: "take the namespace's routing-table lock (flock under the run dir, by nsfs inode) to the invocation's end, waiting until its deadline: a concurrent ADD in that namespace waits to choose a table",
        policy: "`routes` in the container namespace (as add-rule), or `create: [\"vrf\"]`; a no-op in CHECK, GC and STATUS",
        undo: "none (released when the invocation ends)",
        mutates: false,
        in_gc: false,
        needs: &[Grant::Tables],
    },
    Entry {
        call: "route.add-rule",
        authority: "add a policy routing rule sending matching traffic (source, destination prefix) to a table",
        policy: "`routes`; container namespace only (the host's rules are the node's)",
        undo: "delete the rule as the kernel made it",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Routes)],
    },
    Entry {
        call: "route.delete-rule",
        authority: "delete a policy routing rule",
        policy: "`routes`; container namespace only",
        undo: "add it back",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Routes)],
    },
    Entry {
        call: "route.delete",
        authority: "delete a route",
        policy: "`routes`; host: only wasmcni's routes",
        undo: "add it back (beside other routes with the same key)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Right(Ns::Call, Right::Routes)],
    },
    Entry {
        call: "sysctl.get",
        authority: "read a net.* sysctl",
        policy: "`sysctls` patterns; host per-link keys: link own or `links`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[Grant::Sysctl("key", true)],
    },
    Entry {
        call: "sysctl.set",
        authority: "write a net.* sysctl",
        policy: "`sysctls` patterns; host per-link keys: link own or `links`",
        undo: "a key of a link created in this ADD: none (the link goes); of another link: its old value, and the addresses and routes it may flush; any other key (`all`, `default`, global): the namespace's whole net. tree, written back parents first; a write that changes nothing is skipped",
        mutates: true,
        in_gc: false,
        needs: &[Grant::Sysctl("key", false)],
    },
    Entry {
        call: "traffic-control.limit-transmit",
        authority: "install a `tbf` root qdisc (handle `1:`) on a link, sized as the reference bandwidth plugin sizes it",
        policy: "`traffic-control`; host: link own or `links`; never replaces a qdisc (already-exists); the `ifb` within `max-links`",
        undo: "delete the qdisc (nothing for a link created in this ADD)",
        mutates: true,
        in_gc: false,
        needs: TRAFFIC_CONTROL,
    },
    Entry {
        call: "traffic-control.limit-receive",
        authority: "create the attachment's `ifb` (`bwp` + hash of network and container ID, marked as the attachment's), put a `tbf` on it, add an `ingress` qdisc and a redirect filter to the link",
        policy: "`traffic-control`; host: link own or `links`; never replaces a qdisc (already-exists)",
        undo: "delete the `ingress` qdisc (its filter goes along) and the `ifb`",
        mutates: true,
        in_gc: false,
        needs: TRAFFIC_CONTROL,
    },
    Entry {
        call: "traffic-control.limits",
        authority: "read a link's qdiscs, filters and its attachment's `ifb`",
        policy: "`read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "traffic-control.remove-limits",
        authority: "delete a link's root `tbf` (`1:`) and `ingress` qdisc, and the attachment's `ifb`",
        policy: "`traffic-control`; host: link own or `links`, `ifb` only this attachment's; refused during ADD",
        undo: "none (refused during ADD)",
        mutates: true,
        in_gc: false,
        needs: TRAFFIC_CONTROL,
    },
    Entry {
        call: "traffic-control.collect-garbage",
        authority: "delete the `ifb`s of this network's attachments that are not in `cni.dev/valid-attachments`",
        policy: "`traffic-control`; GC only; only `ifb` links marked for this network under their attachment's `ifb` name",
        undo: "none (GC only)",
        mutates: true,
        in_gc: true,
        needs: &[Grant::Right(Ns::Call, Right::TrafficControl)],
    },
    Entry {
        call: "firewall.add",
        authority: "install nftables rules for the attachment in wasmcni's own tables (`inet wasmcni`, `bridge wasmcni`), tagged with it, replacing its rules of the same kind (every address of the attachment, IPv4 and IPv6, in one call), in one batch: port mappings (DNAT entered only through `fib daddr type local`, at nat priority -90 after every iptables nat chain; hairpin/localhost masquerade; `route_localnet=1` on the node interface towards the container and a 127/8 guard there), masquerade, forward marks (and, once per node where an iptables `filter` table exists, the one rule outside wasmcni's tables: `FORWARD -j WASMCNI-FORWARD`, which runs `CNI-ADMIN` and accepts the mark, installed with `iptables`), bridge isolation, MAC spoof checks (`bridge wasmcni`); UDP conntrack entries to mapped ports flushed",
        policy: "host `firewall.<kind>` (`port-mappings`, `masquerade`, `forward`, `isolation`, `mac-spoof`); ADD only; the container address must be one the attachment owns (an IPAM delegate's result on the runtime's own config in this invocation, an address the attachment's records hold for this incarnation, or one inside the entry's `static-ranges`; never a prevResult's alone, nor what the container's namespace holds), and never a loopback, unspecified, multicast, link-local or IPv4-mapped address; every port mapping must be one of the runtime's `runtimeConfig.portMappings` (host port, container port, protocol, host IP), read by the host from stdin; links: own (isolation: or a bridge its network shares); never a table, chain or handle of the plugin's choosing",
        undo: "remove the attachment's rules of that kind by tag (and its chains; the tables once empty); the old `route_localnet` written back (a batch whose acknowledgement was lost is looked for and undone too); the static FORWARD rule stays",
        mutates: true,
        in_gc: false,
        needs: &[Grant::FirewallRules("rules")],
    },
    Entry {
        call: "firewall.check",
        authority: "read wasmcni's nftables rules of the attachment",
        policy: "host `read`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: READ,
    },
    Entry {
        call: "firewall.remove",
        authority: "delete the attachment's rules of the given kinds (by tag), its chains, and the tables once no attachment has rules left; `route_localnet` back to 0 on an interface whose last port map goes, if wasmcni's first port map there found it 0",
        policy: "host `firewall.<kind>` for each kind (at most 5); refused during ADD",
        undo: "none (refused during ADD)",
        mutates: true,
        in_gc: false,
        needs: &[Grant::FirewallKinds("kinds")],
    },
    Entry {
        call: "firewall.collect-garbage",
        authority: "delete the rules of the given kinds of this network's attachments that are not in `cni.dev/valid-attachments`",
        policy: "host `firewall.<kind>` for each kind (at most 5); GC only; only rules tagged with this network",
        undo: "none (GC only)",
        mutates: true,
        in_gc: true,
        needs: &[Grant::FirewallKinds("kinds")],
    },
    Entry {
        call: "ipam-store.[static]store.open",
        authority: "open and lock the IPAM state of the config's network (`<data-dir>/<name>`)",
        policy: "`ipam-roots`: the data dir lies under one of them (default /var/lib/cni/networks)",
        undo: "none (opening changes nothing; the lock ends with the handle)",
        mutates: false,
        in_gc: false,
        needs: &[Grant::IpamRoot("data-dir")],
    },
    Entry {
        call: "ipam-store.[method]store.reserve",
        authority: "reserve an address for this attachment (a whole file, never partial)",
        policy: "an open store; the holder is always this attachment",
        undo: "release it and put the range's last-reserved address back",
        mutates: true,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "ipam-store.[method]store.last-reserved",
        authority: "read a range set's last reserved address",
        policy: "an open store",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "ipam-store.[method]store.list",
        authority: "read the network's reservations",
        policy: "an open store",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "ipam-store.[method]store.owned",
        authority: "read this attachment's reservations",
        policy: "an open store",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "ipam-store.[method]store.release",
        authority: "release one reservation",
        policy: "an open store; only this attachment's, or in GC one whose holder is not a valid attachment",
        undo: "reserve it again for its holder",
        mutates: true,
        in_gc: true,
        needs: &[],
    },
    Entry {
        call: "ipam-store.[method]store.release-owned",
        authority: "release every reservation of this attachment",
        policy: "an open store",
        undo: "reserve them again",
        mutates: true,
        in_gc: false,
        needs: &[],
    },
    Entry {
        call: "delegate.run",
        authority: "run another plugin (IPAM) with this invocation's environment and a config: wasm in-process under its own policy, or a native binary from CNI_PATH",
        policy: "`delegates` (wasm) or `native-delegates` (native) names it; the same command as the plugin's own, or DEL during ADD; it runs under the caller's network, GC valid list, devices and port mappings whatever its config says, and its ADD result is the attachment's only if its config is the runtime's own",
        undo: "a wasm delegate's changes join the journal; a native delegate's ADD is undone by running its DEL",
        // What a delegate may change is decided by its own command, which
        // must be the caller's (or DEL during ADD): a CHECK's delegate is
        // read-only.
        mutates: false,
        in_gc: false,
        needs: &[Grant::Delegate("plugin-type")],
    },
    Entry {
        call: "attachment-state.get",
        authority: "read a value of this plugin's own record for this attachment",
        policy: "`attachment-state: true`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: ATTACHMENT_STATE,
    },
    Entry {
        call: "attachment-state.keys",
        authority: "list the keys of this plugin's own record for this attachment",
        policy: "`attachment-state: true`",
        undo: "none (no side effect)",
        mutates: false,
        in_gc: false,
        needs: ATTACHMENT_STATE,
    },
    Entry {
        call: "attachment-state.set",
        authority: "set a value in this plugin's own record for this attachment (at most 32 keys of 64 bytes, values of 4096 bytes; written atomically under the state root)",
        policy: "`attachment-state: true`; the record is keyed by the runtime's network, container ID and ifname and the plugin's name, never by an argument",
        undo: "put the record's old values back; the host removes the record after a successful DEL and in GC",
        mutates: true,
        in_gc: false,
        needs: ATTACHMENT_STATE,
    },
    Entry {
        call: "attachment-state.remove",
        authority: "remove a key from this plugin's own record for this attachment",
        policy: "`attachment-state: true`",
        undo: "put the record's old values back",
        mutates: true,
        in_gc: false,
        needs: ATTACHMENT_STATE,
    },
];

/// The entry for `call`.
pub fn entry(call: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.call == call)
}

/// `docs/capabilities.md`.
pub fn markdown() -> String {
    let mut s = String::from(
        "<!-- Generated from host/runtime/src/caps/catalog.rs by `make docs`; CI fails when it is stale. -->\n\
         # wasmcni capability reference\n\n\
         Every host function a plugin can import (WIT package `wasmcni:plugin`, in `wit/`), \
         what it can do, which policy field grants it, and what the journal does when ADD fails.\n\n\
         Invariants no policy can waive:\n\
         - a plugin acts only in the two namespaces it is handed (container from `CNI_NETNS`, host);\n\
         - ownership is by attachment (network, container ID, ifname): in the host namespace a \
         plugin controls only links of its own attachment (alias `wasmcni:<network>:<container id>:<ifname>`, \
         or created in the same call) and links matching its `links` patterns; a bridge its network \
         shares (alias `wasmcni-net:<network>`, or an admin's bridge matching `bridges` that no other \
         network or attachment has marked, and only if it really is a bridge) may only be brought up, made promiscuous, given an address, have \
         its MAC pinned, and have the attachment's links enslaved; it is never deleted while another \
         attachment's link is on it; a `masters` link is used as a master and never changed, also \
         not through a link stacked on it;\n\
         - new host links are named per `names` (default `veth*`, `cni*`);\n\
         - host addresses only on such links, and only those wasmcni added (IFA_PROTO 87) may be \
         deleted; host routes only in the main table and through links the plugin controls, and \
         only routes wasmcni created (protocol 87) may be replaced or deleted; a local, multipath \
         or nexthop route in the way of a replace is never touched; host addresses and route \
         destinations lie in the grant's `prefixes` and never cover an address any network's IPAM \
         state on the node reserves for another attachment (nor does a container address);\n\
         - a firewall rule names as the container's only an address the attachment owns: an IPAM \
         delegate's result on the runtime's own config, an address its records hold for this \
         incarnation, or one in the entry's `static-ranges`; `route_localnet` is set only on the \
         attachment's own link or its network's bridge;\n\
         - sysctls only under `net.` and the grant's `sysctls` patterns (host `all`/`default` keys \
         only when a pattern names them literally); per-link host keys only for such links;\n\
         - the network is the runtime's: a delegate runs under its caller's, whatever its config \
         says; IPAM state only for that network, under the grant's `ipam-roots`, reserved for \
         this attachment, released only by it (or in GC when its holder is not a valid attachment);\n\
         - delegates only those the grant lists, each under its own policy entry, with the \
         caller's command (or DEL during ADD); their changes join the caller's journal;\n\
         - during ADD a plugin deletes only links it created in the same call (and that still \
         exist); before a change the kernel follows with flushes the journal records what it \
         flushes, and a change it could not undo (a link with a multipath route or a permanent \
         neighbour entry set down or moved) is refused;\n\
         - one invocation keeps at most `max-links` links it created (default 16, both namespaces \
         together, each end of a veth pair counted): the host removes every one at DEL or GC;\n\
         - a denied call returns `access-denied`, is audited and has no side effect; every call \
         counts against the `host-calls` budget.\n\n\
         Calls that change the kernel are refused during CHECK, GC, STATUS and VERSION (GC may release \
         IPAM reservations of attachments that are gone).\n\n\
         | call | changes the kernel | authority | policy | undo on failed ADD |\n|---|---|---|---|---|\n",
    );
    for e in ENTRIES {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.call,
            if e.mutates { "yes" } else { "no" },
            e.authority,
            e.policy,
            e.undo
        ));
    }
    s.push_str(&format!("\nHost links: {HOST_LINK}.\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .expect("workspace root")
    }

    /// Every function of every interface the plugin world imports, read
    /// from `wit/` itself.
    fn wit_functions() -> Vec<String> {
        let mut resolve = wit_parser::Resolve::default();
        let (pkg, _) = resolve.push_dir(root().join("wit")).expect("wit parses");
        let world = resolve
            .select_world(&[pkg], Some("plugin"))
            .expect("plugin world");
        let mut out = Vec::new();
        for (_, item) in &resolve.worlds[world].imports {
            if let wit_parser::WorldItem::Interface { id, .. } = item {
                let iface = &resolve.interfaces[*id];
                let name = iface.name.clone().unwrap_or_default();
                for f in iface.functions.keys() {
                    out.push(format!("{name}.{f}"));
                }
            }
        }
        out
    }

    /// What the prose must name for a grant in `needs`: a field, in
    /// backticks as the column writes it (or words the column uses for it).
    fn named_in_prose(g: &Grant) -> Vec<&'static str> {
        match g {
            Grant::HostEntry => vec!["`host`"],
            Grant::Right(_, r) => match r {
                Right::Read => vec!["`read`"],
                Right::Create(k) => vec!["`create", k.name()],
                Right::Modify => vec!["`modify`"],
                Right::Move => vec!["`move`"],
                Right::Addresses => vec!["`addresses`"],
                Right::Routes => vec!["`routes`"],
                Right::Announce => vec!["`announce`"],
                Right::TrafficControl => vec!["`traffic-control`"],
                Right::ConfigVlans => vec!["`config-vlans`"],
            },
            Grant::Tables => vec!["`routes`", "vrf"],
            // A link's row says `links` or refers to another row's; a
            // name, `names`; a master, `masters` or "master as for".
            Grant::NewName(..) => vec!["`names`"],
            Grant::NodeLink(_, _, LinkGrant::Masters) => vec!["master"],
            Grant::NodeLink(..) | Grant::Prefix(_) => vec!["host"],
            Grant::FirewallRules(_) | Grant::FirewallKinds(_) => vec!["`firewall.<kind>`"],
            Grant::Sysctl(..) => vec!["`sysctls`"],
            Grant::IpamRoot(_) => vec!["`ipam-roots`"],
            Grant::Delegate(_) => vec!["`delegates`"],
            Grant::AttachmentState => vec!["`attachment-state"],
        }
    }

    /// The prose and `needs` of every row agree: a row whose policy
    /// names a field (in backticks) needs something, and one that names
    /// none needs nothing; a row that changes the kernel (or needs a grant)
    /// but says which field grants it never has an empty `needs`; each
    /// need is one the prose names.
    #[test]
    fn every_row_states_the_grants_its_policy_names() {
        let mut wrong = Vec::new();
        for e in ENTRIES {
            let names_a_field = e.policy.contains('`');
            if names_a_field == e.needs.is_empty() {
                wrong.push(format!(
                    "{}: policy {:?} but needs {:?}",
                    e.call, e.policy, e.needs
                ));
            }
            if e.mutates && names_a_field && e.needs.is_empty() {
                wrong.push(format!("{}: changes the kernel, needs nothing", e.call));
            }
            for g in e.needs {
                for word in named_in_prose(g) {
                    if !e.policy.contains(word) {
                        wrong.push(format!("{}: needs {g:?}, policy has no {word}", e.call));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn a_call_the_catalog_does_not_know_has_no_entry() {
        assert!(entry("link.set-everything").is_none());
        assert!(entry("").is_none());
        assert!(entry("link.set-up").is_some_and(|e| !e.needs.is_empty()));
    }

    #[test]
    fn every_host_function_has_an_entry() {
        let functions = wit_functions();
        assert!(functions.len() > 20, "{functions:?}");
        let missing: Vec<_> = functions.iter().filter(|f| entry(f).is_none()).collect();
        assert!(missing.is_empty(), "no catalog entry for {missing:?}");
        let stale: Vec<_> = ENTRIES
            .iter()
            .filter(|e| !functions.contains(&e.call.to_owned()))
            .map(|e| e.call)
            .collect();
        assert!(
            stale.is_empty(),
            "catalog entries for no WIT function: {stale:?}"
        );
    }

    #[test]
    fn capabilities_doc_is_up_to_date() {
        let path = root().join("docs").join("capabilities.md");
        let want = markdown();
        if crate::config::get().update_docs {
            std::fs::create_dir_all(path.parent().expect("docs dir")).expect("mkdir docs");
            std::fs::write(&path, &want).expect("write docs");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/capabilities.md is out of date: run `make docs`"
        );
    }
}

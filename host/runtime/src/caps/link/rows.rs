//! The `link` interface's rows of the capability catalog (`catalog`), in
//! WIT order: what each host function may do, the grant it needs, its
//! undo. (The stacked kinds' rows are `caps::stacked`'s.)

use crate::caps::row::*;
use crate::caps::stacked::{CREATE_IPVLAN, CREATE_MACVLAN, CREATE_MACVLAN_WITH, CREATE_VLAN};
use crate::policy::LinkKind;

/// This interface's rows of the capability catalog, in WIT order.
pub(crate) const ROWS: &[&Entry] = &[
    &GET_BY_NAME,
    &GET_BY_INDEX,
    &LIST,
    &FIND_DEVICES,
    &CREATE_VETH,
    &CREATE_BRIDGE,
    &CREATE_DUMMY,
    &CREATE_VRF,
    &CREATE_TAP,
    &CREATE_MACVLAN,
    &CREATE_MACVLAN_WITH,
    &CREATE_IPVLAN,
    &CREATE_VLAN,
    &MOVE_TO,
    &SET_UP,
    &SET_MTU,
    &SET_MAC,
    &SET_MASTER,
    &SET_HAIRPIN,
    &SET_PORT_ISOLATED,
    &PORT_VLANS,
    &SET_PORT_VLANS,
    &SHARE,
    &SET_PROMISCUOUS,
    &SET_ALLMULTICAST,
    &SET_TXQLEN,
    &SET_NAME,
    &SET_ALIAS,
    &DELETE,
];

/// `link.get-by-name`.
pub(super) const GET_BY_NAME: Entry = Entry {
    call: "link.get-by-name",
    args: &["ns", "name"],
    authority: "read one link",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `link.get-by-index`.
pub(super) const GET_BY_INDEX: Entry = Entry {
    call: "link.get-by-index",
    args: &["ns", "index"],
    authority: "read one link",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `link.list`.
pub(super) const LIST: Entry = Entry {
    call: "link.list",
    args: &["ns"],
    authority: "read every link",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `link.find-devices`.
pub(super) const FIND_DEVICES: Entry = Entry {
    call: "link.find-devices",
    args: &["ns", "selector"],
    authority: "read the links a sysfs device path or PCI address names (host only)",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `link.create-veth`.
pub(super) const CREATE_VETH: Entry = Entry {
    call: "link.create-veth",
    args: &["ns", "name", "peer-ns", "peer-name", "options", "peer-mac"],
    authority: "create a veth pair, peer born in the other namespace",
    policy: "`create: [veth]` in both namespaces; host end named per `names`, marked; two more links within `max-links`",
    undo: "delete the pair",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Veth)), Grant::NewName("name", Ns::Call), Grant::Right(Ns::Arg("peer-ns"), Right::Create(LinkKind::Veth)), Grant::NewName("peer-name", Ns::Arg("peer-ns"))],
};

/// `link.create-bridge`.
pub(super) const CREATE_BRIDGE: Entry = Entry {
    call: "link.create-bridge",
    args: &["ns", "name", "options", "bridge"],
    authority: "create a bridge",
    policy: "`create: [bridge]`; host: named per `names`, marked; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Create(LinkKind::Bridge)),
        Grant::NewName("name", Ns::Call),
    ],
};

/// `link.create-dummy`.
pub(super) const CREATE_DUMMY: Entry = Entry {
    call: "link.create-dummy",
    args: &["ns", "name", "options"],
    authority: "create a dummy link",
    policy: "`create: [dummy]`; host: named per `names`, marked; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Create(LinkKind::Dummy)),
        Grant::NewName("name", Ns::Call),
    ],
};

/// `link.create-vrf`.
pub(super) const CREATE_VRF: Entry = Entry {
    call: "link.create-vrf",
    args: &["ns", "name", "table", "options"],
    authority: "create a VRF device bound to a routing table (not local or main)",
    policy: "`create` lists `vrf` for the namespace; host: name per `names`; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Create(LinkKind::Vrf)),
        Grant::NewName("name", Ns::Call),
    ],
};

/// `link.create-tap`.
pub(super) const CREATE_TAP: Entry = Entry {
    call: "link.create-tap",
    args: &["ns", "name", "options", "tap"],
    authority: "create a persistent tap (/dev/net/tun)",
    policy: "`create: [tap]`; host: named per `names`, marked; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Create(LinkKind::Tap)),
        Grant::NewName("name", Ns::Call),
    ],
};

/// `link.move-to`.
pub(super) const MOVE_TO: Entry = Entry {
    call: "link.move-to",
    args: &["ns", "index", "target", "new-name"],
    authority: "move a link between the two namespaces",
    policy: "`move` in both; host source: own, `links` or `config-links`; moved into host: named per `names` (or the config's `device`), marked; a link the attachment's ADD took from the host: back under its recorded name",
    undo: "move it back under its old name and index, then restore its per-link sysctls, MTU, MAC, alias, master, hairpin and port VLANs, promiscuity, admin state, addresses and routes (all tables)",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Move), Grant::Right(Ns::Arg("target"), Right::Move), Grant::NewName("new-name", Ns::Arg("target")), Grant::NodeLink("index", Ns::Call, LinkGrant::Links)],
};

/// `link.set-up`.
pub(super) const SET_UP: Entry = Entry {
    call: "link.set-up",
    args: &["ns", "index", "up"],
    authority: "set a link up or down",
    policy: "`modify`; host: own or `links`; a stacked link whose up passes promiscuity to its lower device: lower own or `links`",
    undo: "restore the old state (and the routes setting it down flushed)",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::SharedIf("up"))],
};

/// `link.set-mtu`.
pub(super) const SET_MTU: Entry = Entry {
    call: "link.set-mtu",
    args: &["ns", "index", "mtu"],
    authority: "change a link's MTU",
    policy: "`modify`; host: own or `links`",
    undo: "restore the old MTU (and the addresses and routes a small MTU drops)",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.set-mac`.
pub(super) const SET_MAC: Entry = Entry {
    call: "link.set-mac",
    args: &["ns", "index", "mac"],
    authority: "change a link's hardware address",
    policy: "`modify`; host: own or `links`; passthru macvlan: lower own or `links`",
    undo: "restore the old address",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.set-master`.
pub(super) const SET_MASTER: Entry = Entry {
    call: "link.set-master",
    args: &["ns", "index", "master"],
    authority: "enslave a link to a bridge, or free it",
    policy: "`modify` on the link and on the master; host: both own or `links`",
    undo: "restore the old master (a port that left a bridge: then its VLANs)",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Modify),
        Grant::NodeLink("index", Ns::Call, LinkGrant::Links),
        Grant::NodeLink("master", Ns::Call, LinkGrant::Shared),
    ],
};

/// `link.set-hairpin`.
pub(super) const SET_HAIRPIN: Entry = Entry {
    call: "link.set-hairpin",
    args: &["ns", "index", "on"],
    authority: "set hairpin mode of a bridge port",
    policy: "`modify`; host: own or `links`",
    undo: "restore the old mode",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.set-port-isolated`.
pub(super) const SET_PORT_ISOLATED: Entry = Entry {
    call: "link.set-port-isolated",
    args: &["ns", "index", "on"],
    authority: "isolate a bridge port from the bridge's other isolated ports, or free it",
    policy: "`modify`; host: own or `links`",
    undo: "restore the old flag",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.port-vlans`.
pub(super) const PORT_VLANS: Entry = Entry {
    call: "link.port-vlans",
    args: &["ns", "index"],
    authority: "read the VLANs of a bridge port",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `link.set-port-vlans`.
pub(super) const SET_PORT_VLANS: Entry = Entry {
    call: "link.set-port-vlans",
    args: &["ns", "index", "vlans"],
    authority: "set the VLANs of a bridge port",
    policy: "`modify`; host: own or `links` (never a shared link); a VLAN the port is not in: only one the network config names (`vlan`, `vlanTrunk`, VLAN 1 native on a trunk), with `config-vlans`",
    undo: "put the old VLAN list back",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::Links), Grant::Right(Ns::Call, Right::ConfigVlans)],
};

/// `link.share`.
pub(super) const SHARE: Entry = Entry {
    call: "link.share",
    args: &["ns", "index"],
    authority: "hand a host link this call created to its network (network mark)",
    policy: "`modify` in the host namespace; only links created in the same call",
    undo: "none of its own (the link's creation is undone by deleting it)",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.set-promiscuous`.
pub(super) const SET_PROMISCUOUS: Entry = Entry {
    call: "link.set-promiscuous",
    args: &["ns", "index", "on"],
    authority: "set or clear IFF_PROMISC",
    policy: "`modify`; host: own or `links`; a macvlan/ipvlan/vlan: its lower device own or `links` (never a `masters` link)",
    undo: "restore the old flag",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Modify), Grant::NodeLink("index", Ns::Call, LinkGrant::SharedIf("on"))],
};

/// `link.set-allmulticast`.
pub(super) const SET_ALLMULTICAST: Entry = Entry {
    call: "link.set-allmulticast",
    args: &["ns", "index", "on"],
    authority: "set or clear IFF_ALLMULTI",
    policy:
        "`modify`; host: own or `links`; a macvlan/ipvlan/vlan: its lower device own or `links`",
    undo: "restore the old flag",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.set-txqlen`.
pub(super) const SET_TXQLEN: Entry = Entry {
    call: "link.set-txqlen",
    args: &["ns", "index", "txqlen"],
    authority: "set the transmit queue length (IFLA_TXQLEN)",
    policy: "`modify`; host: own or `links`",
    undo: "restore the old length",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.set-name`.
pub(super) const SET_NAME: Entry = Entry {
    call: "link.set-name",
    args: &["ns", "index", "name"],
    authority: "rename a link",
    policy: "`modify`; host: own or `links`, new name per `names`",
    undo: "restore the old name",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Modify),
        Grant::NodeLink("index", Ns::Call, LinkGrant::Links),
        Grant::NewName("name", Ns::Call),
    ],
};

/// `link.set-alias`.
pub(super) const SET_ALIAS: Entry = Entry {
    call: "link.set-alias",
    args: &["ns", "index", "alias"],
    authority: "set a link's alias",
    policy: "`modify`; container only (host alias is the mark)",
    undo: "restore the old alias",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

/// `link.delete`.
pub(super) const DELETE: Entry = Entry {
    call: "link.delete",
    args: &["ns", "index"],
    authority: "delete a link",
    policy: "`modify`; host: own or `links`; during ADD only links created in the same call (and still there: a link the kernel deleted along with another is forgotten)",
    undo: "none needed (only links created in this ADD)",
    mutates: true,
    in_gc: false,
    needs: MODIFY_LINK,
};

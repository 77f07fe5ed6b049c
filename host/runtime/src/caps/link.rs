//! `wasmcni:plugin/link`.

use super::ctx::Inverse;
use super::route::RouteUndo;
use super::row::*;
use super::stacked::{CREATE_IPVLAN, CREATE_MACVLAN, CREATE_MACVLAN_WITH, CREATE_VLAN, MAX_VID};
use std::os::fd::{AsFd, OwnedFd};

use netlink_packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, InfoMacVtap, LinkAttribute, LinkFlags, LinkInfo as NlInfo,
    MacVlanMode, MacVtapMode,
};
use serde_json::Value;
use wasmtime::component::Resource;

use super::args::{fields, AuditArg, Named};
use super::bindings::wasmcni::plugin::link::{
    BridgeOptions, DeviceSelector, Host, IpvlanMode, LinkInfo, LinkOptions, MacvlanMode,
    MacvlanOptions, PortVlan, TapOptions, VethPair,
};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{CapError, Link, NsHandle};
use super::ctx::{bounded, Ctx, StoreData, MAX_ALIAS};
use crate::netlink::{LinkOpts, Netlink, NlError, SubKind};
use crate::netns::Kind;
use crate::policy::{LinkKind, DEFAULT_HOST_NAMES};

/// The longest hardware address accepted (`MAX_ADDR_LEN`).
const MAX_MAC: usize = 32;

/// `IFLA_BRPORT_ISOLATED`: a bridge port's isolation flag.
const IFLA_BRPORT_ISOLATED: u16 = 33;

/// Whether a bridge port's settings ([`Netlink::bridge_port`]) say it is
/// isolated.
fn port_isolated(port: &[(u16, Vec<u8>)]) -> bool {
    port.iter()
        .any(|(kind, value)| *kind == IFLA_BRPORT_ISOLATED && value.first() == Some(&1))
}

/// The device under a stacked link (see [`Ctx::lower_of`]).
struct Lower {
    /// Its namespace, if it is one of the plugin's two.
    ns: Option<Kind>,
    /// Its index there.
    index: u32,
    /// The link is a passthru macvlan / macvtap (its address and state are
    /// the lower device's).
    passthru: bool,
}

/// A valid Linux interface name (`cni_spec::ifname_problem`: the rule of
/// libcni and the kernel, shared with guest-sdk).
pub(crate) use cni_spec::valid_ifname;

fn check_name(name: &str) -> Result<(), CapError> {
    if valid_ifname(name) {
        Ok(())
    } else {
        Err(ErrorCode::InvalidArgument.into())
    }
}

fn check_mac(mac: &[u8]) -> Result<(), CapError> {
    if mac.is_empty() || mac.len() > MAX_MAC {
        return Err(ErrorCode::InvalidArgument.into());
    }
    Ok(())
}

fn mac_arg(mac: &[u8]) -> String {
    mac.iter()
        .take(MAX_MAC)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn opts(o: &LinkOptions) -> Result<LinkOpts, CapError> {
    if let Some(mac) = &o.mac {
        check_mac(mac)?;
    }
    Ok(LinkOpts {
        mtu: o.mtu,
        mac: o.mac.clone(),
        txqlen: o.txqlen,
    })
}

impl AuditArg for LinkOptions {
    fn audit(&self) -> Value {
        fields([
            ("mtu", self.mtu.audit()),
            ("mac", self.mac.as_deref().map(Mac).audit()),
            ("txqlen", self.txqlen.audit()),
        ])
    }
}

impl AuditArg for BridgeOptions {
    fn audit(&self) -> Value {
        fields([("vlan-filtering", self.vlan_filtering.audit())])
    }
}

impl AuditArg for TapOptions {
    fn audit(&self) -> Value {
        fields([
            ("multi-queue", self.multi_queue.audit()),
            ("owner", self.owner.audit()),
            ("group", self.group.audit()),
        ])
    }
}

impl AuditArg for DeviceSelector {
    fn audit(&self) -> Value {
        match self {
            DeviceSelector::KernelPath(p) => fields([("kernel-path", p.audit())]),
            DeviceSelector::PciAddress(a) => fields([("pci-address", a.audit())]),
        }
    }
}

/// A bridge port's VLANs: the first 16, and how many.
impl AuditArg for Vec<PortVlan> {
    fn audit(&self) -> Value {
        let shown = self.iter().take(16).map(|v| {
            fields([
                ("vid", v.vid.audit()),
                ("pvid", v.pvid.audit()),
                ("untagged", v.untagged.audit()),
            ])
        });
        fields([
            ("shown", Value::Array(shown.collect())),
            ("count", self.len().audit()),
        ])
    }
}

/// A MAC address, as `aa:bb:…` (at most the first 32 bytes).
struct Mac<'a>(&'a [u8]);

impl AuditArg for Mac<'_> {
    fn audit(&self) -> Value {
        Value::from(mac_arg(self.0))
    }
}

impl Ctx {
    fn with_owned(&self, kind: Kind, mut l: Link) -> Link {
        l.owned = kind == Kind::Host && self.owned(&l);
        l
    }

    /// A duplicate of a namespace's fd, to hand to the kernel while the
    /// socket of another namespace is borrowed.
    pub(super) fn ns_fd(&self, kind: Kind) -> Result<OwnedFd, CapError> {
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        ns.fd()
            .try_clone_to_owned()
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    fn index_of(&mut self, kind: Kind, name: &str) -> Result<u32, CapError> {
        let msg = self.netlink(kind)?.link_by_name(name)?;
        Ok(msg.header.index)
    }

    /// After a creation: journal the deletion, then mark it if it is on the
    /// host side, as this attachment's or (`shared`: a bridge) its
    /// network's. A link that cannot be marked is deleted again at once (an
    /// unmarked wasmcni link would be out of every plugin's reach).
    pub(super) fn created(
        &mut self,
        kind: Kind,
        name: &str,
        shared: bool,
    ) -> Result<u32, CapError> {
        self.created_with_peer(kind, name, shared, None)
            .map(|(index, _)| index)
    }

    /// [`Ctx::created`] for a link made with a `peer` (a veth's other
    /// end, namespace and name), which counts as created (it goes with its
    /// end) and is marked too. Between the kernel's answer and the marks,
    /// the intent log learns where the kernel made the attachment's node
    /// links ([`Ctx::intend_made`]): what proves an unmarked one is this
    /// ADD's if the process is killed before it marks it.
    pub(super) fn created_with_peer(
        &mut self,
        kind: Kind,
        name: &str,
        shared: bool,
        peer: Option<(Kind, &str)>,
    ) -> Result<(u32, Option<u32>), CapError> {
        crate::fault::at("step", "link-made");
        let msg = self.netlink(kind)?.link_by_name(name)?;
        let index = msg.header.index;
        let link_kind = Link::from_message(msg).kind;
        self.journal
            .record(LinkUndo::DeleteLink { ns: kind, index });
        // Deleted again at once on a failure below (its peer goes with it).
        let undo_now = |c: &mut Ctx, peer: Option<(Kind, &str, u32)>, e: CapError| {
            if let Ok(nl) = c.netlink(kind) {
                let _ = nl.delete_link(index);
            }
            c.journal.forget_link(kind, index);
            if let Some((pk, _, pi)) = peer {
                c.journal.forget_link(pk, pi);
            }
            Err(e)
        };
        let peer = match peer {
            Some((pk, pn)) => match self.index_of(pk, pn) {
                Ok(i) => {
                    self.journal.note_created(pk, i);
                    Some((pk, pn, i))
                }
                Err(e) => return undo_now(self, None, e),
            },
            None => None,
        };
        if !shared {
            let mut made = vec![(kind, name, link_kind.clone(), index)];
            if let Some((pk, pn, pi)) = peer {
                made.push((pk, pn, link_kind, pi));
            }
            if let Err(e) = self.intend_made(&made) {
                return undo_now(self, peer, e);
            }
        }
        crate::fault::at("step", "link-unmarked");
        if let Err(e) = self.mark(kind, index, shared) {
            return undo_now(self, peer, e);
        }
        if let Some((pk, _, pi)) = peer {
            self.mark(pk, pi, shared)?;
        }
        Ok((index, peer.map(|(_, _, i)| i)))
    }

    /// One attribute change of a link the plugin may modify: `set` in the
    /// kernel, then the inverse `undo` builds from the link as it was.
    fn change_link(
        &mut self,
        kind: Kind,
        index: u32,
        set: impl FnOnce(&mut Netlink) -> Result<(), NlError>,
        undo: impl FnOnce(Link) -> LinkUndo,
    ) -> Result<(), CapError> {
        self.change_link_as(kind, index, false, set, undo)
    }

    /// [`Ctx::change_link`] that also accepts a shared bridge when the
    /// caller has checked the change is one a shared link may take.
    fn change_link_as(
        &mut self,
        kind: Kind,
        index: u32,
        shared_ok: bool,
        set: impl FnOnce(&mut Netlink) -> Result<(), NlError>,
        undo: impl FnOnce(Link) -> LinkUndo,
    ) -> Result<(), CapError> {
        let l = self.modifiable_or_shared(kind, index, shared_ok)?;
        set(self.netlink(kind)?)?;
        self.record_for(kind, index, undo(l));
        Ok(())
    }

    /// A link the plugin makes, moves or renames in the host namespace
    /// must take a name its grant allows (`names`), so it cannot squat a
    /// name the node or another tool needs.
    fn check_new_name(&self, kind: Kind, name: &str) -> Result<(), CapError> {
        check_name(name)?;
        let g = self.ns_grant(kind);
        if kind == Kind::Host && !g.may_name(name) {
            let field = self.grant_field(kind, "names");
            return Err(match &g.names {
                Some(_) => CapError::denied_with(
                    format!("host link name {name:?} matches none of {field}"),
                    g.names_in_effect(),
                ),
                None => CapError::denied(format!(
                    "host link name {name:?} matches none of {field} (absent: the default {})",
                    DEFAULT_HOST_NAMES.join(", ")
                )),
            });
        }
        Ok(())
    }

    /// The device under a macvlan / macvtap / ipvlan / vlan link, if it is
    /// one: which of the plugin's namespaces it is in (`None`: one it was
    /// not given), its index there, and whether the link is a passthru
    /// macvlan. Changes to such a link reach its lower device.
    fn lower_of(&mut self, kind: Kind, index: u32) -> Result<Option<Lower>, CapError> {
        let msg = self.netlink(kind)?.link_by_index(index)?;
        let (mut stacked, mut passthru) = (false, false);
        let (mut parent, mut nsid) = (None, None);
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        match i {
                            NlInfo::Kind(k) => {
                                stacked = matches!(
                                    k,
                                    InfoKind::MacVlan
                                        | InfoKind::MacVtap
                                        | InfoKind::IpVlan
                                        | InfoKind::IpVtap
                                        | InfoKind::Vlan
                                )
                            }
                            NlInfo::Data(InfoData::MacVlan(d)) => {
                                passthru |= d.contains(&InfoMacVlan::Mode(MacVlanMode::Passthrough))
                            }
                            NlInfo::Data(InfoData::MacVtap(d)) => {
                                passthru |= d.contains(&InfoMacVtap::Mode(MacVtapMode::Passthrough))
                            }
                            _ => {}
                        }
                    }
                }
                LinkAttribute::Link(p) => parent = Some(*p),
                LinkAttribute::LinkNetNsId(id) => nsid = Some(*id),
                _ => {}
            }
        }
        let (true, Some(parent)) = (stacked, parent) else {
            return Ok(None);
        };
        // The host namespace is wasmcni's own: it may look there even for
        // a plugin that holds no handle to it.
        self.open_host()?;
        let ns = match nsid {
            None => Some(kind),
            Some(id) => {
                let other = match kind {
                    Kind::Container => Kind::Host,
                    Kind::Host => Kind::Container,
                };
                match self.ns_fd(other) {
                    Ok(fd) => {
                        let theirs = self.netlink(kind)?.nsid_of(fd.as_fd())?;
                        (theirs == Some(id)).then_some(other)
                    }
                    Err(_) => None,
                }
            }
        };
        Ok(Some(Lower {
            ns,
            index: parent,
            passthru,
        }))
    }

    /// Refuses a change to link `index` that the kernel passes on to its
    /// lower device (promiscuity, allmulti, a passthru macvlan's address
    /// and state) when that device is not the plugin's to change: a host
    /// link it may only use as a master (`masters`), or a link in a
    /// namespace it was not given.
    fn check_lower(&mut self, kind: Kind, index: u32, what: &str) -> Result<(), CapError> {
        let Some(lower) = self.lower_of(kind, index)? else {
            return Ok(());
        };
        match lower.ns {
            Some(Kind::Container) => Ok(()),
            Some(Kind::Host) => {
                let m = self.link(Kind::Host, lower.index)?;
                if self.check_host_link(Kind::Host, &m).is_ok() {
                    return Ok(());
                }
                Err(CapError::denied(format!(
                    "{what} of link {index} would change its lower device, host link {:?}, \
                     which the plugin may only use as a master (a wasmcni invariant)",
                    m.name
                )))
            }
            None => Err(CapError::denied(format!(
                "{what} of link {index} would change its lower device, which is in a \
                 namespace the plugin was not given (a wasmcni invariant)"
            ))),
        }
    }

    /// A port may join a VLAN it is not in only if the network config
    /// names it and the grant's `config-vlans` admits the config's VLANs:
    /// on a bridge other attachments (other tenants) share, any other VLAN
    /// may be theirs. Keeping, re-flagging or leaving its VLANs is always
    /// the port's own business.
    fn check_new_vlans(
        &self,
        kind: Kind,
        index: u32,
        want: &[crate::netlink::PortVlan],
        have: &[crate::netlink::PortVlan],
    ) -> Result<(), CapError> {
        let mut new = want
            .iter()
            .map(|v| v.vid)
            .filter(|vid| !have.iter().any(|h| h.vid == *vid));
        let Some(first) = new.next() else {
            return Ok(());
        };
        let field = self.grant_field(kind, "config-vlans");
        if !self.ns_grant(kind).config_vlans {
            return Err(CapError::denied(format!(
                "port {index} is not in VLAN {first}, and {field} is false: \
                 it may join no VLAN"
            )));
        }
        let named = &self.attachment.vlans;
        match std::iter::once(first)
            .chain(new)
            .find(|vid| !named.names(*vid))
        {
            None => Ok(()),
            Some(vid) => Err(CapError::denied_with(
                format!(
                    "port {index} is not in VLAN {vid}, which the network config does not \
                     name (`vlan`, `vlanTrunk`): {field} admits only those"
                ),
                format!("the config names {}", named.describe()),
            )),
        }
    }

    /// The VLANs of port `index` an ADD's undo must put back if it moves
    /// to `master`: those it has now, if that leaves a bridge (checked as
    /// the change itself is, first).
    fn vlans_to_keep(
        &mut self,
        kind: Kind,
        index: u32,
        master: Option<u32>,
    ) -> Result<Option<Vec<crate::netlink::PortVlan>>, CapError> {
        let l = self.modifiable(kind, index)?;
        let Some(old) = l.master else {
            return Ok(None);
        };
        if master == Some(old)
            || !self.journaling_for(kind, index)
            || self.link(kind, old)?.kind.as_deref() != Some("bridge")
        {
            return Ok(None);
        }
        Ok(Some(self.netlink(kind)?.port_vlans(index)?))
    }

    /// What a move resets, recorded before it (see [`LinkState`]).
    fn link_state(&mut self, kind: Kind, l: &Link) -> Result<LinkState, CapError> {
        let port = match l.master {
            Some(_) => self.netlink(kind)?.bridge_port(l.index)?,
            None => None,
        };
        let vlans = match port {
            Some(_) => Some(self.netlink(kind)?.port_vlans(l.index)?),
            None => None,
        };
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        let sysctls = crate::sysctl::snapshot_link(ns, &l.name)?;
        Ok(LinkState {
            up: l.up,
            mtu: l.mtu,
            mac: l.mac.clone(),
            alias: l.alias.clone().unwrap_or_default(),
            master: l.master,
            port,
            vlans,
            promisc: l.promiscuous,
            sysctls,
        })
    }

    /// After a deletion: the kernel may have taken other links along (a
    /// veth's peer, the macvlans on a link). Drops every created link that
    /// is gone from the created set and the journal, so no index names a
    /// link that is not there (the kernel reuses indexes).
    pub(super) fn refresh_created(&mut self) -> Result<(), CapError> {
        let mut present = Vec::new();
        for ns in self.journal.created_namespaces() {
            let links = self.netlink(ns)?.links()?;
            present.extend(links.iter().map(|m| (ns, m.header.index)));
        }
        self.journal
            .retain_created(|ns, index| present.contains(&(ns, index)));
        Ok(())
    }

    /// Refuses unless the namespace grant's `create` lists `what`.
    pub(super) fn require_create(&self, kind: Kind, what: LinkKind) -> Result<(), CapError> {
        if self.ns_grant(kind).may_create(what) {
            return Ok(());
        }
        Err(CapError::denied(format!(
            "{} does not list {:?}",
            self.grant_field(kind, "create"),
            what.name()
        )))
    }

    /// Refuses to make `n` more links past the grant's `max-links`: the
    /// links this invocation created and still keeps (both namespaces, a
    /// veth pair being two) and these may not be more. Every one of them is
    /// the host's to remove at the attachment's DEL or GC.
    pub(super) fn require_room(&self, n: usize) -> Result<(), CapError> {
        let kept = self.journal.created_links().len();
        let max = self.grant.max_links as usize;
        if kept + n <= max {
            return Ok(());
        }
        Err(CapError::denied(format!(
            "{} is {max}: the plugin keeps {kept} link(s) it created in this invocation, \
             and this call would make {n} more",
            self.entry_field("max-links")
        )))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_sub(
        &mut self,
        master_kind: Kind,
        master: u32,
        kind: Kind,
        what: LinkKind,
        sub: SubKind,
        name: &str,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
        self.require_create(kind, what)?;
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.usable_master(master_kind, master)?;
        self.require_room(1)?;
        self.intend_links(&[(
            kind,
            name,
            match sub {
                SubKind::Macvlan(..) => "macvlan",
                SubKind::Ipvlan(_) => "ipvlan",
                SubKind::Vlan(_) => "vlan",
            },
        )])?;
        let target = if kind == master_kind {
            None
        } else {
            Some(self.ns_fd(kind)?)
        };
        self.netlink(master_kind)?.create_sub(
            master,
            sub,
            name,
            &o,
            target.as_ref().map(|f| f.as_fd()),
        )?;
        self.created(kind, name, false)
    }
}

impl Ctx {
    /// The link named `name` in a namespace the plugin may read.
    fn link_info_by_name(&mut self, kind: Kind, name: &str) -> Result<LinkInfo, CapError> {
        self.require(kind, |g| g.read, "read")?;
        check_name(name)?;
        let msg = self.netlink(kind)?.link_by_name(name)?;
        Ok(self.with_owned(kind, LinkInfo::from_message(msg)))
    }

    /// Link `index` of a namespace the plugin may read.
    fn link_info_by_index(&mut self, kind: Kind, index: u32) -> Result<LinkInfo, CapError> {
        self.require(kind, |g| g.read, "read")?;
        let l = self.link(kind, index)?;
        Ok(self.with_owned(kind, l))
    }

    /// Every link of a namespace the plugin may read.
    fn link_infos(&mut self, kind: Kind) -> Result<Vec<LinkInfo>, CapError> {
        self.require(kind, |g| g.read, "read")?;
        let links = self.netlink(kind)?.links()?;
        Ok(links
            .into_iter()
            .map(|m| self.with_owned(kind, LinkInfo::from_message(m)))
            .collect())
    }

    /// The host links of the device a selector names (a kernel path, a PCI address).
    fn find_device_links(
        &mut self,
        kind: Kind,
        selector: &DeviceSelector,
    ) -> Result<Vec<LinkInfo>, CapError> {
        self.require(kind, |g| g.read, "read")?;
        if kind != Kind::Host {
            return Err(ErrorCode::NotSupported.into());
        }
        let names = match selector {
            DeviceSelector::KernelPath(p) => crate::devices::of_kernel_path(p),
            DeviceSelector::PciAddress(a) => crate::devices::of_pci_address(a),
        }
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => CapError::Code(ErrorCode::InvalidArgument),
            std::io::ErrorKind::NotFound => CapError::Code(ErrorCode::NotFound),
            _ => CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        let mut out = Vec::new();
        for name in names.iter().filter(|n| valid_ifname(n)) {
            match self.netlink(kind)?.link_by_name(name) {
                Ok(msg) => out.push(self.with_owned(kind, LinkInfo::from_message(msg))),
                Err(e) if e.errno() == libc::ENODEV => {}
                Err(e) => return Err(CapError::from(&e)),
            }
        }
        Ok(out)
    }

    /// Creates a veth pair, each end in its namespace, and marks both as created.
    fn create_veth_pair(
        &mut self,
        kind: Kind,
        name: &str,
        peer_kind: Kind,
        peer_name: &str,
        options: &LinkOptions,
        peer_mac: Option<&[u8]>,
    ) -> Result<VethPair, CapError> {
        self.require_create(kind, LinkKind::Veth)?;
        self.require_create(peer_kind, LinkKind::Veth)?;
        self.check_new_name(kind, name)?;
        self.check_new_name(peer_kind, peer_name)?;
        let o = opts(options)?;
        if let Some(m) = peer_mac {
            check_mac(m)?;
        }
        let peer_fd = self.ns_fd(peer_kind)?;
        self.require_room(2)?;
        self.intend_links(&[(kind, name, "veth"), (peer_kind, peer_name, "veth")])?;
        self.netlink(kind)?
            .create_veth(name, &o, peer_name, peer_fd.as_fd(), peer_mac)?;
        // The peer goes with its end; it only needs the mark and to
        // count as created (so ADD may delete it).
        let (index, peer_index) =
            self.created_with_peer(kind, name, false, Some((peer_kind, peer_name)))?;
        let peer_index = peer_index.ok_or(CapError::Code(ErrorCode::Other))?;
        Ok(VethPair { index, peer_index })
    }

    /// Creates a bridge, shared with the network's attachments.
    fn create_bridge_link(
        &mut self,
        kind: Kind,
        name: &str,
        options: &LinkOptions,
        bridge: &BridgeOptions,
    ) -> Result<u32, CapError> {
        self.require_create(kind, LinkKind::Bridge)?;
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.require_room(1)?;
        self.netlink(kind)?
            .create_bridge(name, &o, bridge.vlan_filtering)?;
        self.created(kind, name, true)
    }

    /// Creates a dummy link.
    fn create_dummy_link(
        &mut self,
        kind: Kind,
        name: &str,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
        self.require_create(kind, LinkKind::Dummy)?;
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.require_room(1)?;
        self.intend_links(&[(kind, name, "dummy")])?;
        self.netlink(kind)?.create_dummy(name, &o)?;
        self.created(kind, name, false)
    }

    /// Creates a VRF bound to `table`, with the l3mdev rules it needs.
    fn create_vrf_link(
        &mut self,
        kind: Kind,
        name: &str,
        table: u32,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
        // The local and main tables are every link's: a VRF bound to
        // one would capture the namespace's routing.
        if matches!(table, 0 | 254 | 255) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.require_create(kind, LinkKind::Vrf)?;
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.require_room(1)?;
        // The first VRF of a namespace brings the kernel's l3mdev
        // rules, which outlive it; the kernel adds them once in a
        // namespace's life, so where they are missing after the VRF
        // is made (an undo took them), the host adds them. In ADD, the
        // undo takes them back if they came with this VRF: checked
        // under the namespace's l3mdev lock, so that of two ADDs
        // making VRFs at once only the one whose VRF brought them
        // counts them as its own (and its undo keeps them while
        // another VRF is there: authority.rs).
        let ino = self
            .ns(kind)
            .ok_or(CapError::Code(ErrorCode::NotFound))?
            .ino();
        let _lock = crate::netlock::l3mdev_lock(ino);
        let had = self.netlink(kind)?.l3mdev_families()?;
        self.intend_links(&[(kind, name, "vrf")])?;
        self.netlink(kind)?.create_vrf(name, table, &o)?;
        let index = self.created(kind, name, false)?;
        self.netlink(kind)?.add_l3mdev_rules()?;
        let has = self.netlink(kind)?.l3mdev_families()?;
        // Per family: only the rules this VRF brought are its undo's.
        let (v4, v6) = (has.0 && !had.0, has.1 && !had.1);
        if (v4 || v6) && self.command == Some(super::ctx::Command::Add) {
            self.journal.record(RouteUndo::DeleteL3mdevRules {
                ns: kind,
                vrf: index,
                v4,
                v6,
            });
        }
        Ok(index)
    }

    /// Creates a tap device, then sets its MTU and address.
    fn create_tap_link(
        &mut self,
        kind: Kind,
        name: &str,
        options: &LinkOptions,
        tap: &TapOptions,
    ) -> Result<u32, CapError> {
        self.require_create(kind, LinkKind::Tap)?;
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.require_room(1)?;
        self.intend_links(&[(kind, name, "tun")])?;
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        crate::tuntap::create_tap(ns, name, tap.multi_queue, tap.owner, tap.group)
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL)))?;
        let index = self.created(kind, name, false)?;
        let nl = self.netlink(kind)?;
        if let Some(mtu) = o.mtu {
            nl.set_mtu(index, mtu)?;
        }
        if let Some(mac) = &o.mac {
            nl.set_mac(index, mac)?;
        }
        Ok(index)
    }

    /// Moves a link to the other namespace (maybe renamed), journaling how it comes back.
    fn move_link(
        &mut self,
        kind: Kind,
        index: u32,
        target_kind: Kind,
        new_name: Option<&str>,
    ) -> Result<u32, CapError> {
        self.require(kind, |g| g.move_links, "move")?;
        self.require(target_kind, |g| g.move_links, "move")?;
        if kind == target_kind {
            return Err(ErrorCode::InvalidArgument.into());
        }
        // A link this attachment's ADD took from the host goes back
        // exactly as it was.
        if target_kind == Kind::Host {
            if let Some(at) = self.return_borrowed(index, new_name)? {
                return Ok(at);
            }
        }
        let l = self.link(kind, index)?;
        self.check_host_link(kind, &l)?;
        self.check_new_name(target_kind, new_name.unwrap_or(&l.name))?;
        let fd = self.ns_fd(target_kind)?;
        // Moving flushes the link's addresses and routes, takes it down,
        // out of its master, and resets its per-link settings: once
        // moved back, the journal restores its state, then addresses,
        // then routes (which need it up).
        let state = match self.command {
            Some(super::ctx::Command::Add) => {
                self.check_neighbours(kind, index)?;
                Some(self.link_state(kind, &l)?)
            }
            _ => None,
        };
        if self.journal.created(kind, index) {
            // This ADD's link, in its new place from now on.
            let k = l.kind.clone().unwrap_or_default();
            self.intend_links(&[(target_kind, new_name.unwrap_or(&l.name), &k)])?;
        }
        self.preserving(kind, index, |c| {
            if let Some(state) = state {
                c.journal.record(LinkUndo::RestoreLink {
                    ns: kind,
                    index,
                    state,
                });
            }
            c.netlink(kind)?
                .set_netns(index, fd.as_fd(), new_name, None)
                .map_err(CapError::from)
        })?;
        let now = self.index_of(target_kind, new_name.unwrap_or(&l.name))?;
        // The link keeps its identity in the journal at its new place.
        self.journal.link_moved((kind, index), (target_kind, now));
        self.journal.record(LinkUndo::MoveBack {
            ns: target_kind,
            index: now,
            to: kind,
            from_index: index,
            name: l.name.clone(),
        });
        if target_kind == Kind::Host {
            self.journal.record(LinkUndo::SetAlias {
                ns: target_kind,
                index: now,
                alias: l.alias.clone().unwrap_or_default(),
            });
            if self.journal.created(target_kind, now) {
                // Where this ADD's link is now, before it is marked.
                let name = new_name.unwrap_or(&l.name);
                self.intend_made(&[(target_kind, name, l.kind.clone(), now)])?;
            }
            self.mark(target_kind, now, false)?;
        } else if self.command == Some(super::ctx::Command::Add) {
            // A host link is out only with the record that brings it
            // back, written now: a process killed later in the ADD
            // leaves it too. (If it cannot be written, the call fails
            // and the journal, which has the move, undoes it with the
            // ADD.)
            self.keep_record(false).map_err(|why| {
                log::warn!("{why}");
                CapError::Kernel(libc::EIO)
            })?;
        }
        Ok(now)
    }

    /// Brings a link up or down.
    fn set_link_admin_up(&mut self, kind: Kind, index: u32, up: bool) -> Result<(), CapError> {
        // A shared bridge may be brought up, never down.
        let l = self.modifiable_or_shared(kind, index, up)?;
        if up && !l.up {
            // Bringing a stacked link up passes its promiscuity and
            // allmulti (a passthru macvlan: its state) to the lower.
            let flags = self.netlink(kind)?.link_by_index(index)?.header.flags;
            // A master (a bridge, a bond) makes its ports
            // promiscuous, and the port passes it on.
            let passes = flags.intersects(LinkFlags::Promisc | LinkFlags::Allmulti)
                || l.master.is_some()
                || self.lower_of(kind, index)?.is_some_and(|lw| lw.passthru);
            if passes {
                self.check_lower(kind, index, "bringing up")?;
            }
        }
        let set = |c: &mut Ctx| {
            c.netlink(kind)?
                .set_link_up(index, up)
                .map_err(CapError::from)
        };
        if !up && l.up {
            // Down flushes the link's routes and neighbours.
            if self.command == Some(super::ctx::Command::Add) {
                self.check_neighbours(kind, index)?;
            }
            self.preserving(kind, index, set)?;
        } else {
            set(self)?;
        }
        self.record_for(
            kind,
            index,
            LinkUndo::SetUp {
                ns: kind,
                index,
                up: l.up,
            },
        );
        Ok(())
    }

    /// Sets a link's MTU.
    fn set_link_mtu(&mut self, kind: Kind, index: u32, mtu: u32) -> Result<(), CapError> {
        let l = self.modifiable(kind, index)?;
        // A small MTU drops IPv6 (< 1280) or IPv4 (< 68) config.
        self.preserving(kind, index, |c| {
            c.netlink(kind)?.set_mtu(index, mtu).map_err(CapError::from)
        })?;
        self.record_for(
            kind,
            index,
            LinkUndo::SetMtu {
                ns: kind,
                index,
                mtu: l.mtu,
            },
        );
        Ok(())
    }

    /// Sets a link's hardware address (a shared bridge's only to its own).
    fn set_link_mac(&mut self, kind: Kind, index: u32, mac: &[u8]) -> Result<(), CapError> {
        check_mac(mac)?;
        // On a shared bridge only its own address: that pins it
        // (as the reference bridge does), changing nothing else.
        let l = self.modifiable_or_shared(kind, index, true)?;
        if self.check_host_link(kind, &l).is_err() && l.mac != mac {
            return Err(CapError::denied(format!(
                "host bridge {:?} is shared by the network's attachments: its address \
                     may only be pinned to its current value (a wasmcni invariant)",
                l.name
            )));
        }
        if self.lower_of(kind, index)?.is_some_and(|lw| lw.passthru) {
            self.check_lower(kind, index, "the hardware address")?;
        }
        self.change_link_as(
            kind,
            index,
            true,
            |nl| nl.set_mac(index, mac),
            |l| LinkUndo::SetMac {
                ns: kind,
                index,
                mac: l.mac,
            },
        )
    }

    /// Enslaves a link to `master`, or frees it (`None`).
    fn set_link_master(
        &mut self,
        kind: Kind,
        index: u32,
        master: Option<u32>,
    ) -> Result<(), CapError> {
        // Enslaving changes the master too: it must be the
        // plugin's, or a bridge its network shares.
        let mut joins_vrf = false;
        let shared = match master {
            Some(m) => {
                let ml = self.modifiable_or_shared(kind, m, true)?;
                joins_vrf = ml.kind.as_deref() == Some("vrf");
                self.check_host_link(kind, &ml).is_err()
            }
            None => false,
        };
        // Against the undo of a concurrent ADD that created the
        // shared bridge (it keeps a bridge that has ports). Taken before
        // the port is read (what was read before it is read again).
        let _lock = shared.then(|| crate::netlock::lock(&self.attachment.network));
        // A master makes its ports promiscuous: a stacked link must
        // not pass that on to a lower device it may only use.
        if master.is_some() {
            self.check_lower(kind, index, "enslaving")?;
        }
        let change = |c: &mut Ctx| {
            // Leaving a bridge drops the port's VLANs, and joining
            // it again gives it only the bridge's default: the
            // undo puts them back once the master is.
            // (Recorded first, so undone after the master.)
            let mark = c.journal.len();
            if let Some(vlans) = c.vlans_to_keep(kind, index, master)? {
                c.journal.record(LinkUndo::SetPortVlans {
                    ns: kind,
                    index,
                    vlans,
                });
            }
            let r = c.change_link(
                kind,
                index,
                |nl| nl.set_master(index, master),
                |l| LinkUndo::SetMaster {
                    ns: kind,
                    index,
                    master: l.master,
                },
            );
            if r.is_err() {
                c.journal.truncate(mark);
            }
            r
        };
        // Joining or leaving a VRF cycles the link, and the kernel
        // drops its routes and IPv6 addresses: in ADD (the only
        // command undone) the undo puts them back.
        let vrf = self.journaling_for(kind, index)
            && (joins_vrf
                || match self.link(kind, index)?.master {
                    Some(m) => self.link(kind, m)?.kind.as_deref() == Some("vrf"),
                    None => false,
                });
        if vrf {
            self.preserving(kind, index, change)
        } else {
            change(self)
        }
    }

    /// Turns a bridge port's hairpin mode on or off.
    fn set_port_hairpin(&mut self, kind: Kind, index: u32, on: bool) -> Result<(), CapError> {
        self.modifiable(kind, index)?;
        let journaling = self.journaling_for(kind, index);
        let nl = self.netlink(kind)?;
        let old = nl
            .hairpin(index)?
            .ok_or(CapError::Code(ErrorCode::NotSupported))?;
        nl.set_hairpin(index, on)?;
        if journaling {
            self.journal.record(LinkUndo::SetHairpin {
                ns: kind,
                index,
                on: old,
            });
        }
        Ok(())
    }

    /// Turns a bridge port's isolation on or off.
    fn set_port_isolation(&mut self, kind: Kind, index: u32, on: bool) -> Result<(), CapError> {
        self.modifiable(kind, index)?;
        let journaling = self.journaling_for(kind, index);
        let nl = self.netlink(kind)?;
        let old = port_isolated(&nl.bridge_port(index)?.ok_or(ErrorCode::NotSupported)?);
        nl.set_bridge_port(index, &[(IFLA_BRPORT_ISOLATED, vec![u8::from(on)])])?;
        if journaling {
            self.journal.record(LinkUndo::SetPortIsolated {
                ns: kind,
                index,
                on: old,
            });
        }
        Ok(())
    }

    /// The VLANs of a bridge port.
    fn read_port_vlans(&mut self, kind: Kind, index: u32) -> Result<Vec<PortVlan>, CapError> {
        self.require(kind, |g| g.read, "read")?;
        let vlans = self.netlink(kind)?.port_vlans(index)?;
        Ok(vlans
            .into_iter()
            .map(|v| PortVlan {
                vid: v.vid,
                pvid: v.pvid,
                untagged: v.untagged,
            })
            .collect())
    }

    /// Replaces a bridge port's VLANs with `vlans`.
    fn replace_port_vlans(
        &mut self,
        kind: Kind,
        index: u32,
        vlans: &[PortVlan],
    ) -> Result<(), CapError> {
        if vlans.len() > usize::from(MAX_VID) {
            return Err(CapError::Limit(format!("{} VLANs", vlans.len())));
        }
        let mut seen = std::collections::BTreeSet::new();
        let valid = vlans
            .iter()
            .all(|v| (1..=MAX_VID).contains(&v.vid) && seen.insert(v.vid))
            && vlans.iter().filter(|v| v.pvid).count() <= 1;
        if !valid {
            return Err(ErrorCode::InvalidArgument.into());
        }
        // A shared link's VLANs are the network's: never changed.
        let l = self.modifiable(kind, index)?;
        if l.master.is_none() {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let want: Vec<crate::netlink::PortVlan> = vlans
            .iter()
            .map(|v| crate::netlink::PortVlan {
                vid: v.vid,
                pvid: v.pvid,
                untagged: v.untagged,
            })
            .collect();
        let old = self.netlink(kind)?.port_vlans(index)?;
        self.check_new_vlans(kind, index, &want, &old)?;
        // Recorded first: a change that stops half-way is undone too.
        self.record_for(
            kind,
            index,
            LinkUndo::SetPortVlans {
                ns: kind,
                index,
                vlans: old,
            },
        );
        self.netlink(kind)?.set_port_vlans(index, &want)?;
        Ok(())
    }

    /// Hands a host link this ADD created to its network.
    fn share_link(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        self.require(kind, |g| g.modify, "modify")?;
        // Only an ADD hands links to its network (a DEL's would be
        // left behind, undeletable).
        if self.command != Some(super::ctx::Command::Add) {
            return Err(CapError::denied(
                "only an ADD hands links to its network (a wasmcni invariant)",
            ));
        }
        if kind != Kind::Host || !self.journal.created(kind, index) {
            return Err(CapError::denied(format!(
                "link {index} was not created in the host namespace by this call: \
                     only such a link can be handed to the network (a wasmcni invariant)"
            )));
        }
        self.mark(kind, index, true)
    }

    /// Turns a link's promiscuous mode on or off.
    fn set_link_promisc(&mut self, kind: Kind, index: u32, on: bool) -> Result<(), CapError> {
        // A shared bridge may be made promiscuous (the reference
        // bridge's promiscMode), never the reverse.
        self.modifiable_or_shared(kind, index, on)?;
        self.check_lower(kind, index, "promiscuity")?;
        self.change_link_as(
            kind,
            index,
            on,
            |nl| nl.set_promisc(index, on),
            |l| LinkUndo::SetPromisc {
                ns: kind,
                index,
                on: l.promiscuous,
            },
        )
    }

    /// Turns a link's all-multicast mode on or off.
    fn set_link_allmulti(&mut self, kind: Kind, index: u32, on: bool) -> Result<(), CapError> {
        // A stacked link passes IFF_ALLMULTI to its lower device,
        // as it does promiscuity.
        self.modifiable(kind, index)?;
        self.check_lower(kind, index, "all-multicast mode")?;
        self.change_link(
            kind,
            index,
            |nl| nl.set_allmulti(index, on),
            |l| LinkUndo::SetAllmulti {
                ns: kind,
                index,
                on: l.allmulticast,
            },
        )
    }

    /// Sets a link's transmit queue length.
    fn set_link_txqlen(&mut self, kind: Kind, index: u32, txqlen: u32) -> Result<(), CapError> {
        self.change_link(
            kind,
            index,
            |nl| nl.set_txqlen(index, txqlen),
            |l| LinkUndo::SetTxqlen {
                ns: kind,
                index,
                txqlen: l.txqlen,
            },
        )
    }

    /// Renames a link.
    fn rename_link(&mut self, kind: Kind, index: u32, name: &str) -> Result<(), CapError> {
        self.check_new_name(kind, name)?;
        if self.journal.created(kind, index) {
            // This ADD's link, under its new name from now on
            // (named once the call may go ahead).
            let k = self.modifiable(kind, index)?.kind;
            self.intend_links(&[(kind, name, &k.unwrap_or_default())])?;
        }
        self.change_link(
            kind,
            index,
            |nl| nl.set_name(index, name),
            |l| LinkUndo::SetName {
                ns: kind,
                index,
                name: l.name,
            },
        )
    }

    /// Sets a container link's alias.
    fn set_link_alias(&mut self, kind: Kind, index: u32, alias: &str) -> Result<(), CapError> {
        if kind == Kind::Host {
            return Err(CapError::denied(
                "in the host namespace the alias is wasmcni's ownership mark (a wasmcni \
                     invariant)",
            ));
        }
        bounded("alias", alias, MAX_ALIAS)?;
        if alias.contains('\0') {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.change_link(
            kind,
            index,
            |nl| nl.set_alias(index, alias),
            |l| LinkUndo::SetAlias {
                ns: kind,
                index,
                alias: l.alias.unwrap_or_default(),
            },
        )
    }

    /// Deletes a link the plugin may delete, and forgets what went with it.
    fn remove_link(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        self.modifiable(kind, index)?;
        if self.command == Some(super::ctx::Command::Add) && !self.journal.created(kind, index) {
            return Err(CapError::denied(
                "during ADD a plugin may delete only links it created in the same call, \
                     as the deletion could not be undone (a wasmcni invariant)",
            ));
        }
        if kind == Kind::Container && self.holds(index)? {
            return Err(CapError::denied(format!(
                "link {index} was taken from the host namespace: it goes back there \
                     (link.move-to), never away (a wasmcni invariant)"
            )));
        }
        if self.command == Some(super::ctx::Command::Add) {
            self.netlink(kind)?.delete_link(index)?;
        } else {
            // Outside ADD nothing waits on the kernel freeing it.
            let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            crate::netlink::route::Netlink::delete_link_detached(ns, index)?;
        }
        self.journal.forget_link(kind, index);
        // What the kernel removed with it (a veth's peer, ...)
        // must leave the created set too.
        self.refresh_created()
    }
}

impl Host for StoreData {
    fn get_by_name(&mut self, ns: Resource<NsHandle>, name: String) -> Result<LinkInfo, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&GET_BY_NAME, (kind, &name), |c| {
            c.link_info_by_name(kind, &name)
        })
    }

    fn get_by_index(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<LinkInfo, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&GET_BY_INDEX, (kind, index), |c| {
            c.link_info_by_index(kind, index)
        })
    }

    fn list(&mut self, ns: Resource<NsHandle>) -> Result<Vec<LinkInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&LIST, (kind,), |c| c.link_infos(kind))
    }

    fn find_devices(
        &mut self,
        ns: Resource<NsHandle>,
        selector: DeviceSelector,
    ) -> Result<Vec<LinkInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&FIND_DEVICES, (kind, &selector), |c| {
            c.find_device_links(kind, &selector)
        })
    }

    fn create_veth(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        peer_ns: Resource<NsHandle>,
        peer_name: String,
        options: LinkOptions,
        peer_mac: Option<Vec<u8>>,
    ) -> Result<VethPair, CapError> {
        let kind = self.ns_kind(&ns)?;
        let peer_kind = self.ns_kind(&peer_ns)?;
        let args = (
            kind,
            &name,
            peer_kind,
            &peer_name,
            &options,
            peer_mac.as_deref().map(Mac),
        );
        self.cap(&CREATE_VETH, args, |c| {
            c.create_veth_pair(
                kind,
                &name,
                peer_kind,
                &peer_name,
                &options,
                peer_mac.as_deref(),
            )
        })
    }

    fn create_bridge(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        options: LinkOptions,
        bridge: BridgeOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_BRIDGE, (kind, &name, &options, &bridge), |c| {
            c.create_bridge_link(kind, &name, &options, &bridge)
        })
    }

    fn create_dummy(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_DUMMY, (kind, &name, &options), |c| {
            c.create_dummy_link(kind, &name, &options)
        })
    }

    fn create_vrf(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        table: u32,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_VRF, (kind, &name, table, &options), |c| {
            c.create_vrf_link(kind, &name, table, &options)
        })
    }

    fn create_tap(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        options: LinkOptions,
        tap: TapOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_TAP, (kind, &name, &options, &tap), |c| {
            c.create_tap_link(kind, &name, &options, &tap)
        })
    }

    fn create_macvlan(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        mode: MacvlanMode,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (master_kind, master, kind, &name, Named(mode), &options);
        self.cap(&CREATE_MACVLAN, args, |c| {
            c.create_macvlan_link(master_kind, master, kind, &name, mode, &options, None)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn create_macvlan_with(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        mode: MacvlanMode,
        options: LinkOptions,
        macvlan: MacvlanOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (
            master_kind,
            master,
            kind,
            &name,
            Named(mode),
            &options,
            &macvlan,
        );
        self.cap(&CREATE_MACVLAN_WITH, args, |c| {
            c.create_macvlan_link(
                master_kind,
                master,
                kind,
                &name,
                mode,
                &options,
                macvlan.bc_queue_len,
            )
        })
    }

    fn create_ipvlan(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        mode: IpvlanMode,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (master_kind, master, kind, &name, Named(mode), &options);
        self.cap(&CREATE_IPVLAN, args, |c| {
            c.create_ipvlan_link(master_kind, master, kind, &name, mode, &options)
        })
    }

    fn create_vlan(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        vlan_id: u16,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (master_kind, master, kind, &name, vlan_id, &options);
        self.cap(&CREATE_VLAN, args, |c| {
            c.create_vlan_link(master_kind, master, kind, &name, vlan_id, &options)
        })
    }

    fn move_to(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        target: Resource<NsHandle>,
        new_name: Option<String>,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let target_kind = self.ns_kind(&target)?;
        let args = (kind, index, target_kind, &new_name);
        self.cap(&MOVE_TO, args, |c| {
            c.move_link(kind, index, target_kind, new_name.as_deref())
        })
    }

    fn set_up(&mut self, ns: Resource<NsHandle>, index: u32, up: bool) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_UP, (kind, index, up), |c| {
            c.set_link_admin_up(kind, index, up)
        })
    }

    fn set_mtu(&mut self, ns: Resource<NsHandle>, index: u32, mtu: u32) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_MTU, (kind, index, mtu), |c| {
            c.set_link_mtu(kind, index, mtu)
        })
    }

    fn set_mac(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        mac: Vec<u8>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_MAC, (kind, index, Mac(&mac)), |c| {
            c.set_link_mac(kind, index, &mac)
        })
    }

    fn set_master(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        master: Option<u32>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_MASTER, (kind, index, master), |c| {
            c.set_link_master(kind, index, master)
        })
    }

    fn set_hairpin(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_HAIRPIN, (kind, index, on), |c| {
            c.set_port_hairpin(kind, index, on)
        })
    }

    fn set_port_isolated(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_PORT_ISOLATED, (kind, index, on), |c| {
            c.set_port_isolation(kind, index, on)
        })
    }

    fn port_vlans(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
    ) -> Result<Vec<PortVlan>, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&PORT_VLANS, (kind, index), |c| {
            c.read_port_vlans(kind, index)
        })
    }

    fn set_port_vlans(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        vlans: Vec<PortVlan>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_PORT_VLANS, (kind, index, &vlans), |c| {
            c.replace_port_vlans(kind, index, &vlans)
        })
    }

    fn share(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SHARE, (kind, index), |c| c.share_link(kind, index))
    }

    fn set_promiscuous(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_PROMISCUOUS, (kind, index, on), |c| {
            c.set_link_promisc(kind, index, on)
        })
    }

    fn set_allmulticast(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_ALLMULTICAST, (kind, index, on), |c| {
            c.set_link_allmulti(kind, index, on)
        })
    }

    fn set_txqlen(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        txqlen: u32,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_TXQLEN, (kind, index, txqlen), |c| {
            c.set_link_txqlen(kind, index, txqlen)
        })
    }

    fn set_name(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        name: String,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_NAME, (kind, index, &name), |c| {
            c.rename_link(kind, index, &name)
        })
    }

    fn set_alias(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        alias: String,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_ALIAS, (kind, index, &alias), |c| {
            c.set_link_alias(kind, index, &alias)
        })
    }

    fn delete(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&DELETE, (kind, index), |c| c.remove_link(kind, index))
    }
}

/// How a change to a link is taken back (`link`). Links are named by
/// (namespace, index); these are kept in an attachment record when the
/// link is one the ADD took from the node ([`crate::record::Borrowed`]),
/// in the same form as ever.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum LinkUndo {
    /// A link was created: delete it (a veth takes its peer along).
    DeleteLink {
        /// Where it is.
        ns: Kind,
        /// Its index there.
        index: u32,
    },
    /// A link was set up or down: restore.
    SetUp {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old state.
        up: bool,
    },
    /// The MTU changed: restore.
    SetMtu {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old MTU.
        mtu: u32,
    },
    /// The hardware address changed: restore.
    SetMac {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old address.
        mac: Vec<u8>,
    },
    /// The master changed: restore.
    SetMaster {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old master.
        master: Option<u32>,
    },
    /// Hairpin mode changed: restore.
    SetHairpin {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old mode.
        on: bool,
    },
    /// A bridge port's isolation changed: restore.
    SetPortIsolated {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old flag.
        on: bool,
    },
    /// A bridge port's VLANs changed: put the old list back.
    SetPortVlans {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old VLANs.
        vlans: Vec<crate::netlink::PortVlan>,
    },
    /// `IFF_PROMISC` changed: restore.
    SetPromisc {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old flag.
        on: bool,
    },
    /// Renamed: restore the name.
    SetName {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old name.
        name: String,
    },
    /// The alias changed: restore (empty clears).
    SetAlias {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old alias.
        alias: String,
    },
    /// Moved to another namespace: move back under the old name.
    MoveBack {
        /// Where it is now.
        ns: Kind,
        /// Its index there.
        index: u32,
        /// Where it came from.
        to: Kind,
        /// Its index there.
        from_index: u32,
        /// Its name there.
        name: String,
    },
    /// A link was moved out of its namespace, which resets what the kernel
    /// keeps per namespace: once it is back, restore its state as it was.
    RestoreLink {
        /// Where it is once back.
        ns: Kind,
        /// Its index there.
        index: u32,
        /// Its state before the move.
        state: LinkState,
    },
    /// `IFF_ALLMULTI` changed: restore.
    SetAllmulti {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old flag.
        on: bool,
    },
    /// The transmit queue length changed: restore.
    SetTxqlen {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old length.
        txqlen: u32,
    },
}

/// What the kernel resets when a link moves to another namespace (it is
/// closed, leaves its master, and its per-link settings are recreated from
/// the new namespace's defaults), recorded before the move.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LinkState {
    /// Administratively up.
    pub up: bool,
    /// MTU.
    pub mtu: u32,
    /// Hardware address.
    pub mac: Vec<u8>,
    /// `IFLA_IFALIAS` (empty: none).
    pub alias: String,
    /// The master (bridge) it was enslaved to.
    pub master: Option<u32>,
    /// Its bridge port settings (hairpin, learning, ...), if it was a port.
    pub port: Option<crate::netlink::PortOptions>,
    /// Its VLANs, if it was a bridge port (absent in records written
    /// before they were kept: left as the kernel makes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlans: Option<Vec<crate::netlink::PortVlan>>,
    /// `IFF_PROMISC`.
    pub promisc: bool,
    /// Its per-link settings (`net.*.conf.<name>.*`, `net.*.neigh.<name>.*`).
    pub sysctls: Vec<(String, String)>,
}

impl Inverse for LinkUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let nl_err = |e: NlError| CapError::from(&e);
        match self {
            LinkUndo::DeleteLink { ns, index } => ctx.undo_create(*ns, *index),
            LinkUndo::SetUp { ns, index, up } => {
                ctx.netlink(*ns)?.set_link_up(*index, *up).map_err(nl_err)
            }
            LinkUndo::SetMtu { ns, index, mtu } => {
                ctx.netlink(*ns)?.set_mtu(*index, *mtu).map_err(nl_err)
            }
            LinkUndo::SetMac { ns, index, mac } => {
                ctx.netlink(*ns)?.set_mac(*index, mac).map_err(nl_err)
            }
            LinkUndo::SetMaster { ns, index, master } => ctx
                .netlink(*ns)?
                .set_master(*index, *master)
                .map_err(nl_err),
            LinkUndo::SetHairpin { ns, index, on } => {
                ctx.netlink(*ns)?.set_hairpin(*index, *on).map_err(nl_err)
            }
            LinkUndo::SetPortIsolated { ns, index, on } => ctx
                .netlink(*ns)?
                .set_bridge_port(*index, &[(IFLA_BRPORT_ISOLATED, vec![u8::from(*on)])])
                .map_err(nl_err),
            LinkUndo::SetPortVlans { ns, index, vlans } => ctx
                .netlink(*ns)?
                .set_port_vlans(*index, vlans)
                .map_err(nl_err),
            LinkUndo::SetPromisc { ns, index, on } => {
                ctx.netlink(*ns)?.set_promisc(*index, *on).map_err(nl_err)
            }
            LinkUndo::SetAllmulti { ns, index, on } => {
                ctx.netlink(*ns)?.set_allmulti(*index, *on).map_err(nl_err)
            }
            LinkUndo::SetTxqlen { ns, index, txqlen } => ctx
                .netlink(*ns)?
                .set_txqlen(*index, *txqlen)
                .map_err(nl_err),
            LinkUndo::SetName { ns, index, name } => {
                ctx.netlink(*ns)?.set_name(*index, name).map_err(nl_err)
            }
            LinkUndo::SetAlias { ns, index, alias } => {
                ctx.netlink(*ns)?.set_alias(*index, alias).map_err(nl_err)
            }
            LinkUndo::MoveBack {
                ns,
                index,
                to,
                from_index,
                name,
            } => {
                let fd = ctx.ns_fd(*to)?;
                let nl = ctx.netlink(*ns)?;
                // Back under its old index if it is free; else wherever the
                // kernel puts it (the replay remaps the older entries).
                match nl.set_netns(*index, fd.as_fd(), Some(name), Some(*from_index)) {
                    Ok(()) => Ok(()),
                    Err(_) => nl
                        .set_netns(*index, fd.as_fd(), Some(name), None)
                        .map_err(nl_err),
                }
            }
            LinkUndo::RestoreLink { ns, index, state } => ctx.restore_link(*ns, *index, state),
        }
    }

    fn already_gone(&self, errno: i32) -> bool {
        matches!(self, LinkUndo::DeleteLink { .. })
            && (errno == libc::ENODEV || errno == libc::ENOENT)
    }

    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            LinkUndo::DeleteLink { ns, index }
            | LinkUndo::SetUp { ns, index, .. }
            | LinkUndo::SetMtu { ns, index, .. }
            | LinkUndo::SetMac { ns, index, .. }
            | LinkUndo::SetMaster { ns, index, .. }
            | LinkUndo::SetHairpin { ns, index, .. }
            | LinkUndo::SetPortIsolated { ns, index, .. }
            | LinkUndo::SetPortVlans { ns, index, .. }
            | LinkUndo::SetPromisc { ns, index, .. }
            | LinkUndo::SetAllmulti { ns, index, .. }
            | LinkUndo::SetTxqlen { ns, index, .. }
            | LinkUndo::SetName { ns, index, .. }
            | LinkUndo::SetAlias { ns, index, .. }
            | LinkUndo::MoveBack { ns, index, .. }
            | LinkUndo::RestoreLink { ns, index, .. } => Some((*ns, index)),
        }
    }

    fn master_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            LinkUndo::SetMaster {
                ns,
                master: Some(m),
                ..
            } => Some((*ns, m)),
            LinkUndo::RestoreLink { ns, state, .. } => state.master.as_mut().map(|m| (*ns, m)),
            _ => None,
        }
    }

    fn creates_link(&self) -> bool {
        matches!(self, LinkUndo::DeleteLink { .. })
    }

    fn moves_back(&self) -> Option<(Kind, &str, u32)> {
        match self {
            LinkUndo::MoveBack {
                to,
                name,
                from_index,
                ..
            } => Some((*to, name, *from_index)),
            _ => None,
        }
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn kept_for_other_holders(&self, ctx: &mut Ctx) -> Option<String> {
        match self {
            LinkUndo::DeleteLink {
                ns: Kind::Host,
                index,
            } => ctx.shared_link_kept(*index),
            _ => None,
        }
    }
}

impl Ctx {
    /// Puts a link that came back from another namespace into the state it
    /// had before it left: MTU first (it resets the IPv6 MTU setting), its
    /// per-link settings (they decide what happens when it comes up), then
    /// address, alias, master, bridge port settings and VLANs, promiscuity, and
    /// last the admin state (the routes restored after this need it up).
    /// Only what differs is written; a step that fails does not stop the
    /// others, and the error names every one that failed.
    pub(super) fn restore_link(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
        state: &LinkState,
    ) -> Result<(), CapError> {
        let now = self.link(kind, index)?;
        let mut failed: Vec<String> = Vec::new();
        let step =
            |failed: &mut Vec<String>, what: &str, r: Result<(), crate::netlink::NlError>| {
                if let Err(e) = r {
                    failed.push(format!("{what}: {e}"));
                }
            };
        let nl = self.netlink(kind)?;
        if now.mtu != state.mtu {
            step(&mut failed, "mtu", nl.set_mtu(index, state.mtu));
        }
        let ns = self.ns(kind).ok_or(CapError::Kernel(libc::ENOENT))?;
        match crate::sysctl::restore(ns, &state.sysctls) {
            Ok(keys) if keys.is_empty() => {}
            Ok(keys) => failed.push(format!("settings {}", keys.join(", "))),
            Err(e) => failed.push(format!("settings: {e}")),
        }
        let nl = self.netlink(kind)?;
        if now.mac != state.mac && !state.mac.is_empty() {
            step(&mut failed, "mac", nl.set_mac(index, &state.mac));
        }
        if now.alias.as_deref().unwrap_or("") != state.alias {
            step(&mut failed, "alias", nl.set_alias(index, &state.alias));
        }
        if now.master != state.master {
            step(&mut failed, "master", nl.set_master(index, state.master));
        }
        if let Some(port) = &state.port {
            step(&mut failed, "bridge port", nl.set_bridge_port(index, port));
        }
        // Joining the bridge again gave it the bridge's default VLAN only.
        if let Some(vlans) = &state.vlans {
            step(&mut failed, "port vlans", nl.set_port_vlans(index, vlans));
        }
        if now.promiscuous != state.promisc {
            step(&mut failed, "promisc", nl.set_promisc(index, state.promisc));
        }
        if now.up != state.up {
            step(&mut failed, "up", nl.set_link_up(index, state.up));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(CapError::Incomplete(failed.join("; ")))
        }
    }

    /// Deletes a link this invocation created; but a bridge created for
    /// the network stays if another attachment's link joined it meanwhile
    /// (checked under the network lock, which enslaving also takes).
    pub(super) fn undo_create(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
    ) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let l = self.link(kind, index)?;
        let _lock = if kind == crate::netns::Kind::Host
            && l.alias.as_deref() == Some(self.marks.1.as_str())
        {
            let lock = crate::netlock::lock(&self.attachment.network);
            let ports = self
                .netlink(kind)?
                .links()
                .map_err(nl_err)?
                .into_iter()
                .filter(|m| super::bindings::Link::from_message(m.clone()).master == Some(index))
                .count();
            if ports > 0 {
                log::info!(
                    "kept bridge {:?}: {ports} link(s) of other attachments joined it",
                    l.name
                );
                return Ok(());
            }
            lock
        } else {
            None
        };
        self.netlink(kind)?.delete_link(index).map_err(nl_err)
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[
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

#[cfg(test)]
mod tests {
    use super::valid_ifname;

    #[test]
    fn interface_names() {
        assert!(valid_ifname("eth0"));
        assert!(valid_ifname("a23456789012345"));
        assert!(!valid_ifname("a234567890123456"));
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a\0b",
            "a\u{2003}b",
        ] {
            assert!(!valid_ifname(bad), "{bad:?}");
        }
    }
}

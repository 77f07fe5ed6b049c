//! Creating links (`link.create-veth`, `create-bridge`, `create-dummy`,
//! `create-vrf`, `create-tap`, and the stacked kinds through
//! [`Ctx::create_sub`]), handing one to the network (`link.share`) and
//! deleting (`link.delete`): the grant's `create` and `max-links`, the
//! journal's and the intent log's record of each created link, its mark.

use std::os::fd::AsFd;

use super::arguments::{check_mac, opts};
use super::inverse::LinkUndo;
use crate::caps::bindings::wasmcni::plugin::link::{
    BridgeOptions, LinkOptions, TapOptions, VethPair,
};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::{CapError, Link};
use crate::caps::ctx::Ctx;
use crate::caps::route::RouteUndo;
use crate::netlink::SubKind;
use crate::netns::Kind;
use crate::policy::LinkKind;

impl Ctx {
    /// After a creation: journal the deletion, then mark it if it is on the
    /// host side, as this attachment's or (`shared`: a bridge) its
    /// network's. A link that cannot be marked is deleted again at once (an
    /// unmarked wasmcni link would be out of every plugin's reach).
    pub(crate) fn created(
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

    /// After a deletion: the kernel may have taken other links along (a
    /// veth's peer, the macvlans on a link). Drops every created link that
    /// is gone from the created set and the journal, so no index names a
    /// link that is not there (the kernel reuses indexes).
    pub(crate) fn refresh_created(&mut self) -> Result<(), CapError> {
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
    pub(crate) fn require_create(&self, kind: Kind, what: LinkKind) -> Result<(), CapError> {
        self.view().create(kind, what)
    }

    /// Refuses to make `n` more links past the grant's `max-links`: the
    /// links this invocation created and still keeps (both namespaces, a
    /// veth pair being two) and these may not be more. Every one of them is
    /// the host's to remove at the attachment's DEL or GC.
    pub(crate) fn require_room(&self, n: usize) -> Result<(), CapError> {
        self.view().room(self.journal.created_links().len(), n)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_sub(
        &mut self,
        master_kind: Kind,
        master: u32,
        kind: Kind,
        sub: SubKind,
        name: &str,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
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

    /// Creates a veth pair, each end in its namespace, and marks both as created.
    pub(super) fn create_veth_pair(
        &mut self,
        kind: Kind,
        name: &str,
        peer_kind: Kind,
        peer_name: &str,
        options: &LinkOptions,
        peer_mac: Option<&[u8]>,
    ) -> Result<VethPair, CapError> {
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
        if kind != peer_kind {
            let host_end = if kind == Kind::Host { name } else { peer_name };
            self.takes_no_router_advertisements(host_end);
        }
        Ok(VethPair { index, peer_index })
    }

    /// The node end `name` of a pair whose other end is the container's
    /// takes no router advertisement from it: the kernel's default
    /// (`accept_ra` 1, honoured while IPv6 forwarding is off) let the
    /// container put the node's default route, or another network's
    /// subnet, through its veth whatever the plugin does (issue 49,
    /// breach 5; the reference bridge and ptp set the same on theirs). A
    /// node without IPv6 has no such setting.
    fn takes_no_router_advertisements(&self, name: &str) {
        if let Some(ns) = self.ns(Kind::Host) {
            let key = format!("net.ipv6.conf.{}.accept_ra", name.replace('.', "/"));
            let _ = crate::sysctl::write(ns, &key, "0");
        }
    }

    /// Creates a bridge, shared with the network's attachments.
    pub(super) fn create_bridge_link(
        &mut self,
        kind: Kind,
        name: &str,
        options: &LinkOptions,
        bridge: &BridgeOptions,
    ) -> Result<u32, CapError> {
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.require_room(1)?;
        self.netlink(kind)?
            .create_bridge(name, &o, bridge.vlan_filtering)?;
        self.created(kind, name, true)
    }

    /// Creates a dummy link.
    pub(super) fn create_dummy_link(
        &mut self,
        kind: Kind,
        name: &str,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
        self.check_new_name(kind, name)?;
        let o = opts(options)?;
        self.require_room(1)?;
        self.intend_links(&[(kind, name, "dummy")])?;
        self.netlink(kind)?.create_dummy(name, &o)?;
        self.created(kind, name, false)
    }

    /// Creates a VRF bound to `table`, with the l3mdev rules it needs.
    pub(super) fn create_vrf_link(
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
        if (v4 || v6) && self.command == Some(crate::caps::ctx::Command::Add) {
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
    pub(super) fn create_tap_link(
        &mut self,
        kind: Kind,
        name: &str,
        options: &LinkOptions,
        tap: &TapOptions,
    ) -> Result<u32, CapError> {
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

    /// Hands a host link this ADD created to its network.
    pub(super) fn share_link(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        self.view()
            .share(kind, index, self.journal.created(kind, index))?;
        self.mark(kind, index, true)
    }

    /// Deletes a link the plugin may delete, and forgets what went with it.
    pub(super) fn remove_link(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        self.modifiable(kind, index)?;
        self.view()
            .remove_during_add(self.journal.created(kind, index))?;
        let held = kind == Kind::Container && self.holds(index)?;
        crate::caps::authority::link::remove_held(kind, index, held)?;
        if self.command == Some(crate::caps::ctx::Command::Add) {
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

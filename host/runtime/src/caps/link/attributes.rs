//! A link's own settings (`link.set-up`, `set-mtu`, `set-mac`,
//! `set-promiscuous`, `set-allmulticast`, `set-txqlen`, `set-alias`):
//! each change checked against the grant and journaled with the value it
//! replaces, and refused where the kernel would pass it on to a lower
//! device that is not the plugin's to change.

use std::os::fd::AsFd;

use netlink_packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, InfoMacVtap, LinkAttribute, LinkFlags, LinkInfo as NlInfo,
    MacVlanMode, MacVtapMode,
};

use super::arguments::check_mac;
use super::inverse::LinkUndo;
use crate::caps::authority::link::{self as authority, lower_device, shared_bridge_mac};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::{CapError, Link};
use crate::caps::ctx::{bounded, Ctx, MAX_ALIAS};
use crate::netlink::{Netlink, NlError};
use crate::netns::Kind;

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

impl Ctx {
    /// One attribute change of a link the plugin may modify: `set` in the
    /// kernel, then the inverse `undo` builds from the link as it was.
    pub(super) fn change_link(
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
    pub(super) fn check_lower(
        &mut self,
        kind: Kind,
        index: u32,
        what: &str,
    ) -> Result<(), CapError> {
        let Some(lower) = self.lower_of(kind, index)? else {
            return Ok(());
        };
        let name;
        let place = match lower.ns {
            Some(Kind::Container) => authority::Lower::Container,
            Some(Kind::Host) => {
                let m = self.link(Kind::Host, lower.index)?;
                let controlled = self.check_host_link(Kind::Host, &m).is_ok();
                name = m.name;
                authority::Lower::Host {
                    name: &name,
                    controlled,
                }
            }
            None => authority::Lower::Elsewhere,
        };
        lower_device(what, index, place)
    }

    /// Brings a link up or down.
    pub(super) fn set_link_admin_up(
        &mut self,
        kind: Kind,
        index: u32,
        up: bool,
    ) -> Result<(), CapError> {
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
            if self.command == Some(crate::caps::ctx::Command::Add) {
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
    pub(super) fn set_link_mtu(
        &mut self,
        kind: Kind,
        index: u32,
        mtu: u32,
    ) -> Result<(), CapError> {
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
    pub(super) fn set_link_mac(
        &mut self,
        kind: Kind,
        index: u32,
        mac: &[u8],
    ) -> Result<(), CapError> {
        check_mac(mac)?;
        // On a shared bridge only its own address: that pins it
        // (as the reference bridge does), changing nothing else.
        let l = self.modifiable_or_shared(kind, index, true)?;
        shared_bridge_mac(&l, self.check_host_link(kind, &l).is_ok(), mac)?;
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

    /// Turns a link's promiscuous mode on or off.
    pub(super) fn set_link_promisc(
        &mut self,
        kind: Kind,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
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
    pub(super) fn set_link_allmulti(
        &mut self,
        kind: Kind,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
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
    pub(super) fn set_link_txqlen(
        &mut self,
        kind: Kind,
        index: u32,
        txqlen: u32,
    ) -> Result<(), CapError> {
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

    /// Sets a container link's alias.
    pub(super) fn set_link_alias(
        &mut self,
        kind: Kind,
        index: u32,
        alias: &str,
    ) -> Result<(), CapError> {
        authority::alias(kind)?;
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
}

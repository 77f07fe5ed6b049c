//! Names, and moves between the plugin's two namespaces (`link.move-to`,
//! `link.set-name`): the names a host link may take, and what a move
//! resets and its undo restores.

use std::os::fd::{AsFd, OwnedFd};

use super::arguments::check_name;
use super::inverse::{LinkState, LinkUndo};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::{CapError, Link};
use crate::caps::ctx::Ctx;
use crate::netns::Kind;

impl Ctx {
    /// A duplicate of a namespace's fd, to hand to the kernel while the
    /// socket of another namespace is borrowed.
    pub(crate) fn ns_fd(&self, kind: Kind) -> Result<OwnedFd, CapError> {
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        ns.fd()
            .try_clone_to_owned()
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    pub(super) fn index_of(&mut self, kind: Kind, name: &str) -> Result<u32, CapError> {
        let msg = self.netlink(kind)?.link_by_name(name)?;
        Ok(msg.header.index)
    }

    /// A link the plugin makes, moves or renames in the host namespace
    /// must take a name its grant allows (`names`), so it cannot squat a
    /// name the node or another tool needs.
    pub(super) fn check_new_name(&self, kind: Kind, name: &str) -> Result<(), CapError> {
        check_name(name)?;
        self.view().new_name(kind, name)
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

    /// Moves a link to the other namespace (maybe renamed), journaling how it comes back.
    pub(super) fn move_link(
        &mut self,
        kind: Kind,
        index: u32,
        target_kind: Kind,
        new_name: Option<&str>,
    ) -> Result<u32, CapError> {
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
            Some(crate::caps::ctx::Command::Add) => {
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
        } else if self.command == Some(crate::caps::ctx::Command::Add) {
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

    /// Renames a link.
    pub(super) fn rename_link(
        &mut self,
        kind: Kind,
        index: u32,
        name: &str,
    ) -> Result<(), CapError> {
        self.check_new_name(kind, name)?;
        self.may_take_ifname(kind, index, name)?;
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
}

//! Replaying the journal: how each [`Undo`] is carried out.

use std::os::fd::AsFd;

use serde_json::json;

use super::{CapError, Ctx};
use crate::audit::Outcome;
use crate::journal::Undo;
use crate::netlink::RouteAdd;

/// Errnos that mean "already undone".
fn already_gone(kind: &Undo, errno: i32) -> bool {
    match kind {
        Undo::DeleteLink { .. } => errno == libc::ENODEV || errno == libc::ENOENT,
        Undo::DeleteAddress { .. } => errno == libc::EADDRNOTAVAIL || errno == libc::ENODEV,
        Undo::DeleteRoute { .. } => errno == libc::ESRCH || errno == libc::ENODEV,
        // Put back by the kernel already (a prefix route with its address,
        // a link-local address when the link came up).
        Undo::AddAddress { .. } | Undo::AddRoute { .. } => errno == libc::EEXIST,
        _ => false,
    }
}

impl Ctx {
    /// Undoes every change of this invocation, newest first, each step
    /// audited as `journal.undo`. Keeps going past failures and returns
    /// them (a failed step is logged; the CNI error reports it).
    pub fn undo(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        let mut entries = self.journal.drain_reverse();
        for i in 0..entries.len() {
            let u = entries[i].clone();
            let result = match self.apply(&u) {
                Err(CapError::Kernel(e)) if already_gone(&u, e) => Ok(()),
                r => r,
            };
            // A link moved back keeps the index it had where it was, if
            // that is free here: the older entries must follow it.
            if let (
                Ok(()),
                Undo::MoveBack {
                    to,
                    from_index,
                    name,
                    ..
                },
            ) = (&result, &u)
            {
                if let Ok(now) = self.link_index(*to, name) {
                    if now != *from_index {
                        for older in &mut entries[i + 1..] {
                            older.remap(*to, *from_index, now);
                        }
                    }
                }
            }
            let outcome = match &result {
                Ok(()) => Outcome::Ok,
                Err(e) => e.outcome(),
            };
            self.audit
                .record("journal.undo", &json!({ "undo": u.describe() }), &outcome);
            if result.is_err() {
                failures.push(u.describe());
            }
        }
        failures
    }

    fn link_index(&mut self, kind: crate::netns::Kind, name: &str) -> Result<u32, CapError> {
        self.netlink(kind)?
            .link_by_name(name)
            .map(|m| m.header.index)
            .map_err(|e| CapError::from(&e))
    }

    fn apply(&mut self, u: &Undo) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let io_err = |e: std::io::Error| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO));
        match u {
            Undo::DeleteLink { ns, index } => {
                self.netlink(*ns)?.delete_link(*index).map_err(nl_err)
            }
            Undo::SetUp { ns, index, up } => {
                self.netlink(*ns)?.set_link_up(*index, *up).map_err(nl_err)
            }
            Undo::SetMtu { ns, index, mtu } => {
                self.netlink(*ns)?.set_mtu(*index, *mtu).map_err(nl_err)
            }
            Undo::SetMac { ns, index, mac } => {
                self.netlink(*ns)?.set_mac(*index, mac).map_err(nl_err)
            }
            Undo::SetMaster { ns, index, master } => self
                .netlink(*ns)?
                .set_master(*index, *master)
                .map_err(nl_err),
            Undo::SetHairpin { ns, index, on } => {
                self.netlink(*ns)?.set_hairpin(*index, *on).map_err(nl_err)
            }
            Undo::SetPromisc { ns, index, on } => {
                self.netlink(*ns)?.set_promisc(*index, *on).map_err(nl_err)
            }
            Undo::SetName { ns, index, name } => {
                self.netlink(*ns)?.set_name(*index, name).map_err(nl_err)
            }
            Undo::SetAlias { ns, index, alias } => {
                self.netlink(*ns)?.set_alias(*index, alias).map_err(nl_err)
            }
            Undo::MoveBack {
                ns,
                index,
                to,
                from_index,
                name,
            } => {
                let fd = self.ns_fd(*to)?;
                let nl = self.netlink(*ns)?;
                // Back under its old index if it is free; else wherever the
                // kernel puts it (the caller remaps the older entries).
                match nl.set_netns(*index, fd.as_fd(), Some(name), Some(*from_index)) {
                    Ok(()) => Ok(()),
                    Err(_) => nl
                        .set_netns(*index, fd.as_fd(), Some(name), None)
                        .map_err(nl_err),
                }
            }
            Undo::DeleteAddress { ns, spec } => self
                .netlink(*ns)?
                .delete_address(spec.index, spec.addr, spec.prefix_len)
                .map_err(nl_err),
            Undo::AddAddress { ns, spec } => self.netlink(*ns)?.add_address(spec).map_err(nl_err),
            Undo::DeleteRoute { ns, spec } => self.netlink(*ns)?.delete_route(spec).map_err(nl_err),
            Undo::AddRoute { ns, spec } => self
                .netlink(*ns)?
                .add_route(spec, RouteAdd::Append)
                .map_err(nl_err),
            Undo::RestoreRoute { ns, spec } => self
                .netlink(*ns)?
                .add_route(spec, RouteAdd::Replace)
                .map_err(nl_err),
            Undo::RestoreLink { ns, index, state } => self.restore_link(*ns, *index, state),
            Undo::RestoreSysctls { ns, values } => {
                let ns = self.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                let differing = crate::sysctl::restore(ns, values).map_err(io_err)?;
                if differing.is_empty() {
                    Ok(())
                } else {
                    log::warn!("settings not restored: {}", differing.join(", "));
                    Err(CapError::Kernel(libc::EIO))
                }
            }
            Undo::SetSysctl { ns, key, value } => {
                let ns = self.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                crate::sysctl::write(ns, key, value).map_err(io_err)
            }
        }
    }
}

impl Ctx {
    /// Puts a link that came back from another namespace into the state it
    /// had before it left: its per-link settings first (they decide what
    /// happens when it comes up), then MTU, address, alias, master and
    /// hairpin, promiscuity, and last the admin state (the routes restored
    /// after this need it up). Only what differs is written.
    fn restore_link(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
        state: &crate::journal::LinkState,
    ) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let now = self.link(kind, index)?;
        let ns = self.ns(kind).ok_or(CapError::Kernel(libc::ENOENT))?;
        let differing = crate::sysctl::restore(ns, &state.sysctls)
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let nl = self.netlink(kind)?;
        if now.mtu != state.mtu {
            nl.set_mtu(index, state.mtu).map_err(nl_err)?;
        }
        if now.mac != state.mac && !state.mac.is_empty() {
            nl.set_mac(index, &state.mac).map_err(nl_err)?;
        }
        if now.alias.as_deref().unwrap_or("") != state.alias {
            nl.set_alias(index, &state.alias).map_err(nl_err)?;
        }
        if now.master != state.master {
            nl.set_master(index, state.master).map_err(nl_err)?;
        }
        if let Some(on) = state.hairpin {
            if nl.hairpin(index).map_err(nl_err)? != Some(on) {
                nl.set_hairpin(index, on).map_err(nl_err)?;
            }
        }
        if now.promiscuous != state.promisc {
            nl.set_promisc(index, state.promisc).map_err(nl_err)?;
        }
        if now.up != state.up {
            nl.set_link_up(index, state.up).map_err(nl_err)?;
        }
        if differing.is_empty() {
            Ok(())
        } else {
            log::warn!("link settings not restored: {}", differing.join(", "));
            Err(CapError::Kernel(libc::EIO))
        }
    }
}

//! Replaying the journal: how each [`Undo`] is carried out.

use std::os::fd::AsFd;

use serde_json::json;

use super::{CapError, Ctx};
use crate::audit::Outcome;
use crate::journal::Undo;

/// Errnos that mean "already undone" for a deletion.
fn already_gone(kind: &Undo, errno: i32) -> bool {
    match kind {
        Undo::DeleteLink { .. } => errno == libc::ENODEV || errno == libc::ENOENT,
        Undo::DeleteAddress { .. } => errno == libc::EADDRNOTAVAIL || errno == libc::ENODEV,
        Undo::DeleteRoute { .. } => errno == libc::ESRCH || errno == libc::ENODEV,
        _ => false,
    }
}

impl Ctx {
    /// Undoes every change of this invocation, newest first, each step
    /// audited as `journal.undo`. Keeps going past failures and returns
    /// them (a failed step is logged; the CNI error reports it).
    pub fn undo(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        for u in self.journal.drain_reverse() {
            let result = match self.apply(&u) {
                Err(CapError::Kernel(e)) if already_gone(&u, e) => Ok(()),
                r => r,
            };
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
                name,
                ..
            } => {
                let fd = self.ns_fd(*to)?;
                self.netlink(*ns)?
                    .set_netns(*index, fd.as_fd(), Some(name))
                    .map_err(nl_err)
            }
            Undo::DeleteAddress { ns, spec } => self
                .netlink(*ns)?
                .delete_address(spec.index, spec.addr, spec.prefix_len)
                .map_err(nl_err),
            Undo::AddAddress { ns, spec } => self.netlink(*ns)?.add_address(spec).map_err(nl_err),
            Undo::DeleteRoute { ns, spec } => self.netlink(*ns)?.delete_route(spec).map_err(nl_err),
            Undo::RestoreRoute { ns, spec } => {
                self.netlink(*ns)?.add_route(spec, true).map_err(nl_err)
            }
            Undo::SetSysctl { ns, key, value } => {
                let ns = self.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                crate::sysctl::write(ns, key, value).map_err(io_err)
            }
        }
    }
}

//! Replaying the journal: how each [`Undo`] is carried out.

use std::os::fd::AsFd;

use serde_json::json;

use super::bindings::CapError;
use super::ctx::Ctx;
use crate::audit::Outcome;
use crate::cni_error::{CniError, Code};
use crate::inverse::Undo;
use crate::netlink::RouteAdd;
use crate::session::Output;

/// Errnos that mean "already undone".
fn already_gone(kind: &Undo, errno: i32) -> bool {
    match kind {
        Undo::DeleteLink { .. } => errno == libc::ENODEV || errno == libc::ENOENT,
        Undo::DeleteAddress { .. } => errno == libc::EADDRNOTAVAIL || errno == libc::ENODEV,
        Undo::DeleteRoute { .. } => errno == libc::ESRCH || errno == libc::ENODEV,
        Undo::DeleteRule { .. } => errno == libc::ENOENT,
        Undo::AddRule { .. } => errno == libc::EEXIST,
        // The qdisc, or its link, is gone already.
        Undo::DeleteQdisc { .. } => {
            errno == libc::ENOENT || errno == libc::ENODEV || errno == libc::EINVAL
        }
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
        self.undo_from(0)
    }

    /// Undoes the changes recorded after the first `mark` journal entries
    /// (a delegate that failed), newest first, as [`Ctx::undo`] does.
    pub fn undo_from(&mut self, mark: usize) -> Vec<String> {
        let entries = self.journal.drain_reverse_from(mark);
        let failures = self.replay(entries, "journal.undo");
        if mark > 0 {
            // The invocation goes on: links the undo deleted are no longer
            // "created in this call".
            let _ = self.refresh_created();
        }
        failures
    }

    /// Undoes the journal entries from `mark` on ([`Ctx::undo_from`]); if
    /// any step fails, the CNI error of plugin `name` says so instead of
    /// `outcome`.
    pub(crate) fn undo_or_report(
        &mut self,
        mark: usize,
        name: &str,
        outcome: Result<Output, CniError>,
    ) -> Result<Output, CniError> {
        let undo_failures = self.undo_from(mark);
        if undo_failures.is_empty() {
            return outcome;
        }
        eprintln!(
            "wasmcni: undoing the failed ADD left {} change(s) in place: {}",
            undo_failures.len(),
            undo_failures.join("; ")
        );
        Err(CniError::new(
            Code::Internal,
            format!(
                "plugin {name:?} failed and {} of its changes could not be undone",
                undo_failures.len()
            ),
        )
        .with_details(undo_failures.join("; ")))
    }

    /// Carries out `entries`, newest first, each step audited as `label`;
    /// keeps going past failures and returns them. A link moved back
    /// under another index than it had has the older entries about it
    /// follow it.
    pub(super) fn replay(
        &mut self,
        mut entries: Vec<crate::journal::Entry>,
        label: &str,
    ) -> Vec<String> {
        let mut failures = Vec::new();
        // Entries a delegate joined to this journal may name the host
        // namespace this plugin never asked for: the undo acts there all
        // the same (it is wasmcni's own).
        if !entries.is_empty() {
            if let Err(e) = self.open_host() {
                failures.push(format!("opening the host namespace: {e:?}"));
            }
        }
        for i in 0..entries.len() {
            let entry = entries[i].clone();
            let u = &entry.undo;
            if let Some(why) = self.kept_for_other_holders(u) {
                self.audit.record(
                    label,
                    &json!({ "undo": u.describe(), "kept": why }),
                    &Outcome::Ok,
                );
                continue;
            }
            let result = match self.apply(u) {
                Err(CapError::Kernel(e)) if already_gone(u, e) => Ok(()),
                r => r,
            };
            // A link moved back keeps the index it had where it was, if
            // that is free here: the older entries about it must follow.
            if let (
                Ok(()),
                Undo::MoveBack {
                    to,
                    from_index,
                    name,
                    ..
                },
                Some(id),
            ) = (&result, u, entry.link)
            {
                if let Ok(now) = self.link_index(*to, name) {
                    if now != *from_index {
                        for older in &mut entries[i + 1..] {
                            older.relocate(id, *to, *from_index, now);
                        }
                    }
                }
            }
            let outcome = match &result {
                Ok(()) => Outcome::Ok,
                Err(e) => e.outcome(),
            };
            self.audit
                .record(label, &json!({ "undo": u.describe() }), &outcome);
            if let Err(e) = result {
                failures.push(match e {
                    CapError::Incomplete(what) => format!("{}: {what}", u.describe()),
                    _ => u.describe(),
                });
            }
        }
        failures
    }

    fn link_index(&mut self, kind: crate::netns::Kind, name: &str) -> Result<u32, CapError> {
        self.netlink(kind)?
            .link_by_name(name)
            .map(|m| m.header.index)
            .map_err(CapError::from)
    }

    fn apply(&mut self, u: &Undo) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let io_err = |e: std::io::Error| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO));
        match u {
            Undo::DeleteLink { ns, index } => self.undo_create(*ns, *index),
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
            Undo::SetPortVlans { ns, index, vlans } => self
                .netlink(*ns)?
                .set_port_vlans(*index, vlans)
                .map_err(nl_err),
            Undo::SetPromisc { ns, index, on } => {
                self.netlink(*ns)?.set_promisc(*index, *on).map_err(nl_err)
            }
            Undo::SetAllmulti { ns, index, on } => {
                self.netlink(*ns)?.set_allmulti(*index, *on).map_err(nl_err)
            }
            Undo::SetTxqlen { ns, index, txqlen } => self
                .netlink(*ns)?
                .set_txqlen(*index, *txqlen)
                .map_err(nl_err),
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
            Undo::PruneAddresses { ns, index, keep } => self.prune_addresses(*ns, *index, keep),
            Undo::Ipam(u) => u.apply(),
            Undo::State(u) => u.apply(),
            Undo::DeleteRule { ns, spec } => self.netlink(*ns)?.delete_rule(spec).map_err(nl_err),
            Undo::AddRule { ns, spec } => self.netlink(*ns)?.add_rule(spec).map_err(nl_err),
            Undo::DeleteL3mdevRules { ns, vrf, v4, v6 } => {
                self.delete_l3mdev_rules(*ns, *vrf, *v4, *v6)
            }
            Undo::NativeDel(call) => call.run_del(),
            Undo::RestoreSysctls { ns, changes } => {
                let ns = self.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                let differing = crate::sysctl::restore_changes(ns, changes).map_err(io_err)?;
                if differing.is_empty() {
                    Ok(())
                } else {
                    Err(CapError::Incomplete(format!(
                        "settings not restored: {}",
                        differing.join(", ")
                    )))
                }
            }
            Undo::DeleteQdisc { ns, index, ingress } => {
                let (parent, handle) = if *ingress {
                    (
                        netlink_packet_route::tc::TcHandle::INGRESS,
                        crate::netlink::tc::INGRESS_HANDLE,
                    )
                } else {
                    (
                        netlink_packet_route::tc::TcHandle::ROOT,
                        crate::netlink::tc::TBF_HANDLE,
                    )
                };
                self.netlink(*ns)?
                    .delete_qdisc(*index, parent, handle)
                    .map_err(nl_err)
            }
            Undo::FirewallRemove { attachment, kinds } => self
                .firewall_remove_where(|t| t.att == *attachment && kinds.contains(&t.kind))
                .map(|_| ()),
            Undo::SetSysctl { ns, key, value } => {
                let ns = self.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                crate::sysctl::write(ns, key, value).map_err(io_err)
            }
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
    fn restore_link(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
        state: &crate::inverse::LinkState,
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

    /// Deletes the addresses of link `index` that are not in `keep`.
    fn prune_addresses(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
        keep: &[crate::netlink::AddrSpec],
    ) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let nl = self.netlink(kind)?;
        let now: Vec<crate::netlink::AddrSpec> = nl
            .addresses(None)
            .map_err(nl_err)?
            .iter()
            .filter_map(crate::netlink::AddrSpec::from_message)
            .filter(|a| a.index == index)
            .collect();
        for a in now {
            let kept = keep
                .iter()
                .any(|k| k.addr == a.addr && k.prefix_len == a.prefix_len);
            if !kept {
                match nl.delete_address(index, a.addr, a.prefix_len) {
                    Ok(()) => {}
                    Err(e) if e.errno() == libc::EADDRNOTAVAIL => {}
                    Err(e) => return Err(nl_err(e)),
                }
            }
        }
        Ok(())
    }

    /// Deletes a link this invocation created; but a bridge created for
    /// the network stays if another attachment's link joined it meanwhile
    /// (checked under the network lock, which enslaving also takes).
    fn undo_create(&mut self, kind: crate::netns::Kind, index: u32) -> Result<(), CapError> {
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

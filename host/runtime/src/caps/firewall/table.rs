//! wasmcni's nftables tables in the node namespace: the netfilter
//! socket, an attachment's rules installed with the skeleton in one
//! batch, and tagged rules found and removed (DEL, the journal's undo and
//! GC are one routine, [`Ctx::firewall_remove_where`]), each batch
//! computed against the ruleset generation it read and retried if
//! another writer got in between; and what goes with them (UDP conntrack
//! entries, `route_localnet`).

use netlink_packet_netfilter::nftables::Verdict;

use super::chains::{
    BRIDGE_PREROUTING, ENTRY_COMMENT, FILTER_FORWARD, FILTER_INPUT, HOSTPORTS, ISOLATION,
    NAT_OUTPUT, NAT_POSTROUTING, NAT_PREROUTING,
};
use super::compile::Plan;
use super::tag::{is_own_chain, Tag};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::CapError;
use crate::caps::ctx::Ctx;
use crate::netlink::nft::{expr, Batch, Dumped, Family, NewRule, Nft};
use crate::netns::Kind;
use crate::record::FwKind;

/// How often a batch is recomputed when another writer changed the
/// ruleset between the dump and the commit.
const ATTEMPTS: usize = 8;

impl Ctx {
    /// The netfilter socket of the node namespace, opened on first use.
    pub(super) fn nft(&mut self) -> Result<&mut Nft, CapError> {
        if self.nft.is_none() {
            self.open_host()?;
            let ns = self
                .ns(Kind::Host)
                .ok_or(CapError::Code(ErrorCode::NotFound))?;
            self.nft = Some(Nft::open(ns)?);
        }
        self.nft.as_mut().ok_or(CapError::Code(ErrorCode::NotFound))
    }

    /// Whether any of `plan`'s rules is there, tagged for the attachment
    /// (after a failed commit: whether it was applied after all).
    pub(super) fn fw_installed_any(&mut self, kind: FwKind, plan: &Plan, att: &str) -> bool {
        self.firewall_any(&[kind], |d, t| {
            t.att == att
                && plan
                    .rules
                    .iter()
                    .any(|r| r.chain == d.chain && r.digest() == t.rule)
        })
    }

    /// Replaces the attachment's rules of `kind` with `plan`'s, with the
    /// skeleton, in one batch (recomputed if the ruleset changed meanwhile).
    pub(super) fn fw_install(
        &mut self,
        kind: FwKind,
        plan: &Plan,
        att: &str,
    ) -> Result<(), CapError> {
        let family = kind.family();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let nft = self.nft()?;
            let generation = nft.generation()?;
            let existing = nft.rules(family)?;
            let chains = nft.chains(family)?;
            let mut b = Batch::default();
            // Replace what the attachment had of this kind.
            for d in &existing {
                if let Some(t) = Tag::parse(&d.comment) {
                    if t.att == att && t.kind == kind && !is_own_chain(&d.chain, att) {
                        b.delete_rule(family, &d.chain, d.handle);
                    }
                }
            }
            for (f, c) in &plan.own_chains {
                if chains.contains(c) {
                    b.flush_chain(*f, c);
                }
            }
            // The skeleton (idempotent), the entry rules if missing.
            b.table(family);
            match family {
                Family::Inet => {
                    for c in [
                        &NAT_PREROUTING,
                        &NAT_OUTPUT,
                        &NAT_POSTROUTING,
                        &FILTER_FORWARD,
                        &FILTER_INPUT,
                    ] {
                        b.base_chain(c);
                    }
                    b.chain(family, HOSTPORTS);
                    b.chain(family, ISOLATION);
                    for c in [&NAT_PREROUTING, &NAT_OUTPUT] {
                        let present = existing
                            .iter()
                            .any(|d| d.chain == c.name && d.comment == ENTRY_COMMENT);
                        if !present {
                            b.rule(&NewRule {
                                family,
                                chain: c.name.into(),
                                exprs: vec![
                                    expr::fib_daddr_type(),
                                    expr::eq(crate::netlink::nft::RTN_LOCAL.to_ne_bytes().to_vec()),
                                    expr::verdict(Verdict::Jump, Some(HOSTPORTS)),
                                ],
                                comment: ENTRY_COMMENT.into(),
                            });
                        }
                    }
                }
                Family::Bridge => b.base_chain(&BRIDGE_PREROUTING),
            }
            for (f, c) in &plan.own_chains {
                b.chain(*f, c);
            }
            for r in &plan.rules {
                b.rule(r);
            }
            match self.nft()?.commit(b, Some(generation)) {
                Ok(()) => break,
                Err(e) if e.errno() == libc::ERESTART && attempt < ATTEMPTS => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Deletes the UDP conntrack entries to these host ports, best effort
    /// (as the reference: a failure is logged, never fatal).
    pub(super) fn fw_flush_udp(&mut self, ports: &[(bool, u16)]) {
        if ports.is_empty() {
            return;
        }
        let nft = match self.nft() {
            Ok(nft) => nft,
            Err(e) => {
                log::warn!("flushing UDP conntrack entries: {e:?}");
                return;
            }
        };
        let mut failed = false;
        for (v6, port) in ports {
            if let Err(e) = crate::netlink::conntrack::flush_udp_port(nft.socket(), *v6, *port) {
                log::warn!("flushing UDP conntrack entries to port {port}: {e}");
                failed = true;
            }
        }
        // The socket may hold what the failure left unread: given back (the
        // pool keeps it only once it is empty), a fresh one next time.
        if failed {
            self.nft = None;
        }
    }

    /// Whether any rule of one of `kinds` that `pick` chooses (by the rule
    /// and its tag) is installed. A table that cannot be read counts as
    /// yes: what asks keeps its entry or journals the batch.
    pub(crate) fn firewall_any(
        &mut self,
        kinds: &[FwKind],
        pick: impl Fn(&Dumped, &Tag) -> bool,
    ) -> bool {
        for family in [Family::Inet, Family::Bridge] {
            if !kinds.iter().any(|k| k.family() == family) {
                continue;
            }
            let Ok(rules) = self.nft().and_then(|n| Ok(n.rules(family)?)) else {
                return true;
            };
            if rules.iter().any(|d| {
                Tag::parse(&d.comment).is_some_and(|t| kinds.contains(&t.kind) && pick(d, &t))
            }) {
                return true;
            }
        }
        false
    }

    /// Removes the rules whose tag `pick` selects, in both tables, each in
    /// one batch (with the attachment chains of the attachments it
    /// empties, and the whole table when no tagged rule is left); how many
    /// rules. Nothing to remove sends nothing.
    pub(crate) fn firewall_remove_where(
        &mut self,
        pick: impl Fn(&Tag) -> bool,
    ) -> Result<u32, CapError> {
        let mut removed = 0;
        for family in [Family::Inet, Family::Bridge] {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let nft = self.nft()?;
                let generation = nft.generation()?;
                let existing = nft.rules(family)?;
                let chains = nft.chains(family)?;
                let mut victims = Vec::new();
                let mut others = 0;
                // Attachments whose port-map jump goes: their own chains go.
                let mut atts: Vec<String> = Vec::new();
                // route_localnet guards that go, and those that stay.
                let mut guards_gone: Vec<(String, bool)> = Vec::new();
                let mut guards_kept: Vec<String> = Vec::new();
                for d in &existing {
                    match Tag::parse(&d.comment) {
                        Some(t) if pick(&t) => {
                            if t.kind == FwKind::PortMap
                                && d.chain == HOSTPORTS
                                && !atts.contains(&t.att)
                            {
                                atts.push(t.att.clone());
                            }
                            if let Some(g) = t.localnet {
                                guards_gone.push(g);
                            }
                            victims.push(d.clone());
                        }
                        Some(t) => {
                            if let Some((name, _)) = t.localnet {
                                guards_kept.push(name);
                            }
                            others += 1;
                        }
                        None if d.comment == ENTRY_COMMENT => {}
                        None => others += 1,
                    }
                }
                if victims.is_empty() {
                    break;
                }
                let mut b = Batch::default();
                if others == 0 {
                    b.delete_table(family);
                } else {
                    let own = |c: &str| atts.iter().any(|a| is_own_chain(c, a));
                    for d in victims.iter().filter(|d| !own(&d.chain)) {
                        b.delete_rule(family, &d.chain, d.handle);
                    }
                    for c in chains.iter().filter(|c| own(c)) {
                        // Unreferenced now (the jump goes in this batch),
                        // and only that attachment's port-map rules live
                        // there.
                        b.flush_chain(family, c);
                        b.delete_chain(family, c);
                    }
                }
                match self.nft()?.commit(b, Some(generation)) {
                    Ok(()) => {
                        removed += victims.len() as u32;
                        let mut udp: Vec<(bool, u16)> =
                            victims.iter().filter_map(|v| v.udp_dnat).collect();
                        udp.dedup();
                        self.fw_flush_udp(&udp);
                        self.fw_restore_localnet(&guards_gone, &guards_kept);
                        break;
                    }
                    Err(e) if e.errno() == libc::ERESTART && attempt < ATTEMPTS => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }

    /// Puts `route_localnet` back to 0 on each interface whose last guard
    /// went, if wasmcni's first port map there had found it 0. Best
    /// effort: the interface may be gone.
    fn fw_restore_localnet(&mut self, gone: &[(String, bool)], kept: &[String]) {
        let Some(ns) = self.ns(Kind::Host) else {
            return;
        };
        let mut done: Vec<&str> = Vec::new();
        for (name, was) in gone {
            if *was || kept.contains(name) || done.contains(&name.as_str()) {
                continue;
            }
            done.push(name);
            let key = format!("net.ipv4.conf.{name}.route_localnet");
            if let Err(e) = crate::sysctl::write(ns, &key, "0") {
                log::debug!("{key}: {e:?}");
            }
        }
    }
}

//! `wasmcni:plugin/firewall`: nftables rules for the attachment (see
//! `wit/firewall.wit` for the rule shapes and `docs/firewall-design.md`
//! for why they look so).
//!
//! The plugin names no table, chain or handle: the host builds every rule
//! from what the plugin asks for, tags it with the runtime's attachment
//! (`wasmcni n=<network> a=<attachment> k=<kind> r=<rule digest> ...`), and
//! removes by tag. DEL, the journal's undo and GC are one routine
//! ([`Ctx::firewall_remove_where`]): dump, pick the tagged rules, delete
//! them (and the attachment's chains, and the table when no attachment has
//! rules left) in one batch, computed against the ruleset generation it
//! read, retried if another writer got in between.
//!
//! This file holds the host functions and what each call does (`add`,
//! `check`, `remove`, `collect-garbage`), their audit form and their
//! inverse ([`FirewallUndo`]). Beside it:
//! - `compile`: the rule compiler, which turns a plugin's rule request
//!   into the nftables rules (expressions) it stands for;
//! - `checks`: what a request may name (the grant's kinds, the
//!   attachment's own addresses, the runtime's port mappings);
//! - `tag`: who a rule belongs to (its comment) and the attachment's
//!   hashes;
//! - `chains`: the skeleton of wasmcni's tables;
//! - `table`: installing and removing tagged rules in one batch;
//! - `forward`: the one rule outside wasmcni's tables (iptables'
//!   FORWARD);
//! - `rows`: the interface's rows of the capability catalog.

mod chains;
mod checks;
mod compile;
mod forward;
mod rows;
mod table;
mod tag;

pub use compile::DEFAULT_FORWARD_MARK;
pub(crate) use compile::MAX_MAPPINGS;
pub(super) use rows::ROWS;
pub use tag::{attachment_hashes, Tag};

use serde_json::{json, Value};
use wasmtime::component::Resource;

use super::args::AuditArg;
use super::authority::firewall::{at_its_command, Doing};
use super::bindings::ip_from_wit;
use super::bindings::wasmcni::plugin::firewall::{Host, Protocol, RuleKind, RuleOptions, Rules};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{CapError, NsHandle};
use super::ctx::{Ctx, Inverse, StoreData};
use super::sysctl::SysctlUndo;
use crate::attachment::Attachment;
use crate::netlink::nft::{Dumped, Family};
use crate::netns::Kind;
use crate::record::{FirewallRules, FwKind, Owned};
use chains::{ENTRY_COMMENT, NAT_OUTPUT, NAT_PREROUTING};
use checks::MAX_KINDS;
use compile::Plan;
use rows::*;
use tag::kind_of;

impl AuditArg for Rules {
    fn audit(&self) -> Value {
        rules_arg(self)
    }
}

/// The audit log's view of a rule request.
fn rules_arg(r: &Rules) -> Value {
    let prefix = |p: &super::bindings::wasmcni::plugin::types::IpPrefix| {
        format!("{}/{}", ip_from_wit(p.address), p.prefix_len)
    };
    // At most this many entries of a list are written out (with the count).
    const SHOWN: usize = 16;
    match r {
        Rules::PortMap(maps) => json!({
            "port-map": maps.iter().take(SHOWN).map(|pm| json!({
                "container": prefix(&pm.container),
                "mappings": pm.mappings.iter().take(32).map(|m| json!({
                    "host-port": m.host_port, "container-port": m.container_port,
                    "protocol": match m.protocol {
                        Protocol::Tcp => "tcp",
                        Protocol::Udp => "udp",
                        Protocol::Sctp => "sctp",
                    },
                    "host-ip": m.host_ip.map(|ip| ip_from_wit(ip).to_string()),
                })).collect::<Vec<_>>(),
                "mapping-count": pm.mappings.len(),
                "snat": pm.snat, "masq-all": pm.masq_all,
                "conditions": pm.conditions.len(),
            })).collect::<Vec<_>>(),
            "count": maps.len(),
        }),
        Rules::Masquerade(ps) => json!({
            "masquerade": ps.iter().take(SHOWN).map(prefix).collect::<Vec<_>>(),
            "count": ps.len(),
        }),
        Rules::Forward(ips) => json!({
            "forward": ips.iter().take(SHOWN).map(|ip| ip_from_wit(*ip).to_string())
                .collect::<Vec<_>>(),
            "count": ips.len(),
        }),
        Rules::Isolation(i) => json!({ "isolation": { "link": i } }),
        Rules::MacSpoof(m) => json!({ "mac-spoof": {
            "link": m.link,
            "mac": super::args::arg_str(&hex::encode(&m.mac)),
        } }),
    }
}

impl AuditArg for RuleOptions {
    fn audit(&self) -> Value {
        json!({ "isolate-within-bridge": self.isolate_within_bridge })
    }
}

/// `firewall.add`'s options: none.
const NO_OPTIONS: RuleOptions = RuleOptions {
    isolate_within_bridge: false,
};

impl AuditArg for Vec<RuleKind> {
    fn audit(&self) -> Value {
        kinds_arg(self)
    }
}

fn kinds_arg(kinds: &[RuleKind]) -> Value {
    Value::from(
        kinds
            .iter()
            .take(MAX_KINDS + 1)
            .map(|k| FwKind::from(*k).field())
            .collect::<Vec<_>>(),
    )
}

impl Ctx {
    fn fw_add(&mut self, ns: Kind, rules: &Rules, options: &RuleOptions) -> Result<(), CapError> {
        let kind = kind_of(rules);
        self.fw_require(ns, kind)?;
        at_its_command(Doing::Add, self.command)?;
        let mut plan = self.fw_plan(rules, options)?;
        let (_, att) = self.fw_hashes();
        // route_localnet first, journaled, so that a failure of the batch
        // leaves it restored by the undo. Each guard rule records what
        // route_localnet was before wasmcni's first port map on that
        // interface set it (an earlier guard's record wins), so that the
        // last DEL puts it back.
        let mark = self.journal.len();
        if !plan.guards.is_empty() {
            let earlier: Vec<(String, bool)> = self
                .nft()?
                .rules(Family::Inet)?
                .iter()
                .filter_map(|d| Tag::parse(&d.comment)?.localnet)
                .collect();
            for (ifname, at) in plan.guards.clone() {
                let key = format!("net.ipv4.conf.{ifname}.route_localnet");
                let ns = self
                    .ns(Kind::Host)
                    .ok_or(CapError::Code(ErrorCode::NotFound))?;
                let old = crate::sysctl::read(ns, &key)?;
                let on = old.trim() == "1";
                let was = earlier
                    .iter()
                    .find(|(n, _)| *n == ifname)
                    .map_or(on, |(_, w)| *w);
                let digest = plan.rules[at].digest();
                plan.rules[at].comment = self.fw_comment(kind, &digest, Some((&ifname, was)));
                if !on {
                    crate::sysctl::write(ns, &key, "1")?;
                    self.journal.record(SysctlUndo::SetSysctl {
                        ns: Kind::Host,
                        key,
                        value: old.trim().to_owned(),
                    });
                }
            }
        }
        if let Err(e) = self.intend(crate::record::Owned {
            firewall: vec![crate::record::FirewallRules {
                attachment: att.clone(),
                kinds: vec![kind],
            }],
            ..crate::record::Owned::default()
        }) {
            self.undo_from(mark);
            return Err(e);
        }
        if let Err(e) = self.fw_install(kind, &plan, &att) {
            // A batch whose acknowledgement was lost may have been applied:
            // then it is journaled like one that succeeded.
            if self.fw_installed_any(kind, &plan, &att) {
                self.journal.record(FirewallUndo::FirewallRemove {
                    attachment: att,
                    kinds: vec![kind],
                });
            }
            // Nothing of the batch is there otherwise: put route_localnet
            // back now, whatever the plugin does next.
            self.undo_from(mark);
            return Err(e);
        }
        self.journal.record(FirewallUndo::FirewallRemove {
            attachment: att,
            kinds: vec![kind],
        });
        self.fw_flush_udp(&plan.udp);
        if kind == FwKind::Forward {
            self.fw_forward_accept()?;
        }
        Ok(())
    }

    fn fw_check(&mut self, ns: Kind, rules: &Rules) -> Result<bool, CapError> {
        super::authority::firewall::node_namespace(ns)?;
        let kind = kind_of(rules);
        let mut plans = vec![self.fw_plan(rules, &NO_OPTIONS)?];
        if matches!(rules, Rules::Isolation(_)) {
            // Or `add-with`'s, where the grant allows the option.
            let within = RuleOptions {
                isolate_within_bridge: true,
            };
            plans.extend(self.fw_plan(rules, &within).ok());
        }
        let (_, att) = self.fw_hashes();
        let nft = self.nft()?;
        let existing = nft.rules(kind.family())?;
        // By tag, not by the whole comment: a long network name is cut
        // short in it.
        let have: Vec<(&Dumped, Tag)> = existing
            .iter()
            .filter_map(|d| Some((d, Tag::parse(&d.comment)?)))
            .filter(|(_, t)| t.att == att && t.kind == kind)
            .collect();
        let all_there = |plan: &Plan| {
            have.len() == plan.rules.len()
                && plan.rules.iter().all(|r| {
                    let digest = r.digest();
                    have.iter()
                        .any(|(d, t)| d.chain == r.chain && t.rule == digest)
                })
        };
        let entries = kind != FwKind::PortMap
            || [NAT_PREROUTING.name, NAT_OUTPUT.name].iter().all(|c| {
                existing
                    .iter()
                    .any(|d| d.chain == *c && d.comment == ENTRY_COMMENT)
            });
        Ok(entries && plans.iter().any(all_there))
    }

    fn fw_remove(&mut self, ns: Kind, kinds: &[RuleKind]) -> Result<u32, CapError> {
        let kinds = self.fw_kinds(ns, kinds)?;
        at_its_command(Doing::Remove, self.command)?;
        let (_, att) = self.fw_hashes();
        if self.kept_for_live_incarnation("firewall.keep", json!({"attachment": att})) {
            return Ok(0);
        }
        self.firewall_remove_where(|t| t.att == att && kinds.contains(&t.kind))
    }

    fn fw_collect(&mut self, ns: Kind, kinds: &[RuleKind]) -> Result<u32, CapError> {
        let kinds = self.fw_kinds(ns, kinds)?;
        at_its_command(Doing::Collect, self.command)?;
        let network = self.state_owner.0.clone();
        let (net, _) = attachment_hashes(&network, "", "");
        let valid: Vec<String> = self
            .attachment
            .valid
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|o| attachment_hashes(&network, &o.container_id, &o.ifname).1)
            .collect();
        self.firewall_remove_where(|t| {
            t.net == net && !valid.contains(&t.att) && kinds.contains(&t.kind)
        })
    }
}

impl Host for StoreData {
    fn add(&mut self, ns: Resource<NsHandle>, rules: Rules) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rules);
        self.cap(&ADD, args, |c| c.fw_add(kind, &rules, &NO_OPTIONS))
    }

    fn add_with(
        &mut self,
        ns: Resource<NsHandle>,
        rules: Rules,
        options: RuleOptions,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rules, &options);
        self.cap(&ADD_WITH, args, |c| c.fw_add(kind, &rules, &options))
    }

    fn check(&mut self, ns: Resource<NsHandle>, rules: Rules) -> Result<bool, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rules);
        self.cap(&CHECK, args, |c| c.fw_check(kind, &rules))
    }

    fn remove(&mut self, ns: Resource<NsHandle>, kinds: Vec<RuleKind>) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &kinds);
        self.cap(&REMOVE, args, |c| c.fw_remove(kind, &kinds))
    }

    fn collect_garbage(
        &mut self,
        ns: Resource<NsHandle>,
        kinds: Vec<RuleKind>,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &kinds);
        self.cap(&COLLECT_GARBAGE, args, |c| c.fw_collect(kind, &kinds))
    }
}

/// How firewall rules are taken back (`firewall`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum FirewallUndo {
    /// Firewall rules were installed for an attachment: remove its rules
    /// of these kinds, found by their tag (no handle is kept, so the entry
    /// stays valid in another process), with the attachment's chains, and
    /// the tables once no attachment has rules left.
    FirewallRemove {
        /// The attachment's hash, as its rules' tags carry it.
        attachment: String,
        /// Which kinds.
        kinds: Vec<FwKind>,
    },
}

impl Inverse for FirewallUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let FirewallUndo::FirewallRemove { attachment, kinds } = self;
        ctx.firewall_remove_where(|t| t.att == *attachment && kinds.contains(&t.kind))
            .map(|_| ())
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn owned(&self, _attachment: &Attachment) -> Option<Owned> {
        let FirewallUndo::FirewallRemove { attachment, kinds } = self;
        Some(Owned {
            firewall: vec![FirewallRules {
                attachment: attachment.clone(),
                kinds: kinds.clone(),
            }],
            ..Owned::default()
        })
    }
}

//! Holders: the other incarnations of this attachment and the other
//! attachments of its network or node, as the state root's records say
//! them. What a DEL, an undo or a GC keeps for them (S15, S16) is decided
//! here from those facts; none of it is a refusal (those are
//! [`super::authority`]'s): a late DEL keeps the live incarnation's
//! objects, an undo keeps what another attachment holds.

use std::net::IpAddr;

use super::bindings::CapError;
use super::bindings::Link;
use super::ctx::{Command, Ctx};
use super::ctx::{Incarnations, Inverse};
use crate::ipam::Owner;
use crate::netns::Kind;

/// Whether an attachment other than `me` has a record or intent log in
/// `me`'s network (`network`), or on the node.
fn holders_besides(me: &crate::attachment::Attachment, network: bool) -> bool {
    let mine = std::path::Path::new(&crate::state_fs::component(&me.network))
        .join(crate::state_fs::component(&me.container_id))
        .join(crate::state_fs::component(&me.ifname));
    crate::record::holders(
        &crate::record::Location::root_from_env(),
        network.then_some(me.network.as_str()),
    )
    .any(|h| h != mine)
}

impl Ctx {
    /// The attachment's incarnations, read once from its records.
    fn incarnations(&self) -> &Incarnations {
        self.incarnations.get_or_init(|| {
            let mut out = Incarnations::default();
            let boot = crate::record::boot_id().unwrap_or_default();
            let records = crate::record::of_attachment(
                &crate::record::Location::root_from_env(),
                &self.owner(),
            );
            for r in records.iter().filter(|r| r.boot_id == boot) {
                out.current.push(r.netns);
                for l in r.owned.links.iter().filter(|l| l.ns == Kind::Host) {
                    out.links.push((l.name.clone(), l.incarnation(r)));
                }
            }
            out
        })
    }

    /// DEL: whether node link `l` (with this attachment's mark) is
    /// recorded as another incarnation's only: a late DEL (the runtime
    /// lost it, and added the attachment again in another namespace) may
    /// not touch the live incarnation's links.
    pub(super) fn another_incarnations(&self, l: &Link) -> bool {
        if self.command != Some(Command::Del) {
            return false;
        }
        let Some(ino) = self.container_ino() else {
            return false;
        };
        let links = &self.incarnations().links;
        let named = |f: &dyn Fn(u64) -> bool| links.iter().any(|(n, i)| *n == l.name && f(*i));
        named(&|i| i != ino) && !named(&|i| i == ino)
    }

    /// Reads the attachment's incarnations now, before the DEL's cleanup
    /// changes its records: [`Ctx::late_del`] asked after the cleanup
    /// would see only what it left.
    pub(crate) fn note_incarnations(&self) {
        // Without a container namespace no DEL is late: nothing to read.
        if self.command == Some(Command::Del) && self.container_ino().is_some() {
            let _ = self.incarnations();
        }
    }

    /// Whether this is a late DEL: one naming a container namespace that
    /// the attachment's records do not, while they name another (the live
    /// incarnation). Its reservations are the live incarnation's too (a
    /// reservation names the attachment, not the incarnation), so such a
    /// DEL releases none ([`Ctx::keeps_for_live_incarnation`]).
    pub(super) fn late_del(&self) -> bool {
        if self.command != Some(Command::Del) {
            return false;
        }
        let Some(ino) = self.container_ino() else {
            return false;
        };
        let current = &self.incarnations().current;
        !current.is_empty() && !current.contains(&ino)
    }

    /// Whether what a DEL would take away by the attachment's name alone
    /// (firewall rules by its tag, its `ifb`, its plugin state), which
    /// does not say which incarnation made it, is kept for the live
    /// incarnation: this is a late DEL ([`Ctx::late_del`]). Audited as
    /// `call` with `args`. (A late DEL took the live incarnation's port
    /// maps, `ifb` and plugin state: issue 49, breach 3.)
    pub(super) fn kept_for_live_incarnation(
        &mut self,
        call: &str,
        args: serde_json::Value,
    ) -> bool {
        if !self.late_del() {
            return false;
        }
        let mut args = args;
        args["why"] = serde_json::json!(
            "a late DEL: the attachment lives on in another container namespace (S15)"
        );
        self.audit_event(call, &args, &crate::audit::Outcome::Ok);
        true
    }

    /// Whether a release of `holder`'s reservation is kept (not done) for
    /// the live incarnation: the holder is this attachment and this is a
    /// late DEL ([`Ctx::late_del`]). Audited.
    pub(super) fn keeps_for_live_incarnation(&mut self, holder: &Owner, ip: IpAddr) -> bool {
        if !(self.attachment.owner().holds(holder) && self.late_del()) {
            return false;
        }
        self.audit_event(
            "ipam-store.keep",
            &serde_json::json!({"address": ip.to_string(),
                "why": "a late DEL: the attachment lives on in another container namespace (S15)"}),
            &crate::audit::Outcome::Ok,
        );
        true
    }

    /// Whether another attachment holds what this one's network shares
    /// (`network`: its network's; else the node's): has a record or
    /// intent log (an ADD under way writes its intent before it makes
    /// anything) (S16).
    pub(super) fn other_holders(&self, network: bool) -> bool {
        let me = self.owner();
        holders_besides(&me, network)
    }

    /// After the last holder of `of`'s network went (its DEL or GC
    /// removed its record, and no other attachment of the network has a
    /// record or intent log): removes the links the network's ADDs handed
    /// to it with `link.share` (a gateway pair), which no attachment owns
    /// alone (S16). The network's bridge stays, as with the reference.
    /// Answers what it removed.
    pub(super) fn release_network_shares(
        &mut self,
        of: &crate::attachment::Attachment,
        label: &str,
    ) -> Vec<String> {
        if holders_besides(of, true) || self.open_host().is_err() {
            return Vec::new();
        }
        let mark = of.network_mark();
        let _lock = crate::netlock::lock(&of.network);
        // Checked again under the network lock an ADD takes to join.
        if holders_besides(of, true) {
            return Vec::new();
        }
        let Ok(links) = self
            .netlink(Kind::Host)
            .and_then(|nl| nl.links().map_err(CapError::from))
        else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for m in links {
            let l = Link::from_message(m);
            if l.alias.as_deref() != Some(mark.as_str()) || l.kind.as_deref() == Some("bridge") {
                continue;
            }
            let args = serde_json::json!({"link": l.name, "network": of.network});
            let result = self
                .netlink(Kind::Host)
                .and_then(|nl| nl.delete_link(l.index).map_err(|e| CapError::from(&e)));
            match result {
                Ok(()) => {
                    self.audit.record(label, &args, &crate::audit::Outcome::Ok);
                    removed.push(format!("the network's shared link {:?}", l.name));
                }
                // A veth's peer went with it.
                Err(CapError::Kernel(libc::ENODEV)) => {}
                Err(e) => self.audit.record(label, &args, &e.outcome()),
            }
        }
        removed
    }

    /// Why the undo of a failed ADD keeps what `u` would take back, if it
    /// does (S16): an object the network or the node shares that another
    /// attachment holds — a link the network shares (its bridge, a
    /// gateway pair handed over with `link.share`), an address on one, a
    /// setting of one, or a node-wide setting (`ip_forward`): the other
    /// attachment relies on it, and its own DEL leaves it as the
    /// reference's does.
    pub(super) fn kept_for_other_holders(&mut self, u: &dyn Inverse) -> Option<String> {
        if self.command != Some(Command::Add) {
            return None;
        }
        u.kept_for_other_holders(self)
    }

    /// Why an undo keeps a change to node link `index`: the network's
    /// shared link, which its other attachments hold
    /// ([`Ctx::kept_for_other_holders`]).
    pub(super) fn shared_link_kept(&mut self, index: u32) -> Option<String> {
        let l = self.link(Kind::Host, index).ok()?;
        (l.alias.as_deref() == Some(self.marks.1.as_str()) && self.other_holders(true))
            .then(|| format!("{:?} is shared by the network's other attachments", l.name))
    }

    /// The undo of the `l3mdev` rules VRF `vrf` brought to namespace
    /// `ns` (S16): they go unless another VRF is there, which needs them
    /// (the kernel's lookups into every VRF's table go through them), and
    /// which, made by a concurrent ADD after this one's, did not bring
    /// them. Under the namespace's l3mdev lock, as VRFs are made.
    pub(super) fn delete_l3mdev_rules(
        &mut self,
        ns: Kind,
        vrf: u32,
        v4: bool,
        v6: bool,
    ) -> Result<(), CapError> {
        let ino = self.ns(ns).ok_or(CapError::Kernel(libc::ENOENT))?.ino();
        let _lock = crate::netlock::l3mdev_lock(ino);
        let others: Vec<String> = self
            .netlink(ns)?
            .links()?
            .into_iter()
            .map(Link::from_message)
            .filter(|l| l.kind.as_deref() == Some("vrf") && l.index != vrf)
            .map(|l| l.name)
            .collect();
        if !others.is_empty() {
            self.audit_event(
                "undo",
                &serde_json::json!({"undo": "delete the l3mdev rules",
                    "kept": format!("the namespace's other VRFs need them: {}", others.join(", "))}),
                &crate::audit::Outcome::Ok,
            );
            return Ok(());
        }
        self.netlink(ns)?
            .delete_l3mdev_rules(v4, v6)
            .map_err(|e| CapError::from(&e))
    }
}

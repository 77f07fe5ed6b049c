//! Authority by attachment: who an invocation acts for, what is its own,
//! and what it only shares. Every capability asks this module; none
//! re-derives it. With the policy ([`crate::policy`]), this file is the
//! whole authority model a reviewer needs to read.
//!
//! **Identity** is the host's, never the plugin's: the network is the
//! `name` of the config the runtime gave (a delegate, whatever config its
//! caller hands it, runs under its caller's network, GC valid list,
//! devices and port mappings: [`Ctx::nested_attachment`]); the container
//! ID and ifname are the runtime's environment.
//!
//! **Owned addresses** (S13) are the only ones a plugin may name as its
//! container's in a firewall rule (a DNAT target, a masquerade source, a
//! forward rule): those an IPAM delegate gave the attachment when the
//! host ran it with the runtime's own config in this invocation
//! ([`Ctx::runs_on_runtime_word`]; a host-local result is what it reserved
//! in the network's IPAM state, a static result what the runtime's config
//! says), those the attachment's records hold for this incarnation (same
//! boot, same container namespace: what an earlier plugin of the chain
//! established), and those inside `static-ranges` of the plugin's policy
//! entry (an operator's word). Never a `prevResult`'s alone (the plugins
//! before this one wrote it), nor what the container's namespace holds
//! (the plugin decides that).
//!
//! **Other attachments' addresses** (S13): no host route, host address
//! (nor its connected prefix on the attachment's own links) or container
//! address may cover an address that any network's IPAM state on the node
//! reserves for another attachment ([`Ctx::foreign_reservation_in`]); the
//! node's IPAM state directories are listed under the state root as ADDs
//! open them ([`crate::record::note_store`]).
//!
//! **Links** in the node: a plugin controls the links of its own
//! attachment (its mark, or created in this call), links its grant names
//! (`links`), the one device its network config names by a granted key,
//! and the adopted peer, these three only while no other network or
//! attachment has marked the link; it may use its network's shared links
//! (its network's mark, or an admin bridge `bridges` names that no other network has marked: S14)
//! only in ways that do not disturb the others. `route_localnet` is set
//! only on the attachment's own links or its network's
//! ([`Ctx::localnet_link_ok`]).
//!
//! **The attachment's interface**: in the container namespace a link takes
//! the name `CNI_IFNAME` only if the call made or moved it in
//! ([`Ctx::may_take_ifname`]); the host end of its veth that `adopt-peer`
//! lends is fixed before the plugin runs ([`super::facts`]).
//!
//! **Node settings** by which the node takes routes, addresses or traffic
//! from what a link receives (router advertisements, redirects, source
//! routes) move only the safe way under a plugin, within their range
//! ([`direction_only`]); forwarding is only raised.
//!
//! **Shared objects** (S16) have holders: a link the network shares (its
//! bridge, a gateway pair handed over with `link.share`), an address or
//! setting on one, a node-wide setting, and a namespace's `l3mdev` rules
//! (every VRF there needs them; the kernel adds them with the first VRF
//! only, so the host adds them to a VRF that finds them gone). The undo
//! of a failed ADD, a DEL or a GC takes one back only with its last holder
//! ([`Ctx::kept_for_other_holders`], [`Ctx::release_network_shares`],
//! [`Ctx::delete_l3mdev_rules`]). The records of an earlier boot are
//! reconciled by one ADD at a time, under the state root's lock, so that a
//! reconciler never takes what a new incarnation of the same attachment
//! made meanwhile ([`Ctx::reconcile_boot`]).

use std::net::IpAddr;
use std::path::PathBuf;

use super::bindings::CapError;
use super::bindings::Link;
use super::ctx::{Command, Ctx};
use super::ctx::{Incarnations, Inverse};
use crate::ipam::{NetworkStore, Owner};
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
    /// In the host namespace the plugin controls only links of its own
    /// attachment (marked for it, or created in this call) and links its
    /// grant names (`links`, its config's device, the adopted peer) that
    /// no other network or attachment has marked.
    pub(super) fn check_host_link(&self, kind: Kind, l: &Link) -> Result<(), CapError> {
        if kind == Kind::Host && self.owned(l) && self.another_incarnations(l) {
            return Err(CapError::denied_with(
                format!(
                    "host link {:?} (index {}) belongs to another incarnation of this \
                     attachment (an ADD of it in another container namespace), not to this \
                     {}'s (a wasmcni invariant)",
                    l.name,
                    l.index,
                    self.command_text()
                ),
                l.alias.clone().unwrap_or_default(),
            )
            .about_link(&l.name, l.index));
        }
        // A name the grant matches, the config's device and the adopted
        // peer are the plugin's only while no other network or attachment
        // has marked the link: a pattern (`links: ["cni*"]`) reached
        // another network's bridge, and the adopted peer a renamed pair's
        // other attachment (issue 49).
        if kind == Kind::Container
            || self.owned(l)
            || self.journal.created(kind, l.index)
            || (!self.marked_by_another(l)
                && (self.ns_grant(kind).names_link(&l.name)
                    || self.config_names(kind, l)
                    || self.adopted_peer(kind, l)))
        {
            return Ok(());
        }
        let link = format!("host link {:?} (index {})", l.name, l.index);
        Err(match l.alias.as_deref() {
            Some(a) if a == self.marks.1 => CapError::denied(format!(
                "{link} is shared by the network's attachments: it may only be brought up, \
                 given an address, or have this attachment's links enslaved (a wasmcni \
                 invariant)"
            )),
            Some(a) if a.starts_with(crate::attachment::ATTACHMENT_MARK) => CapError::denied_with(
                format!("{link} belongs to another attachment (a wasmcni invariant)"),
                a,
            ),
            Some(a) if a.starts_with(crate::attachment::NETWORK_MARK) => CapError::denied_with(
                format!("{link} is shared by another network (a wasmcni invariant)"),
                a,
            ),
            _ => {
                let field = self.grant_field(kind, "links");
                CapError::by_policy(
                    &field,
                    format!("{link} was not created by wasmcni and matches none of {field}"),
                )
            }
        }
        .about_link(&l.name, l.index))
    }

    /// Whether `l` is the one node device the network config names, by a
    /// key the grant's `config-links` lists (a `host-device` network's
    /// device; see [`crate::attachment::ConfigDevices::resolve`]), during ADD.
    fn config_names(&self, kind: Kind, l: &Link) -> bool {
        // Taking the device is an ADD's doing: a DEL gives it back, never
        // takes it again.
        let g = self.ns_grant(kind);
        kind == Kind::Host
            && self.command == Some(Command::Add)
            && !g.config_links.is_empty()
            && self.attachment.devices.resolve(&g.config_links).as_deref() == Some(l.name.as_str())
    }

    /// Whether `l` is the host end of the attachment's veth and the grant
    /// adopts it (`adopt-peer`): a plugin chained after a native plugin
    /// that made the pair may change it as if `links` named it. Which
    /// link that is was fixed before the plugin ran, from the kernel at
    /// its ADD and from the record after ([`Ctx::fix_adopted_peer`]).
    fn adopted_peer(&self, kind: Kind, l: &Link) -> bool {
        kind == Kind::Host
            && self.ns_grant(Kind::Host).adopt_peer
            && l.kind.as_deref() == Some("veth")
            && self
                .adopted
                .as_ref()
                .and_then(crate::record::Adopted::peer)
                .is_some_and(|p| p.index == l.index)
    }

    /// In the container namespace, `CNI_IFNAME` names the attachment's
    /// own interface: a link may be renamed to it only if this call
    /// created it or moved it in. A plugin of a second attachment in a
    /// shared pod namespace renamed the first's `eth0` to its own ifname,
    /// and "the peer of `CNI_IFNAME`" (`adopt-peer`), or the interface its
    /// result names, was then the other attachment's (issue 49, breach 1).
    pub(super) fn may_take_ifname(
        &self,
        kind: Kind,
        index: u32,
        name: &str,
    ) -> Result<(), CapError> {
        if kind != Kind::Container || name != self.attachment.ifname {
            return Ok(());
        }
        let moved_in = self
            .journal
            .moved_out_of(Kind::Host)
            .iter()
            .any(|((ns, i), _, _)| *ns == Kind::Container && *i == index);
        if self.journal.created(kind, index) || moved_in {
            return Ok(());
        }
        Err(CapError::denied(format!(
            "container link (index {index}) may not take the name {name:?}, the attachment's \
             CNI_IFNAME: only a link this call created or moved into the container may (a \
             wasmcni invariant)"
        )))
    }

    /// Whether `l` belongs to this attachment: its alias is this
    /// attachment's mark (network, container ID and ifname), not merely
    /// any wasmcni mark.
    pub(super) fn owned(&self, l: &Link) -> bool {
        l.alias.as_deref() == Some(self.marks.0.as_str())
    }

    /// Whether `l` is a host link this attachment's network shares: one
    /// wasmcni made the network's (its network mark: a bridge, or a link
    /// handed to the network with `link.share`), or a bridge the grant
    /// lets it adopt (`bridges`) that really is a bridge (a veth called
    /// `cni0` is not one) and that no other network has marked as its own
    /// (`bridges` names admin bridges: S14).
    pub(super) fn shared(&self, kind: Kind, l: &Link) -> bool {
        kind == Kind::Host
            && (l.alias.as_deref() == Some(self.marks.1.as_str())
                || (l.kind.as_deref() == Some("bridge")
                    && self.ns_grant(kind).names_bridge(&l.name)
                    && !self.marked_by_another(l)))
    }

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
    fn another_incarnations(&self, l: &Link) -> bool {
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

    /// Whether `l` carries the mark of another network or of an
    /// attachment: not an admin bridge, whatever its name.
    pub(super) fn marked_by_another(&self, l: &Link) -> bool {
        l.alias.as_deref().is_some_and(|a| {
            (a.starts_with(crate::attachment::NETWORK_MARK)
                || a.starts_with(crate::attachment::ATTACHMENT_MARK))
                && a != self.marks.0
                && a != self.marks.1
        })
    }

    /// Whether link `index` is a node link of this attachment's network
    /// (its mark: a bridge, made in this call or before, or a gateway
    /// pair), whose connected prefixes are the network's.
    pub(super) fn network_link(&mut self, kind: Kind, index: u32) -> bool {
        kind == Kind::Host
            && self
                .link(kind, index)
                .is_ok_and(|l| l.alias.as_deref() == Some(self.marks.1.as_str()))
    }

    /// Whether `route_localnet` may be set on node link `name` for this
    /// attachment's port maps: the attachment's own link (its mark, or
    /// made in this call) or its network's shared one (a bridge), never
    /// an uplink or another attachment's or network's link.
    pub(super) fn localnet_link_ok(&mut self, index: u32) -> bool {
        let Ok(l) = self.link(Kind::Host, index) else {
            return false;
        };
        self.owned(&l)
            || self.journal.created(Kind::Host, l.index)
            || l.alias.as_deref() == Some(self.marks.1.as_str())
    }

    /// The attachment a nested plugin acts for: a delegate (`member`
    /// false) runs under its caller's network, GC valid list, devices,
    /// VLANs, port mappings and config digest, whatever the config its caller
    /// hands it says (S14); a chain member under the chain's network and
    /// valid list, with the rest from the config the host built for it.
    /// The caller's owned addresses move to it (and back after). Also
    /// answers whether `config` is the runtime's own
    /// ([`Ctx::runs_on_runtime_word`]), from the digest parsed here.
    pub(super) fn nested_attachment(
        &mut self,
        env: &[(String, String)],
        config: &[u8],
        command: Command,
        member: bool,
    ) -> (crate::attachment::Attachment, bool) {
        let mut a = crate::attachment::Attachment::from_invocation(env, config, Some(command));
        let on_runtime_word =
            !a.config_digest.is_empty() && a.config_digest == self.attachment.config_digest;
        a.network = self.attachment.network.clone();
        a.valid = self.attachment.valid.clone();
        a.addresses = std::mem::take(&mut self.attachment.addresses);
        if !member {
            a.devices = self.attachment.devices.clone();
            a.vlans = self.attachment.vlans.clone();
            a.port_mappings = self.attachment.port_mappings.clone();
            a.config_digest = self.attachment.config_digest.clone();
            a.ipam_subnets = self.attachment.ipam_subnets.clone();
        }
        (a, on_runtime_word)
    }

    /// Whether `config`, handed to a delegate, is the config the runtime
    /// gave this invocation (as parsed): then the delegate acts on the
    /// runtime's word, and its ADD result is the attachment's (S13).
    pub(super) fn runs_on_runtime_word(&self, config: &[u8]) -> bool {
        let conf: serde_json::Value = serde_json::from_slice(config).unwrap_or_default();
        let digest = crate::attachment::config_digest(&conf);
        !digest.is_empty() && digest == self.attachment.config_digest
    }

    /// Adds `ips` to the attachment's owned addresses.
    pub(super) fn own_addresses(&mut self, ips: Vec<IpAddr>) {
        for ip in ips {
            if !self.attachment.addresses.contains(&ip) {
                self.attachment.addresses.push(ip);
            }
        }
    }

    /// The attachment's addresses its records hold for this incarnation
    /// (this boot, this container namespace), read once per invocation.
    fn recorded_addresses(&mut self) -> Vec<IpAddr> {
        if let Some(r) = &self.recorded {
            return r.clone();
        }
        let out: Vec<IpAddr> = match self.container_ino() {
            None => Vec::new(),
            Some(ino) => crate::record::of_attachment(
                &crate::record::Location::root_from_env(),
                &self.owner(),
            )
            .into_iter()
            .filter(|r| r.applies_to(ino))
            .flat_map(|r| r.addresses)
            .collect(),
        };
        self.recorded = Some(out.clone());
        out
    }

    /// Every address this attachment owns now (S13): established in this
    /// invocation, or by its records for this incarnation.
    pub fn owned_addresses(&mut self) -> Vec<IpAddr> {
        let mut out = self.attachment.addresses.clone();
        for ip in self.recorded_addresses() {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
        out
    }

    /// Refuses `ip` as the container's address in `what` unless the
    /// attachment owns it ([`Ctx::owned_addresses`]) or the plugin's
    /// `static-ranges` covers it.
    pub(super) fn check_own_address(&mut self, ip: IpAddr, what: &str) -> Result<(), CapError> {
        if self.grant.static_ranges.iter().any(|r| r.contains(&ip))
            || self.owned_addresses().contains(&ip)
        {
            return Ok(());
        }
        Err(CapError::denied(format!(
            "{what}: {ip} is not an address of this attachment: no IPAM plugin gave it to the \
             attachment on the runtime's own config, no record of this incarnation holds it \
             (a prevResult or an address in the container's namespace is no proof), and it \
             lies in none of {} (a wasmcni invariant)",
            self.entry_field("static-ranges")
        )))
    }

    /// The node's IPAM state directories: every one an ADD opened
    /// ([`crate::record::stores`]) and those this invocation opened.
    fn all_stores(&self) -> Vec<PathBuf> {
        let mut out = self
            .node_stores
            .get_or_init(|| crate::record::stores(&crate::record::Location::root_from_env()))
            .clone();
        for s in &self.stores {
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        out
    }

    /// Lists `dir` (a store this ADD opened) among the node's IPAM state
    /// directories, so that every later check of every network sees its
    /// reservations. Refused if it cannot be: a reservation out of the
    /// checks' sight would be out of their protection.
    pub(super) fn note_store(&mut self, dir: &std::path::Path) -> Result<(), CapError> {
        if self.command != Some(Command::Add) {
            return Ok(());
        }
        let root = crate::record::Location::root_from_env();
        crate::record::note_store(&root, dir).map_err(|e| {
            self.note_host_error(format!(
                "listing IPAM state {} under the state root {}: {e}",
                dir.display(),
                root.display()
            ));
            CapError::from(e)
        })
    }

    /// An address inside `net` that some network's IPAM state on the node
    /// reserves for another attachment (not this one): what no host route,
    /// host address or container address may cover (S13). With
    /// `own_network_too` false, the reservations of this attachment's own
    /// network are left out (its bridge's gateway prefix covers them by
    /// design).
    pub(super) fn foreign_reservation_in(
        &self,
        net: ipnet::IpNet,
        own_network_too: bool,
    ) -> Result<Option<(IpAddr, Owner)>, CapError> {
        let me = self.attachment.owner();
        let own = crate::state_fs::component(&self.attachment.network);
        for dir in self.all_stores() {
            if !own_network_too && dir.file_name().is_some_and(|f| *f == *own.as_str()) {
                continue;
            }
            let s = match NetworkStore::read_only(&dir) {
                Ok(s) => s,
                // A network whose state is gone holds nothing.
                Err(crate::ipam::StoreError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    continue
                }
                Err(_) => continue,
            };
            // One address: one file to read, not the whole directory (a
            // network with a thousand attachments lists a thousand).
            let list = if net.prefix_len() == net.max_prefix_len() {
                match s.holder(net.addr()) {
                    Ok(h) => h.map(|h| vec![(net.addr(), h)]).unwrap_or_default(),
                    Err(_) => continue,
                }
            } else {
                match s.list_within(Some(net)) {
                    Ok(l) => l,
                    Err(_) => continue,
                }
            };
            for (ip, holder) in list {
                if !me.holds(&holder) {
                    return Ok(Some((ip, holder)));
                }
            }
        }
        Ok(None)
    }

    /// Refuses a container address that the node itself holds (a
    /// bridge's gateway, an uplink's address: any address of a link in
    /// wasmcni's own namespace but loopback's, as its local route says),
    /// whatever the grant, unless
    /// an IPAM store reserved it for this attachment. A container that took
    /// its network's gateway address and announced it would have the other
    /// containers' off-subnet traffic (issue 49, breach 2); the
    /// owned-address rule ([`Ctx::check_not_foreign_address`]) covers only
    /// reservations.
    pub(super) fn check_not_node_address(&mut self, ip: IpAddr) -> Result<(), CapError> {
        if ip.is_loopback() {
            return Ok(());
        }
        self.open_host()?;
        // One lookup, not a dump of the node's addresses: an ADD's cost
        // does not grow with the node (tests/scale.rs).
        let Some(index) = self.netlink(Kind::Host)?.local_holder(ip)? else {
            return Ok(());
        };
        if self.reserved_for_me(ip)? {
            return Ok(());
        }
        let link = self
            .link(Kind::Host, index)
            .map(|l| l.name)
            .unwrap_or_else(|_| format!("link {index}"));
        Err(CapError::denied(format!(
            "container address {ip} is the node's own (on {link} in wasmcni's namespace) and no \
             IPAM store reserved it for this attachment: a container with it would take \
             the node's traffic (a wasmcni invariant)"
        )))
    }

    /// Whether an IPAM store of any network holds `ip` for this attachment.
    fn reserved_for_me(&self, ip: IpAddr) -> Result<bool, CapError> {
        let me = self.attachment.owner();
        for dir in self.all_stores() {
            let Ok(s) = NetworkStore::read_only(&dir) else {
                continue;
            };
            if let Ok(Some(holder)) = s.holder(ip) {
                if me.holds(&holder) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Refuses a reservation of `ip` outside the subnets the runtime's
    /// config names for the network's IPAM ([`Attachment::ipam_subnets`]),
    /// where it names any: a plugin that hands its IPAM delegate a config
    /// of its own, or calls the store itself, cannot reserve in its
    /// network's state an address of another network's subnet, which
    /// that network's ADDs would then meet as another attachment's
    /// forever (issue 49, breach 4).
    ///
    /// [`Attachment::ipam_subnets`]: crate::attachment::Attachment::ipam_subnets
    pub(super) fn check_in_network_subnets(&self, ip: IpAddr) -> Result<(), CapError> {
        let subnets = &self.attachment.ipam_subnets;
        if subnets.is_empty() || subnets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        let names: Vec<String> = subnets.iter().map(ToString::to_string).collect();
        Err(CapError::denied(format!(
            "address {ip} lies outside the subnets the runtime's config names for network \
             {:?}'s IPAM ({}): not the network's to reserve (a wasmcni invariant)",
            self.attachment.network,
            names.join(", ")
        )))
    }

    /// Refuses a container or host address `ip/len` that covers another
    /// attachment's reservation: the address itself, and on a node link of
    /// the attachment's own (`own_link`) the whole connected prefix.
    pub(super) fn check_not_foreign_address(
        &mut self,
        kind: Kind,
        ip: IpAddr,
        len: u8,
        own_link: bool,
    ) -> Result<(), CapError> {
        let mut checks = vec![(ipnet::IpNet::from(ip), true)];
        if kind == Kind::Host {
            if let Ok(p) = ipnet::IpNet::new(ip, len) {
                // On the network's bridge the prefix is its containers'.
                checks.push((p.trunc(), own_link));
            }
        }
        for (net, own_network_too) in checks {
            if let Some((other, holder)) = self.foreign_reservation_in(net, own_network_too)? {
                let place = if kind == Kind::Host {
                    "host"
                } else {
                    "container"
                };
                return Err(CapError::denied_with(
                    format!(
                        "{place} address {ip}/{len} covers {other}, reserved for another \
                         attachment in a network's IPAM state (a wasmcni invariant)"
                    ),
                    format!("{other}: {} {}", holder.container_id, holder.ifname),
                ));
            }
        }
        Ok(())
    }
}

impl Ctx {
    /// The link, if the plugin may change it: `modify` in its namespace,
    /// and in the host's, one it controls ([`Ctx::check_host_link`]).
    pub(super) fn modifiable(&mut self, kind: Kind, index: u32) -> Result<Link, CapError> {
        self.require(kind, |g| g.modify, "modify")?;
        let l = self.link(kind, index)?;
        self.check_host_link(kind, &l)?;
        Ok(l)
    }

    /// The link, if the plugin may change it, or (when `shared_ok`) use it
    /// as a link its network shares ([`Ctx::shared`]).
    pub(super) fn modifiable_or_shared(
        &mut self,
        kind: Kind,
        index: u32,
        shared_ok: bool,
    ) -> Result<Link, CapError> {
        self.require(kind, |g| g.modify, "modify")?;
        let l = self.link(kind, index)?;
        if shared_ok && self.shared(kind, &l) {
            return Ok(l);
        }
        self.check_host_link(kind, &l)?;
        Ok(l)
    }
}

/// Which way a node setting may move under a plugin ([`direction_only`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Each larger value takes more from what a link receives: lowered
    /// only.
    Lower,
    /// Each smaller value does (or stops the node routing): raised only.
    Raise,
}

/// The node's settings by which it takes routes, addresses or traffic
/// from what a link receives (router advertisements: a default route,
/// prefixes and their on-link routes, route information; redirects;
/// source routes; packets from its own addresses), with the range of
/// values the kernel gives a meaning and the way a plugin may move them:
/// `net.<proto>.conf.<link, all or default>.<name>`, and `ip_forward`.
/// `forwarding` is raised only: off, the kernel honours `accept_ra` 1
/// (every new link's default) and IPv6 redirects, and the node stops
/// routing every network's pods.
const SETTINGS: &[(&str, &str, Way, i64, i64)] = &[
    ("ipv6", "accept_ra", Way::Lower, 0, 2),
    ("ipv6", "accept_ra_defrtr", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_pinfo", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_rtr_pref", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_rt_info_max_plen", Way::Lower, 0, 128),
    ("ipv6", "accept_ra_from_local", Way::Lower, 0, 1),
    ("ipv6", "autoconf", Way::Lower, 0, 1),
    ("ipv6", "accept_redirects", Way::Lower, 0, 1),
    ("ipv6", "accept_source_route", Way::Lower, -1, 1),
    ("ipv6", "seg6_enabled", Way::Lower, 0, 1),
    ("ipv4", "accept_redirects", Way::Lower, 0, 1),
    ("ipv4", "secure_redirects", Way::Lower, 0, 1),
    ("ipv4", "shared_media", Way::Lower, 0, 1),
    ("ipv4", "accept_source_route", Way::Lower, 0, 1),
    ("ipv4", "accept_local", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_rt_info_min_plen", Way::Raise, 0, 128),
    ("ipv6", "accept_ra_min_lft", Way::Raise, 0, u32::MAX as i64),
    ("ipv6", "ra_defrtr_metric", Way::Raise, 1, u32::MAX as i64),
    ("ipv6", "forwarding", Way::Raise, 0, 1),
    ("ipv6", "force_forwarding", Way::Raise, 0, 1),
    ("ipv4", "forwarding", Way::Raise, 0, 1),
];

/// In the node namespace a plugin may move a setting of [`SETTINGS`] only
/// its way, and only to a value in its range: `accept_ra` at 2 (or -1,
/// which the kernel reads as on) on its own host veth let its container
/// send router advertisements that put the node's default route, or
/// another network's subnet, through that veth (issue 49, breach 5's
/// route checks never see a route the kernel adds); `forwarding` at 0
/// did the same with `accept_ra` 1. The reference plugins set `accept_ra`
/// to 0 on their host links and raise `forwarding`; nothing they do goes
/// the other way. `old` reads the key's value now (only for such a key).
pub(super) fn direction_only(
    kind: Kind,
    key: &str,
    old: impl FnOnce() -> Result<String, CapError>,
    value: &str,
) -> Result<(), CapError> {
    let parts: Vec<&str> = key.split('.').collect();
    let setting = match parts.as_slice() {
        ["net", proto, "conf", _, name] => SETTINGS
            .iter()
            .find(|(p, n, ..)| p == proto && n == name)
            .map(|&(_, _, way, min, max)| (way, min, max)),
        ["net", "ipv4", "ip_forward"] => Some((Way::Raise, 0, 1)),
        _ => None,
    };
    let Some((way, min, max)) = setting.filter(|_| kind == Kind::Host) else {
        return Ok(());
    };
    let old = old()?;
    let in_range = |v: &str| {
        v.trim()
            .parse::<i64>()
            .ok()
            .filter(|v| (min..=max).contains(v))
    };
    let ok = match (way, in_range(value)) {
        (_, None) => false,
        // A value out of range reads as the most the setting takes.
        (Way::Lower, Some(new)) => new <= in_range(&old).unwrap_or(max),
        (Way::Raise, Some(new)) => new >= in_range(&old).unwrap_or(min),
    };
    if ok {
        return Ok(());
    }
    let (verb, range) = match way {
        Way::Lower => ("lower", format!("{min}..{max}")),
        Way::Raise => ("raise", format!("{min}..{max}")),
    };
    Err(CapError::denied(format!(
        "host sysctl {key}: {} -> {value} would let the node take routes, addresses or \
         traffic from what a link receives (router advertisements, redirects), or stop it \
         routing: a plugin may only {verb} it, within {range} (a wasmcni invariant)",
        old.trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_taking_host_settings_move_only_their_way() {
        let ok =
            |kind, key, old: &str, new| direction_only(kind, key, || Ok(old.into()), new).is_ok();
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "1", "0"));
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "0"));
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "1", "2"));
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "1"));
        // -1 is on to the kernel; so is an old value out of range.
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "-1"));
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "-1", "0"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.all.accept_redirects",
            "0",
            "1"
        ));
        assert!(!ok(Kind::Host, "net.ipv6.conf.default.autoconf", "0", "1"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.accept_ra_rt_info_max_plen",
            "0",
            "128"
        ));
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "yes"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.accept_source_route",
            "-1",
            "0"
        ));
        assert!(!ok(
            Kind::Host,
            "net.ipv4.conf.veth1.accept_local",
            "0",
            "1"
        ));
        // Raised only: forwarding (and ip_forward), the RA default
        // route's metric, the shortest route information taken.
        assert!(ok(Kind::Host, "net.ipv6.conf.all.forwarding", "0", "1"));
        assert!(!ok(Kind::Host, "net.ipv6.conf.all.forwarding", "1", "0"));
        assert!(ok(Kind::Host, "net.ipv4.ip_forward", "0", "1"));
        assert!(!ok(Kind::Host, "net.ipv4.ip_forward", "1", "0"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.ra_defrtr_metric",
            "1024",
            "1"
        ));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.accept_ra_rt_info_min_plen",
            "48",
            "0"
        ));
        // Not such a setting, or the container's own.
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.mtu", "1500", "9000"));
        assert!(ok(
            Kind::Host,
            "net.ipv4.conf.veth1.route_localnet",
            "0",
            "1"
        ));
        assert!(ok(
            Kind::Container,
            "net.ipv6.conf.eth0.accept_ra",
            "0",
            "2"
        ));
        assert!(ok(Kind::Container, "net.ipv4.ip_forward", "1", "0"));
    }
}

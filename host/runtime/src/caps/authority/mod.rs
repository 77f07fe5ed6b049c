//! Authority by attachment: who an invocation acts for, what is its own,
//! and what it only shares. Every refusal a host function can give is
//! decided here, and only here: a [`CapError`] refusal can be made by no
//! other module (its constructors are private to this one), so `grep` for
//! `denied(` or `by_policy(` finds every decision in this directory. With
//! the policy's grant types ([`crate::policy`]), it is the whole authority
//! model a reviewer needs to read.
//!
//! **Facts first, then one decision.** The interface modules (`link`,
//! `route`, `address`, ...) look up what a decision needs (a link, the
//! routes in the way, another attachment's reservation, the attachment's
//! records: [`super::facts`]), ask a function here, then make one kernel
//! call. A decision is a function of the grant, who the invocation acts
//! for ([`View`]) and those facts: it holds no socket, reads no
//! environment, file or config, and its tests need no kernel. One file per
//! interface: [`link`], [`route`], [`address`], [`sysctl`], [`firewall`],
//! [`traffic`], [`store`] (IPAM store and plugin state), [`delegate`] and
//! [`call`] (what every call needs: its command, the namespace's rights).
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

use super::bindings::{CapError, Denial, Link};
use super::row::Right;
use crate::attachment::Attachment;
use crate::netns::Kind;
use crate::policy::{Grant, NsGrant};
use crate::record::Adopted;
use cni_spec::Command;

pub(super) mod address;
pub(super) mod call;
pub(super) mod decided;
pub(super) mod delegate;
pub(super) mod dhcp;
pub(super) mod firewall;
pub(super) mod link;
pub(super) mod route;
pub(super) mod store;
pub(super) mod sysctl;
pub(super) mod traffic;

/// What a decision may read of the invocation: the plugin's grant and who
/// it acts for, as the host fixed them ([`super::facts`]). Borrowed from
/// the context; it holds no socket.
pub(super) struct View<'a> {
    /// The plugin's grant (its policy entry, resolved).
    pub grant: &'a Grant,
    /// The plugin's name: refusals name its policy fields.
    pub plugin: &'a str,
    /// The attachment it acts for (network, container, ifname, what its
    /// config names: devices, VLANs, IPAM subnets).
    pub attachment: &'a Attachment,
    /// `attachment.mark()` and `attachment.network_mark()`.
    pub marks: &'a (String, String),
    /// The command (none: a `CNI_COMMAND` wasmcni does not know).
    pub command: Option<Command>,
    /// The command as the runtime named it, for messages.
    pub command_text: &'a str,
    /// The host end of the attachment's veth, fixed before the plugin ran.
    pub adopted: Option<&'a Adopted>,
    /// During ADD, the node device the network config names by a key the
    /// grant's `config-links` lists, as sysfs said when first asked.
    pub config_device: Option<&'a str>,
}

/// A namespace's grant (the host's: nothing, if the entry has none).
pub(super) fn ns_grant(grant: &Grant, kind: Kind) -> &NsGrant {
    static NOTHING: std::sync::OnceLock<NsGrant> = std::sync::OnceLock::new();
    match kind {
        Kind::Container => &grant.container,
        Kind::Host => grant
            .host
            .as_ref()
            .unwrap_or_else(|| NOTHING.get_or_init(NsGrant::default)),
    }
}

impl View<'_> {
    /// The grant of namespace `kind`.
    pub fn ns_grant(&self, kind: Kind) -> &NsGrant {
        ns_grant(self.grant, kind)
    }

    /// The policy field path of a namespace grant's `field`:
    /// `plugins.NAME.host.links`.
    pub fn grant_field(&self, kind: Kind, field: &str) -> String {
        format!("plugins.{}.{}.{field}", self.plugin, kind.name())
    }

    /// The policy field path of the entry's `field`: `plugins.NAME.ipam-roots`.
    pub fn entry_field(&self, field: &str) -> String {
        format!("plugins.{}.{field}", self.plugin)
    }

    /// Refuses unless namespace right `right` holds, naming its field of
    /// the namespace grant that would allow it.
    pub fn require(&self, kind: Kind, right: Right) -> Result<(), CapError> {
        if right.granted_by(self.ns_grant(kind)) {
            return Ok(());
        }
        let field = self.grant_field(kind, right.field());
        Err(CapError::by_policy(&field, format!("{field} is false")))
    }

    /// Whether `l` belongs to this attachment: its alias is this
    /// attachment's mark (network, container ID and ifname), not merely
    /// any wasmcni mark.
    pub fn owned(&self, l: &Link) -> bool {
        l.alias.as_deref() == Some(self.marks.0.as_str())
    }

    /// Whether `l` carries the mark of another network or of an
    /// attachment: not an admin bridge, whatever its name.
    pub fn marked_by_another(&self, l: &Link) -> bool {
        l.alias.as_deref().is_some_and(|a| {
            (a.starts_with(crate::attachment::NETWORK_MARK)
                || a.starts_with(crate::attachment::ATTACHMENT_MARK))
                && a != self.marks.0
                && a != self.marks.1
        })
    }

    /// Whether `l` carries this attachment's network's mark (its bridge,
    /// a gateway pair handed over with `link.share`).
    pub fn network_marked(&self, l: &Link) -> bool {
        l.alias.as_deref() == Some(self.marks.1.as_str())
    }

    /// Whether `l` is a host link this attachment's network shares: one
    /// wasmcni made the network's (its network mark: a bridge, or a link
    /// handed to the network with `link.share`), or a bridge the grant
    /// lets it adopt (`bridges`) that really is a bridge (a veth called
    /// `cni0` is not one) and that no other network has marked as its own
    /// (`bridges` names admin bridges: S14).
    pub fn shared(&self, kind: Kind, l: &Link) -> bool {
        kind == Kind::Host
            && (self.network_marked(l)
                || (l.kind.as_deref() == Some("bridge")
                    && self.ns_grant(kind).names_bridge(&l.name)
                    && !self.marked_by_another(l)))
    }
}

impl CapError {
    /// A wasmcni invariant's refusal (no policy entry would allow the
    /// call), whose whole reason may reach the runtime.
    fn denied(reason: impl Into<String>) -> CapError {
        CapError::Denied(Denial::new(
            reason.into(),
            crate::audit::Refusal::default(),
            decided::Decided(()),
        ))
    }

    /// A wasmcni invariant's refusal with more for the audit log than for
    /// the runtime.
    fn denied_with(reason: impl Into<String>, audit_only: impl Into<String>) -> CapError {
        CapError::denied(reason).audit_only(audit_only)
    }

    /// The policy's refusal: `grant` (`plugins.NAME.host.links`) would
    /// allow the call; `reason` says so in words.
    fn by_policy(grant: &str, reason: impl Into<String>) -> CapError {
        CapError::Denied(Denial::new(
            reason.into(),
            crate::audit::Refusal {
                refused_by: crate::audit::RefusedBy::Policy,
                grant: Some(grant.to_owned()),
                link: None,
            },
            decided::Decided(()),
        ))
    }
}

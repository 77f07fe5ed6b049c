//! Links: which node links a plugin controls, uses or only shares; the
//! names links take; what a change of one link does to another (a lower
//! device, a master's queue); what links it may make, delete and hand over.

use super::View;
use crate::caps::bindings::{CapError, Link};
use crate::netns::Kind;
use crate::policy::{LinkKind, DEFAULT_HOST_NAMES};
use cni_spec::Command;

/// What the kernel and the records say of a link, for [`View::host_link`].
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::caps) struct LinkFacts {
    /// This call created it.
    pub created: bool,
    /// A DEL's: the attachment's records name it as another incarnation's
    /// only (a late DEL may not touch the live incarnation's links).
    pub another_incarnation: bool,
}

impl View<'_> {
    /// In the host namespace the plugin controls only links of its own
    /// attachment (marked for it, or created in this call) and links its
    /// grant names (`links`, its config's device, the adopted peer) that
    /// no other network or attachment has marked.
    pub fn host_link(&self, kind: Kind, l: &Link, facts: LinkFacts) -> Result<(), CapError> {
        if kind == Kind::Host && self.owned(l) && facts.another_incarnation {
            return Err(CapError::denied_with(
                format!(
                    "host link {:?} (index {}) belongs to another incarnation of this \
                     attachment (an ADD of it in another container namespace), not to this \
                     {}'s (a wasmcni invariant)",
                    l.name, l.index, self.command_text
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
            || facts.created
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
    /// device), during ADD: taking the device is an ADD's doing, a DEL
    /// gives it back, never takes it again ([`View::config_device`]).
    fn config_names(&self, kind: Kind, l: &Link) -> bool {
        kind == Kind::Host
            && self.command == Some(Command::Add)
            && self.config_device == Some(l.name.as_str())
    }

    /// Whether `l` is the host end of the attachment's veth and the grant
    /// adopts it (`adopt-peer`): a plugin chained after a native plugin
    /// that made the pair may change it as if `links` named it. Which
    /// link that is was fixed before the plugin ran, from the kernel at
    /// its ADD and from the record after (`Ctx::fix_adopted_peer`).
    fn adopted_peer(&self, kind: Kind, l: &Link) -> bool {
        kind == Kind::Host
            && self.ns_grant(Kind::Host).adopt_peer
            && l.kind.as_deref() == Some("veth")
            && self
                .adopted
                .and_then(crate::record::Adopted::peer)
                .is_some_and(|p| p.index == l.index)
    }

    /// In the container namespace, `CNI_IFNAME` names the attachment's
    /// own interface: a link may be renamed to it only if this call
    /// created it or moved it in (`made_here`). A plugin of a second
    /// attachment in a shared pod namespace renamed the first's `eth0` to
    /// its own ifname, and "the peer of `CNI_IFNAME`" (`adopt-peer`), or
    /// the interface its result names, was then the other attachment's
    /// (issue 49, breach 1).
    pub fn may_take_ifname(
        &self,
        kind: Kind,
        index: u32,
        name: &str,
        made_here: bool,
    ) -> Result<(), CapError> {
        if kind != Kind::Container || name != self.attachment.ifname || made_here {
            return Ok(());
        }
        Err(CapError::denied(format!(
            "container link (index {index}) may not take the name {name:?}, the attachment's \
             CNI_IFNAME: only a link this call created or moved into the container may (a \
             wasmcni invariant)"
        )))
    }

    /// A link the plugin makes, moves or renames in the host namespace
    /// must take a name its grant allows (`names`), so it cannot squat a
    /// name the node or another tool needs.
    pub fn new_name(&self, kind: Kind, name: &str) -> Result<(), CapError> {
        let g = self.ns_grant(kind);
        if kind != Kind::Host || g.may_name(name) {
            return Ok(());
        }
        let field = self.grant_field(kind, "names");
        Err(match &g.names {
            Some(_) => CapError::by_policy(
                &field,
                format!("host link name {name:?} matches none of {field}"),
            )
            .audit_only(g.names_in_effect()),
            None => CapError::by_policy(
                &field,
                format!(
                    "host link name {name:?} matches none of {field} (absent: the default {})",
                    DEFAULT_HOST_NAMES.join(", ")
                ),
            ),
        })
    }

    /// Refuses unless the namespace grant's `create` lists `what`.
    pub fn create(&self, kind: Kind, what: LinkKind) -> Result<(), CapError> {
        if self.ns_grant(kind).may_create(what) {
            return Ok(());
        }
        let field = self.grant_field(kind, "create");
        Err(CapError::by_policy(
            &field,
            format!("{field} does not list {:?}", what.name()),
        ))
    }

    /// Refuses to make `n` more links past the grant's `max-links`: the
    /// links this invocation created and still keeps (`kept`: both
    /// namespaces, a veth pair being two) and these may not be more.
    pub fn room(&self, kept: usize, n: usize) -> Result<(), CapError> {
        let max = self.grant.max_links as usize;
        if kept + n <= max {
            return Ok(());
        }
        let field = self.entry_field("max-links");
        Err(CapError::by_policy(
            &field,
            format!(
                "{field} is {max}: the plugin keeps {kept} link(s) it created in this \
                 invocation, and this call would make {n} more"
            ),
        ))
    }

    /// Only an ADD hands a link to its network, and only a host link it
    /// created (`created`): a DEL's would be left behind, undeletable.
    pub fn share(&self, kind: Kind, index: u32, created: bool) -> Result<(), CapError> {
        if self.command != Some(Command::Add) {
            return Err(CapError::denied(
                "only an ADD hands links to its network (a wasmcni invariant)",
            ));
        }
        if kind != Kind::Host || !created {
            return Err(CapError::denied(format!(
                "link {index} was not created in the host namespace by this call: \
                     only such a link can be handed to the network (a wasmcni invariant)"
            )));
        }
        Ok(())
    }

    /// During ADD a plugin deletes only links it created in the call
    /// (`created`): the deletion could not be undone.
    pub fn remove_during_add(&self, created: bool) -> Result<(), CapError> {
        if self.command == Some(Command::Add) && !created {
            return Err(CapError::denied(
                "during ADD a plugin may delete only links it created in the same call, \
                     as the deletion could not be undone (a wasmcni invariant)",
            ));
        }
        Ok(())
    }
}

/// A container link taken from the host namespace (`held`) goes back
/// there, never away.
pub(in crate::caps) fn remove_held(kind: Kind, index: u32, held: bool) -> Result<(), CapError> {
    if kind == Kind::Container && held {
        return Err(CapError::denied(format!(
            "link {index} was taken from the host namespace: it goes back there \
                 (link.move-to), never away (a wasmcni invariant)"
        )));
    }
    Ok(())
}

/// A link taken from the host namespace as `recorded` goes back under that
/// name (`asked`: the name the plugin asked for, if any).
pub(in crate::caps) fn return_name(
    index: u32,
    recorded: &str,
    asked: Option<&str>,
) -> Result<(), CapError> {
    if asked.is_some_and(|n| n != recorded) {
        return Err(CapError::denied(format!(
            "link {index} was taken from the host namespace as {recorded:?} and goes back under \
             that name (a wasmcni invariant)"
        )));
    }
    Ok(())
}

/// Where a link's lower device is, for [`lower_device`].
pub(in crate::caps) enum Lower<'a> {
    /// In the container's namespace: the plugin's.
    Container,
    /// Node link `name`, which the plugin controls (`controlled`: as
    /// [`View::host_link`] says) or may only use as a master.
    Host { name: &'a str, controlled: bool },
    /// In a namespace the plugin was not given.
    Elsewhere,
}

/// `what` (a change) of link `index` would change its lower device
/// (promiscuity, allmulti, a passthru macvlan's address and state): only
/// one the plugin may change.
pub(in crate::caps) fn lower_device(what: &str, index: u32, lower: Lower) -> Result<(), CapError> {
    match lower {
        Lower::Container
        | Lower::Host {
            controlled: true, ..
        } => Ok(()),
        Lower::Host { name, .. } => Err(CapError::denied(format!(
            "{what} of link {index} would change its lower device, host link {name:?}, \
             which the plugin may only use as a master (a wasmcni invariant)"
        ))),
        Lower::Elsewhere => Err(CapError::denied(format!(
            "{what} of link {index} would change its lower device, which is in a \
             namespace the plugin was not given (a wasmcni invariant)"
        ))),
    }
}

/// On a bridge the network shares (one the plugin does not control:
/// `controlled` false) the hardware address may only be pinned to its
/// current value (as the reference bridge does), changing nothing else.
pub(in crate::caps) fn shared_bridge_mac(
    l: &Link,
    controlled: bool,
    mac: &[u8],
) -> Result<(), CapError> {
    if controlled || l.mac == mac {
        return Ok(());
    }
    Err(CapError::denied(format!(
        "host bridge {:?} is shared by the network's attachments: its address \
             may only be pinned to its current value (a wasmcni invariant)",
        l.name
    )))
}

/// In the host namespace the alias is wasmcni's ownership mark.
pub(in crate::caps) fn alias(kind: Kind) -> Result<(), CapError> {
    if kind == Kind::Host {
        return Err(CapError::denied(
            "in the host namespace the alias is wasmcni's ownership mark (a wasmcni \
                 invariant)",
        ));
    }
    Ok(())
}

impl View<'_> {
    /// A port joins only VLANs the network config names (`vlan`,
    /// `vlanTrunk`), and only with `config-vlans`: `new` lists the VLANs
    /// port `index` would join.
    pub fn port_vlans(
        &self,
        kind: Kind,
        index: u32,
        new: &mut dyn Iterator<Item = u16>,
    ) -> Result<(), CapError> {
        let Some(first) = new.next() else {
            return Ok(());
        };
        let field = self.grant_field(kind, "config-vlans");
        if !self.ns_grant(kind).config_vlans {
            return Err(CapError::by_policy(
                &field,
                format!(
                    "port {index} is not in VLAN {first}, and {field} is false: it may join no \
                     VLAN"
                ),
            ));
        }
        let named = &self.attachment.vlans;
        match std::iter::once(first)
            .chain(new)
            .find(|vid| !named.names(*vid))
        {
            None => Ok(()),
            Some(vid) => Err(CapError::denied_with(
                format!(
                    "port {index} is not in VLAN {vid}, which the network config does not \
                     name (`vlan`, `vlanTrunk`): {field} admits only those"
                ),
                format!("the config names {}", named.describe()),
            )),
        }
    }

    /// A master for a macvlan / ipvlan / vlan: any link of the container's
    /// namespace; in the host's, a `masters` pattern, or one the plugin
    /// owns, or a `links` pattern's that no other network or attachment
    /// has marked (as in [`View::host_link`]). It is never changed.
    pub fn master(&self, kind: Kind, l: &Link) -> Result<(), CapError> {
        if kind != Kind::Host {
            return Ok(());
        }
        let g = self.ns_grant(kind);
        let by_links = g.names_link(&l.name) && !self.marked_by_another(l);
        if g.names_master(&l.name) || self.owned(l) || by_links {
            return Ok(());
        }
        let field = self.grant_field(kind, "masters");
        Err(CapError::by_policy(
            &field,
            format!(
                "host link {:?} matches none of {field} (nor of {})",
                l.name,
                self.grant_field(kind, "links")
            ),
        )
        .about_link(&l.name, l.index))
    }
}

/// A passthru macvlan mirrors its MAC and promiscuity onto its master:
/// only on a master the plugin controls (`controlled`).
pub(in crate::caps) fn passthru_master(name: &str, controlled: bool) -> Result<(), CapError> {
    if controlled {
        return Ok(());
    }
    Err(CapError::denied(format!(
        "a passthru macvlan changes its master; host link {name:?} may only be \
             used as a master (a wasmcni invariant)"
    )))
}

/// The kernel queues for every macvlan of a master as many broadcast
/// frames as the largest of their requests (the default, `default`, is
/// 1000): a larger one (`n`) raises the queue of every other network's
/// macvlans there, and the master's. Up to the default it changes
/// nobody's; over it, only on a master the plugin controls.
pub(in crate::caps) fn broadcast_queue(
    name: &str,
    n: u32,
    default: u32,
    controlled: bool,
) -> Result<(), CapError> {
    if n <= default || controlled {
        return Ok(());
    }
    Err(CapError::denied(format!(
        "a broadcast queue length of {n} (over the kernel's default, \
         {default}) raises the queue every macvlan on host \
         link {name:?} shares; it may only be used as a master (a wasmcni \
         invariant; grant `links` on it to allow)"
    )))
}

impl View<'_> {
    /// Whether `route_localnet` may be set on node link `l` for this
    /// attachment's port maps: the attachment's own link (its mark, or
    /// made in this call: `created`) or its network's shared one (a
    /// bridge), never an uplink or another attachment's or network's link.
    pub fn localnet_link(&self, l: &Link, created: bool) -> bool {
        self.owned(l) || created || self.network_marked(l)
    }
}

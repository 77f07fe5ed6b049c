//! Facts fixed before the plugin runs, for [`super::authority`] to decide
//! on: what no call the plugin makes can change afterwards.
//!
//! **The adopted peer** (`adopt-peer`): the host end of the attachment's
//! veth. Asked of the kernel when the plugin's ADD starts (the peer of
//! `CNI_IFNAME` in `CNI_NETNS`, whose `IFLA_LINK_NETNSID` is the node's),
//! kept in the attachment's record, and read back from it by every later
//! call of the same incarnation (CHECK, DEL, an ADD again). Asked lazily
//! instead, "the peer of `CNI_IFNAME`" was whatever the plugin had named
//! so by then: a plugin of a second attachment in a shared pod namespace
//! renamed the first's `eth0` to its own ifname and adopted the first's
//! host veth (issue 49, breach 1), and an ADD that left the names swapped
//! handed its DEL the same. (Nor may a plugin give a container link the
//! attachment's `CNI_IFNAME` unless its call made or moved in that link:
//! [`Ctx::may_take_ifname`]. Fixing the peer covers names changed by
//! anything else between the ADD and a later call.)

use std::os::fd::AsFd;

use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo};

use super::ctx::{Command, Ctx};
use crate::netns::Kind;
use crate::record::{Adopted, AdoptedPeer, Location};

impl Ctx {
    /// Fixes the adopted peer for this invocation, once, before its
    /// plugin runs, if its grant has `adopt-peer` (a delegate or chain
    /// member inherits its caller's peer, and its caller the peer it
    /// found: [`Ctx::merge_adopted`]).
    pub(crate) fn fix_adopted_peer(&mut self) {
        // Fixed once: "nothing" too, for the rest of the invocation.
        if self.adopted.is_some() || !self.ns_grant(Kind::Host).adopt_peer {
            return;
        }
        // The host's own use: the plugin may not have opened it.
        if self.open_host().is_err() {
            self.adopted = Some(Adopted::Nothing);
            return;
        }
        self.adopted = Some(self.find_adopted_peer());
    }

    /// Takes `other` (a delegate's finding) if this context has none: what
    /// an invocation fixed, a peer or nothing, no later finding changes.
    pub(super) fn merge_adopted(&mut self, other: Option<Adopted>) {
        if self.adopted.is_none() {
            self.adopted = other;
        }
    }

    /// The peer, as this incarnation's record says (the ADD that made it
    /// found it so) or, where no record of this plugin's ADD says, as the
    /// kernel says now.
    fn find_adopted_peer(&mut self) -> Adopted {
        let Some(ino) = self.container_ino() else {
            return Adopted::Nothing;
        };
        let record = if Location::untrusted_root().is_none() {
            self.record_location().load().ok().flatten()
        } else {
            None
        };
        match record {
            Some(r) if r.applies_to(ino) => match r.adopted {
                // The one the ADD adopted, if it is still that link.
                Some(Adopted::Peer(p)) => {
                    return if self.is_host_veth(&p) {
                        Adopted::Peer(p)
                    } else {
                        Adopted::Nothing
                    };
                }
                // The ADD found none: nor does any later call.
                Some(Adopted::Nothing) if self.command != Some(Command::Add) => {
                    return Adopted::Nothing
                }
                // An older wasmcni's record, or an ADD again that found
                // none before: as the kernel says now.
                _ => {}
            },
            // Another incarnation's record: a late call adopts nothing
            // (its pair went with its namespace, or is the live one's).
            Some(_) if self.command != Some(Command::Add) => return Adopted::Nothing,
            // No record (a failed ADD's was dropped after its undo put
            // the names back), or an ADD in a new namespace.
            _ => {}
        }
        self.kernel_peer().map_or(Adopted::Nothing, Adopted::Peer)
    }

    /// Whether node link `p.index` is still the veth called `p.name`.
    fn is_host_veth(&mut self, p: &AdoptedPeer) -> bool {
        self.link(Kind::Host, p.index)
            .is_ok_and(|l| l.name == p.name && l.kind.as_deref() == Some("veth"))
    }

    /// The node link that is the other end of the link `CNI_IFNAME` in
    /// the container namespace, when that link is a veth whose peer the
    /// kernel places in the node namespace: its `IFLA_LINK_NETNSID` is the
    /// id the container namespace gives the node's (`RTM_GETNSID`). Asked
    /// of the kernel (the invocation's sockets, which the plugin's calls
    /// use next), never read from `prevResult`.
    fn kernel_peer(&mut self) -> Option<AdoptedPeer> {
        let host = self.ns(Kind::Host)?.fd().try_clone_to_owned().ok()?;
        let ifname = self.attachment.ifname.clone();
        let nl = self.netlink(Kind::Container).ok()?;
        let msg = nl.link_by_name(&ifname).ok()?;
        let (mut veth, mut peer, mut nsid) = (false, None, None);
        for a in &msg.attributes {
            match a {
                LinkAttribute::LinkInfo(infos) => {
                    veth |= infos.contains(&LinkInfo::Kind(InfoKind::Veth))
                }
                LinkAttribute::Link(p) => peer = Some(*p),
                LinkAttribute::LinkNetNsId(n) => nsid = Some(*n),
                _ => {}
            }
        }
        let host_id = nl.nsid_of(host.as_fd()).ok()??;
        let index = peer.filter(|_| veth && nsid == Some(host_id))?;
        let name = self.link(Kind::Host, index).ok()?.name;
        Some(AdoptedPeer { index, name })
    }
}

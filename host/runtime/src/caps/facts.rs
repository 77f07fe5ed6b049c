//! Facts for [`super::authority`] to decide on: who the invocation acts
//! for ([`Ctx::view`]), what the kernel, the journal and the records say
//! of a link, the attachment's own addresses and the node's reservations.
//! The wrappers here look them up and ask the authority module; the
//! interface modules call them. Some are fixed before the plugin runs:
//! what no call the plugin makes can change afterwards.
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

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;

use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo};

use super::authority::link::LinkFacts;
use super::authority::View;
use super::bindings::{CapError, Link};
use super::ctx::{Command, Ctx};
use crate::ipam::{NetworkStore, Owner};
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

impl Ctx {
    /// What decisions read of the invocation ([`View`]).
    pub(super) fn view(&self) -> View<'_> {
        View {
            grant: &self.grant,
            plugin: self.audit.plugin(),
            attachment: &self.attachment,
            marks: &self.marks,
            command: self.command,
            command_text: self.command_text(),
            adopted: self.adopted.as_ref(),
            config_device: self.config_device(),
        }
    }

    /// The one node device the network config names by a key the grant's
    /// `config-links` lists, during ADD (a DEL gives it back, never takes
    /// it again): looked up in sysfs once per invocation
    /// ([`crate::attachment::ConfigDevices::resolve`]), so that every
    /// decision of the call sees the same device.
    fn config_device(&self) -> Option<&str> {
        let g = self.ns_grant(Kind::Host);
        if self.command != Some(Command::Add) || g.config_links.is_empty() {
            return None;
        }
        self.config_device
            .get_or_init(|| self.attachment.devices.resolve(&g.config_links))
            .as_deref()
    }

    /// What the journal and the records say of link `l`.
    fn link_facts(&self, kind: Kind, l: &Link) -> LinkFacts {
        LinkFacts {
            created: self.journal.created(kind, l.index),
            another_incarnation: kind == Kind::Host
                && self.view().owned(l)
                && self.another_incarnations(l),
        }
    }

    /// Whether the plugin controls link `l` ([`View::host_link`]).
    pub(super) fn check_host_link(&self, kind: Kind, l: &Link) -> Result<(), CapError> {
        self.view().host_link(kind, l, self.link_facts(kind, l))
    }

    /// Whether container link `index` may take the name `name`
    /// ([`View::may_take_ifname`]): made here if this call created it or
    /// moved it in.
    pub(super) fn may_take_ifname(
        &self,
        kind: Kind,
        index: u32,
        name: &str,
    ) -> Result<(), CapError> {
        let moved_in = self
            .journal
            .moved_out_of(Kind::Host)
            .iter()
            .any(|((ns, i), _, _)| *ns == Kind::Container && *i == index);
        let made_here = self.journal.created(kind, index) || moved_in;
        self.view().may_take_ifname(kind, index, name, made_here)
    }

    /// [`View::owned`].
    pub(super) fn owned(&self, l: &Link) -> bool {
        self.view().owned(l)
    }

    /// [`View::shared`].
    pub(super) fn shared(&self, kind: Kind, l: &Link) -> bool {
        self.view().shared(kind, l)
    }

    /// Whether link `index` is a node link of this attachment's network
    /// (its mark: a bridge, made in this call or before, or a gateway
    /// pair), whose connected prefixes are the network's.
    pub(super) fn network_link(&mut self, kind: Kind, index: u32) -> bool {
        kind == Kind::Host
            && self
                .link(kind, index)
                .is_ok_and(|l| self.view().network_marked(&l))
    }

    /// Whether `route_localnet` may be set on node link `name` for this
    /// attachment's port maps: the attachment's own link (its mark, or
    /// made in this call) or its network's shared one (a bridge), never
    /// an uplink or another attachment's or network's link.
    pub(super) fn localnet_link_ok(&mut self, index: u32) -> bool {
        let Ok(l) = self.link(Kind::Host, index) else {
            return false;
        };
        self.view()
            .localnet_link(&l, self.journal.created(Kind::Host, l.index))
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

    /// `ip` as the container's address in `what` ([`View::own_address`]).
    pub(super) fn check_own_address(&mut self, ip: IpAddr, what: &str) -> Result<(), CapError> {
        let owned = self.grant.static_ranges.iter().any(|r| r.contains(&ip))
            || self.owned_addresses().contains(&ip);
        self.view().own_address(ip, what, owned)
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

    /// A container address the node holds
    /// ([`super::authority::address::not_node_address`]): one lookup of
    /// the local route, not a dump of the node's addresses (an ADD's cost
    /// does not grow with the node: tests/scale.rs).
    pub(super) fn check_not_node_address(&mut self, ip: IpAddr) -> Result<(), CapError> {
        if ip.is_loopback() {
            return Ok(());
        }
        self.open_host()?;
        let Some(index) = self.netlink(Kind::Host)?.local_holder(ip)? else {
            return Ok(());
        };
        let reserved = self.reserved_for_me(ip)?;
        let link = self
            .link(Kind::Host, index)
            .map(|l| l.name)
            .unwrap_or_else(|_| format!("link {index}"));
        super::authority::address::not_node_address(ip, Some(&link), reserved)
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

    /// [`View::in_network_subnets`].
    pub(super) fn check_in_network_subnets(&self, ip: IpAddr) -> Result<(), CapError> {
        self.view().in_network_subnets(ip)
    }

    /// A container or host address `ip/len` over another attachment's
    /// reservation ([`super::authority::address::not_foreign_address`]):
    /// the address itself, and on a node link of the attachment's own
    /// (`own_link`) the whole connected prefix.
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
            let found = self.foreign_reservation_in(net, own_network_too)?;
            super::authority::address::not_foreign_address(kind, ip, len, found.as_ref())?;
        }
        Ok(())
    }
    /// The link, if the plugin may change it: `modify` in its namespace,
    /// and in the host's, one it controls ([`Ctx::check_host_link`]).
    pub(super) fn modifiable(&mut self, kind: Kind, index: u32) -> Result<Link, CapError> {
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
        let l = self.link(kind, index)?;
        if shared_ok && self.shared(kind, &l) {
            return Ok(l);
        }
        self.check_host_link(kind, &l)?;
        Ok(l)
    }
}

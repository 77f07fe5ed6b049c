//! Links an ADD takes from the host namespace (a `host-device` device),
//! and how DEL returns them exactly as they were: the attachment record
//! ([`crate::record`]) keeps the journal's inverses for them past the ADD.
//!
//! - The moment an ADD moves a host link into the container, the record
//!   is written ([`Ctx::keep_record`]; again when the ADD succeeds): a
//!   process killed after the move leaves the means to bring it back. If
//!   the record cannot be written the move fails, and so does the ADD; a
//!   failed ADD's undo returns the link and drops it from the record
//!   ([`Ctx::drop_record`]).
//! - A DEL that moves such a link back ([`Ctx::return_borrowed`], from
//!   `link.move-to`) replays its inverses: back under its old name and
//!   index, then its state, addresses and routes. The plugin cannot delete
//!   it instead ([`Ctx::holds`]).
//! - After the plugin's DEL, whatever the record still holds is returned
//!   by the host ([`Ctx::finish_del`]): a plugin whose DEL forgets the
//!   device, or fails, leaves nothing out.
//! - A recorded link is known by its index in the container namespace
//!   *and* its identity ([`LinkIdentity`]): a link someone made at that
//!   index later is not it, and is never moved to the node.

use netlink_packet_route::link::LinkAttribute;
use serde_json::json;

use super::bindings::CapError;
use super::ctx::{Ctx, Inverse};
use crate::audit::Outcome;
use crate::journal::{Entry, Moved};
use crate::netns::Kind;
use crate::record::{Borrowed, LinkIdentity, Location, Record};

impl Ctx {
    /// The record of the runtime's attachment by the plugin the runtime
    /// executed (a delegate's or member's changes are its caller's).
    pub(super) fn record_location(&self) -> Location {
        Location::new(
            &Location::root_from_env(),
            &self.owner(),
            &self.record_plugin,
        )
    }

    /// The runtime's attachment (a delegate's config may name another
    /// network; its changes are the runtime's attachment's).
    pub(super) fn owner(&self) -> crate::attachment::Attachment {
        let (network, container_id, ifname) = self.state_owner.clone();
        crate::attachment::Attachment {
            network,
            container_id,
            ifname,
            ..crate::attachment::Attachment::default()
        }
    }

    pub(super) fn container_ino(&self) -> Option<u64> {
        self.container.as_ref().map(crate::netns::NetNs::ino)
    }

    /// The identity of link `index` of the container namespace.
    fn identity(&mut self, index: u32) -> Result<LinkIdentity, CapError> {
        let msg = self.netlink(Kind::Container)?.link_by_index(index)?;
        let kind = super::bindings::Link::from_message(msg.clone()).kind;
        let mut id = LinkIdentity {
            kind,
            ..LinkIdentity::default()
        };
        let (mut lower, mut nsid, mut bus, mut dev) = (None, None, None, None);
        for a in &msg.attributes {
            match a {
                LinkAttribute::PermAddress(m) if m.iter().any(|b| *b != 0) => {
                    id.perm_address = Some(m.clone())
                }
                LinkAttribute::ParentDevBusName(b) => bus = Some(b.clone()),
                LinkAttribute::ParentDevName(d) => dev = Some(d.clone()),
                LinkAttribute::Link(l) => lower = Some(*l),
                LinkAttribute::LinkNetNsId(n) => nsid = Some(*n),
                _ => {}
            }
        }
        id.parent = dev.map(|d| format!("{}/{d}", bus.unwrap_or_default()));
        if let (Some(lower), Some(nsid)) = (lower, nsid) {
            self.open_host()?;
            let host = self.ns_fd(Kind::Host)?;
            let host_nsid = self
                .netlink(Kind::Container)?
                .nsid_of(std::os::fd::AsFd::as_fd(&host))?;
            if host_nsid == Some(nsid) {
                id.host_link = Some(lower);
            }
        }
        Ok(id)
    }

    /// Whether link `index` of the container namespace is there and is
    /// the link `b` recorded.
    fn is_recorded_link(&mut self, b: &Borrowed) -> bool {
        self.identity(b.index).is_ok_and(|id| id == b.identity)
    }

    /// Before an ADD makes what `owned` lists: a line in the attachment's
    /// intent log ([`Location::intend`]), so that a process killed at any
    /// instant after leaves what DEL and GC need to remove it. If the line
    /// cannot be written the step is refused (it would be out of the
    /// host's reach).
    pub(super) fn intend(&mut self, owned: crate::record::Owned) -> Result<(), CapError> {
        if self.command != Some(super::ctx::Command::Add) || owned.is_empty() {
            return Ok(());
        }
        let Some(ino) = self.container_ino() else {
            return Ok(());
        };
        let loc = self.record_location();
        let mut line = match Record::new(&self.owner(), &self.record_plugin, ino) {
            Ok(line) => line,
            Err(e) => {
                self.note_host_error(format!("reading the boot id: {e}"));
                return Err(CapError::from(e));
            }
        };
        line.owned = owned;
        loc.intend(&line).map_err(|e| {
            self.note_host_error(format!(
                "writing the intent log {}: {e}",
                loc.intent_path().display()
            ));
            CapError::from(e)
        })
    }

    /// [`Ctx::intend`] for links about to be made (namespace, name,
    /// kind). Each name must be free: the kernel would refuse it anyway,
    /// and an intent line must never name a link that was there before
    /// (an unmarked one would be taken for this ADD's).
    pub(super) fn intend_links(&mut self, links: &[(Kind, &str, &str)]) -> Result<(), CapError> {
        if self.command != Some(super::ctx::Command::Add) {
            return Ok(());
        }
        let mut owned = crate::record::Owned::default();
        for (ns, name, kind) in links {
            match self.netlink(*ns)?.link_by_name(name) {
                Ok(_) => return Err(CapError::Kernel(libc::EEXIST)),
                Err(e) if e.errno() == libc::ENODEV => {}
                Err(e) => return Err(CapError::from(&e)),
            }
            owned.links.push(crate::record::OwnedLink {
                ns: *ns,
                name: (*name).to_owned(),
                kind: Some((*kind).to_owned()),
                intent: true,
                netns: self.container_ino().unwrap_or(0),
                index: None,
                named_unmade: false,
            });
        }
        self.intend(owned)
    }

    /// After the kernel made node links this ADD named ([`Ctx::intend_links`])
    /// and before they are marked: a line saying where it made them
    /// (namespace, name, kind, index), the proof that an unmarked link
    /// found there later is this ADD's ([`crate::record::OwnedLink::index`]).
    /// Links of the container namespace need none (the namespace is the
    /// attachment's). If the line cannot be written the step is refused
    /// (the caller deletes what it made).
    pub(super) fn intend_made(
        &mut self,
        links: &[(Kind, &str, Option<String>, u32)],
    ) -> Result<(), CapError> {
        if self.command != Some(super::ctx::Command::Add) {
            return Ok(());
        }
        let mut owned = crate::record::Owned::default();
        for (ns, name, kind, index) in links {
            if *ns == Kind::Host {
                owned.links.push(crate::record::OwnedLink {
                    ns: *ns,
                    name: (*name).to_owned(),
                    kind: kind.clone(),
                    intent: true,
                    index: Some(*index),
                    named_unmade: false,
                    netns: self.container_ino().unwrap_or(0),
                });
            }
        }
        self.intend(owned)
    }

    /// Records what this ADD made that is the attachment's alone
    /// ([`crate::record::Owned`]) and the links it has moved from the host
    /// namespace into the container's, with the inverses that put each
    /// back (beside what the record already holds for this attachment:
    /// its links still in this namespace, and what an earlier ADD owns).
    /// Called at each such move and when the ADD succeeds (`done`: then
    /// with the addresses it established as the attachment's, S13). The
    /// error says why it could not.
    pub fn keep_record(&mut self, done: bool) -> Result<(), String> {
        // Its checks read each of the attachment's links two or three
        // times.
        self.keeping_links(|c| c.write_record(done))
    }

    fn write_record(&mut self, done: bool) -> Result<(), String> {
        let moved: Vec<Moved<Box<dyn Inverse>>> = self
            .journal
            .moved_out_of(Kind::Host)
            .into_iter()
            .filter(|((ns, _), _, _)| *ns == Kind::Container)
            .collect();
        let owned = self.owned_now();
        let loc = self.record_location();
        let addresses = if done {
            self.attachment.addresses.clone()
        } else {
            Vec::new()
        };
        // What an `adopt-peer` grant found, "nothing" included: a later
        // call adopts only that ([`Ctx::fix_adopted_peer`]).
        let adopted = self.adopted.clone();
        if moved.is_empty()
            && owned.is_empty()
            && addresses.is_empty()
            && adopted.is_none()
            && !loc.has_intent()
        {
            return Ok(());
        }
        let uncovered = self.uncovered(&owned);
        let names: Vec<String> = moved.iter().map(|(_, n, _)| n.clone()).collect();
        let result = (|| -> Result<(), String> {
            let ino = self
                .container_ino()
                .ok_or("an ADD with no container namespace")?;
            let mut borrowed = Vec::new();
            for ((_, index), name, restore) in moved {
                let identity = self.identity(index).map_err(|e| format!("{e:?}"))?;
                let restore = restore
                    .into_iter()
                    .map(|e| {
                        let undo = e.undo.record().ok_or_else(|| {
                            format!("{} cannot be kept in a record", e.undo.describe())
                        })?;
                        Ok(Entry {
                            undo,
                            link: e.link,
                            master: e.master,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                borrowed.push(Borrowed {
                    name,
                    index,
                    identity,
                    restore,
                });
            }
            // Any intent lines are this ADD's own (an interrupted ADD's were
            // adopted at the start: [`Ctx::adopt_intent`]).
            let old = loc.load_or_quarantine_as(false);
            let mut record =
                Record::new(&self.owner(), &self.record_plugin, ino).map_err(|e| e.to_string())?;
            if let Some(mut old) = old {
                let here = old.applies_to(ino);
                for b in std::mem::take(&mut old.borrowed) {
                    if here
                        && !borrowed.iter().any(|m| m.index == b.index)
                        && self.is_recorded_link(&b)
                    {
                        record.borrowed.push(b);
                    }
                }
                let mut prior = old.owned.clone();
                for l in &mut prior.links {
                    // Each keeps the incarnation that made it.
                    l.netns = l.incarnation(&old);
                }
                if !here {
                    // Its container links went with their namespace.
                    prior.links.retain(|l| l.ns == Kind::Host);
                }
                // What an earlier ADD owns that is still there and still
                // the attachment's.
                let links = std::mem::take(&mut prior.links);
                for l in links {
                    if self.owned_link_present(&l, &record) {
                        prior.links.push(l);
                    }
                }
                prior
                    .reservations
                    .retain(|r| held_by(r, &record.container_id, &record.ifname));
                record.owned = prior;
                record.uncovered = old.uncovered;
                if here {
                    // An earlier ADD's of this incarnation.
                    record.addresses = old.addresses;
                    record.adopted = old.adopted;
                }
            }
            for ip in addresses {
                if !record.addresses.contains(&ip) {
                    record.addresses.push(ip);
                }
            }
            if adopted.is_some() {
                record.adopted = adopted;
            }
            record.borrowed.extend(borrowed);
            record.owned.merge(owned);
            for u in uncovered {
                if !record.uncovered.contains(&u) {
                    record.uncovered.push(u);
                }
            }
            loc.store(&record).map_err(|e| e.to_string())
        })();
        let args = json!({"record": loc.path(), "borrowed": names});
        let outcome = match &result {
            Ok(()) => Outcome::Ok,
            Err(_) => CapError::Kernel(libc::EIO).outcome(),
        };
        self.audit.record("record.store", &args, &outcome);
        result.map_err(|e| {
            if names.is_empty() {
                format!(
                    "cannot record what the ADD made ({}): {e}",
                    loc.path().display()
                )
            } else {
                format!(
                    "cannot record how to return host links {names:?} ({}): {e}",
                    loc.path().display()
                )
            }
        })
    }

    /// After a failed ADD's undo has taken back what it made: drops from
    /// the record every link that is no longer in the container (the ones
    /// this ADD took, its delegates' included), keeping those an earlier
    /// ADD of the attachment took, and every owned entry that is no longer
    /// there.
    pub fn drop_record(&mut self) {
        let loc = self.record_location();
        // Its intent lines are this ADD's own: all taken back by the undo,
        // unless that failed (then they stay, for DEL and GC).
        let Some(mut record) = loc.load_or_quarantine_as(false) else {
            return;
        };
        let here = self
            .container_ino()
            .is_some_and(|ino| record.applies_to(ino));
        if here {
            let mut kept = Vec::new();
            for b in std::mem::take(&mut record.borrowed) {
                if self.is_recorded_link(&b) {
                    kept.push(b);
                }
            }
            record.borrowed = kept;
        }
        let links = std::mem::take(&mut record.owned.links);
        for l in links {
            // Another namespace's links are not this one's to look up.
            if (l.ns == Kind::Container && !here) || self.owned_link_present(&l, &record) {
                record.owned.links.push(l);
            }
        }
        let (cid, ifname) = (record.container_id.clone(), record.ifname.clone());
        record
            .owned
            .reservations
            .retain(|r| held_by(r, &cid, &ifname));
        let rules = std::mem::take(&mut record.owned.firewall);
        for f in rules {
            if self.firewall_any(&f.kinds, |_, t| t.att == f.attachment) {
                record.owned.firewall.push(f);
            }
        }
        if let Err(e) = loc.store(&record) {
            log::warn!("{}: {e}", loc.path().display());
        }
    }

    /// At the start of an ADD: an intent log left by an earlier ADD of the
    /// attachment that was killed before its end is folded into the
    /// record, so that the log holds this ADD's lines alone.
    pub fn adopt_intent(&mut self) {
        let loc = self.record_location();
        if !loc.has_intent() {
            return;
        }
        if let Some(mut r) = loc.load_or_quarantine() {
            eprintln!(
                "wasmcni: an earlier ADD of this attachment was interrupted; what it named is \
                 kept in {} for DEL and GC",
                loc.path().display()
            );
            // A node link its last step made and did not mark gets the
            // mark now, so that no record keeps the unmarked exception.
            let mark = r.attachment().mark();
            let present: Vec<bool> = r
                .owned
                .links
                .clone()
                .iter()
                .map(|l| self.owned_link_present(l, &r))
                .collect();
            for (l, here) in r.owned.links.iter_mut().zip(present) {
                if !(l.intent && l.ns == Kind::Host && here) {
                    l.intent = false;
                    l.index = None;
                    continue;
                }
                let marked = self.open_host().and_then(|()| {
                    let nl = self.netlink(Kind::Host)?;
                    let i = nl.link_by_name(&l.name)?.header.index;
                    nl.set_alias(i, &mark).map_err(CapError::from)
                });
                match marked {
                    Ok(()) => {
                        l.intent = false;
                        l.index = None;
                    }
                    // Kept as it is: DEL tries again.
                    Err(e) => log::warn!("marking host link {:?}: {e:?}", l.name),
                }
            }
            if let Err(e) = loc.store(&r) {
                log::warn!("{}: {e}", loc.path().display());
            }
        }
    }

    /// Whether this attachment has an intent log (steps of an ADD named
    /// and not yet recorded).
    pub fn has_intent(&self) -> bool {
        self.record_location().has_intent()
    }

    /// The record of this attachment, if it applies to this boot and this
    /// container namespace.
    fn record(&self) -> Result<Option<(Location, Record)>, CapError> {
        let Some(ino) = self.container_ino() else {
            return Ok(None);
        };
        let loc = self.record_location();
        Ok(loc
            .load_or_quarantine()
            .filter(|r| r.applies_to(ino))
            .map(|r| (loc, r)))
    }

    /// Whether link `index` of the container namespace is one the
    /// attachment's record holds (during DEL: it goes back, not away).
    pub(super) fn holds(&mut self, index: u32) -> Result<bool, CapError> {
        if self.command != Some(super::ctx::Command::Del) {
            return Ok(false);
        }
        let Some((_, record)) = self.record()? else {
            return Ok(false);
        };
        Ok(record
            .borrowed
            .iter()
            .any(|b| b.index == index && self.is_recorded_link(b)))
    }

    /// During DEL: if link `index` of the container namespace is one this
    /// attachment's ADD took from the host, returns it as it was and
    /// answers its index there (`None`: not a recorded link). `name`, the
    /// name the plugin asked for, must be none or the recorded one.
    pub(super) fn return_borrowed(
        &mut self,
        index: u32,
        name: Option<&str>,
    ) -> Result<Option<u32>, CapError> {
        if self.command != Some(super::ctx::Command::Del) {
            return Ok(None);
        }
        let Some((loc, mut record)) = self.record()? else {
            return Ok(None);
        };
        let Some(pos) = record.borrowed.iter().position(|b| b.index == index) else {
            return Ok(None);
        };
        if !self.is_recorded_link(&record.borrowed[pos]) {
            return Ok(None);
        }
        let b = &record.borrowed[pos];
        super::authority::link::return_name(index, &b.name, name)?;
        let b = record.borrowed.remove(pos);
        let at = self.put_back(&b)?;
        // Returned: the record no longer holds it (a failure to rewrite
        // the record leaves an entry whose link is no longer there, which
        // the next DEL drops).
        if let Err(e) = loc.store(&record) {
            log::warn!("{}: {e}", loc.path().display());
        }
        Ok(Some(at))
    }

    /// Replays a borrowed link's inverses; its index in the host namespace.
    fn put_back(&mut self, b: &Borrowed) -> Result<u32, CapError> {
        // The host namespace is wasmcni's own: it returns the link there
        // even for a plugin that never asked for a handle to it.
        self.open_host()?;
        let mut entries = b
            .restore
            .iter()
            .map(|e| {
                let undo = super::undo::from_record(&e.undo).ok_or_else(|| {
                    CapError::Incomplete(format!(
                        "the record holds an inverse wasmcni cannot read: {}",
                        e.undo
                    ))
                })?;
                Ok(Entry {
                    undo,
                    link: e.link,
                    master: e.master,
                })
            })
            .collect::<Result<Vec<_>, CapError>>()?;
        entries.reverse();
        let failures = self.replay(entries, "record.restore");
        if !failures.is_empty() {
            return Err(CapError::Incomplete(failures.join("; ")));
        }
        self.netlink(Kind::Host)?
            .link_by_name(&b.name)
            .map(|m| m.header.index)
            .map_err(|e| CapError::from(&e))
    }

    /// After the plugin's DEL (whatever its outcome): returns every link
    /// the record still holds that is still in the container namespace,
    /// drops those that are not (gone with their namespace, or replaced by
    /// another link at their index), removes what the record lists as the
    /// attachment's own that is still there ([`Ctx::remove_owned`]), and
    /// removes the record. What could not be returned or removed stays in
    /// it for the runtime's next DEL. Answers whether there was a record
    /// and whether it stood in for everything the ADD did
    /// ([`DelCleanup`]); the errors name what could not be undone.
    pub fn finish_del(&mut self) -> Result<DelCleanup, String> {
        if let Some(why) = Location::untrusted_root() {
            // No record there is the host's word (the runner said so).
            log::warn!("{why}");
            return Ok(DelCleanup::NoRecord);
        }
        let loc = self.record_location();
        let Some(mut record) = loc.load_or_quarantine() else {
            if let Err(e) = loc.remove_empty_intent() {
                log::warn!("{}: {e}", loc.intent_path().display());
            }
            return Ok(DelCleanup::NoRecord);
        };
        let here = self
            .container_ino()
            .is_some_and(|ino| record.applies_to(ino));
        let mut failures = Vec::new();
        let mut kept = Vec::new();
        for b in std::mem::take(&mut record.borrowed) {
            let args = json!({"record": loc.path(), "link": b.name, "index": b.index});
            if !here {
                if self.container.is_some() {
                    // The record speaks of another namespace, which may
                    // still hold the link: kept.
                    kept.push(b);
                    continue;
                }
                self.audit.record(
                    "record.drop",
                    &args,
                    &CapError::Kernel(libc::ENOENT).outcome(),
                );
                eprintln!(
                    "wasmcni: the container namespace is gone: host link {:?} went with it \
                     (a physical device is back in the initial namespace, unconfigured)",
                    b.name
                );
                continue;
            }
            if !self.is_recorded_link(&b) {
                self.audit.record(
                    "record.drop",
                    &args,
                    &CapError::Kernel(libc::ENODEV).outcome(),
                );
                eprintln!(
                    "wasmcni: host link {:?} is no longer in the container (index {}); \
                     nothing to return",
                    b.name, b.index
                );
                continue;
            }
            eprintln!(
                "wasmcni: the plugin's DEL left host link {:?} in the container; returning it",
                b.name
            );
            self.audit.record("record.return", &args, &Outcome::Ok);
            if let Err(e) = self.put_back(&b) {
                failures.push(format!("{}: {e:?}", b.name));
                // Kept for the runtime's next DEL.
                kept.push(b);
            }
        }
        record.borrowed = kept;
        // A DEL that names a container namespace ends that incarnation of
        // the attachment only (S15): the links a later ADD in another
        // namespace made (the runtime lost this one's DEL, and added the
        // attachment again) stay in the record for their own DEL; so do,
        // in such a late DEL, the reservations, rules and addresses, which
        // name the attachment, not an incarnation, and are the live one's.
        let ino = self.container_ino();
        let late = ino.is_some() && !here;
        let (mine, later): (Vec<_>, Vec<_>) = std::mem::take(&mut record.owned.links)
            .into_iter()
            .partition(|l| ino.is_none_or(|ino| l.incarnation(&record) == ino));
        let live = if late {
            std::mem::take(&mut record.owned)
        } else {
            // The attachment ends: its addresses are no longer its own,
            // nor the peer it adopted.
            record.addresses.clear();
            record.adopted = None;
            crate::record::Owned::default()
        };
        record.owned.links = mine;
        let cleanup = self.remove_owned(&loc, &record, here, "record.remove");
        for what in &cleanup.removed {
            eprintln!("wasmcni: the plugin's DEL left {what}; the host removed it");
        }
        failures.extend(cleanup.failures);
        record.owned = cleanup.kept;
        record.owned.reservations.extend(live.reservations);
        record.owned.firewall.extend(live.firewall);
        for l in later {
            // Named with its incarnation: the record's `netns` may change.
            let netns = l.incarnation(&record);
            record
                .owned
                .links
                .push(crate::record::OwnedLink { netns, ..l });
        }
        if let Err(e) = loc.store(&record) {
            failures.push(format!("{}: {e}", loc.path().display()));
        }
        if failures.is_empty() && loc.load_record_quiet().is_none() {
            // Its last record gone: the network's shared links go with
            // its last holder.
            for what in self.release_network_shares(&record.attachment(), "record.remove") {
                eprintln!("wasmcni: the network has no attachment left; the host removed {what}");
            }
        }
        if failures.is_empty() {
            // The host stood for everything the ADD did only if the record
            // covered it all and nothing is left in it (a moved link kept
            // for a namespace that is not this one).
            Ok(
                if record.uncovered.is_empty() && record.borrowed.is_empty() {
                    DelCleanup::Complete
                } else {
                    DelCleanup::Partial(record.uncovered.clone())
                },
            )
        } else {
            Err(failures.join("; "))
        }
    }
}

/// What the host's part of a DEL found and did ([`Ctx::finish_del`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelCleanup {
    /// The attachment has no record (nor intent log) for this plugin: its
    /// ADD made nothing of the attachment's, or never ran.
    NoRecord,
    /// The record covered everything its ADD did, and nothing of it is
    /// left: the host stood for the whole of the plugin's DEL.
    Complete,
    /// What the ADD did that the host cannot take back (the record's
    /// `uncovered` entries), or a moved link kept for another namespace:
    /// only the plugin's DEL can finish.
    Partial(Vec<String>),
}

/// Whether reservation `r` is still held by (`container_id`, `ifname`).
fn held_by(r: &crate::record::Reservation, container_id: &str, ifname: &str) -> bool {
    crate::ipam::NetworkStore::read_only(&r.dir)
        .and_then(|s| Ok(s.holder(r.address)?))
        .is_ok_and(|h| h.is_some_and(|h| h.container_id == container_id && h.ifname == ifname))
}

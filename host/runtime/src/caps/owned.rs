//! What an ADD made that is its attachment's alone, kept in the attachment
//! record ([`crate::record::Owned`]) so the host, not the plugin, makes
//! sure it goes: at DEL after the plugin's own DEL (whatever that did or
//! failed to do), and at GC for every attachment the runtime no longer
//! holds.
//!
//! The record lists links by namespace, name and kind, and the host deletes
//! one only if it is still the attachment's: in the host namespace it must
//! carry the attachment's mark (`wasmcni:<network>:<container id>:<ifname>`,
//! which only a plugin acting for that attachment can have made); in the
//! container namespace, the namespace must still be the one of the ADD.
//! A reservation is released only while the attachment still holds it;
//! firewall rules are found by the attachment's tag. Nothing is ever
//! deleted by a bare index.

use serde_json::json;

use super::bindings::CapError;
use super::ctx::{Ctx, Inverse, Uncovered};
use crate::audit::Outcome;
use crate::ipam::{NetworkStore, Owner};
use crate::journal::Journaled;
use crate::netns::Kind;
use crate::record::{Location, Owned, OwnedLink, Record};

/// The fewest links the host deletes as one kernel batch
/// ([`Ctx::delete_links`]): fewer go one by one, as a batch costs two dumps
/// of the namespace's links and a request per link to group them.
const BATCH_MIN: usize = 3;

/// What the host did with a record's entries.
#[derive(Debug, Default)]
pub struct Cleanup {
    /// What it removed (for stderr and the audit log).
    pub removed: Vec<String>,
    /// What it could not remove (kept in the record for the next DEL or GC).
    pub failures: Vec<String>,
    /// The entries that failed, kept.
    pub kept: Owned,
}

impl Ctx {
    /// What this invocation's journal holds that is the attachment's alone:
    /// the links it created that are still there (in the host namespace,
    /// those with the attachment's mark), the addresses it reserved, the
    /// firewall rules it installed.
    pub(super) fn owned_now(&mut self) -> Owned {
        let mut owned = Owned::default();
        let mark = self.attachment.mark();
        for (ns, index) in self.journal.created_links() {
            let Ok(nl) = self.netlink(ns) else { continue };
            let Ok(msg) = nl.link_by_index(index) else {
                continue;
            };
            let link = super::bindings::Link::from_message(msg);
            if ns == Kind::Host && link.alias.as_deref() != Some(mark.as_str()) {
                // The network's (a bridge), or not wasmcni's to keep.
                continue;
            }
            let l = OwnedLink {
                ns,
                name: link.name,
                kind: link.kind,
                intent: false,
                netns: self.container_ino().unwrap_or(0),
                index: None,
                named_unmade: false,
            };
            if !owned.links.contains(&l) {
                owned.links.push(l);
            }
        }
        for undo in self.journal.undos() {
            if let Some(o) = undo.owned(&self.attachment) {
                owned.merge(o);
            }
        }
        owned
    }

    /// Whether link `l` of `record` is there and still the attachment's.
    pub(super) fn owned_link_present(&mut self, l: &OwnedLink, record: &Record) -> bool {
        self.owned_link(l, record).is_some()
    }

    /// Link `l` of `record`, if it is there and still the attachment's:
    /// same kind, and in the host namespace the attachment's mark.
    fn owned_link(&mut self, l: &OwnedLink, record: &Record) -> Option<super::bindings::Link> {
        let msg = self.netlink(l.ns).ok()?.link_by_name(&l.name).ok()?;
        let link = super::bindings::Link::from_message(msg);
        let mark = record.attachment().mark();
        owns(l, &link, &mark).then_some(link)
    }

    /// What the journal holds that the record cannot stand for: changes
    /// the host's DEL would not take back. Everything in the container
    /// namespace goes with it; in the node, what is on the attachment's own
    /// links goes with them, and what is on the network's shared links (a
    /// bridge, its gateway address) or namespace-wide (`ip_forward`) stays
    /// by design, as with the reference plugins. What is left — a change to
    /// a node link that is neither, a policy rule in the node, a native
    /// delegate's ADD, an IPAM release — only the plugin's DEL takes back,
    /// so a failed DEL must stand ([`Ctx::finish_del`]).
    pub(super) fn uncovered(&mut self, owned: &Owned) -> Vec<String> {
        let mark = self.attachment.mark();
        let undos: Vec<Box<dyn Inverse>> = self.journal.undos().cloned().collect();
        let mut out = Vec::new();
        // One lookup per node link, however many entries name it.
        let mut foreign: std::collections::HashMap<u32, bool> = std::collections::HashMap::new();
        for u in &undos {
            let why = match u.uncovered(self, owned) {
                Uncovered::Yes(why) => Some(why),
                Uncovered::No => None,
                Uncovered::ByLink => match u.link() {
                    // A link this ADD made carries the attachment's mark
                    // or the network's: covered, no lookup needed.
                    Some((Kind::Host, index)) if self.journal.created(Kind::Host, index) => None,
                    Some((Kind::Host, index)) => {
                        let is = match foreign.get(&index) {
                            Some(f) => *f,
                            None => {
                                let f = self.node_link_is_foreign(Some(index), None, &mark);
                                foreign.insert(index, f);
                                f
                            }
                        };
                        is.then(|| format!("a change to node link {index} ({})", u.describe()))
                    }
                    _ => None,
                },
            };
            if let Some(w) = why {
                if !out.contains(&w) {
                    out.push(w);
                }
            }
        }
        out
    }

    /// Whether the node link at `index` (or named `name`) exists and is
    /// neither the attachment's (`mark`) nor the network's.
    pub(super) fn node_link_is_foreign(
        &mut self,
        index: Option<u32>,
        name: Option<&str>,
        mark: &str,
    ) -> bool {
        let Ok(nl) = self.netlink(Kind::Host) else {
            return true;
        };
        let msg = match (index, name) {
            (Some(i), _) => nl.link_by_index(i),
            (None, Some(n)) => nl.link_by_name(n),
            _ => return true,
        };
        let Ok(msg) = msg else {
            // Gone (or moved away): nothing to take back there.
            return false;
        };
        let alias = super::bindings::Link::from_message(msg)
            .alias
            .unwrap_or_default();
        !(alias == mark || alias.starts_with(crate::attachment::NETWORK_MARK))
    }

    /// Removes what `record` lists as owned that is still there and still
    /// the attachment's. `container` says whether the container namespace
    /// at hand is the record's (else its links are left to it). Each
    /// removal is audited as `label`.
    pub(super) fn remove_owned(
        &mut self,
        loc: &Location,
        record: &Record,
        container: bool,
        label: &str,
    ) -> Cleanup {
        self.remove_owned_many(&[(loc, record)], container, label)
            .pop()
            .unwrap_or_default()
    }

    /// [`Ctx::remove_owned`] for several records at once: their links are
    /// deleted together, as few kernel batches as can be
    /// ([`Ctx::delete_links`]), so that a GC of many links (or of many
    /// attachments) does not hold up every other call of the network for
    /// one RCU synchronisation per link.
    fn remove_owned_many(
        &mut self,
        items: &[(&Location, &Record)],
        container: bool,
        label: &str,
    ) -> Vec<Cleanup> {
        let mut out: Vec<Cleanup> = items.iter().map(|_| Cleanup::default()).collect();
        if items.iter().any(|(_, r)| !r.owned.is_empty()) {
            if let Err(e) = self.open_host() {
                for (c, (_, r)) in out.iter_mut().zip(items) {
                    if !r.owned.is_empty() {
                        c.failures
                            .push(format!("opening the host namespace: {e:?}"));
                        c.kept = r.owned.clone();
                    }
                }
                return out;
            }
        }
        // Host links first: a veth takes its container end along.
        for ns in [Kind::Host, Kind::Container] {
            if ns == Kind::Container && !container {
                continue;
            }
            // The links still there and still the attachments': record,
            // entry, index.
            let mut doomed: Vec<(usize, &OwnedLink, u32)> = Vec::new();
            for (i, (_, record)) in items.iter().enumerate() {
                let mark = record.attachment().mark();
                for l in record.owned.links.iter().filter(|l| l.ns == ns) {
                    let what = format!("{} link {:?}", ns_name(l.ns), l.name);
                    let found = match self.netlink(l.ns).map(|nl| nl.link_by_name(&l.name)) {
                        Ok(Ok(msg)) => Some(super::bindings::Link::from_message(msg)),
                        Ok(Err(e)) if e.errno() == libc::ENODEV => None,
                        Ok(Err(e)) => {
                            out[i].failures.push(format!("{what}: {e}"));
                            out[i].kept.links.push(l.clone());
                            continue;
                        }
                        Err(e) => {
                            out[i].failures.push(format!("{what}: {e:?}"));
                            out[i].kept.links.push(l.clone());
                            continue;
                        }
                    };
                    let Some(link) = found else { continue };
                    if l.ns == Kind::Container
                        && record.borrowed.iter().any(|b| b.index == link.index)
                    {
                        // A device the ADD took from the node, under a name
                        // the record lists: it goes back, never away.
                        continue;
                    }
                    if !owns(l, &link, &mark) && !host_named_ifb(l, &link, record) {
                        if l.ns == Kind::Host && link.kind == l.kind && unmarked(&link) {
                            eprintln!(
                                "wasmcni: host link {:?} has the name and kind {} names, but no \
                                 mark, and is not where an interrupted ADD saw the kernel make \
                                 it: left alone (an ADD killed in the instant after the kernel \
                                 made its link leaves it so, and so does anyone who made a link \
                                 of that name since)",
                                l.name,
                                items[i].0.path().display()
                            );
                        }
                        // Someone else's now (gone, and the name reused).
                        continue;
                    }
                    doomed.push((i, l, link.index));
                }
            }
            let indexes: Vec<u32> = doomed.iter().map(|d| d.2).collect();
            let results = self.delete_links(ns, &indexes);
            for ((i, l, _), result) in doomed.into_iter().zip(results) {
                let what = format!("{} link {:?}", ns_name(l.ns), l.name);
                let args = json!({"record": items[i].0.path(), "link": l.name,
                                  "namespace": ns_name(l.ns)});
                match result {
                    Ok(()) => {
                        self.audit.record(label, &args, &Outcome::Ok);
                        out[i].removed.push(what);
                    }
                    Err(CapError::Kernel(libc::ENODEV)) => {}
                    Err(e) => {
                        self.audit.record(label, &args, &e.outcome());
                        out[i].failures.push(format!("{what}: {e:?}"));
                        out[i].kept.links.push(l.clone());
                    }
                }
            }
        }
        for ((loc, record), c) in items.iter().zip(out.iter_mut()) {
            self.remove_unlinked(loc, record, label, c);
        }
        out
    }

    /// Deletes links `indexes` of namespace `kind`, each checked as one the
    /// host may delete: [`BATCH_MIN`] or more as one kernel batch
    /// ([`crate::netlink::route::Netlink::delete_as_group`]), fewer (or a
    /// batch that cannot be vouched for) one by one. Answers each one's
    /// outcome, in order.
    fn delete_links(&mut self, kind: Kind, indexes: &[u32]) -> Vec<Result<(), CapError>> {
        if indexes.len() >= BATCH_MIN {
            let batch = self
                .netlink(kind)
                .and_then(|nl| nl.delete_as_group(indexes).map_err(|e| CapError::from(&e)));
            match batch {
                Ok(()) => return indexes.iter().map(|_| Ok(())).collect(),
                Err(e) => log::debug!(
                    "deleting {} links as one batch: {e:?}; one by one",
                    indexes.len()
                ),
            }
        }
        indexes
            .iter()
            .map(|&index| {
                self.netlink(kind)
                    .and_then(|nl| nl.delete_link(index).map_err(|e| CapError::from(&e)))
            })
            .collect()
    }

    /// The rest of [`Ctx::remove_owned`]: `record`'s reservations and
    /// firewall rules, into `c`.
    fn remove_unlinked(&mut self, loc: &Location, record: &Record, label: &str, c: &mut Cleanup) {
        let owned = &record.owned;
        let holder = Owner {
            container_id: record.container_id.clone(),
            ifname: record.ifname.clone(),
        };
        for r in &owned.reservations {
            let what = format!("reservation of {} in {}", r.address, r.dir.display());
            let args = json!({"record": loc.path(), "address": r.address, "dir": r.dir});
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let result = NetworkStore::reopen(&r.dir, deadline)
                .map(super::ipam_store::indexed)
                .map_err(|e| e.to_string())
                .and_then(|s| match s.holder(r.address) {
                    Ok(Some(h)) if h == holder => s
                        .release(r.address)
                        .map(|()| true)
                        .map_err(|e| e.to_string()),
                    Ok(_) => Ok(false),
                    Err(e) => Err(e.to_string()),
                });
            match result {
                Ok(true) => {
                    self.audit.record(label, &args, &Outcome::Ok);
                    c.removed.push(what);
                }
                Ok(false) => {}
                // The network's state is gone altogether: nothing held.
                Err(_) if !r.dir.exists() => {}
                Err(e) => {
                    self.audit.record(
                        label,
                        &args,
                        &Outcome::Error {
                            error: e.clone(),
                            errno: None,
                        },
                    );
                    c.failures.push(format!("{what}: {e}"));
                    c.kept.reservations.push(r.clone());
                }
            }
        }
        for f in &owned.firewall {
            let args = json!({"record": loc.path(), "firewall": f.attachment});
            let result =
                self.firewall_remove_where(|t| t.att == f.attachment && f.kinds.contains(&t.kind));
            match result {
                Ok(0) => {}
                Ok(n) => {
                    self.audit.record(label, &args, &Outcome::Ok);
                    c.removed.push(format!("{n} firewall rule(s)"));
                }
                Err(e) => {
                    self.audit.record(label, &args, &e.outcome());
                    c.failures.push(format!("firewall rules: {e:?}"));
                    c.kept.firewall.push(f.clone());
                }
            }
        }
    }

    /// GC: removes every record of this plugin in this network whose
    /// attachment the runtime no longer holds (or that was written in
    /// another boot: its namespace is gone), with what it lists. Returns
    /// the attachments removed and the failures.
    pub fn gc_records(&mut self) -> (Vec<String>, Vec<String>) {
        let Some(valid) = self.attachment.valid.clone() else {
            return (Vec::new(), Vec::new());
        };
        if let Some(why) = Location::untrusted_root() {
            return (Vec::new(), vec![format!("records ignored: {why}")]);
        }
        if self.attachment.network.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let root = Location::root_from_env();
        let (records, mut failures) = crate::record::list(&root, &self.attachment.network);
        let boot = crate::record::boot_id().unwrap_or_default();
        let plugin = self.record_plugin.clone();
        let mut removed = Vec::new();
        let gone: Vec<(Location, Record)> = records
            .into_iter()
            .filter(|(_, record)| {
                let held = valid
                    .iter()
                    .any(|o| o.container_id == record.container_id && o.ifname == record.ifname);
                record.plugin == plugin && !(held && record.boot_id == boot)
            })
            .collect();
        for (record, result) in self.remove_records(gone, "record.gc") {
            let who = format!("{}/{}", record.container_id, record.ifname);
            match result {
                Ok(what) => {
                    for w in &what {
                        eprintln!("wasmcni: GC of {who}: removed {w}");
                    }
                    removed.push(who);
                }
                Err(e) => failures.push(format!("{who}: {e}")),
            }
        }
        (removed, failures)
    }

    /// The first ADD after a reboot: every record written in another boot
    /// speaks of attachments whose namespaces are gone; what they list
    /// that outlived the boot (reservations, and anything the host made
    /// again under their marks) is released, and the records removed,
    /// before the plugin reserves anything. `<state root>/boot-id` says
    /// which boot was reconciled last, so every other ADD reads one small
    /// file.
    ///
    /// Fails only if another invocation is still reconciling when this
    /// one's deadline comes: going on would race it.
    pub fn reconcile_boot(&mut self) -> Result<(), String> {
        let root = Location::root_from_env();
        let Ok(boot) = crate::record::boot_id() else {
            return Ok(());
        };
        let marker = std::path::Path::new("boot-id");
        if let Ok(Some(b)) = crate::state_fs::read_bounded(&root, marker, 64) {
            if b == boot.as_bytes() {
                return Ok(());
            }
        }
        let networks = crate::record::networks(&root);
        if networks.is_empty() {
            // No records at all (a fresh node, or all gone): nothing to
            // reconcile, and no marker to write.
            return Ok(());
        }
        // One reconciler at a time, and the marker read again under the
        // lock: a concurrent first ADD of this boot waits here until the
        // earlier boot's records are gone, and then finds the marker
        // written. Without it, a reconciler that loaded an old record
        // could remove it after another ADD of this boot had reconciled
        // it and made the attachment again under the same container ID
        // and interface (a container restarted after the reboot keeps
        // both): the new incarnation's links, reservations and record
        // would go with the old one's.
        let Some(_lock) = self.reconcile_lock(&root)? else {
            return Ok(());
        };
        if let Ok(Some(b)) = crate::state_fs::read_bounded(&root, marker, 64) {
            if b == boot.as_bytes() {
                return Ok(());
            }
        }
        let mut failures = Vec::new();
        for network in networks {
            let (records, errors) = crate::record::list(&root, &network);
            failures.extend(errors);
            let mut old = Vec::new();
            for (loc, record) in records {
                if record.boot_id == boot {
                    continue;
                }
                // Read again: another ADD of this boot may have replaced
                // it since the listing.
                match loc.load() {
                    Ok(Some(r)) if r.boot_id != boot => old.push((loc, r)),
                    _ => continue,
                }
            }
            crate::fault::pause("reconcile-loaded");
            for (record, result) in self.remove_records(old, "record.reboot") {
                let who = format!("{network}/{}/{}", record.container_id, record.ifname);
                let (cid, ifname) = (record.container_id.clone(), record.ifname.clone());
                match result {
                    Ok(what) => {
                        for w in what {
                            eprintln!("wasmcni: {who} is from an earlier boot: released {w}");
                        }
                        if let Err(e) =
                            crate::plugin_state::remove_attachment(&root, &network, &cid, &ifname)
                        {
                            failures.push(format!("{who} plugin state: {e}"));
                        }
                    }
                    Err(e) => failures.push(format!("{who}: {e}")),
                }
            }
        }
        // Once per boot, whatever could not be done (GC retries it): an ADD
        // must not rescan every record each time.
        if !failures.is_empty() {
            log::warn!(
                "reconciling records of an earlier boot: {}",
                failures.join("; ")
            );
        }
        if let Err(e) = crate::state_fs::write_atomic(
            &root,
            std::path::Path::new("."),
            "boot-id",
            boot.as_bytes(),
        ) {
            log::warn!("{}: {e}", root.join("boot-id").display());
        }
        Ok(())
    }

    /// The state root's reconcile lock ([`crate::netlock::reconcile_lock`]),
    /// waited for until the plugin's deadline. `None` (and a warning) if it
    /// cannot be had; the ADD goes on without reconciling, and the next
    /// one, or GC, does it. An error if it is still held at the deadline.
    fn reconcile_lock(&self, root: &std::path::Path) -> Result<Option<std::fs::File>, String> {
        match crate::netlock::reconcile_lock(root, self.deadline()) {
            Ok(f) => Ok(Some(f)),
            Err((path, e)) if e.kind() == std::io::ErrorKind::TimedOut => Err(format!(
                "another invocation is still reconciling the records of an earlier boot \
                 under state root {} (it holds {}): try again",
                root.display(),
                path.display()
            )),
            Err((path, e)) => {
                log::warn!(
                    "{}: {e}: records of an earlier boot not reconciled by this ADD",
                    path.display()
                );
                Ok(None)
            }
        }
    }

    /// Removes what `record` lists (outside any container namespace: a
    /// record's links there go with it), then the record; on a failure
    /// the record keeps what failed. Answers what was removed.
    pub fn remove_record(
        &mut self,
        loc: &Location,
        record: Record,
        label: &str,
    ) -> Result<Vec<String>, String> {
        let c = self.remove_owned(loc, &record, false, label);
        let of = record.attachment();
        let mut removed = self.finish_record(loc, record, c)?;
        removed.extend(self.release_network_shares(&of, label));
        Ok(removed)
    }

    /// [`Ctx::remove_record`] for several records, their links deleted
    /// together ([`Ctx::remove_owned_many`]). Answers, for each record (as
    /// it was), what was removed.
    pub fn remove_records(
        &mut self,
        records: Vec<(Location, Record)>,
        label: &str,
    ) -> Vec<(Record, Result<Vec<String>, String>)> {
        let refs: Vec<(&Location, &Record)> = records.iter().map(|(l, r)| (l, r)).collect();
        let cleanups = self.remove_owned_many(&refs, false, label);
        let mut out: Vec<(Record, Result<Vec<String>, String>)> = records
            .into_iter()
            .zip(cleanups)
            .map(|((loc, record), c)| (record.clone(), self.finish_record(&loc, record, c)))
            .collect();
        // Each network's shared links, once its last holder went: looked
        // for once per network, after all its records.
        let mut done: Vec<String> = Vec::new();
        for (record, result) in out.iter_mut().rev() {
            let Ok(removed) = result else { continue };
            if done.contains(&record.network) {
                continue;
            }
            removed.extend(self.release_network_shares(&record.attachment(), label));
            done.push(record.network.clone());
        }
        out
    }

    /// The end of [`Ctx::remove_record`], once `c` says what became of
    /// `record`'s entries.
    fn finish_record(
        &mut self,
        loc: &Location,
        mut record: Record,
        c: Cleanup,
    ) -> Result<Vec<String>, String> {
        for b in &record.borrowed {
            eprintln!(
                "wasmcni: host link {:?} was left in the namespace of {}/{}, which wasmcni \
                 cannot name; it returns to the node when that namespace goes (a physical \
                 device, unconfigured)",
                b.name, record.container_id, record.ifname
            );
        }
        if c.failures.is_empty() {
            loc.remove()
                .map_err(|e| format!("{}: {e}", loc.path().display()))?;
            return Ok(c.removed);
        }
        record.owned = c.kept;
        record.borrowed.clear();
        record.addresses.clear();
        if let Err(e) = loc.store(&record) {
            log::warn!("{}: {e}", loc.path().display());
        }
        Err(c.failures.join("; "))
    }
}

/// Whether `link` is the one entry `l` of the record of the attachment
/// with `mark` names: the same kind, and in the host namespace the mark
/// (or no alias at all, at the index the intent log saw the kernel give
/// it: made, and the process killed before it marked it).
fn owns(l: &OwnedLink, link: &super::bindings::Link, mark: &str) -> bool {
    link.kind == l.kind
        && (l.ns == Kind::Container
            || link.alias.as_deref() == Some(mark)
            || (l.intent && l.index == Some(link.index) && unmarked(link)))
}

/// Whether `link` is the record's attachment's ifb, unmarked, which the
/// intent log's last line, in this boot, named before the kernel made it
/// and never saw made (an ADD killed in between: `step:link-made`;
/// [`OwnedLink::named_unmade`]). A link a plugin names could be
/// one an admin made under that name since, and is left; but the ifb's
/// name is the host's, derived from the attachment alone
/// ([`crate::attachment::ifb_name`]), and was free when the log named it
/// ([`Ctx::intend_links`]): an unmarked ifb of that name is the
/// attachment's, as the reference's DEL takes it by name. (The hour soak
/// found such an ifb's DEL refused at every try, the pod left
/// SANDBOX_UNKNOWN.)
pub(super) fn host_named_ifb(l: &OwnedLink, link: &super::bindings::Link, record: &Record) -> bool {
    let a = record.attachment();
    l.named_unmade
        && l.ns == Kind::Host
        && record.boot_id == crate::record::boot_id().unwrap_or_default()
        && l.kind.as_deref() == Some("ifb")
        && link.kind == l.kind
        && unmarked(link)
        && l.name == crate::attachment::ifb_name(&a.network, &a.container_id)
}

/// Whether `link` carries no alias at all.
fn unmarked(link: &super::bindings::Link) -> bool {
    link.alias.as_deref().is_none_or(str::is_empty)
}

fn ns_name(ns: Kind) -> &'static str {
    match ns {
        Kind::Host => "host",
        Kind::Container => "container",
    }
}

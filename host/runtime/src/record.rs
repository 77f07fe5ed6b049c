//! The attachment record: what the host keeps from a successful ADD until
//! the attachment's DEL, because only the host may be trusted to put it
//! back.
//!
//! Today a record holds the links an ADD moved from the host namespace
//! into the container's (a `host-device` device), each with the journal's
//! inverses that return it exactly as it was: moved back under its old
//! name and index, then its per-link settings, MTU, MAC, alias, master and
//! bridge-port settings, promiscuity, admin state, addresses and routes.
//! The record is the host's: it lives under the state root, which no
//! plugin can name (a plugin has no files), and a plugin can neither read,
//! forge nor erase it. The attachment-record work (links, reservations,
//! rules of every attachment, host-enforced DEL and GC) grows this same
//! file.
//!
//! Layout: `<state root>/attachments/<network>/<container id>/<ifname>/<plugin>.json`
//! (state root `$WASMCNI_STATE_DIR`, default [`DEFAULT_STATE_DIR`];
//! directories 0700, files 0600). Each component is the name as given when
//! it is a plain file name, else a digest, so no name reaches outside its
//! directory. A record is written whole to a temporary file, then
//! renamed over the old one (not synced, see [`crate::state_fs::write_atomic`]): a `kill -9`
//! at any instant leaves the old record or the new one, never half of one.
//!
//! A record is valid for the boot it was written in (`boot_id`) and the
//! container namespace it names (its nsfs inode): a link index means
//! nothing in another boot or namespace.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use serde::{Deserialize, Serialize};

use crate::attachment::Attachment;
use crate::journal::Entry;
use crate::state_fs::{component, read_bounded, remove_pruning, state_dir, walk, write_atomic};

/// Where records live when `$WASMCNI_STATE_DIR` is not set.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/wasmcni";

/// The record format's version.
const VERSION: u32 = 1;

/// The largest record file read (a record holds a few links' state).
const MAX_RECORD: u64 = 4 << 20;

/// What the host keeps about one attachment's ADD by one plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Record {
    /// The format's version.
    pub version: u32,
    /// The network (the config's `name`).
    pub network: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// The plugin the runtime executed.
    pub plugin: String,
    /// `/proc/sys/kernel/random/boot_id` when it was written.
    pub boot_id: String,
    /// The nsfs inode of the container namespace of the ADD.
    pub netns: u64,
    /// Links the ADD moved from the host namespace into the container's.
    pub borrowed: Vec<Borrowed>,
    /// What the ADD made that is this attachment's alone, which the host
    /// removes at DEL and GC whatever the plugin does.
    #[serde(default, skip_serializing_if = "Owned::is_empty")]
    pub owned: Owned,
    /// What the ADD changed that the host's DEL would not take back (a
    /// native delegate's ADD, a change to a node link that is neither the
    /// attachment's nor the network's, ...): only the plugin's DEL can, so
    /// the host does not stand in for a failed one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncovered: Vec<String>,
    /// The attachment's addresses as the host established them in this
    /// incarnation's ADD (S13, [`crate::caps::authority`]): what a later
    /// plugin of the attachment (a chained `portmap`, `firewall`) may name
    /// as its container's, while the record applies (same boot, same
    /// container namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<std::net::IpAddr>,
    /// The host end of the attachment's veth as this incarnation's ADD
    /// found it (the grant's `adopt-peer`, [`crate::caps::authority`]):
    /// the one node link the plugin's later calls (a CHECK, the DEL, an
    /// ADD again) may adopt, whatever the container's names say by then.
    /// (Absent: no plugin of the ADD was granted `adopt-peer`, or an older
    /// wasmcni wrote the record.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<Adopted>,
}

/// What an ADD granted `adopt-peer` found as the host end of its veth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Adopted {
    /// `CNI_IFNAME` was no veth with its peer in the node namespace when
    /// the plugin started: there is nothing to adopt, now or later.
    Nothing,
    /// This link.
    Peer(AdoptedPeer),
}

impl Adopted {
    /// The adopted link, if any.
    pub fn peer(&self) -> Option<&AdoptedPeer> {
        match self {
            Adopted::Nothing => None,
            Adopted::Peer(p) => Some(p),
        }
    }
}

/// A node link adopted as the host end of an attachment's veth: known by
/// its index *and* its name then (an index is reused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AdoptedPeer {
    /// Its index in the node namespace.
    pub index: u32,
    /// Its name there when the ADD adopted it.
    pub name: String,
}

/// What an ADD made that belongs to its attachment alone: the links it
/// created (in the host namespace: those carrying the attachment's mark),
/// its IPAM reservations and its firewall rules. Everything else a plugin
/// can change is either on these links (addresses, routes, qdiscs,
/// per-link sysctls go with them), in the container's namespace (which goes
/// with the container), or shared by the network's attachments (a bridge,
/// its gateway address, `ip_forward`), which stays, as with the reference
/// plugins. Plugin state is found by its key ([`crate::plugin_state`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Owned {
    /// Links the ADD created, by namespace, name and kind (never by index
    /// alone: an index is reused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<OwnedLink>,
    /// Addresses reserved for the attachment (its container ID and
    /// ifname hold them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
    /// Firewall rules installed for the attachment, found by their tag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub firewall: Vec<FirewallRules>,
}

/// A link an ADD created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OwnedLink {
    /// Where: the host namespace (the link carries the attachment's mark
    /// in its alias, which is what DEL checks before deleting it) or the
    /// container's (the record's `netns`).
    pub ns: crate::netns::Kind,
    /// Its name when the ADD ended.
    pub name: String,
    /// `IFLA_INFO_KIND`.
    pub kind: Option<String>,
    /// The entry also stands for a link of that name and kind that carries
    /// no alias at all, if it is at [`OwnedLink::index`]: the last step of
    /// an ADD killed in this boot saw the kernel make the link there, and
    /// may have been killed before it marked it ([`Location::intend`]).
    /// Nothing else makes an unmarked node link the attachment's: a name
    /// named before it was made (wasmcni checks the name is free first)
    /// may be taken by someone else's link if the kernel refused to make
    /// it, or once it was renamed or deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub intent: bool,
    /// With `intent`: the index the kernel gave the link, read back by
    /// name right after the kernel acknowledged its creation and written
    /// to the intent log before the link is marked. An index is not
    /// reused until the namespace's counter wraps (2^31 links later), so
    /// an unmarked link there, of that name and kind, is the one the ADD
    /// made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The incarnation of the attachment that made it: the nsfs inode of
    /// the container namespace of its ADD (0: the record's `netns`). A
    /// late DEL of another incarnation leaves it alone (S15).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub netns: u64,
    /// Set on load only, never written: the entry comes from the intent
    /// log's last line (the step a kill cut off), in this boot, which
    /// named the link before the kernel made it and never saw it made (a
    /// kill in between: `step:link-made`). Such an entry makes no link
    /// the attachment's, but for its `ifb`, whose name the host derives
    /// from the attachment alone ([`crate::attachment::ifb_name`];
    /// `caps::owned::host_named_ifb`).
    #[serde(skip)]
    pub named_unmade: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl OwnedLink {
    /// The incarnation (container namespace inode) of the ADD that made it,
    /// in `record`.
    pub fn incarnation(&self, record: &Record) -> u64 {
        if self.netns != 0 {
            self.netns
        } else {
            record.netns
        }
    }
}

/// An address an ADD reserved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Reservation {
    /// The network's IPAM state directory.
    pub dir: PathBuf,
    /// The address.
    pub address: std::net::IpAddr,
}

/// Firewall rules an ADD installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FirewallRules {
    /// The attachment's hash, as the rules' tags carry it.
    pub attachment: String,
    /// Which kinds.
    pub kinds: Vec<FwKind>,
}

/// The largest intent log written (and read: [`MAX_RECORD`] is more):
/// a step past it is refused.
pub const MAX_INTENT: u64 = 1 << 20;

/// What a record read from an intent log counts as uncovered.
pub const INTERRUPTED: &str =
    "an ADD that was interrupted before it finished (only what it named before each step is known)";

/// The most entries of each kind one record holds.
pub const MAX_OWNED: usize = 256;

impl Owned {
    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty() && self.reservations.is_empty() && self.firewall.is_empty()
    }

    /// Drops the container links (their namespace is gone).
    fn drop_container_links(&mut self) {
        self.links.retain(|x| x.ns == crate::netns::Kind::Host);
    }

    /// Adds what `other` holds that this does not.
    pub fn merge(&mut self, other: Owned) {
        for l in other.links {
            match self
                .links
                .iter_mut()
                .find(|x| x.ns == l.ns && x.name == l.name && x.kind == l.kind)
            {
                // A later step saw it made at its index: that stands. Else
                // named by an ADD that marked it: the mark is required.
                Some(x) if l.intent && l.index.is_some() => {
                    x.intent = true;
                    x.index = l.index;
                }
                Some(x) => {
                    x.intent &= l.intent;
                    x.named_unmade |= l.named_unmade;
                    if !x.intent {
                        x.index = None;
                    }
                }
                None => self.links.push(l),
            }
        }
        for r in other.reservations {
            if !self.reservations.contains(&r) {
                self.reservations.push(r);
            }
        }
        for f in other.firewall {
            match self
                .firewall
                .iter_mut()
                .find(|x| x.attachment == f.attachment)
            {
                Some(x) => {
                    for k in f.kinds {
                        if !x.kinds.contains(&k) {
                            x.kinds.push(k);
                        }
                    }
                }
                None => self.firewall.push(f),
            }
        }
    }
}

/// A link an ADD moved from the host namespace into the container's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Borrowed {
    /// Its name in the host namespace before the ADD.
    pub name: String,
    /// Its index in the container namespace when the ADD ended.
    pub index: u32,
    /// What tells it from a link someone makes at that index later.
    pub identity: LinkIdentity,
    /// The inverses that put it back, oldest first, as the journal held
    /// them: its move back and every change recorded while it was in the
    /// host namespace (its state, addresses and routes).
    pub restore: Vec<Entry<serde_json::Value>>,
}

/// What tells a link apart from another that later takes its index in
/// the same namespace (a container's root can delete a virtual device and
/// make its own link at that index, `ip link add … index N`): its kind,
/// its permanent hardware address and parent device (a NIC's, which no one
/// can forge), and the link under it or its veth peer when that is in the
/// host namespace (where nothing in the container can put one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LinkIdentity {
    /// `IFLA_INFO_KIND` (none for a physical device).
    pub kind: Option<String>,
    /// `IFLA_PERM_ADDRESS`, when the device has one.
    pub perm_address: Option<Vec<u8>>,
    /// `IFLA_PARENT_DEV_BUS_NAME` and `IFLA_PARENT_DEV_NAME`
    /// (`pci/0000:00:04.0`), when it has a parent device.
    pub parent: Option<String>,
    /// `IFLA_LINK` (a veth's peer, a vlan's or macvlan's lower link) when
    /// that link is in the host namespace.
    pub host_link: Option<u32>,
}

/// The most links one record holds (a record is rewritten whole on every
/// change; an ADD takes a device or two).
pub const MAX_BORROWED: usize = 64;

/// Where a record lives, and how to write it.
#[derive(Debug, Clone)]
pub struct Location {
    /// The state root.
    root: PathBuf,
    /// Below it: `attachments/<network>/<container id>/<ifname>`.
    dir: PathBuf,
    /// `<plugin>.json`.
    file: String,
}

/// This boot's id.
pub fn boot_id() -> io::Result<String> {
    // Read once per process: ADD asks for it to reconcile, to write the
    // record and to check an old one.
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(b) = BOOT.get() {
        return Ok(b.clone());
    }
    let b = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_owned();
    Ok(BOOT.get_or_init(|| b).clone())
}

impl Location {
    /// The record of `attachment`'s ADD by `plugin`, below `root`.
    pub fn new(root: &Path, attachment: &Attachment, plugin: &str) -> Location {
        Location {
            root: root.to_owned(),
            dir: Path::new("attachments")
                .join(component(&attachment.network))
                .join(component(&attachment.container_id))
                .join(component(&attachment.ifname)),
            file: format!("{}.json", component(plugin)),
        }
    }

    /// The state root in force: `$WASMCNI_STATE_DIR`, else
    /// [`DEFAULT_STATE_DIR`].
    ///
    /// # Ambient Authority
    /// Reads the process environment (the runtime's, never the plugin's).
    pub fn root_from_env() -> PathBuf {
        crate::config::get()
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
    }

    /// Why the state root in force may not be trusted with records, if it
    /// may not (checked once per process): it, or a directory on the way
    /// to it, is writable by group or others, or owned by another user.
    /// A record gives authority (the host removes what it lists, and a
    /// plugin may name the addresses it holds as its container's), so an
    /// ADD is refused and every other command ignores the records.
    pub fn untrusted_root() -> Option<String> {
        static CHECK: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        CHECK
            .get_or_init(|| {
                let root = Location::root_from_env();
                crate::policy::check_trusted_dir(&root)
                    .err()
                    .map(|why| format!("state root {}: {why}", root.display()))
            })
            .clone()
    }

    /// The record's path, for messages.
    pub fn path(&self) -> PathBuf {
        self.root.join(&self.dir).join(&self.file)
    }

    /// The intent log's file name: `<plugin>.intent` beside the record.
    fn intent_file(&self) -> String {
        let stem = self.file.strip_suffix(".json").unwrap_or(&self.file);
        format!("{stem}.intent")
    }

    /// The intent log's path, for messages.
    pub fn intent_path(&self) -> PathBuf {
        self.root.join(&self.dir).join(self.intent_file())
    }

    /// Appends one line to the attachment's intent log before the ADD
    /// makes what `line` lists (a link, a reservation, firewall rules), so
    /// that a process killed at any instant after it leaves the means to
    /// remove it: [`Location::load`] reads the log with the record, and
    /// [`Location::store`] (the ADD's end, or its undo) and
    /// [`Location::remove`] take it away. The first line is written into
    /// an unnamed file that is then linked as the log, so the log never
    /// exists without it; each later line is one `write(2)` on the
    /// `O_APPEND` file. Not synced (as [`write_atomic`]): a kill cannot
    /// lose a line, and a line a crash tore is skipped.
    ///
    /// # Ambient Authority
    /// Creates the state root by path (the host's setting).
    pub fn intend(&self, line: &Record) -> io::Result<()> {
        // A newline first as well: a line a failed write left without its
        // end does not swallow this one.
        let mut text = vec![b'\n'];
        text.extend(serde_json::to_vec(line).map_err(io::Error::other)?);
        text.push(b'\n');
        // Bounded, so that every line is read back ([`MAX_INTENT`]).
        let bounded = |had: u64| {
            if had + text.len() as u64 > MAX_INTENT {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("an intent log of more than {MAX_INTENT} bytes"),
                ));
            }
            Ok(())
        };
        bounded(0)?;
        let dir = state_dir(&self.root, &self.dir)?;
        let name = self.intent_file();
        // The first line comes with the file, whole, or there is no file
        // ([`crate::state_fs::create_whole`]): a log created and then
        // written named nothing between the two, and a kill or a full
        // file system there left it so; a GC beside the ADD that met it
        // in that instant failed on it (the soak found both). A later line
        // is appended: the log is opened first, as most lines are later
        // ones.
        let mut opts = OpenOptions::new();
        opts.append(true);
        let mut tries = 0;
        let mut f = loop {
            match dir.open_with(&name, &opts) {
                Ok(f) => break f,
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
            // No log yet: made whole (false: made meanwhile; appended to).
            if crate::state_fs::create_whole(&dir, &name, &text, 0o600, "intent", ".wasmcni-tmp.")?
            {
                return Ok(());
            }
        };
        let had = f.metadata()?.len();
        bounded(had)?;
        f.write_all(&text).inspect_err(|_| {
            // A full file system (ENOSPC) or a quota: the log back as it
            // was (best effort: the write's error is the one that counts).
            let _ = f.set_len(had);
        })
    }

    /// Removes the intent log if it holds no whole line (a process killed
    /// between creating it and writing its first line): it names nothing
    /// the ADD made. For a DEL that found no record: the runtime does not
    /// run an ADD of the same attachment beside it.
    pub fn remove_empty_intent(&self) -> io::Result<()> {
        let path = self.dir.join(self.intent_file());
        match read_bounded(&self.root, &path, MAX_RECORD)? {
            Some(text) if first_record(&text).is_none() => self.remove_intent(),
            _ => Ok(()),
        }
    }

    /// What the intent log holds, folded into one record (`None`: no
    /// log, or no whole line in it). The record's boot and namespace are
    /// the last line's; a container link named under another namespace
    /// went with it and is left out. The intent lines cannot say what else
    /// the interrupted ADD changed, so the record counts that as uncovered.
    ///
    /// Only the links of the last line, of this boot, of an `interrupted`
    /// ADD may lack their mark (the step a kill cut off between making a
    /// link and marking it): every earlier step was marked, or undone, by
    /// a process that was still running, and in another boot a link of
    /// that name is someone else's. And only if that line is the one that
    /// says where the kernel made them ([`OwnedLink::index`]): a line
    /// written before the step names links that may never have been made
    /// (the kernel refused; the kill came first), whose names anyone may
    /// take since.
    ///
    /// What no line can prove: a kill after the kernel made a node link
    /// and before the index line is written (one `RTM_GETLINK` and one
    /// `write(2)`, a fraction of a millisecond) leaves a link that only
    /// its name and kind tie to the ADD, as they would tie an admin's
    /// link made under that name since. The host leaves it, and says so
    /// at DEL and GC ([`crate::caps`], `remove_owned`); a veth whose other
    /// end the ADD made in the container goes with that end at DEL; the
    /// attachment's `ifb`, whose name is the host's
    /// ([`OwnedLink::named_unmade`]), goes at DEL and GC.
    fn load_intent(&self, interrupted: bool) -> io::Result<Option<Record>> {
        let path = self.dir.join(self.intent_file());
        let Some(text) = read_bounded(&self.root, &path, MAX_RECORD)? else {
            return Ok(None);
        };
        let lines: Vec<Record> = text
            .split(|b| *b == b'\n')
            .filter_map(|l| serde_json::from_slice::<Record>(l).ok())
            .filter(|r| r.version == VERSION)
            .collect();
        let Some(last) = lines.last() else {
            return Ok(None);
        };
        let mut out = Record {
            owned: Owned::default(),
            borrowed: Vec::new(),
            uncovered: if interrupted {
                vec![INTERRUPTED.to_owned()]
            } else {
                Vec::new()
            },
            ..last.clone()
        };
        let boot = boot_id().unwrap_or_default();
        let n = lines.len();
        for (i, mut l) in lines.into_iter().enumerate() {
            if l.netns != out.netns || l.boot_id != out.boot_id {
                l.owned.drop_container_links();
            }
            let last = interrupted && i + 1 == n && l.boot_id == boot;
            for x in &mut l.owned.links {
                x.named_unmade = last && x.index.is_none();
                x.intent = last && x.index.is_some();
                if !x.intent {
                    x.index = None;
                }
            }
            out.owned.merge(l.owned);
        }
        Ok(Some(out))
    }

    /// The record, if there is one, with what the intent log adds (an ADD
    /// that was interrupted before it wrote its record).
    ///
    /// # Ambient Authority
    /// Opens the state root by path (the host's setting).
    pub fn load(&self) -> io::Result<Option<Record>> {
        self.load_as(true)
    }

    /// [`Location::load`]; `interrupted` says whether the intent log is
    /// an interrupted ADD's (else it is this process's own, in an ADD that
    /// is still running, and adds nothing to `uncovered`).
    pub fn load_as(&self, interrupted: bool) -> io::Result<Option<Record>> {
        Ok(with_intent(
            self.load_record()?,
            self.load_intent(interrupted)?,
        ))
    }

    /// Whether the record file is gone (`None`), quietly: a record that
    /// does not read is still there.
    pub fn load_record_quiet(&self) -> Option<()> {
        match self.load_record() {
            Ok(None) => None,
            _ => Some(()),
        }
    }

    /// The record file alone.
    fn load_record(&self) -> io::Result<Option<Record>> {
        let Some(text) = read_bounded(&self.root, &self.dir.join(&self.file), MAX_RECORD)? else {
            return Ok(None);
        };
        let record: Record = serde_json::from_slice(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", self.path().display()),
            )
        })?;
        if record.version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: record version {} (this wasmcni reads {VERSION})",
                    self.path().display(),
                    record.version
                ),
            ));
        }
        Ok(Some(record))
    }

    /// Writes `record` whole (temporary file, rename: [`write_atomic`]),
    /// or removes the file when it holds nothing.
    ///
    /// # Ambient Authority
    /// Creates the state root by path (the host's setting).
    pub fn store(&self, record: &Record) -> io::Result<()> {
        if record.borrowed.is_empty()
            && record.owned.is_empty()
            && record.addresses.is_empty()
            && record.adopted.is_none()
        {
            return self.remove();
        }
        if record.borrowed.len() > MAX_BORROWED {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("more than {MAX_BORROWED} links in one record"),
            ));
        }
        let o = &record.owned;
        if o.links
            .len()
            .max(o.reservations.len())
            .max(o.firewall.len())
            > MAX_OWNED
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("more than {MAX_OWNED} entries of one kind in one record"),
            ));
        }
        let text = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        if text.len() as u64 > MAX_RECORD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a record of {} bytes (at most {MAX_RECORD})", text.len()),
            ));
        }
        write_atomic(&self.root, &self.dir, &self.file, &text)?;
        // The record now holds what the intent log named.
        self.remove_intent()
    }

    /// Whether there is an intent log.
    pub fn has_intent(&self) -> bool {
        self.intent_path().exists()
    }

    /// Removes the intent log (not the directories: the record is there).
    fn remove_intent(&self) -> io::Result<()> {
        let root = match Dir::open_ambient_dir(&self.root, ambient_authority()) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        match root.remove_file(self.dir.join(self.intent_file())) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Moves an unreadable record aside (`.<file>.bad`, beside it) so that
    /// the attachment's DEL and ADD go on without it; a reviewer finds it
    /// there. Answers the new path.
    ///
    /// # Ambient Authority
    /// Opens the state root by path (the host's setting).
    pub fn quarantine(&self) -> io::Result<PathBuf> {
        let root = Dir::open_ambient_dir(&self.root, ambient_authority())?;
        let dir = root.open_dir(&self.dir)?;
        let bad = format!(".{}.bad", self.file);
        dir.rename(&self.file, &dir, &bad)?;
        Ok(self.root.join(&self.dir).join(bad))
    }

    /// The record, or none if there is none or it cannot be read (then it
    /// is moved aside, said on stderr: DEL must not fail forever on a file
    /// a crash or an older wasmcni left).
    pub fn load_or_quarantine(&self) -> Option<Record> {
        self.load_or_quarantine_as(true)
    }

    /// [`Location::load_or_quarantine`], as [`Location::load_as`].
    pub fn load_or_quarantine_as(&self, interrupted: bool) -> Option<Record> {
        let record = self.load_record().unwrap_or_else(|e| {
            let moved = self
                .quarantine()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|q| format!("not moved aside: {q}"));
            eprintln!("wasmcni: attachment record unreadable ({e}); set aside: {moved}");
            None
        });
        // An intent log that cannot be read is left where it is (the record
        // beside it is not to blame): what it names is reached next time.
        let intent = self.load_intent(interrupted).unwrap_or_else(|e| {
            eprintln!(
                "wasmcni: intent log unreadable ({e}): {}",
                self.intent_path().display()
            );
            None
        });
        with_intent(record, intent)
    }

    /// Removes the record, and the directories above it it leaves empty
    /// (up to the state root's `attachments`).
    ///
    /// # Ambient Authority
    /// Opens the state root by path (the host's setting).
    pub fn remove(&self) -> io::Result<()> {
        self.remove_intent()?;
        remove_pruning(&self.root, &self.dir, &self.file, Path::new("attachments"))
    }
}

/// The networks that have records below `root` (by their directory
/// names' records: a digest-named directory yields its records' network).
///
/// # Ambient Authority
/// Reads the state root by path (the host's setting).
pub fn networks(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(root.join("attachments")) else {
        return out;
    };
    for d in dirs.flatten() {
        let mut errors = Vec::new();
        let files = walk(&d.path(), RECORD_FILES, &mut errors);
        let network = files
            .iter()
            .find_map(|p| {
                let rel = p.strip_prefix(root).ok()?;
                let t = read_bounded(root, rel, MAX_RECORD).ok()??;
                first_record(&t)
            })
            .map(|r| r.network);
        if let Some(n) = network {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// `record` with what the intent log `intent` adds (its container links
/// only when both are of one container namespace in one boot).
fn with_intent(record: Option<Record>, intent: Option<Record>) -> Option<Record> {
    let (mut record, i) = match (record, intent) {
        (Some(r), Some(i)) => (r, i),
        (r, None) => return r,
        (None, i) => return i,
    };
    let mut owned = i.owned;
    if i.netns != record.netns || i.boot_id != record.boot_id {
        // Written in another container namespace: its links went with it.
        owned.drop_container_links();
    }
    record.owned.merge(owned);
    for u in i.uncovered {
        if !record.uncovered.contains(&u) {
            record.uncovered.push(u);
        }
    }
    Some(record)
}

/// The extensions of a record (`json`) and of an intent log (`intent`).
const RECORD_FILES: &[&str] = &["json", "intent"];

/// The record a file holds: the whole file, or an intent log's first
/// whole line.
fn first_record(text: &[u8]) -> Option<Record> {
    serde_json::from_slice(text).ok().or_else(|| {
        text.split(|b| *b == b'\n')
            .find_map(|l| serde_json::from_slice(l).ok())
    })
}

/// The records of `network` below `root`, each with its location (a file
/// that is not a record, or is not where its content says it belongs, is
/// reported and left alone). An intent log with no record beside it (an
/// ADD killed before its end) is listed as the record it folds into.
///
/// # Ambient Authority
/// Reads the state root by path (the host's setting).
pub fn list(root: &Path, network: &str) -> (Vec<(Location, Record)>, Vec<String>) {
    let mut errors = Vec::new();
    let mut out = Vec::new();
    let dir = root.join("attachments").join(component(network));
    for path in walk(&dir, RECORD_FILES, &mut errors) {
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let intent = path.extension().is_some_and(|x| x == "intent");
        if intent && path.with_extension("json").exists() {
            // Read with its record.
            continue;
        }
        let first = read_bounded(root, rel, MAX_RECORD).and_then(|t| {
            // Gone since the walk saw it (a DEL, or an ADD's end that
            // folded its intent log, beside this listing): nothing to list.
            let Some(t) = t else {
                return Ok(None);
            };
            if intent {
                // No whole line: it names nothing made (a crash tore its
                // first line, or an older wasmcni was killed before it
                // wrote it); the attachment's DEL removes it.
                return Ok(first_record(&t));
            }
            serde_json::from_slice(&t)
                .ok()
                .map(Some)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a record"))
        });
        let first: Record = match first {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                errors.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let loc = Location::new(root, &first.attachment(), &first.plugin);
        let at = if intent {
            loc.intent_path()
        } else {
            loc.path()
        };
        if at != path || first.network != network || first.version != VERSION {
            errors.push(format!(
                "{}: names {}, left alone",
                path.display(),
                at.display()
            ));
            continue;
        }
        match loc.load() {
            Ok(Some(r)) => out.push((loc, r)),
            Ok(None) => {}
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    (out, errors)
}

/// The records of one attachment (every plugin's, intent logs folded in),
/// for what they say of it; what cannot be read is skipped.
///
/// # Ambient Authority
/// Opens the state root by path (the host's setting).
pub fn of_attachment(root: &Path, attachment: &Attachment) -> Vec<Record> {
    if Location::untrusted_root().is_some() {
        return Vec::new();
    }
    let probe = Location::new(root, attachment, "x");
    let Ok(rd) = std::fs::read_dir(root.join(&probe.dir)) else {
        return Vec::new();
    };
    let mut plugins: Vec<String> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name
                .strip_suffix(".json")
                .or_else(|| name.strip_suffix(".intent"))?;
            Some(stem.to_owned())
        })
        .collect();
    plugins.sort();
    plugins.dedup();
    plugins
        .into_iter()
        .filter_map(|stem| {
            let loc = Location {
                file: format!("{stem}.json"),
                ..probe.clone()
            };
            loc.load_as(false).ok().flatten()
        })
        .filter(|r| {
            r.network == attachment.network
                && r.container_id == attachment.container_id
                && r.ifname == attachment.ifname
        })
        .collect()
}

/// The attachments with a record or intent log below `root`, as their
/// directory names (`<network>/<container id>/<ifname>`, each a
/// [`component`]), in network `network` (all networks: `None`): the
/// holders of what a network (or the node) shares (S16).
///
/// Lazy: directories are read as the iterator is advanced, so a caller
/// that stops at the first holder it looks for (`any`, `find`) reads a
/// few entries, not every attachment of the node.
///
/// # Ambient Authority
/// Reads the state root by path (the host's setting).
pub fn holders(root: &Path, network: Option<&str>) -> impl Iterator<Item = PathBuf> {
    let top = root.join("attachments");
    let nets: Vec<PathBuf> = if Location::untrusted_root().is_some() {
        Vec::new()
    } else {
        match network {
            Some(n) => vec![top.join(component(n))],
            None => std::fs::read_dir(&top)
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
        }
    };
    fn dirs(p: PathBuf) -> impl Iterator<Item = PathBuf> {
        std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
    }
    nets.into_iter()
        .flat_map(dirs)
        .flat_map(dirs)
        .filter(|ifname| {
            std::fs::read_dir(ifname).is_ok_and(|mut rd| {
                rd.any(|e| {
                    e.is_ok_and(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        !n.starts_with('.') && (n.ends_with(".json") || n.ends_with(".intent"))
                    })
                })
            })
        })
        .filter_map(move |ifname| ifname.strip_prefix(&top).ok().map(Path::to_path_buf))
}

/// The file under the state root listing every IPAM state directory an
/// ADD has opened on this node, one per line: where the host looks for
/// the reservations of every network (S13).
const STORES_FILE: &str = "ipam-stores";

/// The most state directories [`stores`] reads back.
const MAX_STORES: usize = 4096;

/// Adds `dir` (a network's IPAM state directory) to the node's list of
/// them, unless it is there: one `O_APPEND` write of one line.
///
/// # Ambient Authority
/// Opens the state root by path (the host's setting).
pub fn note_store(root: &Path, dir: &Path) -> io::Result<()> {
    if stores(root).iter().any(|d| d == dir) {
        return Ok(());
    }
    let line = dir
        .to_str()
        .filter(|l| !l.contains('\n') && dir.is_absolute())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a plain path"))?;
    let mut opts = OpenOptions::new();
    opts.append(true).create(true);
    {
        use cap_std::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let top = match Dir::open_ambient_dir(root, ambient_authority()) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(root)?;
            Dir::open_ambient_dir(root, ambient_authority())?
        }
        r => r?,
    };
    let mut f = top.open_with(STORES_FILE, &opts)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// The IPAM state directories of the node ([`note_store`]).
///
/// # Ambient Authority
/// Opens the state root by path (the host's setting).
pub fn stores(root: &Path) -> Vec<PathBuf> {
    if Location::untrusted_root().is_some() {
        return Vec::new();
    }
    let Ok(Some(text)) = read_bounded(root, Path::new(STORES_FILE), MAX_RECORD) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for line in String::from_utf8_lossy(&text).lines() {
        let p = PathBuf::from(line);
        if p.is_absolute() && !out.contains(&p) && out.len() < MAX_STORES {
            out.push(p);
        }
    }
    out
}

impl Record {
    /// An empty record for `attachment`'s ADD by `plugin` in the container
    /// namespace whose nsfs inode is `netns`.
    pub fn new(attachment: &Attachment, plugin: &str, netns: u64) -> io::Result<Record> {
        Ok(Record {
            version: VERSION,
            network: attachment.network.clone(),
            container_id: attachment.container_id.clone(),
            ifname: attachment.ifname.clone(),
            plugin: plugin.to_owned(),
            boot_id: boot_id()?,
            netns,
            borrowed: Vec::new(),
            owned: Owned::default(),
            uncovered: Vec::new(),
            addresses: Vec::new(),
            adopted: None,
        })
    }

    /// The attachment it speaks of.
    pub fn attachment(&self) -> Attachment {
        Attachment {
            network: self.network.clone(),
            container_id: self.container_id.clone(),
            ifname: self.ifname.clone(),
            ..Attachment::default()
        }
    }

    /// Whether the record speaks of this boot and of the container
    /// namespace with nsfs inode `netns`.
    pub fn applies_to(&self, netns: u64) -> bool {
        self.netns == netns && boot_id().is_ok_and(|b| b == self.boot_id)
    }
}

/// The kinds of rule, as tags and the journal name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FwKind {
    /// Port mappings.
    PortMap,
    /// ipMasq.
    Masquerade,
    /// Forward allowance.
    Forward,
    /// Bridge isolation.
    Isolation,
    /// MAC spoof check.
    MacSpoof,
}

#[cfg(test)]
mod tests;

//! IPAM reservation state on disk, in the reference `host-local` layout.
//!
//! `<data dir>/<network>/` holds one file per reserved address, named by
//! the address and containing `<container id>\r\n<ifname>`;
//! `last_reserved_ip.<range id>` holds the last address handed out in a
//! range set; `lock` is the file `flock`ed around every change (the
//! reference locks the same file, so native and wasm plugins exclude each
//! other).
//!
//! Stronger than the reference: a reservation file is created unnamed
//! (`O_TMPFILE`), written in full, and only then linked under its name
//! (`linkat`, which fails if the name exists, as `O_EXCL` does), so a
//! process killed at any instant leaves the reservation whole or absent,
//! never an empty file that holds an address forever. The last-reserved
//! file, a hint, is written in place (a `rename` would free a block: a
//! synchronous discard on a file system mounted with `discard`). Nothing is synced to disk (as in the
//! reference): a kill cannot lose what is in the page cache, and syncing
//! would cost every ADD a disk flush; after a power loss the state of
//! containers that no longer exist is stale anyway (GC releases it).
//!
//! Every path stays inside the data directory: it is opened as a
//! [`cap_std::fs::Dir`] below a root the policy grants, the network name is
//! a single validated component, and files are only ever named by an
//! address or a fixed name.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, OpenOptions};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

mod index;

/// The reference's default data directory.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// What separates the container ID from the interface name in a file.
const LINE_BREAK: &str = "\r\n";

/// The prefix of the last-reserved files.
const LAST_RESERVED: &str = "last_reserved_ip.";

/// The largest file read back (an ID is at most a few hundred bytes).
const MAX_FILE: u64 = 4096;

/// The prefix of wasmcni's temporary files in a network directory. Each
/// has a fixed name (`.wasmcni-tmp.last_reserved_ip.0`), written only under
/// the lock: a process killed at the wrong instant leaves at most that one
/// file, which the next writer removes and makes anew (`O_EXCL`: never
/// written through a link left under the name), and the next listing
/// under the lock removes (no listing of its own at every open: on a busy
/// network a listing of the directory costs more than the rest of a
/// reservation).
const TMP_PREFIX: &str = ".wasmcni-tmp.";

/// Who holds a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`; empty in files that hold only a container ID (written
    /// by old reference versions).
    pub ifname: String,
}

impl Owner {
    /// What a reservation file holds.
    fn contents(&self) -> String {
        format!("{}{LINE_BREAK}{}", self.container_id.trim(), self.ifname)
    }

    /// The container ID and interface name a file's contents name (the
    /// name empty in an old file that holds only the ID).
    fn parts(contents: &str) -> (&str, &str) {
        let t = contents.trim();
        match t.split_once(LINE_BREAK) {
            Some((id, ifname)) => (id.trim(), ifname),
            None => (t, ""),
        }
    }

    /// The owner a file's contents name.
    fn parse(contents: &str) -> Owner {
        let (id, ifname) = Owner::parts(contents);
        Owner {
            container_id: id.to_owned(),
            ifname: ifname.to_owned(),
        }
    }

    /// Whether a reservation held by `holder` is this attachment's: the
    /// same ID and interface, or (an old file) the same ID alone.
    pub fn holds(&self, holder: &Owner) -> bool {
        self.holds_parts(&holder.container_id, &holder.ifname)
    }

    /// [`Owner::holds`] for a file's contents.
    fn holds_contents(&self, contents: &str) -> bool {
        let (id, ifname) = Owner::parts(contents);
        self.holds_parts(id, ifname)
    }

    fn holds_parts(&self, id: &str, ifname: &str) -> bool {
        id == self.container_id.trim() && (ifname == self.ifname || ifname.is_empty())
    }
}

/// Why the state could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A name or path is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The lock was not free before the deadline.
    #[error("the lock of network {0:?} was held past the deadline")]
    Busy(String),
    /// The file system failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A valid network name: what libcni accepts
/// (`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`), at most 255 bytes, and never `.`
/// or `..` (so it is one plain path component).
pub fn valid_network_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 255
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// A valid range id: digits, as the reference's range-set index.
pub fn valid_range_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 8 && id.bytes().all(|b| b.is_ascii_digit())
}

/// The path of `data_dir` below the granted root that contains it, as
/// normal components, or `None` if no root contains it. Both must be
/// absolute and free of `.`/`..`; the match is by whole components.
pub fn under_root<'a>(data_dir: &Path, roots: &'a [PathBuf]) -> Option<(&'a Path, PathBuf)> {
    let normal = |p: &Path| {
        p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    };
    if !normal(data_dir) {
        return None;
    }
    roots.iter().filter(|r| normal(r)).find_map(|r| {
        data_dir
            .strip_prefix(r)
            .ok()
            .map(|rel| (r.as_path(), rel.to_owned()))
    })
}

/// The locked state of one network.
#[derive(Debug)]
pub struct NetworkStore {
    dir: Dir,
    /// Held open (and `flock`ed) for as long as the store lives.
    _lock: cap_std::fs::File,
    /// Whether `_lock` is held (not for [`NetworkStore::read_only`]).
    locked: bool,
    path: PathBuf,
    /// The owner index, where the store keeps one
    /// ([`NetworkStore::with_owner_index`]).
    index: Option<Indexed>,
}

/// A store's owner index ([`index`]): where it is kept, and once loaded
/// (or rebuilt) and checked against the directory, the reservations.
#[derive(Debug)]
struct Indexed {
    at: index::Location,
    files: RefCell<Option<BTreeMap<IpAddr, index::Entry>>>,
    /// Whether `files` differs from what is saved.
    dirty: std::cell::Cell<bool>,
}

impl Drop for NetworkStore {
    /// Saves the owner index, if it changed, with the directory's stamp as
    /// this store leaves it (the lock is still held: fields drop after).
    fn drop(&mut self) {
        let Some(ix) = &self.index else { return };
        if !ix.dirty.get() {
            return;
        }
        let Ok(files) = ix.files.try_borrow() else {
            return;
        };
        if let (Some(files), Ok(stamp)) = (files.as_ref(), index::Stamp::of(&self.dir)) {
            ix.at.save(stamp, files);
        }
    }
}

impl NetworkStore {
    /// Opens (creating it if needed) `<data_dir>/<network>` below `root`,
    /// where `rel` is `data_dir` relative to `root`, and takes its lock,
    /// waiting until `deadline`.
    ///
    /// # Ambient Authority
    /// Opens `root` by path: it comes from the policy, not the plugin.
    pub fn open(
        root: &Path,
        rel: &Path,
        network: &str,
        deadline: Instant,
    ) -> Result<NetworkStore, StoreError> {
        if !valid_network_name(network) {
            return Err(StoreError::Invalid(format!(
                "network name {network:?} is not a valid file name"
            )));
        }
        std::fs::create_dir_all(root)?;
        let root_dir = Dir::open_ambient_dir(root, ambient_authority())?;
        let mut builder = DirBuilder::new();
        builder.recursive(true);
        {
            use cap_std::fs::DirBuilderExt;
            builder.mode(0o755);
        }
        let net_rel = rel.join(network);
        root_dir.create_dir_with(&net_rel, &builder)?;
        let dir = root_dir.open_dir(&net_rel)?;
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true);
        {
            use cap_std::fs::OpenOptionsExt;
            opts.mode(0o644);
        }
        let lock = dir.open_with("lock", &opts)?;
        take_lock(&lock, deadline).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => StoreError::Busy(network.to_owned()),
            _ => StoreError::Io(e),
        })?;
        Ok(NetworkStore {
            dir,
            _lock: lock,
            locked: true,
            path: root.join(net_rel),
            index: None,
        })
    }

    /// Opens a network directory that [`NetworkStore::open`] opened
    /// before (the journal's undo), and takes its lock.
    ///
    /// # Ambient Authority
    /// `path` is one the host validated and recorded, never the plugin's.
    pub fn reopen(path: &Path, deadline: Instant) -> Result<NetworkStore, StoreError> {
        let dir = Dir::open_ambient_dir(path, ambient_authority())?;
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true);
        let lock = dir.open_with("lock", &opts)?;
        take_lock(&lock, deadline).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => StoreError::Busy(path.display().to_string()),
            _ => StoreError::Io(e),
        })?;
        Ok(NetworkStore {
            dir,
            _lock: lock,
            locked: true,
            path: path.to_owned(),
            index: None,
        })
    }

    /// Opens a network directory opened before, to read it without the
    /// lock (checking host routes against the reservations).
    ///
    /// # Ambient Authority
    /// As [`NetworkStore::reopen`].
    pub fn read_only(path: &Path) -> Result<NetworkStore, StoreError> {
        let dir = Dir::open_ambient_dir(path, ambient_authority())?;
        let lock = dir.open("lock")?;
        Ok(NetworkStore {
            dir,
            _lock: lock,
            locked: false,
            path: path.to_owned(),
            index: None,
        })
    }

    /// Keeps the network's owner index ([`index`]) in state root `root`:
    /// [`NetworkStore::owned_by`] then reads only the attachment's own
    /// files, and every change made through this store updates the index.
    /// Only for a store under the lock.
    pub fn with_owner_index(mut self, root: &Path) -> NetworkStore {
        if self.locked {
            self.index = Some(Indexed {
                at: index::Location::new(root, &self.path),
                files: RefCell::new(None),
                dirty: std::cell::Cell::new(false),
            });
        }
        self
    }

    /// Puts a released reservation back (the journal's undo), leaving the
    /// last-reserved record alone. False if the address is held.
    pub fn restore(&self, ip: IpAddr, owner: &Owner) -> io::Result<()> {
        let made = self.change(
            || self.create_whole(&ip.to_string(), owner.contents().as_bytes()),
            |made, files| self.note_made(*made, ip, owner, files),
        )?;
        if made {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(libc::EADDRINUSE))
        }
    }

    /// The network's directory (for messages and for the journal).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reserves `ip` for `owner`, and records it as the last reserved of
    /// range set `range_id`. False if the address is held already.
    pub fn reserve(&self, ip: IpAddr, owner: &Owner, range_id: &str) -> io::Result<bool> {
        if !valid_range_id(range_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad range id"));
        }
        self.change(
            || {
                if !self.create_whole(&ip.to_string(), owner.contents().as_bytes())? {
                    return Ok(false);
                }
                if let Err(e) = self.write_last_reserved(range_id, Some(ip)) {
                    let _ = self.dir.remove_file(ip.to_string());
                    return Err(e);
                }
                Ok(true)
            },
            |made, files| self.note_made(*made, ip, owner, files),
        )
    }

    /// Enters the reservation of `ip` for `owner` just made (if `made`) in
    /// the index `files`.
    fn note_made(
        &self,
        made: bool,
        ip: IpAddr,
        owner: &Owner,
        files: &mut BTreeMap<IpAddr, index::Entry>,
    ) -> io::Result<()> {
        if made {
            let st = nix::sys::stat::fstatat(
                self.dir.as_fd(),
                ip.to_string().as_str(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?;
            files.insert(
                ip,
                index::Entry {
                    ino: st.st_ino,
                    contents: owner.contents(),
                },
            );
        }
        Ok(())
    }

    /// Makes a change to the directory (`change`), keeping the owner
    /// index in step where the store keeps one: loaded before if the saved
    /// one holds (a change never reads every file to build one), so that it
    /// describes the directory the change starts from; `update` enters the
    /// change. The index is saved once, when the store is dropped (a GC's
    /// thousand releases write it once), with the directory's stamp as the
    /// changes left it. Without a loaded index, or when the change fails,
    /// the saved one no longer matches the directory's stamp, and the next
    /// call that needs it builds it again.
    fn change<T>(
        &self,
        change: impl FnOnce() -> io::Result<T>,
        update: impl FnOnce(&T, &mut BTreeMap<IpAddr, index::Entry>) -> io::Result<()>,
    ) -> io::Result<T> {
        let Some(ix) = &self.index else {
            return change();
        };
        if let Err(e) = self.load_index(ix, true, false) {
            log::debug!("IPAM owner index of {}: {e}", self.path.display());
        }
        let out = change();
        let mut files = ix.files.borrow_mut();
        let updated = match (&out, files.as_mut()) {
            (Ok(v), Some(f)) => update(v, f).is_ok(),
            _ => false,
        };
        if !updated {
            *files = None;
        }
        ix.dirty.set(updated);
        out
    }

    /// Loads the owner index `ix` unless loaded: the saved one if it still
    /// describes the directory (and `trust_saved`), else, with `rebuild`,
    /// one built from every reservation file (saved when the store is
    /// dropped, if every file could be read), else none.
    fn load_index(&self, ix: &Indexed, trust_saved: bool, rebuild: bool) -> io::Result<()> {
        if ix.files.borrow().is_some() {
            return Ok(());
        }
        let listing = self.listing()?;
        // After the listing: it removes what a killed process left.
        let stamp = index::Stamp::of(&self.dir)?;
        let inodes: Vec<(IpAddr, u64)> = listing.iter().map(|(ip, _, ino)| (*ip, *ino)).collect();
        let saved = if trust_saved {
            ix.at.load(stamp, &inodes)
        } else {
            None
        };
        let files = match saved {
            Some(files) => files,
            None if rebuild => {
                let mut files = BTreeMap::new();
                for (ip, name, ino) in &listing {
                    if let Ok(contents) = self.read(name) {
                        files.insert(
                            *ip,
                            index::Entry {
                                ino: *ino,
                                contents,
                            },
                        );
                    }
                }
                // A file that could not be read (or two names of one
                // address) would make the saved index fail every check:
                // such an index serves this call only.
                ix.dirty.set(files.len() == listing.len());
                files
            }
            None => return Ok(()),
        };
        *ix.files.borrow_mut() = Some(files);
        Ok(())
    }

    /// The reservations `me` holds ([`Owner::holds`]). With an owner index
    /// only the files it names as `me`'s are read, and each is read back:
    /// what the file says is what is returned (and acted on), not what the
    /// index says; a file it is wrong about, or that cannot be read, has
    /// the index built again from every file, and then every file read as
    /// without one.
    pub fn owned_by(&self, me: &Owner) -> io::Result<Vec<(IpAddr, Owner)>> {
        if let Some(ix) = &self.index {
            for trust_saved in [true, false] {
                self.load_index(ix, trust_saved, true)?;
                let candidates: Vec<(IpAddr, Owner)> = ix
                    .files
                    .borrow()
                    .iter()
                    .flatten()
                    .filter(|(_, e)| e.held_by(me))
                    .map(|(ip, e)| (*ip, e.owner()))
                    .collect();
                let mut out = Vec::with_capacity(candidates.len());
                let mut stale = false;
                for (ip, indexed) in candidates {
                    match self.holder(ip) {
                        Ok(holder) => {
                            stale |= holder.as_ref() != Some(&indexed);
                            out.extend(holder.filter(|h| me.holds(h)).map(|h| (ip, h)));
                        }
                        Err(_) => stale = true,
                    }
                }
                if !stale {
                    return Ok(out);
                }
                *ix.files.borrow_mut() = None;
                ix.dirty.set(false);
            }
        }
        // Every file, skipping one that cannot be read.
        Ok(self
            .list()?
            .into_iter()
            .filter(|(_, o)| me.holds(o))
            .collect())
    }

    /// Creates file `name` holding `data`, whole or not at all; false if
    /// the name exists ([`crate::state_fs::create_whole`]).
    fn create_whole(&self, name: &str, data: &[u8]) -> io::Result<bool> {
        crate::state_fs::create_whole(&self.dir, name, data, 0o644, "ipam", TMP_PREFIX)
    }

    /// The last address reserved in range set `range_id`.
    pub fn last_reserved(&self, range_id: &str) -> io::Result<Option<IpAddr>> {
        if !valid_range_id(range_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad range id"));
        }
        match self.read(&format!("{LAST_RESERVED}{range_id}")) {
            Ok(s) => Ok(s.trim().parse().ok()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets (or, with `None`, removes) the last reserved address of range
    /// set `range_id`: in place (see `write_last_reserved`).
    pub fn set_last_reserved(&self, range_id: &str, ip: Option<IpAddr>) -> io::Result<()> {
        // The index names reservations only: this leaves it alone.
        self.change(|| self.write_last_reserved(range_id, ip), |_, _| Ok(()))
    }

    /// [`NetworkStore::set_last_reserved`], leaving the index alone.
    fn write_last_reserved(&self, range_id: &str, ip: Option<IpAddr>) -> io::Result<()> {
        if !valid_range_id(range_id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad range id"));
        }
        let name = format!("{LAST_RESERVED}{range_id}");
        let Some(ip) = ip else {
            return match self.dir.remove_file(&name) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        };
        let text = ip.to_string();
        // In place, not by rename: replacing the file frees its block, and
        // on a file system mounted with `discard` that is a synchronous
        // discard inside the `rename` (0.15 ms median, up to 100 ms
        // measured on these machines). The file is a hint where the next
        // search starts: a kill between the write and the cut leaves the
        // new address with the old one's last characters, which reads as
        // an address or as none (the range's start), never a reservation.
        if let Some(f) = crate::state_fs::open_in_place(&self.dir, &name, 0o644)? {
            use std::os::unix::fs::FileExt;
            f.write_all_at(text.as_bytes(), 0)?;
            crate::fault::at("ipam", "last-written");
            f.set_len(text.len() as u64)?;
            crate::fault::at("ipam", "last-cut");
            return Ok(());
        }
        // A symlink, a linked file or anything but a regular file under
        // the name: replaced, never written through.
        let tmp = format!("{TMP_PREFIX}{name}");
        let mut f = crate::state_fs::create_fresh(&self.dir, &tmp, 0o644)?;
        f.write_all(text.as_bytes())?;
        drop(f);
        crate::fault::at("ipam", "last-written");
        self.dir.rename(&tmp, &self.dir, &name)?;
        crate::fault::at("ipam", "last-renamed");
        Ok(())
    }

    /// Reads file `name` of the network directory: one `openat` (never
    /// following a symlink, never leaving the directory: `name` is one
    /// component, an address or a fixed name), one `read`, one `close` —
    /// a listing reads every reservation, so this is the hot loop of an
    /// ADD on a busy network.
    fn read(&self, name: &str) -> io::Result<String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad file name"));
        }
        let fd = nix::fcntl::openat(
            self.dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )?;
        // A regular file this small comes whole in one read.
        let mut buf = [0u8; MAX_FILE as usize];
        let n = nix::unistd::read(&fd, &mut buf)?;
        if n == buf.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "file too large"));
        }
        String::from_utf8(buf[..n].to_vec())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Who holds `ip`, if anyone.
    pub fn holder(&self, ip: IpAddr) -> io::Result<Option<Owner>> {
        match self.read(&ip.to_string()) {
            Ok(s) => Ok(Some(Owner::parse(&s))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every reservation: each file named by an address.
    pub fn list(&self) -> io::Result<Vec<(IpAddr, Owner)>> {
        self.list_within(None)
    }

    /// The reservations of addresses in `net` (all if `None`): only their
    /// files are read, and for a single address only its own.
    pub fn list_within(&self, net: Option<ipnet::IpNet>) -> io::Result<Vec<(IpAddr, Owner)>> {
        if let Some(n) = net.filter(|n| n.prefix_len() == n.max_prefix_len()) {
            let ip = n.addr();
            return Ok(self.holder(ip)?.map(|o| (ip, o)).into_iter().collect());
        }
        let mut out = Vec::new();
        for (ip, name, _) in self.listing()? {
            if net.is_some_and(|n| !n.contains(&ip)) {
                continue;
            }
            // A file can go between listing and reading (not under our
            // lock, but a native plugin that ignores it): skip it.
            if let Ok(s) = self.read(&name) {
                out.push((ip, Owner::parse(&s)));
            }
        }
        out.sort_by_key(|(ip, _)| *ip);
        Ok(out)
    }

    /// The reservation files, as listed (one directory read, no file
    /// opened): address, name, inode. Under the lock, removes what a
    /// killed process left.
    fn listing(&self) -> io::Result<Vec<(IpAddr, String, u64)>> {
        use std::os::unix::fs::DirEntryExt;
        let mut out = Vec::new();
        for entry in self.dir.entries()? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(ip) = name.parse::<IpAddr>() else {
                // What a killed process left; under the lock no one is
                // writing it.
                if self.locked && name.starts_with(TMP_PREFIX) {
                    let _ = self.dir.remove_file(&name);
                }
                continue;
            };
            out.push((ip, name, entry.ino()));
        }
        Ok(out)
    }

    /// Removes the reservation of `ip` (nothing if there is none).
    pub fn release(&self, ip: IpAddr) -> io::Result<()> {
        self.change(
            || match self.dir.remove_file(ip.to_string()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
            |(), files| {
                files.remove(&ip);
                Ok(())
            },
        )
    }
}

/// `flock(LOCK_EX)` on `file`, waiting at most until `deadline`. Free
/// locks are taken at once; a held one is waited for by a thread blocked
/// in `flock` on a second descriptor of the same open file, so the lock is
/// taken the moment it is released (polling would leave it idle between
/// polls, and 64 ADDs at once would queue behind the sleeps), while this
/// thread stops waiting at the deadline. (A blocking `flock` here could
/// outlive the deadline: the alarm that ends the plugin restarts
/// interrupted calls.) A waiter that gives up leaves its thread blocked;
/// the process exits soon after, and the lock, if it got it, with it.
pub(crate) fn take_lock(file: &impl AsFd, deadline: Instant) -> io::Result<()> {
    let taken = take_lock_inner(file, deadline);
    if taken.is_ok() {
        // What another invocation changed before it let go is read
        // afresh, not from a link answer kept before
        // ([`crate::netlink::Netlink::keep_links`]).
        crate::netlink::note_change();
    }
    taken
}

fn take_lock_inner(file: &impl AsFd, deadline: Instant) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own; no pointers involved.
    if unsafe { libc::flock(file.as_fd().as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Err(e);
    }
    // The same open file description: a lock taken through the copy is
    // the lock of `file`.
    let copy = file.as_fd().try_clone_to_owned()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("wasmcni-lock".into())
        .spawn(move || {
            let r = loop {
                // SAFETY: as above, on the copy this thread owns.
                if unsafe { libc::flock(copy.as_raw_fd(), libc::LOCK_EX) } == 0 {
                    break Ok(());
                }
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    break Err(e);
                }
            };
            let _ = tx.send(r);
        })?;
    let wait = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(wait) {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "lock held")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn store(dir: &Path) -> NetworkStore {
        NetworkStore::open(
            dir,
            Path::new(""),
            "net1",
            Instant::now() + Duration::from_secs(5),
        )
        .expect("open")
    }

    fn me() -> Owner {
        Owner {
            container_id: "ctr1".into(),
            ifname: "eth0".into(),
        }
    }

    /// `set_last_reserved` of range "0" to `ip`, through a store of its own
    /// (a store is not shared between threads).
    fn s_set(dir: &Path, ip: IpAddr) -> io::Result<()> {
        store(dir.parent().expect("data dir")).set_last_reserved("0", Some(ip))
    }

    /// The last-reserved file is written in place (no rename, which frees
    /// a block), but never through a symlink or a hard link planted under
    /// its name, or under its temporary file's, and never blocked by a
    /// FIFO: those are replaced, and what they point at is untouched.
    #[test]
    fn the_last_reserved_file_is_written_in_place_never_through_a_link() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tmp");
        let s = store(tmp.path());
        let dir = tmp.path().join("net1");
        let last = dir.join("last_reserved_ip.0");
        let a: IpAddr = "10.1.0.200".parse().expect("ip");
        let b: IpAddr = "10.1.0.9".parse().expect("ip");
        s.set_last_reserved("0", Some(a)).expect("set");
        let ino = std::fs::metadata(&last).expect("last").ino();
        s.set_last_reserved("0", Some(b)).expect("set");
        assert_eq!(
            std::fs::metadata(&last).expect("last").ino(),
            ino,
            "in place"
        );
        assert_eq!(std::fs::read_to_string(&last).expect("last"), "10.1.0.9");
        assert_eq!(s.last_reserved("0").expect("last"), Some(b));
        // Each write below in a store of its own (a thread's): this one
        // would hold the network's lock.
        drop(s);
        let victim = dir.join("10.1.0.7");
        for link in ["symlink", "hard link", "FIFO"] {
            std::fs::remove_file(&last).expect("rm");
            std::fs::write(&victim, "ctr9\r\neth0").expect("victim");
            match link {
                "symlink" => std::os::unix::fs::symlink("10.1.0.7", &last).expect("symlink"),
                "hard link" => std::fs::hard_link(&victim, &last).expect("hard link"),
                // An open for writing would wait for a reader, forever.
                _ => nix::unistd::mkfifo(&last, Mode::from_bits_truncate(0o600)).expect("fifo"),
            }
            // And the temporary file's name a link to the victim too: made
            // anew, never written through.
            let temp = dir.join(".wasmcni-tmp.last_reserved_ip.0");
            let _ = std::fs::remove_file(&temp);
            std::os::unix::fs::symlink("10.1.0.7", &temp).expect("symlink");
            // In a thread, bounded: a FIFO that blocked the open would
            // hang the test, not fail it.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    let _ = tx.send(s_set(&dir, a));
                });
                let done = rx.recv_timeout(Duration::from_secs(10));
                if done.is_err() {
                    // Unblock the writer (a reader on the FIFO) so the
                    // scope can end, then fail.
                    let _ = std::fs::File::open(&last);
                    panic!("writing over a {link} blocked");
                }
                done.expect("sent").expect("set");
            });
            assert_eq!(
                std::fs::read_to_string(&victim).expect("victim"),
                "ctr9\r\neth0",
                "written through a {link}"
            );
            let meta = std::fs::symlink_metadata(&last).expect("last");
            assert!(meta.is_file() && meta.nlink() == 1, "{link} not replaced");
            assert_eq!(store(tmp.path()).last_reserved("0").expect("last"), Some(a));
            std::fs::remove_file(&victim).expect("rm");
        }
    }

    #[test]
    fn reservations_are_files_in_the_reference_layout() {
        let tmp = tempfile::tempdir().expect("tmp");
        let s = store(tmp.path());
        let ip: IpAddr = "10.1.0.2".parse().expect("ip");
        assert!(s.reserve(ip, &me(), "0").expect("reserve"));
        assert!(!s.reserve(ip, &me(), "0").expect("reserve again"));
        let dir = tmp.path().join("net1");
        assert_eq!(
            std::fs::read_to_string(dir.join("10.1.0.2")).expect("file"),
            "ctr1\r\neth0"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("last_reserved_ip.0")).expect("file"),
            "10.1.0.2"
        );
        assert!(dir.join("lock").exists());
        assert_eq!(s.last_reserved("0").expect("last"), Some(ip));
        assert_eq!(s.list().expect("list"), vec![(ip, me())]);
        s.release(ip).expect("release");
        s.release(ip).expect("release twice");
        assert!(s.list().expect("list").is_empty());
        let names: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
            .collect();
        assert!(!names.iter().any(|n| n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn the_owner_index_reads_only_the_owners_files_and_sees_other_writers() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tempfile::tempdir().expect("state root");
        let indexed = || store(tmp.path()).with_owner_index(root.path());
        let dir = tmp.path().join("net1");
        let ip = |s: &str| -> IpAddr { s.parse().expect("ip") };
        // A file's contents changed in place: same inode, the directory's
        // stamp unchanged.
        let rewrite = |name: &str, contents: &[u8]| {
            std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(dir.join(name))
                .and_then(|mut f| f.write_all(contents))
                .expect("rewrite");
        };
        let other = Owner {
            container_id: "ctr2".into(),
            ifname: "eth0".into(),
        };
        {
            let s = indexed();
            assert!(s.owned_by(&me()).expect("owned").is_empty());
            assert!(s.reserve(ip("10.1.0.2"), &me(), "0").expect("reserve"));
            assert!(s.reserve(ip("10.1.0.3"), &other, "0").expect("reserve"));
            assert_eq!(
                s.owned_by(&me()).expect("owned"),
                vec![(ip("10.1.0.2"), me())]
            );
        }
        assert!(
            root.path()
                .join("ipam-index")
                .read_dir()
                .expect("index")
                .count()
                == 1
        );
        // Rewritten in place (same inode, the directory unchanged: what
        // neither implementation does; each makes a reservation whole under
        // its name): the index is what was consulted, not every file. This
        // is what makes an ADD read only its own reservations.
        rewrite("10.1.0.3", b"ctr1\r\neth0");
        assert_eq!(
            indexed().owned_by(&me()).expect("owned"),
            vec![(ip("10.1.0.2"), me())]
        );
        std::fs::write(dir.join("10.1.0.3"), "ctr2\r\neth0").expect("put back");
        // A reservation made by another implementation (the reference's
        // layout, no index of its own): seen.
        std::fs::write(dir.join("10.1.0.4"), "ctr1\r\neth0").expect("reference");
        assert_eq!(
            indexed().owned_by(&me()).expect("owned"),
            vec![(ip("10.1.0.2"), me()), (ip("10.1.0.4"), me())]
        );
        // Released and taken by another holder elsewhere: gone from me.
        std::fs::remove_file(dir.join("10.1.0.4")).expect("release");
        std::fs::write(dir.join("10.1.0.4"), "ctr3\r\neth0").expect("retake");
        assert_eq!(
            indexed().owned_by(&me()).expect("owned"),
            vec![(ip("10.1.0.2"), me())]
        );
        // The index names a file as mine that another holds (rewritten in
        // place): never returned, and the index is built again.
        rewrite("10.1.0.2", b"ctr3\r\neth1");
        assert!(indexed().owned_by(&me()).expect("owned").is_empty());
        std::fs::write(dir.join("10.1.0.2"), "ctr1\r\neth0").expect("put back");
        std::fs::remove_file(dir.join("10.1.0.4")).expect("release");
        // Released through the store: the index follows, and goes with the
        // last reservation.
        {
            let s = indexed();
            s.release(ip("10.1.0.2")).expect("release");
            assert!(s.owned_by(&me()).expect("owned").is_empty());
        }
        assert!(indexed().owned_by(&me()).expect("owned").is_empty());
        let s = indexed();
        assert_eq!(
            s.owned_by(&other).expect("owned"),
            vec![(ip("10.1.0.3"), other.clone())]
        );
        s.release(ip("10.1.0.3")).expect("release");
        drop(s);
        let saved = || {
            root.path()
                .join("ipam-index")
                .read_dir()
                .expect("index dir")
                .count()
        };
        assert_eq!(saved(), 0, "the index of a network that holds nothing");
        // A name no file can be read under (a directory): an index built
        // without it would fail every check, so it serves its call only.
        std::fs::create_dir(dir.join("10.1.0.9")).expect("unreadable");
        let s = indexed();
        assert!(s.reserve(ip("10.1.0.5"), &me(), "0").expect("reserve"));
        assert_eq!(
            s.owned_by(&me()).expect("owned"),
            vec![(ip("10.1.0.5"), me())]
        );
        drop(s);
        assert_eq!(saved(), 0, "an index that cannot hold was saved");
    }

    #[test]
    fn old_files_with_only_an_id_belong_to_it() {
        let old = Owner::parse("ctr1\n");
        assert_eq!(old.ifname, "");
        assert!(me().holds(&old));
        assert!(!me().holds(&Owner::parse("ctr1\r\neth1")));
        assert!(me().holds(&Owner::parse(" ctr1\r\neth0")));
        assert!(!me().holds(&Owner::parse("ctr2")));
        // Asked of a file's contents directly (the owner index's entries).
        for (contents, mine) in [
            ("ctr1\r\neth0", true),
            ("ctr1\r\neth0\r\n", true),
            (" ctr1 \r\neth0", true),
            ("ctr1\n", true),
            ("ctr1", true),
            ("ctr1\r\n", true),
            ("ctr1\r\neth1", false),
            ("ctr1\r\n eth0", false),
            ("ctr1\neth0", false),
            ("ctr2\r\neth0", false),
            ("", false),
        ] {
            assert_eq!(me().holds_contents(contents), mine, "{contents:?}");
            assert_eq!(me().holds(&Owner::parse(contents)), mine, "{contents:?}");
        }
    }

    #[test]
    fn names_and_roots() {
        assert!(valid_network_name("podman-default_1.0"));
        for bad in ["", ".", "..", "../x", "a/b", "-x", "a b", "a\0"] {
            assert!(!valid_network_name(bad), "{bad:?}");
        }
        let roots = vec![PathBuf::from("/var/lib/cni/networks")];
        let rel = |p: &str| under_root(Path::new(p), &roots).map(|(_, r)| r);
        assert_eq!(rel("/var/lib/cni/networks"), Some(PathBuf::new()));
        assert_eq!(rel("/var/lib/cni/networks/x"), Some(PathBuf::from("x")));
        assert_eq!(rel("/var/lib/cni/networks2"), None);
        assert_eq!(rel("/var/lib/cni/networks/../../etc"), None);
        assert_eq!(rel("var/lib/cni/networks"), None);
        assert_eq!(rel("/etc"), None);
    }

    #[test]
    fn the_lock_excludes_a_second_holder_until_the_deadline() {
        let tmp = tempfile::tempdir().expect("tmp");
        let _held = store(tmp.path());
        let t = Instant::now();
        let r = NetworkStore::open(
            tmp.path(),
            Path::new(""),
            "net1",
            Instant::now() + Duration::from_millis(100),
        );
        assert!(matches!(r, Err(StoreError::Busy(_))), "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}

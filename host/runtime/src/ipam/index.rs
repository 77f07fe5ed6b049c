//! The owner index of one network's IPAM state: which attachment holds
//! which reservation, kept in the state root, so that an ADD (which
//! refuses a second address for one attachment) and a DEL (which releases
//! by owner) read their own attachment's files, not every reservation of
//! the network: at a thousand containers, a thousand `openat`s each.
//!
//! The directory is shared: the reference host-local writes the same
//! layout (a node switched between the two, or both in use), and its
//! reservations have no record. So the index is trusted only while it
//! describes the directory as it is now, which every call checks:
//!
//! - the same directory (device and inode);
//! - the same change time: creating, removing or renaming any file in it
//!   changes the directory's, whoever does it;
//! - the same reservation files, each under the same name with the same
//!   inode (from the listing every call makes anyway; a file made by
//!   `O_EXCL` or `linkat` is never rewritten in place, by either side).
//!
//! Every writer changes the directory under the network's lock, and wasmcni
//! reads and writes the index under it. When any check fails, the index is
//! rebuilt from the files (the reads it saves) and saved again.
//!
//! What a stale index could still miss: a reservation removed and made
//! again under the same name, reusing its inode, by another writer within
//! one tick of the kernel's coarse clock after wasmcni's last change, on a
//! kernel or file system without multigrain timestamps (Linux 6.13 gives a
//! change that follows a `stat` a fine-grained time of its own). So what
//! the index says a file holds is read back before it is acted upon: a
//! stale index can at worst miss a reservation (a second address, as a
//! reference `GetByID` racing a writer would), never release or report
//! another attachment's. (Measured on Linux 6.18: ext4 gave every change
//! after a `stat` a new change time, in 2000 of 2000 tries; tmpfs kept the
//! time for a removal and re-creation, but does not reuse inode numbers at
//! once, so the listing tells.)
//!
//! The file is `<state root>/ipam-index/<digest of the directory's path>`,
//! postcard (a format version, the stamp, then address, inode and contents
//! of each file: read and written whole by every ADD and DEL, so its cost
//! per reservation counts at a thousand; JSON took three times the
//! instructions), written over its old bytes and cut to length
//! ([`crate::state_fs::write_in_place`]: a rename would free a block, a
//! synchronous discard on a file system mounted with `discard`); one that
//! does not parse to its last byte, torn or mixed with the old bytes by a
//! kill or a power loss, is rebuilt, and one that parses but names another
//! set of files fails the listing check. It is removed when the network holds no
//! reservation.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Owner;

/// The state root's directory of index files.
const DIR: &str = "ipam-index";

/// The largest index file read (about 100 bytes a reservation).
const MAX_INDEX: u64 = 64 << 20;

/// What identifies the directory's contents as of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    /// The directory `dir`'s stamp now.
    pub(super) fn of(dir: &impl AsFd) -> io::Result<Stamp> {
        let st = nix::sys::stat::fstat(dir.as_fd())?;
        Ok(Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: st.st_ctime,
            ctime_nsec: st.st_ctime_nsec,
        })
    }
}

/// One reservation file: its inode, and what it holds (as the file
/// holds it; [`Owner::parse`] reads it when asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) ino: u64,
    pub(super) contents: String,
}

impl Entry {
    /// Whether the reservation is `me`'s ([`Owner::holds`]), without
    /// making an owner of it.
    pub(super) fn held_by(&self, me: &Owner) -> bool {
        me.holds_contents(&self.contents)
    }

    /// The owner the file names.
    pub(super) fn owner(&self) -> Owner {
        Owner::parse(&self.contents)
    }
}

/// The format of the saved index; an index of another version (or an
/// older JSON one) is not read, and is rebuilt.
const VERSION: u32 = 2;

/// The index as saved.
#[derive(Serialize, Deserialize)]
struct Saved<'a> {
    version: u32,
    stamp: Stamp,
    /// Address, inode, the file's contents, by address.
    #[serde(borrow)]
    files: Vec<(IpAddr, u64, &'a str)>,
}

/// Where a network directory's index is kept.
#[derive(Debug)]
pub(super) struct Location {
    root: PathBuf,
    file: String,
}

impl Location {
    /// The index of the network directory at `dir`, in state root `root`.
    pub(super) fn new(root: &Path, dir: &Path) -> Location {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(dir.as_os_str().as_encoded_bytes());
        Location {
            root: root.to_owned(),
            file: hex::encode(&digest[..20]),
        }
    }

    /// The saved index, if it describes the directory whose stamp is
    /// `stamp` and whose reservation files are `listing` (address and
    /// inode, in any order).
    pub(super) fn load(
        &self,
        stamp: Stamp,
        listing: &[(IpAddr, u64)],
    ) -> Option<BTreeMap<IpAddr, Entry>> {
        let text =
            crate::state_fs::read_bounded(&self.root, &Path::new(DIR).join(&self.file), MAX_INDEX)
                .ok()??;
        // Whole: bytes after the index (an old, longer one's tail, not yet
        // cut) make it not hold.
        let (saved, rest) = postcard::take_from_bytes::<Saved>(&text).ok()?;
        if !rest.is_empty()
            || saved.version != VERSION
            || saved.stamp != stamp
            || saved.files.len() != listing.len()
        {
            return None;
        }
        let files: BTreeMap<IpAddr, Entry> = saved
            .files
            .into_iter()
            .map(|(ip, ino, contents)| {
                let contents = contents.to_owned();
                (ip, Entry { ino, contents })
            })
            .collect();
        let same = files.len() == listing.len()
            && listing
                .iter()
                .all(|(ip, ino)| files.get(ip).is_some_and(|e| e.ino == *ino));
        same.then_some(files)
    }

    /// Saves `files` as the index of the directory as of `stamp`, or
    /// removes the index when there are none. Best effort: an index not
    /// saved is rebuilt by the next call.
    pub(super) fn save(&self, stamp: Stamp, files: &BTreeMap<IpAddr, Entry>) {
        let result = if files.is_empty() {
            // The directory stays: another network's save may be on its
            // way into it (under that network's lock, not this one's).
            crate::state_fs::remove_pruning(&self.root, Path::new(DIR), &self.file, Path::new(DIR))
        } else {
            let saved = Saved {
                version: VERSION,
                stamp,
                files: files
                    .iter()
                    .map(|(ip, e)| (*ip, e.ino, e.contents.as_str()))
                    .collect(),
            };
            postcard::to_allocvec(&saved)
                .map_err(io::Error::other)
                .and_then(|text| {
                    // In place: a torn or mixed index fails to parse or
                    // fails its checks, and is rebuilt.
                    crate::state_fs::write_in_place(&self.root, Path::new(DIR), &self.file, &text)
                })
        };
        if let Err(e) = result {
            log::debug!(
                "IPAM owner index {}: {e}",
                self.root.join(DIR).join(&self.file).display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(id: &str) -> Owner {
        Owner {
            container_id: id.into(),
            ifname: "eth0".into(),
        }
    }

    #[test]
    fn an_index_holds_only_for_the_directory_it_was_saved_for() {
        let root = tempfile::tempdir().expect("tmp");
        let dir = tempfile::tempdir().expect("tmp");
        let d = std::fs::File::open(dir.path()).expect("dir");
        let stamp = Stamp::of(&d).expect("stamp");
        let loc = Location::new(root.path(), dir.path());
        let ip: IpAddr = "10.1.0.2".parse().expect("ip");
        let files = BTreeMap::from([(
            ip,
            Entry {
                ino: 7,
                contents: owner("a").contents(),
            },
        )]);
        loc.save(stamp, &files);
        assert_eq!(loc.load(stamp, &[(ip, 7)]), Some(files.clone()));
        // Another inode under the name, another file, one file fewer, or
        // another change time: rebuilt.
        assert_eq!(loc.load(stamp, &[(ip, 8)]), None);
        let other: IpAddr = "10.1.0.3".parse().expect("ip");
        assert_eq!(loc.load(stamp, &[(ip, 7), (other, 9)]), None);
        assert_eq!(loc.load(stamp, &[]), None);
        let later = Stamp {
            ctime_nsec: stamp.ctime_nsec + 1,
            ..stamp
        };
        assert_eq!(loc.load(later, &[(ip, 7)]), None);
        // Another directory's index is another file.
        let elsewhere = Location::new(root.path(), &dir.path().join("x"));
        assert_eq!(elsewhere.load(stamp, &[(ip, 7)]), None);
        // A torn file does not parse.
        let path = root.path().join(DIR).join(&loc.file);
        let text = std::fs::read(&path).expect("saved");
        std::fs::write(&path, &text[..text.len() - 1]).expect("tear");
        assert_eq!(loc.load(stamp, &[(ip, 7)]), None);
        // The JSON index of earlier versions, for the same directory as it
        // is: not read (and so rebuilt).
        let json = serde_json::json!({
            "stamp": stamp,
            "files": [[ip, 7, owner("a").contents()]],
        });
        std::fs::write(&path, json.to_string()).expect("old index");
        assert_eq!(loc.load(stamp, &[(ip, 7)]), None);
        // Another version of this format, or the right one with bytes
        // after it, for the same directory as it is: not read.
        let contents = owner("a").contents();
        let postcard_of = |version: u32| {
            postcard::to_allocvec(&Saved {
                version,
                stamp,
                files: vec![(ip, 7, contents.as_str())],
            })
            .expect("postcard")
        };
        std::fs::write(&path, postcard_of(VERSION)).expect("index");
        assert_eq!(loc.load(stamp, &[(ip, 7)]), Some(files.clone()));
        for version in [VERSION - 1, VERSION + 1] {
            std::fs::write(&path, postcard_of(version)).expect("other version");
            assert_eq!(loc.load(stamp, &[(ip, 7)]), None, "version {version}");
        }
        let mut longer = postcard_of(VERSION);
        longer.push(0);
        std::fs::write(&path, longer).expect("tail");
        assert_eq!(loc.load(stamp, &[(ip, 7)]), None);
        loc.save(stamp, &files);
        assert_eq!(loc.load(stamp, &[(ip, 7)]), Some(files.clone()));
        // No reservations: no file.
        loc.save(stamp, &BTreeMap::new());
        assert!(!root.path().join(DIR).join(&loc.file).exists());
    }
}

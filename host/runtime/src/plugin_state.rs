//! Plugin state: the small key-value record a plugin keeps per attachment
//! from ADD to DEL (`wasmcni:plugin/attachment-state`).
//!
//! Layout: `<state root>/plugin-state/<network>/<container id>/<ifname>/<plugin>.json`
//! (the state root of [`crate::record`]; each component a plain file name
//! or a digest, so no name reaches outside its directory; directories
//! 0700, files 0600; written whole and renamed into place, so a crash
//! leaves the old record or the new one). The file names its attachment
//! and plugin too: GC matches records by content, not by the (possibly
//! digested) path.
//!
//! The host removes a plugin's record when the attachment's DEL succeeds
//! and when GC finds the attachment gone; a plugin has no way to name any
//! record but its own.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ipam::Owner;
use crate::state_fs::{component, read_bounded, remove_pruning, walk, write_atomic};

/// The directory below the state root.
const TOP: &str = "plugin-state";
/// The record format's version.
const VERSION: u32 = 1;
/// The longest key.
pub const MAX_KEY: usize = 64;
/// The longest value.
pub const MAX_VALUE: usize = 4096;
/// The most keys a record holds.
pub const MAX_KEYS: usize = 32;
/// The largest file read (32 values of 4 KiB, escaped, and the keys).
const MAX_FILE: u64 = 512 << 10;

/// Whose record: an attachment and a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Key {
    /// The network (the config's `name`).
    pub network: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// The plugin's name.
    pub plugin: String,
}

/// A record as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct File {
    version: u32,
    #[serde(flatten)]
    key: Key,
    values: BTreeMap<String, String>,
}

/// Whether `key` is a valid record key: 1–64 bytes of `[A-Za-z0-9._-]`.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// One plugin's record for one attachment, below a state root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    root: PathBuf,
    key: Key,
}

impl Record {
    /// The record of `key` below `root`.
    pub fn new(root: &Path, key: Key) -> Record {
        Record {
            root: root.to_owned(),
            key,
        }
    }

    /// Whose record it is.
    pub fn key(&self) -> &Key {
        &self.key
    }

    fn dir(&self) -> PathBuf {
        Path::new(TOP)
            .join(component(&self.key.network))
            .join(component(&self.key.container_id))
            .join(component(&self.key.ifname))
    }

    fn file(&self) -> String {
        format!("{}.json", component(&self.key.plugin))
    }

    /// The file's path, for messages.
    pub fn path(&self) -> PathBuf {
        self.root.join(self.dir()).join(self.file())
    }

    /// The values (empty if there is no record).
    ///
    /// # Ambient Authority
    /// Opens the state root by path (the host's setting).
    pub fn load(&self) -> io::Result<BTreeMap<String, String>> {
        let Some(text) = read_bounded(&self.root, &self.dir().join(self.file()), MAX_FILE)? else {
            return Ok(BTreeMap::new());
        };
        let invalid = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", self.path().display()),
            )
        };
        let file: File = serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        if file.version != VERSION {
            return Err(invalid(format!(
                "version {} (this wasmcni reads {VERSION})",
                file.version
            )));
        }
        if file.key != self.key {
            return Err(invalid(
                "the file names another attachment or plugin".into(),
            ));
        }
        Ok(file.values)
    }

    /// Replaces the values whole (atomically); no values removes the file.
    ///
    /// # Ambient Authority
    /// Creates the state root by path (the host's setting).
    pub fn store(&self, values: &BTreeMap<String, String>) -> io::Result<()> {
        if values.is_empty() {
            return self.remove();
        }
        let file = File {
            version: VERSION,
            key: self.key.clone(),
            values: values.clone(),
        };
        let text = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
        write_atomic(&self.root, &self.dir(), &self.file(), &text)
    }

    /// Removes the record (no error if there is none).
    ///
    /// # Ambient Authority
    /// Opens the state root by path (the host's setting).
    pub fn remove(&self) -> io::Result<()> {
        remove_pruning(&self.root, &self.dir(), &self.file(), Path::new(TOP))
    }
}

/// Removes the records of `plugins` in `network` below `root` whose
/// attachment is not in `valid`; returns the keys removed. A file that
/// cannot be read as a record is left alone (and reported in the error
/// list).
///
/// # Ambient Authority
/// Reads the state root by path (the host's setting).
pub fn gc(
    root: &Path,
    network: &str,
    plugins: &[String],
    valid: &[Owner],
) -> (Vec<Key>, Vec<String>) {
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    let net_dir = root.join(TOP).join(component(network));
    let files = walk(&net_dir, &["json"], &mut errors);
    for path in files {
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) => {
                errors.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let file: File = match serde_json::from_slice(&text) {
            Ok(f) => f,
            Err(e) => {
                errors.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let k = file.key;
        if k.network != network || !plugins.contains(&k.plugin) {
            continue;
        }
        let live = valid
            .iter()
            .any(|o| o.container_id == k.container_id && o.ifname == k.ifname);
        if live {
            continue;
        }
        let r = Record::new(root, k.clone());
        // The file must be the record its content names (not a copy
        // placed elsewhere).
        if r.path() != path {
            errors.push(format!(
                "{}: names {}, left alone",
                path.display(),
                r.path().display()
            ));
            continue;
        }
        match r.remove() {
            Ok(()) => removed.push(k),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    (removed, errors)
}

/// Removes every plugin's record of one attachment below `root`; the
/// paths removed.
///
/// # Ambient Authority
/// Reads the state root by path (the host's setting).
pub fn remove_attachment(
    root: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> io::Result<Vec<PathBuf>> {
    let dir = Path::new(TOP)
        .join(component(network))
        .join(component(container_id))
        .join(component(ifname));
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(root.join(&dir)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name.starts_with('.') {
            continue;
        }
        remove_pruning(root, &dir, &name, Path::new(TOP))?;
        removed.push(root.join(&dir).join(&name));
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cid: &str, ifname: &str, plugin: &str) -> Key {
        Key {
            network: "net1".into(),
            container_id: cid.into(),
            ifname: ifname.into(),
            plugin: plugin.into(),
        }
    }

    #[test]
    fn a_record_round_trips_and_an_empty_one_is_no_file() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = Record::new(root.path(), key("c1", "eth0", "tuning"));
        assert!(r.load().expect("load").is_empty());
        let mut v = BTreeMap::new();
        v.insert("mtu".to_owned(), "1500".to_owned());
        r.store(&v).expect("store");
        assert_eq!(r.load().expect("load"), v);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(r.path())
            .expect("file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        r.store(&BTreeMap::new()).expect("store empty");
        assert!(!r.path().exists());
        let left: Vec<_> = std::fs::read_dir(root.path().join(TOP))
            .expect("top")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_file_naming_another_attachment_is_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let a = Record::new(root.path(), key("c1", "eth0", "tuning"));
        let b = Record::new(root.path(), key("c2", "eth0", "tuning"));
        let mut v = BTreeMap::new();
        v.insert("k".to_owned(), "v".to_owned());
        a.store(&v).expect("store");
        std::fs::create_dir_all(b.path().parent().expect("dir")).expect("mkdir");
        std::fs::copy(a.path(), b.path()).expect("copy");
        let e = b.load().expect_err("another attachment's file");
        assert!(e.to_string().contains("another attachment"), "{e}");
        for bad in ["", "{", "[]", "{\"version\": 1}"] {
            std::fs::write(b.path(), bad).expect("write");
            assert!(b.load().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostile_names_stay_inside_their_directory() {
        for (net, cid, ifname, plugin) in [
            ("../../etc", "c", "eth0", "p"),
            ("n", "..", "eth0", "p"),
            ("n", "c", "a/b", "p"),
            ("n", "c", "eth0", "../../../x"),
        ] {
            let r = Record::new(
                Path::new("/state"),
                Key {
                    network: net.into(),
                    container_id: cid.into(),
                    ifname: ifname.into(),
                    plugin: plugin.into(),
                },
            );
            let p = r.path();
            assert!(
                p.components()
                    .all(|c| !matches!(c, std::path::Component::ParentDir)),
                "{p:?}"
            );
            assert!(p.starts_with("/state/plugin-state/"), "{p:?}");
            assert_eq!(p.components().count(), 7, "{p:?}");
        }
    }

    #[test]
    fn gc_removes_exactly_the_records_of_gone_attachments() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut v = BTreeMap::new();
        v.insert("k".to_owned(), "v".to_owned());
        for cid in ["c1", "c2", "c3", "c4"] {
            Record::new(root.path(), key(cid, "eth0", "tuning"))
                .store(&v)
                .expect("store");
        }
        // Another plugin's record of a gone attachment stays (not this
        // GC's plugin); so does another network's.
        Record::new(root.path(), key("c1", "eth0", "other"))
            .store(&v)
            .expect("store");
        let mut other_net = key("c1", "eth0", "tuning");
        other_net.network = "net2".into();
        Record::new(root.path(), other_net.clone())
            .store(&v)
            .expect("store");
        let valid = vec![
            Owner {
                container_id: "c2".into(),
                ifname: "eth0".into(),
            },
            Owner {
                container_id: "c4".into(),
                ifname: "eth0".into(),
            },
        ];
        let (mut removed, errors) = gc(root.path(), "net1", &["tuning".to_owned()], &valid);
        assert!(errors.is_empty(), "{errors:?}");
        removed.sort_by(|a, b| a.container_id.cmp(&b.container_id));
        assert_eq!(
            removed,
            vec![key("c1", "eth0", "tuning"), key("c3", "eth0", "tuning")]
        );
        for (cid, plugin, there) in [
            ("c1", "tuning", false),
            ("c2", "tuning", true),
            ("c3", "tuning", false),
            ("c4", "tuning", true),
            ("c1", "other", true),
        ] {
            let r = Record::new(root.path(), key(cid, "eth0", plugin));
            assert_eq!(r.path().exists(), there, "{cid} {plugin}");
        }
        assert!(Record::new(root.path(), other_net).path().exists());
    }

    #[test]
    fn keys_are_bounded_and_plain() {
        assert!(valid_key("mtu"));
        assert!(valid_key("a.b_c-D9"));
        for bad in ["", "a/b", "a b", "ü", "a\0", &"k".repeat(65)] {
            assert!(!valid_key(bad), "{bad:?}");
        }
        // A key is a JSON member name, never a path: dots are plain.
        assert!(valid_key(".."));
    }
}

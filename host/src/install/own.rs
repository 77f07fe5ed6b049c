//! What install counts as its own, and so may replace without `--force`:
//! the wasmcni executable (it carries a marker), a link to it, and each
//! file the `.wasmcni-owned` record of its directory names with the
//! sha256 install wrote it with.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::files::{plain, write_atomic};

/// A marker carried in the wasmcni executable so `install` can recognise
/// its own binary in a bin dir.
#[used]
static MARKER: [u8; 32] = *b"wasmcni-multicall-binary-marker1";

/// The file in each directory install writes to that records, by sha256,
/// the files it wrote there.
pub const OWNED_RECORD: &str = ".wasmcni-owned";

/// What is at a path we want to write.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Existing {
    Nothing,
    Ours,
    Foreign,
}

pub(super) fn existing(path: &Path, link_target: Option<&str>) -> anyhow::Result<Existing> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Nothing),
        Err(e) => return Err(e).with_context(|| format!("inspecting {path:?}")),
    };
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path)?;
        return Ok(if link_target.is_some_and(|t| target == Path::new(t)) {
            Existing::Ours
        } else {
            Existing::Foreign
        });
    }
    if link_target.is_none() && meta.is_file() && contains_marker(path)? {
        return Ok(Existing::Ours);
    }
    Ok(Existing::Foreign)
}

/// Whether `path` is a wasmcni executable install put there (a file
/// carrying wasmcni's marker, not a link).
pub(crate) fn is_wasmcni(path: &Path) -> anyhow::Result<bool> {
    Ok(existing(path, None)? == Existing::Ours)
}

fn contains_marker(path: &Path) -> anyhow::Result<bool> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(512 << 20)
        .read_to_end(&mut bytes)?;
    Ok(bytes.windows(MARKER.len()).any(|w| w == MARKER))
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `.wasmcni-owned` record of one directory: file name -> sha256 of
/// the bytes install last wrote there.
#[derive(Debug, Default)]
pub(crate) struct Record {
    files: BTreeMap<String, String>,
    changed: bool,
}

impl Record {
    pub(crate) fn load(dir: &Path) -> anyhow::Result<Record> {
        let path = dir.join(OWNED_RECORD);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {path:?}")),
        };
        // A line that is not `<64 hex>  <name>` claims nothing.
        let files = text
            .lines()
            .filter_map(|l| l.split_once("  "))
            .filter(|(sha, name)| {
                sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()) && plain(name)
            })
            .map(|(sha, name)| (name.to_owned(), sha.to_ascii_lowercase()))
            .collect();
        Ok(Record {
            files,
            changed: false,
        })
    }

    /// Each file it records, with the sha256 install wrote it with.
    pub(crate) fn files(&self) -> impl Iterator<Item = (&String, &String)> {
        self.files.iter()
    }

    /// Whether install wrote a file of this name here.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }

    pub(super) fn claims(&self, name: &str, sha: &str) -> bool {
        self.files.get(name).is_some_and(|s| s == sha)
    }

    pub(super) fn set(&mut self, name: &str, sha: &str) {
        if self.files.get(name).map(String::as_str) != Some(sha) {
            self.files.insert(name.to_owned(), sha.to_owned());
            self.changed = true;
        }
    }

    pub(super) fn save(&mut self, dir: &Path) -> anyhow::Result<()> {
        if !self.changed {
            return Ok(());
        }
        let text: String = self
            .files
            .iter()
            .map(|(name, sha)| format!("{sha}  {name}\n"))
            .collect();
        write_atomic(&dir.join(OWNED_RECORD), text.as_bytes())?;
        self.changed = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_claims_only_the_bytes_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Record::load(dir.path()).unwrap();
        assert!(!r.claims("a.json", &sha256_hex(b"x")));
        r.set("a.json", &sha256_hex(b"x"));
        r.save(dir.path()).unwrap();
        let r = Record::load(dir.path()).unwrap();
        assert!(r.claims("a.json", &sha256_hex(b"x")));
        assert!(!r.claims("a.json", &sha256_hex(b"y")));
        assert!(!r.claims("b.json", &sha256_hex(b"x")));
        // A hostile or garbled record claims nothing it cannot name.
        fs::write(
            dir.path().join(OWNED_RECORD),
            format!("{}  ../etc/passwd\nzz  a.json\n", sha256_hex(b"x")),
        )
        .unwrap();
        let r = Record::load(dir.path()).unwrap();
        assert!(r.files.is_empty(), "{r:?}");
    }
}

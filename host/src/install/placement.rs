//! One file install means to write (a plugin, a policy entry, the policy
//! file, a network configuration): planned first, as new, already the
//! same, install's own or someone else's, and written only once every
//! check passed, what it replaces of someone else's kept first.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::backup;
use super::own::{sha256_hex, Record};
use crate::files::{create_dir, write_atomic};

/// One file install means to write (other than the bin dir's own).
#[derive(Debug)]
pub(super) struct Placement {
    pub(super) dir: PathBuf,
    pub(super) name: String,
    pub(super) content: Content,
    pub(super) state: FileState,
}

/// What a placed file holds.
#[derive(Debug)]
pub(super) enum Content {
    /// These bytes.
    Bytes(Vec<u8>),
    /// A policy entry, written by `policy::write_entry_file` with its pin
    /// set; `json` is the entry as it will read (pin included).
    Entry {
        plugin: String,
        json: serde_json::Value,
        sha256: String,
    },
}

impl Content {
    /// Whether `current` (a file's bytes) already says this.
    fn is(&self, current: &[u8]) -> bool {
        match self {
            Content::Bytes(b) => current == b.as_slice(),
            Content::Entry { json, .. } => {
                serde_json::from_slice::<serde_json::Value>(current).is_ok_and(|v| &v == json)
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum FileState {
    /// Absent.
    New,
    /// Already says what it would be written to say.
    Same,
    /// Install's own (recorded), with other bytes.
    Ours,
    /// Someone else's.
    Foreign,
}

impl Placement {
    pub(super) fn plan(dir: &Path, name: &str, content: Content) -> anyhow::Result<Placement> {
        let path = dir.join(name);
        let state = match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileState::New,
            Err(e) => return Err(e).with_context(|| format!("inspecting {path:?}")),
            Ok(m) if !m.is_file() => FileState::Foreign,
            Ok(_) => {
                let current = fs::read(&path).with_context(|| format!("reading {path:?}"))?;
                if content.is(&current) {
                    FileState::Same
                } else if Record::load(dir)?.claims(name, &sha256_hex(&current)) {
                    FileState::Ours
                } else {
                    FileState::Foreign
                }
            }
        };
        Ok(Placement {
            dir: dir.to_owned(),
            name: name.to_owned(),
            content,
            state,
        })
    }

    pub(super) fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Writes the file (unless it already says so) and records it as
    /// install's own.
    pub(super) fn apply(&self) -> anyhow::Result<()> {
        let path = self.path();
        create_dir(&self.dir)?;
        if self.state == FileState::Same {
            println!("{}: unchanged", path.display());
        } else {
            // Someone else's (replaced with --force): kept, to be put back
            // by uninstall.
            let backup = match self.state {
                FileState::Foreign => Some(backup::keep(&self.dir, &self.name)?),
                _ => None,
            };
            match &self.content {
                Content::Bytes(bytes) => write_atomic(&path, bytes)?,
                Content::Entry {
                    plugin,
                    json,
                    sha256,
                } => {
                    crate::policy::write_entry_file(&self.dir, plugin, json, sha256)?;
                }
            }
            match (&self.state, backup) {
                (FileState::New, _) => println!("{}: installed", path.display()),
                (_, Some(b)) => println!(
                    "{}: replaced a file that was not wasmcni's (backup: {})",
                    path.display(),
                    b.display()
                ),
                _ => println!("{}: replaced", path.display()),
            }
        }
        let written = fs::read(&path).with_context(|| format!("reading {path:?}"))?;
        let mut record = Record::load(&self.dir)?;
        record.set(&self.name, &sha256_hex(&written));
        record.save(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_is_same_ours_or_foreign() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = Placement::plan(d, "n.conflist", Content::Bytes(b"new".to_vec())).unwrap();
        assert_eq!(p.state, FileState::New);
        p.apply().unwrap();
        let p = Placement::plan(d, "n.conflist", Content::Bytes(b"new".to_vec())).unwrap();
        assert_eq!(p.state, FileState::Same);
        // What install wrote may be replaced by install.
        let p = Placement::plan(d, "n.conflist", Content::Bytes(b"newer".to_vec())).unwrap();
        assert_eq!(p.state, FileState::Ours);
        // Once someone edits it, it is theirs.
        fs::write(d.join("n.conflist"), b"edited").unwrap();
        let p = Placement::plan(d, "n.conflist", Content::Bytes(b"newer".to_vec())).unwrap();
        assert_eq!(p.state, FileState::Foreign);
        // A file install never wrote is foreign, a symlink too.
        fs::write(d.join("other.conflist"), b"theirs").unwrap();
        let p = Placement::plan(d, "other.conflist", Content::Bytes(b"new".to_vec())).unwrap();
        assert_eq!(p.state, FileState::Foreign);
        std::os::unix::fs::symlink("n.conflist", d.join("l.conflist")).unwrap();
        let p = Placement::plan(d, "l.conflist", Content::Bytes(b"edited".to_vec())).unwrap();
        assert_eq!(p.state, FileState::Foreign);
    }
}

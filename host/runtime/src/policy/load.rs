//! The effective policy ([`Policy`]): the embedded default, the policy
//! file's entries and the policy directory's, where each is looked for,
//! the document read (its top level at once, each entry when its plugin
//! asks), an entry resolved for a plugin and where it comes from
//! ([`Source`]); and an entry file written as a run would read it.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::entry::Entry;
use super::error::PolicyError;
use super::trust::{read_trusted, resolve_trusted, Resolve};

/// The documented default location of the policy file.
pub const DEFAULT_POLICY_FILE: &str = "/etc/wasmcni/policy.json";

/// The documented default location of the policy directory.
pub const DEFAULT_POLICY_DIR: &str = "/etc/wasmcni/policy.d";

/// The most entries wasmcni reads in the policy directory.
const MAX_POLICY_DIR_FILES: usize = 4096;

/// The embedded default policy.
pub const EMBEDDED: &str = include_str!("../default-policy.json");

/// Where a plugin's policy entry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The embedded default policy (it applies to the bundled plugin of
    /// that name only).
    Embedded,
    /// `plugins.NAME` of the policy file.
    File(PathBuf),
    /// `NAME.json` in the policy directory.
    Dir(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Embedded => f.write_str("embedded default"),
            Source::File(p) | Source::Dir(p) => write!(f, "{}", p.display()),
        }
    }
}

/// An entry of the policy file or directory, as loaded: parsed and
/// checked only when its plugin asks for it, so that a broken entry
/// breaks that plugin alone.
#[derive(Debug, Clone, PartialEq)]
enum Overlay {
    /// `plugins.NAME` of the policy file: its JSON.
    File { path: PathBuf, value: Value },
    /// `NAME.json` in the policy directory (read when asked for).
    Dir { path: PathBuf },
    /// Both: ambiguous, so the plugin gets nothing and is refused.
    Both { file: PathBuf, dir: PathBuf },
}

/// The effective policy: the embedded defaults, the policy file's entries
/// and the policy directory's, by plugin name. Entries are kept as JSON
/// and parsed when a plugin's entry is asked for ([`Policy::resolve`]):
/// a run parses only its own plugin's entry, and a typo in one entry
/// refuses that plugin only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// The embedded (or parsed-document) entries, applying to bundled
    /// plugins only: each its JSON text, parsed when asked for.
    embedded: BTreeMap<String, String>,
    /// The policy file's and directory's entries, applying to any plugin
    /// of that name.
    overlay: BTreeMap<String, Overlay>,
    /// `*.json` files in the policy directory whose stem is not a plugin
    /// name (ignored; `wasmcni list` reports them).
    stray: Vec<PathBuf>,
}

/// A policy document: each entry as `T`, its JSON text
/// (`&RawValue`, [`parse_document`]) or its value ([`entry_values`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document<T> {
    plugins: BTreeMap<String, T>,
}

impl Policy {
    /// Parses a policy document and checks every entry in it (the first
    /// bad one is the error). The entries apply to the bundled plugins of
    /// their names, as the embedded defaults do.
    pub fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let embedded = parse_document(text, origin)?;
        for (name, value) in &entry_values(&embedded, text, origin)? {
            Entry::from_value(name, value, origin)?;
        }
        Ok(Policy {
            embedded,
            ..Policy::default()
        })
    }

    /// The embedded default policy.
    pub fn embedded() -> Policy {
        // Only the top level is parsed here (every run pays for it; parsing
        // every entry was 7% of a warm loopback run's instructions); each
        // entry is parsed when asked for. The whole document is checked by
        // a unit test; an error here would be a build defect, so fall back
        // to denying everything.
        Policy {
            embedded: parse_document(EMBEDDED, "embedded").unwrap_or_default(),
            ..Policy::default()
        }
    }

    /// The effective policy: the embedded one, with every entry of the
    /// policy file (`file` (`--policy`), else `$WASMCNI_POLICY`, else
    /// [`DEFAULT_POLICY_FILE`] if it exists) and every `NAME.json` of the
    /// policy directory ([`policy_dir`]) replacing the embedded entry of
    /// the same plugin. A file or directory named explicitly must exist.
    ///
    /// Errors here refuse every plugin: a policy file that is untrusted,
    /// not JSON, or has unknown top-level fields; a policy directory that
    /// is untrusted or unreadable. An entry's own errors (its fields, its
    /// file's trust, its JSON; a plugin with an entry in both places) are
    /// reported by [`Policy::resolve`] for that plugin alone.
    pub fn load(file: Option<&Path>) -> Result<Policy, PolicyError> {
        let mut policy = Policy::embedded();
        let (path, required) = match (file, &crate::config::get().policy) {
            (Some(f), _) => (f.to_owned(), true),
            (None, Some(p)) => (p.clone(), true),
            (None, None) => (PathBuf::from(DEFAULT_POLICY_FILE), false),
        };
        if let Some(text) = read_trusted(&path, required)? {
            let origin = path.display().to_string();
            let entries = parse_document(&text, &origin)?;
            for (name, value) in entry_values(&entries, &text, &origin)? {
                policy.overlay.insert(
                    name,
                    Overlay::File {
                        path: path.clone(),
                        value,
                    },
                );
            }
        }
        let explicit = crate::config::get().policy_dir.is_some();
        if let Some(dir) = policy_dir() {
            policy.add_dir(&dir, explicit)?;
        }
        Ok(policy)
    }

    /// Adds the entries of policy directory `dir` (each `NAME.json` is
    /// only noted here, and read when asked for).
    fn add_dir(&mut self, dir: &Path, required: bool) -> Result<(), PolicyError> {
        let io = |source| PolicyError::Io {
            path: dir.to_owned(),
            source,
        };
        let absolute = std::path::absolute(dir).map_err(io)?;
        let real = match resolve_trusted(&absolute) {
            Ok(p) => p,
            Err(Resolve::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(())
            }
            Err(Resolve::Io(e)) => return Err(io(e)),
            Err(Resolve::Untrusted(why)) => {
                return Err(PolicyError::Untrusted {
                    path: dir.to_owned(),
                    why,
                })
            }
        };
        // resolve_trusted checked it, if it is a directory.
        if !std::fs::metadata(&real).map_err(io)?.is_dir() {
            return Err(PolicyError::Untrusted {
                path: dir.to_owned(),
                why: "not a directory".into(),
            });
        }
        for (n, item) in std::fs::read_dir(&real).map_err(io)?.enumerate() {
            if n >= MAX_POLICY_DIR_FILES {
                return Err(PolicyError::Untrusted {
                    path: dir.to_owned(),
                    why: format!("holds more than {MAX_POLICY_DIR_FILES} files"),
                });
            }
            let item = item.map_err(io)?;
            let file_name = item.file_name();
            let Some(stem) = file_name.to_str().and_then(|f| f.strip_suffix(".json")) else {
                continue;
            };
            let path = absolute.join(&file_name);
            if !crate::plugins::valid_name(stem) {
                self.stray.push(path);
                continue;
            }
            let slot = match self.overlay.remove(stem) {
                Some(Overlay::File { path: file, .. }) => Overlay::Both { file, dir: path },
                _ => Overlay::Dir { path },
            };
            self.overlay.insert(stem.to_owned(), slot);
        }
        self.stray.sort();
        Ok(())
    }

    /// The entry for plugin `name`, checked: the policy file's or the
    /// policy directory's if either names it; else the embedded default,
    /// but only for the plugin carried in wasmcni (`bundled`: a
    /// `bridge.wasm` from elsewhere does not inherit the standard bridge's
    /// grant); else deny-all. An entry that is invalid, in an untrusted
    /// file, or defined in both places is an error for this plugin.
    pub fn resolve(&self, name: &str, bundled: bool) -> Result<Entry, PolicyError> {
        match self.overlay.get(name) {
            Some(Overlay::File { path, value }) => {
                Entry::from_value(name, value, &path.display().to_string())
            }
            Some(Overlay::Dir { path }) => read_entry_file(name, path),
            Some(Overlay::Both { file, dir }) => Err(PolicyError::Ambiguous {
                name: name.to_owned(),
                file: file.clone(),
                dir: dir.clone(),
            }),
            None => match self.embedded.get(name) {
                Some(text) if bundled => entry_from_text(name, text, "embedded"),
                _ => Ok(Entry::default()),
            },
        }
    }

    /// Where the entry [`Policy::resolve`] would use comes from; `None`:
    /// there is none, and the plugin has no authority.
    pub fn source(&self, name: &str, bundled: bool) -> Option<Source> {
        match self.overlay.get(name) {
            Some(Overlay::File { path, .. }) => Some(Source::File(path.clone())),
            Some(Overlay::Dir { path }) | Some(Overlay::Both { dir: path, .. }) => {
                Some(Source::Dir(path.clone()))
            }
            None if bundled && self.embedded.contains_key(name) => Some(Source::Embedded),
            None => None,
        }
    }

    /// Every plugin name with an entry (embedded, file or directory).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .embedded
            .keys()
            .chain(self.overlay.keys())
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// `*.json` files in the policy directory whose stem is not a valid
    /// plugin name: they apply to nothing.
    pub fn stray_files(&self) -> &[PathBuf] {
        &self.stray
    }

    /// The entry for plugin `name` as if it were bundled (deny-all if it
    /// has none, or an invalid one).
    pub fn entry(&self, name: &str) -> Entry {
        self.resolve(name, true).unwrap_or_default()
    }

    /// [`Policy::resolve`], with an invalid entry giving nothing (deny-all)
    /// instead of an error. Runs use `resolve`, which refuses such a plugin.
    pub fn entry_for(&self, name: &str, bundled: bool) -> Entry {
        self.resolve(name, bundled).unwrap_or_default()
    }
}

/// Parses the top level of a policy document: JSON, and an object with
/// exactly `plugins`, itself an object.
/// Each entry is kept as its JSON text (checked as JSON, not parsed).
fn parse_document(text: &str, origin: &str) -> Result<BTreeMap<String, String>, PolicyError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let doc: Document<&serde_json::value::RawValue> = serde_path_to_error::deserialize(de)
        .map_err(|e| PolicyError::Invalid {
            origin: origin.to_owned(),
            msg: e.to_string(),
        })?;
    Ok(doc
        .plugins
        .into_iter()
        .map(|(name, raw)| (name, raw.get().to_owned()))
        .collect())
}

/// The entries of document `text` ([`parse_document`]'s `entries`) as
/// values. The top-level read checks an entry's syntax but lets through
/// what only a full parse refuses (a number out of range, a lone
/// surrogate); such a document fails with the full parse's own error: the
/// path of the value and its position in the document.
fn entry_values(
    entries: &BTreeMap<String, String>,
    text: &str,
    origin: &str,
) -> Result<BTreeMap<String, Value>, PolicyError> {
    let values: Result<BTreeMap<String, Value>, _> = entries
        .iter()
        .map(|(name, entry)| serde_json::from_str(entry).map(|v| (name.clone(), v)))
        .collect();
    values.map_err(|e| {
        let de = &mut serde_json::Deserializer::from_str(text);
        let msg = match serde_path_to_error::deserialize::<_, Document<Value>>(de) {
            Err(full) => full.to_string(),
            // Not expected: the entry's own error.
            Ok(_) => format!("plugins: {e}"),
        };
        PolicyError::Invalid {
            origin: origin.to_owned(),
            msg,
        }
    })
}

/// An embedded entry's JSON text ([`parse_document`]), parsed and checked
/// (the whole embedded document is checked by a unit test).
fn entry_from_text(name: &str, text: &str, origin: &str) -> Result<Entry, PolicyError> {
    let value: Value = serde_json::from_str(text).map_err(|e| PolicyError::Invalid {
        origin: origin.to_owned(),
        msg: format!("plugins.{name}: {e}"),
    })?;
    Entry::from_value(name, &value, origin)
}

/// Reads and checks `NAME.json` of the policy directory (as a run does:
/// a file others could write is refused).
pub fn read_entry_file(name: &str, path: &Path) -> Result<Entry, PolicyError> {
    let origin = path.display().to_string();
    // Present when the directory was listed; gone since is an error too.
    let text = read_trusted(path, true)?.unwrap_or_default();
    let value: Value = serde_json::from_str(&text).map_err(|e| PolicyError::Invalid {
        origin: origin.clone(),
        msg: format!("plugins.{name}: not a JSON object: {e}"),
    })?;
    Entry::from_value(name, &value, &origin)
}

/// The policy directory: `$WASMCNI_POLICY_DIR` if set (it must then
/// exist), else [`DEFAULT_POLICY_DIR`] if it exists, else none. Each
/// `NAME.json` in it holds plugin `NAME`'s entry (the object that would be
/// `plugins.NAME` in the policy file), as package managers drop files.
pub fn policy_dir() -> Option<PathBuf> {
    match &crate::config::get().policy_dir {
        Some(d) => Some(d.clone()),
        None => {
            let d = Path::new(DEFAULT_POLICY_DIR);
            d.exists().then(|| d.to_owned())
        }
    }
}

/// Writes plugin `name`'s entry into policy directory `dir` as
/// `NAME.json` (creating `dir`, mode 0755, if missing): `entry_json` (the
/// object that would be `plugins.NAME` in the policy file) with its
/// `sha256` pin set to `sha256`, checked as a run would check it, written
/// atomically (temporary file, then rename) with mode 0644, owned by the
/// user running wasmcni (root on a node). The directory must be trusted
/// as [`Policy::load`] requires, or nothing is written. Returns the path.
pub fn write_entry_file(
    dir: &Path,
    name: &str,
    entry_json: &Value,
    sha256: &str,
) -> Result<PathBuf, PolicyError> {
    let path = dir.join(format!("{name}.json"));
    let origin = path.display().to_string();
    let invalid = |msg: String| PolicyError::Invalid {
        origin: origin.clone(),
        msg,
    };
    if !crate::plugins::valid_name(name) {
        return Err(invalid(format!("invalid plugin name {name:?}")));
    }
    let Value::Object(mut map) = entry_json.clone() else {
        return Err(invalid(format!("plugins.{name} must be a JSON object")));
    };
    map.insert("sha256".into(), Value::from(sha256.to_ascii_lowercase()));
    let value = Value::Object(map);
    Entry::from_value(name, &value, &origin)?;
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| PolicyError::Io { path: p, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(io(dir))?;
    let absolute = std::path::absolute(dir).map_err(io(dir))?;
    match resolve_trusted(&absolute) {
        Ok(_) => {}
        Err(Resolve::Io(e)) => return Err(io(dir)(e)),
        Err(Resolve::Untrusted(why)) => {
            return Err(PolicyError::Untrusted {
                path: dir.to_owned(),
                why,
            })
        }
    }
    let mut text = serde_json::to_string_pretty(&value).map_err(|e| invalid(e.to_string()))?;
    text.push('\n');
    let tmp = dir.join(format!(".{name}.json.tmp{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        // Exactly 0644, whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&path)(e));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NsGrant;

    #[test]
    fn embedded_policy_parses() {
        let p = Policy::parse(EMBEDDED, "embedded").expect("embedded policy");
        assert!(p.names().iter().any(|n| n == "loopback"));
        assert_eq!(Policy::embedded(), p);
    }

    #[test]
    fn loopback_gets_nothing_on_the_host() {
        let g = Policy::embedded().entry("loopback").grant();
        assert!(g.host.is_none());
        assert!(g.container.modify && g.container.read);
        assert!(g.container.create.is_empty());
    }

    #[test]
    fn embedded_grants_only_go_to_bundled_plugins() {
        let p = Policy::embedded();
        assert!(p.entry_for("loopback", true).container.modify);
        assert_eq!(p.entry_for("loopback", false), Entry::default());
        let mut q = p.clone();
        q.overlay.insert(
            "loopback".into(),
            Overlay::File {
                path: "/p.json".into(),
                value: serde_json::json!({"container": {"modify": true}}),
            },
        );
        assert!(q.entry_for("loopback", false).container.modify);
        assert_eq!(
            q.source("loopback", false),
            Some(Source::File("/p.json".into()))
        );
        assert_eq!(p.source("loopback", true), Some(Source::Embedded));
        assert_eq!(p.source("loopback", false), None);
    }

    #[test]
    fn a_bad_entry_breaks_only_its_plugin() {
        let text = r#"{"plugins":{"good":{"container":{"read":true}},
                       "typo":{"container":{"modfiy":true}}}}"#;
        let mut p = Policy::embedded();
        let entries = parse_document(text, "/etc/p.json").expect("top level");
        for (name, value) in entry_values(&entries, text, "/etc/p.json").expect("values") {
            p.overlay.insert(
                name,
                Overlay::File {
                    path: "/etc/p.json".into(),
                    value,
                },
            );
        }
        assert!(p.resolve("good", false).expect("good").container.read);
        assert!(
            p.resolve("loopback", true)
                .expect("bundled")
                .container
                .modify
        );
        let e = p.resolve("typo", false).expect_err("typo").to_string();
        assert!(
            e.contains("/etc/p.json") && e.contains("plugins.typo.container.modfiy: unknown field"),
            "{e}"
        );
        assert_eq!(p.entry_for("typo", false), Entry::default());
        // What is not a policy at all, or has unknown top-level fields,
        // still fails as a whole.
        for bad in [
            "not json",
            r#"{"plugins":{}, "plugin":{}}"#,
            r#"{"plugins":[]}"#,
        ] {
            assert!(parse_document(bad, "t").is_err(), "{bad}");
        }
        // What only a full parse refuses, inside an entry, fails the whole
        // document with the full parse's path and position.
        for (bad, path, what) in [
            (
                "{\"plugins\":{\"x\":{\"a\":1e999}}}",
                "plugins.x.a",
                "number out of range at line 1 column 26",
            ),
            (
                "{\"plugins\":{\"x\":{\"a\":\"\\ud800\"}}}",
                "plugins.x.a",
                "hex escape at line 1 column 29",
            ),
        ] {
            let entries = parse_document(bad, "t").expect("syntax only");
            let e = entry_values(&entries, bad, "t").expect_err(bad).to_string();
            assert!(e.contains(path) && e.contains(what), "{bad}: {e}");
            let e = Policy::parse(bad, "t").expect_err(bad).to_string();
            assert!(e.contains(path) && e.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_plugins_get_nothing() {
        let g = Policy::embedded().entry("third-party").grant();
        assert_eq!(g.container, NsGrant::default());
        assert!(g.host.is_none());
    }
}

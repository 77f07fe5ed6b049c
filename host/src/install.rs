//! `wasmcni install` and `wasmcni precompile`.
//!
//! `install DIR` makes DIR a CNI bin dir: DIR/wasmcni, a link DIR/X ->
//! wasmcni for every standard plugin X (or each one `--only` names, or
//! with `--conflist` each one the conflists name; the others' names are
//! left alone), each precompiled into the artifact cache the links load
//! from. The same command installs what a node needs
//! besides, so a node installer (the DaemonSet image, which has no shell)
//! is one `wasmcni install` call:
//!
//! - `--plugin FILE.wasm [--name NAME]`: a third-party plugin, copied to
//!   `<plugin dir>/NAME.wasm` and linked as DIR/NAME; with
//!   `--policy ENTRY.json`, its policy entry (alone, or in a policy
//!   document holding it alone), pinned to the installed file's sha256, in
//!   `<policy dir>/NAME.json`. Repeatable: each `--name` and `--policy`
//!   belongs to the `--plugin` before it ([`Positions`]);
//! - `--conflist FILE [--conf-dir D]`: a network configuration
//!   (repeatable);
//! - `--policy-file FILE [--policy-target T]`: the node's policy file,
//!   checked before it is written;
//! - `--then-sleep`: wait for SIGTERM after installing (a DaemonSet pod).
//!
//! # Never live broken
//! Before it writes anything, install checks the node as it will leave
//! it (`install/check.rs`: what `wasmcni list` would say of it) and
//! refuses, naming each problem, when a run would refuse what it makes
//! live: a plugin whose entry pins another build, is invalid, or is both
//! in the policy file and the policy dir; a network naming a type that
//! will not be in DIR, or a chain member wasmcni cannot run.
//! `--allow-broken` makes these warnings.
//!
//! # Ownership
//! Every run is idempotent: a file already as it would be written is left
//! alone (same inode, same time stamps). A file install did not write is
//! never replaced without `--force`. What is install's own:
//! - DIR/wasmcni: a file carrying wasmcni's marker;
//! - DIR/X: a symlink to `wasmcni`;
//! - any other file (plugin, policy entry, conflist, policy file): one whose
//!   bytes are exactly what install would write now, or whose sha256 is the
//!   one recorded in the `.wasmcni-owned` file of its directory (install
//!   records every file it writes there, in `sha256sum` format). A file
//!   someone edited after install wrote it no longer matches its record: it
//!   is theirs from then on.
//!
//! What `--force` replaces is kept first, in `.wasmcni-backup/` beside
//! it (`install/backup.rs`), for `wasmcni uninstall`
//! ([`crate::uninstall`]) and `--prune` to put back.
//!
//! # Paths at run time
//! The links are relative (`X -> wasmcni`) and the artifact cache is
//! `.wasmcni-cache` beside the executable, so a bin dir installed through a
//! mount (`/host/opt/cni/bin` in a container) works at the node's own path
//! (`/opt/cni/bin`). The plugin dir, policy dir and policy file are written
//! where the flags say, but read at run time from the node's defaults
//! (`/opt/wasmcni/plugins`, `/etc/wasmcni/...`): mount them at the node's
//! paths under one prefix.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

use crate::engine::{self, ArtifactCache};

pub(crate) mod backup;
mod check;
use crate::plugins::{self, Plugin};

/// A marker carried in the wasmcni executable so `install` can recognise
/// its own binary in a bin dir.
#[used]
static MARKER: [u8; 32] = *b"wasmcni-multicall-binary-marker1";

/// The file in each directory install writes to that records, by sha256,
/// the files it wrote there.
pub const OWNED_RECORD: &str = ".wasmcni-owned";

/// The default directory for `--conflist`.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";

/// What `wasmcni install` puts in place (its command line). Only `dir` is
/// required; every other part is installed when given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// The CNI bin dir (e.g. /opt/cni/bin).
    pub dir: PathBuf,
    /// Replace files that are not wasmcni's own (e.g. native plugins, a
    /// conflist or policy someone else wrote or edited), each kept first
    /// in .wasmcni-backup/ beside it (`wasmcni uninstall` puts it back).
    #[arg(long)]
    pub force: bool,
    /// A third-party plugin component to install: copied to
    /// <plugin dir>/NAME.wasm, linked as DIR/NAME, precompiled.
    /// Repeatable: each --name and --policy belongs to the --plugin before
    /// it (`--plugin a.wasm --policy a.json --plugin b.wasm --name bee`).
    #[arg(long, value_name = "FILE.wasm")]
    pub plugin: Vec<PathBuf>,
    /// The name of the --plugin before it, its CNI `type` (default: the
    /// file stem).
    #[arg(long, requires = "plugin")]
    pub name: Vec<String>,
    /// Where third-party plugins live (default: $WASMCNI_PLUGIN_DIR, else
    /// /opt/wasmcni/plugins).
    #[arg(long, value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// The policy entry of the --plugin before it (the object that would
    /// be `plugins.NAME` of a policy file, as policy.d/NAME.json holds
    /// it), or a policy document holding that entry alone (as `wasmcni
    /// new`'s policy.json), written to <policy dir>/NAME.json with its
    /// `sha256` pin set to the installed file's.
    #[arg(long = "policy", value_name = "ENTRY.json", requires = "plugin")]
    pub policy_entry: Vec<PathBuf>,
    /// Where per-plugin policy entries live (default: $WASMCNI_POLICY_DIR,
    /// else /etc/wasmcni/policy.d).
    #[arg(long, value_name = "DIR")]
    pub policy_dir: Option<PathBuf>,
    /// A network configuration (.conflist, .conf or .json) to install into
    /// the conf dir, under its own file name. Repeatable (each file name
    /// once).
    #[arg(long, value_name = "FILE")]
    pub conflist: Vec<PathBuf>,
    /// The CNI conf dir (default: /etc/cni/net.d): where --conflist goes,
    /// and whose networks --prune keeps the links of.
    #[arg(long, value_name = "DIR")]
    pub conf_dir: Option<PathBuf>,
    /// A policy file to install, checked first (one that would not load is
    /// never written).
    #[arg(long, value_name = "FILE")]
    pub policy_file: Option<PathBuf>,
    /// Where the policy file goes (default: $WASMCNI_POLICY, else
    /// /etc/wasmcni/policy.json).
    /// Also the policy file install's checks read when it writes none.
    #[arg(long, value_name = "PATH")]
    pub policy_target: Option<PathBuf>,
    /// Install even what wasmcni would refuse to run (a plugin whose
    /// policy entry is pinned to another build, invalid, or both in the
    /// policy file and the policy dir; a network naming a type that is not
    /// in DIR), warning instead of refusing.
    #[arg(long)]
    pub allow_broken: bool,
    /// After installing, wait for SIGTERM instead of exiting (the
    /// container of a DaemonSet must keep running).
    #[arg(long)]
    pub then_sleep: bool,
    /// Link only these standard plugins (comma-separated, e.g.
    /// `loopback,tuning`; the chain runner `wasmcni-chain` only if
    /// listed), besides wasmcni itself and any --plugin; the other
    /// standard names in DIR are left alone (a node whose primary CNI uses
    /// the native bridge, host-local or portmap keeps them). Default with
    /// --conflist: the standard types the conflists name (and the members
    /// of a wasmcni-chain, and wasmcni-chain itself if named); without:
    /// every standard plugin and wasmcni-chain.
    #[arg(long, value_name = "TYPES", value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// Remove the links to wasmcni in DIR of standard plugins this run does
    /// not link (a narrower --only, or what the conflist names), putting
    /// back what --force replaced there; refused for a type a network in
    /// the conf dir names. Third-party plugins' links stay.
    #[arg(long)]
    pub prune: bool,
    /// Where each --plugin, --name and --policy stood on the command line
    /// (filled from clap's matches by [`Positions::from_matches`]).
    #[arg(skip)]
    pub positions: Positions,
}

/// Where each `--plugin`, `--name` and `--policy` stood on the command
/// line (clap hands each flag's values apart, in order): what pairs each
/// `--name` and `--policy` with the `--plugin` before it.
#[derive(Debug, Clone, Default)]
pub struct Positions {
    plugin: Vec<usize>,
    name: Vec<usize>,
    policy: Vec<usize>,
}

impl Positions {
    /// The positions of the install subcommand's flags in `matches`.
    pub fn from_matches(matches: &clap::ArgMatches) -> Positions {
        let at = |id: &str| {
            matches
                .indices_of(id)
                .map(|i| i.collect())
                .unwrap_or_default()
        };
        Positions {
            plugin: at("plugin"),
            name: at("name"),
            policy: at("policy_entry"),
        }
    }
}

/// One `--plugin`, with the `--name` and `--policy` that belong to it.
#[derive(Debug, PartialEq)]
struct PluginArg<'a> {
    file: &'a Path,
    name: Option<&'a str>,
    policy: Option<&'a Path>,
}

/// Pairs each `--name` and `--policy` with the `--plugin` before it on
/// the command line, refusing what is ambiguous: one before any
/// `--plugin`, or two of a kind for one `--plugin`. Without positions
/// (options not parsed from a command line) the k-th `--name` and
/// `--policy` belong to the k-th `--plugin`.
fn plugin_args(opts: &Options) -> anyhow::Result<Vec<PluginArg<'_>>> {
    let p = &opts.positions;
    let given = p.plugin.len() == opts.plugin.len()
        && p.name.len() == opts.name.len()
        && p.policy.len() == opts.policy_entry.len();
    let (plugin_at, name_at, policy_at): (Vec<usize>, Vec<usize>, Vec<usize>) = if given {
        (p.plugin.clone(), p.name.clone(), p.policy.clone())
    } else {
        (
            (0..opts.plugin.len()).map(|k| 3 * k).collect(),
            (0..opts.name.len()).map(|k| 3 * k + 1).collect(),
            (0..opts.policy_entry.len()).map(|k| 3 * k + 2).collect(),
        )
    };
    let mut args: Vec<PluginArg> = opts
        .plugin
        .iter()
        .map(|file| PluginArg {
            file,
            name: None,
            policy: None,
        })
        .collect();
    // The --plugin a flag at `at` belongs to: the last one before it.
    let owner = |at: usize, flag: &str, value: &dyn std::fmt::Debug| {
        plugin_at.iter().rposition(|&p| p < at).with_context(|| {
            format!(
                "{flag} {value:?} comes before any --plugin: each --name and --policy \
                 belongs to the --plugin before it"
            )
        })
    };
    for (name, &at) in opts.name.iter().zip(&name_at) {
        let k = owner(at, "--name", name)?;
        if let Some(first) = args[k].name {
            bail!(
                "--plugin {:?} is given two --name ({first:?}, {name:?}): each --name and \
                 --policy belongs to the --plugin before it",
                args[k].file
            );
        }
        args[k].name = Some(name);
    }
    for (policy, &at) in opts.policy_entry.iter().zip(&policy_at) {
        let k = owner(at, "--policy", policy)?;
        if let Some(first) = args[k].policy {
            bail!(
                "--plugin {:?} is given two --policy ({first:?}, {policy:?}): each --name and \
                 --policy belongs to the --plugin before it",
                args[k].file
            );
        }
        args[k].policy = Some(policy);
    }
    Ok(args)
}

/// What is at a path we want to write.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    Nothing,
    Ours,
    Foreign,
}

fn existing(path: &Path, link_target: Option<&str>) -> anyhow::Result<Existing> {
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

    fn claims(&self, name: &str, sha: &str) -> bool {
        self.files.get(name).is_some_and(|s| s == sha)
    }

    fn set(&mut self, name: &str, sha: &str) {
        if self.files.get(name).map(String::as_str) != Some(sha) {
            self.files.insert(name.to_owned(), sha.to_owned());
            self.changed = true;
        }
    }

    fn save(&mut self, dir: &Path) -> anyhow::Result<()> {
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

/// A plain file name: no path separator, no newline, not hidden.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\n', '\r', '\0'])
        && name.len() <= 255
}

/// Replaces `path` atomically: `create` makes the new file or symlink at
/// a fresh temporary name beside it, which is then renamed over `path`
/// (a runtime looking `path` up at any moment finds the old or the new,
/// never nothing). `create` must create exclusively (`O_EXCL`,
/// `symlink`), so that whatever is already at a temporary name (another
/// writer's file, a planted symlink) is never followed nor removed: such a
/// name is skipped for the next.
pub(crate) fn write_atomic_with(
    path: &Path,
    create: impl Fn(&Path) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for _ in 0..64 {
        // Hidden and with a suffix no CNI or policy loader reads. The pid
        // alone is not unique across pid namespaces (every installer is
        // pid 1): the time and a counter make it so, and the exclusive
        // creation makes a name that is taken harmless.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(
            ".{file}.wasmcni-tmp{}-{nanos}-{n}",
            std::process::id()
        ));
        match create(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                // Only ever ours: it did not exist before.
                let _ = fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("writing {path:?} (through {tmp:?})"));
            }
        }
        if let Err(e) = fs::rename(&tmp, path) {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("replacing {path:?} with {tmp:?}"));
        }
        return Ok(());
    }
    bail!("writing {path:?}: could not find a free temporary name in {dir:?}")
}

/// Creates `path` exclusively (never through a symlink) with `mode` and
/// fills it from `bytes`.
pub(crate) fn create_file(path: &Path, mode: u32, bytes: &mut dyn Read) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    std::io::copy(bytes, &mut f)?;
    // The umask may have narrowed the mode.
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    f.sync_all()
}

/// Writes `path` atomically (a temporary file beside it, then rename),
/// mode 0644.
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic_with(path, |tmp| create_file(tmp, 0o644, &mut &bytes[..]))
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .with_context(|| format!("creating {dir:?}"))
}

/// One file install means to write (other than the bin dir's own).
#[derive(Debug)]
struct Placement {
    dir: PathBuf,
    name: String,
    content: Content,
    state: FileState,
}

/// What a placed file holds.
#[derive(Debug)]
enum Content {
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
enum FileState {
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
    fn plan(dir: &Path, name: &str, content: Content) -> anyhow::Result<Placement> {
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

    fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Writes the file (unless it already says so) and records it as
    /// install's own.
    fn apply(&self) -> anyhow::Result<()> {
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

/// The entry `entry` of plugin `name` as it will be written: its pin set,
/// checked as a run would check it.
fn pinned_entry(
    name: &str,
    entry: &serde_json::Value,
    sha256: &str,
    origin: &Path,
) -> anyhow::Result<Content> {
    let Some(map) = entry.as_object() else {
        bail!("policy entry {origin:?} must be a JSON object (the one that would be `plugins.{name}` of a policy file)");
    };
    let mut map = map.clone();
    map.insert("sha256".into(), sha256.to_ascii_lowercase().into());
    let json = serde_json::Value::Object(map);
    crate::policy::Entry::from_value(name, &json, &origin.display().to_string())?;
    Ok(Content::Entry {
        plugin: name.to_owned(),
        json,
        sha256: sha256.to_owned(),
    })
}

/// The entry `--policy` gives for plugin `name`: the file's JSON itself
/// when it is an entry (as `policy.d/NAME.json` holds it), or
/// `plugins.NAME` when it is a policy document (`{"plugins": {...}}`, as
/// `policy.json` or `wasmcni new`'s starter `policy.json`), which must
/// hold that one entry and no other: install writes one plugin's entry.
/// An entry has no field `plugins`, so the two cannot be confused.
fn given_entry(
    name: &str,
    json: serde_json::Value,
    text: &[u8],
    origin: &Path,
) -> anyhow::Result<serde_json::Value> {
    if json.get("plugins").is_none() {
        // An entry (or not an object: pinned_entry says so).
        return Ok(json);
    }
    if let Some(entries) = json["plugins"].as_object() {
        let others: Vec<&str> = entries
            .keys()
            .map(String::as_str)
            .filter(|n| *n != name)
            .collect();
        let found = |names: &[&str]| {
            if names.is_empty() {
                "none".to_owned()
            } else {
                names
                    .iter()
                    .map(|n| format!("plugins.{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        if !entries.contains_key(name) {
            bail!(
                "--policy {origin:?} is a policy document with no entry for plugin {name:?} \
                 (no plugins.{name}; entries found: {}): give a document whose entry is \
                 plugins.{name}, or that entry alone, or install the plugin under the \
                 name its entry has (--name)",
                found(&others)
            );
        }
        if !others.is_empty() {
            bail!(
                "--policy {origin:?} is a policy document with entries for other plugins \
                 besides {name:?} ({}): install writes plugin {name:?}'s entry only; give a \
                 document holding plugins.{name} alone, or that entry alone",
                found(&others)
            );
        }
    }
    // Checked as a policy file is (top-level fields, the entry's fields),
    // with errors naming the file and the field.
    let text = std::str::from_utf8(text)
        .with_context(|| format!("policy document {origin:?} is not UTF-8"))?;
    crate::policy::Policy::parse(text, &origin.display().to_string())?;
    Ok(json["plugins"][name].clone())
}

/// Reads a file given on the command line, with a size bound.
fn read_input(path: &Path, what: &str, max: u64) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .with_context(|| format!("reading {what} {path:?}"))?;
    if bytes.len() as u64 > max {
        bail!("{what} {path:?} is larger than {} KiB", max >> 10);
    }
    Ok(bytes)
}

/// Checks that `wasm` is a component wasmcni can load and run: it compiles
/// for this engine and imports nothing wasmcni does not provide.
fn check_component(engine: &wasmtime::Engine, wasm: &[u8], file: &Path) -> anyhow::Result<()> {
    if wasm.starts_with(b"\x7fELF") {
        bail!("{file:?} is a native ELF executable, not a WASI component: build the plugin with `cargo build --release --target wasm32-wasip2`");
    }
    if !wasm.starts_with(b"\0asm") {
        bail!("{file:?} is not a WebAssembly file (no \\0asm header): a plugin is a WASI component built for wasm32-wasip2");
    }
    if wasm.get(4..8) == Some(&[1, 0, 0, 0][..]) {
        bail!("{file:?} is a core WebAssembly module, not a component: build it for wasm32-wasip2 (not wasm32-wasip1 or wasm32-unknown-unknown)");
    }
    let component = wasmtime::component::Component::new(engine, wasm)
        .map_err(|e| anyhow::anyhow!("{file:?} is not a component wasmcni can load: {e:#}"))?;
    let refused = crate::runner::refused_imports(&crate::runner::imports(engine, &component));
    if !refused.is_empty() {
        bail!(
            "{file:?} imports interfaces wasmcni does not provide: {}",
            refused.join(", ")
        );
    }
    Ok(())
}

/// A network configuration's file name and bytes, checked.
fn conflist_file(path: &Path) -> anyhow::Result<(String, Vec<u8>)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| plain(n))
        .with_context(|| format!("--conflist {path:?}: not a plain file name"))?
        .to_owned();
    let bytes = read_input(path, "network configuration", 1 << 20)?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("network configuration {path:?} is not JSON"))?;
    let list = name.ends_with(".conflist");
    if !list && !name.ends_with(".conf") && !name.ends_with(".json") {
        bail!("network configuration {path:?}: the file name must end in .conflist, .conf or .json (runtimes read no other)");
    }
    if doc.get("name").and_then(|n| n.as_str()).is_none() {
        bail!("network configuration {path:?}: no string field `name`");
    }
    if list {
        let ok = doc
            .get("plugins")
            .and_then(|p| p.as_array())
            .is_some_and(|p| {
                !p.is_empty()
                    && p.iter()
                        .all(|e| e.get("type").is_some_and(|t| t.is_string()))
            });
        if !ok {
            bail!("network configuration {path:?}: a .conflist needs a non-empty `plugins` array whose entries each have a string `type`");
        }
    } else if doc.get("type").and_then(|t| t.as_str()).is_none() {
        bail!("network configuration {path:?}: no string field `type`");
    }
    Ok((name, bytes))
}

/// A plugin type a network configuration names: an entry's `type`, and
/// for a `wasmcni-chain` entry the types of its members (which wasmcni
/// runs in-process, without the bin dir).
#[derive(Debug, Clone, PartialEq)]
struct Named {
    ty: String,
    members: Vec<String>,
}

/// The plugin types network configuration `name` names: a `.conflist`'s
/// entries, or the one plugin of a `.conf` or `.json` (as runtimes read
/// them; a wasmcni-chain's config has `plugins` too: its members).
fn conf_types(name: &str, bytes: &[u8]) -> Vec<Named> {
    let doc: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    let entries = match doc.get("plugins").and_then(|p| p.as_array()) {
        Some(list) if name.ends_with(".conflist") => list.iter().collect(),
        _ => vec![&doc],
    };
    let ty = |e: &serde_json::Value| e.get("type").and_then(|t| t.as_str()).map(str::to_owned);
    entries
        .iter()
        .filter_map(|e| {
            let t = ty(e)?;
            let members = match e.get("plugins").and_then(|p| p.as_array()) {
                Some(list) if t == crate::chain::NAME => list.iter().filter_map(ty).collect(),
                _ => Vec::new(),
            };
            Some(Named { ty: t, members })
        })
        .collect()
}

/// A third-party plugin to install, resolved and checked.
struct ThirdParty {
    name: String,
    /// The file given (`--plugin`).
    file: PathBuf,
    sha256: String,
    wasm: Placement,
    /// Its entry in the policy dir: the one `--policy` gives, or the one
    /// install wrote before, re-pinned (`repinned`).
    entry: Option<Placement>,
    repinned: bool,
}

fn plan_plugin(
    arg: &PluginArg,
    plugin_dir: &Path,
    opts: &Options,
    engine: &wasmtime::Engine,
) -> anyhow::Result<ThirdParty> {
    let file = arg.file;
    let name = match arg.name {
        Some(n) => n.to_owned(),
        None => file
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_owned)
            .with_context(|| format!("--plugin {file:?}: no file name; give --name"))?,
    };
    if !plugins::valid_name(&name) {
        bail!("{}", plugins::LookupError::InvalidName(name));
    }
    if plugins::taken(&name) {
        bail!("plugin name {name:?} is taken by a standard plugin or component carried in wasmcni (a file cannot shadow it): choose another with --name");
    }
    let wasm = read_input(file, "plugin", 64 << 20)?;
    check_component(engine, &wasm, file)?;
    let sha = sha256_hex(&wasm);
    let wasm = Placement::plan(plugin_dir, &format!("{name}.wasm"), Content::Bytes(wasm))?;
    let dir = resolve_policy_dir(&opts.policy_dir)?;
    let mut repinned = false;
    let entry = match arg.policy {
        Some(entry_file) => {
            let text = read_input(entry_file, "policy entry", 1 << 20)?;
            let json: serde_json::Value = serde_json::from_slice(&text)
                .with_context(|| format!("policy entry {entry_file:?} is not JSON"))?;
            let json = given_entry(&name, json, &text, entry_file)?;
            let content = pinned_entry(&name, &json, &sha, entry_file)?;
            Some(Placement::plan(&dir, &format!("{name}.json"), content)?)
        }
        None => {
            let repin = plan_repin(&name, &sha, &dir)?;
            repinned = repin.is_some();
            repin
        }
    };
    Ok(ThirdParty {
        name,
        file: file.to_owned(),
        sha256: sha,
        wasm,
        entry,
        repinned,
    })
}

/// The third-party plugins to install (`--plugin`, each with its `--name`
/// and `--policy`), each a different name.
fn plan_plugins(
    opts: &Options,
    plugin_dir: &Path,
    engine: &wasmtime::Engine,
) -> anyhow::Result<Vec<ThirdParty>> {
    let mut planned: Vec<ThirdParty> = Vec::new();
    for arg in plugin_args(opts)? {
        let t = plan_plugin(&arg, plugin_dir, opts, engine)?;
        if let Some(other) = planned.iter().find(|o| o.name == t.name) {
            bail!(
                "--plugin {:?} and --plugin {:?} both install plugin {:?}: give one of them \
                 another --name",
                other.file,
                t.file,
                t.name
            );
        }
        planned.push(t);
    }
    Ok(planned)
}

/// A network configuration to install (`--conflist`), checked.
struct Network {
    /// The file given.
    file: PathBuf,
    /// The plugin types it names.
    types: Vec<Named>,
    placement: Placement,
}

/// The network configurations to install, each a different file name in
/// the conf dir.
fn plan_networks(opts: &Options) -> anyhow::Result<Vec<Network>> {
    let conf_dir = conf_dir(opts);
    let mut networks: Vec<Network> = Vec::new();
    for file in &opts.conflist {
        let (name, bytes) = conflist_file(file)?;
        if let Some(other) = networks.iter().find(|n| n.placement.name == name) {
            bail!(
                "--conflist {:?} and --conflist {file:?} would both be {}: the conf dir \
                 holds one file of a name",
                other.file,
                conf_dir.join(&name).display()
            );
        }
        networks.push(Network {
            file: file.clone(),
            types: conf_types(&name, &bytes),
            placement: Placement::plan(&conf_dir, &name, Content::Bytes(bytes))?,
        });
    }
    Ok(networks)
}

fn resolve_policy_dir(given: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    Ok(given
        .clone()
        .or_else(crate::policy::policy_dir)
        .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_POLICY_DIR)))
}

/// Before `--force` replaces `path` in the bin dir (`foreign`: it is not
/// wasmcni's), keeps it ([`backup::keep`]): what it was (`a native
/// binary`, `a link to X`), and where the backup is.
fn keep_foreign(
    dir: &Path,
    foreign: bool,
    path: &Path,
) -> anyhow::Result<Option<(String, PathBuf)>> {
    if !foreign {
        return Ok(None);
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{path:?}: no file name"))?;
    let meta = fs::symlink_metadata(path).with_context(|| format!("inspecting {path:?}"))?;
    let what = if meta.file_type().is_symlink() {
        format!(
            "a link to {}",
            fs::read_link(path).unwrap_or_default().display()
        )
    } else if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
        "a native binary".to_owned()
    } else {
        "a file that was not wasmcni's".to_owned()
    };
    Ok(Some((what, backup::keep(dir, name)?)))
}

/// The bin dir `given`, resolved: its canonical path if it exists, else
/// its absolute path (made only once install writes).
fn bin_dir_path(given: &Path) -> anyhow::Result<PathBuf> {
    match given.canonicalize() {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::path::absolute(given).with_context(|| format!("resolving {given:?}"))
        }
        Err(e) => Err(e).with_context(|| format!("resolving {given:?}")),
    }
}

/// Installs what `opts` names. Idempotent; checks everything before it
/// changes anything, and refuses to replace a file that is not its own
/// unless `force`.
pub fn install(opts: &Options) -> anyhow::Result<()> {
    if opts.then_sleep {
        block_termination()?;
    }
    // Nothing is written, not even DIR made, before every check passed.
    let dir = bin_dir_path(&opts.dir)?;
    let bin = dir.join(crate::plugins::SELF_NAME);
    let bundled: Vec<Plugin> = plugins::bundled().collect();

    // Check everything before changing anything.
    let networks = plan_networks(opts)?;
    let mut links = link_names(opts, &networks, &bundled)?;
    let engine = engine::engine()?;
    let plugin_dir = opts.plugin_dir.clone().unwrap_or_else(plugins::plugin_dir);
    let third = plan_plugins(opts, &plugin_dir, &engine)?;
    let policy = plan_policy_file(opts)?;
    links.extend(third.iter().map(|t| t.name.as_str()));
    let mut plan = vec![(bin.clone(), existing(&bin, None)?)];
    for name in &links {
        let path = dir.join(name);
        let state = existing(&path, Some(crate::plugins::SELF_NAME))?;
        plan.push((path, state));
    }
    let mut foreign: Vec<PathBuf> = plan
        .iter()
        .filter(|(_, s)| *s == Existing::Foreign)
        .map(|(p, _)| p.clone())
        .collect();
    let placements: Vec<&Placement> = third
        .iter()
        .flat_map(|t| std::iter::once(&t.wasm).chain(t.entry.as_ref()))
        .chain(policy.as_ref())
        .collect();
    foreign.extend(
        placements
            .iter()
            .copied()
            .chain(networks.iter().map(|n| &n.placement))
            .filter(|p| p.state == FileState::Foreign)
            .map(|p| p.path()),
    );
    if !foreign.is_empty() && !opts.force {
        // A standard name held by a native plugin (a third-party plugin's
        // name is the operator's choice).
        let native = plan.iter().skip(1).any(|(p, s)| {
            *s == Existing::Foreign
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n == crate::chain::NAME || bundled.iter().any(|b| b.name() == n)
                })
        });
        bail!(
            "refusing to replace files that are not wasmcni's own (use --force): {}{}",
            foreign
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if native {
                " (to keep a native plugin, leave its name out of --only: then its networks run it)"
            } else {
                ""
            }
        );
    }
    // --prune: the standard links an earlier install made that this one
    // does not ask for.
    let pruned: Vec<&str> = match opts.prune {
        false => Vec::new(),
        true => bundled
            .iter()
            .map(Plugin::name)
            .chain([crate::chain::NAME])
            .filter(|n| {
                !links.contains(n)
                    && fs::read_link(dir.join(n))
                        .is_ok_and(|t| t == Path::new(crate::plugins::SELF_NAME))
            })
            .collect(),
    };
    check_live(
        opts,
        &Live {
            dir: &dir,
            plugin_dir: &plugin_dir,
            links: &links,
            pruned: &pruned,
            third: &third,
            networks: &networks,
            policy: &policy,
        },
    )?;

    create_dir(&dir)?;
    let exe = std::env::current_exe()?.canonicalize()?;
    if exe != bin {
        let same = plan[0].1 == Existing::Ours
            && fs::read(&exe).with_context(|| format!("reading {exe:?}"))?
                == fs::read(&bin).with_context(|| format!("reading {bin:?}"))?;
        if same {
            println!("{}: unchanged", bin.display());
        } else {
            let kept = keep_foreign(&dir, plan[0].1 == Existing::Foreign, &bin)?;
            let src = fs::File::open(&exe).with_context(|| format!("reading {exe:?}"))?;
            write_atomic_with(&bin, |tmp| {
                use std::io::Seek;
                (&src).rewind()?;
                create_file(tmp, 0o755, &mut &src)
            })?;
            match kept {
                Some((what, b)) => println!(
                    "{}: replaced {what} with wasmcni (backup: {})",
                    bin.display(),
                    b.display()
                ),
                None => println!("{}: installed", bin.display()),
            }
        }
    }
    for (path, state) in plan.iter().skip(1) {
        if *state == Existing::Ours {
            continue;
        }
        // A foreign file or link is kept, then replaced in one step
        // (rename), never followed.
        let kept = keep_foreign(&dir, *state == Existing::Foreign, path)?;
        write_atomic_with(path, |tmp| {
            std::os::unix::fs::symlink(crate::plugins::SELF_NAME, tmp)
        })
        .with_context(|| format!("linking {path:?}"))?;
        match kept {
            Some((what, b)) => println!(
                "{}: replaced {what} with a link to wasmcni (backup: {})",
                path.display(),
                b.display()
            ),
            None => println!("{}: linked to wasmcni", path.display()),
        }
    }
    for name in &pruned {
        let path = dir.join(name);
        match backup::restore(&dir, name)? {
            Some(b) => println!(
                "{}: pruned (not linked any more); put back what --force replaced (from {})",
                path.display(),
                b.display()
            ),
            None => {
                fs::remove_file(&path).with_context(|| format!("removing {path:?}"))?;
                println!("{}: pruned (not linked any more)", path.display());
            }
        }
    }
    backup::tidy(&dir);
    // The network configurations come last (below): a runtime (and the
    // kubelet, which calls a node ready when one appears) may use them at
    // once.
    for p in &placements {
        p.apply()?;
    }
    for t in third.iter().filter(|t| t.repinned) {
        println!(
            "{}: re-pinned to sha256 {}",
            t.entry
                .as_ref()
                .map(|e| e.path())
                .unwrap_or_default()
                .display(),
            t.sha256
        );
    }

    // The cache the installed plugins will load from: `$WASMCNI_CACHE_DIR`
    // if set (as it is read at run time), else the one beside them, which
    // is the install's own to prune.
    let shared = crate::config::get().cache_dir.clone();
    let cache = ArtifactCache::new(match &shared {
        Some(d) => d.clone(),
        None => dir.join(".wasmcni-cache"),
    });
    // The standard plugins linked here: those just linked, and those an
    // earlier install linked (with another --only).
    let mut all: Vec<Plugin> = bundled
        .iter()
        .filter(|p| {
            links.contains(&p.name())
                || fs::read_link(dir.join(p.name()))
                    .is_ok_and(|t| t == Path::new(crate::plugins::SELF_NAME))
        })
        .cloned()
        .collect();
    all.extend(installed_third_party(&dir, &plugin_dir));
    for p in &all {
        let mut artifact = engine::precompile(&engine, p, &cache)?;
        if !engine::stamp_path(&artifact).exists() {
            // Loading it once verifies it and stamps it, as the first run
            // would: that run is then cheaper, and a second install
            // changes nothing.
            artifact = engine::precompile(&engine, p, &cache)?;
        }
        println!(
            "{} -> wasmcni ({})",
            dir.join(p.name()).display(),
            artifact.display()
        );
    }
    if shared.is_none() {
        remove_stale(&cache, &engine, &all)?;
    }
    for n in &networks {
        n.placement.apply()?;
    }
    if opts.then_sleep {
        wait_for_termination()?;
    }
    Ok(())
}

/// The standard names install links: those `--only` lists, the chain
/// runner's included (a node that chose which names wasmcni takes gets no
/// other); without `--only`, those the networks it installs name (their
/// types, and the members of a `wasmcni-chain`), else every standard
/// plugin and the chain runner.
fn link_names<'a>(
    opts: &'a Options,
    networks: &'a [Network],
    bundled: &'a [Plugin],
) -> anyhow::Result<Vec<&'a str>> {
    let standard =
        |name: &str| name == crate::chain::NAME || bundled.iter().any(|p| p.name() == name);
    let Some(only) = &opts.only else {
        if networks.is_empty() {
            return Ok(bundled
                .iter()
                .map(Plugin::name)
                .chain([crate::chain::NAME])
                .collect());
        }
        let mut names: Vec<&str> = Vec::new();
        let named = networks.iter().flat_map(|n| &n.types);
        for name in named.flat_map(|t| std::iter::once(&t.ty).chain(&t.members)) {
            if standard(name) && !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        return Ok(names);
    };
    let mut names = Vec::new();
    for name in only.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if !standard(name) {
            bail!(
                "--only: {name:?} is not a standard plugin; the standard plugins are: {} \
                 (and the chain runner, {})",
                bundled
                    .iter()
                    .map(Plugin::name)
                    .collect::<Vec<_>>()
                    .join(", "),
                crate::chain::NAME
            );
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        bail!("--only: no plugin named (give standard plugin names, comma-separated)");
    }
    Ok(names)
}

/// The policy file to install (`--policy-file`), checked: one with a typo
/// never reaches the node.
fn plan_policy_file(opts: &Options) -> anyhow::Result<Option<Placement>> {
    let Some(f) = &opts.policy_file else {
        return Ok(None);
    };
    let bytes = read_input(f, "policy file", 1 << 20)?;
    let text =
        std::str::from_utf8(&bytes).with_context(|| format!("policy file {f:?} is not UTF-8"))?;
    crate::policy::Policy::parse(text, &f.display().to_string())?;
    let target = policy_target(opts);
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| plain(n))
        .with_context(|| format!("--policy-target {target:?}: not a file path"))?
        .to_owned();
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok(Some(Placement::plan(parent, &name, Content::Bytes(bytes))?))
}

/// What install plans, as [`check_live`] checks it.
struct Live<'a> {
    dir: &'a Path,
    plugin_dir: &'a Path,
    links: &'a [&'a str],
    pruned: &'a [&'a str],
    third: &'a [ThirdParty],
    networks: &'a [Network],
    policy: &'a Option<Placement>,
}

/// Checks what a run would refuse once install has written what it plans
/// ([`check::Prospect`]); refuses, naming each problem, unless
/// `--allow-broken`, which only warns. Prints the warnings.
fn check_live(opts: &Options, live: &Live) -> anyhow::Result<()> {
    let policy_dir = resolve_policy_dir(&opts.policy_dir)?;
    let policy_file = live
        .policy
        .as_ref()
        .map_or_else(|| policy_target(opts), Placement::path);
    let entries: Vec<(&str, &serde_json::Value)> = live
        .third
        .iter()
        .filter_map(|t| match &t.entry.as_ref()?.content {
            Content::Entry { json, .. } => Some((t.name.as_str(), json)),
            Content::Bytes(_) => None,
        })
        .collect();
    let new_policy_file = live.policy.as_ref().and_then(|p| match &p.content {
        Content::Bytes(b) => Some(b.as_slice()),
        Content::Entry { .. } => None,
    });
    // The networks already in the conf dir, whose links --prune must
    // keep (those this run writes are checked as it writes them).
    let in_conf_dir = match live.pruned.is_empty() {
        true => Vec::new(),
        false => {
            let writing: Vec<&str> = live
                .networks
                .iter()
                .map(|n| n.placement.name.as_str())
                .collect();
            conf_dir_networks(&conf_dir(opts), &writing)
        }
    };
    let found = check::Prospect {
        dir: live.dir,
        plugin_dir: live.plugin_dir,
        policy_dir: &policy_dir,
        policy_file: &policy_file,
        new_policy_file,
        installing: live
            .third
            .iter()
            .map(|t| (t.name.as_str(), t.sha256.as_str()))
            .collect(),
        entries,
        links: live.links,
        pruned: live.pruned,
        networks: live
            .networks
            .iter()
            .map(|n| (n.file.as_path(), n.types.as_slice()))
            .collect(),
        in_conf_dir: in_conf_dir
            .iter()
            .map(|(p, t)| (p.as_path(), t.as_slice()))
            .collect(),
    }
    .check();
    for w in &found.warnings {
        eprintln!("wasmcni: warning: {w}");
    }
    if found.broken.is_empty() {
        return Ok(());
    }
    if opts.allow_broken {
        for b in &found.broken {
            eprintln!("wasmcni: WARNING: {b} (installing anyway: --allow-broken)");
        }
        return Ok(());
    }
    bail!(
        "refusing to install what wasmcni would refuse to run (nothing was changed):\n{}\n\
         Fix these, or rerun with --allow-broken to install anyway.",
        found
            .broken
            .iter()
            .map(|b| format!("  - {b}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The conf dir: `--conf-dir`, else the default.
fn conf_dir(opts: &Options) -> PathBuf {
    opts.conf_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONF_DIR))
}

/// The network configurations in `conf_dir` (as a runtime finds them:
/// `.conflist`, `.conf`, `.json`, not hidden), but `skip`, each with the
/// types it names; unreadable ones are left out.
fn conf_dir_networks(conf_dir: &Path, skip: &[&str]) -> Vec<(PathBuf, Vec<Named>)> {
    network_configs(conf_dir)
        .into_iter()
        .filter(|name| !skip.contains(&name.as_str()))
        .filter_map(|name| {
            let path = conf_dir.join(&name);
            let bytes = read_input(&path, "network configuration", 1 << 20).ok()?;
            Some((path, conf_types(&name, &bytes)))
        })
        .collect()
}

/// The names of the network configurations in `conf_dir`, in the order a
/// runtime (libcni, the kubelet) considers them: `.conflist`, `.conf`,
/// `.json`, not hidden, sorted.
pub(crate) fn network_configs(conf_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(conf_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|name| {
            plain(name)
                && [".conflist", ".conf", ".json"]
                    .iter()
                    .any(|x| name.ends_with(x))
        })
        .collect();
    names.sort();
    names
}

/// Where the policy file is (or goes): `--policy-target`, else
/// `$WASMCNI_POLICY`, else the default.
fn policy_target(opts: &Options) -> PathBuf {
    opts.policy_target.clone().unwrap_or_else(|| {
        crate::config::get()
            .policy
            .clone()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_POLICY_FILE))
    })
}

/// The third-party plugins `dir` links to: `<plugin dir>/X.wasm` for
/// every link `dir/X -> wasmcni` that is not a standard plugin. Unreadable
/// or invalid files are skipped (the run reports them).
fn installed_third_party(dir: &Path, plugin_dir: &Path) -> Vec<Plugin> {
    plugins::third_party_in(plugin_dir)
        .into_iter()
        .filter(|(name, _)| {
            !plugins::bundled().any(|p| p.name() == name)
                && fs::read_link(dir.join(name))
                    .is_ok_and(|t| t == Path::new(crate::plugins::SELF_NAME))
        })
        .filter_map(|(_, p)| p.ok())
        .collect()
}

/// Without `--policy`: a `<policy dir>/NAME.json` whose pin is not the
/// plugin's `sha256` is re-pinned when install wrote it (its bytes are
/// still those recorded). Anyone else's is left alone: the checks then
/// find the mismatch (a run would refuse the plugin).
fn plan_repin(name: &str, sha: &str, dir: &Path) -> anyhow::Result<Option<Placement>> {
    let file = format!("{name}.json");
    let path = dir.join(&file);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {path:?}")),
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Ok(None);
    };
    let pin = json.get("sha256").and_then(|s| s.as_str());
    if pin.is_none_or(|p| p.eq_ignore_ascii_case(sha))
        || !Record::load(dir)?.claims(&file, &sha256_hex(&bytes))
    {
        return Ok(None);
    }
    let content =
        pinned_entry(name, &json, sha, &path).with_context(|| format!("re-pinning {path:?}"))?;
    Ok(Some(Placement::plan(dir, &file, content)?))
}

/// The signals that end `--then-sleep`.
fn termination_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set
}

/// For `--then-sleep`: blocks SIGTERM and SIGINT before any thread is
/// started (wasmtime compiles on a thread pool), so every thread inherits
/// the mask and the signal waits, pending, for [`wait_for_termination`].
/// As pid 1 of a container, a process-wide signal delivered to a thread
/// with the default action would be discarded, and the pod would only end
/// with SIGKILL after its grace period.
fn block_termination() -> anyhow::Result<()> {
    termination_signals()
        .thread_block()
        .context("blocking SIGTERM")
}

/// After installing: waits for SIGTERM or SIGINT (a DaemonSet's container
/// must keep running; the image has no shell to `sleep` with), blocked
/// since [`block_termination`].
fn wait_for_termination() -> anyhow::Result<()> {
    println!("installed; waiting for SIGTERM");
    let sig = termination_signals()
        .wait()
        .context("waiting for SIGTERM")?;
    println!("{sig}: exiting");
    Ok(())
}

/// Removes artifacts in `cache` for other plugin builds or engines.
fn remove_stale(
    cache: &ArtifactCache,
    engine: &wasmtime::Engine,
    keep: &[Plugin],
) -> anyhow::Result<()> {
    let fp = engine::fingerprint(engine);
    let mut wanted: Vec<PathBuf> = keep.iter().map(|p| cache.path_for(p, &fp)).collect();
    wanted.extend(wanted.clone().iter().map(|p| engine::stamp_path(p)));
    let entries = match fs::read_dir(cache.dir()) {
        // Nothing was precompiled (`--only wasmcni-chain`): nothing stale.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r.with_context(|| format!("reading the artifact cache {:?}", cache.dir()))?,
    };
    for entry in entries {
        let path = entry?.path();
        let ours = path.extension().is_some_and(|e| e == "cwasm" || e == "ok");
        if ours && !wanted.contains(&path) {
            fs::remove_file(&path).with_context(|| format!("removing stale artifact {path:?}"))?;
        }
    }
    Ok(())
}

/// Precompiles the standard plugins and `extra` into the cache.
pub fn precompile(extra: &[PathBuf], cache_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let cache = match cache_dir {
        Some(d) => ArtifactCache::new(d),
        None => ArtifactCache::default_location().context("no cache directory")?,
    };
    let engine = engine::engine()?;
    let mut all: Vec<Plugin> = plugins::bundled().collect();
    for path in extra {
        all.push(Plugin::from_path(path)?);
    }
    for p in &all {
        println!(
            "{}: {}",
            p.name(),
            engine::precompile(&engine, p, &cache)?.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options as the command line gives them.
    fn parse(args: &[&str]) -> Result<Options, String> {
        use clap::{CommandFactory, FromArgMatches};
        #[derive(clap::Parser)]
        struct Cmd {
            #[command(flatten)]
            opts: Options,
        }
        let m = Cmd::command()
            .try_get_matches_from(std::iter::once("install").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let mut opts = Cmd::from_arg_matches(&m).map_err(|e| e.to_string())?.opts;
        opts.positions = Positions::from_matches(&m);
        Ok(opts)
    }

    #[test]
    fn each_name_and_policy_belongs_to_the_plugin_before_it() {
        let o = parse(&[
            "/bin", "--plugin", "a.wasm", "--policy", "a.json", "--plugin", "b.wasm", "--plugin",
            "c.wasm", "--name", "cee", "--policy", "c.json",
        ])
        .unwrap();
        let arg = |file, name, policy: Option<&'static str>| PluginArg {
            file: Path::new(file),
            name,
            policy: policy.map(Path::new),
        };
        assert_eq!(
            plugin_args(&o).unwrap(),
            [
                arg("a.wasm", None, Some("a.json")),
                arg("b.wasm", None, None),
                arg("c.wasm", Some("cee"), Some("c.json")),
            ]
        );
        // `=` and flags of other kinds in between change nothing.
        let o = parse(&["/bin", "--plugin=a.wasm", "--force", "--name=x"]).unwrap();
        assert_eq!(plugin_args(&o).unwrap(), [arg("a.wasm", Some("x"), None)]);
        let err = |args: &[&str]| format!("{:#}", plugin_args(&parse(args).unwrap()).unwrap_err());
        assert!(err(&["/bin", "--policy", "a.json", "--plugin", "a.wasm"])
            .contains("--policy \"a.json\" comes before any --plugin"));
        assert!(
            err(&["/bin", "--plugin", "a.wasm", "--policy", "x", "--policy", "y"])
                .contains("two --policy (\"x\", \"y\")")
        );
        assert!(
            err(&["/bin", "--name", "n", "--plugin", "a.wasm", "--name", "m"])
                .contains("--name \"n\" comes before any --plugin")
        );
        assert!(
            err(&["/bin", "--plugin", "a.wasm", "--name", "n", "--name", "m"])
                .contains("two --name")
        );
        // Without positions (not from a command line): in order.
        let mut o = parse(&[
            "/bin", "--plugin", "a.wasm", "--plugin", "b.wasm", "--name", "bee",
        ])
        .unwrap();
        o.positions = Positions::default();
        assert_eq!(
            plugin_args(&o).unwrap(),
            [arg("a.wasm", Some("bee"), None), arg("b.wasm", None, None)]
        );
    }

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

    #[test]
    fn a_replacement_never_goes_through_what_is_at_a_temporary_name() {
        let d = tempfile::tempdir().unwrap();
        let d = d.path();
        fs::write(d.join("victim"), b"victim").unwrap();
        let target = d.join("f");
        std::os::unix::fs::symlink(d.join("victim"), &target).unwrap();
        // The first temporary name is taken (a symlink planted there, as
        // by someone who guessed it): it is neither written through nor
        // removed, and the next name is used.
        let planted = std::cell::RefCell::new(Vec::new());
        write_atomic_with(&target, |tmp| {
            if planted.borrow().is_empty() {
                std::os::unix::fs::symlink(d.join("victim"), tmp).unwrap();
                planted.borrow_mut().push(tmp.to_owned());
            }
            create_file(tmp, 0o644, &mut &b"new"[..])
        })
        .unwrap();
        assert_eq!(fs::read(d.join("victim")).unwrap(), b"victim");
        let planted = &planted.borrow()[0];
        assert_eq!(fs::read_link(planted).unwrap(), d.join("victim"));
        // The target (a symlink) was replaced, not followed.
        assert!(fs::symlink_metadata(&target).unwrap().is_file());
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // A failure removes only its own temporary.
        let err = write_atomic_with(&d.join("g"), |tmp| {
            fs::write(tmp, b"partial")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("disk full"), "{err:#}");
        let mut names: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
    }

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

    #[test]
    fn a_policy_entry_is_the_same_when_it_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let sha = "ab".repeat(32);
        let origin = Path::new("e.json");
        let entry = serde_json::json!({"container": {"read": true}});
        let content = || pinned_entry("p", &entry, &sha, origin).unwrap();
        // Formatted otherwise, the same entry with the same pin.
        fs::write(
            d.join("p.json"),
            format!("{{ \"sha256\": \"{sha}\",\n  \"container\": {{ \"read\": true }} }}"),
        )
        .unwrap();
        assert_eq!(
            Placement::plan(d, "p.json", content()).unwrap().state,
            FileState::Same
        );
        // Another pin: someone else's file.
        fs::write(
            d.join("p.json"),
            serde_json::json!({"sha256": "cd".repeat(32), "container": {"read": true}}).to_string(),
        )
        .unwrap();
        assert_eq!(
            Placement::plan(d, "p.json", content()).unwrap().state,
            FileState::Foreign
        );
        // Entries are checked as a run checks them, before anything is written.
        let e = |v: serde_json::Value| {
            format!("{:#}", pinned_entry("p", &v, &sha, origin).unwrap_err())
        };
        assert!(e(serde_json::json!([1])).contains("must be a JSON object"));
        assert!(e(serde_json::json!({"container": {"modfiy": true}})).contains("modfiy"));
    }

    #[test]
    fn network_configurations_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let f = |name: &str, text: &str| {
            let p = dir.path().join(name);
            fs::write(&p, text).unwrap();
            conflist_file(&p).map_err(|e| format!("{e:#}"))
        };
        let ok =
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"loopback"},{"type":"my"}]}"#;
        let (name, bytes) = f("10-n.conflist", ok).unwrap();
        assert_eq!(name, "10-n.conflist");
        let named = |ty: &str, members: &[&str]| Named {
            ty: ty.to_owned(),
            members: members.iter().map(|m| (*m).to_owned()).collect(),
        };
        assert_eq!(
            conf_types(&name, &bytes),
            [named("loopback", &[]), named("my", &[])]
        );
        let chain = r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"wasmcni-chain",
            "plugins":[{"type":"bridge"},{"type":"tuning"}]},{"type":"x","plugins":[{"type":"y"}]}]}"#;
        let (name, bytes) = f("c.conflist", chain).unwrap();
        assert_eq!(
            conf_types(&name, &bytes),
            [
                named("wasmcni-chain", &["bridge", "tuning"]),
                named("x", &[])
            ]
        );
        let (name, bytes) = f("one.conf", r#"{"name":"n","type":"ptp"}"#).unwrap();
        assert_eq!(conf_types(&name, &bytes), [named("ptp", &[])]);
        let (name, bytes) = f(
            "chain.conf",
            r#"{"name":"n","type":"wasmcni-chain","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        assert_eq!(
            conf_types(&name, &bytes),
            [named("wasmcni-chain", &["bridge"])]
        );
        assert!(f("n.conflist", r#"{"name":"n","plugins":[{"type":1}]}"#)
            .unwrap_err()
            .contains("string `type`"));
        assert!(f("n.txt", ok)
            .unwrap_err()
            .contains(".conflist, .conf or .json"));
        assert!(f("n.conflist", "{").unwrap_err().contains("not JSON"));
        assert!(f("n.conflist", r#"{"name":"n","plugins":[]}"#)
            .unwrap_err()
            .contains("plugins"));
        assert!(f("n.conflist", r#"{"plugins":[{"type":"x"}]}"#)
            .unwrap_err()
            .contains("`name`"));
        assert!(f("n.conf", r#"{"name":"n"}"#)
            .unwrap_err()
            .contains("`type`"));
        assert!(f(".hidden.conflist", ok).unwrap_err().contains("plain"));
    }

    #[test]
    fn non_components_get_a_message_that_says_what_to_do() {
        let engine = engine::engine().unwrap();
        let f = Path::new("p.wasm");
        let msg = |b: &[u8]| format!("{:#}", check_component(&engine, b, f).unwrap_err());
        assert!(msg(b"\x7fELF\x02\x01\x01").contains("--target wasm32-wasip2"));
        assert!(msg(b"#!/bin/sh\n").contains("not a WebAssembly file"));
        assert!(msg(b"\0asm\x01\0\0\0").contains("core WebAssembly module"));
        assert!(msg(b"\0asm\x0d\0\x01\0garbage").contains("not a component wasmcni can load"));
    }
}

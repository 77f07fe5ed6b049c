//! What a run would refuse on the node install is about to make live.
//!
//! Install checks the node as it will be once it has written what it
//! plans — the plugins it installs, the policy entries and policy file it
//! writes, the links it makes — before it writes anything, with the
//! checks `wasmcni list` makes ([`inspect::PolicyStatus`],
//! [`inspect::bin_entry`]): a plugin whose policy entry is invalid,
//! ambiguous (in both the policy file and the policy dir) or pinned to
//! another build; a network configuration naming a type that will not be
//! in the bin dir, or a `wasmcni-chain` member wasmcni cannot run.
//!
//! The node's paths are install's (`--policy-target`, `--policy-dir`,
//! `--plugin-dir`), not those of install's own environment: on a node
//! installed through a mount (the DaemonSet's `/host/...`) they are where
//! a run will read them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::bail;
use serde_json::Value;

use super::backup;
use super::network::{conf_dir, conf_dir_networks, Named, Network};
use super::placement::{Content, Placement};
use super::plugin::ThirdParty;
use super::policy::{policy_target, resolve_policy_dir};
use super::Options;
use crate::inspect::{self, PolicyStatus};
use crate::policy::{Entry, Policy, PolicyError, Source};

/// The node as install will leave it.
pub(super) struct Prospect<'a> {
    /// The bin dir.
    pub dir: &'a Path,
    /// Where third-party plugins are.
    pub plugin_dir: &'a Path,
    /// The policy dir.
    pub policy_dir: &'a Path,
    /// The policy file.
    pub policy_file: &'a Path,
    /// The policy file's new bytes, if install writes it.
    pub new_policy_file: Option<&'a [u8]>,
    /// The plugins install installs: name and sha256.
    pub installing: Vec<(&'a str, &'a str)>,
    /// The entries install writes into the policy dir: plugin and JSON.
    pub entries: Vec<(&'a str, &'a Value)>,
    /// The names install links to wasmcni in the bin dir.
    pub links: &'a [&'a str],
    /// The links to wasmcni install removes (`--prune`), putting back what
    /// `--force` replaced there, if it kept anything.
    pub pruned: &'a [&'a str],
    /// The network configurations install writes: the file given, and the
    /// types it names.
    pub networks: Vec<(&'a Path, &'a [Named])>,
    /// The network configurations already in the conf dir (read only when
    /// something is pruned): their types keep their links.
    pub in_conf_dir: Vec<(&'a Path, &'a [Named])>,
}

/// What the checks found.
#[derive(Debug, Default)]
pub(super) struct Findings {
    /// What a run would refuse: each names the plugin or the network, the
    /// file, and what to change.
    pub broken: Vec<String>,
    /// What runs, but not as one may expect (a plugin with no policy
    /// entry, a type the network runs as a native binary).
    pub warnings: Vec<String>,
}

/// A plugin a name reaches: its sha256 and whether it is a standard one.
struct Reached {
    sha256: String,
    bundled: bool,
}

impl Prospect<'_> {
    /// Checks the plugins install installs, the networks it writes, the
    /// entries of the policy file it writes, and that `--prune` takes no
    /// link a network already in the conf dir runs.
    pub fn check(&self) -> Findings {
        let mut found = Findings::default();
        for (conf, types) in &self.in_conf_dir {
            for ty in types.iter().map(|t| t.ty.as_str()) {
                if self.pruned.contains(&ty) && !backup::has(self.dir, ty) {
                    found.broken.push(format!(
                        "--prune would remove {}, which {} names: add {ty} to --only (or \
                         remove that network first)",
                        self.dir.join(ty).display(),
                        conf.display()
                    ));
                }
            }
        }
        if self.installing.is_empty()
            && self.links.is_empty()
            && self.networks.is_empty()
            && self.new_policy_file.is_none()
        {
            // Nothing a run reads is new.
            return found;
        }
        // A run refuses every entry of a policy dir others could write.
        if let Err(why) = crate::policy::check_trusted_dir(self.policy_dir) {
            found.broken.push(format!(
                "the policy dir {}: {why}",
                self.policy_dir.display()
            ));
        }
        let file = self.file_entries(&mut found);
        // The plugins whose policy a run of what install makes live reads.
        // The plugins install installs, and the standard ones it links (a
        // run of the link reads the plugin's entry too).
        let mut plugins: BTreeSet<String> = self
            .installing
            .iter()
            .map(|(n, _)| *n)
            .chain(
                self.links
                    .iter()
                    .copied()
                    .filter(|n| *n != crate::chain::NAME),
            )
            .map(str::to_owned)
            .collect();
        if self.new_policy_file.is_some() {
            plugins.extend(file.keys().cloned());
        }
        for (conf, types) in &self.networks {
            for named in *types {
                self.check_type(conf, named, &mut plugins, &mut found);
            }
        }
        for name in &plugins {
            self.check_policy(name, &file, &mut found);
        }
        found
    }

    /// The policy file's entries as a run will read them (its new bytes, or
    /// the file there now); a file that will not load is broken for every
    /// plugin.
    fn file_entries(&self, found: &mut Findings) -> BTreeMap<String, Value> {
        let path = self.policy_file;
        let bytes = match self.new_policy_file {
            // Checked as a whole before (install refuses one that does not
            // parse).
            Some(b) => b.to_vec(),
            None => {
                if std::fs::symlink_metadata(path).is_err() {
                    return BTreeMap::new();
                }
                // As a run loads it (trust, top level); its entries are
                // checked per plugin below. Errors about another file (the
                // policy dir of install's own environment) are not this
                // node's.
                if let Err(e) = Policy::load(Some(path)) {
                    let about_file = match &e {
                        PolicyError::Io { path: p, .. }
                        | PolicyError::Untrusted { path: p, .. } => p == path,
                        PolicyError::Invalid { origin, .. } => {
                            *origin == path.display().to_string()
                        }
                        PolicyError::Ambiguous { .. } => false,
                    };
                    if about_file {
                        found.broken.push(format!(
                            "the policy file does not load ({e}): wasmcni refuses every plugin \
                             until it is fixed"
                        ));
                    }
                }
                std::fs::read(path).unwrap_or_default()
            }
        };
        serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("plugins").and_then(Value::as_object).cloned())
            .map(|m| m.into_iter().collect())
            .unwrap_or_default()
    }

    /// The plugin `name` reaches: a standard one, one install installs, or
    /// `<plugin dir>/NAME.wasm`.
    fn reach(&self, name: &str) -> Option<Reached> {
        if let Some((_, sha)) = self.installing.iter().find(|(n, _)| *n == name) {
            return Some(Reached {
                sha256: (*sha).to_owned(),
                bundled: false,
            });
        }
        crate::plugins::find_in(name, self.plugin_dir)
            .ok()
            .map(|p| Reached {
                sha256: p.sha256().to_owned(),
                bundled: *p.origin() == crate::plugins::Origin::Bundled,
            })
    }

    /// Plugin `name`'s entry as a run will resolve it ([`Policy::resolve`]
    /// and [`Policy::source`], over install's paths), with where it comes
    /// from.
    fn resolve(
        &self,
        name: &str,
        bundled: bool,
        file: &BTreeMap<String, Value>,
    ) -> (Result<Entry, PolicyError>, Option<Source>) {
        let dir_path = self.policy_dir.join(format!("{name}.json"));
        let planned = self.entries.iter().find(|(n, _)| *n == name);
        let in_dir = planned.is_some() || std::fs::symlink_metadata(&dir_path).is_ok();
        match (file.get(name), in_dir) {
            (Some(_), true) => (
                Err(PolicyError::Ambiguous {
                    name: name.to_owned(),
                    file: self.policy_file.to_owned(),
                    dir: dir_path.clone(),
                }),
                Some(Source::Dir(dir_path)),
            ),
            (Some(value), false) => {
                let origin = self.policy_file.display().to_string();
                (
                    Entry::from_value(name, value, &origin),
                    Some(Source::File(self.policy_file.to_owned())),
                )
            }
            (None, true) => {
                let origin = dir_path.display().to_string();
                let entry = match planned {
                    Some((_, value)) => Entry::from_value(name, value, &origin),
                    None => crate::policy::read_entry_file(name, &dir_path),
                };
                (entry, Some(Source::Dir(dir_path)))
            }
            (None, false) => {
                let embedded = Policy::embedded();
                (
                    embedded.resolve(name, bundled),
                    embedded.source(name, bundled),
                )
            }
        }
    }

    /// Whether a run of plugin `name` would be refused for its policy.
    fn check_policy(&self, name: &str, file: &BTreeMap<String, Value>, found: &mut Findings) {
        let reached = self.reach(name);
        let bundled = reached.as_ref().is_some_and(|r| r.bundled);
        let (resolved, source) = self.resolve(name, bundled, file);
        let Some(reached) = reached else {
            // No plugin of that name (yet): only its entry can be wrong.
            if let Err(e) = resolved {
                found
                    .broken
                    .push(format!("plugin {name:?}'s policy entry is refused: {e}"));
            }
            return;
        };
        let status = PolicyStatus::of(resolved, source, &reached.sha256);
        if let Some(why) = status.refused {
            let fix = match (&status.pinned, &status.source) {
                (Some(false), Some(Source::Dir(p))) => format!(
                    ": set `sha256` in {} to {}, or install it with --policy ENTRY.json \
                     (and --force to replace an entry install did not write)",
                    p.display(),
                    reached.sha256
                ),
                (Some(false), Some(Source::File(p))) => format!(
                    ": set plugins.{name}.sha256 in {} to {}",
                    p.display(),
                    reached.sha256
                ),
                _ => String::new(),
            };
            found.broken.push(format!(
                "plugin {name:?} would be REFUSED on every run: {why}{fix}"
            ));
        } else if status.source.is_none() && self.installing.iter().any(|(n, _)| *n == name) {
            found.warnings.push(format!(
                "plugin {name:?}: it has no policy entry: it runs, but every capability call \
                 it makes is denied (give --policy ENTRY.json)"
            ));
        }
    }

    /// Whether the bin dir will hold something a runtime can run as
    /// `named.ty` (and wasmcni each of a chain's members); the plugins that
    /// run as wasmcni's join `plugins`, for their policy to be checked.
    fn check_type(
        &self,
        conf: &Path,
        named: &Named,
        plugins: &mut BTreeSet<String>,
        found: &mut Findings,
    ) {
        let ty = named.ty.as_str();
        let conf = conf.display();
        let at = self.dir.join(ty);
        if !crate::plugins::valid_name(ty) {
            found.broken.push(format!(
                "{conf} names plugin type {ty:?}, which is not a plugin name: no runtime can run it"
            ));
            return;
        }
        let standard =
            ty == crate::chain::NAME || crate::plugins::bundled().any(|p| p.name() == ty);
        let pruned = self.pruned.contains(&ty);
        let runs_wasmcni = if self.links.contains(&ty) {
            true
        } else if pruned && backup::has(self.dir, ty) {
            // What --force replaced comes back.
            found.warnings.push(format!(
                "{conf} names plugin type {ty:?}: --prune puts back the file --force \
                 replaced at {}, so the network runs it, not wasmcni's {ty}",
                at.display()
            ));
            false
        } else if pruned || std::fs::symlink_metadata(&at).is_err() {
            let fix = if standard {
                format!("add {ty} to --only")
            } else {
                format!("install it (--plugin {ty}.wasm), or put its plugin binary there")
            };
            found.broken.push(format!(
                "{conf} names plugin type {ty:?}, but {} will not exist{}: {fix}",
                at.display(),
                if pruned { " (--prune removes it)" } else { "" }
            ));
            return;
        } else {
            let entry = inspect::bin_entry(self.dir, ty, self.plugin_dir);
            match entry["kind"].as_str().unwrap_or_default() {
                "wasmcni link" => {
                    if let Some(why) = entry["plugin"]
                        .as_str()
                        .and_then(|p| p.strip_prefix("NOT FOUND: "))
                    {
                        found.broken.push(format!(
                            "{conf} names plugin type {ty:?}: {} is a link to wasmcni, but \
                             wasmcni has no such plugin ({why}): install it with --plugin \
                             {ty}.wasm",
                            at.display()
                        ));
                        return;
                    }
                    true
                }
                "native binary" => {
                    if standard {
                        found.warnings.push(format!(
                            "{conf} names plugin type {ty:?}: {} is a native binary, so the \
                             network runs it, not wasmcni's {ty}",
                            at.display()
                        ));
                    }
                    false
                }
                kind => {
                    let what = match kind {
                        "not executable" | "unreadable" => kind.to_owned(),
                        "wasmcni" => "wasmcni itself, not a plugin".to_owned(),
                        _ => format!("a {kind}"),
                    };
                    found.broken.push(format!(
                        "{conf} names plugin type {ty:?}, but {} is {what}: a runtime \
                         cannot run it",
                        at.display()
                    ));
                    return;
                }
            }
        };
        if !runs_wasmcni {
            return;
        }
        if ty != crate::chain::NAME {
            plugins.insert(ty.to_owned());
            return;
        }
        for (i, member) in named.members.iter().enumerate() {
            if member == crate::chain::NAME {
                found.broken.push(format!(
                    "{conf}: {ty} member plugins[{i}] is a chain itself (chains do not nest)"
                ));
            } else if self.reach(member).is_none() {
                found.broken.push(format!(
                    "{conf}: {ty} member plugins[{i}].type {member:?} is not a plugin wasmcni \
                     can run (not a standard plugin, no {}): install it with --plugin \
                     {member}.wasm",
                    self.plugin_dir.join(format!("{member}.wasm")).display()
                ));
            } else {
                plugins.insert(member.clone());
            }
        }
    }
}

/// What install plans, as [`check_live`] checks it.
pub(super) struct Live<'a> {
    pub(super) dir: &'a Path,
    pub(super) plugin_dir: &'a Path,
    pub(super) links: &'a [&'a str],
    pub(super) pruned: &'a [&'a str],
    pub(super) third: &'a [ThirdParty],
    pub(super) networks: &'a [Network],
    pub(super) policy: &'a Option<Placement>,
}

/// Checks what a run would refuse once install has written what it plans
/// ([`Prospect`]); refuses, naming each problem, unless
/// `--allow-broken`, which only warns. Prints the warnings.
pub(super) fn check_live(opts: &Options, live: &Live) -> anyhow::Result<()> {
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
    let found = Prospect {
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

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
//!
//! # Files
//! One step each, under `install/`: `plugin.rs` (the `--plugin`s, paired
//! with their `--name` and `--policy`), `policy.rs` (the policy entries
//! and the policy file), `network.rs` (`--conflist`), `link.rs` (the bin
//! dir's links), `placement.rs` (one file to write, planned and then
//! applied), `own.rs` (what is install's own), `check.rs`, `backup.rs`,
//! `cache.rs` (the artifact cache,
//! and `wasmcni precompile`) and `sleep.rs` (`--then-sleep`); the file
//! primitives are `crate::files` (`wasmcni pull`'s store uses them too).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::engine::{self, ArtifactCache};
use crate::plugins::{self, Plugin};

pub(crate) mod backup;
mod cache;
mod check;
mod link;
mod network;
mod own;
mod placement;
mod plugin;
mod policy;
mod sleep;

pub use cache::precompile;
pub(crate) use network::network_configs;
pub use network::DEFAULT_CONF_DIR;
pub use own::OWNED_RECORD;
pub(crate) use own::{is_wasmcni, sha256_hex, Record};

use crate::files::{create_dir, create_file, write_atomic_with};
use cache::remove_stale;
use check::{check_live, Live};
use link::{bin_dir_path, keep_foreign, link_names};
use network::plan_networks;
use own::{existing, Existing};
use placement::{FileState, Placement};
use plugin::{installed_third_party, plan_plugins};
use policy::plan_policy_file;
use sleep::{block_termination, wait_for_termination};

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
    /// <plugin dir>/NAME.wasm, linked as DIR/NAME, precompiled. A file, or
    /// an OCI artifact `oci://REGISTRY/REPO:TAG[@sha256:DIGEST]`, pulled
    /// and verified as `wasmcni pull` does (the trust file's rule for
    /// NAME), its origin kept in <plugin dir>/NAME.origin.json.
    /// Repeatable: each --name and --policy belongs to the --plugin before
    /// it (`--plugin a.wasm --policy a.json --plugin b.wasm --name bee`).
    #[arg(long, value_name = "FILE.wasm|oci://REF")]
    pub plugin: Vec<PathBuf>,
    /// The name of the --plugin before it, its CNI `type` (default: the
    /// file stem, or a reference's last repository part).
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
    /// For `--plugin oci://…`: how to reach the registry, what to trust.
    #[command(flatten)]
    pub registry: crate::distribute::RegistryArgs,
    /// Install a --plugin FILE even where the trust file requires its name
    /// to be signed (a file carries no signature).
    #[arg(long)]
    pub allow_unsigned: bool,
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
        .flat_map(|t| {
            std::iter::once(&t.wasm)
                .chain(t.entry.as_ref())
                .chain(t.origin.as_ref())
        })
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

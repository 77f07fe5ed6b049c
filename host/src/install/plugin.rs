//! The third-party plugins install installs (`--plugin`, each with the
//! `--name` and `--policy` after it): paired from the command line, each
//! checked to be a component wasmcni can run, planned with its policy
//! entry; and those a bin dir already links to.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::own::sha256_hex;
use super::placement::{Content, Placement};
use super::policy::{given_entry, pinned_entry, plan_repin, resolve_policy_dir};
use super::Options;
use crate::files::read_input;
use crate::plugins::{self, Plugin};

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

/// A third-party plugin to install, resolved and checked.
pub(super) struct ThirdParty {
    pub(super) name: String,
    /// The file given (`--plugin`).
    file: PathBuf,
    pub(super) sha256: String,
    pub(super) wasm: Placement,
    /// Its entry in the policy dir: the one `--policy` gives, or the one
    /// install wrote before, re-pinned (`repinned`).
    pub(super) entry: Option<Placement>,
    pub(super) repinned: bool,
    /// Where a pulled plugin came from (`NAME.origin.json`).
    pub(super) origin: Option<Placement>,
}

fn plan_plugin(
    arg: &PluginArg,
    plugin_dir: &Path,
    opts: &Options,
    engine: &wasmtime::Engine,
) -> anyhow::Result<ThirdParty> {
    let file = arg.file;
    let reference = crate::distribute::oci_reference(file);
    let name = match (arg.name, reference) {
        (Some(n), _) => n.to_owned(),
        (None, Some(r)) => crate::distribute::default_name(r)
            .with_context(|| format!("--plugin {r}: no repository name; give --name"))?,
        (None, None) => file
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
    // A reference is pulled and verified (digest, and signature where the
    // trust file asks) before anything is planned: nothing of a plugin
    // that fails is written.
    let (wasm, pulled) = match reference {
        Some(r) => {
            let mut p = opts.registry.pull(r, Some(&name))?;
            (std::mem::take(&mut p.component), Some(p))
        }
        None => {
            // The trust rule holds for every way in: a file carries no
            // signature to check.
            if !opts.allow_unsigned && opts.registry.requires_signature(&name)? {
                bail!(
                    "--plugin {file:?}: the trust file requires plugin {name:?} to be signed, and a \
                     file carries no signature: install it from its registry (--plugin \
                     oci://REGISTRY/REPO@sha256:…), or give --allow-unsigned"
                );
            }
            (read_input(file, "plugin", 64 << 20)?, None)
        }
    };
    check_component(engine, &wasm, file)?;
    let sha = sha256_hex(&wasm);
    let wasm = Placement::plan(plugin_dir, &format!("{name}.wasm"), Content::Bytes(wasm))?;
    let origin = match &pulled {
        Some(p) => {
            let mut text = serde_json::to_vec_pretty(&crate::distribute::origin_record(p))?;
            text.push(b'\n');
            Some(Placement::plan(
                plugin_dir,
                &format!("{name}.origin.json"),
                Content::Bytes(text),
            )?)
        }
        None => None,
    };
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
        origin,
    })
}

/// The third-party plugins to install (`--plugin`, each with its `--name`
/// and `--policy`), each a different name.
pub(super) fn plan_plugins(
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

/// The third-party plugins `dir` links to: `<plugin dir>/X.wasm` for
/// every link `dir/X -> wasmcni` that is not a standard plugin. Unreadable
/// or invalid files are skipped (the run reports them).
pub(super) fn installed_third_party(dir: &Path, plugin_dir: &Path) -> Vec<Plugin> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine;
    use crate::install::Positions;

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

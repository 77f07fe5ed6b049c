//! `wasmcni try`: runs a plugin's ADD, CHECK, DEL, DEL in a throwaway
//! sandbox, the way a runtime would, and shows every capability call it
//! made and the grant each needed.
//!
//! The process first moves into new network and mount namespaces (as
//! `wasmcni demo` does), so nothing it does reaches the machine: the
//! sandbox's own network namespace plays the node, a container namespace
//! is made inside it, and a fresh tmpfs covers `/run` (the sandbox's
//! working directory: policy, audit log, artifact cache, attachment
//! records, locks) and the IPAM data directories (so host-local keeps its
//! state where it would on a node, but in memory). The plugin runs through
//! the runner exactly as a runtime executes it: wasmcni executed as the
//! plugin (multi-call), with the `CNI_*` environment and the config on
//! stdin; a conflist's standard plugins before it run first, as a chain.
//! When the process ends, the namespaces and everything in them are gone.
//!
//! By default the plugin runs under a learning policy that grants it
//! everything inside the sandbox (safe: the sandbox is thrown away), so the
//! run shows what it needs; `--policy FILE` applies a real policy file
//! instead, to check an entry before installing it.
//!
//! # Files
//! The sandbox itself is `sandbox.rs`, shared with `wasmcni demo`; under
//! `trial/`: `inputs.rs` (what is read before entering it), `policy.rs`
//! (the learning policy, or the one given), `setup.rs` (the sandbox set
//! up for a run), `runner.rs` (the plugin run as a runtime runs it) and
//! `report.rs` (what is shown of the run).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::suggest;
use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::policy::Entry;

mod inputs;
mod policy;
mod report;
mod runner;
mod setup;

use inputs::Inputs;
use report::Report;
use runner::{Runner, Step};
use setup::{container_id, enter_sandbox, prepare_container, set_up, write_private};

/// The sandbox's working directory, on the tmpfs that covers `/run`
/// inside it.
const BASE: &str = "/run/wasmcni-try";

/// What `wasmcni try` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A plugin name, or a path ending in `.wasm`.
    pub plugin: String,
    /// The network config (default: a minimal one of the plugin's type).
    pub config: Option<PathBuf>,
    /// A `prevResult` for a chained plugin's ADD.
    pub prev_result: Option<PathBuf>,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// A policy to apply instead of the learning policy: a policy document,
    /// or the plugin's entry as a policy.d file holds it.
    pub policy: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
    /// Write the run's audit records (annotated) to this file.
    pub audit_out: Option<PathBuf>,
    /// Print the suggested policy entry, and verify it.
    pub suggest: bool,
    /// Links to make in the sandbox's node namespace first (`NAME` or
    /// `NAME:bridge`).
    pub host_links: Vec<String>,
}

/// Runs the sequence again under the suggested entry alone, in a new
/// container with a new container ID.
fn verify(runner: &mut Runner, inp: &Inputs, entry: &Entry) -> anyhow::Result<Vec<Step>> {
    // The suggestion may grant a data dir the learning run refused (one the
    // config does not name, so the sandbox never covered it): running under
    // it would write to the machine's disk.
    let outside = uncovered_roots(&entry.ipam_roots, &inp.ipam_dirs);
    if !outside.is_empty() {
        bail!(
            "not verified: the suggested entry grants IPAM data dirs the sandbox does not \
             cover ({}); the plugin opened data dirs its config does not name, which the \
             learning run refused. Name them in the config (dataDir) and try again, or \
             leave them out of the entry",
            outside
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let base = Path::new(BASE);
    let name = inp.plugin.name();
    let path = base.join("policy-suggested.json");
    write_private(&path, &inp.policy(Some(suggest::entry_json(entry)))?)?;
    let _ = fs::remove_file(base.join("policy.d").join(format!("{name}.json")));
    let netns = base.join("container-netns-2");
    crate::sandbox::make_netns(&netns)?;
    if let Some(prev) = &inp.prev {
        prepare_container(&netns, prev)?;
    }
    runner.netns = netns;
    runner.policy = path;
    runner.container_id = container_id("verify");
    runner.sequence(&inp.config, &inp.before)
}

/// The roots in `roots` that lie under none of the covered data dirs (a
/// root with `.` or `..` components counts as outside, whatever it says).
fn uncovered_roots<'a>(roots: &'a [PathBuf], covered: &[PathBuf]) -> Vec<&'a PathBuf> {
    use std::path::Component;
    roots
        .iter()
        .filter(|r| {
            let plain = r
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            !plain || !covered.iter().any(|d| r.starts_with(d))
        })
        .collect()
}

/// `COMMAND (exit CODE)` of each step that failed.
fn failures(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .filter(|s| s.code != 0)
        .map(|s| format!("{} {} (exit {})", s.plugin, s.command, s.code))
        .collect()
}

/// Runs `wasmcni try`.
pub fn run(o: Options) -> anyhow::Result<()> {
    let mut inp = Inputs::read(&o)?;
    enter_sandbox(&inp.ipam_dirs, &inp.exe)?;
    let mut runner = set_up(&inp, &o.ifname)?;
    let container_id = runner.container_id.clone();
    let steps = runner.sequence(&inp.config, &inp.before)?;
    let name = inp.plugin.name().to_owned();
    let records: Vec<Logged> = steps.iter().flat_map(|s| s.records.clone()).collect();
    if let Some(f) = inp.audit_out.as_mut() {
        for r in &records {
            writeln!(f, "{}", serde_json::to_string(r)?)?;
        }
    }
    let mine: Vec<Logged> = records
        .into_iter()
        .filter(|r| r.plugin == name && r.sha256 == inp.plugin.sha256())
        .collect();
    let suggestion = if o.suggest {
        let (entry, notes) = suggest::derive(&mine, inp.plugin.sha256());
        let check = verify(&mut runner, &inp, &entry)?;
        Some((entry, notes, check))
    } else {
        None
    };
    let report = Report {
        plugin: &inp.plugin,
        learning: inp.given.is_none(),
        policy: o.policy.as_deref(),
        config: &inp.config,
        ifname: &o.ifname,
        container_id: &container_id,
        steps: &steps,
        mine: &mine,
        suggestion: suggestion.as_ref(),
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        report.text()?;
    }
    let failed = failures(&steps);
    if !failed.is_empty() {
        bail!("{} failed", failed.join(", "));
    }
    if let Some((_, _, check)) = &suggestion {
        let failed = failures(check);
        if !failed.is_empty() {
            bail!(
                "under the suggested entry for {name} alone, {} failed: the plugin needed more \
                 than in the first run (see the calls above)",
                failed.join(", ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_outside_the_covered_dirs_are_found() {
        let covered = [PathBuf::from("/var/lib/cni/networks"), PathBuf::from("/d")];
        let roots = [
            PathBuf::from("/var/lib/cni/networks"),
            PathBuf::from("/d/sub"),
            PathBuf::from("/etc"),
            PathBuf::from("/var/lib/cni/networks/../../../etc"),
            PathBuf::from("/dx"),
        ];
        let out: Vec<_> = uncovered_roots(&roots, &covered);
        assert_eq!(out, [&roots[2], &roots[3], &roots[4]]);
    }
}

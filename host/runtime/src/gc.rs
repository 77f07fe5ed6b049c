//! `wasmcni gc`: the host's GC for an operator, from the attachment records
//! ([`crate::record`]).
//!
//! An attachment is gone when the runtime's list of valid attachments
//! (`--valid CID/IFNAME`, as `cni.dev/valid-attachments` gives it) does not
//! hold it, or — without `--valid` — when its record was written in
//! another boot or its container namespace (the nsfs inode the record
//! names) is held by no process and no mount this mount namespace sees.
//! For each gone attachment the host removes what its records list (as a
//! DEL would, [`crate::caps::Ctx::remove_record`]), its plugins' state, and
//! the records; `--dry-run` only lists them.

use std::collections::HashSet;

use anyhow::{bail, Context};
use serde_json::json;

use crate::attachment::Attachment;
use crate::audit::{Audit, Identity, Sink};
use crate::caps;
use crate::record::{self, Location, Record};

/// What `wasmcni gc` was asked.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Only these networks (repeatable; default: every network with
    /// records).
    #[arg(long = "network", value_name = "NAME")]
    pub networks: Vec<String>,
    /// The attachments the runtime still holds in the one --network, as
    /// CONTAINERID/IFNAME (repeatable). Without any, an attachment is gone
    /// when its container namespace no longer exists (run it on the node,
    /// in its PID and mount namespaces: a namespace only another mount
    /// namespace pins would look gone).
    #[arg(long = "valid", value_name = "CONTAINERID/IFNAME")]
    pub valid: Vec<String>,
    /// List what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The nsfs inodes of the network namespaces that exist: those of every
/// process, and every nsfs mount this mount namespace sees (`ip netns`
/// names, a runtime's pinned namespaces).
fn live_namespaces() -> HashSet<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut out = HashSet::new();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            if let Ok(m) = std::fs::metadata(p.path().join("ns/net")) {
                out.insert(m.ino());
            }
        }
    }
    if let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") {
        for line in mounts.lines() {
            // "... <root> <mount point> ... - nsfs nsfs rw": root is
            // "net:[INODE]".
            let mut fields = line.split(' ');
            let root = fields.nth(3).unwrap_or("");
            if line.contains(" - nsfs ") {
                if let Some(ino) = root
                    .strip_prefix("net:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|i| i.parse().ok())
                {
                    out.insert(ino);
                }
            }
        }
    }
    out
}

/// Runs `wasmcni gc`.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    if let Some(why) = Location::untrusted_root() {
        bail!("{why}: records there are not trusted; make the state root and every directory above it root's and not writable by group or others");
    }
    if !opts.valid.is_empty() && opts.networks.len() != 1 {
        bail!(
            "--valid lists the attachments of one network: give that network with \
             --network NAME (once)"
        );
    }
    let mut valid = Vec::new();
    for v in &opts.valid {
        let Some((cid, ifname)) = v.split_once('/') else {
            bail!("--valid {v:?}: give CONTAINERID/IFNAME");
        };
        if cid.is_empty() || ifname.is_empty() {
            bail!("--valid {v:?}: give CONTAINERID/IFNAME");
        }
        valid.push((cid.to_owned(), ifname.to_owned()));
    }
    let root = Location::root_from_env();
    let networks = if opts.networks.is_empty() {
        record::networks(&root)
    } else {
        opts.networks.clone()
    };
    let boot = record::boot_id().context("reading this boot's id")?;
    let gone = |r: &Record, live: &Option<HashSet<u64>>| -> Option<&'static str> {
        if r.boot_id != boot {
            return Some("written in another boot");
        }
        match live {
            Some(live) if !live.contains(&r.netns) => Some("its namespace is gone"),
            Some(_) => None,
            None if valid
                .iter()
                .any(|(c, i)| *c == r.container_id && *i == r.ifname) =>
            {
                None
            }
            None => Some("not a valid attachment"),
        }
    };
    let mut ctx = caps::Ctx::new(caps::CtxParams {
        grant: crate::policy::Grant::default(),
        container: None,
        audit: Audit::new(
            Identity {
                plugin: "wasmcni-gc".into(),
                sha256: String::new(),
                container_id: String::new(),
                ifname: String::new(),
                command: caps::Command::Gc.as_str().into(),
            },
            Sink::from_env(),
        ),
        attachment: Attachment::default(),
        command: Some(caps::Command::Gc),
        runtime: None,
        core: None,
    });
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for network in &networks {
        let (records, errors) = record::list(&root, network);
        failures.extend(errors);
        // The namespaces that exist, looked at after the records were
        // read: an ADD beside this GC makes its namespace before it writes
        // its record, so every record listed names a namespace that
        // existed before this look, and is in it unless it is gone. (Looked
        // at first, a record written in between named a namespace the look
        // had not seen: the GC took a live pod's veth, its reservation and
        // rules — the soak found it.)
        crate::fault::pause("gc-listed");
        let live = opts.valid.is_empty().then(live_namespaces);
        // Removed together (their links in as few kernel batches as can
        // be), each into its report entry.
        let mut doomed = Vec::new();
        for (loc, r) in records {
            let Some(why) = gone(&r, &live) else { continue };
            let lists = json!({
                "links": r.owned.links.iter().map(|l| &l.name).collect::<Vec<_>>(),
                "reservations": r.owned.reservations.iter().map(|x| x.address).collect::<Vec<_>>(),
                "firewall": !r.owned.firewall.is_empty(),
                "moved-links": r.borrowed.iter().map(|b| &b.name).collect::<Vec<_>>(),
            });
            let entry = json!({
                "network": r.network, "container-id": r.container_id, "ifname": r.ifname,
                "plugin": r.plugin, "why": why, "record": loc.path(), "lists": lists,
            });
            if !opts.dry_run {
                doomed.push((loc, r));
            }
            report.push(entry);
        }
        let first = report.len() - doomed.len();
        let results = ctx.remove_records(doomed, "gc.remove");
        for (i, (r, result)) in results.into_iter().enumerate() {
            let (net, cid, ifname) = (r.network, r.container_id, r.ifname);
            match result {
                Ok(removed) => {
                    report[first + i]["removed"] = json!(removed);
                    if let Err(e) =
                        crate::plugin_state::remove_attachment(&root, &net, &cid, &ifname)
                    {
                        failures.push(format!("{net}/{cid}/{ifname} plugin state: {e}"));
                    }
                }
                Err(e) => failures.push(format!("{net}/{cid}/{ifname}: {e}")),
            }
        }
    }
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"dry-run": opts.dry_run, "attachments": report}))?
        );
    } else {
        let verb = if opts.dry_run {
            "would remove"
        } else {
            "removed"
        };
        for e in &report {
            println!(
                "{verb} {}/{}/{} ({}, {}): {}",
                e["network"].as_str().unwrap_or(""),
                e["container-id"].as_str().unwrap_or(""),
                e["ifname"].as_str().unwrap_or(""),
                e["plugin"].as_str().unwrap_or(""),
                e["why"].as_str().unwrap_or(""),
                e["lists"]
            );
        }
        if report.is_empty() {
            println!("nothing to remove ({} network(s) checked)", networks.len());
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

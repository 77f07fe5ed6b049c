//! `wasmcni policy suggest`: the narrowest policy entry under which the
//! calls a plugin was seen making pass, as SELinux's `audit2allow` derives
//! rules from denials.
//!
//! Input is audit records (`audit::Logged`): the node's audit log, or the
//! log of a `wasmcni try` run. Every call the plugin made counts, allowed
//! or denied by its policy (a denied call is what the run needed); a call
//! refused by an invariant no policy waives (a CHECK that writes, a DEL of
//! another attachment's link) and a call over a limit do not. Each call
//! maps to the grant it needs ([`Need`], shown by `try` as a policy field
//! path), as its row of the capability catalog
//! (`wasmcni_runtime::caps::catalog`,
//! [`Grant`](wasmcni_runtime::caps::catalog::Grant)) says and its record's
//! arguments fill in, and the entry is their union:
//! - rights per namespace (`read`, `modify`, `move`, `addresses`, ...) and
//!   the link kinds it created;
//! - host `names` of the links it created, moved in or renamed: exact,
//!   except a part taken from the container ID or a random hex suffix
//!   (as `veth1a2b3c4d`), which becomes `*`, but never a pattern with
//!   a literal start under 3 characters or one that matches a node link
//!   (`eth*`): such a name stays exact;
//! - host `prefixes`: the networks of the addresses and route
//!   destinations it used, exactly;
//! - `sysctls`: the keys, exactly, except the link in a per-link key when
//!   it is the runtime's `CNI_IFNAME` (container namespace only) or
//!   generalized as `names` are;
//! - host `links` / `masters` / `bridges`: node links it used that it did
//!   not create, by name. A node's audit log records links by index, so
//!   these are known from denials (the link a refusal is about: its
//!   record's `link`, never its text) or from a
//!   `try` run (whose records carry `node-links`);
//! - `ipam-roots` (the data dirs it opened) and `delegates`.
//!
//! A record is input to trust: a name or path in it that could not be a
//! link name (or holds the pattern character `*`), an IPAM root that is
//! not a plain absolute path, is left out with a note. A grant only
//! refused calls needed stays in the entry but leads the notes.
//!
//! # Files
//! Under `suggest/`: `need.rs` (one grant a call needed), `record.rs` (what
//! one record needs), `node_link.rs` (the node links a record names),
//! `names.rs` (names, roots and keys checked and generalized) and
//! `entry.rs` (the entry they add up to, and its JSON).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::policy::Entry;

mod entry;
mod names;
mod need;
mod node_link;
mod record;

pub use entry::{derive, entry_json};
pub use names::generalize;
pub use need::Need;
pub use node_link::NodeLink;
pub use record::{counts, needs};

use need::push;

/// Where `policy suggest` reads records by default: `$WASMCNI_AUDIT` when
/// it names a file, else [`wasmcni_runtime::audit::DEFAULT_AUDIT_FILE`].
fn default_log() -> PathBuf {
    match wasmcni_runtime::audit::Sink::from_env() {
        wasmcni_runtime::audit::Sink::File(p) => p,
        _ => PathBuf::from(wasmcni_runtime::audit::DEFAULT_AUDIT_FILE),
    }
}

/// The records of `plugin` (by name and sha256) in `records`, or an error
/// that says what the log holds instead.
pub fn select(
    records: Vec<Logged>,
    name: &str,
    sha256: &str,
    origin: &str,
) -> anyhow::Result<Vec<Logged>> {
    let mut other_pins: Vec<String> = Vec::new();
    let mine: Vec<Logged> = records
        .into_iter()
        .filter(|r| {
            if r.plugin != name {
                return false;
            }
            if !r.sha256.eq_ignore_ascii_case(sha256) {
                push(&mut other_pins, r.sha256.clone());
                return false;
            }
            true
        })
        .collect();
    if mine.is_empty() {
        if other_pins.is_empty() {
            bail!(
                "{origin} has no record of plugin {name:?}: run it (e.g. `wasmcni try {name} \
                 --audit-out FILE`, then `--from-try FILE`) and suggest again"
            );
        }
        bail!(
            "{origin} has records of plugin {name:?} only for other builds (sha256 {}), not \
             sha256 {sha256}: run this build (`wasmcni try`) and suggest again",
            other_pins.join(", ")
        );
    }
    Ok(mine)
}

/// `wasmcni policy suggest PLUGIN`: prints the entry as JSON (stdout) and
/// notes (stderr).
pub fn run(plugin: &str, audit: Option<&Path>, from_try: Option<&Path>) -> anyhow::Result<()> {
    let p = crate::plugin_arg::resolve(plugin)?;
    let path = from_try
        .or(audit)
        .map(Path::to_owned)
        .unwrap_or_else(default_log);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading audit records from {}", path.display()))?;
    let (records, skipped) = wasmcni_runtime::audit::read_log(&text);
    if skipped > 0 {
        eprintln!(
            "wasmcni: skipped {skipped} lines of {} that are not audit records",
            path.display()
        );
    }
    let mine = select(records, p.name(), p.sha256(), &path.display().to_string())?;
    let (entry, notes) = derive(&mine, p.sha256());
    print_suggestion(p.name(), &entry, &notes, mine.len(), false)
}

/// Prints a suggested entry: JSON on stdout, the rest on stderr (or, in
/// `try`'s text report, `inline`, on stdout as well).
pub(crate) fn print_suggestion(
    name: &str,
    entry: &Entry,
    notes: &[String],
    from: usize,
    inline: bool,
) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&entry_json(entry))?;
    let mut head = vec![format!(
        "suggested policy entry for {name:?} from {from} audited calls: save it as \
         /etc/wasmcni/policy.d/{name}.json (or as plugins.{name} in /etc/wasmcni/policy.json)"
    )];
    head.extend(notes.iter().map(|n| format!("note: {n}")));
    for line in head {
        if inline {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }
    println!("{json}");
    Ok(())
}

/// Counts records by call, for `try`'s summary.
pub fn calls_by_name(records: &[Logged]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in records {
        *m.entry(r.call.clone()).or_insert(0) += 1;
    }
    m
}

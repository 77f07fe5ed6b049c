//! The policy install writes: each third-party plugin's entry in the
//! policy dir (the one `--policy` gives, or the one install wrote before,
//! re-pinned), pinned to the installed file's sha256, and the node's
//! policy file (`--policy-file`), each checked as a run would check it.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::own::{sha256_hex, Record};
use super::placement::{Content, Placement};
use super::Options;
use crate::files::{plain, read_input};

pub(super) fn resolve_policy_dir(given: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    Ok(given
        .clone()
        .or_else(crate::policy::policy_dir)
        .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_POLICY_DIR)))
}

/// The entry `entry` of plugin `name` as it will be written: its pin set,
/// checked as a run would check it.
pub(super) fn pinned_entry(
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
pub(super) fn given_entry(
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

/// Without `--policy`: a `<policy dir>/NAME.json` whose pin is not the
/// plugin's `sha256` is re-pinned when install wrote it (its bytes are
/// still those recorded). Anyone else's is left alone: the checks then
/// find the mismatch (a run would refuse the plugin).
pub(super) fn plan_repin(name: &str, sha: &str, dir: &Path) -> anyhow::Result<Option<Placement>> {
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

/// The policy file to install (`--policy-file`), checked: one with a typo
/// never reaches the node.
pub(super) fn plan_policy_file(opts: &Options) -> anyhow::Result<Option<Placement>> {
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

/// Where the policy file is (or goes): `--policy-target`, else
/// `$WASMCNI_POLICY`, else the default.
pub(super) fn policy_target(opts: &Options) -> PathBuf {
    opts.policy_target.clone().unwrap_or_else(|| {
        crate::config::get()
            .policy
            .clone()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_POLICY_FILE))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::placement::FileState;

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
}

//! The network configurations install writes into the conf dir
//! (`--conflist`), each checked as runtimes read it, and the plugin types
//! a network configuration names, its own or one already in the conf dir.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::placement::{Content, Placement};
use super::Options;
use crate::files::{plain, read_input};

/// The default directory for `--conflist`.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";

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
pub(super) struct Named {
    pub(super) ty: String,
    pub(super) members: Vec<String>,
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

/// A network configuration to install (`--conflist`), checked.
pub(super) struct Network {
    /// The file given.
    pub(super) file: PathBuf,
    /// The plugin types it names.
    pub(super) types: Vec<Named>,
    pub(super) placement: Placement,
}

/// The network configurations to install, each a different file name in
/// the conf dir.
pub(super) fn plan_networks(opts: &Options) -> anyhow::Result<Vec<Network>> {
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

/// The conf dir: `--conf-dir`, else the default.
pub(super) fn conf_dir(opts: &Options) -> PathBuf {
    opts.conf_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONF_DIR))
}

/// The network configurations in `conf_dir` (as a runtime finds them:
/// `.conflist`, `.conf`, `.json`, not hidden), but `skip`, each with the
/// types it names; unreadable ones are left out.
pub(super) fn conf_dir_networks(conf_dir: &Path, skip: &[&str]) -> Vec<(PathBuf, Vec<Named>)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

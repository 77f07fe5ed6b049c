//! Everything `wasmcni try` reads from outside the sandbox, read and
//! checked before the sandbox covers parts of the file system: the
//! plugin, its network config (and the standard plugins before it in a
//! conflist), a `prevResult`, a given policy, the node's links, the IPAM
//! data dirs to cover, and precompiled artifacts to seed the sandbox with.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use cni_spec::valid_ifname;
use serde_json::{json, Map, Value};

use super::policy::{read_policy, GivenPolicy};
use super::Options;
use wasmcni_runtime::plugins::{self, Plugin};
use wasmcni_runtime::policy::Policy;

fn read_json(path: &Path, what: &str) -> anyhow::Result<Value> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("reading the {what} {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("the {what} {} is not valid JSON", path.display()))
}

/// One plugin's network config.
type Config = Map<String, Value>;

/// The network config for plugin `name`: the file's (a network config, or
/// the entry of type `name` of a conflist, which inherits its `name` and
/// `cniVersion` as libcni does), else a minimal one; and the configs of the
/// plugins before it in a conflist (they run first, as a chain).
fn network_config(file: Option<&Path>, name: &str) -> anyhow::Result<(Config, Vec<Config>)> {
    let Some(path) = file else {
        let v = json!({"cniVersion": "1.1.0", "name": "try", "type": name});
        return Ok((v.as_object().cloned().unwrap_or_default(), Vec::new()));
    };
    let mut before = Vec::new();
    let v = read_json(path, "network config")?;
    let Value::Object(mut conf) = v else {
        bail!("the network config {} is not a JSON object", path.display());
    };
    if let Some(list) = conf.get("plugins").and_then(Value::as_array).cloned() {
        let at = list
            .iter()
            .position(|p| p.get("type").and_then(Value::as_str) == Some(name))
            .ok_or_else(|| {
                anyhow!(
                    "the conflist {} has no plugin of type {name:?}",
                    path.display()
                )
            })?;
        let inherit = |i: usize| -> anyhow::Result<Map<String, Value>> {
            let mut one = list[i].as_object().cloned().ok_or_else(|| {
                anyhow!(
                    "the conflist {}: plugins[{i}] is not an object",
                    path.display()
                )
            })?;
            for k in ["name", "cniVersion"] {
                if let Some(v) = conf.get(k) {
                    one.insert(k.to_owned(), v.clone());
                }
            }
            Ok(one)
        };
        for i in 0..at {
            let one = inherit(i)?;
            let t = one.get("type").and_then(Value::as_str).unwrap_or("");
            if !plugins::bundled().any(|p| p.name() == t) {
                bail!(
                    "the conflist {}: plugins[{i}] (type {t:?}) runs before {name:?} but is \
                     not a standard plugin; give its result with --prev-result instead",
                    path.display()
                );
            }
            before.push(one);
        }
        conf = inherit(at)?;
    }
    match conf.get("type") {
        None => {
            conf.insert("type".into(), Value::from(name));
        }
        Some(Value::String(t)) if t == name => {}
        Some(t) => bail!(
            "the network config {} has \"type\": {t}, but the plugin tried is {name:?}",
            path.display()
        ),
    }
    for k in ["cniVersion", "name"] {
        if !conf.get(k).is_some_and(Value::is_string) {
            bail!("the network config {} has no string {k:?}", path.display());
        }
    }
    Ok((conf, before))
}

/// Every absolute `dataDir` / `data-dir` string in the config.
fn data_dirs(v: &Value, out: &mut Vec<PathBuf>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "dataDir" || k == "data-dir" {
                    if let Some(s) = x.as_str().filter(|s| s.starts_with('/')) {
                        out.push(PathBuf::from(s));
                    }
                }
                data_dirs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| data_dirs(x, out)),
        _ => {}
    }
}

/// A link to make in the sandbox's node namespace.
#[derive(Debug, Clone)]
pub(super) struct HostLink {
    pub(super) name: String,
    pub(super) bridge: bool,
}

fn parse_host_link(spec: &str) -> anyhow::Result<HostLink> {
    let (name, kind) = spec.split_once(':').unwrap_or((spec, "veth"));
    if !valid_ifname(name) {
        bail!("--host-link {spec:?}: {name:?} is not a valid interface name");
    }
    let bridge = match kind {
        "bridge" => true,
        "veth" => false,
        other => bail!("--host-link {spec:?}: kind {other:?} is not `veth` or `bridge`"),
    };
    Ok(HostLink {
        name: name.to_owned(),
        bridge,
    })
}

/// Precompiled artifacts of `names` (component name, sha256) from the
/// default cache, when it is as trusted as the runner requires (owned by
/// root or us, not writable by group or others), so the sandbox need not
/// compile them again.
fn seed_artifacts(names: &[(String, String)]) -> Vec<(String, Vec<u8>)> {
    let Some(cache) = wasmcni_runtime::engine::ArtifactCache::default_location() else {
        return Vec::new();
    };
    let euid = nix::unistd::geteuid().as_raw();
    let trusted = |m: &fs::Metadata| (m.uid() == 0 || m.uid() == euid) && m.mode() & 0o022 == 0;
    if !fs::metadata(cache.dir()).is_ok_and(|m| m.is_dir() && trusted(&m)) {
        return Vec::new();
    }
    let Ok(dir) = fs::read_dir(cache.dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let wanted = names.iter().any(|(n, sha)| {
            file.starts_with(&format!("{n}-{}-", &sha[..16.min(sha.len())]))
                && file.ends_with(".cwasm")
        });
        let ok = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_file() && trusted(&m));
        if wanted && ok {
            if let Ok(bytes) = fs::read(e.path()) {
                out.push((file, bytes));
            }
        }
    }
    out
}

/// Everything `try` reads from outside the sandbox, read before it
/// covers parts of the file system.
pub(super) struct Inputs {
    pub(super) plugin: Plugin,
    pub(super) config: Map<String, Value>,
    /// The standard plugins before it in a conflist.
    pub(super) before: Vec<Map<String, Value>>,
    pub(super) prev: Option<Value>,
    pub(super) given: Option<GivenPolicy>,
    pub(super) host_links: Vec<HostLink>,
    /// The IPAM data dirs the sandbox covers: the default, the config's,
    /// and (`--policy`) every `ipam-roots` the policy grants.
    pub(super) ipam_dirs: Vec<PathBuf>,
    /// The standard IPAM plugins the configs name.
    ipam_types: Vec<String>,
    pub(super) audit_out: Option<fs::File>,
    pub(super) artifacts: Vec<(String, Vec<u8>)>,
    pub(super) exe: PathBuf,
}

impl Inputs {
    pub(super) fn read(o: &Options) -> anyhow::Result<Inputs> {
        let plugin = crate::plugin_arg::resolve(&o.plugin)?;
        let name = plugin.name().to_owned();
        if !valid_ifname(&o.ifname) {
            bail!("--ifname {:?} is not a valid interface name", o.ifname);
        }
        let (mut config, before) = network_config(o.config.as_deref(), &name)?;
        let prev = match &o.prev_result {
            Some(_) if !before.is_empty() => bail!(
                "--prev-result and a conflist with plugins before {name:?}: the result of \
                 those is its prevResult; give one or the other"
            ),
            Some(p) => {
                let v = read_json(p, "prevResult")?;
                if !v.is_object() {
                    bail!("the prevResult {} is not a JSON object", p.display());
                }
                config.insert("prevResult".into(), v.clone());
                Some(v)
            }
            None => None,
        };
        let given = match &o.policy {
            Some(p) => Some(read_policy(p, &name)?),
            None => None,
        };
        let host_links = o
            .host_links
            .iter()
            .map(|s| parse_host_link(s))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut ipam_dirs = vec![PathBuf::from(wasmcni_runtime::ipam::DEFAULT_DATA_DIR)];
        for c in before.iter().chain([&config]) {
            data_dirs(&Value::Object(c.clone()), &mut ipam_dirs);
        }
        if let Some(g) = &given {
            ipam_dirs.extend(g.ipam_roots(&name));
        }
        let mut seen = Vec::new();
        ipam_dirs.retain(|d| {
            let new = !seen.contains(d);
            seen.push(d.clone());
            new
        });
        let audit_out = match &o.audit_out {
            Some(p) => Some(
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(p)
                    .with_context(|| format!("creating {}", p.display()))?,
            ),
            None => None,
        };
        let mut ipam_types: Vec<String> = Vec::new();
        for c in before.iter().chain([&config]) {
            let t = c
                .get("ipam")
                .and_then(|i| i.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if t != name
                && plugins::bundled().any(|p| p.name() == t)
                && !ipam_types.iter().any(|x| x == t)
            {
                ipam_types.push(t.to_owned());
            }
        }
        // By component (every standard plugin's is the standard component).
        let mut seeds = vec![(
            plugin.component_name().to_owned(),
            plugin.sha256().to_owned(),
        )];
        for p in plugins::bundled() {
            let used = ipam_types.iter().any(|t| t == p.name())
                || before
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some(p.name()));
            if used {
                seeds.push((p.component_name().to_owned(), p.sha256().to_owned()));
            }
        }
        Ok(Inputs {
            artifacts: seed_artifacts(&seeds),
            exe: std::env::current_exe().context("finding the wasmcni executable")?,
            plugin,
            config,
            before,
            prev,
            given,
            host_links,
            ipam_dirs,
            ipam_types,
            audit_out,
        })
    }

    /// The policy documents of the run and of its verification: the plugin
    /// gets `entry` (none: the given policy's); a bundled IPAM delegate the
    /// config names keeps its own entry, with the covered data dirs as IPAM
    /// roots (unless a given policy says otherwise).
    pub(super) fn policy(&self, entry: Option<Value>) -> anyhow::Result<String> {
        let name = self.plugin.name();
        let mut doc = match &self.given {
            Some(GivenPolicy::Document(t)) => serde_json::from_str::<Value>(t)?,
            _ => json!({"plugins": {}}),
        };
        let plugins = doc
            .get_mut("plugins")
            .and_then(Value::as_object_mut)
            .context("the policy document has no plugins object")?;
        if self.given.is_none() {
            for t in &self.ipam_types {
                let mut e = Policy::embedded().entry(t);
                for d in &self.ipam_dirs {
                    if !e.ipam_roots.contains(d) {
                        e.ipam_roots.push(d.clone());
                    }
                }
                plugins.insert(t.clone(), serde_json::to_value(&e)?);
            }
        }
        if let Some(e) = entry {
            plugins.insert(name.to_owned(), e);
        }
        Ok(doc.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs() {
        let (c, _) = network_config(None, "loopback").expect("default");
        assert_eq!(c["type"], "loopback");
        assert_eq!(c["cniVersion"], "1.1.0");
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.json");
        fs::write(
            &f,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"mtu","mtu":1400}]}"#,
        )
        .expect("write");
        let (c, before) = network_config(Some(&f), "mtu").expect("from a conflist");
        assert_eq!(c["mtu"], 1400);
        assert_eq!(c["name"], "n");
        assert_eq!(before.len(), 1);
        assert_eq!(before[0]["type"], "bridge");
        assert_eq!(before[0]["cniVersion"], "1.0.0");
        fs::write(
            &f,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"flannel"},{"type":"mtu"}]}"#,
        )
        .expect("write");
        let e = network_config(Some(&f), "mtu").expect_err("not standard");
        assert!(e.to_string().contains("--prev-result"), "{e}");
        fs::write(
            &f,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"mtu","mtu":1400}]}"#,
        )
        .expect("write");
        let e = network_config(Some(&f), "ptp").expect_err("no such plugin");
        assert!(e.to_string().contains("no plugin of type \"ptp\""), "{e}");
        fs::write(&f, r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#).expect("write");
        let e = network_config(Some(&f), "mtu").expect_err("other type");
        assert!(e.to_string().contains("\"bridge\""), "{e}");
        fs::write(&f, r#"{"name":"n"}"#).expect("write");
        let e = network_config(Some(&f), "mtu").expect_err("no version");
        assert!(e.to_string().contains("cniVersion"), "{e}");
        fs::write(&f, "[1]").expect("write");
        assert!(network_config(Some(&f), "mtu").is_err());
    }

    #[test]
    fn data_dirs_are_found_anywhere() {
        let mut out = Vec::new();
        data_dirs(
            &json!({"ipam": {"type": "host-local", "dataDir": "/var/lib/x"}, "dataDir": "rel"}),
            &mut out,
        );
        assert_eq!(out, vec![PathBuf::from("/var/lib/x")]);
    }

    #[test]
    fn host_links() {
        assert!(parse_host_link("eth9").is_ok_and(|l| !l.bridge));
        assert!(parse_host_link("br0:bridge").is_ok_and(|l| l.bridge));
        assert!(parse_host_link("br0:vxlan").is_err());
        assert!(parse_host_link("a/b").is_err());
    }
}

//! `wasmcni chain-into`: a wasmcni plugin chained into the cluster's
//! primary CNI network (flannel, Calico, Cilium), as Istio's CNI
//! (`CHAINED_CNI_PLUGIN`) and Cilium's chaining mode do it: the entry is
//! appended to the `plugins` of the primary's conflist, the file the
//! runtime uses (the first, by name, in the conf dir), so that every pod
//! gets it after the primary's own plugins.
//!
//! - **Atomic**: the new list is written beside the old and renamed over
//!   it (same mode); a runtime reads the old list or the new, never half.
//! - **Idempotent**: the entry carries a marker key ([`MARK`], which the
//!   plugins ignore as every unknown key); a run replaces the marked entry
//!   of the same type, and writes nothing when the list already holds the
//!   entry as it would write it.
//! - **Undone**: `--remove` takes the marked entries out (of `--type`
//!   only, if given), leaving the primary's own entries as they were.
//! - **Watched**: with `--watch`, it stays running (a DaemonSet's
//!   container) and puts the entry back whenever the primary rewrites its
//!   file (its installer does at every start), or another file becomes
//!   the primary; SIGTERM ends it, and with `--remove-on-exit` takes the
//!   entry out first.
//! - **Per node**: the entry may hold placeholders, as Calico's installer
//!   fills them: `__KUBERNETES_NODE_NAME__`, `__CNI_MTU__` (a number where
//!   it stands alone as a JSON string), `__POD_CIDR__`, each from the
//!   environment variable of the same name (the DaemonSet's downward API);
//!   one whose variable is unset is refused, nothing written.
//!
//! A primary that is a single-plugin `.conf` is refused: chaining needs a
//! list, and writing one under another name would change which file the
//! runtime picks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde_json::Value;
use wasmcni_runtime::conflist::member_type;

/// The key that marks an entry wasmcni chained (its value: `true`).
pub const MARK: &str = "wasmcni.dev/chained";

/// The placeholders an entry may hold, each filled from the environment
/// variable of its name.
const PLACEHOLDERS: &[&str] = &["KUBERNETES_NODE_NAME", "CNI_MTU", "POD_CIDR"];

/// The largest conflist read.
const MAX_LIST: u64 = 1 << 20;

/// `wasmcni chain-into`'s options.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The plugin entry to chain (a JSON object with `type`), with
    /// placeholders `__KUBERNETES_NODE_NAME__`, `__CNI_MTU__`,
    /// `__POD_CIDR__` filled from the environment.
    #[arg(long, value_name = "FILE", required_unless_present = "remove")]
    pub entry: Option<PathBuf>,
    /// The CNI conf dir whose primary conflist (the first by name) gets the
    /// entry.
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub conf_dir: PathBuf,
    /// The primary conflist's file name in the conf dir (default: the
    /// first `.conflist`, `.conf` or `.json` by name that is not
    /// wasmcni's own).
    #[arg(long, value_name = "NAME")]
    pub primary: Option<String>,
    /// Take the chained entries out instead (of `--type` only, if given).
    #[arg(long)]
    pub remove: bool,
    /// With --remove: only entries of this plugin type.
    #[arg(long = "type", value_name = "TYPE", requires = "remove")]
    pub plugin_type: Option<String>,
    /// Keep running: put the entry back whenever the primary's file is
    /// rewritten without it, until SIGTERM.
    #[arg(long, conflicts_with = "remove")]
    pub watch: bool,
    /// With --watch: take the entry out when SIGTERM ends it.
    #[arg(long, requires = "watch")]
    pub remove_on_exit: bool,
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The file was rewritten.
    Written(PathBuf),
    /// It already was as it would be written.
    Unchanged(PathBuf),
}

/// Runs `wasmcni chain-into`.
pub fn run(o: &Options) -> anyhow::Result<()> {
    if o.remove {
        let primary = primary(&o.conf_dir, o.primary.as_deref())?;
        report(remove(&primary, o.plugin_type.as_deref())?, "removed from");
        return Ok(());
    }
    let path = o
        .entry
        .as_deref()
        .ok_or_else(|| anyhow!("--entry is required"))?;
    let vars = &crate::config::get().placeholders;
    let entry = load_entry(path, |k| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
    })?;
    if !o.watch {
        let primary = primary(&o.conf_dir, o.primary.as_deref())?;
        report(insert(&primary, &entry)?, "chained into");
        return Ok(());
    }
    watch(o, &entry)
}

fn report(outcome: Outcome, what: &str) {
    match outcome {
        Outcome::Written(p) => println!("{}: {what}", p.display()),
        Outcome::Unchanged(p) => println!("{}: unchanged", p.display()),
    }
}

/// The entry in `path`, its placeholders filled from `var`.
pub fn load_entry(path: &Path, var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Value> {
    let text = String::from_utf8(
        wasmcni_runtime::conflist::read_file(path, MAX_LIST)
            .map_err(|e| anyhow!("--entry: {e}"))?,
    )
    .with_context(|| format!("--entry {} is not UTF-8", path.display()))?;
    let mut entry: Value = serde_json::from_str(&text)
        .with_context(|| format!("--entry {} is not JSON", path.display()))?;
    fill(&mut entry, &var).with_context(|| format!("--entry {}", path.display()))?;
    let obj = entry
        .as_object_mut()
        .ok_or_else(|| anyhow!("--entry {} is not a JSON object", path.display()))?;
    if member_type(obj).is_none_or(str::is_empty) {
        bail!("--entry {} has no string \"type\"", path.display());
    }
    obj.insert(MARK.into(), Value::Bool(true));
    Ok(entry)
}

/// Fills the placeholders in every string of `v`: a string that is one
/// placeholder alone becomes a number when its value is one
/// (`"mtu": "__CNI_MTU__"` → `"mtu": 1450`).
fn fill(v: &mut Value, var: &impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
    match v {
        Value::String(s) => {
            if !s.contains("__") {
                return Ok(());
            }
            for name in PLACEHOLDERS {
                let token = format!("__{name}__");
                if !s.contains(&token) {
                    continue;
                }
                let value = var(name)
                    .filter(|x| !x.is_empty())
                    .ok_or_else(|| anyhow!("{token} is in the entry but ${name} is not set"))?;
                if *s == token {
                    if let Ok(n) = value.parse::<u64>() {
                        *v = Value::from(n);
                        return Ok(());
                    }
                }
                *s = s.replace(&token, &value);
            }
            Ok(())
        }
        Value::Array(a) => a.iter_mut().try_for_each(|x| fill(x, var)),
        Value::Object(m) => m.values_mut().try_for_each(|x| fill(x, var)),
        _ => Ok(()),
    }
}

/// The primary conflist of `conf_dir`: `name` if given, else the first
/// network config by name (as libcni and the kubelet pick it) that is not
/// wasmcni's own.
pub fn primary(conf_dir: &Path, name: Option<&str>) -> anyhow::Result<PathBuf> {
    if let Some(n) = name {
        if n.contains('/') {
            bail!("--primary {n:?}: a file name in the conf dir, not a path");
        }
        return Ok(conf_dir.join(n));
    }
    if !conf_dir.is_dir() {
        bail!("the conf dir {} is not a directory", conf_dir.display());
    }
    // wasmcni's own network configs (those install wrote) are not the
    // primary's.
    let ours = crate::install::Record::load(conf_dir)?;
    let names: Vec<String> = crate::install::network_configs(conf_dir)
        .into_iter()
        .filter(|n| !ours.has(n))
        .collect();
    names
        .into_iter()
        .next()
        .map(|n| conf_dir.join(n))
        .ok_or_else(|| {
            anyhow!(
                "no network config in {} to chain into (is the primary CNI installed?)",
                conf_dir.display()
            )
        })
}

/// The primary's list: its text, its JSON, its plugins.
fn read_list(path: &Path) -> anyhow::Result<(String, Value)> {
    if !path
        .extension()
        .is_some_and(|x| x == "conflist" || x == "json")
    {
        bail!(
            "{} is a single-plugin config: chaining needs a conflist (with \"plugins\")",
            path.display()
        );
    }
    let text = String::from_utf8(
        wasmcni_runtime::conflist::read_file(path, MAX_LIST).map_err(|e| anyhow!(e))?,
    )
    .with_context(|| format!("{} is not UTF-8", path.display()))?;
    let list: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if !list.get("plugins").is_some_and(Value::is_array) {
        bail!(
            "{} has no \"plugins\" list: chaining needs a conflist",
            path.display()
        );
    }
    Ok((text, list))
}

fn plugins(list: &mut Value) -> &mut Vec<Value> {
    // read_list checked it is an array.
    match list.get_mut("plugins") {
        Some(Value::Array(a)) => a,
        _ => unreachable!("a conflist's plugins"),
    }
}

fn is_marked(p: &Value) -> bool {
    p.get(MARK) == Some(&Value::Bool(true))
}

fn type_of(p: &Value) -> Option<&str> {
    p.as_object().and_then(member_type)
}

/// Appends `entry` to the primary's plugins, replacing the marked entry
/// of its type.
pub fn insert(path: &Path, entry: &Value) -> anyhow::Result<Outcome> {
    let (text, mut list) = read_list(path)?;
    let ty = type_of(entry).unwrap_or_default().to_owned();
    let ps = plugins(&mut list);
    if ps
        .iter()
        .any(|p| !is_marked(p) && type_of(p) == Some(ty.as_str()))
    {
        bail!(
            "{} already has a {ty:?} plugin of its own: it is not wasmcni's to replace",
            path.display()
        );
    }
    ps.retain(|p| !(is_marked(p) && type_of(p) == Some(ty.as_str())));
    ps.push(entry.clone());
    write_if_changed(path, &text, &list)
}

/// Takes the marked entries (of `ty` only, if given) out of the
/// primary's plugins.
pub fn remove(path: &Path, ty: Option<&str>) -> anyhow::Result<Outcome> {
    let (text, mut list) = read_list(path)?;
    let ps = plugins(&mut list);
    let before = ps.len();
    ps.retain(|p| !(is_marked(p) && ty.is_none_or(|t| type_of(p) == Some(t))));
    if ps.len() == before {
        return Ok(Outcome::Unchanged(path.to_owned()));
    }
    write_if_changed(path, &text, &list)
}

/// Writes `list` over `path` (whose text is `old`) by rename, keeping its
/// mode, unless it would write the same list.
fn write_if_changed(path: &Path, old: &str, list: &Value) -> anyhow::Result<Outcome> {
    let old_value: Value = serde_json::from_str(old).unwrap_or(Value::Null);
    if &old_value == list {
        return Ok(Outcome::Unchanged(path.to_owned()));
    }
    let mut text = serde_json::to_string_pretty(list)?;
    text.push('\n');
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)?.permissions().mode() & 0o7777
    };
    crate::files::write_atomic_with(path, |tmp| {
        crate::files::create_file(tmp, mode, &mut text.as_bytes())
    })?;
    Ok(Outcome::Written(path.to_owned()))
}

/// Set by SIGTERM or SIGINT while `--watch` runs.
static TERMINATED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_termination(sig: std::ffi::c_int) {
    TERMINATED.store(sig, std::sync::atomic::Ordering::SeqCst);
}

/// `--watch`: applies the entry now and whenever the primary changes,
/// until SIGTERM or SIGINT.
fn watch(o: &Options, entry: &Value) -> anyhow::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_termination),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(sig, &action) }.context("handling SIGTERM")?;
    }
    let mut last: Option<(PathBuf, String)> = None;
    loop {
        // The primary may appear late (the primary CNI installs after
        // us), change its name, or be rewritten without the entry.
        match primary(&o.conf_dir, o.primary.as_deref()) {
            Ok(p) => {
                let seen = std::fs::read_to_string(&p).unwrap_or_default();
                if last.as_ref() != Some(&(p.clone(), seen)) {
                    match insert(&p, entry) {
                        Ok(outcome) => report(outcome, "chained into"),
                        Err(e) => eprintln!("wasmcni: {e:#}"),
                    }
                    last = Some((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
                }
            }
            Err(e) => {
                if last.is_some() {
                    eprintln!("wasmcni: {e:#}");
                }
                last = None;
            }
        }
        // One check a second: a primary's installer rewrites its file at
        // its start, not often.
        for _ in 0..10 {
            let sig = TERMINATED.load(std::sync::atomic::Ordering::SeqCst);
            if sig != 0 {
                println!(
                    "{}: exiting",
                    Signal::try_from(sig).map_or_else(|_| sig.to_string(), |s| s.to_string())
                );
                if o.remove_on_exit {
                    let p = primary(&o.conf_dir, o.primary.as_deref())?;
                    report(remove(&p, type_of(entry))?, "removed from");
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_filled_or_refused() {
        let mut v = json!({"type": "x", "mtu": "__CNI_MTU__", "node": "n-__KUBERNETES_NODE_NAME__",
                           "nested": [{"cidr": "__POD_CIDR__"}], "other": "__NOT_OURS__"});
        let var = |k: &str| match k {
            "CNI_MTU" => Some("1450".to_owned()),
            "KUBERNETES_NODE_NAME" => Some("node-1".to_owned()),
            "POD_CIDR" => Some("10.244.1.0/24".to_owned()),
            _ => None,
        };
        fill(&mut v, &var).unwrap();
        assert_eq!(
            v,
            json!({"type": "x", "mtu": 1450, "node": "n-node-1",
                   "nested": [{"cidr": "10.244.1.0/24"}], "other": "__NOT_OURS__"})
        );
        let mut v = json!({"mtu": "__CNI_MTU__"});
        let e = fill(&mut v, &|_: &str| None).unwrap_err().to_string();
        assert!(
            e.contains("__CNI_MTU__ is in the entry but $CNI_MTU is not set"),
            "{e}"
        );
    }

    #[test]
    fn the_primary_is_the_first_config_by_name_not_ours() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "20-other.conflist",
            "10-calico.conflist",
            "05-wasmcni.conflist",
            ".hidden.conflist",
            "x.txt",
        ] {
            std::fs::write(d.path().join(n), "{}").unwrap();
        }
        // Install's record of what it wrote there: its own network.
        std::fs::write(
            d.path().join(crate::install::OWNED_RECORD),
            format!("{}  05-wasmcni.conflist\n", "0".repeat(64)),
        )
        .unwrap();
        assert_eq!(
            primary(d.path(), None).unwrap(),
            d.path().join("10-calico.conflist")
        );
        assert!(primary(d.path(), Some("../x")).is_err());
    }
}

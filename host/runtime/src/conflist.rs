//! A network configuration list (conflist) as libcni reads it, and the
//! config each plugin of the list receives on stdin: the plugin's object
//! with the list's `name` and `cniVersion`, the previous plugin's result as
//! `prevResult`, and `runtimeConfig` holding the runtime's capability
//! arguments the plugin declared in `capabilities` (libcni's
//! `buildOneConfig` / `injectRuntimeConfig`: only declared capabilities,
//! only those the runtime gave, never a key the plugin did not ask for; a
//! `runtimeConfig` or `prevResult` in the file stays unless the runtime
//! gives its own). Unlike libcni, a non-boolean `capabilities` value is
//! ignored rather than refused.
//!
//! `wasmcni demo` runs the spec's example conflist with it, as a runtime
//! would.

use anyhow::{anyhow, bail};
use serde_json::{Map, Value};

/// A parsed conflist.
#[derive(Debug, Clone)]
pub struct Conflist {
    /// The network name.
    pub name: String,
    /// The list's CNI version (every plugin receives it).
    pub cni_version: String,
    /// The plugins, in order.
    pub plugins: Vec<Map<String, Value>>,
}

impl Conflist {
    /// Parses a conflist, naming the field at fault.
    pub fn parse(v: &Value) -> anyhow::Result<Conflist> {
        let obj = v
            .as_object()
            .ok_or_else(|| anyhow!("the conflist is not a JSON object"))?;
        let text = |k: &str| -> anyhow::Result<String> {
            obj.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("the conflist has no string {k:?}"))
        };
        let (name, cni_version) = (text("name")?, text("cniVersion")?);
        let list = obj
            .get("plugins")
            .and_then(Value::as_array)
            .ok_or_else(|| anyhow!("the conflist has no \"plugins\" list"))?;
        if list.is_empty() {
            bail!("the conflist's \"plugins\" list is empty");
        }
        let mut plugins = Vec::with_capacity(list.len());
        for (i, p) in list.iter().enumerate() {
            let p = p
                .as_object()
                .ok_or_else(|| anyhow!("plugins[{i}] is not an object"))?;
            if gojson::field(p, "type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                bail!("plugins[{i}] has no string \"type\"");
            }
            plugins.push(p.clone());
        }
        Ok(Conflist {
            name,
            cni_version,
            plugins,
        })
    }

    /// The type of plugin `i`.
    pub fn plugin_type(&self, i: usize) -> &str {
        member_type(&self.plugins[i]).unwrap_or("")
    }

    /// Whether a plugin of the list declares capability `cap` (libcni
    /// gives it that capability argument).
    pub fn declares(&self, cap: &str) -> bool {
        self.plugins.iter().any(|p| declared(p).any(|k| k == cap))
    }

    /// The config plugin `i` receives: its object, the list's `name` and
    /// `cniVersion`, `prevResult` when given, and `runtimeConfig` with the
    /// capability arguments (`cap_args`) it declared in `capabilities`.
    pub fn plugin_config(
        &self,
        i: usize,
        prev_result: Option<&Value>,
        cap_args: &Map<String, Value>,
    ) -> Map<String, Value> {
        let mut c = self.plugins[i].clone();
        c.insert("name".into(), Value::from(self.name.clone()));
        c.insert("cniVersion".into(), Value::from(self.cni_version.clone()));
        if let Some(p) = prev_result {
            c.insert("prevResult".into(), p.clone());
        }
        let mut rt = Map::new();
        for k in declared(&c) {
            if let Some(v) = cap_args.get(k) {
                rt.insert(k.to_owned(), v.clone());
            }
        }
        // As libcni: the runtime's arguments replace a `runtimeConfig` in
        // the file only when there are any.
        if !rt.is_empty() {
            c.insert("runtimeConfig".into(), Value::Object(rt));
        }
        c
    }
}

/// The network configuration file `path`, at most `max` bytes, read
/// without waiting on it (a FIFO is refused, not waited on: netavark and a
/// DaemonSet have no timeout); the error names the file.
pub fn read_file(path: &std::path::Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("conflist {}: {e}", path.display()))?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(format!("conflist {} is not a regular file", path.display()));
    }
    let mut text = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("conflist {}: {e}", path.display()))?;
    if text.len() as u64 > max {
        return Err(format!(
            "conflist {} is larger than {max} bytes",
            path.display()
        ));
    }
    Ok(text)
}

/// A list member's `type`: libcni reads it with Go's encoding/json (its
/// `types.NetConf`), so `"Type"` names it too. The list's own keys it reads
/// from a map, exactly.
pub fn member_type(plugin: &Map<String, Value>) -> Option<&str> {
    gojson::field(plugin, "type").and_then(Value::as_str)
}

/// The capabilities a member declares (`"capabilities": {"K": true}`).
fn declared(plugin: &Map<String, Value>) -> impl Iterator<Item = &str> {
    gojson::field(plugin, "capabilities")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, on)| on.as_bool() == Some(true))
        .map(|(k, _)| k.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list() -> Conflist {
        Conflist::parse(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "bridge", "runtimeConfig": {"x": 1}},
            {"type": "tuning", "capabilities": {"mac": true, "ips": false}},
            {"type": "portmap", "capabilities": {"portMappings": true}}]}))
        .unwrap()
    }

    #[test]
    fn only_declared_capabilities_reach_a_plugin() {
        let l = list();
        let caps = json!({"mac": "0a:58:00:00:00:01", "ips": ["10.0.0.2/24"],
                          "portMappings": [{"hostPort": 8080}]});
        let caps = caps.as_object().unwrap();
        let b = l.plugin_config(0, None, caps);
        assert_eq!(
            b["runtimeConfig"],
            json!({"x": 1}),
            "nothing declared: the file's stays, as libcni keeps it"
        );
        assert_eq!(b["name"], "n");
        assert_eq!(b["cniVersion"], "1.0.0");
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let t = l.plugin_config(1, Some(&prev), caps);
        assert_eq!(t["runtimeConfig"], json!({"mac": "0a:58:00:00:00:01"}));
        assert_eq!(t["prevResult"], prev);
        let p = l.plugin_config(2, None, &Map::new());
        assert_eq!(
            p.get("runtimeConfig"),
            None,
            "nothing given, nothing injected"
        );
        assert_eq!(l.plugin_type(2), "portmap");
    }

    #[test]
    fn bad_lists_name_the_field() {
        for (v, want) in [
            (json!([]), "not a JSON object"),
            (json!({"name": "n", "plugins": []}), "\"cniVersion\""),
            (
                json!({"name": "n", "cniVersion": "1.0.0", "plugins": []}),
                "is empty",
            ),
            (
                json!({"name": "n", "cniVersion": "1.0.0", "plugins": [{"x": 1}]}),
                "plugins[0] has no string \"type\"",
            ),
        ] {
            let e = Conflist::parse(&v).unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}

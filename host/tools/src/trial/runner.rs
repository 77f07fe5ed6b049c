//! How the plugin runs in the sandbox: each CNI command executed as a
//! runtime executes it, in the order a runtime sends them (ADD, CHECK,
//! DEL, DEL; a conflist's plugins before it as a chain), and its audit
//! records, annotated with the node links they refer to.

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde_json::{Map, Value};

use super::BASE;
use crate::suggest::NodeLink;
use wasmcni_runtime::audit::Logged;

/// One CNI command's run.
#[derive(Debug, Clone)]
pub(super) struct Step {
    /// The plugin it ran (the one tried, or one before it in a conflist).
    pub(super) plugin: String,
    pub(super) command: String,
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
    pub(super) ms: f64,
    pub(super) records: Vec<Logged>,
}

/// How to run the plugin inside the sandbox.
pub(super) struct Runner {
    pub(super) exe: PathBuf,
    /// argv[0] and extra arguments.
    pub(super) argv0: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) netns: PathBuf,
    pub(super) ifname: String,
    pub(super) container_id: String,
    pub(super) policy: PathBuf,
    pub(super) audit: PathBuf,
    pub(super) read: u64,
    pub(super) node_links: std::collections::BTreeMap<u32, NodeLink>,
}

impl Runner {
    /// Runs the plugin tried.
    fn run(&mut self, command: &str, config: &Value) -> anyhow::Result<Step> {
        let (argv0, args) = (self.argv0.clone(), self.args.clone());
        self.run_as(&argv0, &args, command, config)
    }

    /// Runs the standard plugin `config` names (one before the plugin
    /// tried in a conflist), as a runtime would.
    fn run_before(&mut self, command: &str, config: &Map<String, Value>) -> anyhow::Result<Step> {
        let t = config.get("type").and_then(Value::as_str).unwrap_or("");
        let argv0 = Path::new(BASE).join("bin").join(t);
        self.run_as(&argv0, &[], command, &Value::Object(config.clone()))
    }

    fn run_as(
        &mut self,
        argv0: &Path,
        args: &[String],
        command: &str,
        config: &Value,
    ) -> anyhow::Result<Step> {
        let base = Path::new(BASE);
        let mut cmd = Command::new(&self.exe);
        cmd.arg0(argv0)
            .args(args)
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_PATH", base.join("bin"))
            .env("WASMCNI_POLICY", &self.policy)
            .env("WASMCNI_POLICY_DIR", base.join("policy.d"))
            .env("WASMCNI_AUDIT", &self.audit)
            .env("WASMCNI_CACHE_DIR", base.join("cache"))
            .env("WASMCNI_STATE_DIR", base.join("state"))
            .env("WASMCNI_RUN_DIR", base.join("run"))
            .env("WASMCNI_PLUGIN_DIR", base.join("plugins"));
        for (k, v) in wasmcni_runtime::config::get().passed_to_children() {
            cmd.env(k, v);
        }
        let start = Instant::now();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running the plugin")?;
        child
            .stdin
            .take()
            .context("the plugin's stdin")?
            .write_all(config.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let text = fs::read(&self.audit).unwrap_or_default();
        let new = text
            .get(usize::try_from(self.read).unwrap_or(usize::MAX)..)
            .unwrap_or_default();
        self.read = text.len() as u64;
        let (mut records, _) = wasmcni_runtime::audit::read_log(&String::from_utf8_lossy(new));
        for r in &mut records {
            annotate(r, &self.node_links);
        }
        Ok(Step {
            plugin: config
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            command: command.to_owned(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            ms,
            records,
        })
    }

    /// ADD, CHECK, DEL, DEL as a runtime sends them: CHECK and the first
    /// DEL get the ADD's result as `prevResult` (libcni's cached result),
    /// the second DEL none (the cache is gone). After a failed ADD,
    /// CHECK is skipped and the DELs clean up. The plugins `before` it in
    /// a conflist run first (ADD, each result the next one's
    /// `prevResult`), and their DELs in reverse order after its first DEL.
    pub(super) fn sequence(
        &mut self,
        config: &Map<String, Value>,
        before: &[Map<String, Value>],
    ) -> anyhow::Result<Vec<Step>> {
        let mut steps = Vec::new();
        let mut config = config.clone();
        let mut prev: Option<Value> = None;
        let mut ran = Vec::new();
        for b in before {
            let mut c = b.clone();
            if let Some(p) = &prev {
                c.insert("prevResult".into(), p.clone());
            }
            let add = self.run_before("ADD", &c)?;
            let ok = add.code == 0;
            prev = serde_json::from_str::<Value>(&add.stdout)
                .ok()
                .filter(|v| ok && v.is_object());
            steps.push(add);
            ran.push(c);
            if !ok {
                break;
            }
        }
        let chain_ok = steps.iter().all(|s| s.code == 0);
        if let Some(p) = &prev {
            config.insert("prevResult".into(), p.clone());
        }
        let mut mine = self.sequence_one(&config, chain_ok)?;
        let last = mine.pop();
        steps.extend(mine);
        for c in ran.iter().rev() {
            steps.push(self.run_before("DEL", c)?);
        }
        steps.extend(last);
        Ok(steps)
    }

    /// The plugin's own ADD, CHECK, DEL, DEL (none but the DELs when the
    /// plugins before it failed).
    fn sequence_one(
        &mut self,
        config: &Map<String, Value>,
        chain_ok: bool,
    ) -> anyhow::Result<Vec<Step>> {
        let mut steps = Vec::new();
        if !chain_ok {
            let mut plain = config.clone();
            plain.remove("prevResult");
            steps.push(self.run("DEL", &Value::Object(plain.clone()))?);
            steps.push(self.run("DEL", &Value::Object(plain))?);
            return Ok(steps);
        }
        let add = self.run("ADD", &Value::Object(config.clone()))?;
        let result = (add.code == 0)
            .then(|| serde_json::from_str::<Value>(&add.stdout).ok())
            .flatten()
            .filter(Value::is_object);
        steps.push(add);
        let mut cached = config.clone();
        match result {
            Some(r) => {
                cached.insert("prevResult".into(), r);
            }
            None => {
                cached.remove("prevResult");
            }
        }
        if steps[0].code == 0 {
            steps.push(self.run("CHECK", &Value::Object(cached.clone()))?);
        }
        steps.push(self.run("DEL", &Value::Object(cached))?);
        let mut plain = config.clone();
        plain.remove("prevResult");
        steps.push(self.run("DEL", &Value::Object(plain))?);
        Ok(steps)
    }
}

/// Adds to a host-namespace record the node links (those the plugin did
/// not create) it refers to, by index, as `node-links`.
fn annotate(r: &mut Logged, node: &std::collections::BTreeMap<u32, NodeLink>) {
    let a = &r.args;
    let host = |k: &str| a.get(k).and_then(Value::as_str) == Some("host");
    let mut refs: Vec<u32> = Vec::new();
    let mut idx = |v: &Value| {
        if let Some(i) = v.as_u64().and_then(|i| u32::try_from(i).ok()) {
            refs.push(i);
        }
    };
    if host("ns") {
        idx(&a["index"]);
        idx(&a["link-index"]);
        idx(&a["route"]["link-index"]);
        if r.call == "link.set-master" {
            idx(&a["master"]);
        }
    }
    if host("master-ns") {
        idx(&a["master"]);
    }
    let mut m = Map::new();
    for i in refs {
        if let Some(l) = node.get(&i) {
            m.insert(
                i.to_string(),
                serde_json::to_value(l).unwrap_or(Value::Null),
            );
        }
    }
    if host("ns") && r.call.starts_with("sysctl.") {
        let key = a.get("key").and_then(Value::as_str).unwrap_or("");
        for (i, l) in node {
            if key
                .split('.')
                .nth(3)
                .map(|c| c.replace('/', "."))
                .as_deref()
                == Some(&l.name)
            {
                m.insert(
                    i.to_string(),
                    serde_json::to_value(l).unwrap_or(Value::Null),
                );
            }
        }
    }
    if !m.is_empty() {
        r.extra.insert("node-links".into(), Value::Object(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotation_names_node_links_only_in_the_host() {
        let node = std::collections::BTreeMap::from([(
            2,
            NodeLink {
                name: "uplink".into(),
                kind: Some("veth".into()),
            },
        )]);
        let mut r = Logged {
            call: "link.set-up".into(),
            args: json!({"ns": "container", "index": 2}),
            ..Logged::default()
        };
        annotate(&mut r, &node);
        assert!(r.extra.is_empty());
        r.args = json!({"ns": "host", "index": 2});
        annotate(&mut r, &node);
        assert_eq!(r.extra["node-links"]["2"]["name"], "uplink");
        let mut s = Logged {
            call: "sysctl.set".into(),
            args: json!({"ns": "host", "key": "net.ipv4.conf.uplink.forwarding"}),
            ..Logged::default()
        };
        annotate(&mut s, &node);
        assert_eq!(s.extra["node-links"]["2"]["name"], "uplink");
    }
}

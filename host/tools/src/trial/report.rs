//! What `wasmcni try` shows of a run: each step, the calls it made and
//! the grant each needed, and the suggested entry and its verification;
//! as text or as JSON.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::runner::Step;
use crate::suggest;
use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::plugins::{Origin, Plugin};
use wasmcni_runtime::policy::Entry;

/// The arguments of a call, short: `key=value` for each that is set.
fn args_summary(a: &Value) -> String {
    match a {
        Value::Object(m) => m
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                Value::Object(_) => format!("{k}={{{}}}", args_summary(v)),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn outcome_text(r: &Logged) -> String {
    match r.outcome.as_str() {
        "ok" => "ok".into(),
        "error" => format!(
            "error {}{}",
            r.error.as_deref().unwrap_or(""),
            r.errno.map(|e| format!(" (errno {e})")).unwrap_or_default()
        ),
        o => format!("{o}: {}", r.reason.as_deref().unwrap_or("")),
    }
}

fn indent(s: &str, by: &str) -> String {
    s.lines()
        .map(|l| format!("{by}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pretty(stdout: &str) -> String {
    serde_json::from_str::<Value>(stdout)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| stdout.trim().to_owned())
}

pub(super) struct Report<'a> {
    pub(super) plugin: &'a Plugin,
    pub(super) learning: bool,
    pub(super) policy: Option<&'a Path>,
    pub(super) config: &'a Map<String, Value>,
    pub(super) ifname: &'a str,
    pub(super) container_id: &'a str,
    pub(super) steps: &'a [Step],
    pub(super) mine: &'a [Logged],
    pub(super) suggestion: Option<&'a (Entry, Vec<String>, Vec<Step>)>,
}

impl Report<'_> {
    /// The distinct grants the plugin's own calls needed.
    fn needed(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.mine {
            for n in suggest::needs(r) {
                let s = n.to_string();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }

    fn call_json(&self, r: &Logged) -> Value {
        let mut v = json!({
            "plugin": r.plugin, "call": r.call, "args": r.args, "outcome": r.outcome,
            "needs": suggest::needs(r).iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        });
        for (k, x) in [("reason", &r.reason), ("error", &r.error)] {
            if let Some(x) = x {
                v[k] = Value::from(x.clone());
            }
        }
        v
    }

    fn step_json(&self, s: &Step) -> Value {
        json!({
            "plugin": s.plugin, "command": s.command, "exit": s.code,
            "ms": (s.ms * 10.0).round() / 10.0,
            "stdout": serde_json::from_str::<Value>(&s.stdout)
                .unwrap_or_else(|_| Value::from(s.stdout.clone())),
            "stderr": s.stderr,
            "calls": s.records.iter().map(|r| self.call_json(r)).collect::<Vec<_>>(),
        })
    }

    pub(super) fn json(&self) -> Value {
        let mut v = json!({
            "plugin": {"name": self.plugin.name(), "sha256": self.plugin.sha256(),
                       "bundled": *self.plugin.origin() == Origin::Bundled},
            "policy": if self.learning { Value::from("learning") }
                      else { Value::from(self.policy.map(|p| p.display().to_string())) },
            "container-id": self.container_id, "ifname": self.ifname,
            "config": self.config,
            "steps": self.steps.iter().map(|s| self.step_json(s)).collect::<Vec<_>>(),
            "needs": self.needed(),
        });
        if let Some((entry, notes, check)) = self.suggestion {
            v["suggestion"] = json!({
                "entry": suggest::entry_json(entry), "notes": notes,
                "verified": check.iter().all(|s| s.code == 0),
                "steps": check.iter().map(|s| self.step_json(s)).collect::<Vec<_>>(),
            });
        }
        v
    }

    fn print_step(&self, s: &Step) {
        let name = self.plugin.name();
        let note = if s.plugin == name {
            String::new()
        } else {
            format!("   ({} comes before {name} in the conflist)", s.plugin)
        };
        println!(
            "$ CNI_COMMAND={} {} < config   -> exit {}, {:.1} ms{note}",
            s.command, s.plugin, s.code, s.ms
        );
        let out = pretty(&s.stdout);
        if !out.is_empty() {
            println!("{}", indent(&out, "  "));
        }
        if !s.stderr.trim().is_empty() {
            println!("  stderr:\n{}", indent(s.stderr.trim_end(), "    "));
        }
        if s.records.is_empty() {
            println!("  calls: none");
        } else {
            println!("  calls:");
        }
        for r in &s.records {
            let who = if r.plugin == name {
                String::new()
            } else {
                format!("[{}] ", r.plugin)
            };
            let needs: Vec<String> = suggest::needs(r).iter().map(|n| n.to_string()).collect();
            let needs = if needs.is_empty() {
                String::new()
            } else if r.plugin == name {
                format!("\n      needs {}", needs.join(", "))
            } else {
                format!(
                    "\n      needs (in {}'s entry) {}",
                    r.plugin,
                    needs.join(", ")
                )
            };
            println!(
                "    {who}{} {}  -> {}{needs}",
                r.call,
                args_summary(&r.args),
                outcome_text(r)
            );
        }
        println!();
    }

    pub(super) fn text(&self) -> anyhow::Result<()> {
        let p = self.plugin;
        println!(
            "wasmcni try: plugin {:?} ({}, sha256 {}) in a throwaway sandbox (own network and \
             mount namespaces: the machine's network and files are not touched)",
            p.name(),
            match p.origin() {
                Origin::Bundled => "bundled".to_owned(),
                Origin::File(f) => f.display().to_string(),
            },
            p.sha256()
        );
        if self.learning {
            println!(
                "policy: learning (the plugin may do anything inside the sandbox, so the run \
                 shows what it needs)"
            );
        } else if let Some(f) = self.policy {
            println!("policy: {} (as on a node)", f.display());
        }
        println!(
            "CNI_CONTAINERID={} CNI_IFNAME={}\nnetwork config:\n{}\n",
            self.container_id,
            self.ifname,
            indent(
                &serde_json::to_string_pretty(&Value::Object(self.config.clone()))?,
                "  "
            )
        );
        for s in self.steps {
            self.print_step(s);
        }
        let needed = self.needed();
        println!(
            "summary: {}",
            self.steps
                .iter()
                .map(|s| format!(
                    "{}{} {}",
                    if s.plugin == p.name() {
                        String::new()
                    } else {
                        format!("{} ", s.plugin)
                    },
                    s.command,
                    if s.code == 0 { "ok" } else { "FAILED" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if needed.is_empty() {
            println!("grants needed: none");
        } else {
            println!("grants needed (plugins.{}.*):", p.name());
            for n in &needed {
                println!("  {n}");
            }
        }
        if let Some((entry, notes, check)) = self.suggestion {
            println!();
            suggest::print_suggestion(p.name(), entry, notes, self.mine.len(), true)?;
            let ok = check.iter().all(|s| s.code == 0);
            println!(
                "verified: {} under this entry alone, in a new container with a new container ID",
                if ok {
                    "ADD, CHECK, DEL, DEL pass"
                } else {
                    "FAILED"
                }
            );
            if !ok {
                for s in check {
                    self.print_step(s);
                }
            }
        }
        Ok(())
    }
}

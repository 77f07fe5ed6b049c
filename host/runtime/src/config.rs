//! Every setting wasmcni takes from its environment, read here and only
//! here (a `clippy.toml` rule keeps `std::env::var` out of the rest of the
//! host), once per process, when first asked for ([`get`]).
//!
//! The CNI variables (`CNI_COMMAND`, `CNI_NETNS`, …) are not settings but
//! the invocation's input: [`cni_environment`] hands them to the runner as
//! they are.
//!
//! | variable | what | default |
//! |---|---|---|
//! | `WASMCNI_POLICY` | the policy file (set: it must exist) | `/etc/wasmcni/policy.json` if it exists |
//! | `WASMCNI_POLICY_DIR` | the policy directory, one `NAME.json` per plugin (set: it must exist) | `/etc/wasmcni/policy.d` if it exists |
//! | `WASMCNI_AUDIT` | the audit log: a file, `stderr` or `off` | `/var/log/wasmcni/audit.jsonl` |
//! | `WASMCNI_STATE_DIR` | the state root (attachment records, plugin state) | `/var/lib/wasmcni` |
//! | `WASMCNI_RUN_DIR` | the run directory (locks) | `/run/wasmcni` |
//! | `WASMCNI_CACHE_DIR` | the compiled-artifact cache | `.wasmcni-cache` beside the executable |
//! | `WASMCNI_CPU` | the CPU plugins are compiled for: `native` (this machine's features), or `x86-64-v2` (any x86-64 with SSE4.2 and POPCNT: artifacts one machine compiles for another, as the tests' VM uses) | `native` |
//! | `WASMCNI_PLUGIN_DIR` | the third-party plugins (`NAME.wasm`) | `/opt/wasmcni/plugins` |
//! | `WASMCNI_DEADLINE_MS` | every plugin's wall-clock deadline, over its policy entry's | the entry's, else 10 s |
//! | `WASMCNI_MEMORY_MB` | every plugin's memory cap, over its policy entry's | the entry's, else 64 MiB |
//! | `WASMCNI_LOG` | the log filter (env_logger syntax) | `warn` |
//! | `WASMCNI_FAULT` | test builds only: a fault to inject (see `fault.rs`) | none |
//! | `WASMCNI_UPDATE_DOCS` | unit tests only: rewrite docs/capabilities.md | unset |
//! | `PATH` | handed to native delegates | — |
//! | `TRACEPARENT`, `TRACESTATE`, `BAGGAGE` | W3C trace context (libcni passes it to plugins): a valid `TRACEPARENT`'s trace id and parent id go into every audit record; all three are handed to native delegates | unset |
//! | `KUBERNETES_NODE_NAME`, `CNI_MTU`, `POD_CIDR` | `wasmcni chain-into`'s placeholders (`__KUBERNETES_NODE_NAME__`, ...) | unset |
//!
//! An empty value counts as unset for `WASMCNI_POLICY_DIR`,
//! `WASMCNI_STATE_DIR`, `WASMCNI_CACHE_DIR` and `WASMCNI_PLUGIN_DIR`; the
//! others keep it as given (an empty policy path or limit is an error, as
//! it always was).
#![allow(clippy::disallowed_methods)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The settings of this process ([`get`]).
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `WASMCNI_POLICY`, as given (an empty path included).
    pub policy: Option<PathBuf>,
    /// `WASMCNI_POLICY_DIR`, if not empty.
    pub policy_dir: Option<PathBuf>,
    /// `WASMCNI_AUDIT`, as given.
    pub audit: Option<PathBuf>,
    /// `WASMCNI_STATE_DIR`, if not empty.
    pub state_dir: Option<PathBuf>,
    /// `WASMCNI_RUN_DIR`, as given.
    pub run_dir: Option<PathBuf>,
    /// `WASMCNI_CACHE_DIR`, if not empty.
    pub cache_dir: Option<PathBuf>,
    /// `WASMCNI_PLUGIN_DIR`, if not empty.
    pub plugin_dir: Option<PathBuf>,
    /// `WASMCNI_DEADLINE_MS`, unparsed (`Limits::resolve` says what is
    /// wrong with it, as a CNI error of the invocation).
    pub deadline_ms: Option<String>,
    /// `WASMCNI_CPU`, as given.
    pub cpu: Option<String>,
    /// `WASMCNI_MEMORY_MB`, unparsed.
    pub memory_mb: Option<String>,
    /// `WASMCNI_LOG`.
    pub log: Option<String>,
    /// `WASMCNI_FAULT` (acted on by test builds only).
    pub fault: Option<String>,
    /// `WASMCNI_UPDATE_DOCS` is set.
    pub update_docs: bool,
    /// `PATH`, if it is Unicode.
    pub path: Option<String>,
    /// `TRACEPARENT`, `TRACESTATE` and `BAGGAGE` (those set and Unicode),
    /// as the runtime gave them.
    pub trace_context: Vec<(&'static str, String)>,
    /// `KUBERNETES_NODE_NAME`, `CNI_MTU` and `POD_CIDR` (those set and
    /// Unicode): `wasmcni chain-into` fills its entry's placeholders of
    /// the same names with them.
    pub placeholders: Vec<(&'static str, String)>,
}

impl Config {
    /// The settings `var` answers (the process environment, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Config {
        let path = |k: &str| var(k).map(PathBuf::from);
        let non_empty = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let text = |k: &str| var(k).map(|v| v.to_string_lossy().into_owned());
        Config {
            policy: path("WASMCNI_POLICY"),
            policy_dir: non_empty("WASMCNI_POLICY_DIR"),
            audit: path("WASMCNI_AUDIT"),
            state_dir: non_empty("WASMCNI_STATE_DIR"),
            run_dir: path("WASMCNI_RUN_DIR"),
            cache_dir: non_empty("WASMCNI_CACHE_DIR"),
            plugin_dir: non_empty("WASMCNI_PLUGIN_DIR"),
            deadline_ms: text("WASMCNI_DEADLINE_MS"),
            cpu: text("WASMCNI_CPU"),
            memory_mb: text("WASMCNI_MEMORY_MB"),
            log: text("WASMCNI_LOG"),
            fault: text("WASMCNI_FAULT"),
            update_docs: var("WASMCNI_UPDATE_DOCS").is_some(),
            path: var("PATH").and_then(|p| p.into_string().ok()),
            trace_context: ["TRACEPARENT", "TRACESTATE", "BAGGAGE"]
                .into_iter()
                .filter_map(|k| Some((k, var(k)?.into_string().ok()?)))
                .collect(),
            placeholders: ["KUBERNETES_NODE_NAME", "CNI_MTU", "POD_CIDR"]
                .into_iter()
                .filter_map(|k| Some((k, var(k)?.into_string().ok()?)))
                .collect(),
        }
    }

    /// The settings of the process environment.
    pub fn from_env() -> Config {
        Config::from_vars(|k| std::env::var_os(k))
    }

    /// The variables a child wasmcni (`wasmcni try`'s) inherits as they
    /// are: the log filter, the limits and the CPU it compiles for.
    pub fn passed_to_children(&self) -> Vec<(&'static str, &str)> {
        [
            ("WASMCNI_LOG", &self.log),
            ("WASMCNI_CPU", &self.cpu),
            ("WASMCNI_DEADLINE_MS", &self.deadline_ms),
            ("WASMCNI_MEMORY_MB", &self.memory_mb),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
        .collect()
    }
}

/// The settings of this process, read from its environment the first time
/// they are asked for.
pub fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// The invocation's environment as the runtime gave it (`CNI_*` and the
/// rest), for the runner to read the CNI variables from.
pub fn cni_environment() -> std::env::VarsOs {
    std::env::vars_os()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_values_count_as_unset_where_they_always_did() {
        let c = Config::from_vars(|k| match k {
            "WASMCNI_POLICY" | "WASMCNI_POLICY_DIR" | "WASMCNI_STATE_DIR" => Some(OsString::new()),
            "WASMCNI_DEADLINE_MS" => Some("250".into()),
            _ => None,
        });
        assert_eq!(c.policy, Some(PathBuf::new()));
        assert_eq!(c.policy_dir, None);
        assert_eq!(c.state_dir, None);
        assert_eq!(c.passed_to_children(), [("WASMCNI_DEADLINE_MS", "250")]);
    }
}

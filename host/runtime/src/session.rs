//! What every plugin run of one CNI invocation shares, below the
//! capability layer: the process's [`Runtime`] (engine, artifact cache,
//! policy, `CNI_*` environment, deadline, audit sink), a run's [`Output`],
//! a plugin's policy entry as resolved for it ([`Resolved`]), and how a
//! failed run's CNI error is explained. The one place a plugin runs is
//! [`crate::exec`]; the runner and the chain runner set up a session there.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cni_spec::Command;
use wasmtime::Engine;

use crate::audit::{Identity, Sink};
use crate::cni_error::{CniError, Code};
use crate::engine::ArtifactCache;
use crate::limits::Limits;
use crate::netns::{NetNs, NetnsError};
use crate::plugins::{LookupError, Origin, Plugin};
use crate::policy::{self, Policy};

/// The largest config wasmcni accepts on stdin.
pub const MAX_STDIN: usize = 4 << 20;

/// The most a plugin may write to stdout.
pub const MAX_STDOUT: usize = 1 << 20;

/// What every plugin run in this process shares: the top-level plugin the
/// runtime executed and the delegates it runs in-process.
pub struct Runtime {
    /// The engine (one per process: the deadline timer advances its epoch).
    pub engine: Engine,
    /// Where precompiled artifacts live.
    pub cache: Option<ArtifactCache>,
    /// The effective policy.
    pub policy: Policy,
    /// The process's `CNI_*` environment.
    pub env: Vec<(String, String)>,
    /// When the whole invocation must be done (delegates included: one
    /// deadline per process, never re-armed by a nested run).
    pub deadline: std::time::Instant,
    /// Where audit records go.
    pub sink: Sink,
}

/// What a finished plugin produced.
#[derive(Debug)]
pub struct Output {
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its exit code.
    pub code: i32,
}

/// The CNI environment: exactly the `CNI_*` variables, as UTF-8.
pub(crate) fn cni_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Result<Vec<(String, String)>, CniError> {
    let mut env = Vec::new();
    for (k, v) in vars {
        if !k.as_bytes().starts_with(b"CNI_") {
            continue;
        }
        let key = k.to_str().ok_or_else(|| {
            CniError::new(
                Code::InvalidEnv,
                format!("environment variable {k:?} is not valid UTF-8"),
            )
        })?;
        let value = v.into_string().map_err(|v| {
            CniError::new(Code::InvalidEnv, format!("{key}={v:?} is not valid UTF-8"))
        })?;
        env.push((key.to_owned(), value));
    }
    Ok(env)
}

/// The value of `key` in a `CNI_*` environment.
pub(crate) fn lookup<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The command `env`'s `CNI_COMMAND` names, if any: read once, where a
/// run starts, and carried down from there.
pub(crate) fn command(env: &[(String, String)]) -> Option<Command> {
    Command::parse(lookup(env, "CNI_COMMAND").unwrap_or("")).ok()
}

/// Opens `CNI_NETNS` for the commands that act in it (`command`). DEL
/// tolerates a namespace that is already gone, as the spec asks.
pub(crate) fn container_netns(
    env: &[(String, String)],
    command: Option<Command>,
) -> Result<Option<NetNs>, CniError> {
    if !matches!(command, Some(Command::Add | Command::Check | Command::Del)) {
        return Ok(None);
    }
    let Some(path) = lookup(env, "CNI_NETNS").filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    match NetNs::open_container(Path::new(path)) {
        Ok(ns) => Ok(Some(ns)),
        Err(NetnsError::Missing(_)) if command == Some(Command::Del) => Ok(None),
        Err(e) => Err(CniError::new(Code::InvalidEnv, e.to_string())),
    }
}

/// Who the audit records of a run name.
pub(crate) fn identity(env: &[(String, String)], plugin: &Plugin, command: &str) -> Identity {
    let var = |k: &str| lookup(env, k).unwrap_or("").to_owned();
    Identity {
        plugin: plugin.name().to_owned(),
        sha256: plugin.sha256().to_owned(),
        container_id: var("CNI_CONTAINERID"),
        ifname: var("CNI_IFNAME"),
        command: command.to_owned(),
    }
}

/// A lookup failure as a CNI error.
pub(crate) fn lookup_error(e: LookupError) -> CniError {
    match e {
        LookupError::Io { .. } => CniError::new(Code::Io, e.to_string()),
        _ => CniError::new(Code::InvalidConfig, e.to_string()),
    }
}

/// Refuses a plugin whose sha256 is not the one its policy pins.
pub(crate) fn check_pin(entry: &policy::Entry, plugin: &Plugin) -> Result<(), CniError> {
    entry.check_pin(plugin.sha256()).map_err(|why| {
        CniError::new(
            Code::PluginRefused,
            format!("plugin {:?} refused: {why}", plugin.name()),
        )
    })
}

pub(crate) fn internal(e: impl std::fmt::Display) -> CniError {
    CniError::new(Code::Internal, format!("wasmcni: {e}"))
}

/// The Tokio runtime a run enters (see [`crate::exec`]): current-thread, with
/// timers, no threads of its own.
pub(crate) fn current_thread_runtime() -> Result<tokio::runtime::Runtime, CniError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(internal)
}

/// A failed run's outcome, in a few words (for stderr).
pub(crate) fn describe(outcome: &Result<Output, CniError>) -> String {
    match outcome {
        Ok(Output { stdout, code }) => {
            let text = String::from_utf8_lossy(stdout);
            let text = text.trim();
            let text: String = text.chars().take(300).collect();
            format!("exit {code}: {text}")
        }
        Err(e) => e.to_string(),
    }
}

/// A failed run's denials, for the runtime: added to the CNI error's
/// `details` (after any details of its own; the plugin's `code` and `msg`
/// stay), and logged on stderr. Each names the call and the field of the
/// plugin's own policy entry that would allow it, or the invariant no
/// policy waives ([`crate::caps::Denial`]); a plugin with no entry at all is told
/// so. The host-side causes of calls the plugin saw fail as `other`
/// ([`crate::caps::Ctx::host_errors`]: the path and errno of an unwritable state
/// root, an audit log that cannot be written) follow. A run that succeeded
/// is left as it is.
pub(crate) fn explain_denials(
    outcome: Result<Output, CniError>,
    denials: &[String],
    host_errors: &[String],
    name: &str,
    has_entry: bool,
) -> Result<Output, CniError> {
    if (denials.is_empty() && host_errors.is_empty())
        || matches!(outcome, Ok(Output { code: 0, .. }))
    {
        return outcome;
    }
    let mut text = String::new();
    if !denials.is_empty() {
        if !has_entry {
            text.push_str(&format!(
                "plugin {name:?} has no policy entry, so it has no authority (give it one: \
                 plugins.{name} in the policy file, or {name}.json in the policy directory); "
            ));
        }
        text.push_str("wasmcni denied: ");
        text.push_str(&denials.join("; "));
    }
    if !host_errors.is_empty() {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str("wasmcni: ");
        text.push_str(&host_errors.join("; "));
    }
    eprintln!("wasmcni: plugin {name:?} failed; {text}");
    let append = |details: &str| {
        if details.is_empty() {
            text.clone()
        } else {
            format!("{details}; {text}")
        }
    };
    match outcome {
        Ok(Output { stdout, code }) => {
            let stdout = with_details(&stdout, append).unwrap_or(stdout);
            Ok(Output { stdout, code })
        }
        Err(mut e) => {
            e.details = append(&e.details);
            Err(e)
        }
    }
}

/// `stdout` with its CNI error's `details` replaced by `details(old)`, if
/// it is one JSON object with a `code` or `msg`; otherwise `None` (the
/// plugin's output then reaches the runtime as it was).
pub(crate) fn with_details(stdout: &[u8], details: impl Fn(&str) -> String) -> Option<Vec<u8>> {
    let mut error: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(stdout).ok()?;
    if !error.contains_key("code") && !error.contains_key("msg") {
        return None;
    }
    let old = error
        .get("details")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
    let new = details(old);
    error.insert("details".into(), new.into());
    let mut out = serde_json::to_vec(&error).ok()?;
    out.push(b'\n');
    Some(out)
}
/// A plugin's policy entry, resolved and checked for a run: its pin
/// holds, its limits are known.
pub struct Resolved {
    /// The entry (the default one if the policy has none for it).
    pub entry: policy::Entry,
    /// Whether the policy has an entry for it at all.
    pub has_entry: bool,
    /// Its deadline and memory cap.
    pub limits: Limits,
}

impl Resolved {
    /// Resolves `plugin`'s entry in `policy` (only its own entry is parsed:
    /// a broken entry of another plugin does not stop this one), checks its
    /// pin and resolves its limits.
    pub fn of(policy: &Policy, plugin: &Plugin) -> Result<Resolved, CniError> {
        let bundled = *plugin.origin() == Origin::Bundled;
        let entry = policy
            .resolve(plugin.name(), bundled)
            .map_err(|e| CniError::new(Code::PolicyInvalid, e.to_string()))?;
        let has_entry = policy.source(plugin.name(), bundled).is_some();
        check_pin(&entry, plugin)?;
        let limits = Limits::resolve(&entry)?;
        Ok(Resolved {
            entry,
            has_entry,
            limits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(out: &Output) -> serde_json::Value {
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    #[test]
    fn denials_reach_a_failed_runs_details() {
        let denials = vec![
            "link.get-by-name: plugins.p.container.read is false".to_owned(),
            "sysctl.set: sysctl net.x matches none of plugins.p.container.sysctls".to_owned(),
        ];
        let failed = |stdout: &str| {
            Ok(Output {
                stdout: stdout.as_bytes().to_vec(),
                code: 1,
            })
        };
        // The plugin's own code and msg stay; details are added.
        let out = explain_denials(
            failed(r#"{"cniVersion":"1.0.0","code":11,"msg":"no"}"#),
            &denials,
            &[],
            "p",
            true,
        )
        .expect("output");
        let v = json(&out);
        assert_eq!(
            (v["code"].as_u64(), v["msg"].as_str()),
            (Some(11), Some("no"))
        );
        let details = v["details"].as_str().expect("details");
        assert!(details.contains("container.read is false"), "{details}");
        assert!(details.contains("plugins.p.container.sysctls"), "{details}");
        assert_eq!(out.code, 1);
        // Its own details come first.
        let v = json(
            &explain_denials(
                failed(r#"{"code":11,"msg":"no","details":"mine"}"#),
                &denials,
                &[],
                "p",
                false,
            )
            .expect("output"),
        );
        let details = v["details"].as_str().expect("details");
        assert!(details.starts_with("mine; "), "{details}");
        assert!(details.contains("has no policy entry"), "{details}");
        // Output that is no CNI error is left alone; so is a success.
        let out = explain_denials(failed("garbage"), &denials, &[], "p", true).expect("output");
        assert_eq!(out.stdout, b"garbage");
        let ok = explain_denials(
            Ok(Output {
                stdout: b"{}".to_vec(),
                code: 0,
            }),
            &denials,
            &[],
            "p",
            true,
        )
        .expect("output");
        assert_eq!(ok.stdout, b"{}");
        // A host error (a trap) gets them too.
        let e = explain_denials(
            Err(CniError::new(Code::PluginTrapped, "trapped").with_details("wasm backtrace")),
            &denials,
            &[],
            "p",
            true,
        )
        .expect_err("error");
        assert!(
            e.details.starts_with("wasm backtrace; wasmcni denied: "),
            "{}",
            e.details
        );
    }

    #[test]
    fn host_errors_reach_a_failed_runs_details() {
        let causes = vec![
            "writing the intent log /s/a.intent: Read-only file system (os error 30)".to_owned(),
            "the audit log /l/audit.jsonl cannot be written: Read-only file system (os error 30)"
                .to_owned(),
        ];
        let out = explain_denials(
            Ok(Output {
                stdout: br#"{"code":999,"msg":"link.create-veth failed"}"#.to_vec(),
                code: 1,
            }),
            &[],
            &causes,
            "p",
            false,
        )
        .expect("output");
        let v = json(&out);
        let details = v["details"].as_str().expect("details");
        assert!(
            details.starts_with("wasmcni: writing the intent log /s/a.intent: Read-only"),
            "{details}"
        );
        assert!(
            details.contains("/l/audit.jsonl cannot be written"),
            "{details}"
        );
        assert!(!details.contains("no policy entry"), "{details}");
    }
}

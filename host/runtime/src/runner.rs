//! One CNI invocation: what a runtime sees when it executes a plugin.
//!
//! Reads the `CNI_*` environment and the config on stdin, verifies
//! `CNI_NETNS`, runs the plugin component in a fresh store with a deadline
//! and a memory cap, and makes the plugin's stdout and exit code wasmcni's.
//! Failures of wasmcni's own (unknown plugin, bad namespace, trap,
//! deadline, memory cap) become a CNI error on stdout and exit 1.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use wasmtime::component::{Component, HasData, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::p2::bindings::{cli, clocks, random, sync};
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::audit::{Audit, Identity, Sink};
use crate::caps::{self, BudgetExceeded, StoreData};
use crate::clock::{self, DeadlineClock, HasDeadlineClock};
use crate::cni_error::{version_for_errors, CniError, Code};
use crate::engine::{self, ArtifactCache};
use crate::limits::Limiter;
use crate::netns::{NetNs, NetnsError};
use crate::plugins::{self, LookupError, Plugin};
use crate::policy::{self, Policy};

/// The largest config wasmcni accepts on stdin.
pub const MAX_STDIN: usize = 4 << 20;
/// The most a plugin may write to stdout.
pub const MAX_STDOUT: usize = 1 << 20;
/// Default wall-clock deadline for one plugin run.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Default cap on a plugin's linear memory.
pub const DEFAULT_MEMORY_CAP: usize = 64 << 20;

/// Limits for one run.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall-clock deadline.
    pub deadline: Duration,
    /// Linear-memory cap in bytes.
    pub memory_cap: usize,
}

impl Limits {
    /// Defaults, overridden by the plugin's policy entry, overridden by
    /// `WASMCNI_DEADLINE_MS` and `WASMCNI_MEMORY_MB`.
    pub fn resolve(entry: &policy::Entry) -> Result<Limits, CniError> {
        let config = crate::config::get();
        let num = |var: &str| -> Result<Option<u64>, CniError> {
            let value = match var {
                "WASMCNI_DEADLINE_MS" => &config.deadline_ms,
                _ => &config.memory_mb,
            };
            match value {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(Some)
                    .ok_or_else(|| {
                        CniError::new(
                            Code::InvalidEnv,
                            format!("{var} must be a positive integer, got {v:?}"),
                        )
                    }),
            }
        };
        Ok(Limits {
            deadline: num("WASMCNI_DEADLINE_MS")?
                .or(entry.deadline_ms)
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_DEADLINE),
            memory_cap: num("WASMCNI_MEMORY_MB")?
                .or(entry.memory_mb)
                .map(|m| usize::try_from(m.saturating_mul(1 << 20)).unwrap_or(usize::MAX))
                .unwrap_or(DEFAULT_MEMORY_CAP),
        })
    }
}

/// Which plugin to run.
#[derive(Debug, Clone)]
pub enum Target<'a> {
    /// A plugin name (multi-call `argv[0]`, or `wasmcni run NAME`).
    Name(&'a str),
    /// An explicit component file (`wasmcni run path.wasm`).
    Path(&'a Path),
}

/// Runs one invocation with the process's stdin, stdout and environment,
/// and returns the exit code. `policy_file` overrides `$WASMCNI_POLICY`.
pub fn main(target: Target<'_>, policy_file: Option<&Path>) -> i32 {
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_STDIN as u64 + 1)
        .read_to_end(&mut stdin);
    let outcome = match read {
        Err(e) => Err(CniError::new(
            Code::Io,
            format!("reading the network config from stdin: {e}"),
        )),
        Ok(_) if stdin.len() > MAX_STDIN => Err(CniError::new(
            Code::InvalidConfig,
            format!("the network config on stdin is larger than {MAX_STDIN} bytes"),
        )),
        Ok(_) => invoke(
            target,
            &stdin,
            crate::config::cni_environment(),
            policy_file,
        ),
    };
    let mut out = std::io::stdout().lock();
    match outcome {
        Ok(Output { stdout, code }) => {
            let _ = out.write_all(&stdout);
            let _ = out.flush();
            code
        }
        Err(e) => {
            let _ = writeln!(out, "{}", e.to_json(&version_for_errors(&stdin)));
            let _ = out.flush();
            1
        }
    }
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
fn cni_env(
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

pub(crate) fn lookup<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Opens `CNI_NETNS` for the commands that act in it. DEL tolerates a
/// namespace that is already gone, as the spec asks.
pub(crate) fn container_netns(env: &[(String, String)]) -> Result<Option<NetNs>, CniError> {
    let command = lookup(env, "CNI_COMMAND").unwrap_or("");
    if !matches!(command, "ADD" | "CHECK" | "DEL") {
        return Ok(None);
    }
    let Some(path) = lookup(env, "CNI_NETNS").filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    match NetNs::open_container(Path::new(path)) {
        Ok(ns) => Ok(Some(ns)),
        Err(NetnsError::Missing(_)) if command == "DEL" => Ok(None),
        Err(e) => Err(CniError::new(Code::InvalidEnv, e.to_string())),
    }
}

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

/// Runs `target` with `stdin` and the `CNI_*` variables among `vars`.
///
/// A DEL whose plugin cannot run at all (the policy file or the plugin's
/// entry is broken, its pin no longer matches, the plugin or its artifact
/// is missing or refused) still gets the host's part
/// ([`del_without_plugin`]): a runtime calls DEL after a failed ADD, and
/// one that fails forever wedges the container's cleanup, and every
/// plugin before it in the list.
pub fn invoke(
    target: Target<'_>,
    stdin: &[u8],
    vars: impl Iterator<Item = (OsString, OsString)>,
    policy_file: Option<&Path>,
) -> Result<Output, CniError> {
    let env = cni_env(vars)?;
    let command = lookup(&env, "CNI_COMMAND").unwrap_or("").to_owned();
    let loaded = Policy::load(policy_file)
        .map_err(|e| CniError::new(Code::PolicyInvalid, e.to_string()))
        .and_then(|policy| {
            if matches!(target, Target::Name(n) if n == crate::chain::NAME) {
                return Ok(Loaded::Chain(policy));
            }
            load(&target, policy).map(Loaded::Plugin)
        });
    match loaded {
        Ok(Loaded::Chain(policy)) => crate::chain::invoke(stdin, env, policy),
        Ok(Loaded::Plugin(p)) => run_loaded(*p, stdin, env, &command),
        Err(why) if command == "DEL" => match target_name(&target) {
            Some(name) => del_without_plugin(&name, stdin, &env, why),
            None => Err(why),
        },
        Err(why) => Err(why),
    }
}

/// What [`invoke`] runs.
enum Loaded {
    /// `wasmcni-chain` (its members are loaded by [`crate::chain`]).
    Chain(Policy),
    /// One plugin, ready to run.
    Plugin(Box<LoadedPlugin>),
}

/// A plugin with its policy entry resolved and checked.
struct LoadedPlugin {
    plugin: Plugin,
    policy: Policy,
    entry: policy::Entry,
    has_entry: bool,
    limits: Limits,
}

/// Finds `target` and resolves and checks its policy entry.
fn load(target: &Target<'_>, policy: Policy) -> Result<Box<LoadedPlugin>, CniError> {
    let plugin = match target {
        Target::Name(n) => plugins::find(n),
        Target::Path(p) => Plugin::from_path(p),
    }
    .map_err(lookup_error)?;
    let bundled = *plugin.origin() == crate::plugins::Origin::Bundled;
    // Only this plugin's entry is parsed: a broken entry of another plugin
    // does not stop this one.
    let entry = policy
        .resolve(plugin.name(), bundled)
        .map_err(|e| CniError::new(Code::PolicyInvalid, e.to_string()))?;
    let has_entry = policy.source(plugin.name(), bundled).is_some();
    check_pin(&entry, &plugin)?;
    let limits = Limits::resolve(&entry)?;
    Ok(Box::new(LoadedPlugin {
        plugin,
        policy,
        entry,
        has_entry,
        limits,
    }))
}

/// The name a target's records are kept under, if it is a valid one.
fn target_name(target: &Target<'_>) -> Option<String> {
    let name = match target {
        Target::Name(n) => Some(*n),
        Target::Path(p) => p.file_stem().and_then(|s| s.to_str()),
    }?;
    (name == crate::chain::NAME || plugins::valid_name(name)).then(|| name.to_owned())
}

/// The DEL of a plugin that cannot run (`why`): the host's record-driven
/// cleanup of what the attachment's ADD made for it ([`finish`]). It
/// succeeds, with a warning on stderr and in the audit log, when nothing of
/// the plugin's is left: the record covered everything and it is removed,
/// or there is no record (its ADD made nothing, or never ran). It fails
/// with `why` when the config does not name the network, and when the
/// ADD did what only the plugin's DEL can take back.
pub(crate) fn del_without_plugin(
    name: &str,
    stdin: &[u8],
    env: &[(String, String)],
    why: CniError,
) -> Result<Output, CniError> {
    let attachment = caps::Attachment::from_invocation(env, stdin);
    if attachment.network.is_empty() || attachment.container_id.is_empty() {
        return Err(why);
    }
    let container = container_netns(env)?;
    let identity = Identity {
        plugin: name.to_owned(),
        sha256: String::new(),
        container_id: attachment.container_id.clone(),
        ifname: attachment.ifname.clone(),
        command: "DEL".to_owned(),
    };
    let mut caps = caps::Ctx::new(caps::CtxParams {
        // It never runs: no authority.
        grant: policy::Grant::default(),
        container,
        audit: Audit::new(identity, Sink::from_env()),
        attachment,
        command: caps::Command::Del,
        cni_command: "DEL".to_owned(),
        runtime: None,
    });
    let outcome = finish_del(Err(why), &mut caps, name, true);
    std::mem::forget(caps);
    outcome
}

/// Runs a loaded plugin for the runtime.
fn run_loaded(
    loaded: LoadedPlugin,
    stdin: &[u8],
    env: Vec<(String, String)>,
    command: &str,
) -> Result<Output, CniError> {
    let LoadedPlugin {
        plugin,
        policy,
        entry,
        has_entry,
        limits,
    } = loaded;
    let command = command.to_owned();
    let t0 = std::time::Instant::now();
    let container = container_netns(&env)?;
    let t1 = std::time::Instant::now();
    let engine = engine::engine().map_err(internal)?;
    let t2 = std::time::Instant::now();
    let rt = std::sync::Arc::new(Runtime {
        engine,
        cache: ArtifactCache::default_location(),
        policy,
        env,
        deadline: t0 + limits.deadline,
        sink: Sink::from_env(),
    });
    let (component, imports) = match prepare(&rt, &plugin) {
        Ok(prepared) => prepared,
        Err(why) if command == "DEL" => {
            return del_without_plugin(plugin.name(), stdin, &rt.env, why)
        }
        Err(why) => return Err(why),
    };
    log::debug!(
        "timing: netns {:?}, engine {:?}, load + imports {:?}",
        t1 - t0,
        t2 - t1,
        t2.elapsed()
    );
    let mut caps = caps::Ctx::new(caps::CtxParams {
        grant: entry.grant(),
        container,
        audit: Audit::new(identity(&rt.env, &plugin, &command), rt.sink.clone()),
        attachment: caps::Attachment::from_invocation(&rt.env, stdin),
        command: caps::Command::from_env(&command),
        cni_command: command.clone(),
        runtime: Some(rt.clone()),
    });
    if let Some(why) = crate::record::Location::untrusted_root() {
        // Records give authority (what the host removes, the addresses a
        // plugin may name as its container's): none is kept or read where
        // another user could write one.
        if command == "ADD" {
            return Err(CniError::new(
                Code::Internal,
                format!(
                    "wasmcni keeps the attachment records under its state root, and may not: \
                     {why} (make it, and every directory above it, root's and not writable by \
                     group or others; or set WASMCNI_STATE_DIR)"
                ),
            ));
        }
        eprintln!("wasmcni: ignoring the attachment records: {why}");
    } else if command == "ADD" {
        caps.reconcile_boot()
            .map_err(|e| CniError::new(Code::TryAgainLater, e))?;
        caps.adopt_intent();
    }
    clock::arm_deadline(&rt.engine, limits.deadline);
    // wasmtime-wasi's synchronous streams block on futures through the
    // ambient Tokio runtime, and start a multi-threaded one (a thread per
    // core, cgroup probing) if there is none. A current-thread runtime,
    // entered here, costs no threads: start-up is every CNI call's hot path.
    let tokio_rt = current_thread_runtime()?;
    let _entered = tokio_rt.enter();
    let (outcome, mut caps) = execute(
        &rt, &component, &imports, &plugin, &rt.env, stdin, &limits, caps,
    );
    let outcome = if command == "DEL" && !has_entry && !caps.denials().is_empty() {
        // A plugin with no policy entry has no authority: a DEL it failed
        // for want of one is a DEL it could not run (its entry may have
        // been removed since its ADD); the host stands in as for a broken
        // entry.
        finish_del(outcome, &mut caps, plugin.name(), true)
    } else {
        finish(&command, outcome, &mut caps, plugin.name())
    };
    let outcome = explain_denials(
        outcome,
        caps.denials(),
        &caps.host_errors(),
        plugin.name(),
        has_entry,
    );
    // The process exits right after this; unmapping the code and the
    // engine's type registry would only add to every call's latency.
    std::mem::forget(component);
    std::mem::forget(caps);
    std::mem::forget(tokio_rt);
    outcome
}

/// What the host does once a run's plugin is done: undoes a failed ADD
/// (nothing behind), records a successful one ([`crate::record`]), stands
/// in after a DEL for what the plugin left ([`caps::Ctx::finish_del`]),
/// and collects the garbage of a GC. `name` is the plugin (or chain) the
/// runtime executed.
pub(crate) fn finish(
    command: &str,
    outcome: Result<Output, CniError>,
    caps: &mut caps::Ctx,
    name: &str,
) -> Result<Output, CniError> {
    let failed = !matches!(outcome, Ok(Output { code: 0, .. }));
    match command {
        // A failed ADD leaves nothing behind.
        // (Or one whose intent log names a step that did not happen.)
        "ADD" if failed && (caps.journal_len() > 0 || caps.has_intent()) => {
            let outcome = undo_or_report(caps, 0, name, outcome);
            caps.drop_record();
            outcome
        }
        // A host link the ADD took is out only with the record that
        // brings it back.
        "ADD" if !failed => match caps.keep_record(true) {
            Ok(()) => outcome,
            Err(why) => {
                let outcome = undo_or_report(
                    caps,
                    0,
                    name,
                    Err(CniError::new(Code::Io, format!("wasmcni: {why}"))),
                );
                caps.drop_record();
                outcome
            }
        },
        // Whatever the plugin's DEL left of what the record holds, the
        // host returns or removes.
        "DEL" => {
            let could_not_run = matches!(&outcome, Err(e) if e.code.plugin_could_not_run());
            finish_del(outcome, caps, name, could_not_run)
        }
        // The plugin's records of attachments the runtime no longer holds.
        // Whatever the plugin's GC did (a plugin that never implemented
        // it, or failed): the records of attachments the runtime no longer
        // holds, and what they list; the plugin's state of them.
        "GC" => {
            let (records, mut failures) = caps.gc_records();
            if !records.is_empty() {
                eprintln!(
                    "wasmcni: GC removed the attachment records of {} and what they listed",
                    records.join(", ")
                );
            }
            let (removed, state_failures) = caps.gc_state();
            failures.extend(state_failures);
            if !removed.is_empty() {
                eprintln!(
                    "wasmcni: GC removed the plugin state of {}",
                    removed.join(", ")
                );
            }
            if failures.is_empty() {
                outcome
            } else {
                Err(CniError::new(
                    Code::Io,
                    format!(
                        "wasmcni: GC could not remove plugin state: {}",
                        failures.join("; ")
                    ),
                ))
            }
        }
        _ => outcome,
    }
}

/// The host's part of a DEL ([`caps::Ctx::finish_del`]): whatever the
/// plugin's DEL left of what the attachment's record holds, the host
/// returns or removes. A failed DEL stands unless the host stood in for
/// all of it: the record covered everything the ADD did; or the plugin
/// `could_not_run` (refused, trapped, out of time or memory) and has no
/// record, so nothing of the attachment is its. Then the DEL succeeds, said
/// on stderr and in the audit log, and the plugin's state of the attachment
/// goes with it; otherwise that state is kept for the runtime's retry.
fn finish_del(
    outcome: Result<Output, CniError>,
    caps: &mut caps::Ctx,
    name: &str,
    could_not_run: bool,
) -> Result<Output, CniError> {
    use caps::DelCleanup;
    let failed = !matches!(outcome, Ok(Output { code: 0, .. }));
    let cleanup = caps.finish_del().map_err(|why| {
        CniError::new(
            Code::Internal,
            format!("wasmcni: what this attachment's ADD made could not all be removed: {why}"),
        )
    })?;
    let stands_in = match &cleanup {
        DelCleanup::Complete => true,
        DelCleanup::NoRecord => could_not_run,
        DelCleanup::Partial(_) => false,
    };
    let outcome = if !failed {
        outcome
    } else if stands_in {
        let why = describe(&outcome);
        let text = if cleanup == DelCleanup::Complete {
            // The record covered everything the ADD did, and the host has
            // undone what was left: the attachment is gone, whatever the
            // plugin said. A runtime retrying the DEL would only meet the
            // same failure.
            format!(
                "plugin {name:?} failed its DEL ({why}); the host removed what its ADD \
                 recorded, so the DEL succeeds"
            )
        } else {
            format!(
                "plugin {name:?} could not run its DEL ({why}); no record holds anything of \
                 this attachment's for it, so the DEL succeeds"
            )
        };
        eprintln!("wasmcni: {text}");
        caps.audit_event(
            "del.stand-in",
            &serde_json::json!({ "plugin": name, "reason": text }),
            &crate::audit::Outcome::Ok,
        );
        Ok(Output {
            stdout: Vec::new(),
            code: 0,
        })
    } else {
        // Kept for the retry: the plugin's own records.
        return match (outcome, cleanup) {
            (Err(e), DelCleanup::Partial(what)) if could_not_run => {
                let more = format!(
                    "wasmcni cannot stand in for this DEL: the ADD did what only the plugin's \
                     DEL takes back ({}); fix what keeps the plugin from running, then retry",
                    what.join("; ")
                );
                let details = match e.details.as_str() {
                    "" => more,
                    mine => format!("{mine}; {more}"),
                };
                Err(e.with_details(details))
            }
            (outcome, _) => outcome,
        };
    };
    match caps.drop_state() {
        failures if failures.is_empty() => outcome,
        failures => Err(CniError::new(
            Code::Io,
            format!(
                "wasmcni: the attachment's plugin state could not be removed: {}",
                failures.join("; ")
            ),
        )),
    }
}

/// A failed run's denials, for the runtime: added to the CNI error's
/// `details` (after any details of its own; the plugin's `code` and `msg`
/// stay), and logged on stderr. Each names the call and the field of the
/// plugin's own policy entry that would allow it, or the invariant no
/// policy waives ([`caps::Denial`]); a plugin with no entry at all is told
/// so. The host-side causes of calls the plugin saw fail as `other`
/// ([`caps::Ctx::host_errors`]: the path and errno of an unwritable state
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

/// The Tokio runtime a run enters (see [`invoke`]): current-thread, with
/// timers, no threads of its own.
pub(crate) fn current_thread_runtime() -> Result<tokio::runtime::Runtime, CniError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(internal)
}

/// A failed run's outcome, in a few words (for stderr).
fn describe(outcome: &Result<Output, CniError>) -> String {
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

/// Undoes the journal entries from `mark` on; if any step fails, the CNI
/// error says so instead of `outcome`.
pub(crate) fn undo_or_report(
    caps: &mut caps::Ctx,
    mark: usize,
    name: &str,
    outcome: Result<Output, CniError>,
) -> Result<Output, CniError> {
    let undo_failures = caps.undo_from(mark);
    if undo_failures.is_empty() {
        return outcome;
    }
    eprintln!(
        "wasmcni: undoing the failed ADD left {} change(s) in place: {}",
        undo_failures.len(),
        undo_failures.join("; ")
    );
    Err(CniError::new(
        Code::Internal,
        format!(
            "plugin {name:?} failed and {} of its changes could not be undone",
            undo_failures.len()
        ),
    )
    .with_details(undo_failures.join("; ")))
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

/// Loads `plugin`'s component (from its artifact when there is a valid
/// one) and checks its imports.
pub(crate) fn prepare(rt: &Runtime, plugin: &Plugin) -> Result<(Component, Vec<String>), CniError> {
    let what = match plugin.origin() {
        crate::plugins::Origin::File(path) => path.display().to_string(),
        crate::plugins::Origin::Bundled => format!("plugin {:?}", plugin.name()),
    };
    if let Some(why) = engine::not_a_component(&what, plugin.wasm()) {
        return Err(CniError::new(Code::PluginRefused, why));
    }
    let component = engine::load(&rt.engine, plugin, rt.cache.as_ref()).map_err(|e| {
        CniError::new(
            Code::PluginRefused,
            format!("plugin {:?} is not a valid component", plugin.name()),
        )
        .with_details(format!("{e:#}"))
    })?;
    let imports = imports(&rt.engine, &component);
    check_imports(&imports, plugin.name())?;
    Ok((component, imports))
}

pub(crate) fn internal(e: impl std::fmt::Display) -> CniError {
    CniError::new(Code::Internal, format!("wasmcni: {e}"))
}

/// Every import of `component`, by name.
pub fn imports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Refuses a component that imports anything outside the plugin world.
pub fn check_imports(imports: &[String], name: &str) -> Result<(), CniError> {
    let refused = refused_imports(imports);
    if refused.is_empty() {
        return Ok(());
    }
    Err(CniError::new(
        Code::PluginRefused,
        format!(
            "plugin {name:?} imports interfaces wasmcni does not provide: {}",
            refused.join(", ")
        ),
    ))
}

/// The imports that wasmcni refuses: those it does not provide.
pub fn refused_imports(imports: &[String]) -> Vec<String> {
    imports
        .iter()
        .filter(|name| !PROVIDED.iter().any(|(p, _)| name.starts_with(p)))
        .cloned()
        .collect()
}

struct HasIo;
impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

type AddFn = fn(&mut Linker<StoreData>) -> wasmtime::Result<()>;

/// Every interface a plugin may import (by prefix of the import name), and
/// how the host provides it. Anything else — `wasi:sockets`, `wasi:http`,
/// `wasi:filesystem` (a plugin has no files: no preopens, no state
/// directory; IPAM state will be a capability of its own) — is refused
/// before instantiation.
const PROVIDED: &[(&str, AddFn)] = {
    type T = StoreData;
    &[
        // wasmcni's own interfaces, each only when imported: the linker
        // is built for every call, and most plugins import a few.
        ("wasmcni:plugin/types@", caps::add_types),
        ("wasmcni:plugin/netns@", caps::add_netns),
        ("wasmcni:plugin/link@", caps::add_link),
        ("wasmcni:plugin/address@", caps::add_address),
        ("wasmcni:plugin/route@", caps::add_route),
        ("wasmcni:plugin/sysctl@", caps::add_sysctl),
        ("wasmcni:plugin/traffic-control@", caps::add_traffic_control),
        ("wasmcni:plugin/firewall@", caps::add_firewall),
        ("wasmcni:plugin/ipam-store@", caps::add_ipam_store),
        ("wasmcni:plugin/delegate@", caps::add_delegate),
        (
            "wasmcni:plugin/attachment-state@",
            caps::add_attachment_state,
        ),
        ("wasi:io/error@0.2.", |l| {
            wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<T, HasIo>(l, |t| {
                &mut t.table
            })
        }),
        ("wasi:io/poll@0.2.", |l| {
            sync::io::poll::add_to_linker::<T, HasIo>(l, |t| &mut t.table)
        }),
        ("wasi:io/streams@0.2.", |l| {
            sync::io::streams::add_to_linker::<T, HasIo>(l, |t| &mut t.table)
        }),
        ("wasi:clocks/wall-clock@0.2.", |l| {
            clocks::wall_clock::add_to_linker::<T, WasiClocks>(l, T::clocks)
        }),
        ("wasi:clocks/monotonic-clock@0.2.", |l| {
            clocks::monotonic_clock::add_to_linker::<T, HasDeadlineClock>(l, |t| {
                let deadline = t.deadline;
                DeadlineClock {
                    inner: t.clocks(),
                    deadline,
                }
            })
        }),
        ("wasi:random/random@0.2.", |l| {
            random::random::add_to_linker::<T, WasiRandom>(l, |t| t.wasi.random())
        }),
        ("wasi:random/insecure@0.2.", |l| {
            random::insecure::add_to_linker::<T, WasiRandom>(l, |t| t.wasi.random())
        }),
        ("wasi:random/insecure-seed@0.2.", |l| {
            random::insecure_seed::add_to_linker::<T, WasiRandom>(l, |t| t.wasi.random())
        }),
        ("wasi:cli/exit@0.2.", |l| {
            cli::exit::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/environment@0.2.", |l| {
            cli::environment::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/stdin@0.2.", |l| {
            cli::stdin::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/stdout@0.2.", |l| {
            cli::stdout::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/stderr@0.2.", |l| {
            cli::stderr::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/terminal-input@0.2.", |l| {
            cli::terminal_input::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/terminal-output@0.2.", |l| {
            cli::terminal_output::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/terminal-stdin@0.2.", |l| {
            cli::terminal_stdin::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/terminal-stdout@0.2.", |l| {
            cli::terminal_stdout::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
        ("wasi:cli/terminal-stderr@0.2.", |l| {
            cli::terminal_stderr::add_to_linker::<T, WasiCli>(l, T::cli)
        }),
    ]
};

/// A linker with exactly the provided interfaces that `imports` names
/// (building the whole WASI surface for every call costs start-up time).
fn linker(engine: &Engine, imports: &[String]) -> wasmtime::Result<Linker<StoreData>> {
    let mut l = Linker::<StoreData>::new(engine);
    for (prefix, add) in PROVIDED {
        if imports.iter().any(|i| i.starts_with(prefix)) {
            add(&mut l)?;
        }
    }
    Ok(l)
}

/// Runs a prepared component once with `caps` as its capability context,
/// `env` and `stdin`; returns the outcome and the context (whose journal
/// holds the inverses of what it did). The caller has armed the deadline
/// and entered a Tokio runtime.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    rt: &Runtime,
    component: &Component,
    imports: &[String],
    plugin: &Plugin,
    env: &[(String, String)],
    stdin: &[u8],
    limits: &Limits,
    caps: caps::Ctx,
) -> (Result<Output, CniError>, caps::Ctx) {
    let stdout = MemoryOutputPipe::new(MAX_STDOUT);
    let wasi = WasiCtxBuilder::new()
        .envs(env)
        .arg(plugin.name())
        .stdin(MemoryInputPipe::new(stdin.to_vec()))
        .stdout(stdout.clone())
        .inherit_stderr()
        .allow_blocking_current_thread(true)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let data = StoreData {
        wasi,
        table: ResourceTable::new(),
        caps,
        limiter: Limiter::new(limits.memory_cap),
        deadline: rt.deadline,
    };
    let mut store = Store::new(&rt.engine, data);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_trap();
    let t0 = std::time::Instant::now();
    let result = linker(&rt.engine, imports).and_then(|linker| {
        let r = sync::Command::instantiate(&mut store, component, &linker)
            .and_then(|cmd| cmd.wasi_cli_run().call_run(&mut store));
        // As below: no teardown in a process about to exit.
        std::mem::forget(linker);
        r
    });
    log::debug!("timing: link + instantiate + run {:?}", t0.elapsed());
    let hit_memory_cap = store.data().limiter.cap_hit();
    let out = stdout.contents().to_vec();
    let outcome = outcome(result, out, plugin, limits, hit_memory_cap);
    // The store's tables and WASI context go with it; its 4 GiB
    // reservation needs no unmapping in a process that is about to exit
    // (a delegate's store is small beside the top-level run).
    let caps = store.into_data().caps;
    (outcome, caps)
}

/// The CNI outcome of a finished run.
fn outcome(
    result: wasmtime::Result<Result<(), ()>>,
    stdout: Vec<u8>,
    plugin: &Plugin,
    limits: &Limits,
    hit_memory_cap: bool,
) -> Result<Output, CniError> {
    let deadline = limits.deadline;
    if stdout.len() >= MAX_STDOUT {
        return Err(CniError::new(
            Code::PluginTrapped,
            format!("plugin {:?} wrote more than 1 MiB to stdout", plugin.name()),
        ));
    }
    match result {
        Ok(Ok(())) => Ok(Output { stdout, code: 0 }),
        Ok(Err(())) => Ok(Output { stdout, code: 1 }),
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                return Ok(Output {
                    stdout,
                    code: exit.0,
                });
            }
            let name = plugin.name();
            if let Some(b) = e.downcast_ref::<BudgetExceeded>() {
                return Err(CniError::new(
                    Code::LimitExceeded,
                    format!("plugin {name:?} exceeded its budget of {} host calls", b.0),
                ));
            }
            if hit_memory_cap {
                return Err(CniError::new(
                    Code::MemoryExceeded,
                    format!(
                        "plugin {name:?} exceeded its memory cap of {} MiB",
                        limits.memory_cap >> 20
                    ),
                ));
            }
            if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
                return Err(CniError::new(
                    Code::DeadlineExceeded,
                    format!(
                        "plugin {name:?} exceeded its deadline of {} ms",
                        deadline.as_millis()
                    ),
                ));
            }
            Err(
                CniError::new(Code::PluginTrapped, format!("plugin {name:?} trapped"))
                    .with_details(format!("{e:#}")),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every interface the plugin world imports is one the runner can
    /// provide (a new capability interface needs its `PROVIDED` entry, or
    /// every plugin importing it would be refused).
    #[test]
    fn every_interface_of_the_world_is_provided() {
        let world = include_str!("../../../wit/world.wit");
        let names: Vec<&str> = world
            .lines()
            .filter_map(|l| l.trim().strip_prefix("import "))
            .map(|l| l.trim_end_matches(';').trim())
            .collect();
        assert!(names.len() >= 10, "{names:?}");
        for name in names.iter().chain(["types"].iter()) {
            let import = format!("wasmcni:plugin/{name}@0.1.0");
            assert!(
                PROVIDED.iter().any(|(p, _)| import.starts_with(p)),
                "{import} has no PROVIDED entry"
            );
        }
    }

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

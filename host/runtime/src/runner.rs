//! One CNI invocation: what a runtime sees when it executes a plugin.
//!
//! Reads the `CNI_*` environment and the config on stdin, verifies
//! `CNI_NETNS`, runs the plugin component ([`crate::exec`]) in a fresh
//! store with a deadline and a memory cap, and makes the plugin's stdout
//! and exit code wasmcni's. Failures of wasmcni's own (unknown plugin, bad
//! namespace, trap, deadline, memory cap) become a CNI error on stdout and
//! exit 1. `wasmcni-chain` is the chain runner's ([`crate::chain`]).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;

use cni_spec::Command;

use crate::caps;
use crate::cni_error::{version_for_errors, CniError, Code};
use crate::exec::{self, del_without_plugin, finish, finish_del, Untrusted};
use crate::plugins::{self, Plugin};
use crate::policy::Policy;
use crate::session::{
    self, cni_env, container_netns, explain_denials, lookup, lookup_error, Output, Resolved,
    MAX_STDIN,
};

pub use crate::exec::{imports, refused_imports};
pub use crate::limits::{DEFAULT_DEADLINE, DEFAULT_MEMORY_CAP};

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
    log::debug!("timing: CPU time before main {:?}", cpu_time());
    let t0 = std::time::Instant::now();
    let code = run_main(target, policy_file);
    log::debug!(
        "timing: main {:?}, CPU time at its end {:?}",
        t0.elapsed(),
        cpu_time()
    );
    code
}

/// The process's CPU time so far (user and system: the kernel's exec and
/// page faults count), for the debug log's timings.
fn cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// [`main`]'s work.
fn run_main(target: Target<'_>, policy_file: Option<&Path>) -> i32 {
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
    let command = session::command(&env);
    let t0 = std::time::Instant::now();
    let policy = Policy::load(policy_file);
    log::debug!("timing: policy {:?}", t0.elapsed());
    let loaded = policy
        .map_err(|e| CniError::new(Code::PolicyInvalid, e.to_string()))
        .and_then(|policy| {
            if matches!(target, Target::Name(n) if n == crate::chain::NAME) {
                return Ok(Loaded::Chain(policy));
            }
            load(&target, policy).map(Loaded::Plugin)
        });
    match loaded {
        Ok(Loaded::Chain(policy)) => crate::chain::invoke(stdin, env, command, policy),
        Ok(Loaded::Plugin(p)) => run_loaded(*p, stdin, env, command),
        Err(why) if command == Some(Command::Del) => match target_name(&target) {
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
    resolved: Resolved,
}

/// Finds `target` and resolves and checks its policy entry.
fn load(target: &Target<'_>, policy: Policy) -> Result<Box<LoadedPlugin>, CniError> {
    let plugin = match target {
        Target::Name(n) => plugins::find(n),
        Target::Path(p) => Plugin::from_path(p),
    }
    .map_err(lookup_error)?;
    let resolved = Resolved::of(&policy, &plugin)?;
    Ok(Box::new(LoadedPlugin {
        plugin,
        policy,
        resolved,
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

/// Runs a loaded plugin for the runtime.
fn run_loaded(
    loaded: LoadedPlugin,
    stdin: &[u8],
    env: Vec<(String, String)>,
    command: Option<Command>,
) -> Result<Output, CniError> {
    let LoadedPlugin {
        plugin,
        policy,
        resolved,
    } = loaded;
    let t0 = std::time::Instant::now();
    let container = container_netns(&env, command)?;
    let t1 = std::time::Instant::now();
    let rt = exec::runtime(Some(&plugin), policy, env, t0, resolved.limits.deadline)?;
    log::debug!("timing: netns {:?}, engine {:?}", t1 - t0, t1.elapsed());
    exec::in_session(|| {
        let ran = exec::run_plugin(
            &rt,
            &plugin,
            &resolved,
            // The audit records name `CNI_COMMAND` as given.
            lookup(&rt.env, "CNI_COMMAND").unwrap_or(""),
            &rt.env,
            stdin,
            Some(resolved.limits.deadline),
            |grant, audit| {
                let mut caps = caps::Ctx::new(caps::CtxParams {
                    grant,
                    container,
                    audit,
                    attachment: crate::attachment::Attachment::from_invocation(
                        &rt.env, stdin, command,
                    ),
                    command,
                    runtime: Some(rt.clone()),
                    core: Some(&exec::CORE),
                });
                exec::adopt_records(&mut caps, command, Untrusted::Refuse)?;
                Ok(caps)
            },
        );
        let (outcome, mut caps) = match ran {
            Ok(ran) => ran,
            Err(why) if command == Some(Command::Del) => {
                return del_without_plugin(plugin.name(), stdin, &rt.env, why)
            }
            Err(why) => return Err(why),
        };
        let outcome =
            if command == Some(Command::Del) && !resolved.has_entry && !caps.denials().is_empty() {
                // A plugin with no policy entry has no authority: a DEL it
                // failed for want of one is a DEL it could not run (its entry
                // may have been removed since its ADD); the host stands in as
                // for a broken entry.
                finish_del(outcome, &mut caps, plugin.name(), true)
            } else {
                finish(command, outcome, &mut caps, plugin.name())
            };
        let outcome = explain_denials(
            outcome,
            caps.denials(),
            &caps.host_errors(),
            plugin.name(),
            resolved.has_entry,
        );
        // The process exits right after this.
        std::mem::forget(caps);
        outcome
    })?
}

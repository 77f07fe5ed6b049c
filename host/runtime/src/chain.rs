//! `wasmcni-chain`: a whole plugin chain run as one plugin, in one process,
//! with one journal.
//!
//! A conflist whose single plugin is `{"type": "wasmcni-chain", "plugins":
//! [ ... ]}` hands the runtime's call to wasmcni once; wasmcni runs the
//! listed plugins in-process, each with the config libcni would have given
//! it ([`Conflist::plugin_config`]: the list's `name` and `cniVersion`, the
//! previous result as `prevResult`, and only the runtime's capability
//! arguments it declares itself), under its own policy entry. Their host
//! calls join one journal:
//! - ADD runs them in order; if any fails, every change of the whole chain
//!   is undone before the runtime sees the error, which names the member.
//!   A successful ADD leaves one attachment record for the chain.
//! - DEL runs every member's DEL in reverse order (all of them, even after
//!   one fails), each with the runtime's `prevResult`, then the host removes
//!   what the record still lists ([`crate::caps::Ctx::finish_del`]).
//! - CHECK and STATUS run in order and stop at the first failure; GC runs
//!   every member, then the host's GC of records and state.
//! - VERSION answers the CNI versions the runner speaks (libcni asks it
//!   with no members on stdin).
//!
//! The chain entry must declare in its `capabilities` every capability
//! argument its members use (libcni gives a plugin only those it
//! declares); each member then receives the ones it declares.

use cni_spec::Command;
use serde_json::{json, Map, Value};

use crate::audit::{Audit, Identity};
use crate::caps;
use crate::cni_error::{CniError, Code};
use crate::conflist::Conflist;
use crate::exec::{self, Untrusted};
use crate::limits::Limits;
use crate::plugins::{self, Plugin};
use crate::policy::{Grant, Policy};
use crate::session::{container_netns, internal, lookup, with_details, Output};

/// The plugin type (and the name of the link to wasmcni) of the chain
/// runner.
pub const NAME: &str = "wasmcni-chain";

/// The CNI versions the chain runner speaks (libcni's VERSION).
const SUPPORTED: &[&str] = &cni_spec::SUPPORTED_VERSIONS;

/// The most members one chain may have.
const MAX_MEMBERS: usize = 16;

/// The keys of the chain's config that every member receives as they are
/// (spec 1.1 GC's attachment lists).
const PASSED: &[&str] = &["cni.dev/valid-attachments", "cni.dev/attachments"];

fn invalid(msg: String) -> CniError {
    CniError::new(Code::InvalidConfig, msg)
}

/// The chain's members as a conflist, and each member's plugin.
fn parse(stdin: &[u8]) -> Result<(Value, Conflist, Vec<Plugin>), CniError> {
    let conf: Value = serde_json::from_slice(stdin)
        .map_err(|e| CniError::new(Code::Decode, format!("the network config is not JSON: {e}")))?;
    let list = Conflist::parse(&conf).map_err(|e| invalid(format!("{NAME}: {e:#}")))?;
    if list.plugins.len() > MAX_MEMBERS {
        return Err(invalid(format!(
            "{NAME}: \"plugins\" has {} members (at most {MAX_MEMBERS})",
            list.plugins.len()
        )));
    }
    let mut members = Vec::new();
    for i in 0..list.plugins.len() {
        let ty = list.plugin_type(i);
        if ty == NAME {
            return Err(invalid(format!(
                "{NAME}: plugins[{i}] is a chain itself (chains do not nest)"
            )));
        }
        let plugin = plugins::find(ty).map_err(|e| {
            invalid(format!(
                "{NAME}: plugins[{i}].type {ty:?} is not a plugin wasmcni can run: {e}"
            ))
        })?;
        members.push(plugin);
    }
    Ok((conf, list, members))
}

/// A chain ready to run.
struct Prepared {
    conf: Value,
    list: Conflist,
    members: Vec<Plugin>,
    /// One deadline for the process: the sum of the members' (each would
    /// have had its own process).
    deadline: std::time::Duration,
    /// Whose plugin state the attachment's DEL and GC remove: the
    /// members' and their delegates'.
    delegates: Vec<String>,
}

/// The chain's config, list and members, each member's policy entry
/// resolved.
fn prepare(stdin: &[u8], policy: &Policy) -> Result<Prepared, CniError> {
    let (conf, list, members) = parse(stdin)?;
    let mut deadline = std::time::Duration::ZERO;
    let mut delegates = Vec::new();
    for m in &members {
        let bundled = *m.origin() == plugins::Origin::Bundled;
        let entry = policy
            .resolve(m.name(), bundled)
            .map_err(|e| CniError::new(Code::PolicyInvalid, e.to_string()))?;
        deadline = deadline.saturating_add(Limits::resolve(&entry)?.deadline);
        delegates.push(m.name().to_owned());
        delegates.extend(entry.grant().delegates);
    }
    Ok(Prepared {
        conf,
        list,
        members,
        deadline,
        delegates,
    })
}

/// Checks that the chain config `stdin` could run: every member is a
/// plugin wasmcni can run, and its policy entry resolves (what the chain's
/// ADD checks before it runs anything).
pub fn check(stdin: &[u8], policy: &Policy) -> Result<(), CniError> {
    prepare(stdin, policy).map(|_| ())
}

/// Runs the chain for the runtime: `stdin` is the chain's config, `env`
/// the `CNI_*` environment, `command` the command its `CNI_COMMAND` names.
pub fn invoke(
    stdin: &[u8],
    env: Vec<(String, String)>,
    command: Option<Command>,
    policy: Policy,
) -> Result<Output, CniError> {
    // libcni asks VERSION with only `cniVersion` on stdin: the versions
    // wasmcni's chain runner speaks (each member checks its own config's).
    if command == Some(Command::Version) {
        let version = serde_json::from_slice::<Value>(stdin)
            .ok()
            .and_then(|v| {
                v.get("cniVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| cni_spec::LATEST.to_owned());
        let mut out = serde_json::to_vec(&json!({
            "cniVersion": version,
            "supportedVersions": SUPPORTED,
        }))
        .map_err(internal)?;
        out.push(b'\n');
        return Ok(Output {
            stdout: out,
            code: 0,
        });
    }
    // A chain whose members cannot all be found and resolved cannot run;
    // its DEL gets the host's record-driven cleanup all the same, as one
    // plugin's does ([`exec::del_without_plugin`]).
    let Prepared {
        conf,
        list,
        members,
        deadline,
        delegates,
    } = match prepare(stdin, &policy) {
        Ok(prepared) => prepared,
        Err(why) if command == Some(Command::Del) => {
            return exec::del_without_plugin(NAME, stdin, &env, why)
        }
        Err(why) => return Err(why),
    };
    let t0 = std::time::Instant::now();
    let container = container_netns(&env, command)?;
    let rt = exec::runtime(members.first(), policy, env, t0, deadline)?;
    let var = |k: &str| lookup(&rt.env, k).unwrap_or("").to_owned();
    let identity = Identity {
        plugin: NAME.to_owned(),
        sha256: String::new(),
        container_id: var("CNI_CONTAINERID"),
        ifname: var("CNI_IFNAME"),
        // As given.
        command: var("CNI_COMMAND"),
    };
    let mut caps = caps::Ctx::new(caps::CtxParams {
        // The chain itself has no authority: only its members, each under
        // its own entry.
        grant: Grant {
            delegates,
            ..Grant::default()
        },
        container,
        audit: Audit::new(identity, rt.sink.clone()),
        attachment: crate::attachment::Attachment::from_invocation(&rt.env, stdin, command),
        command,
        runtime: Some(rt.clone()),
        core: Some(&exec::CORE),
    });
    exec::adopt_records(&mut caps, command, Untrusted::Ignore)?;
    // The members load in the session: the chain's one deadline covers
    // them (a nested run's store made after it passed traps at once).
    crate::clock::arm_deadline(&rt.engine, deadline);
    exec::in_session(|| {
        let outcome = match command {
            Some(command) => run(command, &conf, &list, &members, &mut caps),
            None => Err(not_run(&var("CNI_COMMAND"))),
        };
        let outcome = exec::finish(command, outcome, &mut caps, NAME);
        // As for one plugin: the process exits right after this.
        std::mem::forget(caps);
        outcome
    })?
}

/// The members' runs for `command`; the chain's outcome before the host's
/// own part ([`exec::finish`]).
fn run(
    command: Command,
    conf: &Value,
    list: &Conflist,
    members: &[Plugin],
    caps: &mut caps::Ctx,
) -> Result<Output, CniError> {
    let cap_args = conf
        .get("runtimeConfig")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let prev = conf.get("prevResult");
    let config = |i: usize, prev: Option<&Value>| -> Vec<u8> {
        let mut c: Map<String, Value> = list.plugin_config(i, prev, &cap_args);
        for k in PASSED {
            if let Some(v) = conf.get(*k) {
                c.insert((*k).to_owned(), v.clone());
            }
        }
        serde_json::to_vec(&c).unwrap_or_default()
    };
    let failed = |o: &Result<Output, CniError>| !matches!(o, Ok(Output { code: 0, .. }));
    let name = |i: usize| format!("plugins[{i}] ({})", members[i].name());
    match command {
        Command::Add => {
            let mut result: Option<Value> = prev.cloned();
            let mut last = Output {
                stdout: Vec::new(),
                code: 0,
            };
            for (i, m) in members.iter().enumerate() {
                let out = caps.run_member(m, Command::Add, &config(i, result.as_ref()));
                if failed(&out) {
                    eprintln!(
                        "wasmcni: {NAME}: {} failed its ADD; the whole chain is undone",
                        name(i)
                    );
                    return with_member(out, &name(i));
                }
                let out = out?;
                let parsed: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
                    CniError::new(
                        Code::Decode,
                        format!("{NAME}: {} printed a result that is not JSON: {e}", name(i)),
                    )
                })?;
                result = Some(parsed);
                last = out;
            }
            Ok(last)
        }
        Command::Del => {
            let mut first_failure = None;
            for i in (0..members.len()).rev() {
                let out = caps.run_member(&members[i], Command::Del, &config(i, prev));
                if failed(&out) && first_failure.is_none() {
                    first_failure = Some(with_member(out, &name(i)));
                }
            }
            first_failure.unwrap_or(Ok(Output {
                stdout: Vec::new(),
                code: 0,
            }))
        }
        Command::Check | Command::Status => {
            for (i, m) in members.iter().enumerate() {
                let out = caps.run_member(m, command, &config(i, prev));
                if failed(&out) {
                    return with_member(out, &name(i));
                }
            }
            Ok(Output {
                stdout: Vec::new(),
                code: 0,
            })
        }
        Command::Gc => {
            let mut first_failure = None;
            for (i, m) in members.iter().enumerate() {
                let out = caps.run_member(m, Command::Gc, &config(i, None));
                if failed(&out) && first_failure.is_none() {
                    first_failure = Some(with_member(out, &name(i)));
                }
            }
            first_failure.unwrap_or(Ok(Output {
                stdout: Vec::new(),
                code: 0,
            }))
        }
        // Answered before the members run ([`invoke`]).
        Command::Version => Err(not_run(command.as_str())),
    }
}

/// A `CNI_COMMAND` (`command`, as given) the chain does not run.
fn not_run(command: &str) -> CniError {
    CniError::new(
        Code::InvalidEnv,
        format!("CNI_COMMAND {command:?} is not one {NAME} runs"),
    )
}

/// A member's failure as the chain's: its CNI error, with `details` saying
/// which member it was.
fn with_member(out: Result<Output, CniError>, member: &str) -> Result<Output, CniError> {
    let note = |d: &str| {
        if d.is_empty() {
            format!("{NAME}: {member} failed")
        } else {
            format!("{d}; {NAME}: {member} failed")
        }
    };
    match out {
        Ok(Output { stdout, code }) => {
            let stdout = with_details(&stdout, note).unwrap_or(stdout);
            Ok(Output { stdout, code })
        }
        Err(mut e) => {
            e.details = note(&e.details);
            Err(e)
        }
    }
}

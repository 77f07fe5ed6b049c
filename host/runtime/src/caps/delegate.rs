//! `wasmcni:plugin/delegate`: a plugin runs another plugin (its IPAM), as
//! the reference plugins do with `invoke.DelegateAdd`.
//!
//! A wasm delegate runs in this process, in a fresh store, under its own
//! policy entry and memory cap, within the process's one deadline (never
//! re-armed). Its capability calls join the caller's journal: if the
//! caller's ADD fails later, the delegate's changes are undone with the
//! caller's; if the delegate itself fails, its own changes are undone
//! before the call returns. A native delegate (from `CNI_PATH`, only where
//! the policy lists it) is executed as the reference does; its ADD is
//! undone by running its DEL.

use super::ctx::{Inverse, Uncovered};
use super::row::*;
use crate::record::Owned;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::args::Size;
use super::bindings::wasmcni::plugin::delegate::{DelegateError, Host};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::CapError;
use super::ctx::{Command, Ctx, CtxParams, MakeCtx, StoreData};
use crate::cni_error::{CniError, Code};
use crate::plugins::{self, LookupError};
use crate::session::{explain_denials, Output, Resolved, Runtime};

/// How deep delegates may nest (a plugin's IPAM's IPAM ...).
const MAX_DEPTH: u32 = 4;

/// The most a native delegate may write to stdout.
const MAX_NATIVE_STDOUT: u64 = 1 << 20;

/// The commands a plugin may delegate.
const COMMANDS: &[Command] = &[
    Command::Add,
    Command::Del,
    Command::Check,
    Command::Gc,
    Command::Status,
];

impl NativeCall {
    /// Runs the delegate's DEL (the journal's undo of its ADD).
    pub fn run_del(&self) -> Result<(), CapError> {
        let env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|(k, v)| {
                let v = if k == "CNI_COMMAND" {
                    Command::Del.as_str()
                } else {
                    v.as_str()
                };
                (k.clone(), v.to_owned())
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        match run_native(&self.path, &env, &self.config, deadline) {
            Ok((0, _)) => Ok(()),
            Ok(_) => Err(CapError::Kernel(libc::EIO)),
            Err(e) => Err(CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
}

/// Runs `path` with exactly `env` and `stdin`, killing it at `deadline`;
/// returns its exit code and stdout.
fn run_native(
    path: &Path,
    env: &[(String, String)],
    stdin: &[u8],
    deadline: Instant,
) -> std::io::Result<(i32, Vec<u8>)> {
    // What it changes is read afresh afterwards, not from a kept link
    // answer (this thread reads nothing until it returns).
    crate::netlink::note_change();
    let mut child = Process::new(path)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut input = child.stdin.take();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(i) = input.as_mut() {
            let _ = i.write_all(&data);
        }
    });
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(MAX_NATIVE_STDOUT).read_to_end(&mut buf);
        }
        buf
    });
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = writer.join();
    let stdout = reader.join().unwrap_or_default();
    Ok((status.code().unwrap_or(1), stdout))
}

/// The executable `name` in one of the `CNI_PATH` directories.
fn find_native(env: &[(String, String)], name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let cni_path = env.iter().find(|(k, _)| k == "CNI_PATH")?.1.clone();
    cni_path
        .split(':')
        .filter(|d| Path::new(d).is_absolute())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The addresses an ADD result gives the attachment (`ips[].address` in
/// 0.3.0 and later, `ip4.ip` / `ip6.ip` before).
fn result_addresses(stdout: &[u8]) -> Vec<IpAddr> {
    let v: Value = serde_json::from_slice(stdout).unwrap_or(Value::Null);
    let cidr = |c: Option<&Value>| {
        c.and_then(Value::as_str)
            .and_then(|s| s.split('/').next())
            .and_then(|ip| ip.parse::<IpAddr>().ok())
    };
    let mut out: Vec<IpAddr> = v
        .get("ips")
        .and_then(Value::as_array)
        .map(|ips| {
            ips.iter()
                .filter_map(|ip| cidr(ip.get("address")))
                .collect()
        })
        .unwrap_or_default();
    for old in ["ip4", "ip6"] {
        out.extend(cidr(v.get(old).and_then(|o| o.get("ip"))));
    }
    out
}

/// The environment of a delegate: the process's `CNI_*` variables with
/// `CNI_COMMAND` replaced.
fn delegate_env(env: &[(String, String)], command: Command) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k != "CNI_COMMAND")
        .cloned()
        .collect();
    out.push(("CNI_COMMAND".into(), command.as_str().into()));
    out
}

impl Ctx {
    /// `CNI_COMMAND` as the runtime gave it, for messages: the command's
    /// name or, for one wasmcni does not know (only the plugin the runtime
    /// executed runs with one), the runtime's text.
    pub(super) fn command_text(&self) -> &str {
        match self.command {
            Some(command) => command.as_str(),
            None => self
                .runtime
                .as_ref()
                .and_then(|rt| crate::session::lookup(&rt.env, "CNI_COMMAND"))
                .unwrap_or(""),
        }
    }

    /// Runs delegate `name` with `command` and `config`: its stdout, or
    /// (`Err` inside) the CNI error it printed.
    fn delegate(
        &mut self,
        name: &str,
        command: &str,
        config: &[u8],
    ) -> Result<Result<String, String>, CapError> {
        let command = match Command::parse(command) {
            Ok(c) if plugins::valid_name(name) && COMMANDS.contains(&c) => c,
            _ => return Err(ErrorCode::InvalidArgument.into()),
        };
        self.view().delegated_command(command)?;
        if self.depth + 1 > MAX_DEPTH {
            return Err(CapError::Limit(format!(
                "delegates nest deeper than {MAX_DEPTH}"
            )));
        }
        let rt = self
            .runtime
            .clone()
            .ok_or(CapError::Code(ErrorCode::NotSupported))?;
        let (wasm_ok, native_ok) = self.view().delegate(name)?;
        if wasm_ok {
            match plugins::find(name) {
                Ok(plugin) => return self.delegate_wasm(&rt, &plugin, command, config),
                Err(LookupError::NotFound { .. }) if native_ok => {}
                Err(LookupError::NotFound { .. }) => return Err(ErrorCode::NotFound.into()),
                Err(_) => return Err(ErrorCode::Other.into()),
            }
        }
        self.delegate_native(&rt, name, command, config)
    }

    fn delegate_wasm(
        &mut self,
        rt: &std::sync::Arc<Runtime>,
        plugin: &plugins::Plugin,
        command: Command,
        config: &[u8],
    ) -> Result<Result<String, String>, CapError> {
        let version = crate::cni_error::version_for_errors(config);
        let outcome = self.run_nested(rt, plugin, command, config, false)?;
        match outcome {
            Ok(Output { code: 0, stdout }) => Ok(Ok(String::from_utf8_lossy(&stdout).into_owned())),
            Ok(Output { stdout, .. }) => Ok(Err(String::from_utf8_lossy(&stdout).into_owned())),
            Err(e) => Ok(Err(e.to_json(&version))),
        }
    }

    /// Runs member `plugin` of a chain (`wasmcni-chain`) with `command` and
    /// the `config` the host built for it: as if the runtime had executed
    /// it (its own policy entry, its config's prevResult and port mappings
    /// trusted as the runtime's), in this process, its changes joining the
    /// chain's journal.
    pub fn run_member(
        &mut self,
        plugin: &plugins::Plugin,
        command: Command,
        config: &[u8],
    ) -> Result<Output, CniError> {
        let rt = self
            .runtime
            .clone()
            .ok_or_else(|| CniError::new(Code::Internal, "a chain member run with no runtime"))?;
        self.run_nested(&rt, plugin, command, config, true)
            .map_err(|e| {
                CniError::new(
                    Code::Internal,
                    format!("running chain member {:?}: {e:?}", plugin.name()),
                )
            })?
    }

    /// Runs wasm `plugin` in a fresh store under its own policy entry
    /// (through the run core, [`RunPlugin`]), its capability calls joining
    /// this journal; a failed ADD's own changes are undone before it
    /// returns. A `member` of a chain acts for the attachment its config
    /// (built by the host) describes; a delegate keeps its runtime's
    /// prevResult, port mappings, devices and VLANs (its config is the
    /// calling plugin's to write).
    fn run_nested(
        &mut self,
        rt: &std::sync::Arc<Runtime>,
        plugin: &plugins::Plugin,
        command: Command,
        config: &[u8],
        member: bool,
    ) -> Result<Result<Output, CniError>, CapError> {
        let core = self.core.ok_or(CapError::Code(ErrorCode::NotSupported))?;
        let resolved = match Resolved::of(&rt.policy, plugin) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let env = delegate_env(&rt.env, command);
        let container = match &self.container {
            Some(ns) => Some(ns.try_clone()?),
            None => None,
        };
        let mut on_runtime_word = false;
        let mut mark = 0;
        let mut earlier = None;
        let parent = &mut *self;
        // Made only once the plugin is loaded: what the child takes from
        // its caller (the attachment's addresses, the journal) stays the
        // caller's if it never runs.
        let make: MakeCtx<'_> = Box::new(|grant, audit| {
            // A delegate run with the runtime's own config acts on the
            // runtime's word: its result is the attachment's (S13).
            let (attachment, own_config) = parent.nested_attachment(&env, config, command, member);
            on_runtime_word = !member && own_config;
            let mut child = Ctx::new(CtxParams {
                grant,
                container,
                audit,
                attachment,
                command: Some(command),
                runtime: Some(rt.clone()),
                core: Some(core),
            });
            child.depth = parent.depth + 1;
            child.state_owner = parent.state_owner.clone();
            child.record_plugin = parent.record_plugin.clone();
            // The peer the invocation fixed, or the child's now, before it
            // runs (breach 1 of issue 49).
            child.adopted = parent.adopted.clone();
            child.fix_adopted_peer();
            child.journal = std::mem::take(&mut parent.journal);
            child.stores = std::mem::take(&mut parent.stores);
            // A delegate in a namespace whose table lock its caller holds
            // has it (a second open file would wait for the caller's lock).
            child.table_locks = std::mem::take(&mut parent.table_locks);
            mark = child.journal.len();
            // A member may act only on the links it (or its delegates)
            // made, not on those of the members before it: it starts with
            // no created links, and its own join the chain's after it.
            earlier = member.then(|| child.journal.take_created());
            Ok(child)
        });
        let (outcome, mut child) =
            match core.run(rt, plugin, &resolved, command.as_str(), &env, config, make) {
                Ok(ran) => ran,
                Err(e) => return Ok(Err(e)),
            };
        let failed = !matches!(outcome, Ok(Output { code: 0, .. }));
        let outcome = if failed && command == Command::Add && child.journal.len() > mark {
            child.undo_or_report(mark, plugin.name(), outcome)
        } else {
            outcome
        };
        // Its denials explain its failure, and the caller's if that follows.
        let outcome = explain_denials(
            outcome,
            child.denials(),
            &child.host_errors(),
            plugin.name(),
            resolved.has_entry,
        );
        for d in child.denials.drain(..) {
            self.note_denial(d);
        }
        for e in child.host_errors.drain(..) {
            self.note_host_error(e);
        }
        if let Some(earlier) = earlier {
            child.journal.restore_created(earlier);
        }
        // Give back what the delegate added to the invocation's state.
        self.journal = std::mem::take(&mut child.journal);
        self.stores = std::mem::take(&mut child.stores);
        // Its table locks are held to the invocation's end, as the
        // caller's.
        self.table_locks = std::mem::take(&mut child.table_locks);
        self.attachment.addresses = std::mem::take(&mut child.attachment.addresses);
        self.merge_adopted(child.adopted.take());
        // An IPAM delegate's result is the attachment's addresses if it ran
        // on the runtime's config; a chain member's reaches the next
        // member only as its prevResult, which names no address the host
        // has not seen owned.
        if let Ok(Output { code: 0, stdout }) = &outcome {
            if command == Command::Add && on_runtime_word {
                self.own_addresses(result_addresses(stdout));
            }
        }
        Ok(outcome)
    }

    fn delegate_native(
        &mut self,
        rt: &Runtime,
        name: &str,
        command: Command,
        config: &[u8],
    ) -> Result<Result<String, String>, CapError> {
        let mut env = delegate_env(&rt.env, command);
        let path = find_native(&env, name).ok_or(CapError::Code(ErrorCode::NotFound))?;
        if let Some(p) = &crate::config::get().path {
            env.push(("PATH".into(), p.clone()));
        }
        // The runtime's trace context, as libcni hands it to plugins.
        env.extend(
            crate::config::get()
                .trace_context
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone())),
        );
        let (code, stdout) = run_native(&path, &env, config, rt.deadline)?;
        let text = String::from_utf8_lossy(&stdout).into_owned();
        if code != 0 {
            return Ok(Err(text));
        }
        if command == Command::Add {
            if self.runs_on_runtime_word(config) {
                self.own_addresses(result_addresses(&stdout));
            }
            self.journal.record(NativeCall {
                path,
                env,
                config: config.to_vec(),
            });
        }
        Ok(Ok(text))
    }
}

impl Host for StoreData {
    fn run(
        &mut self,
        plugin_type: String,
        command: String,
        config: String,
    ) -> wasmtime::Result<Result<String, DelegateError>> {
        let args = (&plugin_type, &command, Size(config.len()));
        match self.cap(&RUN, args, |c| {
            c.delegate(&plugin_type, &command, config.as_bytes())
        }) {
            Ok(Ok(out)) => Ok(Ok(out)),
            Ok(Err(failed)) => Ok(Err(DelegateError::Failed(failed))),
            Err(CapError::Trap(t)) => Err(t),
            Err(e) => Ok(Err(DelegateError::Host(
                e.code().unwrap_or(ErrorCode::Other),
            ))),
        }
    }
}

/// A native delegate's invocation, kept to run its DEL when the ADD that
/// ran it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeCall {
    /// The executable.
    pub path: PathBuf,
    /// Its environment (`CNI_*`, and `PATH`).
    pub env: Vec<(String, String)>,
    /// The config on its stdin.
    pub config: Vec<u8>,
}

impl Inverse for NativeCall {
    fn describe(&self) -> String {
        format!("NativeDel({self:?})")
    }

    fn apply(&self, _ctx: &mut Ctx) -> Result<(), CapError> {
        self.run_del()
    }

    fn uncovered(&self, _ctx: &mut Ctx, _owned: &Owned) -> Uncovered {
        Uncovered::Yes(format!("a native delegate's ADD ({})", self.path.display()))
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&RUN];

/// `delegate.run`.
pub(super) const RUN: Entry = Entry {
    call: "delegate.run",
    args: &["plugin-type", "command", "config"],
    authority: "run another plugin (IPAM) with this invocation's environment and a config: wasm in-process under its own policy, or a native binary from CNI_PATH",
    policy: "`delegates` (wasm) or `native-delegates` (native) names it; the same command as the plugin's own, or DEL during ADD; it runs under the caller's network, GC valid list, devices and port mappings whatever its config says, and its ADD result is the attachment's only if its config is the runtime's own",
    undo: "a wasm delegate's changes join the journal; a native delegate's ADD is undone by running its DEL",
    // What a delegate may change is decided by its own command, which
    // must be the caller's (or DEL during ADD): a CHECK's delegate is
    // read-only.
    mutates: false,
    in_gc: false,
    needs: &[Grant::Delegate("plugin-type")],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_results_in_every_version() {
        let new =
            br#"{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.2/24"},{"address":"fd00::2/64"}]}"#;
        assert_eq!(
            result_addresses(new),
            vec![
                "10.1.0.2".parse::<IpAddr>().expect("ip"),
                "fd00::2".parse().expect("ip")
            ]
        );
        let old = br#"{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.3/24"}}"#;
        assert_eq!(
            result_addresses(old),
            vec!["10.1.0.3".parse::<IpAddr>().expect("ip")]
        );
        assert!(result_addresses(b"not json").is_empty());
    }

    #[test]
    fn a_delegate_gets_the_environment_with_its_command() {
        let env = vec![
            ("CNI_COMMAND".to_owned(), "ADD".to_owned()),
            ("CNI_IFNAME".to_owned(), "eth0".to_owned()),
        ];
        let d = delegate_env(&env, Command::Del);
        assert!(d.contains(&("CNI_COMMAND".into(), "DEL".into())));
        assert!(d.contains(&("CNI_IFNAME".into(), "eth0".into())));
        assert_eq!(d.len(), 2);
    }
}

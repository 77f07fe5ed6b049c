//! The one place a plugin runs: for the runner (the plugin a runtime
//! executed), the chain runner's members and delegates (which the
//! capability layer reaches through [`caps::ctx::RunPlugin`]).
//! [`run_plugin`] loads a plugin's component (its artifact, or a compile),
//! checks its imports, makes its capability context from its grant and
//! executes it in a fresh store with its limits; [`runtime`] and
//! [`in_session`] set up what a top-level run shares (engine,
//! Tokio), [`adopt_records`] what it owes the state root first, and
//! [`finish`] the host's part after it: undo a failed ADD, record a
//! successful one, stand in for what a DEL left, collect a GC's garbage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_spec::Command;
use wasmtime::component::{Component, HasData, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::p2::bindings::{cli, clocks, random, sync};
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::audit::{Audit, Identity, Sink};
use crate::caps::ctx::{MakeCtx, RunPlugin};
use crate::caps::{self, BudgetExceeded, Ctx, StoreData};
use crate::clock::{self, DeadlineClock, HasDeadlineClock};
use crate::cni_error::{CniError, Code};
use crate::engine::{self, ArtifactCache};
use crate::limits::{Limiter, Limits};
use crate::plugins::Plugin;
use crate::policy::{self, Grant, Policy};
use crate::session::{
    container_netns, current_thread_runtime, describe, identity, internal, Output, Resolved,
    Runtime, MAX_STDOUT,
};

/// The run core as the capability layer sees it ([`RunPlugin`]).
pub(crate) struct Core;

/// The run core every context with a runtime is given.
pub(crate) static CORE: Core = Core;

impl RunPlugin for Core {
    fn run(
        &self,
        rt: &Runtime,
        plugin: &Plugin,
        resolved: &Resolved,
        command: &str,
        env: &[(String, String)],
        config: &[u8],
        ctx: MakeCtx<'_>,
    ) -> Result<(Result<Output, CniError>, Ctx), CniError> {
        run_plugin(rt, plugin, resolved, command, env, config, None, ctx)
    }
}

/// Runs `plugin` (its policy entry `resolved`) for `command` (the
/// `CNI_COMMAND` its audit records name) with `env` and `config` on stdin: loads its component and checks its imports,
/// makes its capability context with `ctx` from its grant and its audit
/// log, and executes it. The outcome, and the context (whose journal holds
/// the inverses of what it did); `Err` if it could not be loaded, or `ctx`
/// refused (no context was made). The caller is [`in_session`]; a top-level
/// run arms the process's deadline here (`arm`), just before its plugin
/// runs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_plugin(
    rt: &Runtime,
    plugin: &Plugin,
    resolved: &Resolved,
    command: &str,
    env: &[(String, String)],
    config: &[u8],
    arm: Option<Duration>,
    ctx: impl FnOnce(Grant, Audit) -> Result<Ctx, CniError>,
) -> Result<(Result<Output, CniError>, Ctx), CniError> {
    let t0 = std::time::Instant::now();
    let (component, imports) = prepare(rt, plugin)?;
    let t1 = std::time::Instant::now();
    let audit = Audit::new(identity(env, plugin, command), rt.sink.clone());
    let caps = ctx(resolved.entry.grant(), audit)?;
    log::debug!("timing: load {:?}, context {:?}", t1 - t0, t1.elapsed());
    // A top-level run's deadline starts now, its component loaded and its
    // records reconciled (a nested run's is its caller's, never re-armed).
    if let Some(deadline) = arm {
        clock::arm_deadline(&rt.engine, deadline);
    }
    let ran = execute(
        rt,
        &component,
        &imports,
        plugin,
        env,
        config,
        &resolved.limits,
        caps,
    );
    // The process exits soon after this; unmapping the code and the
    // engine's type registry would only add to every call's latency.
    std::mem::forget(component);
    Ok(ran)
}

/// What a top-level run (a plugin, or the chain) shares with the delegates
/// and members it runs: the engine (for `top`, the plugin or the chain's
/// first member, if any: [`engine::engine_for`]), the artifact cache, `policy`, the
/// `CNI_*` environment `env`, and one deadline, `deadline` after `t0`,
/// never re-armed by a nested run.
pub(crate) fn runtime(
    top: Option<&Plugin>,
    policy: Policy,
    env: Vec<(String, String)>,
    t0: Instant,
    deadline: Duration,
) -> Result<Arc<Runtime>, CniError> {
    let cache = ArtifactCache::default_location();
    let engine = match top {
        Some(top) => engine::engine_for(top, cache.as_ref()),
        None => engine::engine(),
    }
    .map_err(internal)?;
    Ok(Arc::new(Runtime {
        engine,
        cache,
        policy,
        env,
        deadline: t0 + deadline,
        sink: Sink::from_env(),
    }))
}

/// Runs a top-level run's `body` with a current-thread Tokio runtime
/// entered (wasmtime-wasi's synchronous streams block on futures through
/// the ambient runtime, and start a multi-threaded one, a thread per core
/// and cgroup probing, if there is none; start-up is every CNI call's hot
/// path).
pub(crate) fn in_session<T>(body: impl FnOnce() -> T) -> Result<T, CniError> {
    let tokio_rt = current_thread_runtime()?;
    let out = {
        let _entered = tokio_rt.enter();
        body()
    };
    // As for the component: the process exits right after this.
    std::mem::forget(tokio_rt);
    Ok(out)
}

/// What an untrusted state root means to a top-level run
/// ([`adopt_records`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Untrusted {
    /// An ADD fails; other commands go on without the records, said on
    /// stderr (one plugin: the runner).
    Refuse,
    /// Every command goes on without them (the chain runner, whose
    /// members' record writes fail instead).
    Ignore,
}

/// What a top-level ADD owes the state root before its plugin runs: the
/// records of an earlier boot reconciled (under the reconcile lock: a
/// lock held past the deadline is "try again later") and an intent log
/// left by a killed ADD of this attachment adopted. Records give authority
/// (what the host removes, the addresses a plugin may name as its
/// container's): none is kept or read where another user could write one
/// (`untrusted`).
pub(crate) fn adopt_records(
    caps: &mut Ctx,
    command: Option<Command>,
    untrusted: Untrusted,
) -> Result<(), CniError> {
    if let Some(why) = crate::record::Location::untrusted_root() {
        if untrusted == Untrusted::Ignore {
            return Ok(());
        }
        if command == Some(Command::Add) {
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
    } else if command == Some(Command::Add) {
        caps.reconcile_boot()
            .map_err(|e| CniError::new(Code::TryAgainLater, e))?;
        caps.adopt_intent();
    }
    // Before the plugin runs: no call of its own may choose it.
    caps.fix_adopted_peer();
    Ok(())
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

/// Loads `plugin`'s component (from its artifact when there is a valid
/// one) and checks its imports.
pub(crate) fn prepare(rt: &Runtime, plugin: &Plugin) -> Result<(Component, Vec<String>), CniError> {
    // A standard plugin is a component (build.rs made it one); its bytes
    // are not even read when its artifact is there.
    if let crate::plugins::Origin::File(path) = plugin.origin() {
        if let Some(why) = engine::not_a_component(&path.display().to_string(), plugin.wasm()) {
            return Err(CniError::new(Code::PluginRefused, why));
        }
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
        // wasmcni's own interfaces, each only when imported: a linker is
        // built in every process, and loopback imports a few.
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
        ("wasmcni:plugin/dhcp@", caps::add_dhcp),
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

/// `component` linked and type-checked against its imports, ready to
/// instantiate: once per process, engine and component (the standard
/// plugins share one, so bridge and the host-local it runs, or a chain's
/// members, link it once).
fn command_pre(
    engine: &Engine,
    component: &Component,
    plugin: &Plugin,
    imports: &[String],
) -> wasmtime::Result<sync::CommandPre<StoreData>> {
    static LINKED: engine::PerProcess<sync::CommandPre<StoreData>> = engine::PerProcess::new();
    LINKED.get_or_make(engine, plugin.sha256(), || {
        let linker = linker(engine, imports)?;
        let pre = sync::CommandPre::new(linker.instantiate_pre(component)?)?;
        // Its definitions live on in `pre`; freeing its maps would only
        // cost a process about to exit.
        std::mem::forget(linker);
        Ok(pre)
    })
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
    // The deadline counts from the epoch now: if the timer already advanced
    // it (a delegate or chain member made after the process's deadline), one
    // more tick would never come, so the store traps at once.
    if clock::deadline_passed(&rt.engine) {
        store.set_epoch_deadline(0);
    }
    store.epoch_deadline_trap();
    let t0 = std::time::Instant::now();
    let result = command_pre(&rt.engine, component, plugin, imports).and_then(|pre| {
        let t1 = std::time::Instant::now();
        pre.instantiate(&mut store).and_then(|cmd| {
            let t2 = std::time::Instant::now();
            let r = cmd.wasi_cli_run().call_run(&mut store);
            log::debug!(
                "timing: link {:?}, instantiate {:?}, run {:?}",
                t1 - t0,
                t2 - t1,
                t2.elapsed()
            );
            r
        })
    });
    let hit_memory_cap = store.data().limiter.cap_hit();
    let out = stdout.contents().to_vec();
    let outcome = outcome(result, out, plugin, limits, hit_memory_cap);
    // The store's tables, WASI context and instances go with it (the
    // guest's resources too: a plugin that trapped holding an IPAM store
    // holds its network's lock, which the journal's undo takes next).
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
    let attachment = crate::attachment::Attachment::from_invocation(env, stdin, Some(Command::Del));
    if attachment.network.is_empty() || attachment.container_id.is_empty() {
        return Err(why);
    }
    let container = container_netns(env, Some(Command::Del))?;
    let identity = Identity {
        plugin: name.to_owned(),
        sha256: String::new(),
        container_id: attachment.container_id.clone(),
        ifname: attachment.ifname.clone(),
        command: Command::Del.as_str().to_owned(),
    };
    let mut caps = caps::Ctx::new(caps::CtxParams {
        // It never runs: no authority.
        grant: policy::Grant::default(),
        container,
        audit: Audit::new(identity, Sink::from_env()),
        attachment,
        command: Some(Command::Del),
        runtime: None,
        core: None,
    });
    let outcome = finish_del(Err(why), &mut caps, name, true);
    std::mem::forget(caps);
    outcome
}

/// What the host does once a run's plugin is done: undoes a failed ADD
/// (nothing behind), records a successful one ([`crate::record`]), stands
/// in after a DEL for what the plugin left ([`caps::Ctx::finish_del`]),
/// and collects the garbage of a GC. `name` is the plugin (or chain) the
/// runtime executed.
pub(crate) fn finish(
    command: Option<Command>,
    outcome: Result<Output, CniError>,
    caps: &mut caps::Ctx,
    name: &str,
) -> Result<Output, CniError> {
    let failed = !matches!(outcome, Ok(Output { code: 0, .. }));
    match command {
        // A failed ADD leaves nothing behind.
        // (Or one whose intent log names a step that did not happen.)
        Some(Command::Add) if failed && (caps.journal_len() > 0 || caps.has_intent()) => {
            let outcome = caps.undo_or_report(0, name, outcome);
            caps.drop_record();
            outcome
        }
        // A host link the ADD took is out only with the record that
        // brings it back.
        Some(Command::Add) if !failed => match caps.keep_record(true) {
            Ok(()) => outcome,
            Err(why) => {
                let outcome = caps.undo_or_report(
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
        Some(Command::Del) => {
            let could_not_run = matches!(&outcome, Err(e) if e.code.plugin_could_not_run());
            finish_del(outcome, caps, name, could_not_run)
        }
        // The plugin's records of attachments the runtime no longer holds.
        // Whatever the plugin's GC did (a plugin that never implemented
        // it, or failed): the records of attachments the runtime no longer
        // holds, and what they list; the plugin's state of them.
        Some(Command::Gc) => {
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
pub(crate) fn finish_del(
    outcome: Result<Output, CniError>,
    caps: &mut caps::Ctx,
    name: &str,
    could_not_run: bool,
) -> Result<Output, CniError> {
    use caps::DelCleanup;
    let failed = !matches!(outcome, Ok(Output { code: 0, .. }));
    // Whether this is a late DEL is the records' word before the cleanup
    // changes them (the plugin-state drop below asks it).
    caps.note_incarnations();
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
}

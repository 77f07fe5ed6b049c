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
use crate::clock::{DeadlineClock, HasDeadlineClock};
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
        let num = |var: &str| -> Result<Option<u64>, CniError> {
            match std::env::var(var) {
                Err(_) => Ok(None),
                Ok(v) => v
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
        Ok(_) => invoke(target, &stdin, std::env::vars_os(), policy_file),
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

fn lookup<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Opens `CNI_NETNS` for the commands that act in it. DEL tolerates a
/// namespace that is already gone, as the spec asks.
fn container_netns(env: &[(String, String)]) -> Result<Option<NetNs>, CniError> {
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

/// Runs `target` with `stdin` and the `CNI_*` variables among `vars`.
pub fn invoke(
    target: Target<'_>,
    stdin: &[u8],
    vars: impl Iterator<Item = (OsString, OsString)>,
    policy_file: Option<&Path>,
) -> Result<Output, CniError> {
    let env = cni_env(vars)?;
    let policy =
        Policy::load(policy_file).map_err(|e| CniError::new(Code::PolicyInvalid, e.to_string()))?;
    let plugin = match target {
        Target::Name(n) => plugins::find(n),
        Target::Path(p) => Plugin::from_path(p),
    }
    .map_err(|e| match e {
        LookupError::Io { .. } => CniError::new(Code::Io, e.to_string()),
        _ => CniError::new(Code::InvalidConfig, e.to_string()),
    })?;
    let entry = policy.entry_for(
        plugin.name(),
        *plugin.origin() == crate::plugins::Origin::Bundled,
    );
    entry.check_pin(plugin.sha256()).map_err(|why| {
        CniError::new(
            Code::PluginRefused,
            format!("plugin {:?} refused: {why}", plugin.name()),
        )
    })?;
    let limits = Limits::resolve(&entry)?;
    let t0 = std::time::Instant::now();
    let container = container_netns(&env)?;
    let t1 = std::time::Instant::now();
    let engine = engine::engine().map_err(internal)?;
    let t2 = std::time::Instant::now();
    let cache = ArtifactCache::default_location();
    let component = engine::load(&engine, &plugin, cache.as_ref()).map_err(|e| {
        CniError::new(
            Code::PluginRefused,
            format!("plugin {:?} is not a valid component", plugin.name()),
        )
        .with_details(format!("{e:#}"))
    })?;
    let t3 = std::time::Instant::now();
    let imports = imports(&engine, &component);
    check_imports(&imports, plugin.name())?;
    log::debug!(
        "timing: netns {:?}, engine {:?}, load {:?}, imports {:?}",
        t1 - t0,
        t2 - t1,
        t3 - t2,
        t3.elapsed()
    );
    let out = run_component(
        &engine,
        &component,
        &imports,
        &plugin,
        Invocation {
            env,
            stdin,
            container,
            limits: &limits,
            grant: entry.grant(),
        },
    );
    // The process exits right after this; unmapping the code and the
    // engine's type registry would only add to every call's latency.
    std::mem::forget(component);
    std::mem::forget(engine);
    out
}

fn internal(e: impl std::fmt::Display) -> CniError {
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

/// The engine whose epoch the deadline timer advances.
static DEADLINE_ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();

extern "C" fn on_deadline(_: libc::c_int) {
    // Signal-safe: an atomic load, then an atomic increment (wasmtime
    // documents `increment_epoch` as signal-safe).
    if let Some(engine) = DEADLINE_ENGINE.get() {
        engine.increment_epoch();
    }
}

/// Makes the plugin trap once `deadline` has passed: a one-shot SIGALRM
/// timer advances the engine's epoch. (A timer thread would do the same,
/// but creating a thread costs every call ~0.1 ms; the handler restarts
/// interrupted system calls, so host calls are not disturbed.) Falls back
/// to a thread if the process already armed the timer for another engine.
fn arm_deadline(engine: &Engine, deadline: Duration) {
    let ours = DEADLINE_ENGINE.get_or_init(|| engine.clone());
    let armed = Engine::same(ours, engine) && {
        // SAFETY: installs a handler that only touches atomics, and arms a
        // one-shot timer; both calls take pointers to initialised locals.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_deadline as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            let timer = libc::itimerval {
                it_interval: libc::timeval {
                    tv_sec: 0,
                    tv_usec: 0,
                },
                it_value: libc::timeval {
                    tv_sec: deadline.as_secs() as libc::time_t,
                    tv_usec: deadline.subsec_micros() as libc::suseconds_t,
                },
            };
            libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()) == 0
                && libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) == 0
        }
    };
    if !armed {
        let ticker = engine.weak();
        std::thread::spawn(move || {
            std::thread::sleep(deadline);
            if let Some(e) = ticker.upgrade() {
                e.increment_epoch();
            }
        });
    }
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
        ("wasmcni:plugin/", caps::add_to_linker),
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

/// What one run is given.
struct Invocation<'a> {
    env: Vec<(String, String)>,
    stdin: &'a [u8],
    container: Option<NetNs>,
    limits: &'a Limits,
    grant: policy::Grant,
}

fn run_component(
    engine: &Engine,
    component: &Component,
    imports: &[String],
    plugin: &Plugin,
    inv: Invocation<'_>,
) -> Result<Output, CniError> {
    let Invocation {
        env,
        stdin,
        container,
        limits,
        grant,
    } = inv;
    let var = |k: &str| lookup(&env, k).unwrap_or("").to_owned();
    let command = var("CNI_COMMAND");
    let cmd = caps::Command::from_env(&command);
    let who = Identity {
        plugin: plugin.name().to_owned(),
        sha256: plugin.sha256().to_owned(),
        container_id: var("CNI_CONTAINERID"),
        ifname: var("CNI_IFNAME"),
        command,
    };
    let caps = caps::Ctx::new(
        grant,
        container,
        Audit::new(who.clone(), Sink::from_env()),
        &who.container_id,
        cmd,
    );
    let stdout = MemoryOutputPipe::new(MAX_STDOUT);
    let wasi = WasiCtxBuilder::new()
        .envs(&env)
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
        deadline: std::time::Instant::now() + limits.deadline,
    };
    let mut store = Store::new(engine, data);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_trap();
    let t0 = std::time::Instant::now();
    let linker = linker(engine, imports).map_err(internal)?;
    log::debug!("timing: linker {:?}", t0.elapsed());

    let deadline = limits.deadline;
    arm_deadline(engine, deadline);

    // wasmtime-wasi's synchronous streams block on futures through the
    // ambient Tokio runtime, and start a multi-threaded one (a thread per
    // core, cgroup probing) if there is none. A current-thread runtime,
    // entered here, costs no threads: start-up is every CNI call's hot path.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(internal)?;
    let _entered = rt.enter();
    let result = sync::Command::instantiate(&mut store, component, &linker)
        .and_then(|cmd| cmd.wasi_cli_run().call_run(&mut store));
    log::debug!("timing: instantiate + run {:?}", t0.elapsed());
    let hit_memory_cap = store.data().limiter.cap_hit();
    let stdout = stdout.contents().to_vec();
    let outcome = outcome(result, stdout, plugin, limits, hit_memory_cap);
    let caps = &mut store.data_mut().caps;
    let failed = !matches!(outcome, Ok(Output { code: 0, .. }));
    let outcome = if cmd == caps::Command::Add && failed && caps.journal_len() > 0 {
        // A failed ADD leaves nothing behind.
        let undo_failures = caps.undo();
        if undo_failures.is_empty() {
            outcome
        } else {
            eprintln!(
                "wasmcni: undoing the failed ADD left {} change(s) in place: {}",
                undo_failures.len(),
                undo_failures.join("; ")
            );
            Err(CniError::new(
                Code::Internal,
                format!(
                    "plugin {:?} failed and {} of its changes could not be undone",
                    plugin.name(),
                    undo_failures.len()
                ),
            )
            .with_details(undo_failures.join("; ")))
        }
    } else {
        outcome
    };
    // As above: the store's 4 GiB reservation and tables need no teardown
    // in a process that is about to exit.
    std::mem::forget(store);
    std::mem::forget(linker);
    outcome
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

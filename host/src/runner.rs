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
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sync};
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::caps::{self, StoreData};
use crate::limits::Limiter;
use crate::cni_error::{version_for_errors, Code, CniError};
use crate::engine::{self, ArtifactCache};
use crate::netns::{NetNs, NetnsError};
use crate::plugins::{self, LookupError, Plugin};
use crate::policy;

/// The largest config wasmcni accepts on stdin.
pub const MAX_STDIN: usize = 4 << 20;
/// The most a plugin may write to stdout.
pub const MAX_STDOUT: usize = 1 << 20;
/// Default wall-clock deadline for one plugin run.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Default cap on a plugin's linear memory.
pub const DEFAULT_MEMORY_CAP: usize = 64 << 20;

/// Interfaces a plugin may import (by prefix of the import name). Anything
/// else, `wasi:sockets` and `wasi:http` in particular, is refused before
/// instantiation. `wasi:filesystem` is allowed because Rust's std always
/// imports it; the plugin gets no preopened directory, so it names nothing.
const ALLOWED_IMPORTS: &[&str] = &[
    "wasmcni:plugin/",
    "wasi:cli/environment@0.2.",
    "wasi:cli/exit@0.2.",
    "wasi:cli/stdin@0.2.",
    "wasi:cli/stdout@0.2.",
    "wasi:cli/stderr@0.2.",
    "wasi:cli/terminal-input@0.2.",
    "wasi:cli/terminal-output@0.2.",
    "wasi:cli/terminal-stdin@0.2.",
    "wasi:cli/terminal-stdout@0.2.",
    "wasi:cli/terminal-stderr@0.2.",
    "wasi:io/error@0.2.",
    "wasi:io/poll@0.2.",
    "wasi:io/streams@0.2.",
    "wasi:clocks/wall-clock@0.2.",
    "wasi:clocks/monotonic-clock@0.2.",
    "wasi:random/random@0.2.",
    "wasi:random/insecure@0.2.",
    "wasi:random/insecure-seed@0.2.",
    "wasi:filesystem/types@0.2.",
    "wasi:filesystem/preopens@0.2.",
];

/// Limits for one run.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall-clock deadline.
    pub deadline: Duration,
    /// Linear-memory cap in bytes.
    pub memory_cap: usize,
}

impl Limits {
    /// Defaults, overridden by `WASMCNI_DEADLINE_MS` and `WASMCNI_MEMORY_MB`.
    pub fn from_env() -> Result<Limits, CniError> {
        let num = |var: &str| -> Result<Option<u64>, CniError> {
            match std::env::var(var) {
                Err(_) => Ok(None),
                Ok(v) => v.parse::<u64>().ok().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                    CniError::new(Code::InvalidEnv, format!("{var} must be a positive integer, got {v:?}"))
                }),
            }
        };
        Ok(Limits {
            deadline: num("WASMCNI_DEADLINE_MS")?
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_DEADLINE),
            memory_cap: num("WASMCNI_MEMORY_MB")?
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
/// and returns the exit code.
pub fn main(target: Target<'_>) -> i32 {
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_STDIN as u64 + 1)
        .read_to_end(&mut stdin);
    let outcome = match read {
        Err(e) => Err(CniError::new(Code::Io, format!("reading the network config from stdin: {e}"))),
        Ok(_) if stdin.len() > MAX_STDIN => Err(CniError::new(
            Code::InvalidConfig,
            format!("the network config on stdin is larger than {MAX_STDIN} bytes"),
        )),
        Ok(_) => invoke(target, &stdin, std::env::vars_os()),
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
fn cni_env(vars: impl Iterator<Item = (OsString, OsString)>) -> Result<Vec<(String, String)>, CniError> {
    let mut env = Vec::new();
    for (k, v) in vars {
        if !k.as_bytes().starts_with(b"CNI_") {
            continue;
        }
        let key = k.to_str().ok_or_else(|| {
            CniError::new(Code::InvalidEnv, format!("environment variable {k:?} is not valid UTF-8"))
        })?;
        let value = v
            .into_string()
            .map_err(|v| CniError::new(Code::InvalidEnv, format!("{key}={v:?} is not valid UTF-8")))?;
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
) -> Result<Output, CniError> {
    let env = cni_env(vars)?;
    let limits = Limits::from_env()?;
    let plugin = match target {
        Target::Name(n) => plugins::find(n),
        Target::Path(p) => Plugin::from_path(p),
    }
    .map_err(|e| match e {
        LookupError::Io { .. } => CniError::new(Code::Io, e.to_string()),
        _ => CniError::new(Code::InvalidConfig, e.to_string()),
    })?;
    let container = container_netns(&env)?;

    let engine = engine::engine().map_err(internal)?;
    let cache = ArtifactCache::default_location();
    let (component, _source) = engine::load(&engine, &plugin, cache.as_ref())
        .map_err(|e| CniError::new(Code::PluginRefused, format!("plugin {:?} is not a valid component", plugin.name())).with_details(format!("{e:#}")))?;
    check_imports(&engine, &component, plugin.name())?;
    run_component(&engine, &component, &plugin, env, stdin, container, &limits)
}

fn internal(e: impl std::fmt::Display) -> CniError {
    CniError::new(Code::Internal, format!("wasmcni: {e}"))
}

/// Refuses a component that imports anything outside the plugin world.
pub fn check_imports(engine: &Engine, component: &Component, name: &str) -> Result<(), CniError> {
    let refused = refused_imports(engine, component);
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

/// The imports of `component` that wasmcni refuses.
pub fn refused_imports(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !ALLOWED_IMPORTS.iter().any(|p| name.starts_with(p)))
        .map(str::to_owned)
        .collect()
}

struct HasIo;
impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

/// The linker: the WASI command interfaces a plugin may use (no sockets, no
/// preopens) and wasmcni's capabilities.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<StoreData>> {
    type T = StoreData;
    let mut l = Linker::<T>::new(engine);
    wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<T, HasIo>(&mut l, |t| &mut t.table)?;
    sync::io::poll::add_to_linker::<T, HasIo>(&mut l, |t| &mut t.table)?;
    sync::io::streams::add_to_linker::<T, HasIo>(&mut l, |t| &mut t.table)?;
    clocks::wall_clock::add_to_linker::<T, WasiClocks>(&mut l, T::clocks)?;
    clocks::monotonic_clock::add_to_linker::<T, WasiClocks>(&mut l, T::clocks)?;
    filesystem::preopens::add_to_linker::<T, WasiFilesystem>(&mut l, T::filesystem)?;
    sync::filesystem::types::add_to_linker::<T, WasiFilesystem>(&mut l, T::filesystem)?;
    random::random::add_to_linker::<T, WasiRandom>(&mut l, |t| t.wasi.random())?;
    random::insecure::add_to_linker::<T, WasiRandom>(&mut l, |t| t.wasi.random())?;
    random::insecure_seed::add_to_linker::<T, WasiRandom>(&mut l, |t| t.wasi.random())?;
    cli::exit::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::environment::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::stdin::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::stdout::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::stderr::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::terminal_input::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::terminal_output::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::terminal_stdin::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::terminal_stdout::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    cli::terminal_stderr::add_to_linker::<T, WasiCli>(&mut l, T::cli)?;
    caps::add_to_linker(&mut l)?;
    Ok(l)
}

fn run_component(
    engine: &Engine,
    component: &Component,
    plugin: &Plugin,
    env: Vec<(String, String)>,
    stdin: &[u8],
    container: Option<NetNs>,
    limits: &Limits,
) -> Result<Output, CniError> {
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
        caps: caps::Ctx::new(policy::grant_for(plugin.name()), container),
        limiter: Limiter::new(limits.memory_cap),
    };
    let mut store = Store::new(engine, data);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_trap();
    let linker = linker(engine).map_err(internal)?;

    let deadline = limits.deadline;
    let ticker = engine.clone();
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        ticker.increment_epoch();
    });

    let result = sync::Command::instantiate(&mut store, component, &linker)
        .and_then(|cmd| cmd.wasi_cli_run().call_run(&mut store));
    let hit_memory_cap = store.data().limiter.cap_hit();
    let stdout = stdout.contents().to_vec();
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
                return Ok(Output { stdout, code: exit.0 });
            }
            let name = plugin.name();
            if hit_memory_cap {
                return Err(CniError::new(
                    Code::MemoryExceeded,
                    format!("plugin {name:?} exceeded its memory cap of {} MiB", limits.memory_cap >> 20),
                ));
            }
            if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
                return Err(CniError::new(
                    Code::DeadlineExceeded,
                    format!("plugin {name:?} exceeded its deadline of {} ms", deadline.as_millis()),
                ));
            }
            Err(CniError::new(Code::PluginTrapped, format!("plugin {name:?} trapped")).with_details(format!("{e:#}")))
        }
    }
}

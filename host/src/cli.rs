//! Command-line entry: multi-call dispatch on `argv[0]`, then subcommands.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::runner::{self, Target};

/// The name under which the executable acts as itself rather than as a plugin.
pub const SELF_NAME: &str = "wasmcni";

#[derive(Parser, Debug)]
#[command(
    name = "wasmcni",
    version,
    about = "Runs CNI plugins compiled to WASI components, as a drop-in CNI plugin binary",
    long_about = "Runs CNI plugins compiled to WASI components.\n\n\
        Installed with `wasmcni install /opt/cni/bin`, every standard plugin X becomes \
        /opt/cni/bin/X, a link to wasmcni: when a container runtime executes it, wasmcni \
        runs plugin X with the runtime's CNI_* environment and stdin."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one plugin exactly as a runtime would run a plugin binary:
    /// CNI_* environment, config on stdin, result on stdout.
    Run {
        /// A plugin name (standard, or `<plugin dir>/<name>.wasm`), or a path
        /// ending in `.wasm`.
        plugin: String,
        /// The policy file (default: $WASMCNI_POLICY, else
        /// /etc/wasmcni/policy.json if it exists).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Make DIR a CNI bin dir: DIR/wasmcni plus a link DIR/X for every
    /// standard plugin X, with each plugin precompiled for this machine.
    Install {
        /// The CNI bin dir (e.g. /opt/cni/bin).
        dir: PathBuf,
        /// Replace files that are not wasmcni's own (e.g. native plugins).
        #[arg(long)]
        force: bool,
    },
    /// Precompile the standard plugins (and any given .wasm files) into the
    /// artifact cache.
    Precompile {
        /// Extra plugin components to precompile.
        plugins: Vec<PathBuf>,
        /// The cache directory (default: $WASMCNI_CACHE_DIR, else
        /// .wasmcni-cache beside the executable).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
    /// List the standard plugins carried in this binary.
    List,
    /// Show what a plugin is and may do: its identity, every interface and
    /// function it imports, the grants its policy gives it, and any import
    /// wasmcni would refuse.
    Audit {
        /// A plugin name or a path ending in `.wasm`.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The policy file (default: as for `run`).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Print the capability reference (docs/capabilities.md) generated from
    /// the code.
    Capabilities,
    /// Run an embedded example in a throwaway sandbox (new network and mount
    /// namespaces): ADD, CHECK, DEL of loopback, as a runtime does it.
    Demo,
}

/// Entry point; returns the process exit code.
pub fn main() -> i32 {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("WASMCNI_LOG", "warn"))
        .format_timestamp(None)
        .init();
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let invoked_as = Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(SELF_NAME)
        .to_owned();
    if invoked_as != SELF_NAME {
        // Multi-call: `$CNI_PATH/<type>` is a link to wasmcni.
        return runner::main(Target::Name(&invoked_as), None);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { plugin, policy } => {
            let target = if plugin.ends_with(".wasm") {
                Target::Path(Path::new(&plugin))
            } else {
                Target::Name(&plugin)
            };
            return runner::main(target, policy.as_deref());
        }
        Command::Install { dir, force } => crate::install::install(&dir, force),
        Command::Precompile { plugins, cache_dir } => {
            crate::install::precompile(&plugins, cache_dir)
        }
        Command::List => {
            for p in crate::plugins::bundled() {
                println!("{}\t{}\t{} bytes", p.name(), p.sha256(), p.wasm().len());
            }
            Ok(())
        }
        Command::Demo => crate::demo::run(),
        Command::Audit {
            plugin,
            json,
            policy,
        } => crate::inspect::print(&plugin, json, policy.as_deref()),
        Command::Capabilities => {
            print!("{}", crate::caps::catalog::markdown());
            Ok(())
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wasmcni: {e:#}");
            1
        }
    }
}

//! Command-line entry: multi-call dispatch on `argv[0]`, then subcommands.

use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::netavark;
use crate::runner::{self, Target};

/// The name under which the executable acts as itself rather than as a plugin.
pub use wasmcni_runtime::plugins::SELF_NAME;

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

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
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
    /// standard plugin X, with each plugin precompiled for this machine;
    /// optionally a third-party plugin (with its pinned policy entry), a
    /// network configuration and a policy file. Idempotent; never replaces
    /// a file that is not its own without --force; refuses, writing
    /// nothing, to make live what wasmcni would refuse to run (a pin that
    /// is not the plugin's build, an entry both in the policy file and
    /// policy.d, a network type that is not in DIR) unless --allow-broken.
    Install(crate::install::Options),
    /// Remove what `wasmcni install` wrote (given the same paths): the
    /// links to wasmcni in DIR, DIR/wasmcni, its artifact cache, and each
    /// file the .wasmcni-owned records list; put back every file --force
    /// replaced (kept in .wasmcni-backup/). A file changed since install
    /// wrote it is left alone, with a warning.
    Uninstall(crate::uninstall::Options),
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
    /// List every plugin a runtime can reach: the standard ones and every
    /// NAME.wasm in the plugin dir, with origin, sha256 and policy status;
    /// with --bin-dir, what each name in a CNI bin dir is.
    List {
        /// A CNI bin dir to check (e.g. /opt/cni/bin): which names are
        /// wasmcni links, native binaries, or dangling links.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Print JSON instead of columns.
        #[arg(long)]
        json: bool,
        /// The policy file (default: as for `run`).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
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
    /// Make a new plugin crate NAME from wasmcni's template: Cargo.toml
    /// (depending on guest-sdk: by default the published wasmcni-guest-sdk
    /// of this wasmcni's version), .cargo/config.toml (target wasm32-wasip2),
    /// src/main.rs (a chained plugin whose main is one call, with native
    /// unit tests), a starter policy entry (policy.json) and a README.
    New {
        /// The plugin's name (a Cargo package name and a CNI plugin type).
        name: String,
        /// The crate's directory (default: ./NAME); must not exist or be
        /// empty.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Depend on the guest-sdk in this directory instead (the
        /// guest-sdk/ of a wasmcni checkout), by path.
        #[arg(long, conflicts_with = "sdk_git")]
        sdk: Option<PathBuf>,
        /// Depend on guest-sdk by git instead: wasmcni's repository URL (a
        /// plugin repository's CI fetches it with cargo).
        #[arg(long, value_name = "URL")]
        sdk_git: Option<String>,
        /// With --sdk-git: the commit (or tag) to pin.
        #[arg(long, value_name = "COMMIT", requires = "sdk_git")]
        sdk_rev: Option<String>,
    },
    /// Print the capability reference (docs/capabilities.md) generated from
    /// the code.
    Capabilities,
    /// Run an embedded example in a throwaway sandbox (new network and mount
    /// namespaces): ADD, CHECK, DEL of loopback, then the CNI spec's example
    /// network (bridge + tuning + portmap) with a published port answering,
    /// as a runtime does it.
    Demo,
    /// Try a plugin without a node: ADD, CHECK, DEL, DEL in a throwaway
    /// sandbox, showing each result, every capability call it made and the
    /// grant each call needed.
    ///
    /// The sandbox is new network and mount namespaces (as for `demo`):
    /// its own network namespace plays the node, a container namespace is
    /// made inside it, and fresh tmpfs mounts hold its state (/run, and the
    /// IPAM data dirs), so the machine's network and files are never
    /// touched and everything is gone when it ends. Because it is thrown
    /// away, the plugin runs by default under a learning policy that grants
    /// it everything, so the run shows what it needs; --policy applies a
    /// real policy file instead. Needs root. Exits non-zero if a step
    /// failed.
    Try {
        /// A plugin name or a path ending in `.wasm`.
        plugin: String,
        /// The network config (or a conflist: the plugin's entry is used);
        /// default {"cniVersion":"1.1.0","name":"try","type":PLUGIN}.
        #[arg(long)]
        config: Option<PathBuf>,
        /// prevResult for a chained plugin's ADD; the interfaces it lists
        /// in the container are made there first, with their addresses.
        #[arg(long)]
        prev_result: Option<PathBuf>,
        /// CNI_IFNAME.
        #[arg(long, default_value = "eth0")]
        ifname: String,
        /// Apply this policy instead of the learning policy, to check an
        /// entry before installing it: a policy document (as policy.json)
        /// or the plugin's entry alone (as policy.d/NAME.json).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Write the run's audit records to FILE (input for
        /// `wasmcni policy suggest --from-try FILE`).
        #[arg(long, value_name = "FILE")]
        audit_out: Option<PathBuf>,
        /// Print the suggested policy entry for the plugin, and verify it by
        /// running the steps again under it alone.
        #[arg(long)]
        suggest: bool,
        /// Make a link in the sandbox's node first (NAME, a veth; or
        /// NAME:bridge), for a plugin that uses a node device (a master, an
        /// admin's bridge). Repeatable.
        #[arg(long = "host-link", value_name = "NAME[:bridge]")]
        host_links: Vec<String>,
    },
    /// Policy tools.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Remove the attachments that are gone, from the attachment records
    /// ($WASMCNI_STATE_DIR): what each record lists (links with the
    /// attachment's mark, reservations, firewall rules), its plugins'
    /// state, and the record, as a DEL would. An attachment is gone when
    /// --valid does not list it, or (without --valid) when its container
    /// namespace no longer exists or its record is from another boot.
    Gc(crate::gc::Options),
    /// Chain a plugin into the cluster's primary CNI network (flannel,
    /// Calico, Cilium): append an entry to the primary conflist's plugins
    /// (the first in the conf dir), atomically and idempotently; --remove
    /// takes it out; --watch keeps it there when the primary rewrites its
    /// file.
    ChainInto(crate::chain_into::Options),
    /// The DHCP daemon of the `dhcp` plugin: obtains, renews and releases
    /// leases inside the container namespaces the wasmcni invocations hand
    /// it, and keeps them across its restart (systemd units:
    /// deploy/systemd/wasmcni-dhcp.{socket,service}).
    DhcpDaemon(crate::dhcp_daemon::Options),
    /// Fetch a plugin published as an OCI artifact (the CNCF wasm layout):
    /// resolve its tag to a digest, check the manifest and the component
    /// against their digests, and a cosign signature where the trust file
    /// (or --key) requires one; store it by sha256 and print its digest,
    /// sha256 and signer. Nothing is stored unless all of it holds.
    Pull(crate::distribute::PullOptions),
    /// Publish a plugin component as an OCI artifact (the CNCF wasm
    /// layout), optionally signed as cosign signs (--sign); prints the
    /// reference pinned by digest.
    Push(crate::distribute::PushOptions),
    /// netavark plugin API (Podman 5+; driver `wasmcni`): check the network
    /// config on stdin (its option `conflist` or `conflist-json` names a
    /// CNI conflist) and print it.
    Create,
    /// netavark plugin API: attach the container whose network namespace
    /// is NETNS, running the network's conflist's ADD (input on stdin);
    /// prints the status block.
    Setup {
        /// The container's network namespace.
        netns: Option<String>,
    },
    /// netavark plugin API: detach it, running the conflist's DEL.
    Teardown {
        /// The container's network namespace.
        netns: Option<String>,
    },
    /// netavark plugin API: print the plugin's and the API's versions.
    Info,
}

/// `wasmcni policy ...`.
#[derive(Subcommand, Debug)]
enum PolicyCommand {
    /// Print the narrowest policy entry under which the plugin's observed
    /// calls pass (allowed and policy-denied alike), pinned to its sha256,
    /// as JSON for /etc/wasmcni/policy.d/NAME.json (notes on stderr).
    Suggest {
        /// A plugin name or a path ending in `.wasm` (its name and sha256
        /// select the records).
        plugin: String,
        /// The audit log to read (default: $WASMCNI_AUDIT, else
        /// /var/log/wasmcni/audit.jsonl).
        #[arg(long, conflicts_with = "from_try")]
        audit: Option<PathBuf>,
        /// The records `wasmcni try --audit-out FILE` wrote (they also name
        /// the node links the plugin used).
        #[arg(long, value_name = "FILE")]
        from_try: Option<PathBuf>,
    },
}

/// For the commands that only print a report (`list`, `audit`, `policy
/// suggest`, `capabilities`): a reader that stops early (`wasmcni audit X |
/// head`) ends the process as it ends `cat`, by `SIGPIPE`, where Rust's
/// default (the signal ignored, then a panic on the failed write) would
/// print a panic. Not for the commands that change anything.
fn reader_may_stop() {
    // SAFETY: restores the default disposition of one signal, before any
    // other thread exists that could depend on it.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
}

/// The name the process was invoked as: the file name of `argv[0]`
/// (`$CNI_PATH/<type>` is a link to wasmcni), else [`SELF_NAME`].
pub fn invoked_as() -> String {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(SELF_NAME)
        .to_owned()
}

/// Entry point for a process invoked as `invoked_as` ([`invoked_as`]);
/// returns the process exit code.
pub fn main(invoked_as: &str) -> i32 {
    env_logger::Builder::new()
        .parse_filters(crate::config::get().log.as_deref().unwrap_or("warn"))
        .format_timestamp(None)
        .init();
    if invoked_as != SELF_NAME {
        // Multi-call: `$CNI_PATH/<type>` is a link to wasmcni.
        return runner::main(Target::Name(invoked_as), None);
    }
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if matches!(
        cli.command,
        Command::List { .. }
            | Command::Audit { .. }
            | Command::Capabilities
            | Command::Policy(PolicyCommand::Suggest { .. })
    ) {
        reader_may_stop();
    }
    let result = match cli.command {
        Command::Run { plugin, policy } => {
            let target = if plugin.ends_with(".wasm") {
                Target::Path(Path::new(&plugin))
            } else {
                Target::Name(&plugin)
            };
            return runner::main(target, policy.as_deref());
        }
        Command::Install(mut opts) => {
            // clap keeps each flag's values apart: where each --plugin,
            // --name and --policy stood pairs them.
            if let Some(m) = matches.subcommand_matches("install") {
                opts.positions = crate::install::Positions::from_matches(m);
            }
            crate::install::install(&opts)
        }
        Command::Uninstall(opts) => crate::uninstall::run(&opts),
        Command::Precompile { plugins, cache_dir } => {
            crate::install::precompile(&plugins, cache_dir)
        }
        Command::List {
            bin_dir,
            json,
            policy,
        } => crate::inspect::print_list(bin_dir.as_deref(), json, policy.as_deref()),
        Command::Demo => crate::demo::run(),
        Command::Try {
            plugin,
            config,
            prev_result,
            ifname,
            policy,
            json,
            audit_out,
            suggest,
            host_links,
        } => crate::trial::run(crate::trial::Options {
            plugin,
            config,
            prev_result,
            ifname,
            policy,
            json,
            audit_out,
            suggest,
            host_links,
        }),
        Command::Policy(PolicyCommand::Suggest {
            plugin,
            audit,
            from_try,
        }) => crate::suggest::run(&plugin, audit.as_deref(), from_try.as_deref()),
        Command::Audit {
            plugin,
            json,
            policy,
        } => crate::inspect::print(&plugin, json, policy.as_deref()),
        Command::New {
            name,
            dir,
            sdk,
            sdk_git,
            sdk_rev,
        } => {
            let git = sdk_git.as_deref().map(|url| (url, sdk_rev.as_deref()));
            crate::scaffold::run(&name, dir.as_deref(), sdk.as_deref(), git)
        }
        Command::Gc(opts) => crate::gc::run(&opts),
        Command::ChainInto(opts) => crate::chain_into::run(&opts),
        Command::DhcpDaemon(opts) => crate::dhcp_daemon::run(&opts),
        Command::Pull(opts) => crate::distribute::pull(&opts),
        Command::Push(opts) => crate::distribute::push(&opts),
        Command::Create => return netavark::main(netavark::Call::Create),
        // (A missing namespace is netavark's error JSON, not clap's usage.)
        Command::Setup { netns } => {
            return netavark::main(netavark::Call::Setup(netns.unwrap_or_default()))
        }
        Command::Teardown { netns } => {
            return netavark::main(netavark::Call::Teardown(netns.unwrap_or_default()))
        }
        Command::Info => return netavark::main(netavark::Call::Info),
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

//! The plugin entry point, like the reference Go `skel.PluginMainFuncs`.
//!
//! [`run`] reads and validates the `CNI_*` environment for the command,
//! reads the network config from stdin, refuses an unsupported
//! `cniVersion` (code 1), dispatches ADD / DEL / CHECK / VERSION / STATUS /
//! GC to the [`Plugin`], and prints the result in the config's version, or
//! a CNI error JSON, on stdout, exiting non-zero on error.
//!
//! [`dispatch`] is the same without the process around it, for tests.

use std::io::{Read, Write};

use crate::cni::version::{check_command_version, VersionInfo};
use crate::cni::{CniResult, Command, Env, Error, NetConf, LATEST};

/// The largest config accepted on stdin.
const MAX_STDIN: u64 = 4 << 20;

/// A CNI plugin: one function per command. STATUS and GC default to
/// "ready" and "nothing to collect".
pub trait Plugin {
    /// ADD: attach the container; return what was configured.
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error>;
    /// CHECK: verify the attachment is as ADD left it.
    fn check(&self, inv: &Invocation) -> Result<(), Error>;
    /// DEL: detach; must succeed when there is nothing left to remove.
    fn del(&self, inv: &Invocation) -> Result<(), Error>;
    /// STATUS (spec 1.1): is the plugin ready to serve ADD?
    fn status(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }
    /// GC (spec 1.1): release everything not in `cni.dev/valid-attachments`.
    fn gc(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }
}

/// Everything one invocation carries.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The validated `CNI_*` environment.
    pub env: Env,
    /// The parsed network config.
    pub conf: NetConf,
    /// The raw config bytes, for plugin-specific parsing.
    pub stdin: Vec<u8>,
}

impl Invocation {
    /// The spec version to answer in.
    pub fn version(&self) -> &str {
        &self.conf.cni_version
    }

    /// `prevResult` in the canonical model, when chained.
    pub fn prev_result(&self) -> Result<Option<CniResult>, Error> {
        self.conf.prev_result()
    }
}

/// What a finished invocation prints and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Stdout.
    pub stdout: String,
    /// Exit code.
    pub code: i32,
}

fn fail(e: &Error, version: &str) -> Outcome {
    Outcome {
        stdout: e.to_json(version),
        code: 1,
    }
}

/// The cniVersion for an error before the config is parsed: the config's
/// own if readable, else the newest.
fn version_hint(stdin: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(|s| s.as_str())
                .map(str::to_owned)
        })
        .filter(|v| crate::cni::version::is_supported(v))
        .unwrap_or_else(|| LATEST.to_owned())
}

/// Runs one invocation against `plugin`, with the environment seen through
/// `lookup` and the config `stdin`.
pub fn dispatch<P: Plugin>(
    plugin: &P,
    lookup: impl Fn(&str) -> Option<String>,
    stdin: &[u8],
) -> Outcome {
    let env = match Env::from_lookup(lookup) {
        Ok(env) => env,
        Err(e) => return fail(&e, &version_hint(stdin)),
    };
    if env.command == Command::Version {
        return Outcome {
            stdout: VersionInfo::from_request(stdin).to_json(),
            code: 0,
        };
    }
    let conf = match NetConf::parse(stdin) {
        Ok(c) => c,
        Err(e) => return fail(&e, &version_hint(stdin)),
    };
    let version = conf.cni_version.clone();
    if let Err(e) = check_command_version(env.command, &version) {
        return fail(&e, &version);
    }
    let inv = Invocation {
        env,
        conf,
        stdin: stdin.to_vec(),
    };
    let done = |r: Result<(), Error>| match r {
        Ok(()) => Outcome {
            stdout: String::new(),
            code: 0,
        },
        Err(e) => fail(&e, &version),
    };
    match inv.env.command {
        Command::Add => match plugin.add(&inv).and_then(|r| r.to_json_string(&version)) {
            Ok(json) => Outcome {
                stdout: json,
                code: 0,
            },
            Err(e) => fail(&e, &version),
        },
        Command::Del => done(plugin.del(&inv)),
        Command::Check => done(plugin.check(&inv)),
        Command::Status => done(plugin.status(&inv)),
        Command::Gc => done(plugin.gc(&inv)),
        Command::Version => unreachable!("handled above"),
    }
}

/// The plugin's `main`: runs [`dispatch`] on the process's environment and
/// stdin, prints the outcome, and exits with its code. `about` is printed
/// to stderr when the plugin is run without `CNI_COMMAND` (as a person
/// would, by hand), like the Go skel.
pub fn run<P: Plugin>(plugin: P, about: &str) -> ! {
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut stdin);
    let outcome = match read {
        Err(e) => fail(
            &Error::io(format!("reading the network config from stdin: {e}")),
            LATEST,
        ),
        Ok(n) if n as u64 > MAX_STDIN => fail(
            &Error::invalid_config(format!(
                "the network config on stdin is larger than {MAX_STDIN} bytes"
            )),
            LATEST,
        ),
        Ok(_) => {
            if std::env::var_os("CNI_COMMAND").is_none() && !about.is_empty() {
                eprintln!("{about}");
            }
            dispatch(&plugin, |k| std::env::var(k).ok(), &stdin)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(outcome.stdout.as_bytes());
    if !outcome.stdout.is_empty() && !outcome.stdout.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
    std::process::exit(outcome.code)
}

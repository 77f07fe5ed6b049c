//! The `CNI_*` environment: which command to run and its parameters.

use std::fmt;
use std::str::FromStr;

use super::args::CniArgs;
use super::error::Error;
use super::validate::{validate_container_id, validate_ifname};

/// A CNI operation (`CNI_COMMAND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `ADD`: attach the container to the network.
    Add,
    /// `DEL`: detach the container from the network.
    Del,
    /// `CHECK`: verify an attachment (spec 0.4.0 and later).
    Check,
    /// `VERSION`: report the supported spec versions.
    Version,
    /// `STATUS`: is the plugin ready to serve ADD (spec 1.1.0).
    Status,
    /// `GC`: release resources of attachments that no longer exist (spec 1.1.0).
    Gc,
}

impl Command {
    /// Every command.
    pub const ALL: [Command; 6] = [
        Command::Add,
        Command::Del,
        Command::Check,
        Command::Version,
        Command::Status,
        Command::Gc,
    ];

    /// Parse a `CNI_COMMAND` value. Exact and case-sensitive (`ADD`, not
    /// `add`), like the reference skel. Empty → code 4 naming `CNI_COMMAND`;
    /// anything else unknown → code 4 naming the value.
    pub fn parse(s: &str) -> Result<Command, Error> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "" => {
                return Err(Error::invalid_env(
                    "required env variables [CNI_COMMAND] missing",
                ))
            }
            other => {
                return Err(Error::invalid_env(format!(
                    "unknown CNI_COMMAND: {other:?}"
                )))
            }
        })
    }

    /// The `CNI_COMMAND` spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Status => "STATUS",
            Command::Gc => "GC",
        }
    }

    /// The lowest spec version whose configs allow this command: CHECK
    /// 0.4.0, STATUS and GC 1.1.0, the others 0.1.0.
    pub const fn min_version(self) -> &'static str {
        match self {
            Command::Check => "0.4.0",
            Command::Status | Command::Gc => "1.1.0",
            Command::Add | Command::Del | Command::Version => "0.1.0",
        }
    }

    /// Whether the reference skel requires `var` for this command.
    ///
    /// | variable          | required for            |
    /// |-------------------|-------------------------|
    /// | `CNI_COMMAND`     | all                     |
    /// | `CNI_CONTAINERID` | ADD, DEL, CHECK         |
    /// | `CNI_NETNS`       | ADD, CHECK              |
    /// | `CNI_IFNAME`      | ADD, DEL, CHECK         |
    /// | `CNI_ARGS`        | none                    |
    /// | `CNI_PATH`        | ADD, DEL, CHECK, STATUS, GC |
    ///
    /// `CNI_PATH` follows the Go skel (libcni 1.1/1.2), which requires it
    /// although the 1.0 spec text calls it optional.
    pub fn requires(self, var: &str) -> bool {
        use Command::*;
        match var {
            "CNI_COMMAND" => true,
            "CNI_CONTAINERID" | "CNI_IFNAME" => matches!(self, Add | Del | Check),
            "CNI_NETNS" => matches!(self, Add | Check),
            "CNI_PATH" => matches!(self, Add | Del | Check | Status | Gc),
            _ => false,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Command {
    type Err = Error;
    fn from_str(s: &str) -> Result<Command, Error> {
        Command::parse(s)
    }
}

/// The variables [`Env::from_lookup`] reads, in the skel's order.
pub const ENV_VARS: [&str; 6] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
];

/// The validated `CNI_*` environment of one plugin invocation.
///
/// Fields a command does not use are whatever the environment held (often
/// empty); only the ones the command requires are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID` (validated for ADD, DEL, CHECK).
    pub container_id: String,
    /// `CNI_NETNS`: path of the container's network namespace (may be empty
    /// for DEL).
    pub netns: String,
    /// `CNI_IFNAME` (validated for ADD, DEL, CHECK).
    pub ifname: String,
    /// `CNI_ARGS`, parsed (empty for VERSION, which ignores it).
    pub args: CniArgs,
    /// `CNI_PATH`: `:`-separated plugin directories, as given.
    pub path: String,
}

impl Env {
    /// Read and validate the environment through `lookup` (`None` and an
    /// empty value both mean unset, as in the Go skel).
    ///
    /// Order of checks, as the reference skel: the variables are visited in
    /// the order of [`ENV_VARS`]; a present, required variable that is
    /// invalid fails at once (container ID, interface name; `CNI_ARGS` is
    /// read leniently, [`CniArgs::parse_lenient`]); missing required ones are collected and
    /// reported together as `required env variables [A,B] missing`. All
    /// failures are code 4. An unknown `CNI_COMMAND` fails with code 4
    /// naming the value; VERSION reads nothing but `CNI_COMMAND`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Env, Error> {
        let get = |name: &str| lookup(name).unwrap_or_default();
        let command = Command::parse(&get("CNI_COMMAND"))?;
        let mut env = Env {
            command,
            container_id: String::new(),
            netns: String::new(),
            ifname: String::new(),
            args: CniArgs::default(),
            path: String::new(),
        };
        if command == Command::Version {
            return Ok(env);
        }

        let mut missing: Vec<&str> = Vec::new();
        for var in ENV_VARS.iter().copied().skip(1) {
            let value = get(var);
            let required = command.requires(var);
            if value.is_empty() {
                if required {
                    missing.push(var);
                }
                continue;
            }
            match var {
                "CNI_CONTAINERID" => {
                    if required {
                        validate_container_id(&value)?;
                    }
                    env.container_id = value;
                }
                "CNI_NETNS" => env.netns = value,
                "CNI_IFNAME" => {
                    if required {
                        validate_ifname(&value)?;
                    }
                    env.ifname = value;
                }
                // Never refused here: the Go skel does not read CNI_ARGS,
                // and a plugin that ignores them works with any; a plugin
                // that reads them strictly refuses the malformed pieces
                // ([`CniArgs::check_known`]).
                "CNI_ARGS" => env.args = CniArgs::parse_lenient(&value),
                _ => env.path = value,
            }
        }
        if !missing.is_empty() {
            return Err(Error::invalid_env(format!(
                "required env variables [{}] missing",
                missing.join(",")
            )));
        }
        Ok(env)
    }

    /// [`from_lookup`](Self::from_lookup) over the process environment.
    ///
    /// A `CNI_*` variable whose value is not UTF-8 is code 4 naming it.
    pub fn from_process() -> Result<Env, Error> {
        for var in ENV_VARS {
            if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(var) {
                return Err(Error::invalid_env(format!("{var} is not valid UTF-8")));
            }
        }
        Env::from_lookup(|name| std::env::var(name).ok())
    }

    /// The directories of `CNI_PATH`, empty entries skipped.
    pub fn path_dirs(&self) -> impl Iterator<Item = &str> {
        self.path.split(':').filter(|d| !d.is_empty())
    }
}

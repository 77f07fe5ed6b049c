//! The `CNI_*` environment: which command to run and its parameters.

use super::args::CniArgs;
use super::error::Error;
use super::validate::{validate_container_id, validate_ifname};

// The CNI operation (`CNI_COMMAND`) is the one type the host and the SDK
// share. `Command::parse` is exact and case-sensitive (`ADD`, not `add`),
// like the reference skel.
pub use cni_spec::{Command, UnknownCommand};

/// An unknown `CNI_COMMAND` is code 4: naming `CNI_COMMAND` when it is
/// empty (unset), the value otherwise.
impl From<UnknownCommand> for Error {
    fn from(UnknownCommand(given): UnknownCommand) -> Error {
        if given.is_empty() {
            Error::invalid_env("required env variables [CNI_COMMAND] missing")
        } else {
            Error::invalid_env(format!("unknown CNI_COMMAND: {given:?}"))
        }
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

//! What the CNI spec (1.1) and libcni fix, in one place for the wasmcni
//! host and for guest-sdk (the plugins): the spec versions, the commands,
//! the well-known error codes, and the rule for an interface name. No
//! dependencies: it builds for the host and for `wasm32-wasip2` alike.

#![deny(missing_docs)]

/// Every spec version wasmcni and its plugins read and write, oldest
/// first (libcni's list).
pub const SUPPORTED_VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// The newest supported spec version.
pub const LATEST: &str = "1.1.0";

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
    /// `add`), like the reference skel; anything else (the empty string
    /// too) is an [`UnknownCommand`].
    pub fn parse(s: &str) -> Result<Command, UnknownCommand> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            other => return Err(UnknownCommand(other.to_owned())),
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

impl core::fmt::Display for Command {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::str::FromStr for Command {
    type Err = UnknownCommand;
    fn from_str(s: &str) -> Result<Command, UnknownCommand> {
        Command::parse(s)
    }
}

/// A `CNI_COMMAND` value that names no [`Command`] (the value, possibly
/// empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCommand(pub String);

impl core::fmt::Display for UnknownCommand {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "unknown CNI_COMMAND: {:?}", self.0)
    }
}

impl std::error::Error for UnknownCommand {}

/// Well-known CNI error codes (spec 1.1 "Well-known Error Codes").
///
/// Codes 1–99 are reserved by the spec; a plugin may use 100 and above for
/// its own errors (wasmcni's host uses 100–105 for a plugin that could not
/// run: see its `cni_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    /// 1: incompatible CNI version.
    IncompatibleVersion = 1,
    /// 2: unsupported field in the network configuration.
    UnsupportedField = 2,
    /// 3: container unknown or does not exist.
    UnknownContainer = 3,
    /// 4: invalid necessary environment variables (`CNI_*`).
    InvalidEnv = 4,
    /// 5: I/O failure (for example reading stdin).
    Io = 5,
    /// 6: failed to decode content (bad JSON, wrong shape).
    Decode = 6,
    /// 7: invalid network configuration.
    InvalidConfig = 7,
    /// 8: invalid network namespace (libcni `ErrInvalidNetNS`, not in the spec text).
    InvalidNetns = 8,
    /// 11: try again later (transient condition).
    TryAgainLater = 11,
    /// 50: the plugin is not ready to serve ADD requests (STATUS).
    NotReady = 50,
    /// 51: the plugin has limited connectivity for existing containers (STATUS).
    LimitedConnectivity = 51,
    /// 999: internal error (libcni wraps plain plugin errors in this code).
    Internal = 999,
}

impl ErrorCode {
    /// The numeric code.
    pub const fn as_u32(self) -> u32 {
        self as u32
    }

    /// The well-known code for `code`, if it is one.
    pub const fn from_u32(code: u32) -> Option<ErrorCode> {
        Some(match code {
            1 => ErrorCode::IncompatibleVersion,
            2 => ErrorCode::UnsupportedField,
            3 => ErrorCode::UnknownContainer,
            4 => ErrorCode::InvalidEnv,
            5 => ErrorCode::Io,
            6 => ErrorCode::Decode,
            7 => ErrorCode::InvalidConfig,
            8 => ErrorCode::InvalidNetns,
            11 => ErrorCode::TryAgainLater,
            50 => ErrorCode::NotReady,
            51 => ErrorCode::LimitedConnectivity,
            999 => ErrorCode::Internal,
            _ => return None,
        })
    }
}

impl From<ErrorCode> for u32 {
    fn from(code: ErrorCode) -> u32 {
        code.as_u32()
    }
}

/// Longest valid interface name in bytes (Linux `IFNAMSIZ` - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// What is wrong with an interface name ([`ifname_problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfnameProblem {
    /// It is empty.
    Empty,
    /// It is longer than [`MAX_IFNAME_LEN`] bytes.
    TooLong,
    /// It is `.` or `..`.
    Reserved,
    /// It contains this character: `/`, `:`, NUL or whitespace.
    Forbidden(char),
}

/// What is wrong with `name` as a Linux interface name, if anything: the
/// rule of libcni's `ValidateInterfaceName`, after the kernel's
/// `dev_valid_name` — not empty, at most [`MAX_IFNAME_LEN`] bytes (bytes,
/// not characters: `"ethé"` is 5), not `.` or `..`, and no `/`, `:`, NUL or
/// whitespace (any Unicode whitespace, as Go's `unicode.IsSpace`).
pub fn ifname_problem(name: &str) -> Option<IfnameProblem> {
    if name.is_empty() {
        return Some(IfnameProblem::Empty);
    }
    if name.len() > MAX_IFNAME_LEN {
        return Some(IfnameProblem::TooLong);
    }
    if name == "." || name == ".." {
        return Some(IfnameProblem::Reserved);
    }
    name.chars()
        .find(|&c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
        .map(IfnameProblem::Forbidden)
}

/// Whether `name` is a valid interface name ([`ifname_problem`]).
pub fn valid_ifname(name: &str) -> bool {
    ifname_problem(name).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_follow_libcni_and_the_kernel() {
        for ok in ["eth0", "a", "123456789012345", "e.th-0_x", "ethé"] {
            assert!(valid_ifname(ok), "{ok:?}");
        }
        for (bad, why) in [
            ("", IfnameProblem::Empty),
            ("1234567890123456", IfnameProblem::TooLong),
            ("ethéééééééé", IfnameProblem::TooLong),
            (".", IfnameProblem::Reserved),
            ("..", IfnameProblem::Reserved),
            ("a/b", IfnameProblem::Forbidden('/')),
            ("a:b", IfnameProblem::Forbidden(':')),
            ("a b", IfnameProblem::Forbidden(' ')),
            ("a\u{a0}b", IfnameProblem::Forbidden('\u{a0}')),
            ("a\0b", IfnameProblem::Forbidden('\0')),
        ] {
            assert_eq!(ifname_problem(bad), Some(why), "{bad:?}");
        }
    }

    #[test]
    fn commands_parse_exactly() {
        for c in Command::ALL {
            assert_eq!(Command::parse(c.as_str()), Ok(c));
            assert_eq!(c.as_str().parse::<Command>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        for bad in ["", "add", "Add", "ADD ", " DEL", "DELETE", "gc"] {
            assert_eq!(Command::parse(bad), Err(UnknownCommand(bad.to_owned())));
        }
    }

    #[test]
    fn codes_round_trip() {
        for n in 0..1000 {
            if let Some(c) = ErrorCode::from_u32(n) {
                assert_eq!(c.as_u32(), n);
            }
        }
        assert_eq!(ErrorCode::from_u32(100), None);
    }
}

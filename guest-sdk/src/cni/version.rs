//! CNI spec versions: the supported list, parsing and comparison, the
//! VERSION answer, per-command version floors and `cniVersions` selection.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::env::Command;
use super::error::Error;

/// Every spec version this SDK reads and writes, oldest first, and the
/// newest: the `cni-spec` crate's, which the host shares.
pub use cni_spec::{LATEST, SUPPORTED_VERSIONS};

/// What an absent or empty `cniVersion` means (libcni: "0.1.0").
pub const DEFAULT_VERSION: &str = "0.1.0";

/// `version`, or [`DEFAULT_VERSION`] when it is empty.
pub fn normalize(version: &str) -> &str {
    if version.is_empty() {
        DEFAULT_VERSION
    } else {
        version
    }
}

/// Whether `version` is exactly one of [`SUPPORTED_VERSIONS`] (exact string
/// match, as libcni's reconciler: `"1.0"` is not supported). Empty counts
/// as 0.1.0.
pub fn is_supported(version: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&normalize(version))
}

/// Check a config's `cniVersion` against [`SUPPORTED_VERSIONS`].
///
/// Unsupported (including garbage) → code 1; the message names the version,
/// the details are libcni's (`config is "x", plugin supports [...]`).
pub fn check_supported(config_version: &str) -> Result<(), Error> {
    let v = normalize(config_version);
    if is_supported(v) {
        return Ok(());
    }
    Err(
        Error::incompatible_version(format!("incompatible CNI versions: config is {v:?}"))
            .with_details(format!(
                "config is {v:?}, plugin supports {}",
                go_quoted_list(&SUPPORTED_VERSIONS)
            )),
    )
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// A parsed spec version `major.minor.patch`, ordered numerically.
///
/// Parsing follows libcni's `ParseVersion`: one to three dot-separated
/// numbers, missing parts are 0 (`"1"` is 1.0.0) and the empty string is
/// 0.1.0. Stricter than Go's `Atoi`: every part must be plain ASCII digits
/// (no sign, no spaces) and fit in a `u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl Version {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parse a version string; garbage → code 6 (libcni's skel reports
    /// version parse errors as decoding failures) naming the input.
    pub fn parse(s: &str) -> Result<Version, Error> {
        if s.is_empty() {
            return Ok(Version::new(0, 1, 0));
        }
        let invalid = |why: &str| Error::decode(format!("invalid version {s:?}: {why}"));
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() > 3 {
            return Err(invalid("too many parts"));
        }
        let mut nums = [0u32; 3];
        for (slot, part) in nums.iter_mut().zip(&parts) {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid(&format!("part {part:?} is not a number")));
            }
            *slot = part
                .parse::<u32>()
                .map_err(|_| invalid(&format!("part {part:?} is too large")))?;
        }
        Ok(Version::new(nums[0], nums[1], nums[2]))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = Error;
    fn from_str(s: &str) -> Result<Version, Error> {
        Version::parse(s)
    }
}

/// Compare two version strings (libcni `GreaterThanOrEqualTo` and friends);
/// either failing to parse is code 6.
pub fn compare(a: &str, b: &str) -> Result<Ordering, Error> {
    Ok(Version::parse(a)?.cmp(&Version::parse(b)?))
}

/// Check that a config at `config_version` may run `command`, as the
/// reference skel does before calling the plugin:
///
/// * VERSION: always allowed.
/// * ADD, DEL: the version must be supported (code 1).
/// * CHECK (≥ 0.4.0), STATUS and GC (≥ 1.1.0): an unparsable version is
///   code 6; below the floor → code 1 "config version does not allow
///   CHECK"; newer than every supported version → code 1 "plugin version
///   does not allow CHECK"; then the version must be supported (code 1).
pub fn check_command_version(command: Command, config_version: &str) -> Result<(), Error> {
    let v = normalize(config_version);
    match command {
        Command::Version => return Ok(()),
        Command::Add | Command::Del => {}
        Command::Check | Command::Status | Command::Gc => {
            if compare(v, command.min_version())? == Ordering::Less {
                return Err(Error::incompatible_version(format!(
                    "config version does not allow {command}"
                ))
                .with_details(format!(
                    "config is {v:?}, {command} needs {} or later",
                    command.min_version()
                )));
            }
            if compare(LATEST, v)? == Ordering::Less {
                return Err(Error::incompatible_version(format!(
                    "plugin version does not allow {command}"
                ))
                .with_details(format!(
                    "config is {v:?}, plugin supports {}",
                    go_quoted_list(&SUPPORTED_VERSIONS)
                )));
            }
        }
    }
    check_supported(v)
}

/// Pick the version to use for a network configuration list from its
/// `cniVersion` and the spec 1.1 `cniVersions` list: the highest version
/// among both that is in [`SUPPORTED_VERSIONS`].
///
/// Like libcni, every `cniVersions` entry must parse (else code 7 naming the
/// entry) and versions newer than this implementation are skipped. Where
/// libcni keeps any version not newer than its own (so `"1.0.5"` could win
/// and then fail), this picks only supported ones. With no supported
/// candidate, `cni_version` is returned unchanged (possibly empty, meaning
/// 0.1.0) so the caller's version check reports it.
pub fn select_version(cni_version: &str, cni_versions: &[String]) -> Result<String, Error> {
    let mut candidates: Vec<&str> = Vec::with_capacity(cni_versions.len() + 1);
    for (i, v) in cni_versions.iter().enumerate() {
        if v.is_empty() || Version::parse(v).is_err() {
            return Err(Error::invalid_config(format!(
                "invalid cniVersions entry {v:?} at index {i}"
            )));
        }
        candidates.push(v);
    }
    if !cni_version.is_empty() {
        candidates.push(cni_version);
    }
    let mut best: Option<(Version, &str)> = None;
    for v in candidates {
        if let Ok(parsed) = Version::parse(v) {
            if is_supported(v) && best.is_none_or(|(b, _)| parsed > b) {
                best = Some((parsed, v));
            }
        }
    }
    Ok(match best {
        Some((_, v)) => v.to_string(),
        None => cni_version.to_string(),
    })
}

/// The answer to the VERSION command:
/// `{"cniVersion": ..., "supportedVersions": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// The version of this answer: the requested one when it is supported,
    /// else [`LATEST`]. (The spec says to echo the request; libcni's skel
    /// always answers with its own newest version.)
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    /// The supported spec versions, oldest first.
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<String>,
}

impl VersionInfo {
    /// The answer for a request carrying `requested` (`None` or empty: no
    /// request version).
    pub fn new(requested: Option<&str>) -> VersionInfo {
        let cni_version = match requested {
            Some(v) if !v.is_empty() && is_supported(v) => v.to_string(),
            _ => LATEST.to_string(),
        };
        VersionInfo {
            cni_version,
            supported_versions: SUPPORTED_VERSIONS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The answer for the VERSION command's stdin (`{"cniVersion": "..."}`).
    /// Never fails: unreadable input is treated as no request, as the skel
    /// ignores VERSION's stdin altogether.
    pub fn from_request(stdin: &[u8]) -> VersionInfo {
        let requested = serde_json::from_slice::<serde_json::Value>(stdin)
            .ok()
            .and_then(|v| {
                v.as_object()
                    .and_then(|m| gojson::field(m, "cniVersion"))
                    .and_then(|c| c.as_str())
                    .map(str::to_string)
            });
        VersionInfo::new(requested.as_deref())
    }

    /// Compact JSON, `cniVersion` first.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                "{{\"cniVersion\":{:?},\"supportedVersions\":[]}}",
                self.cni_version
            )
        })
    }
}

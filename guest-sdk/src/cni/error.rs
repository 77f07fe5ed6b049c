//! The CNI error object a plugin prints on stdout when it fails.
//!
//! The wire shape follows the spec ("Error" section) and libcni's
//! `types.Error`: `{"cniVersion", "code", "msg", "details"}`, where
//! `cniVersion` is added by [`Error::to_json`] and `details` is omitted when
//! empty.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Well-known CNI error codes (spec 1.1 "Well-known Error Codes"), from
/// the `cni-spec` crate the host shares. [`Error::code`] is a plain `u32`
/// so a plugin's own codes (100 and up) fit.
pub use cni_spec::ErrorCode;

/// A CNI error: what a plugin reports on stdout (with a non-zero exit) when
/// an operation fails.
///
/// Serializes as libcni's `types.Error` (`{"code", "msg", "details"?}`);
/// deserializing ignores a `cniVersion` key, so the output of
/// [`Error::to_json`] reads back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// Error code: one of [`ErrorCode`] or a plugin-specific code ≥ 100.
    pub code: u32,
    /// Short human-readable message.
    pub msg: String,
    /// Longer description; omitted from JSON when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

/// Field order of the printed error: cniVersion first, as the spec shows.
#[derive(Serialize)]
struct ErrorOut<'a> {
    #[serde(rename = "cniVersion", skip_serializing_if = "str::is_empty")]
    cni_version: &'a str,
    code: u32,
    msg: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    details: &'a str,
}

impl Error {
    /// An error with `code` and `msg` and no details (use a plugin-specific
    /// code ≥ 100, or [`ErrorCode::as_u32`]).
    pub fn new(code: u32, msg: impl Into<String>) -> Error {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// An error with a well-known `code`.
    pub fn with_code(code: ErrorCode, msg: impl Into<String>) -> Error {
        Error::new(code.as_u32(), msg)
    }

    /// The same error with `details` set.
    #[must_use]
    pub fn with_details(mut self, details: impl Into<String>) -> Error {
        self.details = details.into();
        self
    }

    /// The well-known code of this error, if it has one.
    pub fn well_known(&self) -> Option<ErrorCode> {
        ErrorCode::from_u32(self.code)
    }

    /// Code 1: incompatible CNI version.
    pub fn incompatible_version(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::IncompatibleVersion, msg)
    }

    /// Code 2: unsupported field in the network configuration.
    pub fn unsupported_field(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::UnsupportedField, msg)
    }

    /// Code 3: container unknown or does not exist.
    pub fn unknown_container(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::UnknownContainer, msg)
    }

    /// Code 4: invalid or missing `CNI_*` environment variables.
    pub fn invalid_env(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::InvalidEnv, msg)
    }

    /// Code 5: I/O failure.
    pub fn io(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::Io, msg)
    }

    /// Code 6: failed to decode content.
    pub fn decode(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::Decode, msg)
    }

    /// Code 7: invalid network configuration.
    pub fn invalid_config(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::InvalidConfig, msg)
    }

    /// Code 8: invalid network namespace.
    pub fn invalid_netns(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::InvalidNetns, msg)
    }

    /// Code 11: try again later.
    pub fn try_again_later(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::TryAgainLater, msg)
    }

    /// Code 50: not ready to serve ADD (STATUS).
    pub fn not_ready(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::NotReady, msg)
    }

    /// Code 51: limited connectivity for existing containers (STATUS).
    pub fn limited_connectivity(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::LimitedConnectivity, msg)
    }

    /// Code 999: internal error.
    pub fn internal(msg: impl Into<String>) -> Error {
        Error::with_code(ErrorCode::Internal, msg)
    }

    /// The error a failed plugin printed (a delegate's), kept as it is:
    /// code, message and details, as libcni's `invoke` passes it on. Output
    /// that is not a CNI error becomes code 999 quoting it.
    pub fn from_plugin_output(stdout: &str) -> Error {
        let text = stdout.trim();
        if text.is_empty() {
            return Error::internal("netplugin failed with no error message");
        }
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) if v.get("code").and_then(|c| c.as_u64()).is_some() => {
                let field = |k: &str| v.get(k).and_then(|s| s.as_str()).unwrap_or("").to_owned();
                Error {
                    code: v
                        .get("code")
                        .and_then(|c| c.as_u64())
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(999),
                    msg: field("msg"),
                    details: field("details"),
                }
            }
            _ => Error::internal(format!(
                "netplugin failed but error parsing its diagnostic message {text:?}"
            )),
        }
    }

    /// The error JSON as a plugin prints it on stdout: indented with four
    /// spaces like libcni's `Error.Print`, `cniVersion` first (left out when
    /// `cni_version` is empty), `details` only when non-empty.
    ///
    /// ```
    /// use guest_sdk::cni::Error;
    /// let json = Error::invalid_config("missing network name").to_json("1.0.0");
    /// assert_eq!(
    ///     json,
    ///     "{\n    \"cniVersion\": \"1.0.0\",\n    \"code\": 7,\n    \"msg\": \"missing network name\"\n}"
    /// );
    /// ```
    pub fn to_json(&self, cni_version: &str) -> String {
        let out = ErrorOut {
            cni_version,
            code: self.code,
            msg: &self.msg,
            details: &self.details,
        };
        super::json::to_pretty_string(&out).unwrap_or_else(|_| {
            // Unreachable in practice (only strings and an integer); keep a
            // valid object rather than printing nothing.
            format!("{{\"code\": {}, \"msg\": \"internal error\"}}", self.code)
        })
    }
}

impl fmt::Display for Error {
    /// `msg`, then `; details` when there are details (libcni's format).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl std::error::Error for Error {}

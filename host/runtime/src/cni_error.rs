//! CNI errors the host itself reports (before, around or instead of the
//! plugin's own output).
//!
//! A runtime reads a plugin's failure as a JSON object on stdout and a
//! non-zero exit status. wasmcni keeps that contract for failures that are
//! its own: a missing plugin, a bad `CNI_NETNS`, a trap, a deadline.

use serde::Serialize;

/// The well-known CNI error codes (spec 1.1, "Error"; their numbers from the
/// `cni-spec` crate guest-sdk shares) the host uses, and the
/// wasmcni-specific codes (100 and up, "plugin specific" in the spec) for
/// failures of the sandboxed plugin itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    /// 1: incompatible CNI version.
    IncompatibleVersion = cni_spec::ErrorCode::IncompatibleVersion as u32,
    /// 4: invalid necessary environment variables (e.g. `CNI_NETNS`).
    InvalidEnv = cni_spec::ErrorCode::InvalidEnv as u32,
    /// 5: I/O failure (e.g. reading stdin).
    Io = cni_spec::ErrorCode::Io as u32,
    /// 6: failed to decode content.
    Decode = cni_spec::ErrorCode::Decode as u32,
    /// 7: invalid network config (e.g. `type` names no plugin).
    InvalidConfig = cni_spec::ErrorCode::InvalidConfig as u32,
    /// 11: try again later (a transient condition: another invocation
    /// holds what this one waits for).
    TryAgainLater = cni_spec::ErrorCode::TryAgainLater as u32,
    /// 100: the plugin trapped (a bug in the plugin, or it was stopped).
    PluginTrapped = 100,
    /// 101: the plugin ran past its wall-clock deadline.
    DeadlineExceeded = 101,
    /// 102: the plugin tried to grow its memory past the cap.
    MemoryExceeded = 102,
    /// 103: the plugin component is invalid or imports what wasmcni refuses.
    PluginRefused = 103,
    /// 104: the plugin used up its budget of host calls.
    LimitExceeded = 104,
    /// 105: the policy file is invalid or untrusted.
    PolicyInvalid = 105,
    /// 999: an internal error of wasmcni.
    Internal = cni_spec::ErrorCode::Internal as u32,
}

impl Code {
    /// Whether the plugin could not run, or did not finish, for a reason
    /// of its own or of its policy (refused, trapped, out of time, memory
    /// or host calls, a broken policy), rather than answering an error.
    pub fn plugin_could_not_run(self) -> bool {
        matches!(
            self,
            Code::PluginTrapped
                | Code::DeadlineExceeded
                | Code::MemoryExceeded
                | Code::PluginRefused
                | Code::LimitExceeded
                | Code::PolicyInvalid
        )
    }
}

/// A CNI error produced by the host.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{msg}")]
pub struct CniError {
    /// The error code.
    pub code: Code,
    /// A short message.
    pub msg: String,
    /// Longer details, possibly empty.
    pub details: String,
}

#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    code: u32,
    msg: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    details: &'a str,
}

impl CniError {
    /// An error with a code and a message.
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Adds details.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// The JSON a plugin prints on stdout for this error.
    pub fn to_json(&self, cni_version: &str) -> String {
        let wire = Wire {
            cni_version,
            code: self.code as u32,
            msg: &self.msg,
            details: &self.details,
        };
        // Serializing a struct of strings and an integer cannot fail.
        serde_json::to_string(&wire)
            .unwrap_or_else(|_| format!(r#"{{"code":{},"msg":"wasmcni error"}}"#, self.code as u32))
    }
}

/// The cniVersion to put in an error: the config's if stdin has one we can
/// read, else the newest we speak (what the reference skel does).
pub fn version_for_errors(stdin: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct V {
        #[serde(rename = "cniVersion", default)]
        cni_version: Option<String>,
    }
    match serde_json::from_slice::<V>(stdin) {
        Ok(V {
            cni_version: Some(v),
        }) if !v.is_empty()
            && v.len() <= 16
            && v.bytes().all(|b| b.is_ascii_digit() || b == b'.') =>
        {
            v
        }
        _ => LATEST_VERSION.to_string(),
    }
}

/// The newest CNI spec version wasmcni speaks.
pub const LATEST_VERSION: &str = cni_spec::LATEST;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_version_code_and_message() {
        let e = CniError::new(
            Code::InvalidEnv,
            "CNI_NETNS \"/x\" is not a network namespace",
        );
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0")).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 4);
        assert_eq!(v["msg"], "CNI_NETNS \"/x\" is not a network namespace");
        assert!(v.get("details").is_none());
    }

    #[test]
    fn error_version_falls_back_to_latest() {
        assert_eq!(version_for_errors(br#"{"cniVersion":"0.4.0"}"#), "0.4.0");
        assert_eq!(version_for_errors(b"not json"), LATEST_VERSION);
        assert_eq!(
            version_for_errors(br#"{"cniVersion":"<script>"}"#),
            LATEST_VERSION
        );
        assert_eq!(version_for_errors(br#"{"cniVersion":""}"#), LATEST_VERSION);
    }
}

//! The audit log: one JSON line per capability call, allowed or denied,
//! and per undo step.
//!
//! Each record is written as the call returns, in one `write` to a file
//! opened with `O_APPEND`, so concurrent invocations never interleave
//! within a line and a killed invocation leaves the records of what it did. The sink is `$WASMCNI_AUDIT`: `off`,
//! `stderr`, or a file path; by default [`DEFAULT_AUDIT_FILE`]. A sink that
//! cannot be written is reported on stderr; the call's result stands.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where audit records go when `$WASMCNI_AUDIT` is unset.
pub const DEFAULT_AUDIT_FILE: &str = "/var/log/wasmcni/audit.jsonl";

/// Where audit records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// Nowhere.
    Off,
    /// wasmcni's stderr.
    Stderr,
    /// Appended to a file (created 0600, its directory 0700).
    File(PathBuf),
}

impl Sink {
    /// The sink `$WASMCNI_AUDIT` names.
    pub fn from_env() -> Sink {
        match &crate::config::get().audit {
            None => Sink::File(PathBuf::from(DEFAULT_AUDIT_FILE)),
            Some(v) if v.as_os_str() == "off" => Sink::Off,
            Some(v) if v.as_os_str() == "stderr" => Sink::Stderr,
            Some(v) => Sink::File(v.clone()),
        }
    }
}

/// Who is calling: the same for every record of an invocation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Identity {
    /// Plugin name.
    pub plugin: String,
    /// Plugin sha256.
    pub sha256: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_COMMAND`.
    pub command: String,
}

/// What became of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Outcome {
    /// Done.
    Ok,
    /// Refused by policy or an invariant; no side effect.
    Denied {
        /// Why.
        reason: String,
    },
    /// Refused by a limit; no side effect.
    LimitExceeded {
        /// Which.
        reason: String,
    },
    /// Failed (the kernel's errno, or an argument wasmcni rejected).
    Error {
        /// The WIT error-code.
        error: String,
        /// The errno, when the kernel said so.
        #[serde(skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
    },
}

#[derive(Serialize)]
struct Record<'a> {
    time: String,
    #[serde(flatten)]
    who: &'a Identity,
    call: &'a str,
    args: &'a Value,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

/// One record as read back from an audit log (`wasmcni policy suggest`,
/// `wasmcni try`): the fields [`Audit::record`] writes, flattened as there.
/// Fields it does not know are kept in `extra` (`wasmcni try` adds
/// `node-links`), so a record written back keeps them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Logged {
    /// When (RFC 3339).
    pub time: String,
    /// Plugin name.
    pub plugin: String,
    /// Plugin sha256.
    pub sha256: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_COMMAND`.
    pub command: String,
    /// `interface.function`.
    pub call: String,
    /// The call's arguments, as audited.
    pub args: Value,
    /// `ok`, `denied`, `limit-exceeded` or `error`.
    pub outcome: String,
    /// Why it was denied or limited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The WIT error-code of an `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The errno of an `error`, when the kernel said so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// Any other field.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// Reads the records of an audit log (JSON lines). A line that is not a
/// record is skipped and counted (a log a killed invocation cut short
/// ends in half a line); returns the records and how many lines were
/// skipped.
pub fn read_log(text: &str) -> (Vec<Logged>, usize) {
    let mut out = Vec::new();
    let mut skipped = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Logged>(line) {
            Ok(r) if !r.call.is_empty() => out.push(r),
            _ => skipped += 1,
        }
    }
    (out, skipped)
}

/// The audit log of one invocation.
#[derive(Debug)]
pub struct Audit {
    who: Identity,
    sink: Sink,
    file: Option<std::fs::File>,
    /// Why the log cannot be written (said once on stderr; the runtime
    /// also reads it in a failed call's error, [`Audit::failure`]).
    broken: Option<String>,
}

impl Audit {
    /// A log for one invocation.
    pub fn new(who: Identity, sink: Sink) -> Audit {
        Audit {
            who,
            sink,
            file: None,
            broken: None,
        }
    }

    /// Why this log could not be written, once a record failed.
    pub fn failure(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// The plugin the log speaks for.
    pub fn plugin(&self) -> &str {
        &self.who.plugin
    }

    /// Records one call, at once: a record must not depend on the process
    /// living to the end of the invocation (a runtime may kill it).
    pub fn record(&mut self, call: &str, args: &Value, outcome: &Outcome) {
        if self.sink == Sink::Off || self.broken.is_some() {
            return;
        }
        let rec = Record {
            time: humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            who: &self.who,
            call,
            args,
            outcome,
        };
        let mut line = match serde_json::to_vec(&rec) {
            Ok(l) => l,
            Err(_) => return,
        };
        line.push(b'\n');
        if let Err(e) = self.write(&line) {
            // Say so once; the call's result stands.
            let why = match &self.sink {
                Sink::File(path) => {
                    format!("the audit log {} cannot be written: {e}", path.display())
                }
                other => format!("the audit log ({other:?}) cannot be written: {e}"),
            };
            eprintln!("wasmcni: {why}");
            self.broken = Some(why);
        }
    }

    /// One `write` per record to a file opened with `O_APPEND`: records of
    /// concurrent invocations never interleave within a line.
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match &self.sink {
            Sink::Off => Ok(()),
            Sink::Stderr => std::io::stderr().lock().write_all(line),
            Sink::File(path) => {
                if self.file.is_none() {
                    self.file = Some(open_append(path)?);
                }
                match &mut self.file {
                    Some(f) => f.write_all(line),
                    None => Ok(()),
                }
            }
        }
    }
}

fn open_append(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let open = || {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            open()
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_json_line_per_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("audit.jsonl");
        let who = Identity {
            plugin: "p".into(),
            sha256: "00".into(),
            container_id: "c".into(),
            ifname: "eth0".into(),
            command: "ADD".into(),
        };
        let mut a = Audit::new(who, Sink::File(path.clone()));
        a.record(
            "link.set-up",
            &serde_json::json!({"index": 1}),
            &Outcome::Ok,
        );
        a.record(
            "link.delete",
            &serde_json::json!({"index": 2}),
            &Outcome::Denied {
                reason: "not owned".into(),
            },
        );
        let text = std::fs::read_to_string(&path).expect("audit file");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["call"], "link.set-up");
        assert_eq!(lines[0]["outcome"], "ok");
        assert_eq!(lines[1]["outcome"], "denied");
        assert_eq!(lines[1]["reason"], "not owned");
        assert_eq!(lines[1]["container_id"], "c");
        assert!(lines[0]["time"].as_str().is_some_and(|t| t.ends_with('Z')));
        let (read, skipped) = read_log(&format!("{text}{{\"half"));
        assert_eq!((read.len(), skipped), (2, 1));
        assert_eq!(read[1].call, "link.delete");
        assert_eq!(read[1].reason.as_deref(), Some("not owned"));
        assert_eq!(read[0].args["index"], 1);
        assert_eq!(read[0].command, "ADD");
    }
}

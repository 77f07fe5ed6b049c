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
        /// Why, as text.
        reason: String,
        /// What refused it, as a tool reads it ([`Refusal`]).
        #[serde(flatten)]
        refusal: Refusal,
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

/// The W3C trace context a runtime passed (`TRACEPARENT`: libcni passes
/// it to plugins), so that a pod start's trace leads to the privileged
/// operations it caused: in every record of the process (the plugin's,
/// its in-process delegates' and chain members', the undo's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// The trace id (32 lowercase hex digits).
    pub trace_id: String,
    /// The caller's span id (16 lowercase hex digits).
    pub parent_id: String,
}

impl Trace {
    /// A `traceparent` header as W3C Trace Context (level 1) reads it:
    /// `VERSION-TRACEID-PARENTID-FLAGS`, lowercase hex; version `ff`, an
    /// all-zero id or a malformed field gives none (the header is then
    /// ignored, as the standard asks). A later version may add fields
    /// after the flags; version 00 may not.
    pub fn parse(header: &str) -> Option<Trace> {
        let hex = |s: &str, n: usize| {
            s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let mut parts = header.trim().splitn(5, '-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let rest = parts.next();
        let ok = hex(version, 2)
            && version != "ff"
            && hex(trace_id, 32)
            && hex(parent_id, 16)
            && hex(flags, 2)
            && trace_id.bytes().any(|b| b != b'0')
            && parent_id.bytes().any(|b| b != b'0')
            && (rest.is_none() || version != "00");
        ok.then(|| Trace {
            trace_id: trace_id.to_owned(),
            parent_id: parent_id.to_owned(),
        })
    }

    /// The process's `TRACEPARENT`, if valid.
    pub fn from_env() -> Option<Trace> {
        crate::config::get()
            .trace_context
            .iter()
            .find(|(k, _)| *k == "TRACEPARENT")
            .and_then(|(_, v)| Trace::parse(v))
    }
}

#[derive(Serialize)]
struct Record<'a> {
    time: String,
    #[serde(flatten)]
    who: &'a Identity,
    #[serde(flatten)]
    trace: Option<&'a Trace>,
    call: &'a str,
    args: &'a Value,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

/// A refusal as tools read it (`wasmcni policy suggest`, `wasmcni try`),
/// never from its text: `refused-by` is `policy` (a grant field would
/// allow the call: `grant` names it) or `invariant` (no policy entry
/// would); `link` is the node link it is about, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Refusal {
    /// `policy` or `invariant`.
    #[serde(default)]
    pub refused_by: RefusedBy,
    /// The policy field that would allow the call
    /// (`plugins.NAME.host.links`), when `refused-by` is `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    /// The node link the refusal is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkRef>,
}

/// What refused a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusedBy {
    /// The plugin's policy entry: a grant field would allow it.
    Policy,
    /// A wasmcni invariant: no policy entry would allow it.
    #[default]
    Invariant,
}

/// A node link a refusal is about: its name and index then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRef {
    /// Its name.
    pub name: String,
    /// Its index in the node namespace.
    pub index: u32,
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
    /// What refused it (a denial): `policy` or `invariant`.
    #[serde(rename = "refused-by", skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<RefusedBy>,
    /// The policy field that would allow it (a policy's denial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    /// The node link a denial is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkRef>,
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
    trace: Option<Trace>,
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
            trace: Trace::from_env(),
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
            trace: self.trace.as_ref(),
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
                refusal: Refusal::default(),
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
        // No trace context in this process: no trace fields.
        assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);
    }

    #[test]
    fn traceparent_as_w3c_trace_context_reads_it() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let parent = "00f067aa0ba902b7";
        let good = format!("00-{id}-{parent}-01");
        assert_eq!(
            Trace::parse(&good),
            Some(Trace {
                trace_id: id.into(),
                parent_id: parent.into()
            })
        );
        // A later version may carry more fields; version 00 may not.
        assert!(Trace::parse(&format!("01-{id}-{parent}-01-extra")).is_some());
        for bad in [
            format!("00-{id}-{parent}-01-extra"),
            format!("ff-{id}-{parent}-01"),
            format!("00-{}-{parent}-01", "0".repeat(32)),
            format!("00-{id}-{}-01", "0".repeat(16)),
            format!("00-{}-{parent}-01", id.to_uppercase()),
            format!("00-{id}-{parent}"),
            format!("00-{id}x-{parent}-01"),
            format!("0-{id}-{parent}-01"),
            String::new(),
        ] {
            assert_eq!(Trace::parse(&bad), None, "{bad}");
        }
        let t = Trace::parse(&good).expect("valid");
        let who = Identity::default();
        let rec = Record {
            time: String::new(),
            who: &who,
            trace: Some(&t),
            call: "link.set-up",
            args: &Value::Null,
            outcome: &Outcome::Ok,
        };
        let v = serde_json::to_value(&rec).expect("json");
        assert_eq!(
            (v["trace_id"].as_str(), v["parent_id"].as_str()),
            (Some(id), Some(parent))
        );
    }
}

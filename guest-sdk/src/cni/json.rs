//! JSON helpers shared by the CNI modules (crate-private).
//!
//! * [`to_pretty_string`]: four-space indentation, like Go's
//!   `json.MarshalIndent(v, "", "    ")` that libcni uses to print.
//! * [`decode`]: `serde_json::from_value` that also reports *where* in the
//!   document the error is (`ips[0].address`), so error messages can name
//!   the offending field. serde_json only reports a line and column, so the
//!   value is laid out one scalar per line while a table records the path of
//!   every line; the error's line then maps back to a path.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Serialize `value` indented with four spaces (libcni's print format).
pub(crate) fn to_pretty_string<T: Serialize + ?Sized>(
    value: &T,
) -> Result<String, serde_json::Error> {
    let mut buf = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
    value.serialize(&mut ser)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// A decode failure: the path of the offending value (empty for the root)
/// and serde's message without its line/column suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub(crate) path: String,
    pub(crate) message: String,
}

impl DecodeError {
    /// `path: message`, or just `message` at the root; `prefix` is joined
    /// in front of the path (for values taken out of a larger document).
    pub(crate) fn describe(&self, prefix: &str) -> String {
        let path = join_path(prefix, &self.path);
        if path.is_empty() {
            self.message.clone()
        } else {
            format!("field \"{path}\": {}", self.message)
        }
    }
}

fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// Deserialize `value` into `T`, reporting the path of the failing value.
pub(crate) fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    let mut layout = Layout::default();
    layout.write(value, "", 0);
    match serde_json::from_str::<T>(&layout.text) {
        Ok(v) => Ok(v),
        Err(e) => {
            let path = e
                .line()
                .checked_sub(1)
                .and_then(|i| layout.paths.get(i))
                .cloned()
                .unwrap_or_default();
            Err(DecodeError {
                path,
                message: strip_position(&e),
            })
        }
    }
}

/// serde_json's message without the trailing " at line L column C".
pub(crate) fn strip_position(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match full.strip_suffix(&suffix) {
        Some(s) => s.to_string(),
        None => full,
    }
}

/// JSON text with one scalar (or opening bracket) per line, and the JSON
/// path of the value each line belongs to.
#[derive(Default)]
struct Layout {
    text: String,
    paths: Vec<String>,
}

impl Layout {
    fn newline(&mut self, path: &str, depth: usize) {
        self.text.push('\n');
        self.paths.push(path.to_string());
        for _ in 0..depth {
            self.text.push(' ');
        }
    }

    fn write(&mut self, value: &Value, path: &str, depth: usize) {
        if self.paths.is_empty() {
            self.paths.push(path.to_string());
        }
        match value {
            Value::Object(map) if !map.is_empty() => {
                self.text.push('{');
                let mut first = true;
                for (key, child) in map {
                    if !first {
                        self.text.push(',');
                    }
                    first = false;
                    let child_path = join_path(path, key);
                    self.newline(&child_path, depth + 1);
                    self.text.push_str(&Value::String(key.clone()).to_string());
                    self.text.push_str(": ");
                    self.write(child, &child_path, depth + 1);
                }
                self.newline(path, depth);
                self.text.push('}');
            }
            Value::Array(items) if !items.is_empty() => {
                self.text.push('[');
                for (i, child) in items.iter().enumerate() {
                    if i > 0 {
                        self.text.push(',');
                    }
                    let child_path = format!("{path}[{i}]");
                    self.newline(&child_path, depth + 1);
                    self.write(child, &child_path, depth + 1);
                }
                self.newline(path, depth);
                self.text.push(']');
            }
            // Scalars and empty containers: compact JSON, cannot fail.
            other => self.text.push_str(&other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Inner {
        mtu: u32,
        names: Vec<String>,
    }

    #[allow(dead_code)]
    #[derive(Deserialize)]
    struct Outer {
        name: String,
        inner: Vec<Inner>,
    }

    #[test]
    fn decode_reports_nested_path() {
        let v = serde_json::json!({
            "name": "x",
            "inner": [{"mtu": 1, "names": []}, {"mtu": "big", "names": []}]
        });
        let err = decode::<Outer>(&v).err().map(|e| e.describe(""));
        assert_eq!(
            err.as_deref(),
            Some("field \"inner[1].mtu\": invalid type: string \"big\", expected u32")
        );
    }

    #[test]
    fn decode_reports_array_element_and_missing_field() {
        let v = serde_json::json!({"name": "x", "inner": [{"mtu": 1, "names": ["a", 5]}]});
        let err = decode::<Outer>(&v).err().map(|e| e.describe(""));
        assert_eq!(
            err.as_deref(),
            Some("field \"inner[0].names[1]\": invalid type: integer `5`, expected a string")
        );
        let v = serde_json::json!({"inner": []});
        let err = decode::<Outer>(&v).err().map(|e| e.describe("conf"));
        assert_eq!(err.as_deref(), Some("field \"conf\": missing field `name`"));
        let v = serde_json::json!({"name": {"nested": true}, "inner": []});
        let err = decode::<Outer>(&v).err().map(|e| e.describe(""));
        assert_eq!(
            err.as_deref(),
            Some("field \"name\": invalid type: map, expected a string")
        );
    }

    #[test]
    fn pretty_uses_four_spaces() {
        let s = to_pretty_string(&serde_json::json!({"a": [1]})).ok();
        assert_eq!(s.as_deref(), Some("{\n    \"a\": [\n        1\n    ]\n}"));
    }
}

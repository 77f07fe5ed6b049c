//! JSON helpers shared by the CNI modules (crate-private).
//!
//! * [`to_pretty_string`]: four-space indentation, like Go's
//!   `json.MarshalIndent(v, "", "    ")` that libcni uses to print.
//! * [`decode`]: decoding as Go's `encoding/json` does (the [`gojson`]
//!   crate: keys match fields exactly, then case-insensitively; `null` is
//!   absent; unknown keys ignored), reporting *where* in the document the
//!   error is (`ips[0].address`), so error messages can name the offending
//!   field. The reference plugins and libcni decode every config,
//!   `runtimeConfig`, `prevResult` and IPAM section that way, and runtimes
//!   rely on it: containerd sends capability arguments with Go field names
//!   (`{"HostPort": 8080, ...}`).

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

/// Deserialize `value` into `T` with Go's key matching, reporting the
/// path of the failing value.
pub(crate) fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    gojson::from_value::<T>(value).map_err(|e| DecodeError {
        path: e.path(),
        message: e.message().to_owned(),
    })
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

//! The operator's trust file (`/etc/wasmcni/trust.json` by default):
//! which keys the node trusts, and which plugins must be signed by which.
//!
//! ```json
//! {
//!   "keys": {"acme": "/etc/wasmcni/keys/acme.pub",
//!            "ours": "-----BEGIN PUBLIC KEY-----\n…"},
//!   "requireSignature": true,
//!   "plugins": {"acme-cni": {"signedBy": ["acme"]}}
//! }
//! ```
//!
//! - `keys`: each trusted key by a name of the operator's choosing, as a
//!   PEM public key (cosign's `cosign.pub`) or the path of one (relative to
//!   the trust file's directory).
//! - `plugins.NAME.signedBy`: the plugin installed as NAME must be signed
//!   by one of these keys.
//! - `requireSignature`: every other plugin pulled must be signed by one of
//!   the keys.
//! - Otherwise only the digest is checked (always).
//!
//! The file is the operator's: it is read strictly (an unknown key, a key
//! name no entry defines, a requirement with no key to meet it are
//! errors, naming what is wrong), and nothing a publisher ships changes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cosign::TrustedKey;

/// The trust file's default path.
pub const DEFAULT_TRUST_FILE: &str = "/etc/wasmcni/trust.json";

/// What a pull requires of an artifact besides its digest.
#[derive(Clone, Debug)]
pub enum Requirement {
    /// Its digest only.
    Digest,
    /// A signature by one of these keys.
    SignedBy(Vec<TrustedKey>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    keys: BTreeMap<String, String>,
    #[serde(default)]
    require_signature: bool,
    #[serde(default)]
    plugins: BTreeMap<String, PluginTrust>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PluginTrust {
    signed_by: Vec<String>,
}

/// The trust file, read and checked.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    keys: Vec<TrustedKey>,
    require_signature: bool,
    plugins: BTreeMap<String, Vec<String>>,
    /// Where it was read from (for messages).
    pub source: Option<PathBuf>,
}

/// A trust file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("trust file {path}: {why}")]
pub struct TrustError {
    pub path: String,
    pub why: String,
}

impl Trust {
    /// Reads the trust file at `path`.
    pub fn read(path: &Path) -> Result<Trust, TrustError> {
        let err = |why: String| TrustError {
            path: path.display().to_string(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let mut t =
            Trust::parse(&text, path.parent().unwrap_or(Path::new("/"))).map_err(|e| err(e.why))?;
        t.source = Some(path.to_owned());
        Ok(t)
    }

    /// The trust file's text; key paths are relative to `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Trust, TrustError> {
        let err = |why: String| TrustError {
            path: "(given)".into(),
            why,
        };
        let f: File = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
        let mut keys = Vec::new();
        for (name, value) in &f.keys {
            let pem = if value.trim_start().starts_with("-----BEGIN") {
                value.clone()
            } else {
                let p = dir.join(value);
                std::fs::read_to_string(&p)
                    .map_err(|e| err(format!("keys.{name}: {}: {e}", p.display())))?
            };
            keys.push(
                TrustedKey::from_pem(name, &pem).map_err(|e| err(format!("keys.{name}: {e}")))?,
            );
        }
        if f.require_signature && keys.is_empty() {
            return Err(err(
                "requireSignature is true but no key is trusted (keys is empty)".into(),
            ));
        }
        let mut plugins = BTreeMap::new();
        for (plugin, p) in f.plugins {
            if p.signed_by.is_empty() {
                return Err(err(format!("plugins.{plugin}.signedBy names no key")));
            }
            for k in &p.signed_by {
                if !f.keys.contains_key(k) {
                    return Err(err(format!(
                        "plugins.{plugin}.signedBy names {k:?}, which keys does not define"
                    )));
                }
            }
            plugins.insert(plugin, p.signed_by);
        }
        Ok(Trust {
            keys,
            require_signature: f.require_signature,
            plugins,
            source: None,
        })
    }

    /// What a pull of the plugin to be installed as `name` (none: a pull
    /// for no plugin name, `wasmcni pull`) requires.
    pub fn requirement(&self, name: Option<&str>) -> Requirement {
        if let Some(names) = name.and_then(|n| self.plugins.get(n)) {
            return Requirement::SignedBy(
                self.keys
                    .iter()
                    .filter(|k| names.contains(&k.name))
                    .cloned()
                    .collect(),
            );
        }
        if self.require_signature {
            Requirement::SignedBy(self.keys.clone())
        } else {
            Requirement::Digest
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem(seed: u8) -> String {
        let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).expect("scalar");
        use p256::pkcs8::EncodePublicKey;
        sk.verifying_key()
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .expect("pem")
    }

    fn names(r: Requirement) -> Vec<String> {
        match r {
            Requirement::Digest => Vec::new(),
            Requirement::SignedBy(k) => k.into_iter().map(|k| k.name).collect(),
        }
    }

    #[test]
    fn a_plugin_needs_its_own_keys_else_any_when_all_must_be_signed() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("b.pub"), pem(2)).expect("write");
        let text = serde_json::json!({
            "keys": {"a": pem(1), "b": "b.pub"},
            "requireSignature": true,
            "plugins": {"foo": {"signedBy": ["b"]}},
        })
        .to_string();
        let t = Trust::parse(&text, dir.path()).expect("valid");
        assert_eq!(names(t.requirement(Some("foo"))), ["b"]);
        assert_eq!(names(t.requirement(Some("bar"))), ["a", "b"]);
        assert_eq!(names(t.requirement(None)), ["a", "b"]);
        let t = Trust::parse(
            &serde_json::json!({"keys": {"a": pem(1)}, "plugins": {"foo": {"signedBy": ["a"]}}})
                .to_string(),
            dir.path(),
        )
        .expect("valid");
        assert_eq!(names(t.requirement(Some("foo"))), ["a"]);
        assert!(matches!(t.requirement(Some("bar")), Requirement::Digest));
        assert!(matches!(
            Trust::default().requirement(Some("foo")),
            Requirement::Digest
        ));
    }

    #[test]
    fn what_the_operator_got_wrong_is_named() {
        let dir = std::path::Path::new("/nonexistent");
        for (text, says) in [
            (
                serde_json::json!({"requireSignature": true}),
                "no key is trusted",
            ),
            (
                serde_json::json!({"keys": {"a": pem(1)}, "plugins": {"f": {"signedBy": ["x"]}}}),
                "plugins.f.signedBy names \"x\"",
            ),
            (
                serde_json::json!({"keys": {"a": pem(1)}, "plugins": {"f": {"signedBy": []}}}),
                "names no key",
            ),
            (
                serde_json::json!({"keys": {"a": "nope.pub"}}),
                "keys.a: /nonexistent/nope.pub",
            ),
            (
                serde_json::json!({"keys": {"a": "-----BEGIN PUBLIC KEY-----\nxx\n-----END PUBLIC KEY-----\n"}}),
                "keys.a: not a PEM public key",
            ),
            (
                serde_json::json!({"requireSignatures": true}),
                "unknown field `requireSignatures`",
            ),
        ] {
            let e = Trust::parse(&text.to_string(), dir).expect_err("invalid");
            assert!(e.why.contains(says), "{text}: {e}");
        }
    }
}

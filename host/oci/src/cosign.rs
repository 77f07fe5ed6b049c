//! cosign's key-based signatures, as `cosign sign --key` writes them
//! (without a transparency log) and `cosign verify --key` checks them
//! offline: the "simple signing" payload
//!
//! ```json
//! {"critical": {"identity": {"docker-reference": "REGISTRY/REPO"},
//!               "image": {"docker-manifest-digest": "sha256:…"},
//!               "type": "cosign container image signature"},
//!  "optional": null}
//! ```
//!
//! signed with ECDSA P-256 over its SHA-256, the DER signature base64 in
//! the layer's `dev.cosignproject.cosign/signature` annotation, the layer
//! in a manifest tagged `sha256-<hex>.sig` in the signed artifact's
//! repository.
//!
//! What binds: the signature is over the payload's bytes, and the payload
//! names the manifest digest and the repository. The digest must be the
//! one pulled, and the repository's path the one asked for (its registry
//! may differ: an artifact mirrored to another registry keeps its
//! signatures): a publisher's signature of another of its plugins, copied
//! beside this one, does not count for it. A tag can still be pointed at
//! an older signed build of the same repository (a rollback): pin the
//! digest to exclude that.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{DerSignature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey};

/// The signature layer's media type.
pub const SIMPLESIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
pub const COSIGN_TYPE: &str = "cosign container image signature";
/// A payload larger than this is not read (cosign's are ~250 bytes).
pub const MAX_PAYLOAD: u64 = 64 * 1024;

/// A key that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("not a PEM public key (SPKI, ECDSA P-256): {0}")]
    Public(String),
    #[error("not a PEM private key (PKCS#8 or cosign's encrypted key, ECDSA P-256): {0}")]
    Private(String),
    #[error(
        "the cosign key could not be decrypted: wrong password (COSIGN_PASSWORD) or a corrupt key"
    )]
    Password,
}

/// A public key the operator trusts, by the name the trust file gives it.
#[derive(Clone, Debug)]
pub struct TrustedKey {
    pub name: String,
    key: VerifyingKey,
}

impl TrustedKey {
    /// Reads a PEM public key (`cosign.pub`, or `openssl ec -pubout`).
    pub fn from_pem(name: &str, pem: &str) -> Result<TrustedKey, KeyError> {
        let key =
            VerifyingKey::from_public_key_pem(pem).map_err(|e| KeyError::Public(e.to_string()))?;
        Ok(TrustedKey {
            name: name.to_owned(),
            key,
        })
    }

    /// Whether `signature` (base64 DER) is this key's over `payload`.
    pub fn verifies(&self, payload: &[u8], signature_b64: &str) -> bool {
        let Some(sig) = B64
            .decode(signature_b64.trim())
            .ok()
            .and_then(|d| DerSignature::try_from(d.as_slice()).ok())
        else {
            return false;
        };
        self.key.verify(payload, &sig).is_ok()
    }
}

/// A private key to sign with.
pub struct SignKey(SigningKey);

impl SignKey {
    /// Reads a PEM private key: PKCS#8 (`openssl genpkey -algorithm EC
    /// -pkeyopt ec_paramgen_curve:P-256`), or the encrypted key `cosign
    /// generate-key-pair` writes (`ENCRYPTED SIGSTORE PRIVATE KEY` or
    /// `ENCRYPTED COSIGN PRIVATE KEY`), with `password`.
    pub fn from_pem(pem: &str, password: &[u8]) -> Result<SignKey, KeyError> {
        if pem.contains("ENCRYPTED SIGSTORE PRIVATE KEY")
            || pem.contains("ENCRYPTED COSIGN PRIVATE KEY")
        {
            return decrypt_cosign_key(pem, password).map(SignKey);
        }
        SigningKey::from_pkcs8_pem(pem)
            .map(SignKey)
            .map_err(|e| KeyError::Private(e.to_string()))
    }

    /// The signature (base64 DER) of `payload`.
    pub fn sign(&self, payload: &[u8]) -> String {
        let sig: p256::ecdsa::Signature = self.0.sign(payload);
        B64.encode(sig.to_der().as_bytes())
    }

    /// Its public key, PEM.
    pub fn public_pem(&self) -> String {
        use p256::pkcs8::EncodePublicKey;
        self.0
            .verifying_key()
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .unwrap_or_default()
    }
}

/// The simple-signing payload for the manifest `digest` of `repository`
/// (`REGISTRY/REPO`), as cosign writes it.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": COSIGN_TYPE,
        },
        "optional": null,
    }))
    .unwrap_or_default()
}

/// Why one signature layer did not count.
#[derive(Debug, PartialEq)]
pub enum Rejected {
    /// No trusted key verifies it.
    NoTrustedKey,
    /// Verified, but the payload is not a cosign image signature.
    NotAnImageSignature,
    /// Verified, but it signs another manifest.
    OtherDigest(String),
    /// Verified, but it signs an artifact of another repository.
    OtherRepository(String),
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejected::NoTrustedKey => write!(f, "made with none of the keys trusted for it"),
            Rejected::NotAnImageSignature => write!(f, "not a cosign container image signature"),
            Rejected::OtherDigest(d) => write!(f, "signs another manifest ({d:?})"),
            Rejected::OtherRepository(r) => {
                write!(f, "signs an artifact of another repository ({r:?})")
            }
        }
    }
}

/// The name of the first of `keys` whose signature `signature_b64` over
/// `payload` is valid, where the payload signs `digest` in a repository
/// whose path (after the registry) is `repository`.
pub fn check(
    payload: &[u8],
    signature_b64: &str,
    digest: &str,
    repository: &str,
    keys: &[TrustedKey],
) -> Result<String, Rejected> {
    let key = keys
        .iter()
        .find(|k| k.verifies(payload, signature_b64))
        .ok_or(Rejected::NoTrustedKey)?;
    let p: serde_json::Value =
        serde_json::from_slice(payload).map_err(|_| Rejected::NotAnImageSignature)?;
    if p.pointer("/critical/type").and_then(|v| v.as_str()) != Some(COSIGN_TYPE) {
        return Err(Rejected::NotAnImageSignature);
    }
    match p
        .pointer("/critical/image/docker-manifest-digest")
        .and_then(|v| v.as_str())
    {
        Some(d) if d == digest => {}
        Some(d) => return Err(Rejected::OtherDigest(d.to_owned())),
        None => return Err(Rejected::NotAnImageSignature),
    }
    let named = p
        .pointer("/critical/identity/docker-reference")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    // REGISTRY/PATH: the path, read as a reference is.
    let path = match named.split_once('/') {
        Some((first, rest)) if crate::names_registry(first) => rest,
        _ => named,
    };
    if path != repository {
        return Err(Rejected::OtherRepository(named.to_owned()));
    }
    Ok(key.name.clone())
}

/// cosign's encrypted private key: base64 JSON `{kdf: {name: scrypt,
/// params: {N, r, p}, salt}, cipher: {name: nacl/secretbox, nonce},
/// ciphertext}` around a PKCS#8 DER key.
fn decrypt_cosign_key(pem: &str, password: &[u8]) -> Result<SigningKey, KeyError> {
    let bad = |what: &str| KeyError::Private(format!("cosign key: {what}"));
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let json: serde_json::Value = B64
        .decode(body.trim())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| bad("not base64 JSON"))?;
    let s = |p: &str| {
        json.pointer(p)
            .and_then(|v| v.as_str())
            .ok_or_else(|| bad(p))
    };
    let n = |p: &str| {
        json.pointer(p)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| bad(p))
    };
    if s("/kdf/name")? != "scrypt" || s("/cipher/name")? != "nacl/secretbox" {
        return Err(bad("an encryption other than scrypt + nacl/secretbox"));
    }
    let cost = n("/kdf/params/N")?;
    if !cost.is_power_of_two() || cost < 2 {
        return Err(bad("scrypt's N is not a power of two"));
    }
    let log_n = cost.trailing_zeros() as u8;
    let r = u32::try_from(n("/kdf/params/r")?).map_err(|_| bad("scrypt's r"))?;
    let p = u32::try_from(n("/kdf/params/p")?).map_err(|_| bad("scrypt's p"))?;
    let params = scrypt::Params::new(log_n, r, p, 32).map_err(|e| bad(&e.to_string()))?;
    let salt = B64.decode(s("/kdf/salt")?).map_err(|_| bad("salt"))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(password, &salt, &params, &mut key).map_err(|e| bad(&e.to_string()))?;
    use crypto_secretbox::aead::{Aead, KeyInit};
    let nonce = B64.decode(s("/cipher/nonce")?).map_err(|_| bad("nonce"))?;
    if nonce.len() != 24 {
        return Err(bad("nonce"));
    }
    let sealed = B64
        .decode(s("/ciphertext")?)
        .map_err(|_| bad("ciphertext"))?;
    let der = crypto_secretbox::XSalsa20Poly1305::new(&key.into())
        .decrypt(nonce.as_slice().into(), sealed.as_slice())
        .map_err(|_| KeyError::Password)?;
    SigningKey::from_pkcs8_der(&der).map_err(|e| KeyError::Private(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> SignKey {
        // A fixed scalar: deterministic, valid (less than the order).
        SignKey(SigningKey::from_slice(&[7u8; 32]).expect("a valid scalar"))
    }

    #[test]
    fn a_signature_verifies_with_its_key_and_binds_the_digest() {
        let sk = fresh();
        let key = TrustedKey::from_pem("acme", &sk.public_pem()).expect("public key");
        let d = "sha256:aaaa";
        let p = payload("127.0.0.1:5000/p", d);
        let sig = sk.sign(&p);
        assert_eq!(
            check(&p, &sig, d, "p", std::slice::from_ref(&key)),
            Ok("acme".into())
        );
        assert_eq!(
            check(&p, &sig, "sha256:bbbb", "p", std::slice::from_ref(&key)),
            Err(Rejected::OtherDigest(d.into()))
        );
        let mut other = p.clone();
        other[10] ^= 1;
        assert_eq!(
            check(&other, &sig, d, "p", &[key]),
            Err(Rejected::NoTrustedKey)
        );
    }

    #[test]
    fn a_signature_counts_for_its_own_repository_on_any_registry() {
        let sk = fresh();
        let key = TrustedKey::from_pem("acme", &sk.public_pem()).expect("public key");
        let keys = std::slice::from_ref(&key);
        let p = payload("ghcr.io/acme/foo", "sha256:aa");
        let sig = sk.sign(&p);
        assert_eq!(
            check(&p, &sig, "sha256:aa", "acme/foo", keys),
            Ok("acme".into())
        );
        assert_eq!(
            check(&p, &sig, "sha256:aa", "acme/bar", keys),
            Err(Rejected::OtherRepository("ghcr.io/acme/foo".into()))
        );
        let p = payload("localhost:5000/acme/foo", "sha256:aa");
        assert_eq!(
            check(&p, &sk.sign(&p), "sha256:aa", "acme/foo", keys),
            Ok("acme".into())
        );
    }

    #[test]
    fn another_key_or_garbage_is_no_signature() {
        let sk = fresh();
        let other = SignKey(SigningKey::from_slice(&[9u8; 32]).expect("a valid scalar"));
        let key = TrustedKey::from_pem("other", &other.public_pem()).expect("public key");
        let p = payload("r.io/p", "sha256:aa");
        assert_eq!(
            check(
                &p,
                &sk.sign(&p),
                "sha256:aa",
                "p",
                std::slice::from_ref(&key)
            ),
            Err(Rejected::NoTrustedKey)
        );
        assert_eq!(
            check(
                &p,
                "not base64!",
                "sha256:aa",
                "p",
                std::slice::from_ref(&key)
            ),
            Err(Rejected::NoTrustedKey)
        );
        assert_eq!(
            check(&p, &B64.encode(b"junk"), "sha256:aa", "p", &[key]),
            Err(Rejected::NoTrustedKey)
        );
    }

    #[test]
    fn a_signed_payload_of_another_kind_does_not_count() {
        let sk = fresh();
        let key = TrustedKey::from_pem("acme", &sk.public_pem()).expect("public key");
        let p = br#"{"critical":{"type":"something else","image":{"docker-manifest-digest":"sha256:aa"}}}"#;
        assert_eq!(
            check(p, &sk.sign(p), "sha256:aa", "p", &[key]),
            Err(Rejected::NotAnImageSignature)
        );
    }

    #[test]
    fn keys_that_are_not_p256_pem_are_refused_by_name() {
        assert!(matches!(
            TrustedKey::from_pem("k", "nonsense"),
            Err(KeyError::Public(_))
        ));
        assert!(matches!(
            SignKey::from_pem("nonsense", b""),
            Err(KeyError::Private(_))
        ));
        let broken = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nbm90IGpzb24=\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        assert!(matches!(
            SignKey::from_pem(broken, b""),
            Err(KeyError::Private(_))
        ));
    }

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/oci-keys")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn a_key_cosign_s_format_encrypts_is_read_with_its_password_only() {
        let sk = SignKey::from_pem(&fixture("cosign.key"), b"spike").expect("the fixture key");
        let public =
            TrustedKey::from_pem("fixture", &fixture("cosign.pub")).expect("its public key");
        let p = payload("r.io/p", "sha256:aa");
        assert_eq!(
            check(&p, &sk.sign(&p), "sha256:aa", "p", &[public]),
            Ok("fixture".into())
        );
        let other = TrustedKey::from_pem("other", &fixture("other.pub")).expect("another key");
        assert_eq!(
            check(&p, &sk.sign(&p), "sha256:aa", "p", &[other]),
            Err(Rejected::NoTrustedKey)
        );
        assert!(matches!(
            SignKey::from_pem(&fixture("cosign.key"), b"wrong"),
            Err(KeyError::Password)
        ));
    }
}

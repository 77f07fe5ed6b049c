//! Plugins as OCI artifacts: `wasmcni pull`, `wasmcni push` and
//! `wasmcni install --plugin oci://…`.
//!
//! # The layout
//! A component is published in the CNCF TAG-Runtime wasm artifact layout
//! (what `wkg`, Spin and wasmCloud write): an OCI image manifest whose
//! config has media type `application/vnd.wasm.config.v0+json` and whose
//! one layer is the component, `application/wasm`. The layer's digest is
//! the component's sha256: the pin a policy entry already carries.
//!
//! # What is checked, always
//! A reference by tag is resolved to its manifest digest first; from then
//! on everything is fetched by digest and checked against it here (not
//! only in the client): the manifest's bytes against the manifest digest,
//! the component's bytes against the layer's digest. A manifest of
//! another layout, a second layer, or a component larger than
//! [`MAX_COMPONENT`] is refused before its bytes are read.
//!
//! # Signatures
//! When the operator's trust file ([`trust`]) requires it, a cosign
//! signature ([`cosign`]) of the manifest digest by one of the keys it
//! names, verified offline (no transparency log, no network beyond the
//! registry). What a publisher puts in the artifact (annotations, a
//! bundled policy) grants nothing: authority comes from the operator's
//! policy only, and the policy entry pins the component's sha256.
//!
//! # Bounds
//! Every registry operation runs under one deadline ([`Registries::timeout`]),
//! so a registry that is down, or accepts and never answers, fails the
//! command with an error naming it; nothing is written before everything
//! is verified.

pub mod cosign;
pub mod trust;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::Digest;

pub use cosign::{SignKey, TrustedKey};
pub use trust::{Requirement, Trust};

/// The wasm layout's config media type.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The wasm layout's layer media type.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The largest component pulled (what `install --plugin` reads from a file).
pub const MAX_COMPONENT: u64 = 64 << 20;
/// The largest manifest read.
pub const MAX_MANIFEST: usize = 1 << 20;
/// Signature layers read of one `.sig` manifest, at most.
pub const MAX_SIGNATURES: usize = 16;
/// The deadline of one command's registry operations, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How to reach registries.
#[derive(Clone, Debug)]
pub struct Registries {
    /// Registries (`HOST:PORT`) spoken to over plain HTTP; every other one
    /// over HTTPS.
    pub plain_http: Vec<String>,
    /// Extra CA certificates (PEM) for HTTPS registries.
    pub ca_pem: Vec<Vec<u8>>,
    /// The deadline of one command's registry operations.
    pub timeout: Duration,
    /// Credentials (user, password) by registry (`HOST[:PORT]`, as in a
    /// reference); a registry not listed is read anonymously.
    pub credentials: BTreeMap<String, (String, String)>,
}

impl Default for Registries {
    fn default() -> Self {
        Registries {
            plain_http: Vec::new(),
            ca_pem: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            credentials: BTreeMap::new(),
        }
    }
}

/// The credentials of a containers auth file (podman's `auth.json`,
/// docker's `config.json`): `auths.REGISTRY.auth`, base64 `user:password`.
/// Entries without one (credential helpers, identity tokens) are skipped.
pub fn credentials_from_auth_file(
    text: &str,
) -> Result<BTreeMap<String, (String, String)>, String> {
    use base64::Engine;
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for (registry, entry) in v["auths"].as_object().into_iter().flatten() {
        let Some(auth) = entry["auth"].as_str() else {
            continue;
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("auths.{registry}.auth: {e}"))?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| format!("auths.{registry}.auth: not UTF-8"))?;
        let (user, pass) = decoded
            .split_once(':')
            .ok_or_else(|| format!("auths.{registry}.auth: not user:password"))?;
        // docker writes Docker Hub as a URL; a reference names a host.
        let host = registry
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        // A reference names Docker Hub docker.io; docker's file, index.docker.io.
        if host == "index.docker.io" {
            out.insert("docker.io".to_owned(), (user.to_owned(), pass.to_owned()));
        }
        out.insert(host, (user.to_owned(), pass.to_owned()));
    }
    Ok(out)
}

/// A component pulled and verified.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The reference as given, fully qualified (`REGISTRY/REPO:TAG`, with
    /// `@DIGEST` if it was given one).
    pub reference: String,
    /// The manifest's digest (`sha256:…`): what the reference resolved to.
    pub digest: String,
    /// The component.
    pub component: Vec<u8>,
    /// Its sha256, hex (the layer's digest without `sha256:`).
    pub sha256: String,
    /// The name (in the trust file) of the key whose signature was
    /// verified, when one was required.
    pub signer: Option<String>,
}

/// Why a pull or push failed. Each names the reference, and the digest
/// once it is known.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{reference:?} is not an OCI reference (REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]): {why}"
    )]
    BadReference { reference: String, why: String },
    #[error("{reference}: no such artifact in the registry ({what} not found)")]
    NotFound { reference: String, what: String },
    #[error("{reference}: the registry {registry} did not answer within {secs} s")]
    Timeout {
        reference: String,
        registry: String,
        secs: u64,
    },
    #[error("{reference}: the registry {registry}: {why}")]
    Registry {
        reference: String,
        registry: String,
        why: String,
    },
    #[error("{reference} ({digest}): its content does not match its digest: {why}")]
    Tampered {
        reference: String,
        digest: String,
        why: String,
    },
    #[error("{reference} ({digest}) is not a wasm component artifact: {why}")]
    NotAComponent {
        reference: String,
        digest: String,
        why: String,
    },
    #[error("{reference} ({digest}): no valid signature by {keys}: {why}")]
    Unsigned {
        reference: String,
        digest: String,
        keys: String,
        why: String,
    },
    #[error("{0}")]
    Other(String),
}

/// `oci://REGISTRY/REPO:TAG` or `REGISTRY/REPO:TAG` (either with
/// `@sha256:…`), parsed. A reference must name its registry: no default
/// registry is assumed for a plugin.
pub fn parse_reference(text: &str) -> Result<Reference, Error> {
    let bare = text.strip_prefix("oci://").unwrap_or(text);
    let bad = |why: String| Error::BadReference {
        reference: text.to_owned(),
        why,
    };
    let first = bare.split('/').next().unwrap_or_default();
    if !bare.contains('/') || !names_registry(first) {
        return Err(bad(
            "it names no registry (a host name with a dot or a port, or localhost)".into(),
        ));
    }
    let r: Reference = bare.parse().map_err(|e| bad(format!("{e}")))?;
    if let Some(d) = r.digest() {
        if !is_sha256(d) {
            return Err(bad(format!("digest {d:?} is not sha256:<64 hex digits>")));
        }
    }
    Ok(r)
}

/// Whether `first`, a reference's part before its first `/`, is a
/// registry (a host name with a dot or a port, or localhost), as the
/// containers tools read a reference; else it is the repository's.
pub fn names_registry(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost"
}

fn is_sha256(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// One command's connection to registries: a client and the runtime it
/// runs on (one thread; the commands are one pull or push at a time).
pub struct Session {
    client: Client,
    rt: tokio::runtime::Runtime,
    timeout: Duration,
    credentials: BTreeMap<String, (String, String)>,
}

impl Session {
    pub fn new(registries: &Registries) -> Result<Session, Error> {
        // reqwest is built without a TLS provider of its own: ring, once
        // per process (a second install is refused, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(registries.plain_http.clone()),
            extra_root_certificates: registries
                .ca_pem
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            // The deadline bounds the rest (a registry that accepts and
            // never answers, or trickles): one error for all of it.
            connect_timeout: Some(registries.timeout.min(Duration::from_secs(10))),
            read_timeout: None,
            // An index (a multi-platform image) is no component: refused,
            // not resolved to some platform's manifest.
            platform_resolver: None,
            ..Default::default()
        };
        // Not Client::new: it falls back to a default client (dropping
        // --plain-http, the CA and the timeouts) when this one cannot be
        // built, and that one panics where the system has no CA
        // certificates (a FROM scratch image).
        let client = Client::try_from(config).map_err(|e| {
            Error::Other(format!(
                "building the registry client: {}{}",
                chain(&e),
                if registries.ca_pem.is_empty() {
                    " (a system without CA certificates, as a FROM scratch image: give \
                     --registry-ca FILE, e.g. the node's /etc/ssl/certs/ca-certificates.crt)"
                } else {
                    ""
                }
            ))
        })?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Other(format!("starting the registry client: {e}")))?;
        Ok(Session {
            client,
            rt,
            timeout: registries.timeout,
            credentials: registries.credentials.clone(),
        })
    }

    /// How to authenticate to `r`'s registry.
    fn auth(&self, r: &Reference) -> RegistryAuth {
        match self.credentials.get(r.registry()) {
            Some((u, p)) => RegistryAuth::Basic(u.clone(), p.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// Runs `f` under the session's deadline.
    fn run<T>(&self, r: &Reference, f: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        self.rt
            .block_on(async { tokio::time::timeout(self.timeout, f).await })
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    reference: r.whole(),
                    registry: r.resolve_registry().to_owned(),
                    secs: self.timeout.as_secs(),
                })
            })
    }

    /// Resolves `reference`, verifies it as `requirement` says, and pulls
    /// the component.
    pub fn pull(&self, reference: &str, requirement: &Requirement) -> Result<Pulled, Error> {
        let r = parse_reference(reference)?;
        self.run(&r, self.pull_async(&r, requirement))
    }

    async fn pull_async(&self, r: &Reference, requirement: &Requirement) -> Result<Pulled, Error> {
        let auth = self.auth(r);
        let whole = r.whole();
        let digest = match r.digest() {
            Some(d) => d.to_owned(),
            None => {
                let d = self
                    .client
                    .fetch_manifest_digest(r, &auth)
                    .await
                    .map_err(|e| registry_error(r, e, "the manifest"))?;
                if !is_sha256(&d) {
                    return Err(Error::Registry {
                        reference: whole,
                        registry: r.resolve_registry().to_owned(),
                        why: format!("it gave the digest {d:?}, not sha256:<64 hex digits>"),
                    });
                }
                d
            }
        };
        let pinned = Reference::with_digest(
            r.registry().to_owned(),
            r.repository().to_owned(),
            digest.clone(),
        );
        let signer = match requirement {
            Requirement::Digest => None,
            Requirement::SignedBy(keys) => Some(self.verify(r, &digest, keys).await?),
        };
        let (body, _) = self
            .client
            .pull_manifest_raw(&pinned, &auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(|e| match e {
                OciDistributionError::DigestError(e) => Error::Tampered {
                    reference: whole.clone(),
                    digest: digest.clone(),
                    why: format!("the manifest: {e}"),
                },
                e => registry_error(r, e, &format!("the manifest {digest}")),
            })?;
        let got = sha256_digest(&body);
        if got != digest {
            return Err(Error::Tampered {
                reference: whole,
                digest,
                why: format!("the manifest's bytes have the digest {got}"),
            });
        }
        let not_component = |why: String| Error::NotAComponent {
            reference: whole.clone(),
            digest: digest.clone(),
            why,
        };
        if body.len() > MAX_MANIFEST {
            return Err(not_component(format!("a manifest of {} bytes", body.len())));
        }
        let manifest: OciImageManifest = serde_json::from_slice(&body).map_err(|e| {
            let index = serde_json::from_slice::<serde_json::Value>(&body)
                .is_ok_and(|v| v.get("manifests").is_some());
            not_component(if index {
                "an image index (several platforms' images), not one component".to_owned()
            } else {
                format!("not an OCI image manifest: {e}")
            })
        })?;
        let layer = component_layer(&manifest).map_err(not_component)?;
        let mut out = Capped::new(layer.size as usize);
        let got = self.client.pull_blob(&pinned, layer, &mut out).await;
        if out.over > 0 {
            return Err(Error::Tampered {
                reference: whole.clone(),
                digest: digest.clone(),
                why: format!(
                    "the registry sent more than the {} bytes the manifest gives the component",
                    layer.size
                ),
            });
        }
        got.map_err(|e| match e {
            OciDistributionError::DigestError(e) => Error::Tampered {
                reference: whole.clone(),
                digest: digest.clone(),
                why: format!("the component: {e}"),
            },
            e => registry_error(r, e, &format!("the component {}", layer.digest)),
        })?;
        let component = out.buf;
        let got = sha256_digest(&component);
        if got != layer.digest || component.len() as i64 != layer.size {
            return Err(Error::Tampered {
                reference: whole,
                digest,
                why: format!(
                    "the component's bytes ({} of them) have the digest {got}, its layer says {} ({} bytes)",
                    component.len(),
                    layer.digest,
                    layer.size
                ),
            });
        }
        Ok(Pulled {
            reference: whole,
            sha256: got.trim_start_matches("sha256:").to_owned(),
            digest,
            component,
            signer,
        })
    }

    /// The name of a key of `keys` that signed `digest` (cosign's
    /// `sha256-<hex>.sig` tag in the repository).
    async fn verify(
        &self,
        r: &Reference,
        digest: &str,
        keys: &[TrustedKey],
    ) -> Result<String, Error> {
        let auth = self.auth(r);
        let names = keys
            .iter()
            .map(|k| k.name.as_str())
            .collect::<Vec<_>>()
            .join(" or ");
        let unsigned = |why: String| Error::Unsigned {
            reference: r.whole(),
            digest: digest.to_owned(),
            keys: names.clone(),
            why,
        };
        let tag = signature_tag(digest);
        let sig_ref = Reference::with_tag(
            r.registry().to_owned(),
            r.repository().to_owned(),
            tag.clone(),
        );
        let body = match self
            .client
            .pull_manifest_raw(&sig_ref, &auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
        {
            Ok((body, _)) => body,
            Err(e) if not_found(&e) => {
                return Err(unsigned(format!("it has no signature (no tag {tag})")))
            }
            Err(e) => return Err(registry_error(r, e, "the signature")),
        };
        if body.len() > MAX_MANIFEST {
            return Err(unsigned(format!(
                "the manifest of {tag} is {} bytes",
                body.len()
            )));
        }
        let m: OciImageManifest = serde_json::from_slice(&body)
            .map_err(|e| unsigned(format!("{tag} is not an OCI image manifest: {e}")))?;
        let mut why = Vec::new();
        for layer in m
            .layers
            .iter()
            .filter(|l| l.media_type == cosign::SIMPLESIGNING_MEDIA_TYPE)
            .take(MAX_SIGNATURES)
        {
            if layer.urls.is_some() {
                why.push(format!(
                    "{:?}: a layer elsewhere (urls)",
                    short(&layer.digest)
                ));
                continue;
            }
            let Some(sig) = layer
                .annotations
                .as_ref()
                .and_then(|a| a.get(cosign::SIGNATURE_ANNOTATION))
            else {
                why.push(format!(
                    "{:?}: no signature annotation",
                    short(&layer.digest)
                ));
                continue;
            };
            if layer.size < 0 || layer.size as u64 > cosign::MAX_PAYLOAD {
                why.push(format!(
                    "{:?}: a payload of {} bytes",
                    short(&layer.digest),
                    layer.size
                ));
                continue;
            }
            let mut payload = Capped::new(layer.size as usize);
            let got = self.client.pull_blob(&sig_ref, layer, &mut payload).await;
            if payload.over > 0 {
                why.push(format!(
                    "{:?}: a payload larger than its size",
                    short(&layer.digest)
                ));
                continue;
            }
            if let Err(e) = got {
                why.push(format!("{:?}: {e}", short(&layer.digest)));
                continue;
            }
            let payload = payload.buf;
            match cosign::check(&payload, sig, digest, r.repository(), keys) {
                Ok(name) => return Ok(name),
                Err(e) => why.push(format!("{:?}: {e}", short(&layer.digest))),
            }
        }
        if why.is_empty() {
            why.push(format!("{tag} holds no cosign signature"));
        }
        Err(unsigned(format!(
            "the signatures at {tag}: {}",
            why.join("; ")
        )))
    }

    /// Publishes `component` at `reference` in the wasm layout, with the
    /// config naming its top-level `imports` and `exports`; signs the
    /// manifest digest with `sign` (cosign's `.sig` tag) when given.
    /// Returns the manifest digest.
    pub fn push(
        &self,
        component: &[u8],
        reference: &str,
        imports: &[String],
        exports: &[String],
        sign: Option<&SignKey>,
    ) -> Result<String, Error> {
        let r = parse_reference(reference)?;
        if r.digest().is_some() {
            return Err(Error::BadReference {
                reference: reference.to_owned(),
                why: "a push names a tag, not a digest (the digest is what it makes)".into(),
            });
        }
        self.run(&r, self.push_async(&r, component, imports, exports, sign))
    }

    async fn push_async(
        &self,
        r: &Reference,
        component: &[u8],
        imports: &[String],
        exports: &[String],
        sign: Option<&SignKey>,
    ) -> Result<String, Error> {
        let layer_digest = sha256_digest(component);
        let config = serde_json::to_vec(&serde_json::json!({
            "created": created(),
            "author": null,
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
            "component": {"exports": exports, "imports": imports, "target": null},
        }))
        .map_err(|e| Error::Other(e.to_string()))?;
        let manifest = image_manifest(
            descriptor(WASM_CONFIG_MEDIA_TYPE, &config, None),
            descriptor(WASM_LAYER_MEDIA_TYPE, component, None),
        );
        let digest = self
            .push_artifact(
                r,
                &[
                    (component, &layer_digest),
                    (&config, &sha256_digest(&config)),
                ],
                &manifest,
            )
            .await?;
        if let Some(key) = sign {
            let payload = cosign::payload(&format!("{}/{}", r.registry(), r.repository()), &digest);
            let annotations =
                BTreeMap::from([(cosign::SIGNATURE_ANNOTATION.to_owned(), key.sign(&payload))]);
            let empty = b"{}".to_vec();
            let m = image_manifest(
                descriptor("application/vnd.oci.image.config.v1+json", &empty, None),
                descriptor(
                    cosign::SIMPLESIGNING_MEDIA_TYPE,
                    &payload,
                    Some(annotations),
                ),
            );
            let sig_ref = Reference::with_tag(
                r.registry().to_owned(),
                r.repository().to_owned(),
                signature_tag(&digest),
            );
            self.push_artifact(
                &sig_ref,
                &[
                    (&payload, &sha256_digest(&payload)),
                    (&empty, &sha256_digest(&empty)),
                ],
                &m,
            )
            .await?;
        }
        Ok(digest)
    }

    /// Pushes `blobs` and then `manifest` as bytes hashed here (the
    /// client's own manifest push re-serialises): its digest.
    async fn push_artifact(
        &self,
        r: &Reference,
        blobs: &[(&[u8], &str)],
        manifest: &OciImageManifest,
    ) -> Result<String, Error> {
        self.client
            .store_auth_if_needed(r.resolve_registry(), &self.auth(r))
            .await;
        for (bytes, digest) in blobs {
            self.client
                .push_blob(r, bytes.to_vec(), digest)
                .await
                .map_err(|e| registry_error(r, e, "a blob push"))?;
        }
        let body = serde_json::to_vec(manifest).map_err(|e| Error::Other(e.to_string()))?;
        let digest = sha256_digest(&body);
        let media_type = OCI_IMAGE_MEDIA_TYPE
            .parse()
            .map_err(|e| Error::Other(format!("{e}")))?;
        self.client
            .push_manifest_raw(r, body, media_type)
            .await
            .map_err(|e| registry_error(r, e, "the manifest push"))?;
        Ok(digest)
    }
}

/// cosign's tag for the signatures of `digest`: `sha256-<hex>.sig`.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

/// The manifest's component layer, or why there is none.
fn component_layer(m: &OciImageManifest) -> Result<&OciDescriptor, String> {
    if m.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(format!(
            "its config is {:?}, not {WASM_CONFIG_MEDIA_TYPE:?}",
            m.config.media_type
        ));
    }
    if m.schema_version != 2 {
        return Err(format!("schemaVersion {}, not 2", m.schema_version));
    }
    let [layer] = m.layers.as_slice() else {
        return Err(format!("{} layers, not one", m.layers.len()));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(format!(
            "its layer is {:?}, not {WASM_LAYER_MEDIA_TYPE:?}",
            layer.media_type
        ));
    }
    if layer.size < 0 || layer.size as u64 > MAX_COMPONENT {
        return Err(format!(
            "a component of {} bytes (at most {MAX_COMPONENT})",
            layer.size
        ));
    }
    if !is_sha256(&layer.digest) {
        return Err(format!(
            "its layer's digest {:?} is not sha256",
            layer.digest
        ));
    }
    if layer.urls.is_some() {
        // The client would fetch it from there: an address the registry
        // chose, not the registry.
        return Err("its layer is to be fetched from elsewhere (urls)".into());
    }
    Ok(layer)
}

fn descriptor(
    media_type: &str,
    bytes: &[u8],
    annotations: Option<BTreeMap<String, String>>,
) -> OciDescriptor {
    OciDescriptor {
        media_type: media_type.to_owned(),
        digest: sha256_digest(bytes),
        size: bytes.len() as i64,
        urls: None,
        annotations,
        artifact_type: None,
    }
}

fn image_manifest(config: OciDescriptor, layer: OciDescriptor) -> OciImageManifest {
    OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
        config,
        layers: vec![layer],
        subject: None,
        artifact_type: None,
        annotations: None,
    }
}

/// The config's `created`: `SOURCE_DATE_EPOCH` (reproducible builds'
/// convention) when set, else the Unix epoch, so that pushing one
/// component twice gives one digest.
fn created() -> String {
    #[allow(clippy::disallowed_methods)] // the convention is an environment variable
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0);
    rfc3339(secs)
}

/// `YYYY-MM-DDThh:mm:ssZ` of Unix time `secs` (days to a civil date as in
/// Howard Hinnant's `civil_from_days`).
fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Whether the registry said it has no such manifest, repository or blob.
fn not_found(e: &OciDistributionError) -> bool {
    use oci_client::errors::OciErrorCode::{BlobUnknown, ManifestUnknown, NameUnknown};
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, ManifestUnknown | NameUnknown | BlobUnknown)),
        _ => false,
    }
}

fn registry_error(r: &Reference, e: OciDistributionError, what: &str) -> Error {
    match e {
        e if not_found(&e) => Error::NotFound {
            reference: r.whole(),
            what: what.to_owned(),
        },
        e => Error::Registry {
            reference: r.whole(),
            registry: r.resolve_registry().to_owned(),
            why: format!("{what}: {}", chain(&e)),
        },
    }
}

/// An error with its sources (reqwest's say "error sending request" and
/// keep the cause, e.g. "Connection refused", in a source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// A writer that keeps at most `cap` bytes (`buf`) and counts what came
/// beyond them (`over`: the write that brought it failed).
struct Capped {
    buf: Vec<u8>,
    cap: usize,
    over: usize,
}

impl Capped {
    fn new(cap: usize) -> Capped {
        Capped {
            buf: Vec::with_capacity(cap.min(MAX_COMPONENT as usize)),
            cap,
            over: 0,
        }
    }
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let room = self.cap - self.buf.len();
        if data.len() > room {
            self.over += data.len() - room;
            // Fails the pull at once rather than reading a registry's
            // endless body.
            return Poll::Ready(Err(std::io::Error::other(
                "the registry sent more bytes than the descriptor's size",
            )));
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_registry_and_a_sha256_digest() {
        let r = parse_reference("oci://127.0.0.1:5000/plugins/foo:1.0").expect("parses");
        assert_eq!(
            (r.registry(), r.repository(), r.tag()),
            ("127.0.0.1:5000", "plugins/foo", Some("1.0"))
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = parse_reference(&format!("ghcr.io/acme/foo@{d}")).expect("parses");
        assert_eq!(r.digest(), Some(d.as_str()));
        for bad in [
            "foo:1.0",
            "acme/foo:1.0",
            "oci://ghcr.io/acme/foo@sha256:abc",
            "oci://ghcr.io/acme/foo@sha512:aa",
            "oci://ghcr.io/Acme/foo:1",
            "",
        ] {
            assert!(
                matches!(parse_reference(bad), Err(Error::BadReference { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_the_wasm_layout_with_one_bounded_layer_is_a_component() {
        let c = b"\0asm component";
        let ok = image_manifest(
            descriptor(WASM_CONFIG_MEDIA_TYPE, b"{}", None),
            descriptor(WASM_LAYER_MEDIA_TYPE, c, None),
        );
        assert_eq!(
            component_layer(&ok).expect("a component").digest,
            sha256_digest(c)
        );
        let mut m = ok.clone();
        m.config.media_type = "application/vnd.oci.image.config.v1+json".into();
        assert!(component_layer(&m).unwrap_err().contains("config"));
        let mut m = ok.clone();
        m.layers[0].media_type = "application/vnd.oci.image.layer.v1.tar+gzip".into();
        assert!(component_layer(&m).unwrap_err().contains("layer"));
        let mut m = ok.clone();
        m.layers.push(m.layers[0].clone());
        assert!(component_layer(&m).unwrap_err().contains("2 layers"));
        let mut m = ok.clone();
        m.layers[0].size = MAX_COMPONENT as i64 + 1;
        assert!(component_layer(&m).unwrap_err().contains("bytes"));
        let mut m = ok;
        m.layers[0].digest = "sha512:00".into();
        assert!(component_layer(&m).unwrap_err().contains("sha256"));
    }

    #[test]
    fn created_is_reproducible_and_dates_are_civil() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(signature_tag("sha256:ab"), "sha256-ab.sig");
    }

    #[test]
    fn an_auth_file_gives_each_registry_its_user_and_password() {
        let text = serde_json::json!({"auths": {
            "ghcr.io": {"auth": "dXNlcjpwYTpzcw=="},
            "https://index.docker.io/v1/": {"auth": "ZDpw"},
            "helper.example": {},
        }})
        .to_string();
        let c = credentials_from_auth_file(&text).expect("valid");
        assert_eq!(c["ghcr.io"], ("user".into(), "pa:ss".into()));
        assert_eq!(c["index.docker.io"], ("d".into(), "p".into()));
        assert_eq!(c["docker.io"], ("d".into(), "p".into()));
        assert_eq!(c.len(), 3);
        let bad = serde_json::json!({"auths": {"r": {"auth": "bm9jb2xvbg=="}}}).to_string();
        assert!(credentials_from_auth_file(&bad)
            .unwrap_err()
            .contains("auths.r.auth"));
    }

    #[test]
    fn a_capped_writer_refuses_more_than_its_size() {
        use tokio::io::AsyncWriteExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        let mut w = Capped::new(4);
        rt.block_on(async {
            w.write_all(b"abcd").await.expect("fits");
            assert!(w.write_all(b"e").await.is_err());
        });
        assert_eq!((w.buf.as_slice(), w.over), (&b"abcd"[..], 1));
    }
}

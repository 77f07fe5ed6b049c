//! `wasmcni pull` and `wasmcni push`: plugins as OCI artifacts (the CNCF
//! wasm layout), pulled by digest and verified as the operator's trust
//! file says (`wasmcni_oci`, which does the registry work); and what
//! `wasmcni install --plugin oci://…` shares with them.
//!
//! A pulled component is stored by its sha256 (`<store>/sha256/<hex>.wasm`,
//! written whole or not at all); `install` copies it into the plugin dir
//! as any other plugin file, pinned by that sha256, with a record of where
//! it came from (`<plugin dir>/NAME.origin.json`, which `wasmcni list`
//! shows).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use wasmcni_oci::trust::{Trust, DEFAULT_TRUST_FILE};
use wasmcni_oci::{Pulled, Registries, Requirement, Session, SignKey, TrustedKey};

/// The default content-addressed store of `wasmcni pull`.
pub const DEFAULT_STORE: &str = "/var/lib/wasmcni/oci";

/// How to reach registries (shared by `pull`, `push` and `install`).
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// A registry (HOST:PORT) spoken to over plain HTTP, not HTTPS (a
    /// registry on loopback, a lab). Repeatable.
    #[arg(long = "plain-http", value_name = "HOST:PORT")]
    pub plain_http: Vec<String>,
    /// A CA certificate (PEM) to trust for HTTPS registries besides the
    /// system's. Repeatable.
    #[arg(long = "registry-ca", value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    /// Give up on the registry after this many seconds.
    #[arg(long = "registry-timeout", value_name = "SECS", default_value_t = 60)]
    pub timeout_secs: u64,
    /// Registry credentials: a containers auth file (podman login's
    /// auth.json, docker login's config.json). Default: $REGISTRY_AUTH_FILE,
    /// else $XDG_RUNTIME_DIR/containers/auth.json, else
    /// ~/.docker/config.json, the first that exists; without one,
    /// registries are read anonymously.
    #[arg(long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

impl Default for Connection {
    fn default() -> Self {
        Connection {
            plain_http: Vec::new(),
            registry_ca: Vec::new(),
            timeout_secs: wasmcni_oci::DEFAULT_TIMEOUT.as_secs(),
            auth_file: None,
        }
    }
}

impl Connection {
    fn session(&self) -> anyhow::Result<Session> {
        let mut ca_pem = Vec::new();
        for f in &self.registry_ca {
            ca_pem.push(std::fs::read(f).with_context(|| format!("--registry-ca {f:?}"))?);
        }
        let credentials = match self.auth_file() {
            Some(f) => {
                let text = std::fs::read_to_string(&f)
                    .with_context(|| format!("registry auth file {f:?}"))?;
                wasmcni_oci::credentials_from_auth_file(&text)
                    .map_err(|e| anyhow::anyhow!("registry auth file {f:?}: {e}"))?
            }
            None => Default::default(),
        };
        Ok(Session::new(&Registries {
            plain_http: self.plain_http.clone(),
            ca_pem,
            timeout: Duration::from_secs(self.timeout_secs.max(1)),
            credentials,
        })?)
    }

    /// The auth file: given, or the first of the containers tools'
    /// defaults that exists.
    fn auth_file(&self) -> Option<PathBuf> {
        if let Some(f) = &self.auth_file {
            return Some(f.clone());
        }
        // The containers tools' conventions are environment variables.
        #[allow(clippy::disallowed_methods)]
        let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
        [
            var("REGISTRY_AUTH_FILE"),
            var("XDG_RUNTIME_DIR").map(|d| d.join("containers/auth.json")),
            var("DOCKER_CONFIG").map(|d| d.join("config.json")),
            var("HOME").map(|d| d.join(".docker/config.json")),
        ]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
    }
}

/// How to reach registries and what to trust (`pull` and `install`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// The trust file: the keys the node trusts and which plugins must be
    /// signed by which (default: /etc/wasmcni/trust.json if it exists;
    /// without one, only digests are checked).
    #[arg(long, value_name = "FILE")]
    pub trust: Option<PathBuf>,
    /// Require a signature by this public key (PEM, cosign.pub), whatever
    /// the trust file says. Repeatable: any one of them.
    #[arg(long = "key", value_name = "PUB.pem")]
    pub keys: Vec<PathBuf>,
    /// How to reach the registry.
    #[command(flatten)]
    pub connection: Connection,
}

impl RegistryArgs {
    /// What a pull for plugin `name` requires: a signature by a `--key`
    /// if any is given, else what the trust file says.
    fn requirement(&self, name: Option<&str>) -> anyhow::Result<Requirement> {
        if !self.keys.is_empty() {
            let mut keys = Vec::new();
            for f in &self.keys {
                let pem = std::fs::read_to_string(f).with_context(|| format!("--key {f:?}"))?;
                let name = f.display().to_string();
                keys.push(
                    TrustedKey::from_pem(&name, &pem).with_context(|| format!("--key {f:?}"))?,
                );
            }
            return Ok(Requirement::SignedBy(keys));
        }
        let trust = match &self.trust {
            Some(f) => Trust::read(f)?,
            // Only a file that is not there means "no trust file": one that
            // cannot be read (permissions, a dangling link) is an error,
            // not a node that trusts digests alone.
            None => match std::fs::metadata(DEFAULT_TRUST_FILE) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Trust::default(),
                _ => Trust::read(Path::new(DEFAULT_TRUST_FILE))?,
            },
        };
        Ok(trust.requirement(name))
    }

    /// Whether a plugin installed as `name` must be signed (then it can
    /// come only from a registry, where the signature is).
    pub fn requires_signature(&self, name: &str) -> anyhow::Result<bool> {
        Ok(matches!(
            self.requirement(Some(name))?,
            Requirement::SignedBy(_)
        ))
    }

    /// Pulls `reference` for the plugin to be installed as `name`.
    pub fn pull(&self, reference: &str, name: Option<&str>) -> anyhow::Result<Pulled> {
        let requirement = self.requirement(name)?;
        if matches!(requirement, Requirement::Digest)
            && wasmcni_oci::parse_reference(reference).is_ok_and(|r| r.digest().is_none())
        {
            eprintln!(
                "wasmcni: warning: {reference} names a tag and no signature is required: the \
                 registry chooses the build (pin it with @sha256:…, or require a signature in \
                 the trust file)"
            );
        }
        Ok(self.connection.session()?.pull(reference, &requirement)?)
    }
}

/// `oci://…`: the reference, if `arg` is one.
pub fn oci_reference(arg: &Path) -> Option<&str> {
    arg.to_str().filter(|s| s.starts_with("oci://"))
}

/// The plugin name a reference gives by default: its repository's last
/// part (`oci://ghcr.io/acme/cni-foo:1.2` installs as `cni-foo`).
pub fn default_name(reference: &str) -> Option<String> {
    let r = wasmcni_oci::parse_reference(reference).ok()?;
    r.repository().rsplit('/').next().map(str::to_owned)
}

/// `wasmcni pull`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct PullOptions {
    /// The artifact: [oci://]REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST].
    pub reference: String,
    /// Check it as the plugin of this name would be (the trust file's
    /// `plugins.NAME`).
    #[arg(long)]
    pub name: Option<String>,
    /// The content-addressed store to put it in.
    #[arg(long, default_value = DEFAULT_STORE)]
    pub store: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// How to reach the registry, what to trust.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `wasmcni pull`: fetch, verify, store by sha256, and say where.
pub fn pull(o: &PullOptions) -> anyhow::Result<()> {
    let name = o.name.clone().or_else(|| default_name(&o.reference));
    let p = o.registry.pull(&o.reference, name.as_deref())?;
    let path = store(&o.store, &p)?;
    let report = serde_json::json!({
        "reference": p.reference,
        "digest": p.digest,
        "sha256": p.sha256,
        "size": p.component.len(),
        "signer": p.signer,
        "path": path.display().to_string(),
    });
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", p.reference);
        println!("  digest  {}", p.digest);
        println!("  sha256  {}", p.sha256);
        println!(
            "  signer  {}",
            p.signer.as_deref().unwrap_or("(none required)")
        );
        println!("  stored  {}", path.display());
    }
    Ok(())
}

/// Writes the pulled component to `<store>/sha256/<hex>.wasm` (whole, by
/// rename) unless it is there already.
fn store(dir: &Path, p: &Pulled) -> anyhow::Result<PathBuf> {
    let d = dir.join("sha256");
    std::fs::create_dir_all(&d).with_context(|| format!("making the store {d:?}"))?;
    let path = d.join(format!("{}.wasm", p.sha256));
    if std::fs::read(&path)
        .is_ok_and(|b| wasmcni_oci::sha256_digest(&b) == format!("sha256:{}", p.sha256))
    {
        return Ok(path);
    }
    crate::files::write_atomic(&path, &p.component)?;
    Ok(path)
}

/// `wasmcni push`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct PushOptions {
    /// The component to publish.
    pub file: PathBuf,
    /// Where: [oci://]REGISTRY/REPOSITORY:TAG.
    pub reference: String,
    /// Sign it with this private key (PEM: cosign's encrypted key, its
    /// password in COSIGN_PASSWORD, or PKCS#8), as `cosign sign --key`
    /// would without a transparency log.
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
    /// How to reach the registry.
    #[command(flatten)]
    pub connection: Connection,
}

/// `wasmcni push`: publish a component (checked to be one wasmcni can
/// run) in the wasm layout; prints the manifest digest to pin.
pub fn push(o: &PushOptions) -> anyhow::Result<()> {
    let wasm = std::fs::read(&o.file).with_context(|| format!("reading {:?}", o.file))?;
    let engine = crate::engine::engine()?;
    let component = wasmtime::component::Component::new(&engine, &wasm)
        .map_err(|e| anyhow::anyhow!("{:?} is not a component wasmcni can load: {e:#}", o.file))?;
    let imports = crate::runner::imports(&engine, &component);
    let refused = crate::runner::refused_imports(&imports);
    if !refused.is_empty() {
        bail!(
            "{:?} imports interfaces wasmcni does not provide: {}",
            o.file,
            refused.join(", ")
        );
    }
    let exports: Vec<String> = component
        .component_type()
        .exports(&engine)
        .map(|(n, _)| n.to_owned())
        .collect();
    let key = match &o.sign {
        Some(f) => {
            let pem = std::fs::read_to_string(f).with_context(|| format!("--sign {f:?}"))?;
            #[allow(clippy::disallowed_methods)] // cosign's convention for the key's password
            let password = std::env::var("COSIGN_PASSWORD").unwrap_or_default();
            Some(
                SignKey::from_pem(&pem, password.as_bytes())
                    .with_context(|| format!("--sign {f:?}"))?,
            )
        }
        None => None,
    };
    let session = o.connection.session()?;
    let digest = session.push(&wasm, &o.reference, &imports, &exports, key.as_ref())?;
    let r = wasmcni_oci::parse_reference(&o.reference)?;
    println!("{}/{}@{digest}", r.registry(), r.repository());
    if key.is_some() {
        println!("signed: {}", wasmcni_oci::signature_tag(&digest));
    }
    Ok(())
}

/// The record `install` keeps beside a plugin it pulled.
pub fn origin_record(p: &Pulled) -> serde_json::Value {
    serde_json::json!({
        "reference": p.reference,
        "digest": p.digest,
        "sha256": p.sha256,
        "signer": p.signer,
    })
}

/// The origin record of `<plugin dir>/NAME.wasm`, if one names this
/// build (`sha256`): a record of an older build says nothing of this one.
pub fn origin_of(plugin_dir: &Path, name: &str, sha256: &str) -> Option<serde_json::Value> {
    let text = std::fs::read(plugin_dir.join(format!("{name}.origin.json"))).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    (v["sha256"] == sha256).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_names_its_plugin_by_its_repository_s_last_part() {
        assert_eq!(
            oci_reference(Path::new("oci://r.io/a/b:1")),
            Some("oci://r.io/a/b:1")
        );
        assert_eq!(oci_reference(Path::new("b.wasm")), None);
        assert_eq!(
            default_name("oci://ghcr.io/acme/cni-foo:1.2").as_deref(),
            Some("cni-foo")
        );
        let d = format!("sha256:{}", "0".repeat(64));
        assert_eq!(
            default_name(&format!("localhost:5000/foo@{d}")).as_deref(),
            Some("foo")
        );
        assert_eq!(default_name("oci://foo"), None);
    }
}

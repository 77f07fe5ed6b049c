//! Issue 51: plugins as OCI artifacts, against a real registry
//! (Debian's docker-registry, on loopback, its own storage): `wasmcni
//! push` and `wasmcni pull` by tag and by digest, a tampered blob refused,
//! signatures required where the operator's trust file says and checked
//! offline (and cross-checked with another implementation: Python's
//! `cryptography`), and a registry that is down or silent failing within
//! its bound. Nothing is stored unless everything held.
//! (`wasmcni install --plugin oci://…`: tests/install.rs.)

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::registry::{Registry, Silent};

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn keys_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/oci-keys")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn wasmcni(args: &[&str]) -> Output {
    Command::new(support::wasmcni())
        .args(args)
        .env_clear()
        .env("COSIGN_PASSWORD", "spike")
        .output()
        .expect("running wasmcni")
}

/// `wasmcni push FILE REF --plain-http HOST [--sign KEY]`: the digest.
fn push(reg: &Registry, file: &Path, repo_tag: &str, sign: bool) -> String {
    let key = keys_dir().join("cosign.key");
    let reference = format!("{}/{repo_tag}", reg.host);
    let mut args = vec![
        "push",
        file.to_str().expect("utf-8"),
        &reference,
        "--plain-http",
        &reg.host,
    ];
    if sign {
        args.extend(["--sign", key.to_str().expect("utf-8")]);
    }
    let out = wasmcni(&args);
    assert!(out.status.success(), "push: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    let (_, digest) = first
        .split_once('@')
        .unwrap_or_else(|| panic!("no digest: {stdout}"));
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{stdout}"
    );
    digest.to_owned()
}

/// A store directory and what it holds.
struct Store(tempfile::TempDir);

impl Store {
    fn new() -> Store {
        Store(support::private_tempdir())
    }
    fn path(&self) -> &str {
        self.0.path().to_str().expect("utf-8")
    }
    fn files(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(self.0.path().join("sha256")) {
            out.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
        out.sort();
        out
    }
}

/// `wasmcni pull REF --store S --plain-http HOST --json EXTRA...`; with
/// an empty trust file unless EXTRA names one or a key (the machine's own
/// /etc/wasmcni/trust.json plays no part).
fn pull(reg_host: &str, store: &Store, reference: &str, extra: &[&str]) -> Output {
    let empty = store.0.path().join("no-trust.json");
    std::fs::write(&empty, "{}").expect("trust file");
    let mut args = vec![
        "pull",
        reference,
        "--store",
        store.path(),
        "--plain-http",
        reg_host,
        "--json",
    ];
    if !extra.iter().any(|a| *a == "--trust" || *a == "--key") {
        args.extend(["--trust", empty.to_str().expect("utf-8")]);
    }
    args.extend(extra);
    wasmcni(&args)
}

fn pulled(out: &Output) -> Value {
    assert!(out.status.success(), "pull: {}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", text(out));
    assert!(!err.contains("panicked"), "{}", text(out));
    for n in needles {
        assert!(err.contains(n), "no {n:?} in {}", text(out));
    }
}

fn trust_file(dir: &Path, v: Value) -> PathBuf {
    let p = dir.join(format!(
        "trust-{}.json",
        sha256_hex(v.to_string().as_bytes())
    ));
    std::fs::write(&p, v.to_string()).expect("trust file");
    p
}

#[test]
fn a_pushed_component_is_pulled_by_tag_and_by_digest_as_the_same_bytes() {
    let reg = Registry::start();
    let file = support::fixture("loopback");
    let bytes = std::fs::read(&file).expect("fixture");
    let digest = push(&reg, &file, "plugins/lo:1.0", false);
    // Reproducible: the same component pushed again is the same manifest.
    assert_eq!(push(&reg, &file, "plugins/lo:again", false), digest);

    let store = Store::new();
    let by_tag = pulled(&pull(
        &reg.host,
        &store,
        &format!("oci://{}/plugins/lo:1.0", reg.host),
        &[],
    ));
    assert_eq!(by_tag["digest"], digest.as_str(), "{by_tag}");
    assert_eq!(by_tag["sha256"], sha256_hex(&bytes), "{by_tag}");
    assert_eq!(by_tag["signer"], Value::Null, "{by_tag}");
    let stored = PathBuf::from(by_tag["path"].as_str().expect("path"));
    assert_eq!(std::fs::read(&stored).expect("stored"), bytes);
    assert_eq!(store.files(), [format!("{}.wasm", sha256_hex(&bytes))]);

    let by_digest = pulled(&pull(
        &reg.host,
        &store,
        &format!("{}/plugins/lo@{digest}", reg.host),
        &[],
    ));
    assert_eq!(by_digest["sha256"], by_tag["sha256"]);
    assert_eq!(by_digest["path"], by_tag["path"]);

    // What is not there is named as such.
    let none = Store::new();
    refused(
        &pull(
            &reg.host,
            &none,
            &format!("{}/plugins/lo:2.0", reg.host),
            &[],
        ),
        &["plugins/lo:2.0", "no such artifact"],
    );
    refused(
        &pull(
            &reg.host,
            &none,
            &format!("{}/plugins/nothing:1", reg.host),
            &[],
        ),
        &["plugins/nothing:1", "no such artifact"],
    );
    // A reference without a registry is refused before any network.
    refused(
        &pull(&reg.host, &none, "plugins/lo:1.0", &[]),
        &["names no registry"],
    );
    assert!(none.files().is_empty());
}

#[test]
fn a_tampered_component_is_refused_and_nothing_is_stored() {
    let reg = Registry::start();
    let file = support::fixture("loopback");
    let bytes = std::fs::read(&file).expect("fixture");
    let digest = push(&reg, &file, "plugins/lo:1.0", false);
    // The registry's copy of the component changes (a compromised or
    // corrupted registry): same length, one byte different.
    let blob = reg.blob_file(&format!("sha256:{}", sha256_hex(&bytes)));
    let mut tampered = std::fs::read(&blob).expect("the blob in the registry's storage");
    assert_eq!(tampered, bytes);
    let last = tampered.len() - 1;
    tampered[last] ^= 0x55;
    std::fs::write(&blob, &tampered).expect("tamper");
    let store = Store::new();
    for reference in [
        format!("{}/plugins/lo:1.0", reg.host),
        format!("{}/plugins/lo@{digest}", reg.host),
    ] {
        refused(
            &pull(&reg.host, &store, &reference, &[]),
            &[&reference, &digest, "does not match its digest"],
        );
    }
    assert!(store.files().is_empty(), "{:?}", store.files());
}

#[test]
fn signatures_are_required_where_the_trust_file_says_and_verified_offline() {
    let reg = Registry::start();
    let dir = support::private_tempdir();
    let file = support::fixture("loopback");
    let signed = push(&reg, &file, "acme/signed:1.0", true);
    let unsigned = push(&reg, &file, "acme/unsigned:1.0", false);
    assert_eq!(signed, unsigned, "one component, one manifest, one digest");
    let other_file = support::fixture("scripted");
    let other = push(&reg, &other_file, "acme/other:1.0", false);

    let cosign_pub = keys_dir().join("cosign.pub");
    let other_pub = keys_dir().join("other.pub");
    let all = trust_file(
        dir.path(),
        json!({"keys": {"acme": cosign_pub, "stranger": other_pub}, "requireSignature": true}),
    );
    let all = all.to_str().expect("utf-8");
    let store = Store::new();
    let ok = pulled(&pull(
        &reg.host,
        &store,
        &format!("{}/acme/signed:1.0", reg.host),
        &["--trust", all],
    ));
    assert_eq!(ok["signer"], "acme", "{ok}");
    assert_eq!(ok["digest"], signed.as_str());

    // An artifact with no signature: refused, naming the reference, the
    // digest and what is missing.
    let fresh = Store::new();
    let reference = format!("{}/acme/other:1.0", reg.host);
    refused(
        &pull(&reg.host, &fresh, &reference, &["--trust", all]),
        &[
            &reference,
            &other,
            "no valid signature by acme or stranger",
            "no signature",
            &wasmcni_sig_tag(&other),
        ],
    );
    assert!(fresh.files().is_empty());

    // Signed, but by a key the node does not trust for it.
    let strangers = trust_file(
        dir.path(),
        json!({"keys": {"acme": cosign_pub, "stranger": other_pub},
               "plugins": {"signed": {"signedBy": ["stranger"]}}}),
    );
    let strangers = strangers.to_str().expect("utf-8");
    let reference = format!("{}/acme/signed:1.0", reg.host);
    refused(
        &pull(&reg.host, &fresh, &reference, &["--trust", strangers]),
        &[
            &reference,
            &signed,
            "no valid signature by stranger",
            "made with none of the keys",
        ],
    );
    // The same file asks nothing of another plugin name (digest only)...
    let digest_only = pulled(&pull(
        &reg.host,
        &fresh,
        &reference,
        &["--trust", strangers, "--name", "else"],
    ));
    assert_eq!(digest_only["signer"], Value::Null);
    // ...and --key requires a signature by that key, whatever the file says.
    refused(
        &pull(
            &reg.host,
            &fresh,
            &reference,
            &["--key", other_pub.to_str().expect("utf-8")],
        ),
        &["no valid signature", "made with none of the keys"],
    );
    let by_key = pulled(&pull(
        &reg.host,
        &fresh,
        &reference,
        &["--key", cosign_pub.to_str().expect("utf-8")],
    ));
    assert_eq!(by_key["digest"], signed.as_str());

    // A tag moved to another build is not covered by the old one's
    // signature.
    push(&reg, &other_file, "acme/signed:1.0", false);
    refused(
        &pull(&reg.host, &fresh, &reference, &["--trust", all]),
        &[&reference, &other, "no signature"],
    );
    // A signature of one build put at another's signature tag (a replay):
    // it verifies, but signs another manifest.
    let sig_manifest = http_get(
        &reg.host,
        &format!("/v2/acme/signed/manifests/{}", wasmcni_sig_tag(&signed)),
    );
    http_put_manifest(
        &reg.host,
        &format!("/v2/acme/signed/manifests/{}", wasmcni_sig_tag(&other)),
        &sig_manifest,
    );
    refused(
        &pull(&reg.host, &fresh, &reference, &["--trust", all]),
        &[&reference, &other, "signs another manifest", &signed],
    );
    // The publisher's signature of one plugin, copied beside another of
    // its plugins that is the same build (so the digest matches): it signs
    // an artifact of another repository.
    let sig: Value = serde_json::from_slice(&sig_manifest).expect("manifest");
    for blob in [&sig["config"]["digest"], &sig["layers"][0]["digest"]] {
        http_mount(
            &reg.host,
            "acme/unsigned",
            "acme/signed",
            blob.as_str().expect("digest"),
        );
    }
    http_put_manifest(
        &reg.host,
        &format!("/v2/acme/unsigned/manifests/{}", wasmcni_sig_tag(&unsigned)),
        &sig_manifest,
    );
    let reference = format!("{}/acme/unsigned:1.0", reg.host);
    refused(
        &pull(&reg.host, &fresh, &reference, &["--trust", all]),
        &[
            &reference,
            "signs an artifact of another repository",
            "acme/signed",
        ],
    );
    let reference = format!("{}/acme/signed:1.0", reg.host);

    // A broken trust file is named, and nothing is fetched under it.
    let broken = trust_file(dir.path(), json!({"requireSignature": true}));
    refused(
        &pull(
            &reg.host,
            &fresh,
            &reference,
            &["--trust", broken.to_str().expect("utf-8")],
        ),
        &["trust file", "no key is trusted"],
    );
}

fn wasmcni_sig_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// The signature `wasmcni push --sign` wrote is cosign's, as another
/// implementation reads it: the manifest at `sha256-<hex>.sig`, its
/// simple-signing layer and annotation, verified by Python's
/// `cryptography` (OpenSSL) with the public key.
#[test]
fn the_signature_push_writes_verifies_with_another_implementation() {
    let reg = Registry::start();
    let digest = push(&reg, &support::fixture("loopback"), "acme/p:1", true);
    let manifest: Value = serde_json::from_slice(&http_get(
        &reg.host,
        &format!("/v2/acme/p/manifests/{}", wasmcni_sig_tag(&digest)),
    ))
    .expect("the signature manifest");
    let layer = &manifest["layers"][0];
    assert_eq!(
        layer["mediaType"], "application/vnd.dev.cosign.simplesigning.v1+json",
        "{manifest}"
    );
    let sig = layer["annotations"]["dev.cosignproject.cosign/signature"]
        .as_str()
        .unwrap_or_else(|| panic!("no signature annotation: {manifest}"));
    let payload = http_get(
        &reg.host,
        &format!(
            "/v2/acme/p/blobs/{}",
            layer["digest"].as_str().expect("digest")
        ),
    );
    let p: Value = serde_json::from_slice(&payload).expect("payload");
    assert_eq!(
        p["critical"]["image"]["docker-manifest-digest"],
        digest.as_str(),
        "{p}"
    );
    assert_eq!(
        p["critical"]["type"], "cosign container image signature",
        "{p}"
    );
    assert_eq!(
        p["critical"]["identity"]["docker-reference"],
        format!("{}/acme/p", reg.host)
    );

    let dir = support::private_tempdir();
    std::fs::write(dir.path().join("payload"), &payload).expect("payload");
    let verify = |pubkey: &Path, payload: &str| {
        Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(
                "import base64,sys\n\
                 from cryptography.hazmat.primitives import hashes, serialization\n\
                 from cryptography.hazmat.primitives.asymmetric import ec\n\
                 key = serialization.load_pem_public_key(open(sys.argv[1],'rb').read())\n\
                 key.verify(base64.b64decode(sys.argv[3]), open(sys.argv[2],'rb').read(), ec.ECDSA(hashes.SHA256()))\n\
                 print('verified')\n",
            )
            .arg(pubkey)
            .arg(dir.path().join(payload))
            .arg(sig)
            .output()
            .expect("python3 (make setup installs python3-cryptography)")
    };
    let ok = verify(&keys_dir().join("cosign.pub"), "payload");
    assert!(
        ok.status.success() && ok.stdout.starts_with(b"verified"),
        "{}",
        text(&ok)
    );
    // The check can fail: another key, or another payload, does not verify.
    let wrong_key = verify(&keys_dir().join("other.pub"), "payload");
    assert!(!wrong_key.status.success(), "{}", text(&wrong_key));
    let mut other = payload.clone();
    other[5] ^= 1;
    std::fs::write(dir.path().join("other"), &other).expect("payload");
    let wrong_payload = verify(&keys_dir().join("cosign.pub"), "other");
    assert!(!wrong_payload.status.success(), "{}", text(&wrong_payload));
}

/// `GET path` of the registry at `host` (HTTP/1.0, OCI manifests
/// accepted): the body of a 200.
fn http_get(host: &str, path: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/vnd.oci.image.manifest.v1+json\r\n\r\n"
    )
    .expect("request");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("response");
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let head = String::from_utf8_lossy(&out[..at]).into_owned();
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "GET {path}: {head}"
    );
    // A redirect is not followed: distribution 2.8 with filesystem storage
    // serves blobs itself.
    out[at + 4..].to_vec()
}

/// A raw request to the registry at `host`: the status line and body.
fn http(host: &str, request: &[u8]) -> (String, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request).expect("request");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("response");
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let head = String::from_utf8_lossy(&out[..at]).into_owned();
    (head, out[at + 4..].to_vec())
}

/// `PUT path` of an OCI image manifest.
fn http_put_manifest(host: &str, path: &str, body: &[u8]) {
    let mut req = format!(
        "PUT {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let (head, _) = http(host, &req);
    assert!(head.contains(" 201 "), "PUT {path}: {head}");
}

/// Mounts blob `digest` of repository `from` into `to` (the registry's
/// cross-repository mount).
fn http_mount(host: &str, to: &str, from: &str, digest: &str) {
    let req = format!(
        "POST /v2/{to}/blobs/uploads/?mount={digest}&from={from} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"
    );
    let (head, _) = http(host, req.as_bytes());
    assert!(head.contains(" 201 "), "mount {digest}: {head}");
}

#[test]
fn a_registry_that_is_down_or_silent_fails_within_the_bound_and_stores_nothing() {
    let mut reg = Registry::start();
    push(&reg, &support::fixture("loopback"), "plugins/lo:1.0", false);
    let host = reg.host.clone();
    reg.stop();
    let store = Store::new();
    let reference = format!("{host}/plugins/lo:1.0");
    refused(
        &pull(&host, &store, &reference, &["--registry-timeout", "5"]),
        &[
            &reference,
            &format!("the registry {host}"),
            "onnection refused",
        ],
    );

    let silent = Silent::start();
    let reference = format!("{}/plugins/lo:1.0", silent.host);
    let t = Instant::now();
    let out = pull(
        &silent.host,
        &store,
        &reference,
        &["--registry-timeout", "3"],
    );
    let took = t.elapsed();
    refused(
        &out,
        &[&reference, &silent.host, "did not answer within 3 s"],
    );
    // The bound holds (3 s, with room for a loaded machine): a hang would
    // be minutes.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(store.files().is_empty());
}

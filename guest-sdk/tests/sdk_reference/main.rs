//! `docs/sdk-reference.md`, guest-sdk's API reference, is generated from
//! the source by this test, and checked to be current by it: the same
//! pattern as `docs/capabilities.md` (host/runtime/src/caps/catalog.rs).
//! With `WASMCNI_UPDATE_DOCS` set it rewrites the file:
//!
//! ```sh
//! WASMCNI_UPDATE_DOCS=1 cargo test -p wasmcni-guest-sdk --test sdk_reference
//! ```
//!
//! The generator reads guest-sdk/src with syn (modules in declaration
//! order, items in source order, no timestamps: the output depends on the
//! source alone), the WIT behind the types guest-sdk re-exports from its
//! bindings with wit-parser, and host/cni-spec/src for those it re-exports
//! from that crate. See `render` for where each item is documented.

mod model;
mod print;
mod render;
mod text;
mod wit;

use std::path::PathBuf;
use std::sync::OnceLock;

/// The command that regenerates the reference.
pub const REGENERATE: &str =
    "WASMCNI_UPDATE_DOCS=1 cargo test -p wasmcni-guest-sdk --test sdk_reference";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

fn reference() -> &'static render::Reference {
    static REFERENCE: OnceLock<render::Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let model = model::Model::load(&root());
        render::Api::new(&model).render()
    })
}

#[test]
fn sdk_reference_is_up_to_date() {
    let path = root().join("docs").join("sdk-reference.md");
    let want = &reference().markdown;
    if std::env::var_os("WASMCNI_UPDATE_DOCS").is_some() {
        // Regenerating makes the comparison below pass by construction:
        // never in CI.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "WASMCNI_UPDATE_DOCS rewrites the file this test checks; CI=true checks it: unset it"
        );
        std::fs::write(&path, want).expect("write docs/sdk-reference.md");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != *want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "docs/sdk-reference.md is out of date: run `{REGENERATE}` \
             (first difference at line {}: the file has {:?}, the source gives {:?})",
            first + 1,
            have.lines().nth(first).unwrap_or("<end of file>"),
            want.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

/// The output depends on the source alone: a second run (with hash maps
/// seeded anew) gives the same bytes.
#[test]
fn generation_is_deterministic() {
    let model = model::Model::load(&root());
    let again = render::Api::new(&model).render();
    assert!(again.markdown == reference().markdown);
}

/// Every intra-doc link in guest-sdk's docs points at something the
/// reference documents (as `cargo doc` would warn of a broken one).
#[test]
fn every_doc_link_resolves() {
    let unresolved = &reference().unresolved;
    assert!(unresolved.is_empty(), "links to nothing: {unresolved:#?}");
}

/// The questions the reference was made to answer without reading the
/// source (issue 27, item 9): how to add, list and delete routes, which
/// types deserialize, and what a `RouteInfo` holds.
#[test]
fn the_reference_answers_what_authors_asked() {
    let md = &reference().markdown;
    for needle in [
        // routes: the calls and the worked example
        "- `fn add_route(&self, r: &Route) -> Result<(), HostError>`",
        "- `fn routes(&self, family: Option<IpFamily>, table: Option<u32>) -> Result<Vec<RouteInfo>, HostError>`",
        "- `fn delete_route(&self, r: &Route) -> Result<(), HostError>`",
        "#### Example: routes",
        // RouteInfo's fields
        "### struct `net::RouteInfo`",
        "| `route` | `Route` |",
        "| `owned` | `bool` |",
        // which types deserialize (the section itself is always written)
        "| [`cni::config::NetConf`](#struct-cniconfignetconf) | hand-written (",
        "| [`cni::result::Cidr`](#struct-cniresultcidr) | hand-written",
    ] {
        assert!(md.contains(needle), "the reference lacks {needle:?}");
    }
    for example in [
        "links and namespaces",
        "addresses",
        "routes",
        "sysctls",
        "traffic control",
        "firewall",
        "IPAM",
        "plugin state",
        "delegation",
        "config and result",
    ] {
        assert!(
            md.contains(&format!("#### Example: {example}"))
                || md.contains(&format!("### Example: {example}")),
            "no worked example of {example}"
        );
    }
}

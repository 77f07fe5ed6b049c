//! The WIT compatibility rule (issue 51): a plugin built against a
//! published `wasmcni:plugin` keeps running on every later host of the same
//! major version. Within 0.1.x a change is additive: a new interface, a new
//! function, a new type; never a removed or changed function, nor a changed
//! type a function uses (a field or case added to a record, variant or enum
//! the plugin already decodes is a change: the component's types no longer
//! match the host's), nor a new export the host would call. A breaking
//! change is a new version the host serves beside the old one.
//!
//! `tests/wit-0.1.0/` is the WIT as first published; this test
//! fails when `wit/` would break a plugin built against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wit_parser::{Handle, Resolve, Type, TypeDefKind, WorldItem};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Every import and export of the `plugin` world in `dir`, each function
/// with its signature written out in full (named types by their name and
/// structure, aliases seen through).
fn surface(dir: &Path) -> BTreeMap<String, String> {
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve
        .push_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e:?}", dir.display()));
    let world = resolve
        .select_world(&[pkg], Some("plugin"))
        .expect("plugin world");
    let w = &resolve.worlds[world];
    let mut out = BTreeMap::new();
    for (side, items) in [("import", &w.imports), ("export", &w.exports)] {
        for (key, item) in items {
            let name = resolve.name_world_key(key);
            match item {
                WorldItem::Interface { id, .. } => {
                    for (f, func) in &resolve.interfaces[*id].functions {
                        out.insert(
                            format!("{side} {name}#{f}"),
                            signature(&resolve, &func.params, func.result),
                        );
                    }
                }
                WorldItem::Function(func) => {
                    out.insert(
                        format!("{side} {name}"),
                        signature(&resolve, &func.params, func.result),
                    );
                }
                WorldItem::Type { id, .. } => {
                    out.insert(format!("{side} type {name}"), ty(&resolve, Type::Id(*id)));
                }
            }
        }
    }
    out
}

fn signature(resolve: &Resolve, params: &[wit_parser::Param], result: Option<Type>) -> String {
    let params: Vec<String> = params
        .iter()
        .map(|p| format!("{}: {}", p.name, ty(resolve, p.ty)))
        .collect();
    let result = result.map_or_else(|| "()".to_owned(), |t| ty(resolve, t));
    format!("({}) -> {result}", params.join(", "))
}

/// A type written out in full.
fn ty(resolve: &Resolve, t: Type) -> String {
    let Type::Id(id) = t else {
        return format!("{t:?}").to_lowercase();
    };
    let def = &resolve.types[id];
    let name = def.name.clone().unwrap_or_default();
    let opt = |t: Option<Type>| t.map_or_else(|| "_".to_owned(), |t| ty(resolve, t));
    match &def.kind {
        TypeDefKind::Type(t) => ty(resolve, *t),
        TypeDefKind::Record(r) => format!(
            "record {name} {{{}}}",
            r.fields
                .iter()
                .map(|f| format!("{}: {}", f.name, ty(resolve, f.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        TypeDefKind::Variant(v) => format!(
            "variant {name} {{{}}}",
            v.cases
                .iter()
                .map(|c| format!("{}({})", c.name, opt(c.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        TypeDefKind::Enum(e) => format!(
            "enum {name} {{{}}}",
            e.cases
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        TypeDefKind::Flags(f) => format!(
            "flags {name} {{{}}}",
            f.flags
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        TypeDefKind::Tuple(t) => format!(
            "tuple<{}>",
            t.types
                .iter()
                .map(|t| ty(resolve, *t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        TypeDefKind::Option(t) => format!("option<{}>", ty(resolve, *t)),
        TypeDefKind::Result(r) => format!("result<{}, {}>", opt(r.ok), opt(r.err)),
        TypeDefKind::List(t) => format!("list<{}>", ty(resolve, *t)),
        TypeDefKind::FixedLengthList(t, n) => format!("list<{}, {n}>", ty(resolve, *t)),
        TypeDefKind::Map(k, v) => format!("map<{}, {}>", ty(resolve, *k), ty(resolve, *v)),
        TypeDefKind::Resource => format!("resource {name}"),
        TypeDefKind::Handle(Handle::Own(r)) => format!("own<{}>", ty(resolve, Type::Id(*r))),
        TypeDefKind::Handle(Handle::Borrow(r)) => {
            format!("borrow<{}>", ty(resolve, Type::Id(*r)))
        }
        TypeDefKind::Future(t) => format!("future<{}>", opt(*t)),
        TypeDefKind::Stream(t) => format!("stream<{}>", opt(*t)),
        TypeDefKind::Unknown => format!("unknown {name}"),
    }
}

/// What `now` breaks of `then`: each function or type a plugin built
/// against `then` may use that `now` removed or changed, and each export
/// `now` would call that `then` lacks.
fn breaks(then: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, sig) in then {
        match now.get(k) {
            None => out.push(format!("{k}: removed")),
            Some(s) if s != sig => out.push(format!("{k}: {sig}\n    is now {s}")),
            Some(_) => {}
        }
    }
    for k in now.keys().filter(|k| k.starts_with("export ")) {
        if !then.contains_key(k) {
            out.push(format!(
                "{k}: a new export, which a plugin built before lacks"
            ));
        }
    }
    out
}

#[test]
fn wit_changes_keep_plugins_built_against_the_first_published_wit_running() {
    let then = surface(&root().join("tests/wit-0.1.0"));
    let now = surface(&root().join("wit"));
    assert!(then.len() > 50, "the baseline's surface: {then:#?}");
    let broken = breaks(&then, &now);
    assert!(
        broken.is_empty(),
        "wit/ breaks plugins built against wasmcni:plugin@0.1.0 (tests/wit-0.1.0): \
         make the change additive, or serve a new version beside 0.1 \
         (docs/plugin-author-guide.md, the WIT's versions):\n  {}",
        broken.join("\n  ")
    );
}

/// The check sees what breaks a plugin, and lets what does not through.
#[test]
fn the_compatibility_check_tells_additive_from_breaking() {
    let base = |extra: &str, code: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("p.wit"),
            format!(
                "package t:p@0.1.0;\n\
                 interface types {{ enum error-code {{ {code} }} record r {{ a: u32 }} }}\n\
                 interface link {{ use types.{{error-code, r}}; \
                   get: func(x: u32) -> result<r, error-code>; {extra} }}\n\
                 world plugin {{ import link; export run: func() -> u32; }}\n"
            ),
        )
        .expect("wit");
        let s = surface(dir.path());
        drop(dir);
        s
    };
    let then = base("", "denied");
    assert!(breaks(&then, &base("put: func(x: u32);", "denied")).is_empty());
    let added_case = breaks(&then, &base("", "denied, busy"));
    assert!(
        added_case.iter().any(|b| b.contains("/link@0.1.0#get")),
        "{added_case:?}"
    );
    assert!(!breaks(&base("put: func(x: u32);", "denied"), &then).is_empty());
}

//! The reference itself: which item is documented where (its "home"), and
//! the Markdown for every public module, type, function and method.
//!
//! An item is documented once: where it is defined if that module is
//! public, else (a WIT type behind `crate::bindings`, an item of
//! `cni-spec`) where guest-sdk first re-exports it, modules taken in
//! declaration order. Every other name for it is a re-export that links
//! there. Methods are listed where their `impl` block is written (the
//! capability modules add methods to `net::Netns`), and named under the
//! type.

use std::cell::RefCell;
use std::collections::HashMap;

use syn::punctuated::Punctuated;
use syn::{Attribute, Fields, ImplItem, Item, TraitItem, Type};

use crate::model::{self, Entity, Krate, Model};
use crate::text;
use crate::wit::{Shape, TypeDoc};
use crate::{print, REGENERATE};

pub struct Reference {
    pub markdown: String,
    /// Intra-doc links no documented item answers, as (module, target).
    pub unresolved: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Struct,
    Enum,
    Trait,
    Type,
    Fn,
    Const,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Struct => "struct",
            Kind::Enum => "enum",
            Kind::Trait => "trait",
            Kind::Type => "type",
            Kind::Fn => "fn",
            Kind::Const => "const",
        }
    }
}

/// Where an item is documented.
struct Home {
    module: usize,
    /// `net::RouteInfo`.
    path: String,
    kind: Kind,
    anchor: String,
}

enum Entry {
    /// An item documented in this module.
    Item(Entity),
    /// Another name for an item documented elsewhere.
    ReExport {
        name: String,
        target: Entity,
        docs: String,
    },
    /// A name for something outside the documented crates.
    External {
        name: String,
        path: String,
        docs: String,
    },
}

struct Section {
    module: usize,
    entries: Vec<Entry>,
}

struct Method {
    sig: String,
    docs: String,
}

/// The public methods of one `impl` block.
struct Methods {
    module: usize,
    list: Vec<Method>,
}

struct TraitImpl {
    /// `From<IpAddr>` (or the whole `impl ... for ...` when the type
    /// implementing it is not guest-sdk's).
    text: String,
    /// `Serialize`, `Deserialize`, `Default`, ...
    name: String,
    docs: String,
    module: usize,
}

pub struct Api<'m> {
    m: &'m Model,
    sections: Vec<Section>,
    homes: HashMap<Entity, Home>,
    module_anchor: HashMap<usize, String>,
    methods: HashMap<Entity, Vec<Methods>>,
    impls: HashMap<Entity, Vec<TraitImpl>>,
    unresolved: RefCell<Vec<String>>,
}

/// GitHub's anchors: the first heading with a slug gets it, the next ones
/// `-1`, `-2`, ...
#[derive(Default)]
struct Slugs(HashMap<String, usize>);

impl Slugs {
    fn add(&mut self, heading: &str) -> String {
        let base = text::slug(heading);
        let mut slug = base.clone();
        if self.0.contains_key(&slug) {
            loop {
                let n = self.0.entry(base.clone()).or_insert(0);
                *n += 1;
                slug = format!("{base}-{n}");
                if !self.0.contains_key(&slug) {
                    break;
                }
            }
        }
        self.0.insert(slug.clone(), 0);
        slug
    }
}

struct Out {
    md: String,
    slugs: Slugs,
}

impl Out {
    /// A heading that must get the anchor it was linked by.
    fn heading(&mut self, level: usize, text: &str) -> String {
        let slug = self.slugs.add(text);
        assert_eq!(
            slug,
            text::slug(text),
            "two headings would have the anchor of {text:?}"
        );
        self.md
            .push_str(&format!("{} {text}\n\n", "#".repeat(level)));
        slug
    }

    /// A Markdown block (a doc comment), whose headings take anchors too.
    fn block(&mut self, md: &str) -> Vec<(usize, String, String)> {
        let mut found = Vec::new();
        for (level, text) in text::headings(md) {
            let slug = self.slugs.add(&text);
            found.push((level, text, slug));
        }
        if !md.trim().is_empty() {
            self.md.push_str(md.trim_end());
            self.md.push_str("\n\n");
        }
        found
    }

    fn para(&mut self, s: &str) {
        self.md.push_str(s);
        self.md.push_str("\n\n");
    }
}

fn derives(attrs: &[Attribute]) -> Vec<String> {
    let mut out = Vec::new();
    for a in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        if let Ok(paths) =
            a.parse_args_with(Punctuated::<syn::Path, syn::Token![,]>::parse_terminated)
        {
            out.extend(
                paths
                    .iter()
                    .filter_map(|p| p.segments.last().map(|s| s.ident.to_string())),
            );
        }
    }
    out
}

/// What `#[serde(...)]` says about a field.
#[derive(Default)]
struct SerdeField {
    rename: Option<String>,
    flatten: bool,
    skip: bool,
    default: bool,
    skip_serializing_if: Option<String>,
}

fn skip_meta(meta: &syn::meta::ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|m| skip_meta(&m))?;
    }
    Ok(())
}

fn serde_field(attrs: &[Attribute]) -> SerdeField {
    let mut f = SerdeField::default();
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|meta| {
            let name = meta
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            match name.as_str() {
                "rename" if meta.input.peek(syn::Token![=]) => {
                    f.rename = Some(meta.value()?.parse::<syn::LitStr>()?.value())
                }
                "flatten" => f.flatten = true,
                "skip" => f.skip = true,
                "default" => {
                    f.default = true;
                    skip_meta(&meta)?
                }
                "skip_serializing_if" => {
                    f.skip_serializing_if = Some(meta.value()?.parse::<syn::LitStr>()?.value())
                }
                _ => skip_meta(&meta)?,
            }
            Ok(())
        });
    }
    f
}

fn serde_rename_all(attrs: &[Attribute]) -> Option<String> {
    let mut out = None;
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename_all") && meta.input.peek(syn::Token![=]) {
                out = Some(meta.value()?.parse::<syn::LitStr>()?.value());
            } else {
                skip_meta(&meta)?;
            }
            Ok(())
        });
    }
    out
}

/// A snake_case field name under serde's `rename_all`.
fn renamed(field: &str, rule: Option<&str>) -> String {
    let words: Vec<&str> = field.split('_').filter(|w| !w.is_empty()).collect();
    let cap = |w: &str| {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    };
    match rule {
        Some("camelCase") => words
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 0 { w.to_string() } else { cap(w) })
            .collect(),
        Some("PascalCase") => words.iter().map(|w| cap(w)).collect(),
        Some("kebab-case") => words.join("-"),
        Some("lowercase") => words.concat(),
        Some("UPPERCASE") => words.concat().to_uppercase(),
        Some("SCREAMING_SNAKE_CASE") => field.to_uppercase(),
        _ => field.to_owned(),
    }
}

fn kind_of(item: &Item) -> Option<Kind> {
    Some(match item {
        Item::Struct(_) | Item::Union(_) => Kind::Struct,
        Item::Enum(_) => Kind::Enum,
        Item::Trait(_) => Kind::Trait,
        Item::Type(_) => Kind::Type,
        Item::Fn(_) => Kind::Fn,
        Item::Const(_) | Item::Static(_) => Kind::Const,
        _ => return None,
    })
}

/// The paths a type names (`Option<IpAddr>` names `Option` and `IpAddr`).
fn named_paths(t: &Type, out: &mut Vec<Vec<String>>) {
    match t {
        Type::Path(p) => {
            out.push(
                p.path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect(),
            );
            for seg in &p.path.segments {
                if let syn::PathArguments::AngleBracketed(a) = &seg.arguments {
                    for arg in &a.args {
                        if let syn::GenericArgument::Type(t) = arg {
                            named_paths(t, out);
                        }
                    }
                }
            }
        }
        Type::Reference(r) => named_paths(&r.elem, out),
        Type::Tuple(t) => t.elems.iter().for_each(|t| named_paths(t, out)),
        Type::Slice(s) => named_paths(&s.elem, out),
        Type::Array(a) => named_paths(&a.elem, out),
        Type::Paren(p) => named_paths(&p.elem, out),
        _ => {}
    }
}

fn trait_args(path: &syn::Path) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for seg in &path.segments {
        if let syn::PathArguments::AngleBracketed(a) = &seg.arguments {
            for arg in &a.args {
                if let syn::GenericArgument::Type(t) = arg {
                    named_paths(t, &mut out);
                }
            }
        }
    }
    out
}

fn type_segments(t: &Type) -> Option<Vec<String>> {
    match t {
        Type::Path(p) if p.qself.is_none() => Some(
            p.path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect(),
        ),
        _ => None,
    }
}

fn first_fn_docs(items: &[ImplItem]) -> String {
    items
        .iter()
        .find_map(|i| match i {
            ImplItem::Fn(f) => Some(model::docs(&f.attrs)),
            _ => None,
        })
        .unwrap_or_default()
}

/// Words of a signature (identifiers), to tell which methods read or
/// write JSON.
fn mentions_json(name: &str, sig: &str) -> bool {
    name.contains("json")
        || sig
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| {
                matches!(
                    w,
                    "Value" | "DeserializeOwned" | "Serialize" | "Deserialize"
                )
            })
}

impl<'m> Api<'m> {
    pub fn new(m: &'m Model) -> Api<'m> {
        let mut api = Api {
            m,
            sections: Vec::new(),
            homes: HashMap::new(),
            module_anchor: HashMap::new(),
            methods: HashMap::new(),
            impls: HashMap::new(),
            unresolved: RefCell::new(Vec::new()),
        };
        api.place_items();
        api.collect_impls();
        api
    }

    fn is_section(&self, module: usize) -> bool {
        let md = &self.m.modules[module];
        md.krate == Krate::Sdk && md.public
    }

    fn module_heading(&self, module: usize) -> String {
        if self.m.modules[module].path.is_empty() {
            "Crate `guest_sdk`".to_owned()
        } else {
            format!("Module `{}`", self.m.module_path(module))
        }
    }

    /// Which module documents each item, and the anchor of its heading.
    fn place_items(&mut self) {
        let sections: Vec<usize> = (0..self.m.modules.len())
            .filter(|&i| self.is_section(i))
            .collect();
        for &module in &sections {
            self.module_anchor
                .insert(module, text::slug(&self.module_heading(module)));
        }
        for &module in &sections {
            let mut entries = Vec::new();
            for item in &self.m.modules[module].items {
                match item {
                    Item::Use(u) if model::is_pub(&u.vis) => {
                        for (name, path) in model::use_pairs(u) {
                            let docs = model::docs(&u.attrs);
                            let entry = match self.m.resolve(module, &path) {
                                Some(Entity::External(path)) => {
                                    Entry::External { name, path, docs }
                                }
                                Some(Entity::Module(_)) => continue,
                                None => panic!(
                                    "{}: `pub use {}` names nothing the generator knows",
                                    self.m.module_path(module),
                                    path.join("::")
                                ),
                                Some(target) if self.is_defined_public(&target) => {
                                    Entry::ReExport { name, target, docs }
                                }
                                Some(target) if self.homes.contains_key(&target) => {
                                    Entry::ReExport { name, target, docs }
                                }
                                Some(target) => {
                                    let kind = self.kind(&target);
                                    self.home(module, &name, kind, target.clone());
                                    Entry::Item(target)
                                }
                            };
                            entries.push(entry);
                        }
                    }
                    _ => {
                        let Some((name, vis)) = model::item_name(item) else {
                            continue;
                        };
                        let Some(kind) = kind_of(item) else { continue };
                        if !model::is_pub(vis) {
                            continue;
                        }
                        let e = Entity::Item(module, name.clone());
                        self.home(module, &name, kind, e.clone());
                        entries.push(Entry::Item(e));
                    }
                }
            }
            self.sections.push(Section { module, entries });
        }
    }

    fn home(&mut self, module: usize, name: &str, kind: Kind, e: Entity) {
        let path = self.m.item_path(module, name);
        let anchor = match kind {
            Kind::Fn => text::slug(&self.functions_heading(module)),
            Kind::Const => text::slug(&self.constants_heading(module)),
            _ => text::slug(&format!("{} `{path}`", kind.word())),
        };
        self.homes.insert(
            e,
            Home {
                module,
                path,
                kind,
                anchor,
            },
        );
    }

    fn functions_heading(&self, module: usize) -> String {
        format!("Functions in `{}`", self.m.module_path(module))
    }

    fn constants_heading(&self, module: usize) -> String {
        format!("Constants in `{}`", self.m.module_path(module))
    }

    /// A `pub` item of a public guest-sdk module: documented where it is.
    fn is_defined_public(&self, e: &Entity) -> bool {
        match e {
            Entity::Item(module, name) => {
                self.is_section(*module)
                    && self
                        .m
                        .item(*module, name)
                        .and_then(model::item_name)
                        .is_some_and(|(_, v)| model::is_pub(v))
            }
            _ => false,
        }
    }

    fn kind(&self, e: &Entity) -> Kind {
        match e {
            Entity::Item(module, name) => self
                .m
                .item(*module, name)
                .and_then(kind_of)
                .unwrap_or(Kind::Type),
            Entity::WitType(iface, name) => match self.wit_doc(iface, name).wit_kind {
                "record" | "flags" | "resource" => Kind::Struct,
                "enum" | "variant" => Kind::Enum,
                _ => Kind::Type,
            },
            _ => Kind::Type,
        }
    }

    fn wit_doc(&self, iface: &str, name: &str) -> TypeDoc {
        self.m
            .wit
            .type_doc(iface, name)
            .unwrap_or_else(|| panic!("WIT type {iface}.{name}"))
    }

    /// Every `impl` block of both crates, attached to the documented type
    /// it is for (or, for a trait implemented by a foreign type, to the
    /// documented types its trait names: `impl From<IpAddress> for IpAddr`).
    fn collect_impls(&mut self) {
        for (module, md) in self.m.modules.iter().enumerate() {
            for item in &md.items {
                let Item::Impl(imp) = item else { continue };
                let Some(segs) = type_segments(&imp.self_ty) else {
                    continue;
                };
                let target = self.m.resolve(module, &segs);
                let documented = target.as_ref().filter(|t| self.homes.contains_key(t));
                match (&imp.trait_, documented) {
                    (None, Some(t)) => {
                        let list: Vec<Method> = imp
                            .items
                            .iter()
                            .filter_map(|i| match i {
                                ImplItem::Fn(f) if model::is_pub(&f.vis) => Some(Method {
                                    sig: print::signature(&f.sig),
                                    docs: model::docs(&f.attrs),
                                }),
                                _ => None,
                            })
                            .collect();
                        if !list.is_empty() {
                            self.methods
                                .entry(t.clone())
                                .or_default()
                                .push(Methods { module, list });
                        }
                    }
                    (None, None) => {}
                    (Some((_, trait_path, _)), documented) => {
                        let args = trait_args(trait_path);
                        let resolved: Vec<Option<Entity>> =
                            args.iter().map(|p| self.m.resolve(module, p)).collect();
                        // An impl that names a private type is not API.
                        if resolved
                            .iter()
                            .flatten()
                            .any(|e| matches!(e, Entity::Item(..)) && !self.homes.contains_key(e))
                        {
                            continue;
                        }
                        let name = trait_path
                            .segments
                            .last()
                            .map(|s| s.ident.to_string())
                            .unwrap_or_default();
                        let mut docs = model::docs(&imp.attrs);
                        if docs.is_empty() {
                            docs = first_fn_docs(&imp.items);
                        }
                        let generics = print::generics(&imp.generics);
                        match documented {
                            Some(t) => {
                                let text = format!("{generics} {}", print::path(trait_path));
                                self.impls.entry(t.clone()).or_default().push(TraitImpl {
                                    text: text.trim().to_owned(),
                                    name,
                                    docs,
                                    module,
                                });
                            }
                            None => {
                                let text = format!(
                                    "impl{generics} {} for {}",
                                    print::path(trait_path),
                                    print::ty(&imp.self_ty)
                                );
                                for e in resolved.into_iter().flatten() {
                                    if self.homes.contains_key(&e) {
                                        self.impls.entry(e).or_default().push(TraitImpl {
                                            text: text.clone(),
                                            name: name.clone(),
                                            docs: docs.clone(),
                                            module,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn anchor_of(&self, e: &Entity) -> Option<String> {
        match e {
            Entity::Module(m) => self.module_anchor.get(m).cloned(),
            e => self.homes.get(e).map(|h| h.anchor.clone()),
        }
    }

    /// The anchor an intra-doc link in module `module` (in the docs of
    /// `self_ty`) points at.
    fn resolve_link(&self, module: usize, self_ty: Option<&Entity>, dest: &str) -> Option<String> {
        let dest = dest.split('#').next().unwrap_or(dest);
        let dest = dest.split_once('@').map_or(dest, |(_, p)| p);
        let dest = dest.trim_end_matches("()").trim_end_matches('!');
        let segs: Vec<String> = dest.split("::").map(str::to_owned).collect();
        if segs.iter().any(String::is_empty) {
            return None;
        }
        if segs[0] == "Self" {
            return self.anchor_of(self_ty?);
        }
        let root = self.m.root_of(self.m.modules[module].krate);
        // The whole path, else the path of its type (a method, field or
        // variant links to its type's heading).
        for n in [segs.len(), segs.len() - 1] {
            for base in [module, root] {
                if n == 0 {
                    continue;
                }
                if let Some(a) = self
                    .m
                    .resolve(base, &segs[..n])
                    .and_then(|e| self.anchor_of(&e))
                {
                    return Some(a);
                }
            }
        }
        None
    }

    fn linker<'a>(
        &'a self,
        module: usize,
        self_ty: Option<&'a Entity>,
    ) -> impl FnMut(&str) -> Option<String> + 'a {
        move |dest: &str| {
            let found = self.resolve_link(module, self_ty, dest);
            if found.is_none() {
                self.unresolved
                    .borrow_mut()
                    .push(format!("{}: {dest}", self.m.module_path(module)));
            }
            found
        }
    }

    fn link_to(&self, e: &Entity) -> String {
        let h = &self.homes[e];
        format!("[`{}`](#{})", h.path, h.anchor)
    }

    fn module_link(&self, module: usize) -> String {
        format!(
            "[`{}`](#{})",
            self.m.module_path(module),
            self.module_anchor[&module]
        )
    }

    /// The item's docs and the module its links are resolved in.
    fn docs_of(&self, e: &Entity) -> (String, usize) {
        match e {
            Entity::Item(module, name) => (
                self.m
                    .item(*module, name)
                    .map(|i| model::docs(model::item_attrs(i)))
                    .unwrap_or_default(),
                *module,
            ),
            Entity::WitType(iface, name) => (self.wit_doc(iface, name).docs, self.homes[e].module),
            _ => (String::new(), 0),
        }
    }

    /// (`Deserialize`, `Serialize`): how each is implemented, if it is.
    fn json(&self, e: &Entity) -> (Option<String>, Option<String>) {
        let derived = match e {
            Entity::Item(module, name) => self
                .m
                .item(*module, name)
                .map(|i| derives(model::item_attrs(i)))
                .unwrap_or_default(),
            Entity::WitType(..) => self.m.wit_derives.clone(),
            _ => Vec::new(),
        };
        let how = |trait_name: &str| {
            if derived.iter().any(|d| d == trait_name) {
                return Some("derived".to_owned());
            }
            self.impls
                .get(e)?
                .iter()
                .find(|i| i.name == trait_name)
                .map(|i| {
                    let mut link = self.linker(i.module, Some(e));
                    let summary = text::summary(&i.docs, &mut link);
                    let summary = summary.trim_end_matches('.');
                    if summary.is_empty() {
                        "hand-written".to_owned()
                    } else {
                        format!("hand-written ({summary})")
                    }
                })
        };
        (how("Deserialize"), how("Serialize"))
    }

    /// Public methods of `e` that read or write JSON.
    fn json_methods(&self, e: &Entity) -> Vec<String> {
        self.methods
            .get(e)
            .into_iter()
            .flatten()
            .flat_map(|g| &g.list)
            .filter_map(|m| {
                let name = m
                    .sig
                    .split(['(', '<'])
                    .next()?
                    .rsplit(' ')
                    .next()?
                    .to_owned();
                mentions_json(&name, &m.sig).then_some(name)
            })
            .collect()
    }

    pub fn render(&self) -> Reference {
        let header_headings = [
            "guest-sdk reference",
            "Contents",
            "Worked examples",
            "Types and JSON",
        ];
        let mut body = Out {
            md: String::new(),
            slugs: Slugs::default(),
        };
        for h in header_headings {
            body.slugs.add(h);
        }
        let mut examples = Vec::new();
        for s in &self.sections {
            self.section(&mut body, s, &mut examples);
        }

        let mut md = String::new();
        md.push_str(&format!(
            "<!-- Generated from guest-sdk/src (and wit/, host/cni-spec/src for the types guest-sdk re-exports) \
             by guest-sdk/tests/sdk_reference; a test fails when it is stale. Do not edit: regenerate with \
             `{REGENERATE}`. -->\n"
        ));
        md.push_str("# guest-sdk reference\n\n");
        md.push_str(
            "The public API of guest-sdk, the crate a wasmcni plugin is written against: every public \
             module with its documentation and worked examples, every type with its fields (their JSON \
             keys where serde reads or writes it), variants and trait implementations, every function \
             and method with its signature and the first paragraph of its documentation. It is generated \
             from the source, so it says what `cargo doc -p wasmcni-guest-sdk --open` says, without the build; \
             the full text of a function's documentation is there. Paths are relative to `guest_sdk::`; \
             a type is documented in the module that defines it, and each module lists the names it \
             re-exports (most types of `cni::config`, `cni::result`, ... are imported as `cni::NetConf`, \
             `cni::CniResult`). \
             For a first plugin start at the [crate documentation](#crate-guest_sdk); what each host call \
             needs from the policy is in [capabilities.md](capabilities.md).\n\n",
        );
        md.push_str("## Contents\n\n");
        md.push_str("- [Worked examples](#worked-examples)\n- [Types and JSON](#types-and-json)\n");
        for s in &self.sections {
            let module = &self.m.modules[s.module];
            let mut link = |_: &str| None;
            let summary = text::summary(&module.docs, &mut link);
            md.push_str(&format!(
                "{}- {}: {}\n",
                "  ".repeat(module.path.len()),
                self.module_link(s.module),
                summary
            ));
        }
        md.push_str("\n## Worked examples\n\n");
        md.push_str(
            "A short, complete use of each capability, from the module documentation below. Each is a \
             doc test of guest-sdk (`cargo test -p wasmcni-guest-sdk --doc` compiles it), so it stays true to \
             the API.\n\n",
        );
        for (module, text, slug) in &examples {
            let name = text.trim_start_matches("Example: ");
            let mut c = name.chars();
            let name: String = c
                .next()
                .into_iter()
                .flat_map(char::to_uppercase)
                .chain(c)
                .collect();
            md.push_str(&format!(
                "- [{name}](#{slug}) (in {})\n",
                self.module_link(*module)
            ));
        }
        md.push('\n');
        md.push_str(&self.json_section());
        md.push_str(&body.md);
        Reference {
            markdown: format!("{}\n", md.trim_end()),
            unresolved: self.unresolved.take(),
        }
    }

    fn json_section(&self) -> String {
        let mut s = String::from("## Types and JSON\n\n");
        s.push_str(
            "Which types serde reads from JSON (`Deserialize`: a plugin may use them in its own config \
             type, `#[derive(Deserialize)]`, read with `NetConf::plugin_config`) and writes to JSON \
             (`Serialize`).\n\n| type | `Deserialize` | `Serialize` |\n|---|---|---|\n",
        );
        let mut none = Vec::new();
        let mut by_methods = Vec::new();
        for e in self.documented_types() {
            let (de, ser) = self.json(e);
            if de.is_some() || ser.is_some() {
                s.push_str(&format!(
                    "| {} | {} | {} |\n",
                    self.link_to(e),
                    de.unwrap_or_else(|| "no".into()).replace('|', "\\|"),
                    ser.unwrap_or_else(|| "no".into()).replace('|', "\\|")
                ));
            } else {
                none.push(self.link_to(e));
            }
            let methods = self.json_methods(e);
            if !methods.is_empty() {
                let names: Vec<String> = methods.iter().map(|m| format!("`{m}`")).collect();
                by_methods.push(format!("- {}: {}", self.link_to(e), names.join(", ")));
            }
        }
        s.push_str("\nMethods that read or write JSON (a CNI result is versioned JSON, read and written by its methods, not by serde):\n\n");
        s.push_str(&by_methods.join("\n"));
        s.push_str(&format!(
            "\n\nNo other type implements `Deserialize` or `Serialize`: {}.\n\n",
            none.join(", ")
        ));
        s
    }

    /// Every documented struct, enum and type, in document order.
    fn documented_types(&self) -> Vec<&Entity> {
        self.sections
            .iter()
            .flat_map(|s| &s.entries)
            .filter_map(|e| match e {
                Entry::Item(e) if matches!(self.homes[e].kind, Kind::Struct | Kind::Enum) => {
                    Some(e)
                }
                _ => None,
            })
            .collect()
    }

    fn section(&self, out: &mut Out, s: &Section, examples: &mut Vec<(usize, String, String)>) {
        let module = &self.m.modules[s.module];
        out.heading(2, &self.module_heading(s.module));
        out.para(&format!("Source: `{}`.", module.file));
        let mut link = self.linker(s.module, None);
        let docs = text::block(&module.docs, 4, &mut link);
        for (_, text, slug) in out.block(&docs) {
            if text.starts_with("Example") || text == "A complete plugin" {
                examples.push((s.module, text, slug));
            }
        }

        let reexports: Vec<String> = s
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::ReExport { name, target, docs } => {
                    let h = &self.homes[target];
                    let own = h.path.rsplit("::").next() == Some(name.as_str());
                    let mut line = if own {
                        format!("- `{name}`: {}", self.link_to(target))
                    } else {
                        format!("- `{name}`: another name for {}", self.link_to(target))
                    };
                    let mut link = self.linker(s.module, None);
                    let summary = text::summary(docs, &mut link);
                    if !summary.is_empty() {
                        line.push_str(&format!(" — {summary}"));
                    }
                    Some(line)
                }
                Entry::External { name, path, docs } => {
                    let mut link = self.linker(s.module, None);
                    let summary = text::summary(docs, &mut link);
                    Some(
                        format!("- `{name}`: `{path}` {summary}")
                            .trim_end()
                            .to_owned(),
                    )
                }
                Entry::Item(_) => None,
            })
            .collect();
        if !reexports.is_empty() {
            out.para(&format!(
                "Re-exports (names in this module for items documented elsewhere):\n\n{}",
                reexports.join("\n")
            ));
        }

        let items: Vec<&Entity> = s
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Item(e) => Some(e),
                _ => None,
            })
            .collect();
        for e in &items {
            if matches!(
                self.homes[*e].kind,
                Kind::Struct | Kind::Enum | Kind::Trait | Kind::Type
            ) {
                self.type_item(out, e);
            }
        }

        // Methods this module adds to a type documented in another.
        let mut foreign: Vec<(&Entity, &Methods)> = self
            .methods
            .iter()
            .flat_map(|(e, groups)| groups.iter().map(move |g| (e, g)))
            .filter(|(e, g)| g.module == s.module && self.homes[*e].module != s.module)
            .collect();
        foreign.sort_by_key(|(e, _)| self.homes[*e].path.clone());
        for (e, g) in foreign {
            let h = &self.homes[e];
            out.heading(
                3,
                &format!(
                    "Methods of `{}` in `{}`",
                    h.path,
                    self.m.module_path(s.module)
                ),
            );
            out.para(&format!(
                "`impl {}` in this module: methods of {}.",
                h.path.rsplit("::").next().unwrap_or(""),
                self.link_to(e)
            ));
            out.para(&self.method_list(&g.list, s.module, Some(e)));
        }

        let fns: Vec<String> = items
            .iter()
            .filter(|e| self.homes[**e].kind == Kind::Fn)
            .filter_map(|e| match e {
                Entity::Item(m, name) => match self.m.item(*m, name) {
                    Some(Item::Fn(f)) => Some(self.method_line(
                        &print::signature(&f.sig),
                        &model::docs(&f.attrs),
                        *m,
                        None,
                    )),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if !fns.is_empty() {
            out.heading(3, &self.functions_heading(s.module));
            out.para(&fns.join("\n"));
        }

        let consts: Vec<String> = items
            .iter()
            .filter(|e| self.homes[**e].kind == Kind::Const)
            .filter_map(|e| {
                let Entity::Item(m, name) = e else {
                    return None;
                };
                let shown = &self.homes[*e]
                    .path
                    .rsplit("::")
                    .next()
                    .unwrap_or(name)
                    .to_owned();
                let (ty, value, docs) = match self.m.item(*m, name)? {
                    Item::Const(c) => (
                        print::ty(&c.ty),
                        print::expr(&c.expr),
                        model::docs(&c.attrs),
                    ),
                    Item::Static(c) => (
                        print::ty(&c.ty),
                        print::expr(&c.expr),
                        model::docs(&c.attrs),
                    ),
                    _ => return None,
                };
                let value = value.map(|v| format!(" = {v}")).unwrap_or_default();
                Some(self.method_line(&format!("const {shown}: {ty}{value}"), &docs, *m, None))
            })
            .collect();
        if !consts.is_empty() {
            out.heading(3, &self.constants_heading(s.module));
            out.para(&consts.join("\n"));
        }
    }

    fn method_line(
        &self,
        sig: &str,
        docs: &str,
        module: usize,
        self_ty: Option<&Entity>,
    ) -> String {
        let mut link = self.linker(module, self_ty);
        let summary = text::summary(docs, &mut link);
        if summary.is_empty() {
            format!("- `{sig}`")
        } else {
            format!("- `{sig}` — {summary}")
        }
    }

    fn method_list(&self, list: &[Method], module: usize, self_ty: Option<&Entity>) -> String {
        list.iter()
            .map(|m| self.method_line(&m.sig, &m.docs, module, self_ty))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn type_item(&self, out: &mut Out, e: &Entity) {
        let h = &self.homes[e];
        out.heading(3, &format!("{} `{}`", h.kind.word(), h.path));
        let (docs, docs_module) = self.docs_of(e);
        let mut link = self.linker(docs_module, Some(e));
        let block = text::block(&docs, 4, &mut link);
        out.block(&block);

        let mut facts = Vec::new();
        match e {
            Entity::Item(m, _) if self.m.modules[*m].krate == Krate::CniSpec => {
                facts.push(format!(
                    "Re-exported from the `cni-spec` crate (`{}`), which the host shares.",
                    self.m.modules[*m].file
                ))
            }
            Entity::Item(m, _) if !self.is_section(*m) => {
                facts.push(format!("Defined in `{}`.", self.m.modules[*m].file))
            }
            Entity::WitType(iface, name) => {
                let w = self.wit_doc(iface, name);
                let file = format!("wit/{iface}.wit");
                let file = if self.m.root.join(&file).exists() {
                    file
                } else {
                    "wit/".into()
                };
                facts.push(format!(
                    "Generated by wit-bindgen from the WIT {} `{}` of interface `{iface}` (`{file}`).",
                    w.wit_kind, w.wit_name
                ));
            }
            _ => {}
        }
        let derived = self.derive_list(e);
        if !derived.is_empty() {
            let list: Vec<String> = derived.iter().map(|d| format!("`{d}`")).collect();
            facts.push(format!("Derives {}.", list.join(", ")));
        }
        if matches!(h.kind, Kind::Struct | Kind::Enum) {
            let (de, ser) = self.json(e);
            let methods = self.json_methods(e);
            let json = match (de, ser) {
                (None, None) if methods.is_empty() => "JSON: no serde implementation.".to_owned(),
                (None, None) => format!(
                    "JSON: no serde implementation; read and written by {}.",
                    methods
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                (de, ser) => format!(
                    "JSON: `Deserialize`: {}; `Serialize`: {}.",
                    de.unwrap_or_else(|| "no".into()),
                    ser.unwrap_or_else(|| "no".into())
                ),
            };
            facts.push(json);
        }
        if !facts.is_empty() {
            out.para(&facts.join(" "));
        }

        match e {
            Entity::Item(m, name) => match self.m.item(*m, name) {
                Some(Item::Struct(st)) => out.para(&self.fields(e, *m, &st.fields, &st.attrs)),
                Some(Item::Enum(en)) => {
                    let lines: Vec<String> = en
                        .variants
                        .iter()
                        .map(|v| {
                            let shape = match &v.fields {
                                Fields::Unit => String::new(),
                                Fields::Unnamed(f) => format!(
                                    "({})",
                                    f.unnamed
                                        .iter()
                                        .map(|f| print::ty(&f.ty))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                                Fields::Named(f) => format!(
                                    " {{ {} }}",
                                    f.named
                                        .iter()
                                        .map(|f| format!(
                                            "{}: {}",
                                            f.ident
                                                .as_ref()
                                                .map(|i| i.to_string())
                                                .unwrap_or_default(),
                                            print::ty(&f.ty)
                                        ))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            };
                            let disc = v
                                .discriminant
                                .as_ref()
                                .and_then(|(_, x)| print::expr(x))
                                .map(|x| format!(" = {x}"))
                                .unwrap_or_default();
                            self.method_line(
                                &format!("{}{shape}{disc}", v.ident),
                                &model::docs(&v.attrs),
                                *m,
                                Some(e),
                            )
                        })
                        .collect();
                    out.para(&format!("Variants:\n\n{}", lines.join("\n")));
                }
                Some(Item::Trait(tr)) => {
                    let lines: Vec<String> = tr
                        .items
                        .iter()
                        .filter_map(|i| match i {
                            TraitItem::Fn(f) => {
                                let which = if f.default.is_some() {
                                    "provided"
                                } else {
                                    "required"
                                };
                                let mut link = self.linker(*m, Some(e));
                                let summary = text::summary(&model::docs(&f.attrs), &mut link);
                                Some(format!(
                                    "- `{}` ({which}) — {summary}",
                                    print::signature(&f.sig)
                                ))
                            }
                            _ => None,
                        })
                        .collect();
                    out.para(&format!("Trait methods:\n\n{}", lines.join("\n")));
                }
                Some(Item::Type(t)) => out.para(&format!(
                    "`type {}{} = {};`",
                    t.ident,
                    print::generics(&t.generics),
                    print::ty(&t.ty)
                )),
                _ => {}
            },
            Entity::WitType(iface, name) => {
                let w = self.wit_doc(iface, name);
                let mut link = self.linker(h.module, Some(e));
                match w.shape {
                    Shape::Record(fields) => {
                        let mut t = String::from("| field | type | description |\n|---|---|---|\n");
                        for (n, ty, d) in fields {
                            t.push_str(&format!(
                                "| `{n}` | `{ty}` | {} |\n",
                                text::cell(&d, &mut link)
                            ));
                        }
                        out.para(t.trim_end());
                    }
                    Shape::Enum(cases) => {
                        let lines: Vec<String> = cases
                            .iter()
                            .map(|(n, d)| self.method_line(n, d, h.module, Some(e)))
                            .collect();
                        out.para(&format!("Variants:\n\n{}", lines.join("\n")));
                    }
                    Shape::Variant(cases) => {
                        let lines: Vec<String> = cases
                            .iter()
                            .map(|(n, ty, d)| {
                                let shape =
                                    ty.as_ref().map(|t| format!("({t})")).unwrap_or_default();
                                self.method_line(&format!("{n}{shape}"), d, h.module, Some(e))
                            })
                            .collect();
                        out.para(&format!("Variants:\n\n{}", lines.join("\n")));
                    }
                    Shape::Flags(flags) => {
                        let lines: Vec<String> = flags
                            .iter()
                            .map(|(n, d)| self.method_line(n, d, h.module, Some(e)))
                            .collect();
                        out.para(&format!("Flags:\n\n{}", lines.join("\n")));
                    }
                    Shape::Resource => out.para("A resource: a handle the host gave out."),
                    Shape::Alias(t) => out.para(&format!("`type {} = {t};`", upper(name))),
                }
            }
            _ => {}
        }

        // Methods: those written beside the type in full, those another
        // public module adds by name (they are listed there).
        for g in self.methods.get(e).into_iter().flatten() {
            if g.module == h.module || !self.is_section(g.module) {
                let own = if matches!(e, Entity::WitType(..)) && g.module == h.module {
                    format!(
                        "Methods (`impl {}` in `{}`):",
                        upper_last(&h.path),
                        self.m.module_path(g.module)
                    )
                } else {
                    "Methods:".to_owned()
                };
                out.para(&format!(
                    "{own}\n\n{}",
                    self.method_list(&g.list, g.module, Some(e))
                ));
            }
        }
        let elsewhere: Vec<String> = self
            .methods
            .get(e)
            .into_iter()
            .flatten()
            .filter(|g| g.module != h.module && self.is_section(g.module))
            .map(|g| {
                let names: Vec<String> = g
                    .list
                    .iter()
                    .map(|m| {
                        format!(
                            "`{}`",
                            m.sig
                                .split(['(', '<'])
                                .next()
                                .unwrap_or("")
                                .trim_start_matches("fn ")
                        )
                    })
                    .collect();
                format!("- in {}: {}", self.module_link(g.module), names.join(", "))
            })
            .collect();
        if !elsewhere.is_empty() {
            out.para(&format!(
                "More methods, documented in the module that adds them:\n\n{}",
                elsewhere.join("\n")
            ));
        }

        let traits: Vec<String> = self
            .impls
            .get(e)
            .into_iter()
            .flatten()
            .map(|i| {
                let mut link = self.linker(i.module, Some(e));
                let summary = text::summary(&i.docs, &mut link);
                if summary.is_empty() {
                    format!("- `{}`", i.text)
                } else {
                    format!("- `{}` — {summary}", i.text)
                }
            })
            .collect();
        if !traits.is_empty() {
            out.para(&format!(
                "Trait implementations (besides the derived ones):\n\n{}",
                traits.join("\n")
            ));
        }
    }

    /// The derives of a documented type, as rustdoc would list them.
    fn derive_list(&self, e: &Entity) -> Vec<String> {
        match e {
            Entity::Item(m, name) => self
                .m
                .item(*m, name)
                .map(|i| derives(model::item_attrs(i)))
                .unwrap_or_default(),
            Entity::WitType(iface, name) => {
                let w = self.wit_doc(iface, name);
                let mut d: Vec<String> = vec!["Debug".into()];
                match w.wit_kind {
                    "enum" => d.extend(
                        ["Clone", "Copy", "PartialEq", "Eq", "PartialOrd", "Ord"].map(String::from),
                    ),
                    "flags" => d.extend(
                        [
                            "Clone",
                            "Copy",
                            "PartialEq",
                            "Eq",
                            "PartialOrd",
                            "Ord",
                            "Hash",
                        ]
                        .map(String::from),
                    ),
                    "resource" => return Vec::new(),
                    _ if w.copy => d.extend(["Clone", "Copy"].map(String::from)),
                    _ => d.push("Clone".into()),
                }
                for x in &self.m.wit_derives {
                    if !d.contains(x) {
                        d.push(x.clone());
                    }
                }
                d
            }
            _ => Vec::new(),
        }
    }

    fn fields(&self, e: &Entity, module: usize, fields: &Fields, attrs: &[Attribute]) -> String {
        let ds = derives(attrs);
        let serde = ds.iter().any(|d| d == "Serialize" || d == "Deserialize");
        let rule = serde_rename_all(attrs);
        let mut rows = Vec::new();
        let mut private = 0;
        for (i, f) in fields.iter().enumerate() {
            if !model::is_pub(&f.vis) {
                private += 1;
                continue;
            }
            let name = f
                .ident
                .as_ref()
                .map(|i| i.to_string())
                .unwrap_or_else(|| i.to_string());
            let mut link = self.linker(module, Some(e));
            let doc = text::cell(&model::docs(&f.attrs), &mut link);
            let ty = print::ty(&f.ty).replace('|', "\\|");
            if serde {
                let sf = serde_field(&f.attrs);
                let key = if sf.skip {
                    "(not in JSON)".to_owned()
                } else if sf.flatten {
                    "(flattened: every other key)".to_owned()
                } else {
                    let mut k = format!(
                        "`{}`",
                        sf.rename
                            .clone()
                            .unwrap_or_else(|| renamed(&name, rule.as_deref()))
                    );
                    if sf.default {
                        k.push_str(", optional");
                    }
                    if let Some(c) = &sf.skip_serializing_if {
                        k.push_str(&format!(", left out when `{c}`"));
                    }
                    k
                };
                rows.push(format!("| `{name}` | `{ty}` | {key} | {doc} |"));
            } else {
                rows.push(format!("| `{name}` | `{ty}` | {doc} |"));
            }
        }
        let mut s = String::new();
        if !rows.is_empty() {
            s.push_str(if serde {
                "| field | type | JSON key | description |\n|---|---|---|---|\n"
            } else {
                "| field | type | description |\n|---|---|---|\n"
            });
            s.push_str(&rows.join("\n"));
        }
        match (rows.is_empty(), private) {
            (_, 0) => {}
            (true, _) => s.push_str("Its fields are private: build and read it with its methods."),
            (false, _) => s.push_str("\n\nIt has private fields too: build it with its methods."),
        }
        if s.is_empty() && matches!(fields, Fields::Unit) {
            s.push_str("A unit struct (no fields).");
        }
        s
    }
}

fn upper(wit_name: &str) -> String {
    crate::wit::upper_camel(wit_name)
}

fn upper_last(path: &str) -> &str {
    path.rsplit("::").next().unwrap_or(path)
}

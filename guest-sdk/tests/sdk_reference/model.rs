//! The source as the reference sees it: guest-sdk's modules (and those of
//! `cni-spec`, whose items guest-sdk re-exports) parsed with syn, the
//! names each module binds (its items and its `use`s), and the paths those
//! resolve to, down to the WIT types behind `crate::bindings`.

use std::path::{Path, PathBuf};

use syn::{Attribute, Item, UseTree, Visibility};

use crate::wit::Wit;

/// Which crate a module belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Krate {
    Sdk,
    CniSpec,
}

/// Something a path can name.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Entity {
    /// A module, by index.
    Module(usize),
    /// An item defined in a module: (module index, name).
    Item(usize, String),
    /// A WIT interface behind `crate::bindings` (kebab-case name).
    WitInterface(String),
    /// A WIT type: (defining interface, WIT name).
    WitType(String, String),
    /// Anything outside the documented crates (`std::...`).
    External(String),
}

pub struct Module {
    pub krate: Krate,
    /// Path from the crate root (`["cni", "config"]`; the root is empty).
    pub path: Vec<String>,
    pub parent: Option<usize>,
    /// Declared `pub`, and so are its ancestors.
    pub public: bool,
    pub docs: String,
    pub items: Vec<Item>,
    /// Repository-relative source file.
    pub file: String,
    /// `mod bindings` (wit-bindgen's `generate!`).
    pub bindings: bool,
}

/// One name a module binds.
pub struct Binding {
    pub name: String,
    pub target: Target,
}

pub enum Target {
    Def(Entity),
    Use(Vec<String>),
}

pub struct Model {
    pub root: PathBuf,
    pub modules: Vec<Module>,
    pub wit: Wit,
    scopes: Vec<Vec<Binding>>,
    /// The derives wit-bindgen adds to every generated type
    /// (`additional_derives` in `mod bindings`).
    pub wit_derives: Vec<String>,
}

/// Whether `attrs` holds `#[cfg(test)]`.
pub fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test")
    })
}

/// The doc comment in `attrs`, unindented as rustdoc does.
pub fn docs(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        // `split`, not `lines`: an empty `///` line is an empty string,
        // which `lines` would drop.
        .flat_map(|s| s.split('\n').map(str::to_owned).collect::<Vec<_>>())
        .collect();
    unindent(&lines)
}

/// Removes the indentation every non-blank line shares.
pub fn unindent(lines: &[String]) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let out: Vec<&str> = lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end())
        .collect();
    out.join("\n").trim_matches('\n').to_owned()
}

pub fn is_pub(v: &Visibility) -> bool {
    matches!(v, Visibility::Public(_))
}

/// The name an item defines, if it is one a path can name.
pub fn item_name(item: &Item) -> Option<(String, &Visibility)> {
    let (ident, vis) = match item {
        Item::Struct(i) => (&i.ident, &i.vis),
        Item::Enum(i) => (&i.ident, &i.vis),
        Item::Trait(i) => (&i.ident, &i.vis),
        Item::Type(i) => (&i.ident, &i.vis),
        Item::Fn(i) => (&i.sig.ident, &i.vis),
        Item::Const(i) => (&i.ident, &i.vis),
        Item::Static(i) => (&i.ident, &i.vis),
        Item::Union(i) => (&i.ident, &i.vis),
        Item::Mod(i) => (&i.ident, &i.vis),
        _ => return None,
    };
    Some((ident.to_string(), vis))
}

pub fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Struct(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Const(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// Flattens a `use` tree into (name bound, path) pairs; globs are left out.
fn flatten_use(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) if n.ident == "self" => {
            out.push((prefix.last().cloned().unwrap_or_default(), prefix.clone()))
        }
        UseTree::Name(n) => {
            let mut p = prefix.clone();
            p.push(n.ident.to_string());
            out.push((n.ident.to_string(), p));
        }
        UseTree::Rename(r) if r.ident == "self" => out.push((r.rename.to_string(), prefix.clone())),
        UseTree::Rename(r) => {
            let mut p = prefix.clone();
            p.push(r.ident.to_string());
            out.push((r.rename.to_string(), p));
        }
        UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
        UseTree::Glob(_) => {}
    }
}

/// The (name bound, path) pairs of a `use` item.
pub fn use_pairs(u: &syn::ItemUse) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    flatten_use(&u.tree, &mut Vec::new(), &mut out);
    out
}

/// `additional_derives: [A, B]` in the tokens of `generate!`.
fn additional_derives(tokens: &str) -> Vec<String> {
    let compact: String = tokens.split_whitespace().collect();
    let Some(start) = compact.find("additional_derives:[") else {
        return Vec::new();
    };
    let rest = &compact[start + "additional_derives:[".len()..];
    let end = rest.find(']').unwrap_or(0);
    rest[..end]
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.rsplit("::").next().unwrap_or(s).to_owned())
        .collect()
}

impl Model {
    pub fn load(root: &Path) -> Model {
        let mut m = Model {
            root: root.to_owned(),
            modules: Vec::new(),
            wit: Wit::load(&root.join("wit")),
            scopes: Vec::new(),
            wit_derives: Vec::new(),
        };
        m.load_file(Krate::Sdk, Vec::new(), None, true, "guest-sdk/src/lib.rs");
        m.load_file(
            Krate::CniSpec,
            Vec::new(),
            None,
            true,
            "host/cni-spec/src/lib.rs",
        );
        m.scopes = (0..m.modules.len()).map(|i| m.bindings_of(i)).collect();
        m
    }

    fn load_file(
        &mut self,
        krate: Krate,
        path: Vec<String>,
        parent: Option<usize>,
        public: bool,
        file: &str,
    ) {
        let text = std::fs::read_to_string(self.root.join(file))
            .unwrap_or_else(|e| panic!("reading {file}: {e}"));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {file}: {e}"));
        let dir = match Path::new(file).file_name().and_then(|f| f.to_str()) {
            Some("lib.rs" | "mod.rs") => Path::new(file).parent().map(Path::to_path_buf),
            _ => Some(Path::new(file).with_extension("")),
        }
        .unwrap_or_default();
        let items: Vec<Item> = parsed
            .items
            .into_iter()
            .filter(|i| !is_test(item_attrs(i)))
            .collect();
        self.add_module(
            krate,
            path,
            parent,
            public,
            docs(&parsed.attrs),
            items,
            file,
            &dir,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn add_module(
        &mut self,
        krate: Krate,
        path: Vec<String>,
        parent: Option<usize>,
        public: bool,
        docs_text: String,
        items: Vec<Item>,
        file: &str,
        dir: &Path,
    ) {
        let index = self.modules.len();
        let bindings = krate == Krate::Sdk && path == ["bindings"];
        if bindings {
            for item in &items {
                if let Item::Macro(mac) = item {
                    self.wit_derives = additional_derives(&mac.mac.tokens.to_string());
                }
            }
        }
        let children: Vec<(String, bool, Option<Vec<Item>>, String)> = items
            .iter()
            .filter_map(|i| match i {
                Item::Mod(m) => Some((
                    m.ident.to_string(),
                    is_pub(&m.vis),
                    m.content.as_ref().map(|(_, items)| items.clone()),
                    docs(&m.attrs),
                )),
                _ => None,
            })
            .collect();
        self.modules.push(Module {
            krate,
            path: path.clone(),
            parent,
            public,
            docs: docs_text,
            items,
            file: file.to_owned(),
            bindings,
        });
        for (name, is_public, inline, outer_docs) in children {
            let mut child = path.clone();
            child.push(name.clone());
            let public = public && is_public;
            match inline {
                Some(items) => {
                    let items = items
                        .into_iter()
                        .filter(|i| !is_test(item_attrs(i)))
                        .collect();
                    self.add_module(
                        krate,
                        child,
                        Some(index),
                        public,
                        outer_docs,
                        items,
                        file,
                        &dir.join(&name),
                    )
                }
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let nested = dir.join(&name).join("mod.rs");
                    let file = if self.root.join(&flat).exists() {
                        flat
                    } else {
                        nested
                    };
                    let file = file.to_string_lossy().into_owned();
                    self.load_file(krate, child, Some(index), public, &file);
                }
            }
        }
    }

    /// The names module `m` binds: its items (and submodules), then its
    /// `use`s, in source order.
    fn bindings_of(&self, m: usize) -> Vec<Binding> {
        let module = &self.modules[m];
        let mut out = Vec::new();
        for item in &module.items {
            if let Some((name, _)) = item_name(item) {
                let target = match item {
                    Item::Mod(_) => Entity::Module(self.child(m, &name).expect("loaded")),
                    _ => Entity::Item(m, name.clone()),
                };
                out.push(Binding {
                    name,
                    target: Target::Def(target),
                });
            }
        }
        for item in &module.items {
            if let Item::Use(u) = item {
                for (name, path) in use_pairs(u) {
                    out.push(Binding {
                        name,
                        target: Target::Use(path),
                    });
                }
            }
        }
        out
    }

    pub fn scope(&self, m: usize) -> &[Binding] {
        &self.scopes[m]
    }

    fn child(&self, m: usize, name: &str) -> Option<usize> {
        self.modules
            .iter()
            .position(|c| c.parent == Some(m) && c.path.last().map(String::as_str) == Some(name))
    }

    pub fn root_of(&self, krate: Krate) -> usize {
        self.modules
            .iter()
            .position(|m| m.krate == krate && m.path.is_empty())
            .expect("crate root")
    }

    /// The item `name` defined in module `m`.
    pub fn item(&self, m: usize, name: &str) -> Option<&Item> {
        self.modules[m]
            .items
            .iter()
            .find(|i| item_name(i).is_some_and(|(n, _)| n == name) && !matches!(i, Item::Mod(_)))
    }

    /// What `segs` names in module `m` (a `use` path or a path in code).
    pub fn resolve(&self, m: usize, segs: &[String]) -> Option<Entity> {
        self.resolve_depth(m, segs, 0)
    }

    fn resolve_depth(&self, m: usize, segs: &[String], depth: usize) -> Option<Entity> {
        if depth > 16 {
            return None;
        }
        let (first, rest) = segs.split_first()?;
        let start = match first.as_str() {
            "crate" => Entity::Module(self.root_of(self.modules[m].krate)),
            "self" => Entity::Module(m),
            "super" => Entity::Module(self.modules[m].parent?),
            name => self.lookup(m, name, depth)?,
        };
        self.descend(start, rest, depth)
    }

    fn lookup(&self, m: usize, name: &str, depth: usize) -> Option<Entity> {
        for b in self.scope(m) {
            if b.name == name {
                return match &b.target {
                    Target::Def(e) => Some(e.clone()),
                    Target::Use(path) => self.resolve_depth(m, path, depth + 1),
                };
            }
        }
        match name {
            "cni_spec" => Some(Entity::Module(self.root_of(Krate::CniSpec))),
            "guest_sdk" => Some(Entity::Module(self.root_of(Krate::Sdk))),
            "std" | "core" | "alloc" | "serde" | "serde_json" | "gojson" | "wit_bindgen" => {
                Some(Entity::External(name.to_owned()))
            }
            _ => None,
        }
    }

    fn descend(&self, e: Entity, rest: &[String], depth: usize) -> Option<Entity> {
        let Some((next, more)) = rest.split_first() else {
            return Some(e);
        };
        let e = match e {
            // `crate::bindings::wasmcni::plugin::<interface>`
            Entity::Module(b) if self.modules[b].bindings => {
                let [ns, pkg, iface, tail @ ..] = rest else {
                    return None;
                };
                let iface = iface.replace('_', "-");
                if ns != "wasmcni" || pkg != "plugin" || !self.wit.has_interface(&iface) {
                    return None;
                }
                return self.descend(Entity::WitInterface(iface), tail, depth);
            }
            Entity::Module(sub) => match next.as_str() {
                "super" => Entity::Module(self.modules[sub].parent?),
                "self" => Entity::Module(sub),
                name => self.lookup(sub, name, depth + 1)?,
            },
            Entity::WitInterface(iface) => {
                let (owner, name) = self.wit.find(&iface, next)?;
                Entity::WitType(owner, name)
            }
            Entity::External(s) => Entity::External(format!("{s}::{next}")),
            Entity::Item(..) | Entity::WitType(..) => return None,
        };
        self.descend(e, more, depth)
    }

    /// `cni::config` (`guest_sdk` for the root, `cni_spec` for that crate).
    pub fn module_path(&self, m: usize) -> String {
        let module = &self.modules[m];
        match (module.krate, module.path.is_empty()) {
            (Krate::Sdk, true) => "guest_sdk".into(),
            (Krate::CniSpec, true) => "cni_spec".into(),
            (Krate::Sdk, false) => module.path.join("::"),
            (Krate::CniSpec, false) => format!("cni_spec::{}", module.path.join("::")),
        }
    }

    /// `path` of an item named `name` in module `m`, as the reference
    /// shows it (relative to `guest_sdk::`).
    pub fn item_path(&self, m: usize, name: &str) -> String {
        let module = &self.modules[m];
        if module.krate == Krate::Sdk && module.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}::{name}", self.module_path(m))
        }
    }
}

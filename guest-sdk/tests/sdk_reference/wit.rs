//! The WIT types guest-sdk re-exports (`pub use crate::bindings::...`),
//! read from `wit/` with wit-parser, as the Rust that wit-bindgen generates
//! for them: names in UpperCamelCase, fields in snake_case, `string` as
//! `String`, `list<T>` as `Vec<T>`, type aliases expanded.

use std::collections::BTreeMap;
use std::path::Path;

use wit_parser::{Handle, InterfaceId, Resolve, Type, TypeDefKind, TypeId};

pub struct Wit {
    resolve: Resolve,
    interfaces: BTreeMap<String, InterfaceId>,
}

/// A named WIT type as Rust sees it.
pub enum Shape {
    /// A record: fields (Rust name, Rust type, doc).
    Record(Vec<(String, String, String)>),
    /// An enum: cases (Rust name, doc).
    Enum(Vec<(String, String)>),
    /// A variant: cases (Rust name, payload type, doc).
    Variant(Vec<(String, Option<String>, String)>),
    /// Flags: (constant name, doc).
    Flags(Vec<(String, String)>),
    /// A resource (an opaque handle).
    Resource,
    /// A type alias, expanded.
    Alias(String),
}

pub struct TypeDoc {
    /// The WIT name (`route-info`).
    pub wit_name: String,
    /// `record`, `enum`, `variant`, `flags`, `resource` or `type`.
    pub wit_kind: &'static str,
    pub docs: String,
    pub shape: Shape,
    /// Whether wit-bindgen derives `Copy` (no string, list or resource inside).
    pub copy: bool,
}

/// `route-info` → `RouteInfo`, as wit-bindgen (heck) names types and cases.
pub fn upper_camel(kebab: &str) -> String {
    kebab
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f
                    .to_uppercase()
                    .chain(c.flat_map(char::to_lowercase))
                    .collect(),
                None => String::new(),
            }
        })
        .collect()
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true", "try", "type",
    "unsafe", "use", "where", "while", "yield", "abstract", "become", "box", "do", "final",
    "macro", "override", "priv", "typeof", "unsized", "virtual",
];

/// `link-index` → `link_index` (a keyword gets a trailing `_`).
pub fn snake(kebab: &str) -> String {
    let s = kebab.replace('-', "_").to_lowercase();
    if KEYWORDS.contains(&s.as_str()) {
        format!("{s}_")
    } else {
        s
    }
}

fn docs(d: &wit_parser::Docs) -> String {
    d.contents.clone().unwrap_or_default()
}

impl Wit {
    pub fn load(dir: &Path) -> Wit {
        let mut resolve = Resolve::default();
        let (pkg, _) = resolve.push_dir(dir).expect("wit/ parses");
        let interfaces = resolve.packages[pkg]
            .interfaces
            .iter()
            .map(|(name, id)| (name.clone(), *id))
            .collect();
        Wit {
            resolve,
            interfaces,
        }
    }

    /// Whether `name` (kebab-case) is an interface of the package.
    pub fn has_interface(&self, name: &str) -> bool {
        self.interfaces.contains_key(name)
    }

    /// The WIT name of the type wit-bindgen calls `rust_name` in
    /// `interface`, following a `use` to the interface that defines it;
    /// returns (defining interface, WIT name).
    pub fn find(&self, interface: &str, rust_name: &str) -> Option<(String, String)> {
        let iface = &self.resolve.interfaces[*self.interfaces.get(interface)?];
        let (_, &id) = iface
            .types
            .iter()
            .find(|(name, _)| upper_camel(name) == rust_name)?;
        let id = self.through_uses(id);
        let def = &self.resolve.types[id];
        let owner = match def.owner {
            wit_parser::TypeOwner::Interface(i) => self.resolve.interfaces[i].name.clone()?,
            _ => return None,
        };
        Some((owner, def.name.clone()?))
    }

    /// A type brought in by `use` is an alias of the used one, owned by
    /// another interface: the original.
    fn through_uses(&self, mut id: TypeId) -> TypeId {
        loop {
            let def = &self.resolve.types[id];
            match def.kind {
                TypeDefKind::Type(Type::Id(next))
                    if self.resolve.types[next].name.as_deref() == def.name.as_deref()
                        && self.resolve.types[next].owner != def.owner =>
                {
                    id = next
                }
                _ => return id,
            }
        }
    }

    fn id(&self, interface: &str, name: &str) -> Option<TypeId> {
        let iface = &self.resolve.interfaces[*self.interfaces.get(interface)?];
        iface.types.get(name).copied()
    }

    /// The type `name` of `interface`.
    pub fn type_doc(&self, interface: &str, name: &str) -> Option<TypeDoc> {
        let id = self.id(interface, name)?;
        let def = &self.resolve.types[id];
        let (wit_kind, shape) = match &def.kind {
            TypeDefKind::Record(r) => (
                "record",
                Shape::Record(
                    r.fields
                        .iter()
                        .map(|f| (snake(&f.name), self.rust(&f.ty), docs(&f.docs)))
                        .collect(),
                ),
            ),
            TypeDefKind::Enum(e) => (
                "enum",
                Shape::Enum(
                    e.cases
                        .iter()
                        .map(|c| (upper_camel(&c.name), docs(&c.docs)))
                        .collect(),
                ),
            ),
            TypeDefKind::Variant(v) => (
                "variant",
                Shape::Variant(
                    v.cases
                        .iter()
                        .map(|c| {
                            (
                                upper_camel(&c.name),
                                c.ty.as_ref().map(|t| self.rust(t)),
                                docs(&c.docs),
                            )
                        })
                        .collect(),
                ),
            ),
            TypeDefKind::Flags(f) => (
                "flags",
                Shape::Flags(
                    f.flags
                        .iter()
                        .map(|f| (f.name.replace('-', "_").to_uppercase(), docs(&f.docs)))
                        .collect(),
                ),
            ),
            TypeDefKind::Resource => ("resource", Shape::Resource),
            TypeDefKind::Type(t) => ("type", Shape::Alias(self.rust(t))),
            _ => ("type", Shape::Alias(self.rust(&Type::Id(id)))),
        };
        Some(TypeDoc {
            wit_name: name.to_owned(),
            wit_kind,
            docs: docs(&def.docs),
            shape,
            copy: self.is_copy(&Type::Id(id)),
        })
    }

    /// The Rust type wit-bindgen generates for `t` in a record or variant
    /// (owned), with type aliases expanded.
    pub fn rust(&self, t: &Type) -> String {
        match t {
            Type::Bool => "bool".into(),
            Type::U8 => "u8".into(),
            Type::U16 => "u16".into(),
            Type::U32 => "u32".into(),
            Type::U64 => "u64".into(),
            Type::S8 => "i8".into(),
            Type::S16 => "i16".into(),
            Type::S32 => "i32".into(),
            Type::S64 => "i64".into(),
            Type::F32 => "f32".into(),
            Type::F64 => "f64".into(),
            Type::Char => "char".into(),
            Type::String => "String".into(),
            Type::ErrorContext => "ErrorContext".into(),
            Type::Id(id) => {
                let def = &self.resolve.types[*id];
                // A named `option`, `list`, `tuple` or `result` is a type
                // alias in Rust (`type mac-address = list<u8>` is
                // `Vec<u8>`): shown expanded, as the compiler sees it.
                match &def.kind {
                    TypeDefKind::Type(inner) => self.rust(inner),
                    TypeDefKind::Option(t) => format!("Option<{}>", self.rust(t)),
                    TypeDefKind::List(t) => format!("Vec<{}>", self.rust(t)),
                    TypeDefKind::FixedLengthList(t, n) => format!("[{}; {n}]", self.rust(t)),
                    TypeDefKind::Tuple(t) => format!(
                        "({})",
                        t.types
                            .iter()
                            .map(|t| self.rust(t))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    TypeDefKind::Result(r) => {
                        let part = |t: &Option<Type>| {
                            t.as_ref().map(|t| self.rust(t)).unwrap_or("()".into())
                        };
                        format!("Result<{}, {}>", part(&r.ok), part(&r.err))
                    }
                    TypeDefKind::Handle(Handle::Own(r)) => self.rust(&Type::Id(*r)),
                    TypeDefKind::Handle(Handle::Borrow(r)) => {
                        format!("&{}", self.rust(&Type::Id(*r)))
                    }
                    _ => match &def.name {
                        Some(name) => upper_camel(name),
                        None => "_".into(),
                    },
                }
            }
        }
    }

    /// wit-bindgen's `Copy`: nothing inside is a string, list or resource.
    fn is_copy(&self, t: &Type) -> bool {
        match t {
            Type::String | Type::ErrorContext => false,
            Type::Id(id) => match &self.resolve.types[*id].kind {
                TypeDefKind::Record(r) => r.fields.iter().all(|f| self.is_copy(&f.ty)),
                TypeDefKind::Variant(v) => v
                    .cases
                    .iter()
                    .all(|c| c.ty.as_ref().is_none_or(|t| self.is_copy(t))),
                TypeDefKind::Tuple(t) => t.types.iter().all(|t| self.is_copy(t)),
                TypeDefKind::Option(t) | TypeDefKind::Type(t) => self.is_copy(t),
                TypeDefKind::FixedLengthList(t, _) => self.is_copy(t),
                TypeDefKind::Result(r) => [&r.ok, &r.err]
                    .iter()
                    .all(|t| t.as_ref().is_none_or(|t| self.is_copy(t))),
                TypeDefKind::Enum(_) | TypeDefKind::Flags(_) => true,
                _ => false,
            },
            _ => true,
        }
    }
}

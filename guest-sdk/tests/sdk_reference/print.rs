//! Rust syntax as the reference prints it: types, generics and function
//! signatures, spaced as rustfmt spaces them (`Option<u32>`, `&'static
//! str`, `impl Fn(&str) -> Option<String>`), from syn's tree.

use syn::{
    Expr, FnArg, GenericArgument, GenericParam, Generics, Lit, Pat, Path, PathArguments,
    ReturnType, Signature, Type, TypeParamBound, WherePredicate,
};

/// A type.
pub fn ty(t: &Type) -> String {
    match t {
        Type::Path(p) => match &p.qself {
            Some(q) => format!("<{} as {}>", ty(&q.ty), path(&p.path)),
            None => path(&p.path),
        },
        Type::Reference(r) => {
            let lifetime = r
                .lifetime
                .as_ref()
                .map(|l| format!("'{} ", l.ident))
                .unwrap_or_default();
            let m = if r.mutability.is_some() { "mut " } else { "" };
            format!("&{lifetime}{m}{}", ty(&r.elem))
        }
        Type::Tuple(t) if t.elems.len() == 1 => format!("({},)", ty(&t.elems[0])),
        Type::Tuple(t) => format!("({})", list(t.elems.iter().map(ty))),
        Type::Slice(s) => format!("[{}]", ty(&s.elem)),
        Type::Array(a) => format!(
            "[{}; {}]",
            ty(&a.elem),
            expr(&a.len).unwrap_or_else(|| "_".into())
        ),
        Type::ImplTrait(i) => format!("impl {}", bounds(i.bounds.iter())),
        Type::TraitObject(o) => format!("dyn {}", bounds(o.bounds.iter())),
        Type::Ptr(p) => {
            let m = if p.mutability.is_some() {
                "mut"
            } else {
                "const"
            };
            format!("*{m} {}", ty(&p.elem))
        }
        Type::Never(_) => "!".into(),
        Type::Paren(p) => format!("({})", ty(&p.elem)),
        Type::Group(g) => ty(&g.elem),
        Type::Infer(_) => "_".into(),
        Type::BareFn(f) => {
            let inputs = list(f.inputs.iter().map(|a| ty(&a.ty)));
            format!("fn({inputs}){}", ret(&f.output))
        }
        _ => "_".into(),
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// A path with its generic arguments: `std::result::Result<T, E>`,
/// `Fn(&str) -> Option<String>`.
pub fn path(p: &Path) -> String {
    let mut s = String::new();
    if p.leading_colon.is_some() {
        s.push_str("::");
    }
    for (i, seg) in p.segments.iter().enumerate() {
        if i > 0 {
            s.push_str("::");
        }
        s.push_str(&seg.ident.to_string());
        match &seg.arguments {
            PathArguments::None => {}
            PathArguments::AngleBracketed(a) => {
                let args = list(a.args.iter().map(generic_arg));
                s.push_str(&format!("<{args}>"));
            }
            PathArguments::Parenthesized(a) => {
                let inputs = list(a.inputs.iter().map(ty));
                s.push_str(&format!("({inputs}){}", ret(&a.output)));
            }
        }
    }
    s
}

fn generic_arg(a: &GenericArgument) -> String {
    match a {
        GenericArgument::Lifetime(l) => format!("'{}", l.ident),
        GenericArgument::Type(t) => ty(t),
        GenericArgument::Const(e) => expr(e).unwrap_or_else(|| "_".into()),
        GenericArgument::AssocType(a) => format!("{} = {}", a.ident, ty(&a.ty)),
        GenericArgument::Constraint(c) => format!("{}: {}", c.ident, bounds(c.bounds.iter())),
        _ => "_".into(),
    }
}

fn bounds<'a>(b: impl Iterator<Item = &'a TypeParamBound>) -> String {
    b.map(|b| match b {
        TypeParamBound::Trait(t) => {
            let q = if matches!(t.modifier, syn::TraitBoundModifier::Maybe(_)) {
                "?"
            } else {
                ""
            };
            format!("{q}{}", path(&t.path))
        }
        TypeParamBound::Lifetime(l) => format!("'{}", l.ident),
        _ => "_".into(),
    })
    .collect::<Vec<_>>()
    .join(" + ")
}

fn ret(r: &ReturnType) -> String {
    match r {
        ReturnType::Default => String::new(),
        ReturnType::Type(_, t) => format!(" -> {}", ty(t)),
    }
}

/// `<'de, T: Into<String>>`, empty without parameters.
pub fn generics(g: &Generics) -> String {
    if g.params.is_empty() {
        return String::new();
    }
    let params = g.params.iter().map(|p| match p {
        GenericParam::Lifetime(l) => format!("'{}", l.lifetime.ident),
        GenericParam::Type(t) if t.bounds.is_empty() => t.ident.to_string(),
        GenericParam::Type(t) => format!("{}: {}", t.ident, bounds(t.bounds.iter())),
        GenericParam::Const(c) => format!("const {}: {}", c.ident, ty(&c.ty)),
    });
    format!("<{}>", list(params))
}

/// ` where T: Trait`, empty without a where clause.
pub fn where_clause(g: &Generics) -> String {
    let Some(w) = &g.where_clause else {
        return String::new();
    };
    let preds = w.predicates.iter().map(|p| match p {
        WherePredicate::Type(t) => format!("{}: {}", ty(&t.bounded_ty), bounds(t.bounds.iter())),
        WherePredicate::Lifetime(l) => format!("'{}: ...", l.lifetime.ident),
        _ => "_".into(),
    });
    format!(" where {}", list(preds))
}

/// `fn name<G>(args) -> R where ...`, without visibility or body.
pub fn signature(sig: &Signature) -> String {
    let mut s = String::new();
    if sig.constness.is_some() {
        s.push_str("const ");
    }
    if sig.asyncness.is_some() {
        s.push_str("async ");
    }
    if sig.unsafety.is_some() {
        s.push_str("unsafe ");
    }
    let args = sig.inputs.iter().map(|a| match a {
        FnArg::Receiver(r) => {
            let m = if r.mutability.is_some() { "mut " } else { "" };
            match &r.reference {
                Some((_, Some(l))) => format!("&'{} {m}self", l.ident),
                Some((_, None)) => format!("&{m}self"),
                None if r.colon_token.is_some() => format!("{m}self: {}", ty(&r.ty)),
                None => format!("{m}self"),
            }
        }
        FnArg::Typed(t) => format!("{}: {}", pat(&t.pat), ty(&t.ty)),
    });
    s.push_str(&format!(
        "fn {}{}({}){}{}",
        sig.ident,
        generics(&sig.generics),
        list(args),
        ret(&sig.output),
        where_clause(&sig.generics)
    ));
    s
}

fn pat(p: &Pat) -> String {
    match p {
        // `mut` is the body's business, as rustdoc shows it.
        Pat::Ident(i) => i.ident.to_string(),
        Pat::Tuple(t) => format!("({})", list(t.elems.iter().map(pat))),
        Pat::TupleStruct(t) => format!("{}({})", path(&t.path), list(t.elems.iter().map(pat))),
        Pat::Type(t) => format!("{}: {}", pat(&t.pat), ty(&t.ty)),
        Pat::Reference(r) => format!("&{}", pat(&r.pat)),
        _ => "_".into(),
    }
}

/// A constant expression the reference can show (literals, paths, arrays,
/// references and simple arithmetic); `None` for anything else.
pub fn expr(e: &Expr) -> Option<String> {
    Some(match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => s.token().to_string(),
            Lit::Int(i) => i.token().to_string(),
            Lit::Bool(b) => b.value.to_string(),
            Lit::Char(c) => c.token().to_string(),
            Lit::Float(f) => f.token().to_string(),
            _ => return None,
        },
        Expr::Path(p) => path(&p.path),
        Expr::Array(a) => {
            let items: Option<Vec<String>> = a.elems.iter().map(expr).collect();
            format!("[{}]", items?.join(", "))
        }
        Expr::Reference(r) => format!("&{}", expr(&r.expr)?),
        Expr::Binary(b) => {
            let op = match b.op {
                syn::BinOp::Shl(_) => "<<",
                syn::BinOp::Shr(_) => ">>",
                syn::BinOp::Add(_) => "+",
                syn::BinOp::Sub(_) => "-",
                syn::BinOp::Mul(_) => "*",
                syn::BinOp::BitOr(_) => "|",
                _ => return None,
            };
            format!("{} {op} {}", expr(&b.left)?, expr(&b.right)?)
        }
        Expr::Paren(p) => format!("({})", expr(&p.expr)?),
        Expr::Group(g) => expr(&g.expr)?,
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => format!("-{}", expr(&u.expr)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> String {
        ty(&syn::parse_str(s).expect("a type"))
    }

    #[test]
    fn types_print_as_rustfmt_spaces_them() {
        for s in [
            "Option<u32>",
            "&'static str",
            "Result<Vec<(IpAddr, Owner)>, HostError>",
            "impl Fn(&str) -> Option<String>",
            "impl IntoIterator<Item = (K, V)>",
            "&[u8]",
            "[&str; 7]",
            "Option<&LinkInfo>",
            "&mut std::fmt::Formatter<'_>",
            "!",
            "()",
        ] {
            assert_eq!(t(s), s);
        }
    }

    #[test]
    fn signatures_print_without_their_body() {
        let f: syn::ItemFn = syn::parse_str(
            "pub fn plugin_config<T: DeserializeOwned>(&self) -> Result<T, Error> {}",
        )
        .expect("a function");
        assert_eq!(
            signature(&f.sig),
            "fn plugin_config<T: DeserializeOwned>(&self) -> Result<T, Error>"
        );
    }
}

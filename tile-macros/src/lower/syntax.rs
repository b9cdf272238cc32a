//! Small helpers over syn: the shapes of DSL syntax (`x[(i, j)]`,
//! `gemm(..).clear()`, `&b.t()`, `FullRow`), operator tables, and words for
//! scopes in messages. Pure functions; no kernel state.

use quote::ToTokens;
use syn::{Expr as SynExpr, Ident};
use tile_ir::{BinOp, Buffer, Scope, WarpPolicy};

pub(super) fn is_upper_case_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

pub(super) fn format_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// `x[i]`, `x[(i, j)]` and `x[[i, j]]`: the index expressions.
pub(super) fn index_list(index: &SynExpr) -> Vec<&SynExpr> {
    match index {
        SynExpr::Tuple(t) => t.elems.iter().collect(),
        SynExpr::Array(a) => a.elems.iter().collect(),
        SynExpr::Paren(p) => vec![&*p.expr],
        other => vec![other],
    }
}

/// The single identifier of a plain path expression (`x`), if it is one.
pub(super) fn path_ident(e: &SynExpr) -> Option<&Ident> {
    match e {
        SynExpr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        SynExpr::Paren(p) => path_ident(&p.expr),
        SynExpr::Group(g) => path_ident(&g.expr),
        _ => None,
    }
}

/// The name of a call's function when it is a plain identifier (`copy(..)`).
pub(super) fn call_name(call: &syn::ExprCall) -> Option<&Ident> {
    match &*call.func {
        SynExpr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => Some(&p.path.segments[0].ident),
        _ => None,
    }
}

/// `gemm(..)` and the modifiers chained on it (`.clear()`, `.policy(..)`),
/// in source order, if `e` is such a statement.
pub(super) fn gemm_chain(e: &SynExpr) -> Option<(&syn::ExprCall, Vec<&syn::ExprMethodCall>)> {
    call_chain(e, "gemm")
}

/// `copy(..)` and the methods chained after it (`.fill(v)`,
/// `.evict_first()`), in source order, if `e` is such a call.
pub(super) fn copy_chain(e: &SynExpr) -> Option<(&syn::ExprCall, Vec<&syn::ExprMethodCall>)> {
    call_chain(e, "copy")
}

/// The call of the intrinsic `name` at the root of `e` and the methods
/// chained on it, in source order, if `e` is such a chain.
fn call_chain<'a>(e: &'a SynExpr, name: &str) -> Option<(&'a syn::ExprCall, Vec<&'a syn::ExprMethodCall>)> {
    let mut modifiers = Vec::new();
    let mut cur = e;
    loop {
        match cur {
            SynExpr::MethodCall(m) => {
                modifiers.push(m);
                cur = &m.receiver;
            }
            SynExpr::Call(c) if call_name(c).is_some_and(|n| n == name) => {
                modifiers.reverse();
                return Some((c, modifiers));
            }
            _ => return None,
        }
    }
}

/// The `x.t()` in `x.t()`, `&x.t()` or `&(x.t())`, if `e` is one.
pub(super) fn transposed(e: &SynExpr) -> Option<&syn::ExprMethodCall> {
    match e {
        SynExpr::Reference(r) => transposed(&r.expr),
        SynExpr::Paren(p) => transposed(&p.expr),
        SynExpr::Group(g) => transposed(&g.expr),
        SynExpr::MethodCall(m) if m.method == "t" => Some(m),
        _ => None,
    }
}

/// A buffer's shape as constants (buffers declared in a kernel body are constant).
pub(super) fn const_shape_of(b: &Buffer) -> Vec<i64> {
    b.const_shape().unwrap_or_default()
}

pub(super) fn binop_symbol(op: &syn::BinOp) -> String {
    op.to_token_stream().to_string()
}

/// `FullRow`, `FullCol`, `Square`, `Warpgroup(w)` (`w` an integer
/// literal), or the same as `WarpPolicy::FullRow`.
pub(super) fn warp_policy(e: &SynExpr) -> Option<WarpPolicy> {
    if let SynExpr::Call(call) = e {
        let SynExpr::Path(p) = &*call.func else { return None };
        let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
        let named = matches!(segs.as_slice(), [one] | [_, one] if one == "Warpgroup")
            && (segs.len() == 1 || segs[0] == "WarpPolicy");
        let [SynExpr::Lit(syn::ExprLit { lit: syn::Lit::Int(w), .. })] = call.args.iter().collect::<Vec<_>>()[..]
        else {
            return None;
        };
        return named.then(|| w.base10_parse::<u32>().ok().map(WarpPolicy::Warpgroup)).flatten();
    }
    let SynExpr::Path(p) = e else { return None };
    let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
    let last = match segs.as_slice() {
        [one] => one,
        [ty, one] if ty == "WarpPolicy" => one,
        _ => return None,
    };
    match last.as_str() {
        "FullRow" => Some(WarpPolicy::FullRow),
        "FullCol" => Some(WarpPolicy::FullCol),
        "Square" => Some(WarpPolicy::Square),
        _ => None,
    }
}

/// What a buffer of `scope` is, after "a": `shared buffer`, `fragment`, ...
pub(super) fn scope_phrase(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "tensor parameter",
        Scope::Shared => "shared buffer",
        Scope::Fragment => "fragment",
        Scope::Local => "local buffer",
    }
}

pub(super) fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "global",
        Scope::Shared => "shared",
        Scope::Fragment => "fragment",
        Scope::Local => "local",
    }
}

pub(super) fn plain_op(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as B;
    Some(match op {
        B::Add(_) => BinOp::Add,
        B::Sub(_) => BinOp::Sub,
        B::Mul(_) => BinOp::Mul,
        B::Div(_) => BinOp::Div,
        B::Rem(_) => BinOp::Rem,
        B::And(_) | B::BitAnd(_) => BinOp::And,
        B::Or(_) | B::BitOr(_) => BinOp::Or,
        B::BitXor(_) => BinOp::Xor,
        B::Shl(_) => BinOp::Shl,
        B::Shr(_) => BinOp::Shr,
        B::Eq(_) => BinOp::Eq,
        B::Lt(_) => BinOp::Lt,
        B::Le(_) => BinOp::Le,
        B::Ne(_) => BinOp::Ne,
        B::Ge(_) => BinOp::Ge,
        B::Gt(_) => BinOp::Gt,
        _ => return None,
    })
}

pub(super) fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as B;
    Some(match op {
        B::AddAssign(_) => BinOp::Add,
        B::SubAssign(_) => BinOp::Sub,
        B::MulAssign(_) => BinOp::Mul,
        B::DivAssign(_) => BinOp::Div,
        B::RemAssign(_) => BinOp::Rem,
        B::BitXorAssign(_) => BinOp::Xor,
        B::BitAndAssign(_) => BinOp::And,
        B::BitOrAssign(_) => BinOp::Or,
        B::ShlAssign(_) => BinOp::Shl,
        B::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}

//! Buffer declarations (`shared::<T, D0, ..>()`, `fragment`, `local`) and
//! `annotate_layout(&buf, layout)`.
//!
//! Recognizes the turbofish shapes (`BM`, `64`, `{ BK * 2 }`, a tuple or a
//! slice), checks that they are positive compile-time constants (pointing
//! at the name that is not), and that `annotate_layout` names a shared
//! buffer, once, before its first use, with a known layout. Whether the
//! layout fits the buffer is asked of `tile_ir::layout` (the verifier's
//! rule), so that the error points at the layout argument.

use super::syntax::{call_name, format_shape, path_ident};
use super::{Binding, Lowerer, Val};
use crate::diag::{did_you_mean, Lowered, Reported};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Expr as SynExpr, Ident, Pat, Stmt as SynStmt};
use tile_ir::{Buffer, DType, Extent, Scope, SharedLayoutSpec, VarKind};

impl Lowerer<'_> {
    /// `let mut x = shared::<f16, BM, BK>();` (also `fragment`, `local`).
    pub(super) fn buffer_decl(&mut self, local: &syn::Local, call: &syn::ExprCall) -> Lowered<()> {
        let ident = match &local.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => &p.ident,
            other => {
                self.bind_pattern_poisoned(other);
                return Err(self
                    .errors
                    .spanned(other, "a buffer is bound to one name: `let mut x = shared::<T, D0, D1, ..>();`"));
            }
        };
        match self.buffer_type(call) {
            Ok((scope, dtype, shape)) => {
                let span = self.span_id(local);
                let id = self.k.add_buffer(Buffer {
                    name: ident.to_string(),
                    scope,
                    dtype,
                    shape: shape.into_iter().map(Extent::Const).collect(),
                    mutable: true,
                    span,
                    layout: None,
                    view: None,
                });
                self.bind(ident, Binding::Buffer(id));
                self.buffer_depth.insert(id, self.parallel_depth);
                Ok(())
            }
            Err(r) => {
                self.bind(ident, Binding::Poisoned);
                Err(r)
            }
        }
    }

    pub(super) fn buffer_type(&mut self, call: &syn::ExprCall) -> Lowered<(Scope, DType, Vec<i64>)> {
        let SynExpr::Path(path) = &*call.func else {
            return Err(self.errors.spanned(call, "expected `shared::<T, D0, D1, ..>()`"));
        };
        let seg = &path.path.segments[path.path.segments.len() - 1];
        let kind = seg.ident.to_string();
        let scope = match kind.as_str() {
            "shared" => Scope::Shared,
            "fragment" => Scope::Fragment,
            _ => Scope::Local,
        };
        let usage = format!("a buffer is declared as `{kind}::<T, D0, D1, ..>()`, e.g. `{kind}::<f32, 64, BN>()`");
        if !call.args.is_empty() {
            return Err(self.errors.spanned(&call.args, format!("`{kind}` takes no arguments; {usage}")));
        }
        let syn::PathArguments::AngleBracketed(generics) = &seg.arguments else {
            return Err(self.errors.spanned(call, format!("missing element type and shape: {usage}")));
        };
        let args: Vec<&syn::GenericArgument> = generics.args.iter().collect();
        if args.len() < 2 {
            return Err(self.errors.spanned(generics, format!("expected an element type and a shape: {usage}")));
        }
        let dtype = match args[0] {
            syn::GenericArgument::Type(ty) => {
                let d = self.dtype_of_type(ty)?;
                if d == DType::Bool {
                    return Err(self.errors.spanned(ty, "buffers hold `f16`, `bf16`, `f32`, `i32` or `u32`"));
                }
                d
            }
            other => return Err(self.errors.spanned(other, format!("expected an element type: {usage}"))),
        };
        // `shared::<T, BM, BK>()`, or the whole shape as one tuple `(BM, BK)` / slice `[BM]`.
        let dims: Vec<SynExpr> = match &args[1..] {
            [syn::GenericArgument::Type(syn::Type::Tuple(t))] => {
                let mut v = Vec::new();
                for ty in &t.elems {
                    v.push(self.dim_expr(&syn::GenericArgument::Type(ty.clone()), &usage)?);
                }
                v
            }
            [syn::GenericArgument::Type(syn::Type::Slice(s))] => {
                vec![self.dim_expr(&syn::GenericArgument::Type((*s.elem).clone()), &usage)?]
            }
            rest => {
                let mut v = Vec::new();
                for a in rest {
                    v.push(self.dim_expr(a, &usage)?);
                }
                v
            }
        };
        if dims.is_empty() {
            return Err(self.errors.spanned(args[1], "a buffer has at least one dimension"));
        }
        let mut shape = Vec::new();
        let mut failed = false;
        for d in &dims {
            match self.const_int(d, &format!("the shape of a `{kind}` buffer")) {
                Ok(v) if v > 0 => shape.push(v),
                Ok(v) => {
                    self.errors.spanned(d, format!("a buffer dimension must be positive, found {v}"));
                    failed = true;
                }
                Err(Reported) => failed = true,
            }
        }
        if failed {
            return Err(Reported);
        }
        Ok((scope, dtype, shape))
    }

    /// One dimension of a buffer's shape, written as a generic argument
    /// (`BM`, `64`, `{ BK * 2 }`), as an expression.
    pub(super) fn dim_expr(&mut self, arg: &syn::GenericArgument, usage: &str) -> Lowered<SynExpr> {
        match arg {
            syn::GenericArgument::Type(syn::Type::Path(tp)) if tp.qself.is_none() => {
                Ok(SynExpr::Path(syn::ExprPath { attrs: Vec::new(), qself: None, path: tp.path.clone() }))
            }
            syn::GenericArgument::Type(syn::Type::Paren(p)) => {
                self.dim_expr(&syn::GenericArgument::Type((*p.elem).clone()), usage)
            }
            syn::GenericArgument::Const(SynExpr::Block(b)) => match b.block.stmts.as_slice() {
                [SynStmt::Expr(e, None)] => Ok(e.clone()),
                _ => Err(self.errors.spanned(b, format!("expected one constant expression in the braces: {usage}"))),
            },
            syn::GenericArgument::Const(e) => Ok(e.clone()),
            other => Err(self.errors.spanned(other, format!("expected a dimension: {usage}"))),
        }
    }

    /// A compile-time integer: literals, `consts(..)` names and arithmetic on them.
    pub(super) fn const_int(&mut self, e: &SynExpr, what: &str) -> Lowered<i64> {
        match self.expr(e)? {
            Val::Int(v) => Ok(v),
            Val::Float(_) => Err(self.errors.spanned(e, format!("{what} must be an integer"))),
            Val::Typed(..) => {
                let (culprit, why) = self.non_constant_culprit(e);
                let tokens: &dyn ToTokens = match culprit {
                    Some(i) => i,
                    None => e,
                };
                Err(self.errors.spanned(
                    tokens,
                    format!("{what} must be a compile-time constant (an integer literal or a name from `consts(..)`), but {why}"),
                ))
            }
        }
    }

    /// The first name in `e` that makes it non-constant, and why.
    pub(super) fn non_constant_culprit<'a>(&self, e: &'a SynExpr) -> (Option<&'a Ident>, String) {
        let mut found: Option<(&'a Ident, String)> = None;
        self.find_culprit(e, &mut found);
        match found {
            Some((i, why)) => (Some(i), why),
            None => (None, "this expression is not constant".to_string()),
        }
    }

    pub(super) fn find_culprit<'a>(&self, e: &'a SynExpr, found: &mut Option<(&'a Ident, String)>) {
        if found.is_some() {
            return;
        }
        if let Some(ident) = path_ident(e) {
            if let Some(Binding::Var { id, .. }) = self.lookup(&ident.to_string()) {
                let var = self.k.var(id);
                let why = match var.kind {
                    VarKind::Dim => {
                        format!("`{ident}` is a dynamic dimension, known only at launch")
                    }
                    VarKind::Param => {
                        format!("`{ident}` is a kernel parameter, known only at launch")
                    }
                    VarKind::BlockIdx(_) => format!("`{ident}` is a block index"),
                    VarKind::Loop => format!("`{ident}` is a loop variable"),
                    VarKind::Let | VarKind::Mut => format!("`{ident}` is a variable"),
                };
                *found = Some((ident, why));
            }
            return;
        }
        match e {
            SynExpr::Binary(b) => {
                self.find_culprit(&b.left, found);
                self.find_culprit(&b.right, found);
            }
            SynExpr::Unary(u) => self.find_culprit(&u.expr, found),
            SynExpr::Paren(p) => self.find_culprit(&p.expr, found),
            SynExpr::Cast(c) => self.find_culprit(&c.expr, found),
            SynExpr::Call(c) => {
                for a in &c.args {
                    self.find_culprit(a, found);
                }
            }
            _ => {}
        }
    }

    /// `annotate_layout(&buf, row_major() | padded(bytes) | swizzle(bits))`:
    /// the shared layout of `buf`, instead of the one the compiler picks.
    /// Allowed once per buffer, before any statement names the buffer.
    pub(super) fn annotate_layout(&mut self, call: &syn::ExprCall) -> Lowered<()> {
        const USAGE: &str =
            "`annotate_layout(&buf, layout)` with a layout `row_major()`, `padded(bytes)` or `swizzle(bits)`";
        if call.args.len() != 2 {
            return Err(self.errors.spanned(call, format!("`annotate_layout` takes 2 arguments: {USAGE}")));
        }
        let target = &call.args[0];
        let ident = match target {
            SynExpr::Reference(r) if r.mutability.is_none() => path_ident(&r.expr),
            _ => None,
        };
        let Some(ident) = ident else {
            return Err(self.errors.spanned(
                target,
                format!("the first argument of `annotate_layout` is `&buf`, a shared buffer: {USAGE}"),
            ));
        };
        let name = ident.to_string();
        let buf = match self.lookup_quiet(&name) {
            Some(Binding::Buffer(b)) => b,
            Some(Binding::Poisoned) => return Err(Reported),
            None => {
                let hint = did_you_mean(&name, self.visible_names().iter().map(|s| s.as_str()));
                return Err(self.errors.spanned(target, format!("cannot find buffer `{name}` in this kernel{hint}")));
            }
            Some(_) => {
                return Err(self.errors.spanned(
                    target,
                    format!("`{name}` is not a buffer; `annotate_layout` chooses the layout of a shared buffer"),
                ))
            }
        };
        let b = self.k.buffer(buf).clone();
        if b.scope != Scope::Shared {
            let what = match b.scope {
                Scope::Global => "a global tensor",
                Scope::Fragment => "a fragment (its layout over threads is inferred)",
                Scope::Local => "a local buffer",
                Scope::Shared => "a shared buffer",
            };
            return Err(self
                .errors
                .spanned(target, format!("`{name}` is {what}; only shared buffers have a layout to annotate")));
        }
        if let Some(prev) = self.annotated_at.get(&buf) {
            let mut e = syn::Error::new(call.func.span(), format!("the layout of `{name}` is annotated twice"));
            e.combine(syn::Error::new(*prev, "first annotated here"));
            return Err(self.errors.push(e));
        }
        if self.used_buffers.borrow().contains(&buf) {
            return Err(self.errors.spanned(
                call,
                format!("`annotate_layout(&{name}, ..)` comes after a statement that uses `{name}`; annotate a buffer's layout before its first use (next to its declaration)"),
            ));
        }
        self.annotated_at.insert(buf, call.func.span());
        let spec_expr = &call.args[1];
        let SynExpr::Call(spec_call) = spec_expr else {
            return Err(self.errors.spanned(spec_expr, format!("expected a layout: {USAGE}")));
        };
        let Some(kind) = call_name(spec_call) else {
            return Err(self.errors.spanned(spec_expr, format!("expected a layout: {USAGE}")));
        };
        let kind_name = kind.to_string();
        let want_args = match kind_name.as_str() {
            "row_major" => 0,
            "padded" | "swizzle" => 1,
            _ => {
                let hint = did_you_mean(&kind_name, ["row_major", "padded", "swizzle"]);
                return Err(self.errors.at(
                    kind.span(),
                    format!("unknown shared layout `{kind_name}`{hint}; a layout is `row_major()`, `padded(bytes)` or `swizzle(bits)`"),
                ));
            }
        };
        if spec_call.args.len() != want_args {
            let form = match kind_name.as_str() {
                "row_major" => "`row_major()` takes no argument",
                "padded" => "`padded(bytes)` takes 1 argument, the padding after each row in bytes",
                _ => "`swizzle(bits)` takes 1 argument, the number of row bits XORed into the 16-byte chunk index (1, 2 or 3)",
            };
            return Err(self.errors.spanned(spec_call, form));
        }
        let spec = match kind_name.as_str() {
            "row_major" => SharedLayoutSpec::RowMajor,
            "padded" => {
                SharedLayoutSpec::Padded { bytes: self.const_int(&spec_call.args[0], "the padding of `padded`")? }
            }
            _ => {
                let bits = self.const_int(&spec_call.args[0], "the width of `swizzle`")?;
                SharedLayoutSpec::Swizzle { bits: u32::try_from(bits).unwrap_or(u32::MAX) }
            }
        };
        // The buffer's shape is constant (checked at its declaration).
        let shape = b.const_shape().unwrap_or_default();
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape.iter().rev().skip(1).product::<i64>();
        if let Err(why) = tile_ir::layout::SharedLayout::from_spec(spec, rows, cols, b.dtype.size_bytes() as i64) {
            return Err(self.errors.spanned(
                spec_expr,
                format!("cannot lay out `{name}` (shared {}{}): {why}", b.dtype, format_shape(&shape)),
            ));
        }
        self.k.buffers[buf.0 as usize].layout = Some(spec);
        Ok(())
    }
}

impl Lowerer<'_> {
    /// `let k_pe = kv_s.view([.., 512..]);`: a sub-view of shared buffer
    /// `kv_s` (one range per dimension, constant bounds, `..` the whole
    /// dimension), usable wherever a shared buffer is. A view of a view is a
    /// view of the buffer that owns the memory. Whether the window fits in
    /// the buffer and in its layout is the verifier's and layout inference's
    /// (errors at this `let`).
    pub(super) fn view_decl(&mut self, local: &syn::Local, m: &syn::ExprMethodCall) -> Lowered<()> {
        let ident = match &local.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => &p.ident,
            other => {
                self.bind_pattern_poisoned(other);
                return Err(self
                    .errors
                    .spanned(other, "a view is bound to one name: `let v = buf.view([.., 0..64]);`"));
            }
        };
        let result = self.view_window(m);
        match result {
            Ok((of, dtype, origin, shape)) => {
                let span = self.span_id(local);
                let id = self.k.add_buffer(Buffer {
                    name: ident.to_string(),
                    scope: Scope::Shared,
                    dtype,
                    shape: shape.into_iter().map(Extent::Const).collect(),
                    mutable: true,
                    span,
                    layout: None,
                    view: Some(tile_ir::View { of, origin }),
                });
                self.bind(ident, Binding::Buffer(id));
                self.buffer_depth.insert(id, self.parallel_depth);
                Ok(())
            }
            Err(r) => {
                self.bind(ident, Binding::Poisoned);
                Err(r)
            }
        }
    }

    /// The buffer that owns the memory, the element type, and the window's
    /// origin in it and extents of `buf.view([r0, r1, ..])`.
    #[allow(clippy::type_complexity)]
    fn view_window(&mut self, m: &syn::ExprMethodCall) -> Lowered<(tile_ir::BufferId, DType, Vec<i64>, Vec<i64>)> {
        let usage = "a view takes one range per dimension of a shared buffer, e.g. `kv_s.view([.., 512..])`";
        let Some(recv) = path_ident(&m.receiver) else {
            return Err(self.errors.spanned(&m.receiver, format!("expected the name of a shared buffer; {usage}")));
        };
        let buf = match self.lookup(&recv.to_string()) {
            Some(Binding::Buffer(b)) => b,
            Some(Binding::Poisoned) => return Err(Reported),
            Some(Binding::Var { .. }) => {
                return Err(self.errors.spanned(recv, format!("`{recv}` is a scalar, not a shared buffer; {usage}")))
            }
            Some(Binding::Helper(_)) => return Err(self.helper_misused(recv)),
            None => return Err(self.unknown_name(recv)),
        };
        let b = self.k.buffer(buf).clone();
        if b.scope != Scope::Shared {
            return Err(self.errors.spanned(
                recv,
                format!("`{recv}` is a {} buffer; only shared buffers have views ({usage})", scope_word(b.scope)),
            ));
        }
        let ranges = match m.args.iter().collect::<Vec<_>>().as_slice() {
            [SynExpr::Array(a)] => a.elems.iter().cloned().collect::<Vec<_>>(),
            _ => return Err(self.errors.spanned(&m.args, format!("expected one array of ranges; {usage}"))),
        };
        let (root, base) = match &b.view {
            Some(v) => (v.of, v.origin.clone()),
            None => (buf, vec![0; b.rank()]),
        };
        let shape = b.const_shape().unwrap_or_default();
        if ranges.len() != shape.len() {
            return Err(self.errors.spanned(
                &m.args,
                format!(
                    "`{recv}` has {} dimensions ({}) but the view gives {} ranges; {usage}",
                    shape.len(),
                    format_shape(&shape),
                    ranges.len()
                ),
            ));
        }
        let (mut origin, mut extents, mut failed) = (Vec::new(), Vec::new(), false);
        for (d, r) in ranges.iter().enumerate() {
            let SynExpr::Range(range) = r else {
                self.errors
                    .spanned(r, format!("dimension {d} of a view is a range (`a..b`, `a..`, `..b` or `..`); {usage}"));
                failed = true;
                continue;
            };
            if matches!(range.limits, syn::RangeLimits::Closed(_)) {
                self.errors.spanned(r, "a view's ranges are half-open (`a..b`), not `a..=b`");
                failed = true;
                continue;
            }
            let start = match &range.start {
                Some(e) => self.const_int(e, "a view's bounds"),
                None => Ok(0),
            };
            let end = match &range.end {
                Some(e) => self.const_int(e, "a view's bounds"),
                None => Ok(shape[d]),
            };
            match (start, end) {
                (Ok(s), Ok(e)) if e > shape[d] => {
                    self.errors.spanned(
                        r,
                        format!(
                            "the view is out of bounds: dimension {d} of `{recv}` is 0..{}, the view takes {s}..{e}",
                            shape[d]
                        ),
                    );
                    failed = true;
                }
                (Ok(s), Ok(e)) if s < e && s >= 0 => {
                    origin.push(base[d] + s);
                    extents.push(e - s);
                }
                (Ok(s), Ok(e)) => {
                    self.errors
                        .spanned(r, format!("dimension {d} of the view is {s}..{e}, which is empty or negative"));
                    failed = true;
                }
                _ => failed = true,
            }
        }
        if failed {
            return Err(Reported);
        }
        Ok((root, b.dtype, origin, extents))
    }
}

fn scope_word(s: Scope) -> &'static str {
    match s {
        Scope::Global => "global",
        Scope::Shared => "shared",
        Scope::Fragment => "fragment",
        Scope::Local => "local",
    }
}

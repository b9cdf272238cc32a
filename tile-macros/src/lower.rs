//! Lowering: the parsed kernel (attribute, signature, syn body) → `tile_ir::Kernel`.
//!
//! Expects a [`Signature`] from `sig.rs` (whose body had its turbofish shapes
//! rewritten) and the [`KernelAttr`]. Guarantees a `Kernel` whose every
//! statement and buffer carries a `SpanId` registered in the returned
//! [`SpanTable`], and that every DSL rule the frontend can see (names,
//! types, shapes, fragment access, writability, statement placement) is
//! checked here with a precise span. Errors are collected, never thrown:
//! a construct that fails is reported, skipped, and its name (if it binds
//! one) is bound to a poisoned entry so that later uses stay silent. When
//! errors were reported the returned kernel is incomplete and must not be
//! compiled.
//!
//! Typing follows Rust: binary operators take operands of one type and the
//! frontend never converts silently, except that untyped literals (and
//! `consts(..)` names) adopt the type of the other operand, defaulting to
//! `i32` / `f32`.

use crate::attr::KernelAttr;
use crate::diag::{did_you_mean, Errors, Lowered, Reported, SpanRange, SpanTable};
use crate::sig::{DimDecl, ParamType, Signature};
use proc_macro2::Span;
use quote::ToTokens;
use std::collections::HashMap;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Expr as SynExpr, Ident, Pat, Stmt as SynStmt};
use tile_ir::{
    BinOp, Buffer, BufferId, DType, Expr, Extent, Kernel, LoopKind, ReduceOp, Scope, SharedLayoutSpec, SpanId, Stmt,
    StmtKind, TileRef, UnOp, Value, VarId, VarKind, WarpPolicy,
};

/// Every function a kernel body may call (for "did you mean" suggestions).
const FUNCTIONS: &[&str] = &[
    "grid",
    "shared",
    "fragment",
    "local",
    "copy",
    "fill",
    "clear",
    "reduce_max",
    "reduce_sum",
    "reduce_min",
    "atomic_add",
    "barrier",
    "gemm",
    "use_swizzle",
    "annotate_layout",
    "parallel",
    "pipelined",
    "exp2",
    "exp",
    "log2",
    "log",
    "abs",
    "sqrt",
    "rsqrt",
    "max",
    "min",
    "fma",
    "cdiv",
];
/// Functions with a value, usable in expressions.
const MATH: &[&str] = &["exp2", "exp", "log2", "log", "abs", "sqrt", "rsqrt", "max", "min", "fma", "cdiv"];
/// Element types of buffers and the targets of `as`.
const DTYPES: [&str; 5] = ["f16", "bf16", "f32", "i32", "u32"];

const STATEMENTS_HELP: &str = "a kernel body is made of `let`, assignments (`=`, `+=`, ..), `for` loops over `a..b`, `parallel(..)` or `pipelined(..)`, `if`/`else`, and the tile operations `copy`, `fill`, `clear`, `reduce_max`/`reduce_sum`/`reduce_min`, `gemm`, `atomic_add` and `barrier` (and `use_swizzle(panel)` right after `grid(..)`, `annotate_layout(&buf, layout)` before a shared buffer's first use)";

pub(crate) fn lower(attr: &KernelAttr, sig: &Signature, errors: &mut Errors) -> (Kernel, SpanTable) {
    let mut kernel = Kernel::new(sig.ident.unraw().to_string(), attr.threads.unwrap_or(128));
    kernel.cluster = attr.cluster;
    kernel.warp_specialize = attr.warp_specialize;
    let mut lowerer = Lowerer {
        k: kernel,
        spans: SpanTable::new(sig.ident.span()),
        errors,
        consts: attr.consts.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        scopes: vec![Vec::new()],
        parallel_depth: 0,
        grid_at: None,
        at_kernel_start: false,
        first_stmt: false,
        buffer_depth: HashMap::new(),
        grid_axes: 0,
        grid_just_declared: false,
        right_after_grid: false,
        swizzle_at: None,
        used_buffers: Default::default(),
        annotated_at: HashMap::new(),
    };
    lowerer.params(sig);
    lowerer.at_kernel_start = true;
    let body = lowerer.block(&sig.body.stmts);
    lowerer.k.body = body;
    (lowerer.k, lowerer.spans)
}

#[derive(Copy, Clone)]
enum Binding {
    /// A scalar. `parallel`: the variable of a `parallel` loop. `depth`: how
    /// many parallel loops enclose its declaration.
    Var {
        id: VarId,
        parallel: bool,
        depth: u32,
    },
    Buffer(BufferId),
    /// Its declaration failed (already reported): uses are silent errors.
    Poisoned,
}

/// A lowered expression, or an untyped constant that will take the type of
/// its context.
#[derive(Clone, Debug)]
enum Val {
    Typed(Expr, DType),
    Int(i64),
    Float(f64),
}

impl Val {
    fn describe(&self) -> String {
        match self {
            Val::Typed(_, t) => format!("`{t}`"),
            Val::Int(_) => "an integer constant".into(),
            Val::Float(_) => "a float literal".into(),
        }
    }
}

/// The left side of `+=` and friends.
enum Target {
    Var(VarId),
    Element(BufferId, Vec<Expr>),
}

/// One side of a `copy`.
struct Side {
    tile: TileRef,
    name: String,
}

struct Lowerer<'e> {
    k: Kernel,
    spans: SpanTable,
    errors: &'e mut Errors,
    consts: HashMap<String, i64>,
    scopes: Vec<Vec<(String, Binding)>>,
    /// How many `parallel` loops enclose the code being lowered.
    parallel_depth: u32,
    /// Where `grid(..)` was called, once it has been.
    grid_at: Option<Span>,
    /// How many `parallel` loops enclose each buffer's declaration.
    buffer_depth: HashMap<BufferId, u32>,
    /// True until the kernel body's first statement starts lowering.
    at_kernel_start: bool,
    /// True while lowering the kernel body's first statement (before any
    /// statement nested in it).
    first_stmt: bool,
    /// How many axes `grid(..)` declared (0 before it is seen).
    grid_axes: usize,
    /// Set by `grid(..)`; taken by the next statement.
    grid_just_declared: bool,
    /// True while lowering the statement right after `grid(..)`, the only
    /// place for `use_swizzle(..)`.
    right_after_grid: bool,
    /// Where `use_swizzle(..)` was called, once it has been.
    swizzle_at: Option<Span>,
    /// Buffers that a statement has named (through [`Lowerer::lookup`]):
    /// `annotate_layout` must come before a buffer's first use.
    used_buffers: std::cell::RefCell<std::collections::HashSet<BufferId>>,
    /// Where each buffer's `annotate_layout(..)` is.
    annotated_at: HashMap<BufferId, Span>,
}

fn is_upper_case_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn format_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// `x[i]`, `x[(i, j)]` and `x[[i, j]]`: the index expressions.
fn index_list(index: &SynExpr) -> Vec<&SynExpr> {
    match index {
        SynExpr::Tuple(t) => t.elems.iter().collect(),
        SynExpr::Array(a) => a.elems.iter().collect(),
        SynExpr::Paren(p) => vec![&*p.expr],
        other => vec![other],
    }
}

/// The single identifier of a plain path expression (`x`), if it is one.
fn path_ident(e: &SynExpr) -> Option<&Ident> {
    match e {
        SynExpr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        SynExpr::Paren(p) => path_ident(&p.expr),
        SynExpr::Group(g) => path_ident(&g.expr),
        _ => None,
    }
}

/// The name of a call's function when it is a plain identifier (`copy(..)`).
fn call_name(call: &syn::ExprCall) -> Option<&Ident> {
    match &*call.func {
        SynExpr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => Some(&p.path.segments[0].ident),
        _ => None,
    }
}

/// `gemm(..)` and the modifiers chained on it (`.clear()`, `.policy(..)`),
/// in source order, if `e` is such a statement.
fn gemm_chain(e: &SynExpr) -> Option<(&syn::ExprCall, Vec<&syn::ExprMethodCall>)> {
    let mut modifiers = Vec::new();
    let mut cur = e;
    loop {
        match cur {
            SynExpr::MethodCall(m) => {
                modifiers.push(m);
                cur = &m.receiver;
            }
            SynExpr::Call(c) if call_name(c).is_some_and(|n| n == "gemm") => {
                modifiers.reverse();
                return Some((c, modifiers));
            }
            _ => return None,
        }
    }
}

/// The `x.t()` in `x.t()`, `&x.t()` or `&(x.t())`, if `e` is one.
fn transposed(e: &SynExpr) -> Option<&syn::ExprMethodCall> {
    match e {
        SynExpr::Reference(r) => transposed(&r.expr),
        SynExpr::Paren(p) => transposed(&p.expr),
        SynExpr::Group(g) => transposed(&g.expr),
        SynExpr::MethodCall(m) if m.method == "t" => Some(m),
        _ => None,
    }
}

/// A buffer's shape as constants (buffers declared in a kernel body are constant).
fn const_shape_of(b: &Buffer) -> Vec<i64> {
    b.const_shape().unwrap_or_default()
}

fn binop_symbol(op: &syn::BinOp) -> String {
    op.to_token_stream().to_string()
}

impl Lowerer<'_> {
    // ---------------------------------------------------------------- names

    fn bind(&mut self, name: &Ident, binding: Binding) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name.to_string(), binding));
        }
    }

    /// The binding of `name`; a buffer found here counts as used.
    fn lookup(&self, name: &str) -> Option<Binding> {
        let found = self.lookup_quiet(name);
        if let Some(Binding::Buffer(b)) = found {
            self.used_buffers.borrow_mut().insert(b);
        }
        found
    }

    /// The binding of `name`, without marking a buffer used.
    fn lookup_quiet(&self, name: &str) -> Option<Binding> {
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).find(|(n, _)| n == name).map(|(_, b)| *b)
    }

    fn visible_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.scopes.iter().flat_map(|s| s.iter().map(|(n, _)| n.clone())).collect();
        names.extend(self.consts.keys().cloned());
        names
    }

    fn unknown_name(&mut self, ident: &Ident) -> Reported {
        let name = ident.to_string();
        if is_upper_case_name(&name) {
            return self.errors.at(
                ident.span(),
                format!(
                    "`{name}` is not a kernel constant: `#[tile_kernel]` cannot see `const` items from outside the kernel; add it to the attribute, e.g. `#[tile_kernel(threads = .., consts({name} = ..))]`"
                ),
            );
        }
        let names = self.visible_names();
        let hint = did_you_mean(&name, names.iter().map(|s| s.as_str()));
        self.errors.at(ident.span(), format!("cannot find `{name}` in this kernel{hint}"))
    }

    fn span_id(&mut self, tokens: &dyn ToTokens) -> SpanId {
        self.spans.add(tokens)
    }

    // ---------------------------------------------------------------- params

    fn params(&mut self, sig: &Signature) {
        let mut dims: HashMap<String, VarId> = HashMap::new();
        let mut seen: Vec<String> = Vec::new();
        for p in &sig.params {
            let name = p.name.to_string();
            if seen.contains(&name) {
                self.errors.at(p.name.span(), format!("the parameter `{name}` is declared twice"));
                continue;
            }
            seen.push(name.clone());
            let span = self.spans.add_range(SpanRange { start: p.name.span(), end: SpanRange::of(&p.ty_tokens).end });
            match &p.ty {
                ParamType::Tensor { mutable, dtype, dims: decl } => {
                    let mut shape = Vec::new();
                    for d in decl {
                        match d {
                            DimDecl::Literal(v) => shape.push(Extent::Const(*v)),
                            DimDecl::Name(ident) => {
                                let dn = ident.to_string();
                                if let Some(v) = self.consts.get(&dn) {
                                    shape.push(Extent::Const(*v));
                                } else if let Some(v) = dims.get(&dn) {
                                    shape.push(Extent::Dyn(*v));
                                } else if sig.params.iter().any(|q| q.name == *ident) {
                                    self.errors.at(
                                        ident.span(),
                                        format!("the dimension `{dn}` has the name of a parameter; rename one of them"),
                                    );
                                    shape.push(Extent::Const(1));
                                } else {
                                    let v = self.k.add_dim(dn.clone());
                                    dims.insert(dn, v);
                                    self.bind(ident, Binding::Var { id: v, parallel: false, depth: 0 });
                                    shape.push(Extent::Dyn(v));
                                }
                            }
                        }
                    }
                    let id = self.k.add_tensor_param(name, *dtype, shape, *mutable);
                    self.k.buffers[id.0 as usize].span = span;
                    self.bind(&p.name, Binding::Buffer(id));
                }
                ParamType::Scalar(dtype) => {
                    let v = self.k.add_scalar_param(name, *dtype);
                    self.bind(&p.name, Binding::Var { id: v, parallel: false, depth: 0 });
                }
                ParamType::Invalid => self.bind(&p.name, Binding::Poisoned),
            }
        }
    }

    // ---------------------------------------------------------------- statements

    fn block(&mut self, stmts: &[SynStmt]) -> Vec<Stmt> {
        self.scopes.push(Vec::new());
        let mut out = Vec::new();
        for s in stmts {
            // A failed statement has been reported; go on with the next one.
            let _ = self.stmt(s, &mut out);
        }
        self.scopes.pop();
        out
    }

    fn stmt(&mut self, s: &SynStmt, out: &mut Vec<Stmt>) -> Lowered<()> {
        // Only the kernel's very first statement may declare the grid.
        self.first_stmt = std::mem::take(&mut self.at_kernel_start);
        self.right_after_grid = std::mem::take(&mut self.grid_just_declared);
        match s {
            SynStmt::Local(local) => self.let_stmt(local, out),
            SynStmt::Expr(e, semi) => self.expr_stmt(e, semi.is_some(), out),
            SynStmt::Item(syn::Item::Const(c)) => Err(self.errors.spanned(
                c,
                format!(
                    "`const` items cannot be declared inside a tile kernel; add the constant to the attribute: `consts({} = ..)`",
                    c.ident
                ),
            )),
            SynStmt::Item(item) => Err(self.errors.spanned(
                item,
                "items (`fn`, `struct`, `use`, ..) cannot be declared inside a tile kernel",
            )),
            SynStmt::Macro(m) => Err(self.errors.spanned(
                &m.mac,
                "macros are not supported inside a tile kernel: its body is compiled to GPU code, not expanded as Rust",
            )),
        }
    }

    fn let_stmt(&mut self, local: &syn::Local, out: &mut Vec<Stmt>) -> Lowered<()> {
        let Some(init) = &local.init else {
            let e = self.errors.spanned(local, "a `let` in a kernel needs a value: `let x = ..;`");
            self.bind_pattern_poisoned(&local.pat);
            return Err(e);
        };
        if let Some((else_token, _)) = &init.diverge {
            return Err(self.errors.at(else_token.span, "`let .. else` is not supported in a tile kernel"));
        }
        let value = &*init.expr;
        if let SynExpr::Call(call) = value {
            if let Some(name) = call_name(call) {
                match name.to_string().as_str() {
                    "grid" => return self.grid(Some(&local.pat), call, local),
                    "shared" | "fragment" | "local" => return self.buffer_decl(local, call),
                    _ => {}
                }
            }
        }
        let (ident, mutable, annotated) = match &local.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => (&p.ident, p.mutability.is_some(), None),
            Pat::Type(pt) => match &*pt.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                    (&p.ident, p.mutability.is_some(), Some(&*pt.ty))
                }
                other => return Err(self.errors.spanned(other, "expected a variable name")),
            },
            Pat::Wild(w) => {
                return Err(self.errors.spanned(w, "`let _ = ..` has no effect in a kernel; remove it"));
            }
            other => {
                self.bind_pattern_poisoned(other);
                return Err(self.errors.spanned(
                    other,
                    "unsupported pattern: a kernel `let` binds one name (`let x = ..`, `let mut x: f32 = ..`); tuples are only for `let (bx, by) = grid(..)`",
                ));
            }
        };
        let lowered = (|| {
            let v = self.expr(value)?;
            match annotated {
                Some(ty) => {
                    let dtype = self.dtype_of_type(ty)?;
                    Ok((self.coerce(v, dtype, value, "this `let`")?, dtype))
                }
                None => self.materialize(v, value),
            }
        })();
        let Ok((value, dtype)) = lowered else {
            self.bind(ident, Binding::Poisoned);
            return Err(Reported);
        };
        let kind = if mutable { VarKind::Mut } else { VarKind::Let };
        let var = self.k.add_var(ident.to_string(), dtype, kind);
        let span = self.span_id(local);
        out.push(Stmt::spanned(StmtKind::Let { var, value }, span));
        self.bind(ident, Binding::Var { id: var, parallel: false, depth: self.parallel_depth });
        Ok(())
    }

    fn bind_pattern_poisoned(&mut self, pat: &Pat) {
        match pat {
            Pat::Ident(p) => self.bind(&p.ident, Binding::Poisoned),
            Pat::Type(t) => self.bind_pattern_poisoned(&t.pat),
            Pat::Tuple(t) => {
                for p in &t.elems {
                    self.bind_pattern_poisoned(p);
                }
            }
            _ => {}
        }
    }

    fn dtype_of_type(&mut self, ty: &syn::Type) -> Lowered<DType> {
        if let syn::Type::Path(p) = ty {
            if let Some(ident) = p.path.get_ident() {
                let name = ident.to_string();
                if DTYPES.contains(&name.as_str()) {
                    if let Some(d) = DType::from_name(&name) {
                        return Ok(d);
                    }
                }
                if name == "bool" {
                    return Ok(DType::Bool);
                }
            }
        }
        Err(self.errors.spanned(
            ty,
            "unsupported type: a kernel computes with `f16`, `bf16`, `f32`, `i32`, `u32` (and `bool` for conditions)",
        ))
    }

    /// `let (bx, by) = grid(x, y);` or `grid(x);`.
    fn grid(&mut self, pat: Option<&Pat>, call: &syn::ExprCall, stmt: &dyn ToTokens) -> Lowered<()> {
        let name_span = call.func.span();
        if let Some(first) = self.grid_at {
            let mut e = syn::Error::new(
                name_span,
                "`grid(..)` is called twice: a kernel declares its grid once, in its first statement",
            );
            e.combine(syn::Error::new(first, "the grid is first declared here"));
            self.errors.push(e);
            if let Some(p) = pat {
                self.bind_pattern_poisoned(p);
            }
            return Err(Reported);
        }
        if !self.first_stmt {
            if let Some(p) = pat {
                self.bind_pattern_poisoned(p);
            }
            return Err(self.errors.spanned(
                stmt,
                "`grid(..)` must be the first statement of the kernel (`let (bx, by) = grid(..);`): the grid is computed before the kernel runs",
            ));
        }
        self.grid_at = Some(name_span);
        self.grid_just_declared = true;
        let n = call.args.len();
        self.grid_axes = n;
        if !(1..=3).contains(&n) {
            if let Some(p) = pat {
                self.bind_pattern_poisoned(p);
            }
            return Err(self
                .errors
                .spanned(call, format!("`grid` takes 1 to 3 extents (x, y, z), but {n} were given")));
        }
        let names: Vec<Option<&Ident>> = match pat {
            None => vec![None; n],
            Some(Pat::Wild(_)) => vec![None; n],
            Some(Pat::Ident(p)) if p.subpat.is_none() => vec![Some(&p.ident)],
            Some(Pat::Tuple(t)) => {
                let mut v = Vec::new();
                for p in &t.elems {
                    match p {
                        Pat::Ident(i) => v.push(Some(&i.ident)),
                        Pat::Wild(_) => v.push(None),
                        other => return Err(self.errors.spanned(other, "expected a name for a block index")),
                    }
                }
                v
            }
            Some(other) => {
                return Err(self.errors.spanned(other, "expected `let bx = grid(..)` or `let (bx, by) = grid(..)`"))
            }
        };
        if names.len() != n {
            let e = self.errors.spanned(
                pat.map(|p| p as &dyn ToTokens).unwrap_or(call as &dyn ToTokens),
                format!(
                    "the pattern binds {} block ind{} but `grid` has {n} extent{}",
                    names.len(),
                    if names.len() == 1 { "ex" } else { "ices" },
                    if n == 1 { "" } else { "s" }
                ),
            );
            if let Some(p) = pat {
                self.bind_pattern_poisoned(p);
            }
            return Err(e);
        }
        let mut failed = false;
        for (axis, arg) in call.args.iter().enumerate() {
            match self.grid_extent(arg) {
                Ok(e) => self.k.grid[axis] = e,
                Err(Reported) => failed = true,
            }
        }
        for (axis, name) in names.iter().enumerate() {
            if let Some(ident) = name {
                let v = self.k.add_var(ident.to_string(), DType::I32, VarKind::BlockIdx(axis as u8));
                self.bind(ident, Binding::Var { id: v, parallel: false, depth: 0 });
            }
        }
        if failed {
            Err(Reported)
        } else {
            Ok(())
        }
    }

    fn grid_extent(&mut self, arg: &SynExpr) -> Lowered<Expr> {
        let v = self.expr(arg)?;
        let e = self.coerce(v, DType::I32, arg, "a grid extent")?;
        let mut bad: Option<String> = None;
        self.visit_grid_expr(&e, &mut bad);
        if let Some(why) = bad {
            return Err(self.errors.spanned(
                arg,
                format!("a grid extent may use only tensor dimensions and constants, because the grid is computed on the host before launch; {why}"),
            ));
        }
        Ok(e)
    }

    fn visit_grid_expr(&self, e: &Expr, bad: &mut Option<String>) {
        match e {
            Expr::Var(v) => {
                let var = self.k.var(*v);
                if var.kind != VarKind::Dim && bad.is_none() {
                    *bad = Some(format!("`{}` is not one", var.name));
                }
            }
            Expr::Load { buf, .. } => {
                if bad.is_none() {
                    *bad = Some(format!("reading `{}` is not allowed", self.k.buffer(*buf).name));
                }
            }
            Expr::Const(_) => {}
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => self.visit_grid_expr(arg, bad),
            Expr::Binary { lhs, rhs, .. } => {
                self.visit_grid_expr(lhs, bad);
                self.visit_grid_expr(rhs, bad);
            }
            Expr::Fma { a, b, c } => {
                for x in [a, b, c] {
                    self.visit_grid_expr(x, bad);
                }
            }
            Expr::Select { cond, then, otherwise } => {
                for x in [cond, then, otherwise] {
                    self.visit_grid_expr(x, bad);
                }
            }
        }
    }

    /// `let mut x = shared::<f16, BM, BK>();` (also `fragment`, `local`).
    fn buffer_decl(&mut self, local: &syn::Local, call: &syn::ExprCall) -> Lowered<()> {
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

    fn buffer_type(&mut self, call: &syn::ExprCall) -> Lowered<(Scope, DType, Vec<i64>)> {
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
    fn dim_expr(&mut self, arg: &syn::GenericArgument, usage: &str) -> Lowered<SynExpr> {
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
    fn const_int(&mut self, e: &SynExpr, what: &str) -> Lowered<i64> {
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
    fn non_constant_culprit<'a>(&self, e: &'a SynExpr) -> (Option<&'a Ident>, String) {
        let mut found: Option<(&'a Ident, String)> = None;
        self.find_culprit(e, &mut found);
        match found {
            Some((i, why)) => (Some(i), why),
            None => (None, "this expression is not constant".to_string()),
        }
    }

    fn find_culprit<'a>(&self, e: &'a SynExpr, found: &mut Option<(&'a Ident, String)>) {
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

    fn expr_stmt(&mut self, e: &SynExpr, has_semi: bool, out: &mut Vec<Stmt>) -> Lowered<()> {
        if let Some((call, modifiers)) = gemm_chain(e) {
            return self.gemm_stmt(call, &modifiers, e, out);
        }
        match e {
            SynExpr::ForLoop(f) => self.for_loop(f, out),
            SynExpr::If(i) => {
                let s = self.if_stmt(i)?;
                out.push(s);
                Ok(())
            }
            SynExpr::Block(b) if b.label.is_none() => {
                let body = self.block(&b.block.stmts);
                out.extend(body);
                Ok(())
            }
            SynExpr::Assign(a) => self.assign(a, out),
            SynExpr::Binary(b) if compound_op(&b.op).is_some() => self.compound_assign(b, out),
            SynExpr::Call(c) => self.call_stmt(c, None, e, out),
            SynExpr::MethodCall(m) => match &*m.receiver {
                SynExpr::Call(c) if call_name(c).is_some_and(|n| n == "copy" || n.to_string().starts_with("reduce_")) => {
                    self.call_stmt(c, Some(m), e, out)
                }
                _ if m.method == "t" => Err(self.transpose_misplaced(m)),
                _ => {
                    let known = ["max", "min", "exp2", "exp", "log2", "log", "abs", "sqrt", "rsqrt", "tile"];
                    if known.contains(&m.method.to_string().as_str()) {
                        Err(self.errors.spanned(e, "the value of this expression is unused"))
                    } else {
                        Err(self.errors.at(
                            m.method.span(),
                            format!(
                                "unknown method `.{}()` here; `.fill(v)` follows `copy(..)` and `.keep()` follows `reduce_*(..)`",
                                m.method
                            ),
                        ))
                    }
                }
            },
            SynExpr::While(w) => Err(self.errors.at(
                w.while_token.span,
                "`while` loops are not supported in a tile kernel; a loop is `for i in a..b` (serial), `for i in parallel(n)` or `for k in pipelined(n, stages)`",
            )),
            SynExpr::Loop(l) => Err(self.errors.at(
                l.loop_token.span,
                "`loop` is not supported in a tile kernel; a loop is `for i in a..b` (serial), `for i in parallel(n)` or `for k in pipelined(n, stages)`",
            )),
            SynExpr::Match(m) => Err(self.errors.at(m.match_token.span, "`match` is not supported in a tile kernel; use `if`/`else`")),
            SynExpr::Return(r) => Err(self.errors.at(
                r.return_token.span,
                "`return` is not supported in a tile kernel: the body runs to its end; use `if` to skip work",
            )),
            SynExpr::Break(b) => Err(self.errors.at(
                b.break_token.span,
                "`break` is not supported in a tile kernel: every loop runs all its iterations; use `if` to skip work",
            )),
            SynExpr::Continue(c) => Err(self.errors.at(
                c.continue_token.span,
                "`continue` is not supported in a tile kernel; use `if` to skip work",
            )),
            SynExpr::Unsafe(u) => Err(self.errors.at(u.unsafe_token.span, "`unsafe` blocks are not supported in a tile kernel")),
            SynExpr::Macro(m) => Err(self.errors.spanned(
                &m.mac,
                "macros are not supported inside a tile kernel: its body is compiled to GPU code, not expanded as Rust",
            )),
            SynExpr::Closure(_) | SynExpr::Async(_) | SynExpr::Await(_) | SynExpr::Try(_) | SynExpr::TryBlock(_)
            | SynExpr::Yield(_) | SynExpr::Struct(_) | SynExpr::Let(_) | SynExpr::Const(_) => Err(self.errors.spanned(
                e,
                format!("this Rust syntax is not supported in a tile kernel; {STATEMENTS_HELP}"),
            )),
            _ => {
                let what = if has_semi { "this expression's value is unused" } else { "a kernel returns nothing, but its body ends with a value" };
                // Lower it anyway, for errors inside it (unknown names, ..).
                let _ = self.expr(e)?;
                Err(self.errors.spanned(e, format!("{what}; {STATEMENTS_HELP}")))
            }
        }
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop, out: &mut Vec<Stmt>) -> Lowered<()> {
        if let Some(label) = &f.label {
            return Err(self.errors.spanned(label, "loop labels are not supported in a tile kernel"));
        }
        let span = self.span_id(f);
        let loops_help = "a `for` loop runs over `a..b` (serial), `parallel(n)` / `parallel((n0, n1))` (independent iterations, spread over the threads) or `pipelined(n, stages)`";
        match &*f.expr {
            SynExpr::Range(r) => {
                let (Some(start), Some(end)) = (&r.start, &r.end) else {
                    return Err(self.errors.spanned(&*f.expr, "a serial loop needs both bounds: `for i in a..b`"));
                };
                let start = self.index_value(start, "a loop bound");
                let end_v = self.index_value(end, "a loop bound");
                let (start, mut end) = (start?, end_v?);
                if matches!(r.limits, syn::RangeLimits::Closed(_)) {
                    end = Expr::binary(BinOp::Add, end, Expr::i32(1));
                }
                let ident = self.loop_var(&f.pat)?;
                let body = self.loop_body(&f.body, &[ident], false);
                let var = body.0[0];
                out.push(Stmt::spanned(StmtKind::For { var, start, end, kind: LoopKind::Serial, body: body.1 }, span));
                Ok(())
            }
            SynExpr::Call(call) if call_name(call).is_some_and(|n| n == "parallel") => {
                let extents: Vec<&SynExpr> = match call.args.len() {
                    1 => match &call.args[0] {
                        SynExpr::Tuple(t) => t.elems.iter().collect(),
                        other => vec![other],
                    },
                    n => {
                        return Err(self.errors.spanned(
                            call,
                            format!("`parallel` takes one extent or a tuple of extents (`parallel((BM, BN))`), but {n} arguments were given"),
                        ))
                    }
                };
                if extents.is_empty() || extents.len() > 3 {
                    return Err(self.errors.spanned(call, "`parallel` loops have 1 to 3 dimensions"));
                }
                let mut sizes = Vec::new();
                for e in &extents {
                    match self.const_int(e, "the extent of a `parallel` loop") {
                        Ok(v) if v > 0 && v <= i32::MAX as i64 => sizes.push(v),
                        Ok(v) => {
                            self.errors
                                .spanned(*e, format!("the extent of a `parallel` loop must be positive, found {v}"));
                            return Err(Reported);
                        }
                        Err(r) => return Err(r),
                    }
                }
                let idents: Vec<Option<&Ident>> = match &*f.pat {
                    Pat::Tuple(t) => {
                        let mut v = Vec::new();
                        for p in &t.elems {
                            v.push(self.loop_var(p)?);
                        }
                        v
                    }
                    p => vec![self.loop_var(p)?],
                };
                if idents.len() != sizes.len() {
                    return Err(self.errors.spanned(
                        &*f.pat,
                        format!(
                            "the pattern binds {} loop variable{} but `parallel` has {} extent{}",
                            idents.len(),
                            if idents.len() == 1 { "" } else { "s" },
                            sizes.len(),
                            if sizes.len() == 1 { "" } else { "s" }
                        ),
                    ));
                }
                let (vars, body) = self.loop_body(&f.body, &idents, true);
                // `for (i, j) in parallel((A, B))` is the nest `for i { for j { .. } }`.
                let mut stmt_body = body;
                for (var, size) in vars.iter().zip(&sizes).rev() {
                    let s = Stmt::spanned(
                        StmtKind::For {
                            var: *var,
                            start: Expr::i32(0),
                            end: Expr::i32(*size as i32),
                            kind: LoopKind::Parallel,
                            body: stmt_body,
                        },
                        span,
                    );
                    stmt_body = vec![s];
                }
                out.extend(stmt_body);
                Ok(())
            }
            SynExpr::Call(call) if call_name(call).is_some_and(|n| n == "pipelined") => {
                if call.args.len() != 2 {
                    return Err(self.errors.spanned(
                        call,
                        format!(
                            "`pipelined` takes 2 arguments (the trip count and the number of stages), but {} {} given",
                            call.args.len(),
                            if call.args.len() == 1 { "was" } else { "were" }
                        ),
                    ));
                }
                let end = self.index_value(&call.args[0], "the trip count of `pipelined`");
                let stages = self.const_int(&call.args[1], "the number of stages of `pipelined`");
                let (end, stages) = (end?, stages?);
                if !(1..=16).contains(&stages) {
                    return Err(self.errors.spanned(
                        &call.args[1],
                        format!("the number of stages must be between 1 and 16, found {stages}"),
                    ));
                }
                let ident = self.loop_var(&f.pat)?;
                let (vars, body) = self.loop_body(&f.body, &[ident], false);
                out.push(Stmt::spanned(
                    StmtKind::For {
                        var: vars[0],
                        start: Expr::i32(0),
                        end,
                        kind: LoopKind::Pipelined { stages: stages as u32 },
                        body,
                    },
                    span,
                ));
                Ok(())
            }
            SynExpr::Call(call) => {
                let name = call_name(call).map(|n| n.to_string()).unwrap_or_default();
                let hint = did_you_mean(&name, ["parallel", "pipelined"]);
                Err(self.errors.spanned(&*f.expr, format!("unsupported loop iterator{hint}; {loops_help}")))
            }
            other => Err(self.errors.spanned(other, format!("unsupported loop iterator; {loops_help}"))),
        }
    }

    fn loop_var<'p>(&mut self, pat: &'p Pat) -> Lowered<Option<&'p Ident>> {
        match pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() => Ok(Some(&p.ident)),
            Pat::Wild(_) => Ok(None),
            other => Err(self.errors.spanned(other, "expected a loop variable name (loop variables cannot be `mut`)")),
        }
    }

    /// Declares the loop variables, lowers the body in a new scope.
    fn loop_body(&mut self, body: &syn::Block, idents: &[Option<&Ident>], parallel: bool) -> (Vec<VarId>, Vec<Stmt>) {
        self.scopes.push(Vec::new());
        if parallel {
            self.parallel_depth += 1;
        }
        let mut vars = Vec::new();
        for ident in idents {
            let name = ident.map(|i| i.to_string()).unwrap_or_else(|| "_".into());
            let v = self.k.add_var(name, DType::I32, VarKind::Loop);
            if let Some(i) = ident {
                self.bind(i, Binding::Var { id: v, parallel, depth: self.parallel_depth });
            }
            vars.push(v);
        }
        let stmts = self.block(&body.stmts);
        if parallel {
            self.parallel_depth -= 1;
        }
        self.scopes.pop();
        (vars, stmts)
    }

    fn if_stmt(&mut self, i: &syn::ExprIf) -> Lowered<Stmt> {
        let span = self.span_id(i);
        let cond = self.condition(&i.cond);
        let then = self.block(&i.then_branch.stmts);
        let otherwise = match &i.else_branch {
            None => Vec::new(),
            Some((_, e)) => match &**e {
                SynExpr::If(nested) => vec![self.if_stmt(nested)?],
                SynExpr::Block(b) => self.block(&b.block.stmts),
                other => return Err(self.errors.spanned(other, "expected a block after `else`")),
            },
        };
        Ok(Stmt::spanned(StmtKind::If { cond: cond?, then, otherwise }, span))
    }

    fn condition(&mut self, cond: &SynExpr) -> Lowered<Expr> {
        match self.expr(cond)? {
            Val::Typed(e, DType::Bool) => Ok(e),
            other => Err(self
                .errors
                .spanned(cond, format!("an `if` condition must be a `bool`, found {}", other.describe()))),
        }
    }

    /// An `i32` index-like value (loop bounds, tile origins, element indices).
    fn index_value(&mut self, e: &SynExpr, what: &str) -> Lowered<Expr> {
        match self.expr(e)? {
            Val::Typed(x, DType::I32) => Ok(x),
            Val::Typed(x, DType::U32) => Ok(Expr::cast(DType::I32, x)),
            Val::Int(v) => self.literal(Val::Int(v), DType::I32, e),
            other => {
                Err(self.errors.spanned(e, format!("{what} must be an integer (`i32`), found {}", other.describe())))
            }
        }
    }

    // ---------------------------------------------------------------- writes

    fn assign(&mut self, a: &syn::ExprAssign, out: &mut Vec<Stmt>) -> Lowered<()> {
        let span = self.span_id(a);
        match &*a.left {
            SynExpr::Index(ix) => {
                let (buf, index) = self.element(ix, true)?;
                let dtype = self.k.buffer(buf).dtype;
                let what = format!("`{}` holds `{dtype}` elements and this assignment", self.k.buffer(buf).name);
                let v = self.expr(&a.right)?;
                let value = self.coerce(v, dtype, &a.right, &what)?;
                out.push(Stmt::spanned(StmtKind::Store { buf, index, value }, span));
                Ok(())
            }
            left => {
                let var = self.assignable_var(left)?;
                let dtype = self.k.var(var).dtype;
                let what = format!("`{}` is `{dtype}` and this assignment", self.k.var(var).name);
                let v = self.expr(&a.right)?;
                let value = self.coerce(v, dtype, &a.right, &what)?;
                out.push(Stmt::spanned(StmtKind::Assign { var, value }, span));
                Ok(())
            }
        }
    }

    fn compound_assign(&mut self, b: &syn::ExprBinary, out: &mut Vec<Stmt>) -> Lowered<()> {
        let span = self.span_id(b);
        let Some(op) = compound_op(&b.op) else {
            return Err(self.errors.spanned(b, "expected an assignment"));
        };
        let (current, dtype, target) = match &*b.left {
            SynExpr::Index(ix) => {
                let (buf, index) = self.element(ix, true)?;
                (Expr::load(buf, index.clone()), self.k.buffer(buf).dtype, Target::Element(buf, index))
            }
            left => {
                let var = self.assignable_var(left)?;
                (Expr::var(var), self.k.var(var).dtype, Target::Var(var))
            }
        };
        let rhs = self.expr(&b.right)?;
        let value = match self.binary_op(op, &binop_symbol(&b.op), Val::Typed(current, dtype), rhs, b)? {
            Val::Typed(e, t) if t == dtype => e,
            other => {
                return Err(self
                    .errors
                    .spanned(b, format!("`{}` would change the type to {}", binop_symbol(&b.op), other.describe())))
            }
        };
        let kind = match target {
            Target::Element(buf, index) => StmtKind::Store { buf, index, value },
            Target::Var(var) => StmtKind::Assign { var, value },
        };
        out.push(Stmt::spanned(kind, span));
        Ok(())
    }

    /// The `let mut` variable on the left of `=` / `+=`.
    fn assignable_var(&mut self, left: &SynExpr) -> Lowered<VarId> {
        let Some(ident) = path_ident(left) else {
            return Err(self
                .errors
                .spanned(left, "can only assign to a `let mut` variable or to an element (`x[i] = ..`)"));
        };
        let name = ident.to_string();
        match self.lookup(&name) {
            None if self.consts.contains_key(&name) => {
                Err(self.errors.at(ident.span(), format!("cannot assign to `{name}`: it is a constant from `consts(..)`")))
            }
            None => Err(self.unknown_name(ident)),
            Some(Binding::Poisoned) => Err(Reported),
            Some(Binding::Buffer(b)) => Err(self.errors.at(
                ident.span(),
                format!(
                    "cannot assign to the buffer `{}` as a whole; assign its elements (`{name}[i] = ..`) or use `copy`/`fill`",
                    self.k.buffer(b).name
                ),
            )),
            Some(Binding::Var { id, depth, .. }) => {
                let var = self.k.var(id);
                let problem = match var.kind {
                    VarKind::Mut => None,
                    VarKind::Let => Some(format!("cannot assign twice to `{name}`: it is declared with `let`; write `let mut {name}`")),
                    VarKind::Loop => Some(format!("cannot assign to the loop variable `{name}`")),
                    VarKind::Param => Some(format!("cannot assign to the scalar parameter `{name}`; copy it into a `let mut` first")),
                    VarKind::Dim => Some(format!("cannot assign to `{name}`: it is a dimension of a tensor parameter")),
                    VarKind::BlockIdx(_) => Some(format!("cannot assign to the block index `{name}`")),
                };
                if let Some(p) = problem {
                    return Err(self.errors.at(ident.span(), p));
                }
                if depth < self.parallel_depth {
                    return Err(self.errors.at(
                        ident.span(),
                        format!(
                            "cannot assign to `{name}` inside a `parallel` loop: it is declared outside, and the loop's iterations run on different threads; keep per-element values in a fragment and combine them with `reduce_sum`/`reduce_max`"
                        ),
                    ));
                }
                Ok(id)
            }
        }
    }

    /// `x[i]` / `x[(i, j)]` / `x[[i, j]]`: the buffer and its `i32` indices,
    /// checking rank, fragment rules and (for writes) writability.
    fn element(&mut self, ix: &syn::ExprIndex, write: bool) -> Lowered<(BufferId, Vec<Expr>)> {
        let Some(ident) = path_ident(&ix.expr) else {
            if let Some(t) = transposed(&ix.expr) {
                return Err(self.transpose_misplaced(t));
            }
            return Err(self.errors.spanned(&*ix.expr, "only buffers and tensors can be indexed, by name: `x[i]`"));
        };
        let name = ident.to_string();
        let buf = match self.lookup(&name) {
            Some(Binding::Buffer(b)) => b,
            Some(Binding::Poisoned) => return Err(Reported),
            Some(Binding::Var { .. }) => {
                return Err(self
                    .errors
                    .at(ident.span(), format!("`{name}` is a scalar; only buffers and tensors can be indexed")))
            }
            None => return Err(self.unknown_name(ident)),
        };
        let buffer = self.k.buffer(buf).clone();
        if write && buffer.scope == Scope::Global && !buffer.mutable {
            return Err(self.read_only(ident));
        }
        let declared_depth = self.buffer_depth.get(&buf).copied().unwrap_or(0);
        if write && buffer.scope == Scope::Local && self.parallel_depth > declared_depth {
            return Err(self.errors.spanned(
                ix,
                format!(
                    "cannot write the local buffer `{name}` inside a `parallel` loop: every thread holds its own copy of a local buffer, so writes from parallel iterations would make the copies differ; use a fragment or a shared buffer"
                ),
            ));
        }
        let idx = index_list(&ix.index);
        if idx.len() != buffer.rank() {
            return Err(self.errors.spanned(
                &*ix.index,
                format!(
                    "`{name}` has {} dimension{}, but {} ind{} given",
                    buffer.rank(),
                    if buffer.rank() == 1 { "" } else { "s" },
                    idx.len(),
                    if idx.len() == 1 { "ex is" } else { "ices are" }
                ),
            ));
        }
        if buffer.scope == Scope::Fragment {
            if self.parallel_depth == 0 {
                return Err(self.errors.spanned(
                    ix,
                    format!(
                        "the fragment `{name}` is accessed outside a `parallel` loop: a fragment is spread over the block's threads, so its elements are only reachable inside `for i in parallel(..)` (which says which thread handles which element)"
                    ),
                ));
            }
            for e in &idx {
                let ok = path_ident(e)
                    .and_then(|i| self.lookup(&i.to_string()))
                    .is_some_and(|b| matches!(b, Binding::Var { parallel: true, .. }));
                if !ok {
                    return Err(self.errors.spanned(
                        *e,
                        format!(
                            "the fragment `{name}` can only be indexed by the variables of enclosing `parallel` loops (`{name}[i]`, `{name}[(i, j)]`), not by an arbitrary expression"
                        ),
                    ));
                }
            }
        }
        let mut index = Vec::new();
        let mut failed = false;
        for e in idx {
            match self.index_value(e, "an index") {
                Ok(x) => index.push(x),
                Err(Reported) => failed = true,
            }
        }
        if failed {
            return Err(Reported);
        }
        Ok((buf, index))
    }

    fn read_only(&mut self, ident: &Ident) -> Reported {
        self.errors.at(
            ident.span(),
            format!("cannot write to `{ident}`: it is a read-only parameter (`&Tensor`); declare it as `&mut Tensor<..>` to write to it"),
        )
    }

    // ---------------------------------------------------------------- tile operations

    fn call_stmt(
        &mut self,
        call: &syn::ExprCall,
        modifier: Option<&syn::ExprMethodCall>,
        whole: &SynExpr,
        out: &mut Vec<Stmt>,
    ) -> Lowered<()> {
        let Some(name_ident) = call_name(call) else {
            return Err(self.errors.spanned(
                &*call.func,
                "unsupported call: a kernel calls the tile operations and math functions by their plain name",
            ));
        };
        let name = name_ident.to_string();
        let span = self.span_id(whole);
        let collective =
            matches!(name.as_str(), "copy" | "fill" | "clear" | "reduce_max" | "reduce_sum" | "reduce_min" | "barrier");
        if collective && self.parallel_depth > 0 {
            return Err(self.errors.at(
                name_ident.span(),
                format!("`{name}` is a block-wide operation and cannot be used inside a `parallel` loop, whose iterations run on different threads"),
            ));
        }
        if let Some(m) = modifier {
            let method = m.method.to_string();
            let (expected, usage) = if name == "copy" { ("fill", ".fill(value)") } else { ("keep", ".keep()") };
            if method != expected {
                return Err(self.errors.at(
                    m.method.span(),
                    format!("unknown method `.{method}()` on `{name}(..)`; it supports `{usage}`"),
                ));
            }
            if expected == "keep" && !m.args.is_empty() {
                return Err(self.errors.spanned(&m.args, "`.keep()` takes no arguments"));
            }
        }
        let arity = |n: usize| -> Option<String> {
            (call.args.len() != n).then(|| {
                format!(
                    "`{name}` takes {n} argument{}, but {} {} given",
                    if n == 1 { "" } else { "s" },
                    call.args.len(),
                    if call.args.len() == 1 { "was" } else { "were" }
                )
            })
        };
        let args: Vec<&SynExpr> = call.args.iter().collect();
        let kind = match name.as_str() {
            "copy" => {
                if let Some(msg) = arity(2) {
                    return Err(self.errors.spanned(call, format!("{msg}: `copy(src, dst)`")));
                }
                let src = self.tile_ref(args[0], false);
                let dst = self.tile_ref(args[1], true);
                let (src, dst) = (src?, dst?);
                self.check_copy(&src, &dst, call)?;
                let fill = match modifier {
                    Some(m) => {
                        if m.args.len() != 1 {
                            return Err(self
                                .errors
                                .spanned(m, "`.fill(v)` takes 1 argument: the value of elements read out of bounds"));
                        }
                        let dtype = self.k.buffer(dst.tile.buf).dtype;
                        let v = self.expr(&m.args[0])?;
                        Some(self.coerce(
                            v,
                            dtype,
                            &m.args[0],
                            &format!("the destination `{}` holds `{dtype}` and `.fill(..)`", dst.name),
                        )?)
                    }
                    None => None,
                };
                StmtKind::Copy { src: src.tile, dst: dst.tile, fill }
            }
            "fill" | "clear" => {
                let n = if name == "fill" { 2 } else { 1 };
                if let Some(msg) = arity(n) {
                    let usage = if name == "fill" { "`fill(&mut buf, value)`" } else { "`clear(&mut buf)`" };
                    return Err(self.errors.spanned(call, format!("{msg}: {usage}")));
                }
                let buf = self.buffer_arg(args[0], true, &name)?;
                let dtype = self.k.buffer(buf).dtype;
                let value = if name == "fill" {
                    let v = self.expr(args[1])?;
                    self.coerce(v, dtype, args[1], &format!("the buffer holds `{dtype}` and the fill value"))?
                } else {
                    self.literal(Val::Int(0), dtype, call)?
                };
                StmtKind::Fill { buf, value }
            }
            "reduce_max" | "reduce_sum" | "reduce_min" => {
                if let Some(msg) = arity(3) {
                    return Err(self.errors.spanned(call, format!("{msg}: `{name}(&src, &mut dst, dim)`")));
                }
                let op = match name.as_str() {
                    "reduce_max" => ReduceOp::Max,
                    "reduce_sum" => ReduceOp::Sum,
                    _ => ReduceOp::Min,
                };
                let src = self.buffer_arg(args[0], false, &name);
                let dst = self.buffer_arg(args[1], true, &name);
                let dim = self.const_int(args[2], &format!("the dimension of `{name}`"));
                let (src, dst, dim) = (src?, dst?, dim?);
                let (s, d) = (self.k.buffer(src).clone(), self.k.buffer(dst).clone());
                let (s_shape, d_shape) = (s.const_shape().unwrap_or_default(), d.const_shape().unwrap_or_default());
                if dim < 0 || dim as usize >= s.rank() {
                    let valid: Vec<String> = (0..s.rank()).map(|d| d.to_string()).collect();
                    let dims = match valid.split_last() {
                        Some((last, rest)) if !rest.is_empty() => {
                            format!("valid dimensions: {} and {last}", rest.join(", "))
                        }
                        _ => "valid dimension: 0".to_string(),
                    };
                    return Err(self.errors.spanned(
                        args[2],
                        format!("`{name}` over dimension {dim}, but `{}` has rank {} ({dims})", s.name, s.rank()),
                    ));
                }
                let mut expected = s_shape.clone();
                expected.remove(dim as usize);
                if expected.is_empty() {
                    expected.push(1);
                }
                if d_shape != expected {
                    return Err(self.errors.spanned(
                        args[1],
                        format!(
                            "shape mismatch in `{name}`: reducing `{}` {} over dimension {dim} gives {}, but `{}` is {}",
                            s.name,
                            format_shape(&s_shape),
                            format_shape(&expected),
                            d.name,
                            format_shape(&d_shape)
                        ),
                    ));
                }
                if s.dtype != d.dtype {
                    return Err(self.errors.spanned(
                        call,
                        format!(
                            "`{name}` needs `{}` and `{}` to hold the same element type, but they hold `{}` and `{}`",
                            s.name, d.name, s.dtype, d.dtype
                        ),
                    ));
                }
                StmtKind::Reduce { op, src, dst, dim: dim as usize, keep: modifier.is_some() }
            }
            "atomic_add" => {
                if let Some(msg) = arity(2) {
                    return Err(self.errors.spanned(call, format!("{msg}: `atomic_add(&mut t[(i, j)], value)`")));
                }
                let SynExpr::Reference(r) = args[0] else {
                    return Err(self.errors.spanned(
                        args[0],
                        "the first argument of `atomic_add` is an element of a `&mut Tensor`: `&mut t[(i, j)]`",
                    ));
                };
                let SynExpr::Index(ix) = &*r.expr else {
                    return Err(self.errors.spanned(
                        args[0],
                        "the first argument of `atomic_add` is an element of a `&mut Tensor`: `&mut t[(i, j)]`",
                    ));
                };
                if r.mutability.is_none() {
                    return Err(self.errors.spanned(args[0], "`atomic_add` writes the element: write `&mut t[..]`"));
                }
                let (buf, index) = self.element(ix, true)?;
                let b = self.k.buffer(buf).clone();
                if b.scope != Scope::Global {
                    return Err(self.errors.spanned(
                        &*ix.expr,
                        format!(
                            "`atomic_add` works on tensor parameters; `{}` is a {} buffer",
                            b.name,
                            scope_name(b.scope)
                        ),
                    ));
                }
                let v = self.expr(args[1])?;
                let value =
                    self.coerce(v, b.dtype, args[1], &format!("`{}` holds `{}` and the added value", b.name, b.dtype))?;
                StmtKind::AtomicAdd { buf, index, value }
            }
            "barrier" => {
                if let Some(msg) = arity(0) {
                    return Err(self.errors.spanned(call, msg));
                }
                StmtKind::Barrier
            }
            "grid" => return self.grid(None, call, whole),
            "use_swizzle" => return self.use_swizzle(call, whole),
            "annotate_layout" => return self.annotate_layout(call),
            "shared" | "fragment" | "local" => {
                return Err(self.errors.spanned(
                    call,
                    format!("a buffer is declared with a name: `let mut x = {name}::<T, D0, D1, ..>();`"),
                ))
            }
            "parallel" | "pipelined" => {
                return Err(self
                    .errors
                    .spanned(call, format!("`{name}(..)` is only valid as the iterator of a `for` loop")))
            }
            n if MATH.contains(&n) => {
                let _ = self.expr(whole)?;
                return Err(self.errors.spanned(whole, "the value of this expression is unused"));
            }
            _ => return Err(self.unknown_function(name_ident)),
        };
        out.push(Stmt::spanned(kind, span));
        Ok(())
    }

    /// `.t()` used anywhere but on an operand of `gemm`.
    fn transpose_misplaced(&mut self, m: &syn::ExprMethodCall) -> Reported {
        self.errors.spanned(
            m,
            "`.t()` (transpose) is only valid on an operand of `gemm`: `gemm(&a, &b.t(), &mut acc)` reads `b` as transposed; elsewhere, transpose with a `parallel` loop (`t[(j, i)] = x[(i, j)]`)",
        )
    }

    /// `gemm(&a, &b, &mut acc)` with optional `.t()` on `a`/`b` and the
    /// modifiers `.clear()` and `.policy(FullRow | FullCol | Square)`.
    fn gemm_stmt(
        &mut self,
        call: &syn::ExprCall,
        modifiers: &[&syn::ExprMethodCall],
        whole: &SynExpr,
        out: &mut Vec<Stmt>,
    ) -> Lowered<()> {
        let span = self.span_id(whole);
        let mut failed = false;
        if self.parallel_depth > 0 {
            self.errors.spanned(
                &*call.func,
                "`gemm` is a block-wide operation and cannot be used inside a `parallel` loop, whose iterations run on different threads; call it once per tile, outside the loop",
            );
            failed = true;
        }
        let mut clear: Option<&syn::Ident> = None;
        let mut policy: Option<(WarpPolicy, &syn::Ident)> = None;
        for m in modifiers {
            let method = m.method.to_string();
            match method.as_str() {
                "clear" => {
                    if !m.args.is_empty() {
                        self.errors.spanned(&m.args, "`.clear()` takes no arguments");
                        failed = true;
                    } else if let Some(prev) = clear {
                        let mut e = syn::Error::new(m.method.span(), "`.clear()` is given twice");
                        e.combine(syn::Error::new(prev.span(), "first given here"));
                        self.errors.push(e);
                        failed = true;
                    }
                    clear = Some(&m.method);
                }
                "policy" => {
                    let parsed = match m.args.first() {
                        Some(arg) if m.args.len() == 1 => warp_policy(arg),
                        _ => None,
                    };
                    match parsed {
                        None => {
                            self.errors.spanned(
                                *m,
                                "`.policy(..)` takes one warp policy: `FullRow` (warps split M), `FullCol` (warps split N) or `Square`",
                            );
                            failed = true;
                        }
                        Some(p) => {
                            if let Some((_, prev)) = policy {
                                let mut e = syn::Error::new(m.method.span(), "`.policy(..)` is given twice");
                                e.combine(syn::Error::new(prev.span(), "first given here"));
                                self.errors.push(e);
                                failed = true;
                            }
                            policy = Some((p, &m.method));
                        }
                    }
                }
                "t" => {
                    self.errors.at(
                        m.method.span(),
                        "`.t()` transposes an operand of `gemm`, not its result: write `gemm(&a, &b.t(), &mut acc)`",
                    );
                    failed = true;
                }
                _ => {
                    self.errors.at(
                        m.method.span(),
                        format!("unknown method `.{method}()` on `gemm(..)`; it supports `.clear()` and `.policy(FullRow | FullCol | Square)`"),
                    );
                    failed = true;
                }
            }
        }
        if call.args.len() != 3 {
            let n = call.args.len();
            self.errors.spanned(
                call,
                format!(
                    "`gemm` takes 3 arguments, but {n} {} given: `gemm(&a, &b, &mut acc)` computes acc += a · b",
                    if n == 1 { "was" } else { "were" }
                ),
            );
            return Err(Reported);
        }
        let args: Vec<&SynExpr> = call.args.iter().collect();
        let a = self.gemm_operand(args[0], 'A');
        let b = self.gemm_operand(args[1], 'B');
        let c = self.gemm_accumulator(args[2]);
        let (Ok((a, trans_a)), Ok((b, trans_b)), Ok(c)) = (a, b, c) else {
            return Err(Reported);
        };
        let (ab, bb, cb) = (self.k.buffer(a).clone(), self.k.buffer(b).clone(), self.k.buffer(c).clone());
        // Element types: f16/bf16 operands of one type (checked per operand
        // in `gemm_operand`), an f32 accumulator (in `gemm_accumulator`).
        let is_half = |t: DType| matches!(t, DType::F16 | DType::BF16);
        if is_half(ab.dtype) && is_half(bb.dtype) && ab.dtype != bb.dtype {
            self.errors.spanned(
                args[1],
                format!(
                    "`gemm` operands must hold the same element type, but `{}` holds `{}` and `{}` holds `{}`; convert one with `copy` into a buffer of the other type",
                    ab.name, ab.dtype, bb.name, bb.dtype
                ),
            );
            failed = true;
        }
        let (sa, sb, sc) = (const_shape_of(&ab), const_shape_of(&bb), const_shape_of(&cb));
        if sa.len() == 2 && sb.len() == 2 && sc.len() == 2 {
            let (m_a, k_a) = if trans_a { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
            let (k_b, n_b) = if trans_b { (sb[1], sb[0]) } else { (sb[0], sb[1]) };
            if let Some(what) = tile_ir::verify::gemm_mismatch((m_a, k_a), (k_b, n_b), (sc[0], sc[1])) {
                let t = |x: bool| if x { ".t()" } else { "" };
                // The operand(s) whose other reading would make the shapes agree.
                let fits = |ta: bool, tb: bool| {
                    let (m, k) = if ta { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
                    let (k2, n) = if tb { (sb[1], sb[0]) } else { (sb[0], sb[1]) };
                    tile_ir::verify::gemm_mismatch((m, k), (k2, n), (sc[0], sc[1])).is_none()
                };
                let hint = [(trans_a, !trans_b), (!trans_a, trans_b), (!trans_a, !trans_b)]
                    .into_iter()
                    .find(|&(x, y)| fits(x, y))
                    .map_or_else(String::new, |(x, y)| {
                        format!("; `gemm(&{}{}, &{}{}, ..)` would fit", ab.name, t(x), bb.name, t(y))
                    });
                self.errors.spanned(
                    call,
                    format!(
                        "shape mismatch in `gemm`: `{}{}` {} is M×K = {m_a}×{k_a}, `{}{}` {} is K×N = {k_b}×{n_b}, and `{}` {} is M×N = {}×{}: {what}{hint}",
                        ab.name,
                        t(trans_a),
                        format_shape(&sa),
                        bb.name,
                        t(trans_b),
                        format_shape(&sb),
                        cb.name,
                        format_shape(&sc),
                        sc[0],
                        sc[1]
                    ),
                );
                failed = true;
            }
        }
        if failed {
            return Err(Reported);
        }
        let kind = StmtKind::Gemm {
            a,
            b,
            c,
            trans_a,
            trans_b,
            clear: clear.is_some(),
            policy: policy.map_or(WarpPolicy::Square, |(p, _)| p),
        };
        out.push(Stmt::spanned(kind, span));
        Ok(())
    }

    /// Operand `A` (a shared buffer or a fragment) or `B` (a shared buffer)
    /// of `gemm`: `&x` or `&x.t()`, a rank-2 f16/bf16 buffer. Returns the
    /// buffer and whether it is transposed.
    fn gemm_operand(&mut self, e: &SynExpr, which: char) -> Lowered<(BufferId, bool)> {
        let SynExpr::Reference(r) = e else {
            let fix = match (transposed(e), path_ident(e)) {
                (Some(t), _) => match path_ident(&t.receiver) {
                    Some(name) => format!("`&{name}.t()`"),
                    None => "`&buf.t()`".to_string(),
                },
                (None, Some(name)) => format!("`&{name}`"),
                (None, None) => "`&buf`".to_string(),
            };
            return Err(self.errors.spanned(e, format!("pass the operand of `gemm` by reference: {fix}")));
        };
        let (inner, trans) = match transposed(&r.expr) {
            Some(t) => {
                if !t.args.is_empty() {
                    return Err(self.errors.spanned(&t.args, "`.t()` takes no arguments"));
                }
                if transposed(&t.receiver).is_some() {
                    return Err(self.errors.spanned(t, "`.t()` twice is no transpose; remove both"));
                }
                (&*t.receiver, true)
            }
            None => (&*r.expr, false),
        };
        let Some(ident) = path_ident(inner) else {
            return Err(self.errors.spanned(
                e,
                format!(
                    "operand {which} of `gemm` is a buffer by name: `&{}` (or `&{}.t()` for a transposed one)",
                    if which == 'A' { "a" } else { "b" },
                    if which == 'A' { "a" } else { "b" }
                ),
            ));
        };
        let buf = match self.lookup(&ident.to_string()) {
            Some(Binding::Buffer(b)) => b,
            Some(Binding::Poisoned) => return Err(Reported),
            Some(Binding::Var { .. }) => {
                return Err(self.errors.at(ident.span(), format!("`{ident}` is a scalar; `gemm` multiplies buffers")))
            }
            None => return Err(self.unknown_name(ident)),
        };
        let b = self.k.buffer(buf).clone();
        let scope_ok = match which {
            'A' => matches!(b.scope, Scope::Shared | Scope::Fragment),
            _ => b.scope == Scope::Shared,
        };
        if !scope_ok {
            let expected = if which == 'A' { "a shared buffer or a fragment" } else { "a shared buffer" };
            let fix = if b.scope == Scope::Global {
                "; copy a tile of the tensor into a `shared::<..>()` buffer first"
            } else {
                ""
            };
            return Err(self.errors.at(
                ident.span(),
                format!("operand {which} of `gemm` is {expected}, but `{ident}` is a {}{fix}", scope_phrase(b.scope)),
            ));
        }
        let mut failed = false;
        if b.rank() != 2 {
            self.errors.at(
                ident.span(),
                format!(
                    "operand {which} of `gemm` is a matrix, but `{ident}` has rank {} ({})",
                    b.rank(),
                    format_shape(&const_shape_of(&b))
                ),
            );
            failed = true;
        }
        if !matches!(b.dtype, DType::F16 | DType::BF16) {
            self.errors.at(
                ident.span(),
                format!(
                    "`gemm` multiplies `f16` or `bf16` operands (on tensor cores), but `{ident}` holds `{}`",
                    b.dtype
                ),
            );
            failed = true;
        }
        if failed {
            return Err(Reported);
        }
        Ok((buf, trans))
    }

    /// The accumulator of `gemm`: `&mut acc`, a rank-2 f32 fragment.
    fn gemm_accumulator(&mut self, e: &SynExpr) -> Lowered<BufferId> {
        if let Some(t) = transposed(e) {
            return Err(self.errors.spanned(
                t,
                "the accumulator of `gemm` cannot be transposed; transpose an operand instead: (a · b)ᵀ = bᵀ · aᵀ",
            ));
        }
        let buf = self.buffer_arg(e, true, "gemm")?;
        let b = self.k.buffer(buf).clone();
        if b.scope != Scope::Fragment || b.dtype != DType::F32 || b.rank() != 2 {
            let what = if b.scope != Scope::Fragment {
                format!("a {}", scope_phrase(b.scope))
            } else if b.dtype != DType::F32 {
                format!("a fragment of `{}`", b.dtype)
            } else {
                format!("a fragment of rank {}", b.rank())
            };
            return Err(self.errors.spanned(
                e,
                format!(
                    "the accumulator of `gemm` is an `f32` fragment of shape [M, N] (`fragment::<f32, M, N>()`), but `{}` is {what}",
                    b.name
                ),
            ));
        }
        Ok(buf)
    }

    /// `use_swizzle(panel)`: threadblock rasterization, right after `grid(..)`.
    fn use_swizzle(&mut self, call: &syn::ExprCall, whole: &SynExpr) -> Lowered<()> {
        let name_span = call.func.span();
        if let Some(prev) = self.swizzle_at {
            let mut e = syn::Error::new(name_span, "`use_swizzle(..)` is called twice");
            e.combine(syn::Error::new(prev, "first called here"));
            return Err(self.errors.push(e));
        }
        if !self.right_after_grid {
            return Err(self.errors.spanned(
                whole,
                "`use_swizzle(..)` must be the statement right after `let (bx, by) = grid(..);`: it chooses the order in which the grid's blocks run",
            ));
        }
        self.swizzle_at = Some(name_span);
        if call.args.len() != 1 {
            return Err(self
                .errors
                .spanned(call, "`use_swizzle` takes 1 argument, the panel width in blocks: `use_swizzle(8)`"));
        }
        let panel = self.const_int(&call.args[0], "the panel width of `use_swizzle`")?;
        if !(1..=i32::MAX as i64).contains(&panel) {
            return Err(self.errors.spanned(
                &call.args[0],
                format!("the panel width of `use_swizzle` is {panel}; it must be at least 1"),
            ));
        }
        if self.grid_axes < 2 {
            return Err(self.errors.spanned(
                whole,
                "`use_swizzle` reorders the blocks of a 2-D grid, but `grid(..)` has one axis: declare `let (bx, by) = grid(x, y);`",
            ));
        }
        self.k.rasterize = Some(panel as u32);
        Ok(())
    }

    /// `annotate_layout(&buf, row_major() | padded(bytes) | swizzle(bits))`:
    /// the shared layout of `buf`, instead of the one the compiler picks.
    /// Allowed once per buffer, before any statement names the buffer.
    fn annotate_layout(&mut self, call: &syn::ExprCall) -> Lowered<()> {
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

    fn unknown_function(&mut self, ident: &Ident) -> Reported {
        let name = ident.to_string();
        let hint = did_you_mean(&name, FUNCTIONS.iter().copied());
        let list = if hint.is_empty() {
            "; a kernel can call `copy`, `fill`, `clear`, `reduce_max`, `reduce_sum`, `reduce_min`, `gemm`, `use_swizzle`, `atomic_add`, `barrier`, `exp2`, `exp`, `log2`, `log`, `abs`, `sqrt`, `rsqrt`, `max`, `min`, `fma` and `cdiv`"
        } else {
            ""
        };
        self.errors.at(ident.span(), format!("unknown function `{name}` in a tile kernel{hint}{list}"))
    }

    /// `&buf` / `&mut buf` naming a shared, fragment or local buffer.
    fn buffer_arg(&mut self, e: &SynExpr, write: bool, op: &str) -> Lowered<BufferId> {
        let usage = if write { "`&mut buf`" } else { "`&buf`" };
        let (inner, mutable) = match e {
            SynExpr::Reference(r) => (&*r.expr, r.mutability.is_some()),
            other => (other, false),
        };
        let Some(ident) = path_ident(inner) else {
            if let Some(t) = transposed(e) {
                return Err(self.transpose_misplaced(t));
            }
            return Err(self.errors.spanned(e, format!("expected a buffer, {usage}")));
        };
        let buf = match self.lookup(&ident.to_string()) {
            Some(Binding::Buffer(b)) => b,
            Some(Binding::Poisoned) => return Err(Reported),
            Some(Binding::Var { .. }) => {
                return Err(self.errors.at(ident.span(), format!("`{ident}` is a scalar; `{op}` works on buffers")))
            }
            None => return Err(self.unknown_name(ident)),
        };
        if !matches!(e, SynExpr::Reference(_)) {
            return Err(self.errors.spanned(
                e,
                format!(
                    "pass the buffer by reference: {}",
                    if write { format!("`&mut {ident}`") } else { format!("`&{ident}`") }
                ),
            ));
        }
        if write && !mutable {
            return Err(self.errors.spanned(e, format!("`{op}` writes this buffer: pass it as `&mut {ident}`")));
        }
        if self.k.buffer(buf).scope == Scope::Global {
            return Err(self.errors.at(
                ident.span(),
                format!("`{op}` works on shared, fragment and local buffers; `{ident}` is a tensor parameter: copy a tile of it into a buffer first"),
            ));
        }
        Ok(buf)
    }

    /// One side of `copy`: `&buf`, `&mut buf` or `tensor.tile([origin..])`.
    fn tile_ref(&mut self, e: &SynExpr, dst: bool) -> Lowered<Side> {
        let usage = if dst { "`&mut buf` or `tensor.tile([..])`" } else { "`&buf` or `tensor.tile([..])`" };
        match e {
            SynExpr::MethodCall(m) if m.method == "tile" => {
                let Some(ident) = path_ident(&m.receiver) else {
                    return Err(self
                        .errors
                        .spanned(&*m.receiver, "`.tile(..)` applies to a tensor parameter by name: `a.tile([r, c])`"));
                };
                let buf = match self.lookup(&ident.to_string()) {
                    Some(Binding::Buffer(b)) => b,
                    Some(Binding::Poisoned) => return Err(Reported),
                    Some(Binding::Var { .. }) => {
                        return Err(self.errors.at(ident.span(), format!("`{ident}` is a scalar, not a tensor")))
                    }
                    None => return Err(self.unknown_name(ident)),
                };
                let b = self.k.buffer(buf).clone();
                if b.scope != Scope::Global {
                    return Err(self.errors.spanned(
                        e,
                        format!("`.tile(..)` selects a window of a tensor parameter; `{ident}` is a {} buffer: pass it as `{}{ident}`", scope_name(b.scope), if dst { "&mut " } else { "&" }),
                    ));
                }
                if dst && !b.mutable {
                    return Err(self.read_only(ident));
                }
                if m.args.len() != 1 {
                    return Err(self.errors.spanned(m, "`.tile(..)` takes the window's origin: `t.tile([r, c])`"));
                }
                let coords: Vec<&SynExpr> = match &m.args[0] {
                    SynExpr::Array(a) => a.elems.iter().collect(),
                    SynExpr::Tuple(t) => t.elems.iter().collect(),
                    other => vec![other],
                };
                if coords.len() != b.rank() {
                    return Err(self.errors.spanned(
                        &m.args[0],
                        format!(
                            "`{ident}` has rank {}, so `.tile(..)` takes {} coordinate{}, but {} {} given",
                            b.rank(),
                            b.rank(),
                            if b.rank() == 1 { "" } else { "s" },
                            coords.len(),
                            if coords.len() == 1 { "was" } else { "were" }
                        ),
                    ));
                }
                let mut origin = Vec::new();
                let mut failed = false;
                for c in coords {
                    match self.index_value(c, "a tile origin") {
                        Ok(x) => origin.push(x),
                        Err(Reported) => failed = true,
                    }
                }
                if failed {
                    return Err(Reported);
                }
                Ok(Side { tile: TileRef { buf, origin }, name: ident.to_string() })
            }
            SynExpr::Reference(r) => {
                let Some(ident) = path_ident(&r.expr) else {
                    if let Some(t) = transposed(e) {
                        return Err(self.transpose_misplaced(t));
                    }
                    return Err(self.errors.spanned(e, format!("expected {usage}")));
                };
                let buf = match self.lookup(&ident.to_string()) {
                    Some(Binding::Buffer(b)) => b,
                    Some(Binding::Poisoned) => return Err(Reported),
                    Some(Binding::Var { .. }) => {
                        return Err(self
                            .errors
                            .at(ident.span(), format!("`{ident}` is a scalar; `copy` moves buffers and tensor tiles")))
                    }
                    None => return Err(self.unknown_name(ident)),
                };
                if dst && r.mutability.is_none() {
                    return Err(self
                        .errors
                        .spanned(e, format!("the destination of `copy` is written: pass it as `&mut {ident}`")));
                }
                let b = self.k.buffer(buf).clone();
                if dst && b.scope == Scope::Global && !b.mutable {
                    return Err(self.read_only(ident));
                }
                // A whole tensor: the window at the origin.
                let origin = if b.scope == Scope::Global { vec![Expr::i32(0); b.rank()] } else { Vec::new() };
                Ok(Side { tile: TileRef { buf, origin }, name: ident.to_string() })
            }
            other => {
                if let Some(ident) = path_ident(other) {
                    if matches!(self.lookup(&ident.to_string()), Some(Binding::Buffer(_))) {
                        let fix = if dst { format!("`&mut {ident}`") } else { format!("`&{ident}`") };
                        return Err(self.errors.spanned(other, format!("pass the buffer by reference: {fix}")));
                    }
                }
                if let Some(t) = transposed(other) {
                    return Err(self.transpose_misplaced(t));
                }
                Err(self.errors.spanned(other, format!("expected {usage}")))
            }
        }
    }

    fn check_copy(&mut self, src: &Side, dst: &Side, call: &syn::ExprCall) -> Lowered<()> {
        let (s, d) = (self.k.buffer(src.tile.buf).clone(), self.k.buffer(dst.tile.buf).clone());
        let describe = |b: &Buffer| -> String {
            let parts: Vec<String> = b
                .shape
                .iter()
                .map(|e| match e {
                    Extent::Const(c) => c.to_string(),
                    Extent::Dyn(v) => self.k.var(*v).name.clone(),
                })
                .collect();
            format!("[{}]", parts.join(", "))
        };
        match (s.scope == Scope::Global, d.scope == Scope::Global) {
            (true, true) => Err(self.errors.spanned(
                call,
                format!("`copy` between two tensor parameters (`{}` → `{}`) is not supported: stage the data through a `shared` or `fragment` buffer", src.name, dst.name),
            )),
            (false, false) => {
                if s.shape != d.shape {
                    return Err(self.errors.spanned(
                        call,
                        format!("shape mismatch in `copy`: the source `{}` is {} but the destination `{}` is {}", src.name, describe(&s), dst.name, describe(&d)),
                    ));
                }
                Ok(())
            }
            (global_src, _) => {
                let (tile, tensor) = if global_src { (&d, &s) } else { (&s, &d) };
                let (tile_name, tensor_name) = if global_src { (&dst.name, &src.name) } else { (&src.name, &dst.name) };
                if tile.rank() > tensor.rank() {
                    return Err(self.errors.spanned(
                        call,
                        format!(
                            "shape mismatch in `copy`: the buffer `{tile_name}` is {} (rank {}) but the tensor `{tensor_name}` is {} (rank {})",
                            describe(tile),
                            tile.rank(),
                            describe(tensor),
                            tensor.rank()
                        ),
                    ));
                }
                Ok(())
            }
        }
    }

    // ---------------------------------------------------------------- expressions

    fn expr(&mut self, e: &SynExpr) -> Lowered<Val> {
        match e {
            SynExpr::Lit(l) => self.lit(&l.lit),
            SynExpr::Path(p) => self.path(p),
            SynExpr::Paren(p) => self.expr(&p.expr),
            SynExpr::Group(g) => self.expr(&g.expr),
            SynExpr::Binary(b) => {
                let symbol = binop_symbol(&b.op);
                let Some(op) = plain_op(&b.op) else {
                    return Err(self.errors.spanned(e, format!("`{symbol}` is a statement and has no value")));
                };
                let l = self.expr(&b.left);
                let r = self.expr(&b.right);
                let (l, r) = (l?, r?);
                let logical = matches!(b.op, syn::BinOp::And(_) | syn::BinOp::Or(_));
                if logical {
                    for (side, v) in [(&*b.left, &l), (&*b.right, &r)] {
                        if !matches!(v, Val::Typed(_, DType::Bool)) {
                            return Err(self.errors.spanned(side, format!("`{symbol}` needs `bool` operands, found {}", v.describe())));
                        }
                    }
                }
                self.binary_op(op, &symbol, l, r, b)
            }
            SynExpr::Unary(u) => self.unary(u),
            SynExpr::Cast(c) => self.cast(c),
            SynExpr::Call(c) => self.call_expr(c),
            SynExpr::MethodCall(m) => self.method_expr(m),
            SynExpr::Index(ix) => {
                let (buf, index) = self.element(ix, false)?;
                Ok(Val::Typed(Expr::load(buf, index), self.k.buffer(buf).dtype))
            }
            SynExpr::If(i) => self.select(i),
            SynExpr::Reference(r) => Err(self.errors.spanned(
                e,
                format!("`&{}` is only used as an argument of a tile operation (`copy`, `fill`, `reduce_*`, ..)", if r.mutability.is_some() { "mut " } else { "" }),
            )),
            SynExpr::Tuple(_) | SynExpr::Array(_) => Err(self.errors.spanned(e, "tuples and arrays are not values in a tile kernel; they only appear as indices (`x[(i, j)]`) and tile origins")),
            SynExpr::Macro(m) => Err(self.errors.spanned(&m.mac, "macros are not supported inside a tile kernel")),
            SynExpr::Field(f) => Err(self.errors.spanned(f, "field access (`x.field`) is not supported in a tile kernel: its values are scalars, buffers and tensors")),
            SynExpr::Let(l) => Err(self.errors.spanned(l, "`let` patterns (`if let`, `while let`) are not supported in a tile kernel; a condition is a `bool` expression")),
            SynExpr::Block(_) => Err(self.errors.spanned(e, "a block is not a value in a tile kernel")),
            other => Err(self.errors.spanned(other, format!("this expression is not supported in a tile kernel; {STATEMENTS_HELP}"))),
        }
    }

    fn lit(&mut self, lit: &syn::Lit) -> Lowered<Val> {
        match lit {
            syn::Lit::Int(i) => {
                let v: i64 = match i.base10_parse() {
                    Ok(v) => v,
                    Err(e) => return Err(self.errors.push(e)),
                };
                match i.suffix() {
                    "" => Ok(Val::Int(v)),
                    s => match DType::from_name(s).filter(|d| DTYPES.contains(&d.name())) {
                        Some(d) => Ok(Val::Typed(self.literal(Val::Int(v), d, i)?, d)),
                        None => Err(self.errors.spanned(
                            i,
                            format!(
                                "unsupported literal suffix `{s}`; the kernel types are f16, bf16, f32, i32 and u32"
                            ),
                        )),
                    },
                }
            }
            syn::Lit::Float(f) => {
                let v: f64 = match f.base10_parse() {
                    Ok(v) => v,
                    Err(e) => return Err(self.errors.push(e)),
                };
                match f.suffix() {
                    "" => Ok(Val::Float(v)),
                    "f32" => Ok(Val::Typed(Expr::f32(v as f32), DType::F32)),
                    "f16" => Ok(Val::Typed(Expr::Const(Value::F16(half::f16::from_f64(v))), DType::F16)),
                    s => Err(self
                        .errors
                        .spanned(f, format!("unsupported literal suffix `{s}`; write `{v}` or `{v}f32`"))),
                }
            }
            syn::Lit::Bool(b) => Ok(Val::Typed(Expr::Const(Value::Bool(b.value)), DType::Bool)),
            other => Err(self.errors.spanned(other, "only numbers and `true`/`false` are literals in a tile kernel")),
        }
    }

    fn path(&mut self, p: &syn::ExprPath) -> Lowered<Val> {
        if p.qself.is_none() {
            if let Some(ident) = p.path.get_ident() {
                let name = ident.to_string();
                return match self.lookup(&name) {
                    Some(Binding::Var { id, .. }) => Ok(Val::Typed(Expr::var(id), self.k.var(id).dtype)),
                    Some(Binding::Buffer(b)) => {
                        let buffer = self.k.buffer(b);
                        let msg = if buffer.scope == Scope::Global {
                            format!("`{name}` is a tensor, not a value: read an element (`{name}[i]`) or copy a tile of it (`copy({name}.tile([..]), &mut buf)`)")
                        } else {
                            format!(
                                "`{name}` is a {} buffer, not a value: read an element (`{name}[i]`)",
                                scope_name(buffer.scope)
                            )
                        };
                        Err(self.errors.at(ident.span(), msg))
                    }
                    Some(Binding::Poisoned) => Err(Reported),
                    None => match self.consts.get(&name) {
                        Some(v) => Ok(Val::Int(*v)),
                        None => Err(self.unknown_name(ident)),
                    },
                };
            }
            let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
            if segs.len() == 2 && segs[0] == "f32" && p.path.segments.iter().all(|s| s.arguments.is_none()) {
                let v = match segs[1].as_str() {
                    "INFINITY" => Some(f32::INFINITY),
                    "NEG_INFINITY" => Some(f32::NEG_INFINITY),
                    "MAX" => Some(f32::MAX),
                    "MIN" => Some(f32::MIN),
                    _ => None,
                };
                if let Some(v) = v {
                    return Ok(Val::Typed(Expr::f32(v), DType::F32));
                }
            }
        }
        Err(self.errors.spanned(
            p,
            "unsupported path: a kernel names its own variables, parameters and `consts(..)`, and the constants `f32::INFINITY`, `f32::NEG_INFINITY`, `f32::MAX` and `f32::MIN`",
        ))
    }

    fn unary(&mut self, u: &syn::ExprUnary) -> Lowered<Val> {
        let v = self.expr(&u.expr)?;
        match &u.op {
            syn::UnOp::Neg(_) => match v {
                Val::Int(x) => Ok(Val::Int(-x)),
                Val::Float(x) => Ok(Val::Float(-x)),
                Val::Typed(e, t) if t.is_float() || t == DType::I32 || t == DType::I64 => {
                    Ok(Val::Typed(Expr::unary(UnOp::Neg, e), t))
                }
                Val::Typed(_, t) => Err(self.errors.spanned(u, format!("cannot negate a `{t}`"))),
            },
            syn::UnOp::Not(_) => match v {
                Val::Int(x) => Ok(Val::Int(!x)),
                Val::Typed(e, t) if t == DType::Bool || t.is_int() => Ok(Val::Typed(Expr::unary(UnOp::Not, e), t)),
                other => {
                    Err(self.errors.spanned(u, format!("`!` needs a `bool` or an integer, found {}", other.describe())))
                }
            },
            _ => Err(self.errors.spanned(u, "`*` (dereference) is not supported in a tile kernel")),
        }
    }

    fn cast(&mut self, c: &syn::ExprCast) -> Lowered<Val> {
        let v = self.expr(&c.expr)?;
        let to = match self.dtype_of_type(&c.ty)? {
            DType::Bool => {
                return Err(self.errors.spanned(&*c.ty, "cannot cast to `bool`; compare instead (`x != 0`)"))
            }
            d => d,
        };
        match v {
            Val::Int(x) => Ok(Val::Typed(self.literal(Val::Int(x), to, c)?, to)),
            Val::Float(x) if to.is_float() => Ok(Val::Typed(self.literal(Val::Float(x), to, c)?, to)),
            Val::Float(x) => Ok(Val::Typed(self.literal(Val::Int(x as i64), to, c)?, to)),
            Val::Typed(_, DType::Bool) => {
                Err(self.errors.spanned(c, "cannot cast a `bool`; use `if c { 1 } else { 0 }`"))
            }
            Val::Typed(e, t) if t == to => Ok(Val::Typed(e, t)),
            // `f32::NEG_INFINITY as f16`: fold the constant.
            Val::Typed(Expr::Const(v), _) => match cast_value(v, to) {
                Some(c) => Ok(Val::Typed(Expr::Const(c), to)),
                None => Ok(Val::Typed(Expr::cast(to, Expr::Const(v)), to)),
            },
            Val::Typed(e, _) => Ok(Val::Typed(Expr::cast(to, e), to)),
        }
    }

    /// `if c { a } else { b }` as a value.
    fn select(&mut self, i: &syn::ExprIf) -> Lowered<Val> {
        fn single(b: &syn::Block) -> Option<&SynExpr> {
            match b.stmts.as_slice() {
                [SynStmt::Expr(e, None)] => Some(e),
                _ => None,
            }
        }
        let Some(then) = single(&i.then_branch) else {
            return Err(self
                .errors
                .spanned(i, "an `if` used as a value has one expression per branch: `if c { a } else { b }`"));
        };
        let Some((_, else_expr)) = &i.else_branch else {
            return Err(self.errors.spanned(i, "an `if` used as a value needs an `else` branch"));
        };
        let cond = self.condition(&i.cond);
        let a = self.expr(then);
        let b = match &**else_expr {
            SynExpr::Block(b) => match single(&b.block) {
                Some(e) => self.expr(e),
                None => Err(self.errors.spanned(b, "an `if` used as a value has one expression per branch")),
            },
            SynExpr::If(nested) => self.select(nested),
            other => Err(self.errors.spanned(other, "expected a block after `else`")),
        };
        let (cond, a, b) = (cond?, a?, b?);
        let (a, b, t) = self.unify(a, b, i, "the two branches of this `if`")?;
        Ok(Val::Typed(Expr::Select { cond: Box::new(cond), then: Box::new(a), otherwise: Box::new(b) }, t))
    }

    fn call_expr(&mut self, c: &syn::ExprCall) -> Lowered<Val> {
        let Some(ident) = call_name(c) else {
            return Err(self
                .errors
                .spanned(&*c.func, "unsupported call: a kernel calls math functions by their plain name (`exp2(x)`)"));
        };
        let args: Vec<&SynExpr> = c.args.iter().collect();
        self.math(ident, &args, c)
    }

    /// `x.max(y)`, `x.exp2()`: the Rust method spelling of the math functions.
    fn method_expr(&mut self, m: &syn::ExprMethodCall) -> Lowered<Val> {
        let name = m.method.to_string();
        if MATH.contains(&name.as_str()) && name != "cdiv" {
            let mut args: Vec<&SynExpr> = vec![&m.receiver];
            args.extend(m.args.iter());
            return self.math(&m.method, &args, m);
        }
        if name == "tile" {
            return Err(self.errors.spanned(m, "`.tile(..)` is only valid as an argument of `copy`"));
        }
        if name == "t" {
            return Err(self.transpose_misplaced(m));
        }
        let hint = did_you_mean(&name, MATH.iter().copied());
        Err(self.errors.at(m.method.span(), format!("unknown method `.{name}()` in a tile kernel{hint}")))
    }

    fn math(&mut self, ident: &Ident, args: &[&SynExpr], whole: &dyn ToTokens) -> Lowered<Val> {
        let name = ident.to_string();
        let n = match name.as_str() {
            "exp2" | "exp" | "log2" | "log" | "abs" | "sqrt" | "rsqrt" => 1,
            "max" | "min" | "cdiv" => 2,
            "fma" => 3,
            "copy" | "fill" | "clear" | "reduce_max" | "reduce_sum" | "reduce_min" | "atomic_add" | "barrier"
            | "gemm" | "use_swizzle" | "annotate_layout" => {
                return Err(self.errors.at(ident.span(), format!("`{name}(..)` is a statement and has no value")))
            }
            "grid" => {
                return Err(self.errors.spanned(
                    whole,
                    "`grid(..)` must be the first statement of the kernel: `let (bx, by) = grid(..);`",
                ))
            }
            "shared" | "fragment" | "local" => {
                return Err(self.errors.spanned(
                    whole,
                    format!("a buffer is declared with a name: `let mut x = {name}::<T, D0, D1, ..>();`"),
                ))
            }
            "parallel" | "pipelined" => {
                return Err(self
                    .errors
                    .spanned(whole, format!("`{name}(..)` is only valid as the iterator of a `for` loop")))
            }
            _ => return Err(self.unknown_function(ident)),
        };
        if args.len() != n {
            return Err(self.errors.spanned(
                whole,
                format!(
                    "`{name}` takes {n} argument{}, but {} {} given",
                    if n == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "was" } else { "were" }
                ),
            ));
        }
        let mut vals = Vec::new();
        for a in args {
            vals.push(self.expr(a));
        }
        let vals: Vec<Val> = vals.into_iter().collect::<Result<_, _>>()?;
        match name.as_str() {
            "max" | "min" => {
                let op = if name == "max" { BinOp::Max } else { BinOp::Min };
                if let (Val::Int(a), Val::Int(b)) = (&vals[0], &vals[1]) {
                    return Ok(Val::Int(if name == "max" { *a.max(b) } else { *a.min(b) }));
                }
                let (a, b, t) =
                    self.unify(vals[0].clone(), vals[1].clone(), whole, &format!("the arguments of `{name}`"))?;
                if t == DType::Bool {
                    return Err(self.errors.spanned(whole, format!("`{name}` needs numbers, found `bool`")));
                }
                Ok(Val::Typed(Expr::binary(op, a, b), t))
            }
            "cdiv" => {
                if let (Val::Int(a), Val::Int(b)) = (&vals[0], &vals[1]) {
                    if *b <= 0 {
                        return Err(self.errors.spanned(args[1], "`cdiv` divides by a positive number"));
                    }
                    return Ok(Val::Int((a + b - 1).div_euclid(*b)));
                }
                let (a, b, t) = self.unify(vals[0].clone(), vals[1].clone(), whole, "the arguments of `cdiv`")?;
                if !t.is_int() {
                    return Err(self.errors.spanned(whole, format!("`cdiv` needs integers, found `{t}`")));
                }
                // With a constant divisor, fold `b - 1`.
                let e = match &b {
                    Expr::Const(Value::I32(d)) if *d > 0 => {
                        Expr::binary(BinOp::Div, Expr::binary(BinOp::Add, a, Expr::i32(d - 1)), b)
                    }
                    Expr::Const(Value::U32(d)) if *d > 0 => {
                        Expr::binary(BinOp::Div, Expr::binary(BinOp::Add, a, Expr::Const(Value::U32(d - 1))), b)
                    }
                    _ => Expr::cdiv(a, b),
                };
                Ok(Val::Typed(e, t))
            }
            "fma" => {
                let (a, b, t) = self.unify(vals[0].clone(), vals[1].clone(), whole, "the arguments of `fma`")?;
                let c = self.coerce(
                    vals[2].clone(),
                    t,
                    args[2],
                    &format!("the first arguments of `fma` are `{t}` and the third"),
                )?;
                if t == DType::Bool {
                    return Err(self.errors.spanned(whole, "`fma` needs numbers, found `bool`"));
                }
                Ok(Val::Typed(Expr::Fma { a: Box::new(a), b: Box::new(b), c: Box::new(c) }, t))
            }
            _ => {
                let op = match name.as_str() {
                    "exp2" => UnOp::Exp2,
                    "exp" => UnOp::Exp,
                    "log2" => UnOp::Log2,
                    "log" => UnOp::Log,
                    "abs" => UnOp::Abs,
                    "sqrt" => UnOp::Sqrt,
                    _ => UnOp::Rsqrt,
                };
                let (e, t) = match vals[0].clone() {
                    // An untyped literal argument is an `f32`.
                    Val::Int(x) if name != "abs" => (self.literal(Val::Int(x), DType::F32, args[0])?, DType::F32),
                    v => self.materialize(v, args[0])?,
                };
                let ok = t.is_float() || (name == "abs" && (t == DType::I32 || t == DType::I64));
                if !ok {
                    return Err(self.errors.spanned(
                        args[0],
                        format!("`{name}` needs a float argument (`f16`, `bf16` or `f32`), found `{t}`; convert it with `as f32`"),
                    ));
                }
                Ok(Val::Typed(Expr::unary(op, e), t))
            }
        }
    }

    /// A binary operator on two values of one type (untyped constants adopt
    /// the other side's type; two constants fold).
    fn binary_op(&mut self, op: BinOp, symbol: &str, l: Val, r: Val, whole: &dyn ToTokens) -> Lowered<Val> {
        if let Some(v) = self.fold(op, symbol, &l, &r, whole)? {
            return Ok(v);
        }
        let (a, b, t) = match (&l, &r) {
            (Val::Typed(_, x), Val::Typed(_, y)) if x != y => {
                return Err(self.errors.spanned(
                    whole,
                    format!("mismatched types in `{symbol}`: the left side is `{x}` and the right side is `{y}`; convert one side with `as {x}` or `as {y}`"),
                ))
            }
            _ => self.unify(l, r, whole, &format!("the operands of `{symbol}`"))?,
        };
        let allowed = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem | BinOp::Min | BinOp::Max => {
                t != DType::Bool
            }
            BinOp::And | BinOp::Or | BinOp::Xor => t == DType::Bool || t.is_int(),
            BinOp::Shl | BinOp::Shr => t.is_int(),
            BinOp::Eq | BinOp::Ne => true,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => t != DType::Bool,
        };
        if !allowed {
            return Err(self.errors.spanned(whole, format!("`{symbol}` is not defined on `{t}`")));
        }
        let result = if op.is_comparison() { DType::Bool } else { t };
        Ok(Val::Typed(Expr::binary(op, a, b), result))
    }

    /// Folds an operator on two untyped constants; `None` if either is typed.
    fn fold(&mut self, op: BinOp, symbol: &str, l: &Val, r: &Val, whole: &dyn ToTokens) -> Lowered<Option<Val>> {
        let cmp = |o: std::cmp::Ordering| -> bool {
            use std::cmp::Ordering::*;
            match op {
                BinOp::Lt => o == Less,
                BinOp::Le => o != Greater,
                BinOp::Gt => o == Greater,
                BinOp::Ge => o != Less,
                BinOp::Eq => o == Equal,
                _ => o != Equal,
            }
        };
        let boolean = |b: bool| Val::Typed(Expr::Const(Value::Bool(b)), DType::Bool);
        match (l, r) {
            (Val::Int(a), Val::Int(b)) => {
                let (a, b) = (*a, *b);
                if op.is_comparison() {
                    return Ok(Some(boolean(cmp(a.cmp(&b)))));
                }
                let v = match op {
                    BinOp::Add => a.checked_add(b),
                    BinOp::Sub => a.checked_sub(b),
                    BinOp::Mul => a.checked_mul(b),
                    BinOp::Div => a.checked_div(b),
                    BinOp::Rem => a.checked_rem(b),
                    BinOp::Min => Some(a.min(b)),
                    BinOp::Max => Some(a.max(b)),
                    BinOp::And => Some(a & b),
                    BinOp::Or => Some(a | b),
                    BinOp::Xor => Some(a ^ b),
                    BinOp::Shl => u32::try_from(b).ok().and_then(|s| a.checked_shl(s)),
                    BinOp::Shr => u32::try_from(b).ok().and_then(|s| a.checked_shr(s)),
                    _ => None,
                };
                match v {
                    Some(v) => Ok(Some(Val::Int(v))),
                    None if b == 0 && matches!(op, BinOp::Div | BinOp::Rem) => {
                        Err(self.errors.spanned(whole, format!("`{a} {symbol} {b}` divides by zero")))
                    }
                    None => Err(self.errors.spanned(whole, format!("`{a} {symbol} {b}` overflows"))),
                }
            }
            (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
                let f = |v: &Val| match v {
                    Val::Int(i) => *i as f64,
                    Val::Float(x) => *x,
                    Val::Typed(..) => 0.0,
                };
                let (a, b) = (f(l), f(r));
                if op.is_comparison() {
                    return Ok(Some(boolean(a.partial_cmp(&b).is_some_and(cmp))));
                }
                let v = match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Rem => a % b,
                    BinOp::Min => a.min(b),
                    BinOp::Max => a.max(b),
                    _ => return Err(self.errors.spanned(whole, format!("`{symbol}` is not defined on floats"))),
                };
                Ok(Some(Val::Float(v)))
            }
            _ => Ok(None),
        }
    }

    /// Two values of one type: typed ones must agree; an untyped one takes
    /// the other's type; two untyped ones default (`i32`, or `f32` if either
    /// is a float).
    fn unify(&mut self, a: Val, b: Val, whole: &dyn ToTokens, what: &str) -> Lowered<(Expr, Expr, DType)> {
        match (a, b) {
            (Val::Typed(x, s), Val::Typed(y, t)) => {
                if s != t {
                    return Err(self.errors.spanned(
                        whole,
                        format!("mismatched types: {what} are `{s}` and `{t}`; convert one with `as {s}` or `as {t}`"),
                    ));
                }
                Ok((x, y, s))
            }
            (Val::Typed(x, s), other) => {
                let y = self.literal(other, s, whole)?;
                Ok((x, y, s))
            }
            (other, Val::Typed(y, t)) => {
                let x = self.literal(other, t, whole)?;
                Ok((x, y, t))
            }
            (a, b) => {
                let t = if matches!(a, Val::Float(_)) || matches!(b, Val::Float(_)) { DType::F32 } else { DType::I32 };
                let x = self.literal(a, t, whole)?;
                let y = self.literal(b, t, whole)?;
                Ok((x, y, t))
            }
        }
    }

    /// `v` as a value of type `to` (untyped constants convert; typed values
    /// must already have that type).
    fn coerce(&mut self, v: Val, to: DType, tokens: &dyn ToTokens, what: &str) -> Lowered<Expr> {
        match v {
            Val::Typed(e, t) if t == to => Ok(e),
            Val::Typed(_, t) => Err(self
                .errors
                .spanned(tokens, format!("mismatched types: {what} is `{t}`; convert it with `as {to}`"))),
            other => self.literal(other, to, tokens),
        }
    }

    /// A typed value, giving untyped constants their default type.
    fn materialize(&mut self, v: Val, tokens: &dyn ToTokens) -> Lowered<(Expr, DType)> {
        match v {
            Val::Typed(e, t) => Ok((e, t)),
            Val::Int(x) => Ok((self.literal(Val::Int(x), DType::I32, tokens)?, DType::I32)),
            Val::Float(x) => Ok((self.literal(Val::Float(x), DType::F32, tokens)?, DType::F32)),
        }
    }

    /// An untyped constant as a constant of type `to`.
    fn literal(&mut self, v: Val, to: DType, tokens: &dyn ToTokens) -> Lowered<Expr> {
        let value = match (v, to) {
            (Val::Typed(e, t), _) if t == to => return Ok(e),
            (Val::Typed(_, t), _) => {
                return Err(self.errors.spanned(tokens, format!("mismatched types: expected `{to}`, found `{t}`")))
            }
            (Val::Int(x), DType::I32) => match i32::try_from(x) {
                Ok(x) => Value::I32(x),
                Err(_) => return Err(self.errors.spanned(tokens, format!("{x} does not fit in an `i32`"))),
            },
            (Val::Int(x), DType::U32) => match u32::try_from(x) {
                Ok(x) => Value::U32(x),
                Err(_) => return Err(self.errors.spanned(tokens, format!("{x} does not fit in a `u32`"))),
            },
            (Val::Int(x), DType::I64) => Value::I64(x),
            (Val::Int(x), DType::F32) => Value::F32(x as f32),
            (Val::Int(x), DType::F16) => Value::F16(half::f16::from_f64(x as f64)),
            (Val::Int(x), DType::BF16) => Value::BF16(half::bf16::from_f64(x as f64)),
            (Val::Float(x), DType::F32) => Value::F32(x as f32),
            (Val::Float(x), DType::F16) => Value::F16(half::f16::from_f64(x)),
            (Val::Float(x), DType::BF16) => Value::BF16(half::bf16::from_f64(x)),
            (Val::Float(_), t) => {
                return Err(self
                    .errors
                    .spanned(tokens, format!("mismatched types: expected `{t}`, found a float literal")))
            }
            (Val::Int(_), DType::Bool) => {
                return Err(self.errors.spanned(tokens, "mismatched types: expected `bool`, found an integer"))
            }
        };
        Ok(Expr::Const(value))
    }
}

/// A constant converted as Rust's `as` does (float → int truncates and
/// saturates, NaN → 0). `None` for conversions the frontend leaves to `Cast`.
fn cast_value(v: Value, to: DType) -> Option<Value> {
    let as_f64 = match v {
        Value::F16(x) => x.to_f64(),
        Value::BF16(x) => x.to_f64(),
        Value::F32(x) => x as f64,
        Value::I32(x) => x as f64,
        Value::U32(x) => x as f64,
        Value::I64(_) | Value::Bool(_) => return None,
    };
    Some(match to {
        DType::F32 => Value::F32(as_f64 as f32),
        DType::F16 => Value::F16(half::f16::from_f64(as_f64)),
        DType::BF16 => Value::BF16(half::bf16::from_f64(as_f64)),
        DType::I32 => match v {
            Value::U32(x) => Value::I32(x as i32),
            _ => Value::I32(as_f64 as i32),
        },
        DType::U32 => match v {
            Value::I32(x) => Value::U32(x as u32),
            _ => Value::U32(as_f64 as u32),
        },
        DType::I64 | DType::Bool => return None,
    })
}

/// `FullRow`, `FullCol`, `Square`, or the same as `WarpPolicy::FullRow`.
fn warp_policy(e: &SynExpr) -> Option<WarpPolicy> {
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
fn scope_phrase(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "tensor parameter",
        Scope::Shared => "shared buffer",
        Scope::Fragment => "fragment",
        Scope::Local => "local buffer",
    }
}

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "global",
        Scope::Shared => "shared",
        Scope::Fragment => "fragment",
        Scope::Local => "local",
    }
}

fn plain_op(op: &syn::BinOp) -> Option<BinOp> {
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

fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
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

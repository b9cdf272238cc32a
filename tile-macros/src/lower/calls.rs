//! Tile-operation statements: `copy(src, dst)` (with `.fill(v)`),
//! `fill`, `clear`, `reduce_max`/`reduce_sum`/`reduce_min` (with `.keep()`),
//! `atomic_add`, `barrier`, `print` (with `.block(..)`); the dispatch of the other statement calls
//! (`grid`, `use_swizzle`, `annotate_layout`, `gemm`) to their files.
//!
//! Recognizes the arguments (`&buf`, `&mut buf`, `t.tile([..])`), checks
//! arity, names, placement (not inside `parallel`) and writability at the
//! argument at fault. Leaves to the verifier the shape and scope agreement
//! of the two sides of a `copy`.

use super::syntax::{call_name, format_shape, path_ident, scope_name, transposed};
use super::{Binding, Lowerer, Side, Val, FUNCTIONS, MATH};
use crate::diag::{did_you_mean, Lowered, Reported};
use quote::ToTokens;
use syn::{Expr as SynExpr, Ident};
use tile_ir::verify::rules;
use tile_ir::{BufferId, CacheHint, Expr, ReduceOp, Scope, Stmt, StmtKind, TileRef};

impl Lowerer<'_> {
    pub(super) fn call_stmt(
        &mut self,
        call: &syn::ExprCall,
        modifiers: &[&syn::ExprMethodCall],
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
        if let Some(Binding::Helper(h)) = self.lookup_quiet(&name) {
            return self.helper_call(h, call, modifiers, out);
        }
        let span = self.span_id(whole);
        let collective =
            matches!(name.as_str(), "copy" | "fill" | "clear" | "reduce_max" | "reduce_sum" | "reduce_min" | "barrier");
        if collective && self.parallel_depth > 0 {
            return Err(self.errors.at(
                name_ident.span(),
                format!("`{name}` is a block-wide operation and cannot be used inside a `parallel` loop, whose iterations run on different threads"),
            ));
        }
        for (n, m) in modifiers.iter().enumerate() {
            let method = m.method.to_string();
            let (expected, usage): (&[&str], &str) = match name.as_str() {
                "copy" => (&["fill", "evict_first"], ".fill(value)` and `.evict_first()"),
                "print" => (&["block"], ".block((x, y))"),
                _ => (&["keep"], ".keep()"),
            };
            if !expected.contains(&method.as_str()) {
                return Err(self.errors.at(
                    m.method.span(),
                    format!("unknown method `.{method}()` on `{name}(..)`; it supports `{usage}`"),
                ));
            }
            if modifiers[..n].iter().any(|x| x.method == m.method) {
                return Err(self.errors.at(m.method.span(), format!("`.{method}()` is given twice")));
            }
            if (method == "keep" || method == "evict_first") && !m.args.is_empty() {
                return Err(self.errors.spanned(&m.args, format!("`.{method}()` takes no arguments")));
            }
        }
        let modifier = modifiers.iter().copied().find(|m| m.method != "evict_first");
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
                self.tile_ranks(&src, &dst)?;
                // Which sides may meet (at most one tensor, equal buffer
                // shapes, a buffer's rank at most the tensor's) is the
                // verifier's rule, reported at this statement.
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
                let evict_first = modifiers.iter().any(|m| m.method == "evict_first");
                let cache = if evict_first { CacheHint::EvictFirst } else { CacheHint::Normal };
                StmtKind::Copy { src: src.tile, dst: dst.tile, fill, cache }
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
                if dim < 0 || rules::reduce_result_shape(&s_shape, dim as usize).is_none() {
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
                if !rules::reduce_shape_ok(&s_shape, dim as usize, &d_shape) {
                    let mut expected = rules::reduce_result_shape(&s_shape, dim as usize).unwrap_or_default();
                    if expected.is_empty() {
                        expected.push(1);
                    }
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
            "print" => return self.print_stmt(call, modifier, span, out),
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

    /// `print("m = {} at {}", m[i], i)`, optionally `.block((x, y))`: the
    /// format is a string literal whose placeholders the verifier counts; a
    /// block filter becomes an `if` on the grid's block indices.
    fn print_stmt(
        &mut self,
        call: &syn::ExprCall,
        modifier: Option<&syn::ExprMethodCall>,
        span: tile_ir::SpanId,
        out: &mut Vec<Stmt>,
    ) -> Lowered<()> {
        let mut it = call.args.iter();
        let format = match it.next() {
            Some(SynExpr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. })) => s,
            Some(other) => {
                return Err(self.errors.spanned(
                    other,
                    "the first argument of `print` is its format, a string literal: `print(\"m = {}\", m[i])`",
                ))
            }
            None => {
                return Err(self
                    .errors
                    .spanned(call, "`print` takes a format string and one value per `{}`: `print(\"m = {}\", m[i])`"))
            }
        };
        let value = format.value();
        let pieces = match tile_ir::print_format::parse(&value) {
            Ok(p) => p,
            Err(e) => return Err(self.errors.spanned(format, e)),
        };
        let n = tile_ir::print_format::arg_count(&pieces);
        let rest: Vec<&SynExpr> = it.collect();
        if n != rest.len() {
            return Err(self.errors.spanned(
                call,
                format!(
                    "the format has {n} placeholder{} but {} value{} given",
                    if n == 1 { "" } else { "s" },
                    rest.len(),
                    if rest.len() == 1 { " is" } else { "s are" }
                ),
            ));
        }
        let mut args = Vec::with_capacity(rest.len());
        let mut failed = false;
        for a in rest {
            let v = match self.expr(a) {
                Ok(v) => v,
                Err(Reported) => {
                    failed = true;
                    continue;
                }
            };
            let e = match v {
                Val::Typed(e, _) => Ok(e),
                Val::Int(_) => self.literal(v, tile_ir::DType::I32, a),
                Val::Float(_) => self.literal(v, tile_ir::DType::F32, a),
            };
            match e {
                Ok(e) => args.push(e),
                Err(Reported) => failed = true,
            }
        }
        let filter = modifier.map(|m| self.block_filter(m));
        if failed {
            return Err(Reported);
        }
        let print = Stmt::spanned(StmtKind::Print { format: value, args }, span);
        match filter {
            None => out.push(print),
            Some(Err(r)) => return Err(r),
            Some(Ok(cond)) => {
                out.push(Stmt::spanned(StmtKind::If { cond, then: vec![print], otherwise: Vec::new() }, span))
            }
        }
        Ok(())
    }

    /// The condition of `.block((x, y))`: every block index equal to its
    /// entry (one per grid axis, each named in `let (bx, by) = grid(..)`).
    fn block_filter(&mut self, m: &syn::ExprMethodCall) -> Lowered<Expr> {
        if m.args.len() != 1 {
            return Err(self.errors.spanned(
                m,
                "`.block(..)` takes the block's index: `.block(x)` for a 1-D grid, `.block((x, y))` for a 2-D grid",
            ));
        }
        let arg = &m.args[0];
        let entries: Vec<&SynExpr> = match arg {
            SynExpr::Tuple(t) => t.elems.iter().collect(),
            SynExpr::Paren(p) => vec![&*p.expr],
            e => vec![e],
        };
        if self.grid_axes == 0 {
            return Err(self
                .errors
                .spanned(m, "`.block(..)` filters by block index, but the kernel declares no `grid(..)`"));
        }
        if entries.len() != self.grid_axes {
            return Err(self.errors.spanned(
                arg,
                format!(
                    "`.block(..)` gives {} ind{} but the grid has {} ax{}",
                    entries.len(),
                    if entries.len() == 1 { "ex" } else { "ices" },
                    self.grid_axes,
                    if self.grid_axes == 1 { "is" } else { "es" }
                ),
            ));
        }
        let mut cond: Option<Expr> = None;
        for (axis, e) in entries.into_iter().enumerate() {
            let Some(var) = self.grid_vars[axis] else {
                return Err(self.errors.spanned(
                    e,
                    format!("`.block(..)` compares block index {axis}, which `grid(..)` does not name (`_`): give it a name in `let (bx, by) = grid(..)`"),
                ));
            };
            let v = self.expr(e)?;
            let want = self.coerce(v, tile_ir::DType::I32, e, "a block index")?;
            let eq = Expr::Binary { op: tile_ir::BinOp::Eq, lhs: Box::new(Expr::Var(var)), rhs: Box::new(want) };
            cond = Some(match cond {
                None => eq,
                Some(c) => Expr::Binary { op: tile_ir::BinOp::And, lhs: Box::new(c), rhs: Box::new(eq) },
            });
        }
        cond.ok_or_else(|| self.errors.spanned(m, "`.block(..)` needs an index"))
    }

    /// `.t()` used anywhere but on an operand of `gemm`.
    pub(super) fn transpose_misplaced(&mut self, m: &syn::ExprMethodCall) -> Reported {
        self.errors.spanned(
            m,
            "`.t()` (transpose) is only valid on an operand of `gemm`: `gemm(&a, &b.t(), &mut acc)` reads `b` as transposed; elsewhere, transpose with a `parallel` loop (`t[(j, i)] = x[(i, j)]`)",
        )
    }

    pub(super) fn unknown_function(&mut self, ident: &Ident) -> Reported {
        let name = ident.to_string();
        let hint = did_you_mean(&name, FUNCTIONS.iter().copied());
        let list = if hint.is_empty() {
            "; a kernel can call `copy`, `fill`, `clear`, `reduce_max`, `reduce_sum`, `reduce_min`, `gemm`, `use_swizzle`, `atomic_add`, `barrier`, `print`, `exp2`, `exp`, `log2`, `log`, `abs`, `sqrt`, `rsqrt`, `max`, `min`, `fma` and `cdiv`"
        } else {
            ""
        };
        self.errors.at(ident.span(), format!("unknown function `{name}` in a tile kernel{hint}{list}"))
    }

    /// `&buf` / `&mut buf` naming a shared, fragment or local buffer.
    pub(super) fn buffer_arg(&mut self, e: &SynExpr, write: bool, op: &str) -> Lowered<BufferId> {
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
            Some(Binding::Helper(_)) => return Err(self.helper_misused(ident)),
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
        if write {
            self.write_through(ident)?;
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
    pub(super) fn tile_ref(&mut self, e: &SynExpr, dst: bool) -> Lowered<Side> {
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
                    Some(Binding::Helper(_)) => return Err(self.helper_misused(ident)),
                    None => return Err(self.unknown_name(ident)),
                };
                if dst {
                    self.write_through(ident)?;
                }
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
                // Each entry: `e..` (spans the dim from `e`), `..` (from 0)
                // or a plain index; with any range, plain entries are squeezed.
                let entries: Vec<String> = coords.iter().map(|c| c.to_token_stream().to_string()).collect();
                let mut origin = Vec::new();
                let mut ranged = Vec::new();
                let mut failed = false;
                for c in coords {
                    let (start, is_range) = match c {
                        SynExpr::Range(r) => {
                            if r.end.is_some() {
                                failed = true;
                                self.errors.spanned(
                                    c,
                                    "a tile entry is `e..` (the dim from `e`), `..` (from 0) or a plain index: the extent comes from the other side of the copy, so a range has no end",
                                );
                                continue;
                            }
                            (r.start.as_deref(), true)
                        }
                        other => (Some(other), false),
                    };
                    ranged.push(is_range);
                    match start {
                        None => origin.push(Expr::i32(0)),
                        Some(x) => match self.index_value(x, "a tile origin") {
                            Ok(x) => origin.push(x),
                            Err(Reported) => failed = true,
                        },
                    }
                }
                if failed {
                    return Err(Reported);
                }
                let squeezed = if ranged.iter().any(|&r| r) {
                    (0..ranged.len()).filter(|&d| !ranged[d]).collect()
                } else {
                    Vec::new()
                };
                Ok(Side {
                    tile: TileRef { buf, origin, squeezed },
                    name: ident.to_string(),
                    at: Some((m.args[0].to_token_stream(), entries)),
                })
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
                    Some(Binding::Helper(_)) => return Err(self.helper_misused(ident)),
                    None => return Err(self.unknown_name(ident)),
                };
                if dst {
                    self.write_through(ident)?;
                }
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
                Ok(Side { tile: TileRef::new(buf, origin), name: ident.to_string(), at: None })
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
}

impl Lowerer<'_> {
    /// A `.tile(..)` facing a buffer spans as many tensor dims as the
    /// buffer has: without ranges every dim (equal ranks), with ranges one
    /// per range. Reported at the tile's coordinates with the fix.
    fn tile_ranks(&mut self, src: &Side, dst: &Side) -> Lowered<()> {
        let (g, l) = match (self.k.buffer(src.tile.buf).scope, self.k.buffer(dst.tile.buf).scope) {
            (Scope::Global, Scope::Global) => return Ok(()),
            (Scope::Global, _) => (src, dst),
            (_, Scope::Global) => (dst, src),
            _ => return Ok(()),
        };
        let Some((tokens, entries)) = &g.at else { return Ok(()) };
        let rank = self.k.buffer(l.tile.buf).rank();
        let spanned = g.tile.origin.len() - g.tile.squeezed.len();
        if spanned == rank {
            return Ok(());
        }
        if rank > g.tile.origin.len() {
            // The verifier's message, at the statement.
            return Ok(());
        }
        let msg = if g.tile.squeezed.is_empty() {
            let n = entries.len();
            let example: Vec<String> = entries
                .iter()
                .enumerate()
                .map(|(i, e)| match (i + rank >= n, e.as_str()) {
                    (true, "0") => "..".to_string(),
                    (true, _) => format!("{e}.."),
                    (false, _) => e.clone(),
                })
                .collect();
            format!(
                "the tile of `{}` has {n} coordinates and `{}` has rank {rank}: say which dims the tile spans (`e..` spans a dim from `e`, `..` from 0, a plain index is squeezed), e.g. `{}.tile([{}])` spans the last {rank}",
                g.name,
                l.name,
                g.name,
                example.join(", ")
            )
        } else {
            format!(
                "the tile of `{}` spans {spanned} dim{} (its `e..` and `..` entries) and `{}` has rank {rank}: give one range entry per dim of `{}`",
                g.name,
                if spanned == 1 { "" } else { "s" },
                l.name,
                l.name
            )
        };
        Err(self.errors.spanned(tokens, msg))
    }
}

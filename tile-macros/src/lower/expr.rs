//! Expressions: literals, names, operators, casts, `if` as a value, math
//! functions (`exp2(x)` and `x.exp2()`), and the calls that have no value.
//!
//! Produces a [`Val`]: a typed `tile_ir::Expr`, or an untyped constant that
//! `typing.rs` gives its type from the context. Names resolve through the
//! scopes (with "did you mean"), `consts(..)` names become constants, and
//! `f32::INFINITY` and friends are folded here. Which operand types a unary
//! operator or math function takes is the IR's rule
//! (`tile_ir::verify::rules::unop_defined`), asked here to point at the
//! argument; the language adds that casts from and to `bool` are written
//! otherwise (`if c { 1 } else { 0 }`, `x != 0`).

use super::syntax::{binop_symbol, call_name, plain_op, scope_name};
use super::typing::cast_value;
use super::{Binding, Lowerer, Val, DTYPES, MATH, STATEMENTS_HELP};
use crate::diag::{did_you_mean, Lowered, Reported};
use quote::ToTokens;
use syn::{Expr as SynExpr, Ident, Stmt as SynStmt};
use tile_ir::verify::rules;
use tile_ir::{BinOp, DType, Expr, Scope, UnOp, Value};

impl Lowerer<'_> {
    pub(super) fn expr(&mut self, e: &SynExpr) -> Lowered<Val> {
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

    pub(super) fn lit(&mut self, lit: &syn::Lit) -> Lowered<Val> {
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

    pub(super) fn path(&mut self, p: &syn::ExprPath) -> Lowered<Val> {
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
                    Some(Binding::Helper(_)) => Err(self.helper_misused(ident)),
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

    pub(super) fn unary(&mut self, u: &syn::ExprUnary) -> Lowered<Val> {
        let v = self.expr(&u.expr)?;
        match &u.op {
            syn::UnOp::Neg(_) => match v {
                Val::Int(x) => Ok(Val::Int(-x)),
                Val::Float(x) => Ok(Val::Float(-x)),
                Val::Typed(e, t) if rules::unop_defined(UnOp::Neg, t) => Ok(Val::Typed(Expr::unary(UnOp::Neg, e), t)),
                Val::Typed(_, t) => Err(self.errors.spanned(u, format!("cannot negate a `{t}`"))),
            },
            syn::UnOp::Not(_) => match v {
                Val::Int(x) => Ok(Val::Int(!x)),
                Val::Typed(Expr::Const(Value::Bool(x)), t) => Ok(Val::Typed(Expr::Const(Value::Bool(!x)), t)),
                Val::Typed(e, t) if rules::unop_defined(UnOp::Not, t) => Ok(Val::Typed(Expr::unary(UnOp::Not, e), t)),
                other => {
                    Err(self.errors.spanned(u, format!("`!` needs a `bool` or an integer, found {}", other.describe())))
                }
            },
            _ => Err(self.errors.spanned(u, "`*` (dereference) is not supported in a tile kernel")),
        }
    }

    pub(super) fn cast(&mut self, c: &syn::ExprCast) -> Lowered<Val> {
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
    pub(super) fn select(&mut self, i: &syn::ExprIf) -> Lowered<Val> {
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

    pub(super) fn call_expr(&mut self, c: &syn::ExprCall) -> Lowered<Val> {
        let Some(ident) = call_name(c) else {
            return Err(self
                .errors
                .spanned(&*c.func, "unsupported call: a kernel calls math functions by their plain name (`exp2(x)`)"));
        };
        if let Some(Binding::Helper(_)) = self.lookup_quiet(&ident.to_string()) {
            return Err(self.helper_misused(ident));
        }
        let args: Vec<&SynExpr> = c.args.iter().collect();
        self.math(ident, &args, c)
    }

    /// `x.max(y)`, `x.exp2()`: the Rust method spelling of the math functions.
    pub(super) fn method_expr(&mut self, m: &syn::ExprMethodCall) -> Lowered<Val> {
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

    pub(super) fn math(&mut self, ident: &Ident, args: &[&SynExpr], whole: &dyn ToTokens) -> Lowered<Val> {
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
                if !rules::unop_defined(op, t) {
                    return Err(self.errors.spanned(
                        args[0],
                        format!("`{name}` needs a float argument (`f16`, `bf16` or `f32`), found `{t}`; convert it with `as f32`"),
                    ));
                }
                Ok(Val::Typed(Expr::unary(op, e), t))
            }
        }
    }
}

//! Statements: recognizes each kind of statement and hands it to the file
//! that lowers it; `let` bindings of values; `if`/`else`; and the Rust
//! syntax a kernel cannot have (`while`, `match`, `return`, items, macros),
//! each rejected with a message naming what to write instead. The rules of
//! each statement are in the file that lowers it (or the verifier's).

use super::syntax::{call_name, compound_op, copy_chain, gemm_chain};
use super::{Binding, Lowerer, Val, STATEMENTS_HELP};
use crate::diag::{Lowered, Reported};
use syn::{Expr as SynExpr, Pat, Stmt as SynStmt};
use tile_ir::{DType, Expr, Stmt, StmtKind, Value, VarKind};

impl Lowerer<'_> {
    pub(super) fn block(&mut self, stmts: &[SynStmt]) -> Vec<Stmt> {
        self.scopes.push(Vec::new());
        let mut out = Vec::new();
        for s in stmts {
            // A failed statement has been reported; go on with the next one.
            let _ = self.stmt(s, &mut out);
        }
        self.scopes.pop();
        out
    }

    pub(super) fn stmt(&mut self, s: &SynStmt, out: &mut Vec<Stmt>) -> Lowered<()> {
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

    pub(super) fn let_stmt(&mut self, local: &syn::Local, out: &mut Vec<Stmt>) -> Lowered<()> {
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
        if let SynExpr::Closure(c) = value {
            return self.helper_decl(local, c);
        }
        if let SynExpr::MethodCall(m) = value {
            if m.method == "view" {
                return self.view_decl(local, m);
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

    pub(super) fn bind_pattern_poisoned(&mut self, pat: &Pat) {
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

    pub(super) fn expr_stmt(&mut self, e: &SynExpr, has_semi: bool, out: &mut Vec<Stmt>) -> Lowered<()> {
        if let Some((call, modifiers)) = gemm_chain(e) {
            return self.gemm_stmt(call, &modifiers, out);
        }
        if let Some((call, modifiers)) = copy_chain(e) {
            return self.call_stmt(call, &modifiers, e, out);
        }
        match e {
            SynExpr::ForLoop(f) => self.for_loop(f, out),
            SynExpr::If(i) => {
                let s = self.if_stmt(i)?;
                splice_constant_if(s, out);
                Ok(())
            }
            SynExpr::Block(b) if b.label.is_none() => {
                let body = self.block(&b.block.stmts);
                out.extend(body);
                Ok(())
            }
            SynExpr::Assign(a) => self.assign(a, out),
            SynExpr::Binary(b) if compound_op(&b.op).is_some() => self.compound_assign(b, out),
            SynExpr::Call(c) => self.call_stmt(c, &[], e, out),
            SynExpr::MethodCall(m) => match &*m.receiver {
                SynExpr::Call(c)
                    if call_name(c).is_some_and(|n| {
                        n == "print"
                            || n.to_string().starts_with("reduce_")
                            || matches!(self.lookup_quiet(&n.to_string()), Some(Binding::Helper(_)))
                    }) =>
                {
                    self.call_stmt(c, &[m], e, out)
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

    pub(super) fn if_stmt(&mut self, i: &syn::ExprIf) -> Lowered<Stmt> {
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

    pub(super) fn condition(&mut self, cond: &SynExpr) -> Lowered<Expr> {
        match self.expr(cond)? {
            Val::Typed(e, DType::Bool) => Ok(e),
            other => Err(self
                .errors
                .spanned(cond, format!("an `if` condition must be a `bool`, found {}", other.describe()))),
        }
    }
}

/// An `if` whose condition folded to a constant (`if D > 128 { .. }` on a
/// const parameter: one instance's choice) is resolved here: only the
/// branch taken reaches the IR, as plain statements of the enclosing
/// block, so the schedules see the code of that instance alone (both
/// branches were lowered and checked).
fn splice_constant_if(s: Stmt, out: &mut Vec<Stmt>) {
    match s.kind {
        StmtKind::If { cond: Expr::Const(Value::Bool(taken)), then, otherwise } => {
            for x in if taken { then } else { otherwise } {
                splice_constant_if(x, out);
            }
        }
        kind => out.push(Stmt { kind, ..s }),
    }
}

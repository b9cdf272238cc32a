//! `for` loops: serial (`a..b`, `a..=b`), `parallel(..)` (up to 3-D, a
//! tuple pattern becoming a nest of parallel loops) and `pipelined(n,
//! stages)`.
//!
//! Recognizes the iterator and the pattern, checks that parallel extents
//! and stage counts are constants in range (at the argument), binds the
//! loop variables in the body's scope, and tracks the parallel depth for
//! the placement rules. Leaves loop-variable and bound types to the
//! verifier (they are `i32` by construction).

use super::syntax::call_name;
use super::{Binding, Lowerer};
use crate::diag::{did_you_mean, Lowered, Reported};
use syn::{Expr as SynExpr, Ident, Pat};
use tile_ir::{BinOp, DType, Expr, LoopKind, Stmt, StmtKind, VarId, VarKind};

impl Lowerer<'_> {
    pub(super) fn for_loop(&mut self, f: &syn::ExprForLoop, out: &mut Vec<Stmt>) -> Lowered<()> {
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

    pub(super) fn loop_var<'p>(&mut self, pat: &'p Pat) -> Lowered<Option<&'p Ident>> {
        match pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.mutability.is_none() && p.subpat.is_none() => Ok(Some(&p.ident)),
            Pat::Wild(_) => Ok(None),
            other => Err(self.errors.spanned(other, "expected a loop variable name (loop variables cannot be `mut`)")),
        }
    }

    /// Declares the loop variables, lowers the body in a new scope.
    pub(super) fn loop_body(
        &mut self,
        body: &syn::Block,
        idents: &[Option<&Ident>],
        parallel: bool,
    ) -> (Vec<VarId>, Vec<Stmt>) {
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
}

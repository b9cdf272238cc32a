//! `grid(..)` and `use_swizzle(..)`: the kernel's launch grid, its block
//! indices, and threadblock rasterization.
//!
//! Recognizes and places them (`grid` first, once; `use_swizzle` right
//! after a 2-D/3-D grid, once) and checks, with the span of the extent at
//! fault, that extents use only tensor dimensions and constants (the host
//! computes the grid before launch). Leaves to the verifier the cluster's
//! agreement with the grid and the invariants of `Kernel::grid`.

use super::{Binding, Lowerer};
use crate::diag::{Lowered, Reported};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Expr as SynExpr, Ident, Pat};
use tile_ir::{DType, Expr, VarKind};

impl Lowerer<'_> {
    /// `let (bx, by) = grid(x, y);` or `grid(x);`.
    pub(super) fn grid(&mut self, pat: Option<&Pat>, call: &syn::ExprCall, stmt: &dyn ToTokens) -> Lowered<()> {
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
                self.grid_vars[axis] = Some(v);
                self.bind(ident, Binding::Var { id: v, parallel: false, depth: 0 });
            }
        }
        if failed {
            Err(Reported)
        } else {
            Ok(())
        }
    }

    pub(super) fn grid_extent(&mut self, arg: &SynExpr) -> Lowered<Expr> {
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

    pub(super) fn visit_grid_expr(&self, e: &Expr, bad: &mut Option<String>) {
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

    /// `use_swizzle(panel)`: threadblock rasterization, right after `grid(..)`.
    pub(super) fn use_swizzle(&mut self, call: &syn::ExprCall, whole: &SynExpr) -> Lowered<()> {
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
}

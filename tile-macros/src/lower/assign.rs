//! Writes: `x = ..`, `x += ..` (and the other compound operators) on
//! variables and elements, and element access `x[i]`, `x[(i, j)]`,
//! `x[[i, j]]` for reads too.
//!
//! Checks what needs the source: the name, whether it may be assigned
//! (`let` vs `let mut`, loop variables, parameters, constants), writes to a
//! read-only tensor or, inside a parallel loop, to a variable or local
//! buffer declared outside it, the number of indices, and the fragment
//! access rules (inside `parallel`, indexed by its variables), each at the
//! tokens at fault. Value types follow `typing.rs`.

use super::syntax::{binop_symbol, compound_op, index_list, path_ident, transposed};
use super::{Binding, Lowerer, Target, Val};
use crate::diag::{Lowered, Reported};
use syn::{Expr as SynExpr, Ident};
use tile_ir::{BufferId, Expr, Scope, Stmt, StmtKind, VarId, VarKind};

impl Lowerer<'_> {
    pub(super) fn assign(&mut self, a: &syn::ExprAssign, out: &mut Vec<Stmt>) -> Lowered<()> {
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

    pub(super) fn compound_assign(&mut self, b: &syn::ExprBinary, out: &mut Vec<Stmt>) -> Lowered<()> {
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
    pub(super) fn assignable_var(&mut self, left: &SynExpr) -> Lowered<VarId> {
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
            Some(Binding::Helper(_)) => Err(self.helper_misused(ident)),
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
    pub(super) fn element(&mut self, ix: &syn::ExprIndex, write: bool) -> Lowered<(BufferId, Vec<Expr>)> {
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
            Some(Binding::Helper(_)) => return Err(self.helper_misused(ident)),
            None => return Err(self.unknown_name(ident)),
        };
        if write {
            self.write_through(ident)?;
        }
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

    pub(super) fn read_only(&mut self, ident: &Ident) -> Reported {
        self.errors.at(
            ident.span(),
            format!("cannot write to `{ident}`: it is a read-only parameter (`&Tensor`); declare it as `&mut Tensor<..>` to write to it"),
        )
    }
}

//! Variables: what `let` and assignment may bind or write, and lexical
//! scoping.
//!
//! Checks: `Let` binds `Let`/`Mut` vars (each once), with a value of the
//! variable's type; `Assign` targets a visible `Mut` var, with a value of its
//! type, and not one bound outside the enclosing parallel loop (its
//! iterations would race on the GPU); every variable is bound once and before
//! use (a `Let` is visible to the rest of its block, a loop variable inside
//! its body; dims, params and block indices everywhere).

use super::Verifier;
use crate::ir::{Expr, VarId, VarKind};

impl Verifier<'_> {
    pub(super) fn bind(&mut self, v: VarId) {
        let i = v.0 as usize;
        // Dims, params and block indices stay visible everywhere (binding one
        // is reported by the caller; do not cascade into "unbound" errors).
        if i >= self.visible.len()
            || matches!(self.kernel.vars[i].kind, VarKind::Dim | VarKind::Param | VarKind::BlockIdx(_))
        {
            return;
        }
        if self.bound[i] {
            let l = self.vl(v);
            self.err(format!("variable {l} ({v}) is bound twice; every let and loop binds a fresh variable"));
        }
        self.bound[i] = true;
        self.visible[i] = true;
        self.bind_depth[i] = self.parallel_vars.len();
        self.scope_stack.push(v);
    }

    pub(super) fn in_parallel(&self) -> bool {
        !self.parallel_vars.is_empty()
    }

    pub(super) fn check_let(&mut self, var: &VarId, value: &Expr) {
        let t = self.expr(value);
        match self.var(*var) {
            None => self.err(format!("let binds {var}, which does not exist")),
            Some(v) => {
                if !matches!(v.kind, VarKind::Let | VarKind::Mut) {
                    self.err(format!(
                        "let binds `{}`, a {:?} variable; let binds only Let or Mut variables",
                        v.name, v.kind
                    ));
                }
                if let Some(t) = t {
                    if t != v.dtype {
                        self.err(format!("let `{}`: the value has type {t}, the variable {}", v.name, v.dtype));
                    }
                }
            }
        }
        // Bound after its value: `let x = x + 1` refers to an outer x.
        self.bind(*var);
    }

    pub(super) fn check_assign(&mut self, var: &VarId, value: &Expr) {
        let t = self.expr(value);
        match self.var(*var) {
            None => self.err(format!("assignment to {var}, which does not exist")),
            Some(v) => {
                if v.kind != VarKind::Mut {
                    self.err(format!("cannot assign to `{}`: it is not a `let mut` variable", v.name));
                } else if !self.visible[var.0 as usize] {
                    self.err(format!("assignment to `{}` before its `let mut` (or outside its scope)", v.name));
                } else if self.bind_depth[var.0 as usize] < self.parallel_vars.len() {
                    self.err(format!(
                        "assignment to `{}` inside a parallel loop, but it is declared outside it: the loop's iterations would race; \
                         use a fragment and a reduction instead",
                        v.name
                    ));
                }
                if let Some(t) = t {
                    if t != v.dtype {
                        self.err(format!(
                            "assignment to `{}`: the value has type {t}, the variable {}",
                            v.name, v.dtype
                        ));
                    }
                }
            }
        }
    }
}

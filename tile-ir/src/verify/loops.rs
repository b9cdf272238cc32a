//! Control flow: `for` loops and `if`.
//!
//! Checks: loop variables are `Loop` vars of `I32`, loop bounds `I32`;
//! parallel loops have constant bounds; pipelined loops have at least one
//! stage and are not inside a parallel loop; `if` conditions are `Bool`.
//! Scopes: the loop variable is visible in the body only.

use super::Verifier;
use crate::ir::{DType, Expr, LoopKind, Stmt, Value, VarId, VarKind};

impl Verifier<'_> {
    pub(super) fn check_for(&mut self, var: &VarId, start: &Expr, end: &Expr, kind: &LoopKind, body: &[Stmt]) {
        let ts = self.expr(start);
        let te = self.expr(end);
        let name = self.vl(*var);
        for (what, t) in [("start", ts), ("end", te)] {
            if let Some(t) = t {
                if t != DType::I32 {
                    self.err(format!("loop {name}: the {what} bound has type {t}, expected i32"));
                }
            }
        }
        match self.var(*var) {
            None => self.err(format!("loop variable {var} does not exist")),
            Some(v) => {
                if v.kind != VarKind::Loop {
                    self.err(format!("loop variable `{}` must be of kind Loop, not {:?}", v.name, v.kind));
                }
                if v.dtype != DType::I32 {
                    self.err(format!("loop variable `{}` has type {}, expected i32", v.name, v.dtype));
                }
            }
        }
        if let LoopKind::Pipelined { stages } = kind {
            if *stages == 0 {
                self.err(format!("pipelined loop {name} has 0 stages, expected at least 1"));
            }
            if self.in_parallel() {
                self.err(format!("pipelined loop {name} inside a parallel loop"));
            }
        }
        let parallel = *kind == LoopKind::Parallel;
        if parallel {
            for (what, e) in [("start", start), ("end", end)] {
                if !matches!(e, Expr::Const(Value::I32(_))) {
                    self.err(format!("parallel loop {name}: the {what} bound must be an i32 constant"));
                }
            }
        }
        let mark = self.scope_stack.len();
        self.bind(*var);
        if parallel {
            self.parallel_vars.push(*var);
        }
        self.check_block(body);
        if parallel {
            self.parallel_vars.pop();
        }
        // unbind the loop variable
        while self.scope_stack.len() > mark {
            let v = self.scope_stack.pop().expect("length checked");
            self.visible[v.0 as usize] = false;
        }
    }

    pub(super) fn check_if(&mut self, cond: &Expr, then: &[Stmt], otherwise: &[Stmt]) {
        let span = self.span;
        if let Some(t) = self.expr(cond) {
            if t != DType::Bool {
                self.err(format!("if condition has type {t}, expected bool"));
            }
        }
        self.check_block(then);
        self.span = span;
        self.check_block(otherwise);
    }
}

//! Software-pipelining analysis of `pipelined(n, stages)` loops.
//!
//! Expects a verified kernel. Decides, for every `for k in pipelined(n, s)`
//! loop with `s ≥ 2` (outside parallel nests), which of the copies at the top
//! level of its body are *pipelined*: global → shared copies whose source
//! tile depends on `k` and can be evaluated for a later iteration. The
//! lowering ([`super::lower`]) then gives each such destination `s` stage
//! buffers (iteration `i` uses stage `i % s`), issues the copies of
//! iterations `0..s-1` in a prologue and those of iteration `i + s - 1` at the
//! top of iteration `i`, each iteration's copies in one cp.async group.
//!
//! Guarantees that moving a pipelined copy `s - 1` iterations earlier does
//! not change what the kernel computes. A copy is pipelined only when:
//! - its source is a global tensor, its destination a shared buffer, and the
//!   source origin mentions the loop variable;
//! - the source origin reads no memory (no `Load`) and uses no variable that
//!   the body binds or assigns (so it can be evaluated for iteration
//!   `k + s - 1` at iteration `k`);
//! - the destination is not a view, and it (or a view of it) is touched by
//!   no statement outside the loop's body and, inside it, by no earlier
//!   statement and by no other write (so the buffer
//!   only ever holds the current iteration's tile, and the body only reads it
//!   after the copy);
//! - the loop variable is bound by this loop only.
//!
//! Other copies stay where they are and are lowered as usual (a cp.async
//! group waited for at once, or plain loads and stores).

use crate::ir::{BufferId, Expr, Kernel, LoopKind, Scope, Stmt, StmtKind, VarId};
use std::collections::{HashMap, HashSet};

/// The pipelining decisions for one kernel.
#[derive(Clone, Debug, Default)]
pub struct PipelinePlan {
    /// Pipelined loops, by loop variable.
    pub loops: HashMap<VarId, PipelinedLoop>,
    /// Shared buffers that get stage copies, with their number of stages.
    pub stages: HashMap<BufferId, u32>,
}

/// One software-pipelined loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelinedLoop {
    pub stages: u32,
    /// Indices (into the loop body) of the pipelined copies, in body order.
    pub copies: Vec<usize>,
}

impl PipelinePlan {
    /// Stage copies of a shared buffer (1 when it is not multi-buffered).
    pub fn stages_of(&self, buf: BufferId) -> u32 {
        self.stages.get(&buf).copied().unwrap_or(1)
    }
}

/// Analyses every pipelined loop of `kernel`.
pub fn plan(kernel: &Kernel) -> PipelinePlan {
    let mut loop_var_uses: HashMap<VarId, u32> = HashMap::new();
    count_loop_vars(&kernel.body, &mut loop_var_uses);
    let mut plan = PipelinePlan::default();
    let mut loops = Vec::new();
    collect_pipelined(&kernel.body, false, &mut loops);
    for lp in loops {
        let StmtKind::For { var, body, kind: LoopKind::Pipelined { stages }, .. } = &lp.kind else { continue };
        if *stages < 2 || loop_var_uses.get(var).copied().unwrap_or(0) != 1 {
            continue;
        }
        // Buffers touched anywhere but inside this loop.
        let mut outside = HashSet::new();
        uses_except(&kernel.body, lp, &mut outside);
        let mut bound = HashSet::new();
        bound_vars(body, &mut bound);
        let mut copies = Vec::new();
        let mut dsts = HashSet::new();
        for (i, s) in body.iter().enumerate() {
            let StmtKind::Copy { src, dst, .. } = &s.kind else { continue };
            let (sb, db) = (kernel.buffer(src.buf), kernel.buffer(dst.buf));
            // A copy into a view is not pipelined (its stages would be the
            // parent's, shared with the other views); one into a buffer with
            // views is, its views then read the stage.
            let outside_mem = outside.iter().any(|b| kernel.same_memory(*b, dst.buf));
            if sb.scope != Scope::Global || db.scope != Scope::Shared || db.view.is_some() || outside_mem {
                continue;
            }
            let mut vars = HashSet::new();
            let mut loads = false;
            for e in &src.origin {
                expr_vars(e, &mut vars, &mut loads);
            }
            if loads || !vars.contains(var) || vars.iter().any(|v| bound.contains(v)) {
                continue;
            }
            let earlier = body[..i].iter().any(|x| {
                let (r, w) = touches_memory(kernel, x, dst.buf);
                r || w
            });
            let later_write = body[i + 1..].iter().any(|x| touches_memory(kernel, x, dst.buf).1);
            if earlier || later_write || !dsts.insert(dst.buf) {
                continue;
            }
            copies.push(i);
        }
        if copies.is_empty() {
            continue;
        }
        for &i in &copies {
            if let StmtKind::Copy { dst, .. } = &body[i].kind {
                plan.stages.insert(dst.buf, *stages);
            }
        }
        plan.loops.insert(*var, PipelinedLoop { stages: *stages, copies });
    }
    plan
}

fn count_loop_vars(body: &[Stmt], out: &mut HashMap<VarId, u32>) {
    for s in body {
        match &s.kind {
            StmtKind::For { var, body, .. } => {
                *out.entry(*var).or_default() += 1;
                count_loop_vars(body, out);
            }
            StmtKind::If { then, otherwise, .. } => {
                count_loop_vars(then, out);
                count_loop_vars(otherwise, out);
            }
            _ => {}
        }
    }
}

/// Pipelined loops that are not inside a parallel loop.
fn collect_pipelined<'k>(body: &'k [Stmt], in_parallel: bool, out: &mut Vec<&'k Stmt>) {
    for s in body {
        match &s.kind {
            StmtKind::For { kind, body: inner, .. } => {
                if matches!(kind, LoopKind::Pipelined { .. }) && !in_parallel {
                    out.push(s);
                }
                collect_pipelined(inner, in_parallel || *kind == LoopKind::Parallel, out);
            }
            StmtKind::If { then, otherwise, .. } => {
                collect_pipelined(then, in_parallel, out);
                collect_pipelined(otherwise, in_parallel, out);
            }
            _ => {}
        }
    }
}

/// Variables the statements bind or assign (including loop variables).
fn bound_vars(body: &[Stmt], out: &mut HashSet<VarId>) {
    for s in body {
        match &s.kind {
            StmtKind::Let { var, .. } | StmtKind::Assign { var, .. } => {
                out.insert(*var);
            }
            StmtKind::For { var, body, .. } => {
                out.insert(*var);
                bound_vars(body, out);
            }
            StmtKind::If { then, otherwise, .. } => {
                bound_vars(then, out);
                bound_vars(otherwise, out);
            }
            _ => {}
        }
    }
}

pub(crate) fn expr_vars(e: &Expr, vars: &mut HashSet<VarId>, loads: &mut bool) {
    match e {
        Expr::Const(_) => {}
        Expr::Var(v) => {
            vars.insert(*v);
        }
        Expr::Load { index, .. } => {
            *loads = true;
            for x in index {
                expr_vars(x, vars, loads);
            }
        }
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => expr_vars(arg, vars, loads),
        Expr::Binary { lhs, rhs, .. } => {
            expr_vars(lhs, vars, loads);
            expr_vars(rhs, vars, loads);
        }
        Expr::Fma { a, b, c } => {
            for x in [a, b, c] {
                expr_vars(x, vars, loads);
            }
        }
        Expr::Select { cond, then, otherwise } => {
            for x in [cond, then, otherwise] {
                expr_vars(x, vars, loads);
            }
        }
    }
}

fn expr_reads(e: &Expr, buf: BufferId) -> bool {
    match e {
        Expr::Const(_) | Expr::Var(_) => false,
        Expr::Load { buf: b, index } => *b == buf || index.iter().any(|x| expr_reads(x, buf)),
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => expr_reads(arg, buf),
        Expr::Binary { lhs, rhs, .. } => expr_reads(lhs, buf) || expr_reads(rhs, buf),
        Expr::Fma { a, b, c } => [a, b, c].iter().any(|x| expr_reads(x, buf)),
        Expr::Select { cond, then, otherwise } => [cond, then, otherwise].iter().any(|x| expr_reads(x, buf)),
    }
}

/// Whether a statement (recursively) reads / writes the memory of `buf`:
/// [`touches`] of `buf`'s parent or any view of it ([`crate::ir::View`]).
pub(crate) fn touches_memory(k: &Kernel, s: &Stmt, buf: BufferId) -> (bool, bool) {
    let (root, _) = k.view_root(buf);
    let mut rw = touches(s, root);
    for v in k.views_of(root) {
        let (r, w) = touches(s, v);
        rw = (rw.0 || r, rw.1 || w);
    }
    rw
}

/// Whether a statement (recursively) reads / writes `buf`.
pub(crate) fn touches(s: &Stmt, buf: BufferId) -> (bool, bool) {
    let mut r = false;
    let mut w = false;
    let any = |es: &[Expr]| es.iter().any(|e| expr_reads(e, buf));
    match &s.kind {
        StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => r |= expr_reads(value, buf),
        StmtKind::Store { buf: b, index, value } | StmtKind::AtomicAdd { buf: b, index, value } => {
            r |= any(index) || expr_reads(value, buf);
            w |= *b == buf;
        }
        StmtKind::For { start, end, body, .. } => {
            r |= expr_reads(start, buf) || expr_reads(end, buf);
            for x in body {
                let (a, b) = touches(x, buf);
                r |= a;
                w |= b;
            }
        }
        StmtKind::If { cond, then, otherwise } => {
            r |= expr_reads(cond, buf);
            for x in then.iter().chain(otherwise) {
                let (a, b) = touches(x, buf);
                r |= a;
                w |= b;
            }
        }
        StmtKind::Copy { src, dst, fill } => {
            r |= src.buf == buf
                || any(&src.origin)
                || any(&dst.origin)
                || fill.as_ref().is_some_and(|f| expr_reads(f, buf));
            w |= dst.buf == buf;
        }
        StmtKind::Fill { buf: b, value } => {
            r |= expr_reads(value, buf);
            w |= *b == buf;
        }
        StmtKind::Reduce { src, dst, keep, .. } => {
            r |= *src == buf || (*keep && *dst == buf);
            w |= *dst == buf;
        }
        StmtKind::Gemm { a, b, c, clear, .. } => {
            r |= *a == buf || *b == buf || (!*clear && *c == buf);
            w |= *c == buf;
        }
        StmtKind::Barrier => {}
        StmtKind::Print { args, .. } => r |= args.iter().any(|a| expr_reads(a, buf)),
    }
    (r, w)
}

/// Every buffer touched by `body` outside the statement `skip`.
fn uses_except(body: &[Stmt], skip: &Stmt, out: &mut HashSet<BufferId>) {
    for s in body {
        if std::ptr::eq(s, skip) {
            continue;
        }
        match &s.kind {
            StmtKind::For { body, start, end, .. } => {
                mark_expr(start, out);
                mark_expr(end, out);
                uses_except(body, skip, out);
            }
            StmtKind::If { cond, then, otherwise } => {
                mark_expr(cond, out);
                uses_except(then, skip, out);
                uses_except(otherwise, skip, out);
            }
            StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => mark_expr(value, out),
            StmtKind::Store { buf, index, value } | StmtKind::AtomicAdd { buf, index, value } => {
                out.insert(*buf);
                index.iter().for_each(|e| mark_expr(e, out));
                mark_expr(value, out);
            }
            StmtKind::Copy { src, dst, fill } => {
                out.insert(src.buf);
                out.insert(dst.buf);
                src.origin.iter().chain(&dst.origin).for_each(|e| mark_expr(e, out));
                if let Some(f) = fill {
                    mark_expr(f, out);
                }
            }
            StmtKind::Fill { buf, value } => {
                out.insert(*buf);
                mark_expr(value, out);
            }
            StmtKind::Reduce { src, dst, .. } => {
                out.insert(*src);
                out.insert(*dst);
            }
            StmtKind::Gemm { a, b, c, .. } => {
                out.extend([*a, *b, *c]);
            }
            StmtKind::Barrier => {}
            StmtKind::Print { args, .. } => args.iter().for_each(|e| mark_expr(e, out)),
        }
    }
}

fn mark_expr(e: &Expr, out: &mut HashSet<BufferId>) {
    match e {
        Expr::Const(_) | Expr::Var(_) => {}
        Expr::Load { buf, index } => {
            out.insert(*buf);
            index.iter().for_each(|x| mark_expr(x, out));
        }
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => mark_expr(arg, out),
        Expr::Binary { lhs, rhs, .. } => {
            mark_expr(lhs, out);
            mark_expr(rhs, out);
        }
        Expr::Fma { a, b, c } => [a, b, c].iter().for_each(|x| mark_expr(x, out)),
        Expr::Select { cond, then, otherwise } => [cond, then, otherwise].iter().for_each(|x| mark_expr(x, out)),
    }
}

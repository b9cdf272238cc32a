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
//! - the source origin uses no variable that the body binds or assigns, other
//!   than `let`s at the top level of the body before the copy that are never
//!   reassigned and whose values obey the same rule (they are inlined: the
//!   copy's source for the prefetch is [`PipelinePlan::read_origins`]), and
//!   every load it makes (directly or through those `let`s: a page index
//!   `block_table[(b, k)]`) is of a global tensor the kernel never writes
//!   (so it can be evaluated for iteration `k + s - 1` at iteration `k`,
//!   and the prefetch reads what the serial loop would; the lowering reads
//!   only for iterations below the loop's end, as the serial loop does);
//! - the destination is not a view, and it (or a view of it) is touched by
//!   no statement outside the loop's body and, inside it, by no earlier
//!   statement and by no other write (so the buffer
//!   only ever holds the current iteration's tile, and the body only reads it
//!   after the copy);
//! - the loop variable is bound by this loop only.
//!
//! [`plan_with`]`(kernel, true)` (the warp-specialized loop's analysis) also
//! takes a copy that later statements of the body write into (MLA's zeroed V
//! rows past the sequence), when the copy writes the whole destination
//! (origin 0): in the serial loop such a write is dead at the next
//! iteration's copy, so it may as well go to this iteration's stage, provided
//! the stage is refilled only after the body's last access of it, write or
//! read (the warp-specialized loop releases a stage after the last statement
//! that touches it, and fences the generic-proxy writes from the refill's
//! TMA: [`PipelinePlan::rewritten`]). The cp.async and TMA-copy pipelines,
//! which refill a stage at the top of the next iteration, refuse it (a
//! sentence in [`PipelinePlan::refusals`]).
//!
//! Other copies stay where they are and are lowered as usual (a cp.async
//! group waited for at once, or plain loads and stores).

use crate::ir::{BufferId, Expr, Kernel, LoopKind, Scope, Stmt, StmtKind, TileRef, VarId};
use std::collections::{HashMap, HashSet};

/// The pipelining decisions for one kernel.
#[derive(Clone, Debug, Default)]
pub struct PipelinePlan {
    /// Pipelined loops, by loop variable.
    pub loops: HashMap<VarId, PipelinedLoop>,
    /// Shared buffers that get stage copies, with their number of stages.
    pub stages: HashMap<BufferId, u32>,
    /// The sources of the pipelined copies (by destination buffer) whose
    /// origin reads memory or uses the body's `let`s: the origin with those
    /// `let`s inlined, which the prefetch evaluates for its iteration. Such
    /// a copy's origin is not strength-reduced.
    pub read_origins: HashMap<BufferId, TileRef>,
    /// Why copies of pipelined loops that depend on the loop variable were
    /// not pipelined, one sentence each (for `TILE_DUMP`'s decisions).
    pub refusals: Vec<String>,
    /// Every pipelined copy in one wait batch ([`Self::wait_batches`]):
    /// `CompileOptions::per_copy_waits` off.
    pub one_wait_batch: bool,
    /// The pipelined copies' destinations that later statements of the
    /// loop body write into ([`plan_with`] with `rewrites`; empty otherwise).
    pub rewritten: HashSet<BufferId>,
}

/// One software-pipelined loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelinedLoop {
    /// The loop's `stages` (buffers per pipelined copy).
    pub stages: u32,
    /// Indices (into the loop body) of the pipelined copies, in body order.
    pub copies: Vec<usize>,
}

impl PipelinePlan {
    /// Stage copies of a shared buffer (1 when it is not multi-buffered).
    pub fn stages_of(&self, buf: BufferId) -> u32 {
        self.stages.get(&buf).copied().unwrap_or(1)
    }

    /// The source a prefetch of the pipelined copy `src → dst` evaluates:
    /// its origin with the body's `let`s inlined ([`Self::read_origins`]),
    /// else `src` itself.
    pub fn source<'a>(&'a self, src: &'a TileRef, dst: &TileRef) -> &'a TileRef {
        self.read_origins.get(&dst.buf).unwrap_or(src)
    }
}

/// The wait batches of a pipelined loop's copies (one entry per copy of
/// `pl.copies`, in order): copy `j` is waited for (and refilled) before the
/// first statement of `body` that reads its buffer (or a view of it: a
/// buffer read only through views, O's halves over V, is waited for before
/// the first of those), and the copies whose
/// first reader is the same statement form one batch (one cp.async group
/// per iteration, numbered in that order). The first batch is waited for at
/// the top of the body. Returns `(batch of each copy, body index where each
/// batch waits)`; one batch when every copy's first reader is the same (a
/// GEMM's A and B), so such loops have one group per iteration.
pub fn wait_batches(kernel: &Kernel, body: &[Stmt], pl: &PipelinedLoop) -> (Vec<usize>, Vec<usize>) {
    wait_batches_of(kernel, body, pl)
}

impl PipelinePlan {
    /// [`wait_batches`], or one batch waited for at the top of the body when
    /// [`Self::one_wait_batch`].
    pub fn wait_batches(&self, kernel: &Kernel, body: &[Stmt], pl: &PipelinedLoop) -> (Vec<usize>, Vec<usize>) {
        if self.one_wait_batch {
            return (vec![0; pl.copies.len()], vec![0]);
        }
        wait_batches_of(kernel, body, pl)
    }
}

fn wait_batches_of(kernel: &Kernel, body: &[Stmt], pl: &PipelinedLoop) -> (Vec<usize>, Vec<usize>) {
    let mut firsts: Vec<usize> = Vec::new();
    let mut batch = Vec::new();
    for &i in &pl.copies {
        let StmtKind::Copy { dst, .. } = &body[i].kind else {
            batch.push(0);
            continue;
        };
        let first = (i + 1..body.len())
            .find(|&j| !pl.copies.contains(&j) && touches_memory(kernel, &body[j], dst.buf).0)
            .unwrap_or(body.len());
        let b = match firsts.iter().position(|&f| f == first) {
            Some(b) => b,
            None => {
                firsts.push(first);
                firsts.len() - 1
            }
        };
        batch.push(b);
    }
    // Batches in the order they are waited for.
    let mut order: Vec<usize> = (0..firsts.len()).collect();
    order.sort_by_key(|&b| firsts[b]);
    let rank: Vec<usize> = {
        let mut r = vec![0; firsts.len()];
        for (n, &b) in order.iter().enumerate() {
            r[b] = n;
        }
        r
    };
    let batch = batch.into_iter().map(|b| rank.get(b).copied().unwrap_or(0)).collect();
    let mut at: Vec<usize> = order.iter().map(|&b| firsts[b]).collect();
    if let Some(a) = at.first_mut() {
        *a = 0;
    }
    (batch, at)
}

/// Analyses every pipelined loop of `kernel`.
pub fn plan(kernel: &Kernel) -> PipelinePlan {
    plan_with(kernel, false)
}

/// [`plan`], also pipelining a copy into a buffer that later statements of
/// the body write when `rewrites` (see the module doc).
pub fn plan_with(kernel: &Kernel, rewrites: bool) -> PipelinePlan {
    let mut loop_var_uses: HashMap<VarId, u32> = HashMap::new();
    count_loop_vars(&kernel.body, &mut loop_var_uses);
    let mut plan = PipelinePlan::default();
    let mut loops = Vec::new();
    collect_pipelined(&kernel.body, false, &mut loops);
    for lp in loops {
        let StmtKind::For { var, body, kind: LoopKind::Pipelined { stages }, .. } = &lp.kind else { continue };
        // One stage has nothing to issue ahead in the cp.async and TMA-copy
        // pipelines; the warp-specialized loop's producer (`rewrites`) may
        // still refill one ring while the consumers read another.
        if *stages < 1 || (*stages < 2 && !rewrites) || loop_var_uses.get(var).copied().unwrap_or(0) != 1 {
            continue;
        }
        // Buffers touched anywhere but inside this loop.
        let mut outside = HashSet::new();
        uses_except(&kernel.body, lp, &mut outside);
        let mut bound = HashSet::new();
        bound_vars(body, &mut bound);
        // The body's top-level `let`s, by variable: (index, value).
        let mut assigned = HashSet::new();
        assigned_vars(&kernel.body, &mut assigned);
        let lets: HashMap<VarId, (usize, &Expr)> = body
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.kind {
                StmtKind::Let { var, value } if !assigned.contains(var) => Some((*var, (i, value))),
                _ => None,
            })
            .collect();
        let written = |b: BufferId| kernel.body.iter().any(|s| touches(s, b).1);
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
            let mut resolve =
                Resolve { lets: &lets, bound: &bound, loop_var: *var, reads: Vec::new(), inlined: false, bad: None };
            let origin: Vec<Expr> = src.origin.iter().map(|e| resolve.expr(e, i)).collect();
            let mut vars = HashSet::new();
            let mut loads = false;
            for e in &origin {
                expr_vars(e, &mut vars, &mut loads);
            }
            if !vars.contains(var) {
                continue;
            }
            let dst_name = &db.name;
            if let Some(v) = resolve.bad {
                plan.refusals.push(format!(
                    "the copy into `{dst_name}` is not pipelined: its origin uses `{}`, which the loop body binds or assigns and which is not a `let` before the copy computable for a later iteration",
                    kernel.var(v).name
                ));
                continue;
            }
            if let Some(t) = resolve.reads.iter().find(|b| kernel.buffer(**b).scope != Scope::Global || written(**b)) {
                plan.refusals.push(format!(
                    "the copy into `{dst_name}` is not pipelined: its origin reads `{}`, which the kernel writes (or which is not a read-only global tensor), so reading it {} iterations ahead could see a value the loop has not written yet",
                    kernel.buffer(*t).name,
                    stages - 1
                ));
                continue;
            }
            let earlier = body[..i].iter().any(|x| {
                let (r, w) = touches_memory(kernel, x, dst.buf);
                r || w
            });
            let later_write = body[i + 1..].iter().any(|x| touches_memory(kernel, x, dst.buf).1);
            if earlier || !dsts.insert(dst.buf) {
                continue;
            }
            if later_write {
                let whole = dst.origin.iter().all(Expr::is_zero_constant);
                if !rewrites || !whole {
                    plan.refusals.push(format!(
                        "the copy into `{dst_name}` is not pipelined: a later statement of the loop body writes `{dst_name}` (only the warp-specialized loop pipelines such a copy, when it fills the whole buffer)"
                    ));
                    continue;
                }
                plan.rewritten.insert(dst.buf);
            }
            if loads || resolve.inlined {
                plan.read_origins.insert(dst.buf, TileRef { buf: src.buf, origin, squeezed: src.squeezed.clone() });
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

/// Inlines the body's `let`s into a copy's origin and collects what it loads.
struct Resolve<'a> {
    /// The body's top-level `let`s never reassigned: (index, value).
    lets: &'a HashMap<VarId, (usize, &'a Expr)>,
    /// Variables the body binds or assigns.
    bound: &'a HashSet<VarId>,
    loop_var: VarId,
    /// Buffers loaded.
    reads: Vec<BufferId>,
    /// Whether a `let` was inlined.
    inlined: bool,
    /// A bound variable that is no such `let` (the copy is not pipelined).
    bad: Option<VarId>,
}

impl Resolve<'_> {
    /// `e` (of the statement at body index `at`) with the `let`s before
    /// `at` inlined.
    fn expr(&mut self, e: &Expr, at: usize) -> Expr {
        match e {
            Expr::Var(v) if *v != self.loop_var && self.bound.contains(v) => match self.lets.get(v) {
                Some(&(i, value)) if i < at => {
                    self.inlined = true;
                    self.expr(value, i)
                }
                _ => {
                    self.bad.get_or_insert(*v);
                    e.clone()
                }
            },
            Expr::Const(_) | Expr::Var(_) => e.clone(),
            Expr::Load { buf, index } => {
                self.reads.push(*buf);
                Expr::Load { buf: *buf, index: index.iter().map(|x| self.expr(x, at)).collect() }
            }
            Expr::Unary { op, arg } => Expr::Unary { op: *op, arg: Box::new(self.expr(arg, at)) },
            Expr::Cast { arg, to } => Expr::Cast { arg: Box::new(self.expr(arg, at)), to: *to },
            Expr::Binary { op, lhs, rhs } => {
                Expr::Binary { op: *op, lhs: Box::new(self.expr(lhs, at)), rhs: Box::new(self.expr(rhs, at)) }
            }
            Expr::Fma { a, b, c } => Expr::Fma {
                a: Box::new(self.expr(a, at)),
                b: Box::new(self.expr(b, at)),
                c: Box::new(self.expr(c, at)),
            },
            Expr::Select { cond, then, otherwise } => Expr::Select {
                cond: Box::new(self.expr(cond, at)),
                then: Box::new(self.expr(then, at)),
                otherwise: Box::new(self.expr(otherwise, at)),
            },
        }
    }
}

/// The first buffer `e` loads that is not a global tensor the kernel never
/// writes (`None`: every load of `e` reads a read-only tensor, whose values
/// are the same whenever it is read).
pub(crate) fn non_constant_load(kernel: &Kernel, e: &Expr) -> Option<BufferId> {
    let mut out = None;
    visit_loads(e, &mut |b| {
        if out.is_none() && (kernel.buffer(b).scope != Scope::Global || kernel.body.iter().any(|s| touches(s, b).1)) {
            out = Some(b);
        }
    });
    out
}

fn visit_loads(e: &Expr, f: &mut dyn FnMut(BufferId)) {
    match e {
        Expr::Const(_) | Expr::Var(_) => {}
        Expr::Load { buf, index } => {
            f(*buf);
            index.iter().for_each(|x| visit_loads(x, f));
        }
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => visit_loads(arg, f),
        Expr::Binary { lhs, rhs, .. } => {
            visit_loads(lhs, f);
            visit_loads(rhs, f);
        }
        Expr::Fma { a, b, c } => [a, b, c].iter().for_each(|x| visit_loads(x, f)),
        Expr::Select { cond, then, otherwise } => [cond, then, otherwise].iter().for_each(|x| visit_loads(x, f)),
    }
}

/// Variables assigned (`Assign`) anywhere in `body`.
pub(crate) fn assigned_vars(body: &[Stmt], out: &mut HashSet<VarId>) {
    for s in body {
        match &s.kind {
            StmtKind::Assign { var, .. } => {
                out.insert(*var);
            }
            StmtKind::For { body, .. } => assigned_vars(body, out),
            StmtKind::If { then, otherwise, .. } => {
                assigned_vars(then, out);
                assigned_vars(otherwise, out);
            }
            _ => {}
        }
    }
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
pub(crate) fn bound_vars(body: &[Stmt], out: &mut HashSet<VarId>) {
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

pub(crate) fn expr_reads(e: &Expr, buf: BufferId) -> bool {
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
        StmtKind::Copy { src, dst, fill, .. } => {
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
                start.collect_loads(out);
                end.collect_loads(out);
                uses_except(body, skip, out);
            }
            StmtKind::If { cond, then, otherwise } => {
                cond.collect_loads(out);
                uses_except(then, skip, out);
                uses_except(otherwise, skip, out);
            }
            StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => value.collect_loads(out),
            StmtKind::Store { buf, index, value } | StmtKind::AtomicAdd { buf, index, value } => {
                out.insert(*buf);
                index.iter().for_each(|e| e.collect_loads(out));
                value.collect_loads(out);
            }
            StmtKind::Copy { src, dst, fill, .. } => {
                out.insert(src.buf);
                out.insert(dst.buf);
                src.origin.iter().chain(&dst.origin).for_each(|e| e.collect_loads(out));
                if let Some(f) = fill {
                    f.collect_loads(out);
                }
            }
            StmtKind::Fill { buf, value } => {
                out.insert(*buf);
                value.collect_loads(out);
            }
            StmtKind::Reduce { src, dst, .. } => {
                out.insert(*src);
                out.insert(*dst);
            }
            StmtKind::Gemm { a, b, c, .. } => {
                out.extend([*a, *b, *c]);
            }
            StmtKind::Barrier => {}
            StmtKind::Print { args, .. } => args.iter().for_each(|e| e.collect_loads(out)),
        }
    }
}

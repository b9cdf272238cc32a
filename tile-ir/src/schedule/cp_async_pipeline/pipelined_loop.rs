//! The software-pipelined loop schedule (sm_80+): the loops that
//! [`crate::passes::pipeline::plan`] pipelined, their stage issues and
//! waits, and the loop versioning on a run-time alignment test.
//!
//! Expects the [`PipelineLowering`] of the kernel (its pipeline plan, the
//! strength-reduced copies, the stage hooks of a schedule built on it) and
//! a core that placed `stages` copies of each pipelined buffer.
//!
//! Guarantees:
//! - a pipelined loop `for k in a..b` with `S ≥ 2` stages whose copies form
//!   `B` wait batches ([`PipelinePlan::wait_batches`]; one batch with
//!   `CompileOptions::per_copy_waits` off: the copies whose first
//!   reader in the body is the same statement; batch 0 waits at the top of
//!   the body, batch `j` before its first reader) runs as
//!   ```text
//!   prologue: for s in 0..S-1 { for j in 0..B { if a+s < b { issue(batch j, k = a+s → stage s) } commit } }
//!   for k in a..b {
//!       for each batch j, at its place in the body:
//!           cp.async.wait_group B·(S-1)-1  // batch j of iteration k has landed (this thread)
//!           bar.sync                       // ... for every thread; and every thread is
//!                                          // done with iteration k-1's stage
//!           if k+S-1 < b { issue(batch j, k+S-1 → stage (k-a+S-1) % S) }   // = stage of k-1
//!           commit                         // always, so that group counting stays uniform
//!       the body's other statements, on stage (k-a) % S
//!   }
//!   cp.async.wait_group 0
//!   ```
//!   The groups are committed in the order (iteration, batch). When batch
//!   `j` of iteration `k` is waited for, `B·(S-1) + B·(k-a) + j` groups are
//!   committed and its group is the `(B·(k-a) + j)`-th, so exactly
//!   `B·(S-1) - 1` later groups may still be in flight: each batch waits for
//!   its own copies and never for another batch's prefetch (attention's V
//!   gemm waits for V(k), not for K(k+S-1); one batch, as a GEMM's A and B,
//!   is `wait_group S-2`). A batch after the first whose copies the stage
//!   hooks issue alone (TMA boxes) waits only on the hooks' barrier: no
//!   cp.async wait, no `bar.sync` (batch 0's barrier already ordered the
//!   refill after every thread's iteration `k-1`). The refill of stage `(k-1) % S` is issued after
//!   a barrier that every thread passes only once it has finished iteration
//!   `k-1`. Stage refills use a region of their own for
//!   [`super::super::barriers`]: they never touch the stage being read, and
//!   the schedule above orders them explicitly. The stage read, `(k-a) % S`,
//!   is a counter carried by the loop (no division for S not a power of
//!   two). A copy whose origin reads memory (a page index from a block
//!   table, [`PipelinePlan::read_origins`]) evaluates it, loads included,
//!   only for the issued iterations `< b`, inside the guard.
//! - pipelined copies whose origin advances affinely with `k` issue from
//!   strength-reduced state (`reduced_copy.rs`): addresses and masks are
//!   computed once before the prologue and advanced after each issue;
//! - a pipelined loop whose 16-byte copies would need a run-time test of a
//!   dynamic innermost extent (a multiple of the vector width?) is versioned
//!   on that uniform, loop-invariant test: one loop without the test and the
//!   element-wise fallback, one with the general lowering.

use super::PipelineLowering;
use crate::ir::BufferId;
use crate::ir::Stmt as TStmt;
use crate::ir::{DType, Expr, Extent, StmtKind, VarId};
use crate::passes::lower::{Lx, Side, R};
#[allow(unused_imports)] // doc links
use crate::passes::pipeline::PipelinePlan;
use crate::passes::pipeline::PipelinedLoop;
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Region, Stmt};

/// The operation number shared by all stage refills of a buffer: accesses
/// of one region by one operation never need a barrier between them.
const REFILL_OP: u32 = u32::MAX;

impl Lx<'_> {
    /// Makes stage `stage` of `buf` the one its accesses address (through
    /// [`Lx::shared_stage`], which every shared address and ldmatrix
    /// applies); returns the previous setting, for [`Lx::restore_stage`].
    pub(crate) fn select_stage(&mut self, buf: BufferId, stage: &Operand) -> (BufferId, Option<Operand>) {
        let stride = self.stage_stride.get(&buf).copied().unwrap_or(0);
        let off = match stage {
            Operand::Imm(s) => Operand::Imm(s * stride),
            other => Operand::Reg(self.op("mul.lo.s32", RegClass::B32, vec![other.clone(), Operand::Imm(stride)])),
        };
        (buf, self.shared_stage.insert(buf, off))
    }

    pub(crate) fn restore_stage(&mut self, saved: (BufferId, Option<Operand>)) {
        match saved {
            (buf, Some(o)) => self.shared_stage.insert(buf, o),
            (buf, None) => self.shared_stage.remove(&buf),
        };
    }

    /// Issues (without committing) the pipelined copies `pl.copies` (those
    /// of wait batch `batch`) of the iteration whose loop variable is in
    /// `k`, into stage `stage`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn issue_stage(
        &mut self,
        pipe: &PipelineLowering,
        var: VarId,
        k: Reg,
        stage: &Operand,
        body: &[TStmt],
        pl: &PipelinedLoop,
        batch: usize,
    ) -> R<()> {
        let saved_var = self.vars.insert(var, k);
        let saved_span = self.span;
        let mut saved = Vec::new();
        let mut saved_regions = Vec::new();
        for &i in &pl.copies {
            if let StmtKind::Copy { dst, .. } = &body[i].kind {
                saved.push(self.select_stage(dst.buf, stage));
                let refill = self.refill_region(dst.buf);
                saved_regions.push((dst.buf, self.region_override.insert(dst.buf, refill)));
            }
        }
        pipe.stages.begin_stage(self, var, stage, batch)?;
        let mut result = Ok(());
        for &i in &pl.copies {
            if let StmtKind::Copy { src, dst, fill, .. } = &body[i].kind {
                self.span = body[i].span;
                self.cur_op += 1;
                if let Err(e) = self.issue_pipelined_copy(pipe, src, dst, fill.as_ref()) {
                    result = Err(e);
                    break;
                }
            }
        }
        pipe.stages.end_stage();
        if result.is_ok() {
            self.advance_reduced_copies(&pipe.reduced, body, pl);
        }
        for st in saved {
            self.restore_stage(st);
        }
        for (b, region) in saved_regions {
            match region {
                Some(r) => self.region_override.insert(b, r),
                None => self.region_override.remove(&b),
            };
        }
        match saved_var {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        self.span = saved_span;
        result
    }

    /// One pipelined copy of a stage issue: the stage hooks' (TMA boxes),
    /// else the strength-reduced issue, else the core's copy without its
    /// commit and wait.
    pub(super) fn issue_pipelined_copy(
        &mut self,
        pipe: &PipelineLowering,
        src: &crate::ir::TileRef,
        dst: &crate::ir::TileRef,
        fill: Option<&Expr>,
    ) -> R<()> {
        let src = pipe.plan.source(src, dst);
        if pipe.stages.issue_copy(self, src, dst)? {
            return Ok(());
        }
        let reduced = pipe.reduced.borrow().get(&dst.buf).cloned();
        if let Some(rc) = reduced {
            // Strength-reduced (`reduced_copy.rs`): the origin is not
            // evaluated, the copy's state says where the next tile is.
            return self.issue_reduced(&rc, dst.buf);
        }
        self.issue_copy(src, dst, fill)
    }

    /// The region of the stage refills of `buf` (one per buffer).
    pub(super) fn refill_region(&mut self, buf: BufferId) -> Region {
        // Region ids above every buffer and scratch id: `u32::MAX - buf`.
        Region { id: u32::MAX - buf.0, op: REFILL_OP }
    }

    /// Lowers a software-pipelined loop (see the module doc for the schedule).
    ///
    /// When pipelined copies take the 16-byte path only after a run-time
    /// test of a dynamic innermost extent, the whole loop is versioned on
    /// that (loop-invariant, uniform) test: the aligned version knows the
    /// extents are multiples of the vector width and keeps neither the test
    /// nor the element-wise fallback in its loop (whose live values would
    /// cost the fast loop registers); the other version is the general
    /// lowering, without strength-reduced copies.
    pub(super) fn lower_pipelined(
        &mut self,
        pipe: &PipelineLowering,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
        pl: &PipelinedLoop,
    ) -> R<()> {
        let dyn_dims = self.pipelined_alignment_tests(pipe, body, pl);
        if dyn_dims.is_empty() {
            return self.lower_pipelined_loop(pipe, var, start, end, body, pl, true);
        }
        let mut aligned: Option<Reg> = None;
        for &(dv, v) in &dyn_dims {
            let dr = *self.vars.get(&dv).ok_or_else(|| self.err("internal: dim not bound"))?;
            let m = self.op("and.b32", RegClass::B32, vec![dr.into(), Operand::Imm(v - 1)]);
            let p = self.op("setp.eq.u32", RegClass::Pred, vec![m.into(), Operand::Imm(0)]);
            aligned = self.and_pred(aligned, Some(p));
        }
        let saved_mult: Vec<(VarId, Option<i64>)> =
            dyn_dims.iter().map(|&(dv, _)| (dv, self.var_mult.get(&dv).copied())).collect();
        let fast = self.capture(|x| {
            for &(dv, v) in &dyn_dims {
                let m = x.var_mult.get(&dv).copied().unwrap_or(1).max(v);
                x.var_mult.insert(dv, m);
            }
            let r = x.lower_pipelined_loop(pipe, var, start, end, body, pl, true);
            for (dv, m) in &saved_mult {
                match m {
                    Some(m) => x.var_mult.insert(*dv, *m),
                    None => x.var_mult.remove(dv),
                };
            }
            r
        })?;
        // The same statements lowered again: report their errors once.
        let errors = self.errors.len();
        let general = self.capture(|x| x.lower_pipelined_loop(pipe, var, start, end, body, pl, false))?;
        self.errors.truncate(errors);
        self.emit_if(aligned, true, fast, general);
        Ok(())
    }

    /// The dynamic innermost extents (with the vector width) that pipelined
    /// copies of the loop test at run time to take the 16-byte path (the
    /// `Extent::Dyn` case of [`Lx::copy_dispatch`]).
    pub(super) fn pipelined_alignment_tests(
        &self,
        pipe: &PipelineLowering,
        body: &[TStmt],
        pl: &PipelinedLoop,
    ) -> Vec<(VarId, i64)> {
        let mut out: Vec<(VarId, i64)> = Vec::new();
        for &i in &pl.copies {
            let StmtKind::Copy { src, dst, fill, .. } = &body[i].kind else { continue };
            if pipe.stages.issues(dst.buf) {
                continue;
            }
            let (sb, db) = (self.k.buffer(src.buf), self.k.buffer(dst.buf));
            let origin = vec![Operand::Imm(0); src.origin.len()];
            let probe = (Side::Global { buf: src.buf, origin, dims: src.spanned() }, Side::Shared(dst.buf));
            if !self.async_copy_ok(&probe.0, &probe.1, sb.dtype, db.dtype, fill.as_ref()) {
                continue;
            }
            let v = (16 / sb.dtype.size_bytes() as i64).max(1);
            let Some(last) = src.origin.last() else { continue };
            if v <= 1 || self.known_multiple(last) % v != 0 {
                continue;
            }
            if let Some(Extent::Dyn(dv)) = sb.shape.last() {
                if self.var_mult.get(dv).copied().unwrap_or(1) % v != 0 && !out.contains(&(*dv, v)) {
                    out.push((*dv, v));
                }
            }
        }
        out
    }

    /// [`Lx::lower_pipelined`] for one version of the loop; `reduce`:
    /// strength-reduce the copies that qualify (`reduced_copy.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lower_pipelined_loop(
        &mut self,
        pipe: &PipelineLowering,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
        pl: &PipelinedLoop,
        reduce: bool,
    ) -> R<()> {
        let stages = pl.stages as i64;
        let (batch_of, wait_at) = pipe.plan.wait_batches(self.k, body, pl);
        let nb = wait_at.len().max(1);
        // The copies of each batch.
        let batch_loops: Vec<PipelinedLoop> = (0..nb)
            .map(|j| PipelinedLoop {
                stages: pl.stages,
                copies: pl.copies.iter().zip(&batch_of).filter(|(_, &b)| b == j).map(|(&i, _)| i).collect(),
            })
            .collect();
        let (a, b) = self.loop_bounds(start, end)?;
        if self.loop_depth > 0 {
            // Run again by an enclosing loop: the prologue refills stages that
            // other threads may still be reading from the previous run.
            self.emit(Inst::BarSync);
        }
        // Loop-invariant address and mask parts of the copies, for iteration a.
        let saved_var = self.vars.insert(var, a);
        let prepared = if reduce {
            let elsewhere = |b| pipe.stages.issues(b) || pipe.plan.read_origins.contains_key(&b);
            self.prepare_reduced_copies(&pipe.reduced, &elsewhere, var, start, body, pl, &batch_of)
        } else {
            Ok(())
        };
        match saved_var {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        prepared?;
        // Prologue: iterations a .. a+S-2, one commit group per batch each.
        for s in 0..stages - 1 {
            let k = self.op("add.s32", RegClass::B32, vec![a.into(), Operand::Imm(s)]);
            let p = self.op("setp.lt.s32", RegClass::Pred, vec![k.into(), b.into()]);
            for (j, bl) in batch_loops.iter().enumerate() {
                let issue = self.capture(|x| x.issue_stage(pipe, var, k, &Operand::Imm(s), body, bl, j))?;
                self.emit_if(Some(p), true, issue, vec![]);
                self.emit(Inst::CpAsyncCommit);
            }
        }
        // Steady state. The stage read is a counter carried by the loop
        // (`(k - a) % S` without a division for S not a power of two).
        let cur = self.new_reg(RegClass::B32);
        self.mov(cur, Operand::Imm(0), DType::I32);
        let vr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let saved_var = self.vars.insert(var, vr);
        self.loop_depth += 1;
        let pending = (nb as i64 * (stages - 1) - 1) as u32;
        let lowered = self.capture(|x| {
            // Wait for batch `j` of this iteration, then refill its stage of k-1.
            let wait_batch = |x: &mut Lx<'_>, j: usize, bl: &PipelinedLoop| -> R<()> {
                // A later batch issued by the stage hooks alone (TMA boxes on
                // their own barrier) needs neither the cp.async wait nor the
                // barrier: the hooks' wait makes the data visible, and every
                // thread finished iteration k-1 at batch 0's barrier.
                let hooks_only = j > 0
                    && bl.copies.iter().all(|&i| match &body[i].kind {
                        StmtKind::Copy { dst, .. } => pipe.stages.issues(dst.buf),
                        _ => false,
                    });
                if !hooks_only {
                    x.emit(Inst::CpAsyncWait { pending });
                }
                pipe.stages.wait_stage(x, var, cur, j);
                if !hooks_only {
                    x.emit(Inst::BarSync);
                }
                let k_next = x.op("add.s32", RegClass::B32, vec![vr.into(), Operand::Imm(stages - 1)]);
                let p = x.op("setp.lt.s32", RegClass::Pred, vec![k_next.into(), b.into()]);
                // Stage (k-a+S-1) % S = (cur - 1) mod S: the one read by iteration k-1.
                let refill_stage = if stages & (stages - 1) == 0 {
                    let t = x.op("add.s32", RegClass::B32, vec![cur.into(), Operand::Imm(stages - 1)]);
                    x.op("and.b32", RegClass::B32, vec![t.into(), Operand::Imm(stages - 1)])
                } else {
                    let first = x.op("setp.eq.u32", RegClass::Pred, vec![cur.into(), Operand::Imm(0)]);
                    let t = x.op("sub.s32", RegClass::B32, vec![cur.into(), Operand::Imm(1)]);
                    x.op("selp.b32", RegClass::B32, vec![Operand::Imm(stages - 1), t.into(), first.into()])
                };
                let refill_stage = Operand::Reg(refill_stage);
                let issue = x.capture(|y| y.issue_stage(pipe, var, k_next, &refill_stage, body, bl, j))?;
                x.emit_if(Some(p), true, issue, vec![]);
                x.emit(Inst::CpAsyncCommit);
                Ok(())
            };
            wait_batch(x, 0, &batch_loops[0])?;
            let mut saved = Vec::new();
            for &i in &pl.copies {
                if let StmtKind::Copy { dst, .. } = &body[i].kind {
                    saved.push(x.select_stage(dst.buf, &Operand::Reg(cur)));
                }
            }
            for (i, s) in body.iter().enumerate() {
                for (j, bl) in batch_loops.iter().enumerate().skip(1) {
                    if wait_at[j] == i {
                        wait_batch(x, j, bl)?;
                    }
                }
                if !pl.copies.contains(&i) {
                    if let Err(e) = x.stmt(s) {
                        x.errors.push(e);
                    }
                }
            }
            for (j, bl) in batch_loops.iter().enumerate().skip(1) {
                if wait_at[j] >= body.len() {
                    wait_batch(x, j, bl)?;
                }
            }
            for st in saved {
                x.restore_stage(st);
            }
            // cur = (cur + 1) % S.
            let t = x.op("add.s32", RegClass::B32, vec![cur.into(), Operand::Imm(1)]);
            if stages & (stages - 1) == 0 {
                x.op_into("and.b32", cur, vec![t.into(), Operand::Imm(stages - 1)]);
            } else {
                let wrap = x.op("setp.eq.u32", RegClass::Pred, vec![t.into(), Operand::Imm(stages)]);
                x.op_into("selp.b32", cur, vec![Operand::Imm(0), t.into(), wrap.into()]);
            }
            Ok(())
        });
        self.loop_depth -= 1;
        if let Some(r) = saved_var {
            self.vars.insert(var, r);
        }
        let lowered = lowered?;
        self.cur().push(Stmt::For { var: vr, start: a.into(), end: b.into(), exit, uniform: true, body: lowered });
        self.drop_reduced_copies(&pipe.reduced, body, pl);
        // Drain: only empty groups can be left, but leave nothing in flight.
        self.emit(Inst::CpAsyncWait { pending: 0 });
        Ok(())
    }
}

//! cp.async copies and the software-pipelined loop schedule (sm_80+).
//!
//! Expects to be called by the lowering for global → shared copies of one
//! element type with a zero fill ([`Lx::async_copy_ok`]) and for the loops
//! that [`super::pipeline::plan`] pipelined.
//!
//! Guarantees:
//! - a copy chunk of 16 bytes becomes `cp.async.cg ... 16, src_bytes`, one of
//!   4 or 8 bytes `cp.async.ca`; `src_bytes` counts the chunk's in-bounds
//!   elements (a chunk never straddles the start of a row, because chunks
//!   are aligned to their width), the rest is zero-filled, and an empty
//!   chunk reads from the tensor's base address so that no address outside
//!   the tensor is formed for the hardware; narrower elements (f16/bf16
//!   without a provable 4-byte group, bool) use the plain path;
//! - a pipelined loop `for k in a..b` with `S ≥ 2` stages runs as
//!   ```text
//!   prologue: for s in 0..S-1 { if a+s < b { issue(k = a+s → stage s) } commit }
//!   for k in a..b {
//!       cp.async.wait_group S-2      // iteration k's group has landed (this thread)
//!       bar.sync                     // ... for every thread; and every thread is
//!                                    // done with iteration k-1's stage
//!       if k+S-1 < b { issue(k+S-1 → stage (k-a+S-1) % S) }   // = stage of k-1
//!       commit                       // always, so that group counting stays uniform
//!       body on stage (k-a) % S
//!   }
//!   cp.async.wait_group 0
//!   ```
//!   Before the issue of iteration `k` there are `S-1+(k-a)` committed groups
//!   and the group of iteration `k` is the `(k-a)`-th, so `wait_group S-2`
//!   retires it. The refill of stage `(k-1) % S` is issued after the barrier
//!   that every thread passes only once it has finished iteration `k-1`.
//!   Stage refills use a region of their own for [`super::super::barriers`]:
//!   they never touch the stage being read, and the schedule above orders
//!   them explicitly. The stage read, `(k-a) % S`, is a counter carried by
//!   the loop (no division for S not a power of two).
//! - pipelined copies whose origin advances affinely with `k` issue from
//!   strength-reduced state (`reduced_copy.rs`): addresses and masks are
//!   computed once before the prologue and advanced after each issue;
//! - a pipelined loop whose 16-byte copies would need a run-time test of a
//!   dynamic innermost extent (a multiple of the vector width?) is versioned
//!   on that uniform, loop-invariant test: one loop without the test and the
//!   element-wise fallback, one with the general lowering.

use super::*;
use crate::ir::Stmt as TStmt;
use crate::passes::pipeline::PipelinedLoop;

/// The operation number shared by all stage refills of a buffer: accesses
/// of one region by one operation never need a barrier between them.
const REFILL_OP: u32 = u32::MAX;

impl Lx<'_> {
    /// Whether a copy can use cp.async: global → shared, no conversion, and
    /// masked elements filled with zero (what `src_bytes` zero-filling gives).
    pub(super) fn async_copy_ok(&self, src: &Side, dst: &Side, sdt: DType, ddt: DType, fill: Option<&Expr>) -> bool {
        matches!(src, Side::Global { .. })
            && matches!(dst, Side::Shared(_))
            && sdt == ddt
            && sdt != DType::Bool
            && fill.is_none_or(Expr::is_zero_constant)
    }

    /// The copy's element groups as cp.async chunks (`use_async`), else the
    /// plain path.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_groups_any(
        &mut self,
        lay: &FragLayout,
        src: &Side,
        dst: &Side,
        sdt: DType,
        ddt: DType,
        fill: &Val,
        vectorize: bool,
        use_async: bool,
    ) -> R<()> {
        let size = sdt.size_bytes() as usize;
        let v = lay.vec_width().max(1) as usize;
        let chunk = if vectorize { v } else { 1 };
        let (Side::Global { buf, origin, lead }, Side::Shared(db)) = (src, dst) else {
            return self.copy_groups(lay, src, dst, sdt, ddt, fill, vectorize);
        };
        if !use_async || !matches!(chunk * size, 4 | 8 | 16) {
            return self.copy_groups(lay, src, dst, sdt, ddt, fill, vectorize);
        }
        let region = self.region_of(*db);
        for r0 in (0..lay.num_regs()).step_by(v) {
            let l = lay.unflatten(r0);
            let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(lay, a, l[a])).collect();
            let valid = self.valid_pred(lay, &l);
            for e in (0..v).step_by(chunk) {
                let mut c = coords.clone();
                let last = c.len() - 1;
                c[last] = self.add_i32(c[last].clone(), Operand::Imm(e as i64));
                let g = self.global_coords(origin, *lead, &c);
                let dst_addr = self.shared_addr(*db, &c)?;
                self.cp_async_chunk(*buf, &g, chunk as i64, size as i64, dst_addr, valid, region)?;
            }
        }
        Ok(())
    }

    /// One cp.async of `m` elements of `size` bytes starting at global
    /// coordinates `g`, zero-filling the elements outside the tensor.
    #[allow(clippy::too_many_arguments)]
    fn cp_async_chunk(
        &mut self,
        buf: BufferId,
        g: &[Operand],
        m: i64,
        size: i64,
        dst: Address,
        guard: Option<Reg>,
        region: Option<Region>,
    ) -> R<()> {
        let info = self.tensors.get(&buf).ok_or_else(|| self.err("internal: tensor parameter not bound"))?;
        let (dims, ptr) = (info.dims.clone(), info.ptr);
        let n = g.len();
        let outer = self.in_bounds(buf, &g[..n - 1], 0)?;
        let full = m * size;
        let (last, dim) = (g[n - 1].clone(), dims[n - 1].clone());
        let (bytes, inside) = match (&last, &dim) {
            (Operand::Imm(c), Operand::Imm(d)) => {
                let avail = if (*c as u32) < (*d as u32) { (d - c).min(m) } else { 0 };
                (Operand::Imm(avail * size), outer)
            }
            _ => {
                let lr = self.materialize(&Val { op: last.clone(), ty: DType::I32 });
                let dr = self.materialize(&Val { op: dim.clone(), ty: DType::I32 });
                let rem = self.op("sub.s32", RegClass::B32, vec![dr.into(), lr.into()]);
                let rem = self.op("min.s32", RegClass::B32, vec![rem.into(), Operand::Imm(m)]);
                let b = self.op("mul.lo.s32", RegClass::B32, vec![rem.into(), Operand::Imm(size)]);
                let p = self.op("setp.lt.u32", RegClass::Pred, vec![lr.into(), dr.into()]);
                (Operand::Reg(b), self.and_pred(outer, Some(p)))
            }
        };
        let addr = self.global_addr(buf, g)?;
        let (src, bytes) = match inside {
            None => (addr, bytes),
            Some(p) => {
                let b = self.op("selp.b32", RegClass::B32, vec![bytes, Operand::Imm(0), p.into()]);
                let a = self.op("selp.b64", RegClass::B64, vec![addr.into(), ptr.into(), p.into()]);
                (a, Operand::Reg(b))
            }
        };
        let (src, bytes) = match bytes {
            // Nothing of the chunk is inside: read nothing, from the base.
            Operand::Imm(0) => (ptr, Operand::Imm(0)),
            other => (src, other),
        };
        let inst = Inst::CpAsync {
            bytes: full as u32,
            dst,
            src: Address { base: src.into(), offset: 0 },
            src_bytes: bytes,
            region,
        };
        self.emit_guarded(inst, guard.map(|p| (p, false)));
        Ok(())
    }

    /// Errors when the stage copies do not fit the target's shared memory.
    pub(super) fn check_pipeline_budget(&mut self) {
        let limit = pipeline::shared_limit(self.target) as i64;
        if self.pipe.stages.is_empty() || self.smem_top <= limit {
            return;
        }
        let mut parts: Vec<(u32, String)> = Vec::new();
        for (&b, &stages) in &self.pipe.stages {
            let buf = self.k.buffer(b);
            let stride = self.stage_stride.get(&b).copied().unwrap_or(0);
            parts.push((b.0, format!("`{}` {} × {} bytes", buf.name, stages, stride)));
        }
        parts.sort();
        let list: Vec<String> = parts.into_iter().map(|p| p.1).collect();
        let span = self.pipe.stages.keys().map(|b| self.k.buffer(*b).span).next().unwrap_or(SpanId::NONE);
        self.errors.push(CompileError::new(
            span,
            format!(
                "kernel `{}` needs {} bytes of shared memory with its pipeline stages ({}), more than the {} bytes a block can have on {}; use fewer stages or smaller tiles",
                self.k.name,
                self.smem_top,
                list.join(", "),
                limit,
                self.target.name()
            ),
        ));
    }

    /// Makes stage `stage` of `buf` the one its accesses address (through
    /// [`Lx::shared_stage`], which every shared address and ldmatrix
    /// applies); returns the previous setting, for [`Lx::restore_stage`].
    fn select_stage(&mut self, buf: BufferId, stage: &Operand) -> (BufferId, Option<Operand>) {
        let stride = self.stage_stride.get(&buf).copied().unwrap_or(0);
        let off = match stage {
            Operand::Imm(s) => Operand::Imm(s * stride),
            other => Operand::Reg(self.op("mul.lo.s32", RegClass::B32, vec![other.clone(), Operand::Imm(stride)])),
        };
        (buf, self.shared_stage.insert(buf, off))
    }

    fn restore_stage(&mut self, saved: (BufferId, Option<Operand>)) {
        match saved {
            (buf, Some(o)) => self.shared_stage.insert(buf, o),
            (buf, None) => self.shared_stage.remove(&buf),
        };
    }

    /// Issues (without committing) the pipelined copies of the iteration
    /// whose loop variable is in `k`, into stage `stage`.
    fn issue_stage(&mut self, var: VarId, k: Reg, stage: &Operand, body: &[TStmt], pl: &PipelinedLoop) -> R<()> {
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
        self.tma_expect_stage(var, stage)?;
        self.in_pipeline_issue = true;
        let mut result = Ok(());
        for &i in &pl.copies {
            if let StmtKind::Copy { src, dst, fill } = &body[i].kind {
                self.span = body[i].span;
                self.cur_op += 1;
                if let Err(e) = self.lower_copy(src, dst, fill.as_ref()) {
                    result = Err(e);
                    break;
                }
            }
        }
        self.in_pipeline_issue = false;
        self.tma_issue_stage = None;
        if result.is_ok() {
            self.advance_reduced_copies(body, pl);
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

    /// The region of the stage refills of `buf` (one per buffer).
    fn refill_region(&mut self, buf: BufferId) -> Region {
        // Region ids above every buffer and scratch id: `u32::MAX - buf`.
        Region { id: u32::MAX - buf.0, op: REFILL_OP }
    }

    /// A loop's bounds as i32 registers, snapshots taken before the body
    /// runs (it may reassign variables the bounds mention).
    pub(super) fn loop_bounds(&mut self, start: &Expr, end: &Expr) -> R<(Reg, Reg)> {
        let s0 = self.expr(start)?;
        let s0 = self.convert(s0, DType::I32)?;
        let s0 = self.materialize(&s0);
        let e0 = self.expr(end)?;
        let e0 = self.convert(e0, DType::I32)?;
        let e0 = self.materialize(&e0);
        let (a, b) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(a, s0.into(), DType::I32);
        self.mov(b, e0.into(), DType::I32);
        Ok((a, b))
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
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
        pl: &PipelinedLoop,
    ) -> R<()> {
        let dyn_dims = self.pipelined_alignment_tests(body, pl);
        if dyn_dims.is_empty() {
            return self.lower_pipelined_loop(var, start, end, body, pl, true);
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
            let r = x.lower_pipelined_loop(var, start, end, body, pl, true);
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
        let general = self.capture(|x| x.lower_pipelined_loop(var, start, end, body, pl, false))?;
        self.errors.truncate(errors);
        self.emit_if(aligned, true, fast, general);
        Ok(())
    }

    /// The dynamic innermost extents (with the vector width) that pipelined
    /// copies of the loop test at run time to take the 16-byte path (the
    /// `Extent::Dyn` case of [`Lx::copy_dispatch`]).
    fn pipelined_alignment_tests(&self, body: &[TStmt], pl: &PipelinedLoop) -> Vec<(VarId, i64)> {
        let mut out: Vec<(VarId, i64)> = Vec::new();
        for &i in &pl.copies {
            let StmtKind::Copy { src, dst, fill } = &body[i].kind else { continue };
            if self.is_tma_copy(dst.buf) {
                continue;
            }
            let (sb, db) = (self.k.buffer(src.buf), self.k.buffer(dst.buf));
            let probe = (Side::Global { buf: src.buf, origin: Vec::new(), lead: 0 }, Side::Shared(dst.buf));
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
    fn lower_pipelined_loop(
        &mut self,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
        pl: &PipelinedLoop,
        reduce: bool,
    ) -> R<()> {
        let stages = pl.stages as i64;
        let (a, b) = self.loop_bounds(start, end)?;
        if self.loop_depth > 0 {
            // Run again by an enclosing loop: the prologue refills stages that
            // other threads may still be reading from the previous run.
            self.emit(Inst::BarSync);
        }
        // Loop-invariant address and mask parts of the copies, for iteration a.
        let saved_var = self.vars.insert(var, a);
        let prepared = if reduce { self.prepare_reduced_copies(var, start, body, pl) } else { Ok(()) };
        match saved_var {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        prepared?;
        // Prologue: iterations a .. a+S-2, one commit group each.
        for s in 0..stages - 1 {
            let k = self.op("add.s32", RegClass::B32, vec![a.into(), Operand::Imm(s)]);
            let p = self.op("setp.lt.s32", RegClass::Pred, vec![k.into(), b.into()]);
            let issue = self.capture(|x| x.issue_stage(var, k, &Operand::Imm(s), body, pl))?;
            self.emit_if(Some(p), true, issue, vec![]);
            self.emit(Inst::CpAsyncCommit);
        }
        // Steady state. The stage read is a counter carried by the loop
        // (`(k - a) % S` without a division for S not a power of two).
        let cur = self.new_reg(RegClass::B32);
        self.mov(cur, Operand::Imm(0), DType::I32);
        let vr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let saved_var = self.vars.insert(var, vr);
        self.loop_depth += 1;
        let lowered = self.capture(|x| {
            x.emit(Inst::CpAsyncWait { pending: (stages - 2) as u32 });
            x.tma_wait_stage(var, cur);
            x.emit(Inst::BarSync);
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
            let issue = x.capture(|y| y.issue_stage(var, k_next, &refill_stage, body, pl))?;
            x.emit_if(Some(p), true, issue, vec![]);
            x.emit(Inst::CpAsyncCommit);
            let mut saved = Vec::new();
            for &i in &pl.copies {
                if let StmtKind::Copy { dst, .. } = &body[i].kind {
                    saved.push(x.select_stage(dst.buf, &Operand::Reg(cur)));
                }
            }
            for (i, s) in body.iter().enumerate() {
                if !pl.copies.contains(&i) {
                    if let Err(e) = x.stmt(s) {
                        x.errors.push(e);
                    }
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
        self.drop_reduced_copies(body, pl);
        // Drain: only empty groups can be left, but leave nothing in flight.
        self.emit(Inst::CpAsyncWait { pending: 0 });
        Ok(())
    }
}

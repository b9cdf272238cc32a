//! The producer warpgroup's code in the warp-specialized loop (the
//! protocol is `lower.rs`'s module doc): the `let`s the copies' origins
//! need, the pre-loop copies (Q) on their barrier, then for each iteration
//! and pipelined copy: wait for the stage to be free, announce its bytes,
//! issue its TMA boxes (a pieced ring's each on its own barrier,
//! `pieces.rs`), under one evict-first L2 policy made before the loop when
//! a copy asks for it.
//!
//! Expects the [`WslLowering`] of `lower.rs` with its copies, rings and
//! pieces decided and the stage buffers placed. Guarantees that each stage
//! is refilled only after its `empty` barrier completed, and that a box's
//! bytes are announced on the barrier its consumers wait for before the box
//! is issued; a copy whose origin loads (a page index from a table) loads it
//! before waiting for the stage, so that the load's latency hides under the
//! wait. With [`crate::CompileOptions::wsloop_l2_prefetch`], each ring's
//! boxes of iteration `k + 1` are prefetched into L2 after iteration `k`'s
//! are issued (not for a multicast ring), their origin evaluated only
//! while `k + 1 < b`. The persistent variant's producer (`persistent.rs`)
//! runs the same loop per tile.

use super::lower::WslLowering;
use crate::ir::{CacheHint, DType, StmtKind};
use crate::passes::lower::{Lx, R};
use crate::schedule::warp_specialized_gemm::has_load;
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Special, Stmt};

impl Lx<'_> {
    /// The producer thread: the `let`s it needs, the bounds, its loop of
    /// TMA boxes. Its variable bindings are dropped afterwards (the
    /// consumers lower those statements again, for themselves).
    pub(super) fn wsl_producer(&mut self, wl: &WslLowering) -> R<()> {
        let ws = &wl.plan;
        let k = self.k;
        let saved_vars = self.vars.clone();
        let saved_mult = self.var_mult.clone();
        let result = (|| -> R<()> {
            if ws.persistent {
                return self.wsl_producer_tiles(wl);
            }
            for &i in &ws.producer_lets {
                self.stmt(&k.body[i])?;
            }
            self.wsl_producer_pre_copies(wl)?;
            let (a, b) = self.wsl_producer_bounds(wl)?;
            let maps = self.wsl_tensor_map_addrs(wl);
            let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
            self.mov(stage, Operand::Imm(0), DType::I32);
            self.mov(phase, Operand::Imm(0), DType::I32);
            self.wsl_producer_loop(wl, &maps, (stage, phase), (a, b))?;
            self.wsl_producer_tail(wl, (stage, phase))
        })();
        self.vars = saved_vars;
        self.var_mult = saved_mult;
        result
    }

    /// The producer's loop bounds (the loop's span current).
    pub(super) fn wsl_producer_bounds(&mut self, wl: &WslLowering) -> R<(Reg, Reg)> {
        let lp = &self.k.body[wl.plan.loop_index];
        self.span = lp.span;
        let StmtKind::For { start, end, .. } = &lp.kind else {
            return Err(self.err("internal: the warp-specialized loop is not a loop"));
        };
        self.loop_bounds(start, end)
    }

    /// The generic addresses of the rings' tensor maps, one per ring.
    pub(super) fn wsl_tensor_map_addrs(&mut self, wl: &WslLowering) -> Vec<Reg> {
        let copies = wl.copies.borrow().clone();
        let mut maps = Vec::new();
        for c in &copies {
            let r = self.new_reg(RegClass::B64);
            self.emit(Inst::TensorMapAddr { dst: r, param: c.param.clone() });
            maps.push(r);
        }
        maps
    }

    /// The producer's loop of TMA boxes over `a..b` (the rings' tensor maps
    /// at `maps`), its stage and phase in `stage`, `phase`.
    pub(super) fn wsl_producer_loop(
        &mut self,
        wl: &WslLowering,
        maps: &[Reg],
        (stage, phase): (Reg, Reg),
        (a, b): (Reg, Reg),
    ) -> R<()> {
        let ws = &wl.plan;
        let k = self.k;
        let result = (|| -> R<()> {
            let StmtKind::For { body, .. } = &k.body[ws.loop_index].kind else {
                return Err(self.err("internal: the warp-specialized loop is not a loop"));
            };
            let copies = wl.copies.borrow().clone();
            let pieces = wl.pieces.borrow().clone();
            // One L2 policy for the copies that ask for one, made before the loop.
            let evict_first = copies.iter().any(|c| c.cache == CacheHint::EvictFirst);
            let policy = if evict_first { self.l2_policy(CacheHint::EvictFirst) } else { None };
            let stages = ws.stages as i64;
            // A multicast ring's share: this block's rank, the whole cluster's mask.
            let cluster = copies.iter().any(|c| c.share.is_some()).then(|| {
                let rank = self.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::ClusterCtaRank)]);
                let mask = self.op("mov.b16", RegClass::B16, vec![Operand::Imm((1i64 << ws.cluster) - 1)]);
                (rank, mask)
            });
            let kr = self.new_reg(RegClass::B32);
            let exit = self.new_reg(RegClass::Pred);
            self.vars.insert(ws.var, kr);
            let lowered = self.capture(|x| {
                let parity = x.op("xor.b32", RegClass::B32, vec![phase.into(), Operand::Imm(1)]);
                for (ci, (c, map)) in copies.iter().zip(maps).enumerate() {
                    let StmtKind::Copy { src, dst, .. } = &body[c.index].kind else {
                        return Err(x.err("internal: a warp-specialized copy is not a copy"));
                    };
                    // The source with the body's `let`s inlined (a page
                    // index read from a table): the producer loads it
                    // itself, before waiting for the stage, so the load's
                    // latency hides under that wait.
                    let src = ws.pipe.source(src, dst);
                    let loads = src.origin.iter().any(has_load);
                    let mut origin = Vec::new();
                    let eval = |x: &mut Lx<'_>, origin: &mut Vec<Reg>| -> R<()> {
                        x.span = body[c.index].span;
                        *origin = x.tma_origin(src)?;
                        Ok(())
                    };
                    if loads {
                        eval(x, &mut origin)?;
                    }
                    // This copy's ring: its stage free (each box's, where
                    // each is released on its own: before the box), its
                    // bytes announced.
                    let pieced = pieces.get(ci).cloned().flatten();
                    if pieced.as_ref().is_none_or(|p| p.releases.is_none()) {
                        let empty = x.ring_bar_addr(wl.ring(ci), stages, stage, 1);
                        let p = x.new_reg(RegClass::Pred);
                        x.emit(Inst::MbarWait { addr: empty, parity: parity.into(), pred: p });
                    }
                    let full = x.ring_bar_addr(wl.ring(ci), stages, stage, 0);
                    if pieced.is_none() {
                        x.emit(Inst::MbarArriveExpectTx { addr: full.clone(), tx_bytes: Operand::Imm(c.bytes) });
                    }
                    if !loads {
                        eval(x, &mut origin)?;
                    }
                    let dims = crate::schedule::tma_copy::tma_window_dims(x.k, src)
                        .ok_or_else(|| x.err("internal: TMA copy of a window TMA cannot load"))?;
                    let (off, _) =
                        *x.shared.get(&dst.buf).ok_or_else(|| x.err("internal: TMA destination not placed"))?;
                    let stride = x.stage_stride.get(&dst.buf).copied().unwrap_or(0);
                    let smem = x.smem;
                    let at = x.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(off)]);
                    let at = x.op("mad.lo.s32", RegClass::B32, vec![stage.into(), Operand::Imm(stride), at.into()]);
                    let hint = if c.cache == CacheHint::EvictFirst { policy } else { None };
                    // A multicast ring: this block's share of every box (its
                    // rows `rank·rows` in, at `rank·bytes` in the stage), into
                    // every block of the cluster; each block still announces
                    // the whole box's bytes on its own barrier (the peers'
                    // shares may land before that: the phase also needs the
                    // announcing arrival).
                    let (at, multicast) = match (c.share, cluster) {
                        (Some(sh), Some((rank, mask))) => {
                            let rows = x.op("mul.lo.s32", RegClass::B32, vec![rank.into(), Operand::Imm(sh.rows)]);
                            let row = x.op("add.s32", RegClass::B32, vec![origin[dims.0].into(), rows.into()]);
                            origin[dims.0] = row;
                            let at =
                                x.op("mad.lo.s32", RegClass::B32, vec![rank.into(), Operand::Imm(sh.bytes), at.into()]);
                            (at, Some(mask))
                        }
                        _ => (at, None),
                    };
                    let at = Address { base: at.into(), offset: 0 };
                    match pieced {
                        None => x.tma_boxes(*map, &at, &c.boxes, &origin, dims, &full, hint, dst.buf, multicast),
                        // Each box on its own barrier (`pieces.rs`).
                        Some(p) => {
                            for (j, bx) in c.boxes.iter().enumerate() {
                                if let Some(empty) = x.wsl_piece_empty(&p, stages, stage, j) {
                                    let ready = x.new_reg(RegClass::Pred);
                                    x.emit(Inst::MbarWait { addr: empty, parity: parity.into(), pred: ready });
                                }
                                let bar = x.wsl_piece_bar(&p, stages, stage, j);
                                let tx = Operand::Imm(p.box_bytes);
                                x.emit(Inst::MbarArriveExpectTx { addr: bar.clone(), tx_bytes: tx });
                                let one = std::slice::from_ref(bx);
                                x.tma_boxes(*map, &at, one, &origin, dims, &bar, hint, dst.buf, multicast);
                            }
                        }
                    }
                }
                if wl.l2_prefetch {
                    x.wsl_prefetch_next(wl, maps, policy, (kr, b))?;
                }
                x.ring_advance(stages, stage, phase);
                Ok(())
            })?;
            self.cur().push(Stmt::For { var: kr, start: a.into(), end: b.into(), exit, uniform: false, body: lowered });
            Ok(())
        })();
        result
    }

    /// After iteration `k`'s boxes of every ring (their page loads then
    /// stall nothing that waits), the boxes of iteration `k + 1` prefetched
    /// into L2 (`wsloop_l2_prefetch`) while `k + 1 < b`, their origins
    /// evaluated at `k + 1` only there (a page index past the chunk is not
    /// read). A multicast ring's boxes are left alone (each block loads
    /// only a share of them).
    fn wsl_prefetch_next(&mut self, wl: &WslLowering, maps: &[Reg], policy: Option<Reg>, (kr, b): (Reg, Reg)) -> R<()> {
        let ws = &wl.plan;
        let k = self.k;
        let StmtKind::For { body, .. } = &k.body[ws.loop_index].kind else {
            return Err(self.err("internal: the warp-specialized loop is not a loop"));
        };
        let copies = wl.copies.borrow().clone();
        let next = self.op("add.s32", RegClass::B32, vec![kr.into(), Operand::Imm(1)]);
        let more = self.new_reg(RegClass::Pred);
        self.emit(Inst::Op { op: "setp.lt.s32".into(), dst: more, args: vec![next.into(), b.into()] });
        let prefetch = self.capture(|x| {
            x.vars.insert(ws.var, next);
            for (c, map) in copies.iter().zip(maps).filter(|(c, _)| c.share.is_none()) {
                let StmtKind::Copy { src, dst, .. } = &body[c.index].kind else {
                    return Err(x.err("internal: a warp-specialized copy is not a copy"));
                };
                let src = ws.pipe.source(src, dst);
                x.span = body[c.index].span;
                let origin = x.tma_origin(src)?;
                let dims = crate::schedule::tma_copy::tma_window_dims(x.k, src)
                    .ok_or_else(|| x.err("internal: TMA copy of a window TMA cannot load"))?;
                let hint = if c.cache == CacheHint::EvictFirst { policy } else { None };
                x.tma_prefetch_boxes(*map, &c.boxes, &origin, dims, hint);
            }
            x.vars.insert(ws.var, kr);
            Ok(())
        })?;
        self.cur().push(Stmt::If { cond: more, negate: false, uniform: false, then: prefetch, otherwise: vec![] });
        Ok(())
    }

    /// The producer's pre-loop copies: the bytes of all on their barrier,
    /// then their boxes.
    pub(super) fn wsl_producer_pre_copies(&mut self, wl: &WslLowering) -> R<()> {
        let pre = wl.pre.borrow().clone();
        if pre.is_empty() {
            return Ok(());
        }
        let smem = self.smem;
        let bar = Address { base: smem.into(), offset: wl.pre_bar() };
        self.emit(Inst::MbarArriveExpectTx { addr: bar.clone(), tx_bytes: Operand::Imm(wl.pre_bytes.get()) });
        for c in &pre {
            let s = &self.k.body[c.index];
            self.span = s.span;
            let StmtKind::Copy { src, dst, .. } = &s.kind else {
                return Err(self.err("internal: a warp-specialized copy is not a copy"));
            };
            let map = self.new_reg(RegClass::B64);
            self.emit(Inst::TensorMapAddr { dst: map, param: c.param.clone() });
            let origin = self.tma_origin(src)?;
            let dims = crate::schedule::tma_copy::tma_window_dims(self.k, src)
                .ok_or_else(|| self.err("internal: TMA copy of a window TMA cannot load"))?;
            let (off, _) =
                *self.shared.get(&dst.buf).ok_or_else(|| self.err("internal: TMA destination not placed"))?;
            let at = self.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(off)]);
            let hint = self.l2_policy(c.cache);
            self.tma_boxes(
                map,
                &Address { base: at.into(), offset: 0 },
                &c.boxes,
                &origin,
                dims,
                &bar,
                hint,
                dst.buf,
                None,
            );
        }
        Ok(())
    }
}

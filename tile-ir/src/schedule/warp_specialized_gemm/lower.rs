//! The warp-specialized schedule of a pipelined GEMM loop (sm_90a): TMA
//! loads by a producer warpgroup, wgmma by the kernel's own threads, stages
//! handed over through full/empty mbarriers.
//!
//! Expects the [`super::WsPlan`] of [`super::plan`] (in the [`WsLowering`] of the
//! lowering, which then places the stage buffers 1024-byte aligned, declares
//! one tensor map parameter per operand, and launches `T + 128` threads), and
//! a layout plan whose gemm accumulators have the wgmma layout.
//!
//! Guarantees the schedule (`T` consumer threads, `S` stages, `st` = stage,
//! `ph` = its phase parity, both carried by each side's loop):
//! ```text
//! thread 0: init full[s] (1 arrival), empty[s] (T arrivals); fence; bar.sync 0, T+128
//! producer warpgroup (tid ≥ T): setmaxnreg.dec; thread T only:
//!     for k: wait empty[st] parity ph^1     // the consumers released the stage
//!            arrive.expect_tx full[st], bytes of the stage
//!            TMA boxes of every operand for iteration k → stage st, on full[st]
//!     exit
//! consumers (tid < T): setmaxnreg.inc
//!     for k: wait full[st] parity ph
//!            wgmma.fence; every gemm as K/16 wgmma m64nNk16 per warpgroup; commit
//!            wgmma.wait_group 1             // iteration k-1's wgmmas are done...
//!            k > start: arrive empty[st-1]  // ...so its stage can be refilled
//!     wgmma.wait_group 0; bar.sync 1, T     // stage memory may be reused after
//! ```
//! With multicast operands ([`super::WsPlan::cluster`] `C > 1`): `empty[s]`
//! expects `(T/32)·C` arrivals and lane 0 of every consumer warp arrives on
//! `empty[st-1]` of every block of the cluster (`mapa` + a remote arrive), so that a
//! producer refills a stage, which its multicast writes in every block, only
//! once the whole cluster is done with it; a cluster barrier after the
//! init (the peers' multicasts and arrivals reach initialized barriers);
//! block rank `r` issues the multicast boxes `i ≡ r (mod C)` (all of the
//! stage's bytes still complete on each block's own `full[st]`, whose
//! `expect_tx` may come after a peer's bytes: the phase needs its arrival
//! too); and the producer ends with one more round of empty waits, so
//! that no peer's release reaches a block that has exited.
//!
//! A fresh mbarrier is in phase 0, so the producer's first `S` waits (parity
//! 1, "the phase before") return at once. Each consumer warpgroup's wgmma
//! reads the rows of A its 64 accumulator rows need and all of B, through
//! descriptors whose start is the stage's address `>> 4` plus the constant
//! offset of the k16 slice (`hopper-facts.md`: K-major SBO = 8 rows of the
//! swizzle span; MN-major LBO = the panel size). Out-of-range tiles are
//! zero-filled by TMA and still complete the full box's bytes.

use super::plan::{TmaOperand, WsGemm, WsPlan};
use crate::hopper::{wgmma_d_index, ws_accumulator, MatrixDescriptor};
use crate::ir::{DType, Expr, Stmt as TStmt, StmtKind, VarId};
use crate::layout::FragLayout;
use crate::passes::lower::{Lx, R};
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Special, Stmt, WgmmaA};
use std::cell::Cell;

/// The schedule's state while one kernel is lowered.
pub(crate) struct WsLowering {
    pub(crate) plan: WsPlan,
    /// Byte offset of the loop's mbarriers in `smem` (placed first).
    pub(crate) bars: Cell<i64>,
    /// Byte offset of the TMA store's shared panels in `smem`.
    pub(crate) store_base: Cell<i64>,
}

impl WsLowering {
    pub(super) fn new(plan: WsPlan) -> WsLowering {
        WsLowering { plan, bars: Cell::new(0), store_base: Cell::new(0) }
    }
}

/// What the producer thread carries across loops (and tiles).
pub(super) struct ProducerState {
    maps: Vec<Reg>,
    stage: Reg,
    phase: Reg,
    /// With multicast: per rank `r` of the cluster, whether this block is
    /// rank `r` (it issues the multicast boxes `i` with `i % C == r`), and
    /// the `ctaMask` of the whole cluster.
    ranks: Vec<Reg>,
    mask: Option<Reg>,
}

/// What the consumers carry across loops (and tiles).
pub(super) struct ConsumerState {
    /// Per gemm, per 64-row slice: the accumulator registers in `d` order.
    dregs: Vec<Vec<Vec<Reg>>>,
    wg: Reg,
    stage: Reg,
    phase: Reg,
    prev: Reg,
}

impl Lx<'_> {
    /// Places the stage buffers of the warp-specialized loop (1024-byte
    /// aligned: the 128B swizzle pattern repeats every 8 rows of 128 bytes
    /// and TMA and wgmma apply it to absolute addresses) and its mbarriers.
    pub(super) fn ws_setup(&mut self, wl: &WsLowering) {
        let ws = &wl.plan;
        for o in &ws.operands {
            let stride = (o.stage_bytes() + 1023) / 1024 * 1024;
            let footprint = stride * ws.stages as i64;
            let off = (self.smem_top + 1023) / 1024 * 1024;
            self.smem_top = off + footprint;
            self.shared.insert(o.buf, (off, o.buf.0));
            self.footprint.insert(o.buf, footprint);
            self.stage_stride.insert(o.buf, stride);
        }
        // The TMA store's panels: over the dead stage buffers, or, when the
        // producer runs ahead into the next tile (persistent), apart.
        wl.store_base.set(ws.operands.iter().filter_map(|o| self.shared.get(&o.buf).map(|p| p.0)).min().unwrap_or(0));
        if let (Some(st), true) = (&ws.store, ws.persistent) {
            let off = (self.smem_top + 1023) / 1024 * 1024;
            self.smem_top = off + st.panel_bytes() * (st.cols / st.panel_cols());
            wl.store_base.set(off);
        }
        // full[0..S] then empty[0..S], 8 bytes each.
        let bars = self.alloc_smem(16 * ws.stages as i64);
        wl.bars.set(bars);
        for tm in ws.tensor_maps() {
            self.f.params.push((tm.param.clone(), crate::thread_ir::TENSOR_MAP_PARAM));
            self.f.tensor_maps.push(tm);
        }
        self.f.threads = ws.consumer_threads + 128;
        self.f.barrier_threads = Some(ws.consumer_threads);
        // The register split (`WsPlan::consumer_regs`) assumes this bound.
        self.f.min_blocks_per_sm = Some(self.k.blocks_per_sm.max(1));
        self.f.persistent = ws.persistent;
    }

    /// `smem + ws_bars + 8·(stage + which·S)`: full (`which` 0) or empty (1).
    pub(super) fn ws_bar_addr(&mut self, wl: &WsLowering, stage: Reg, which: i64) -> Address {
        self.ring_bar_addr(wl.bars.get(), wl.plan.stages as i64, stage, which)
    }

    /// `smem + bars + 8·(stage + which·stages)`: of a ring of `stages` full
    /// mbarriers (`which` 0) then as many empty ones (1) at byte `bars`.
    pub(crate) fn ring_bar_addr(&mut self, bars: i64, stages: i64, stage: Reg, which: i64) -> Address {
        let smem = self.smem;
        let base = self.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(bars + 8 * stages * which)]);
        let addr = self.op("mad.lo.s32", RegClass::B32, vec![stage.into(), Operand::Imm(8), base.into()]);
        Address { base: addr.into(), offset: 0 }
    }

    /// `stage = stage + 1`, wrapping to 0 at `S` and then flipping `phase`.
    pub(super) fn ws_advance(&mut self, wl: &WsLowering, stage: Reg, phase: Reg) {
        self.ring_advance(wl.plan.stages as i64, stage, phase);
    }

    /// `stage = stage + 1`, wrapping to 0 at `stages` and then flipping `phase`.
    pub(crate) fn ring_advance(&mut self, stages: i64, stage: Reg, phase: Reg) {
        let next = self.op("add.s32", RegClass::B32, vec![stage.into(), Operand::Imm(1)]);
        let wrap = self.op("setp.eq.s32", RegClass::Pred, vec![next.into(), Operand::Imm(stages)]);
        self.op_into("selp.b32", stage, vec![Operand::Imm(0), next.into(), wrap.into()]);
        let flip = self.op("selp.b32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), wrap.into()]);
        self.op_into("xor.b32", phase, vec![phase.into(), flip.into()]);
    }

    /// The stage's byte address of operand `o`: `smem + off + stage·stride`.
    pub(super) fn ws_stage_addr(&mut self, o: &TmaOperand, stage: Reg) -> R<Reg> {
        let (off, _) = *self.shared.get(&o.buf).ok_or_else(|| self.err("internal: stage buffer not placed"))?;
        let stride = self.stage_stride.get(&o.buf).copied().unwrap_or(0);
        let smem = self.smem;
        let base = self.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(off)]);
        Ok(self.op("mad.lo.s32", RegClass::B32, vec![stage.into(), Operand::Imm(stride), base.into()]))
    }

    /// Thread 0 initializes the barriers; all `T + 128` threads sync.
    pub(super) fn ws_init_barriers(&mut self, wl: &WsLowering) -> R<()> {
        let ws = &wl.plan;
        let (t, stages, bars) = (ws.consumer_threads as i64, ws.stages as i64, wl.bars.get());
        // With multicast one lane of every consumer warp of the cluster
        // releases each block's stage (`ws_release`).
        let releases = if ws.multicasts() { t / 32 * ws.cluster as i64 } else { t };
        let init = self.capture(|x| {
            let smem = x.smem;
            for s in 0..stages {
                x.emit(Inst::MbarInit {
                    addr: Address { base: smem.into(), offset: bars + 8 * s },
                    count: Operand::Imm(1),
                });
                x.emit(Inst::MbarInit {
                    addr: Address { base: smem.into(), offset: bars + 8 * (stages + s) },
                    count: Operand::Imm(releases),
                });
            }
            x.emit(Inst::FenceMbarrierInit);
            Ok(())
        })?;
        let t0 = self.is_t0;
        self.emit_if(Some(t0), false, init, vec![]);
        self.emit(Inst::NamedBarSync { id: 0, threads: (t + 128) as u32 });
        if ws.multicasts() {
            // The other blocks' multicasts and releases reach this block's
            // barriers only once every block of the cluster has initialized
            // its own.
            self.emit(Inst::ClusterArrive);
            self.emit(Inst::ClusterWait);
        }
        Ok(())
    }

    /// The consumers' release of the stage at `stage` (where `when` holds):
    /// an arrival on its empty barrier, or, when operands are multicast, on
    /// the empty barrier of that stage in every block of the cluster (each
    /// block's producer then refills the stage of all of them only once
    /// every consumer of the cluster is done with it). There lane 0 of each
    /// warp arrives for its warp (every lane has passed the warp-synchronous
    /// `wgmma.wait_group` that retired the stage's reads), at CTA scope
    /// ([`Inst::MbarArriveCluster`]): C arrivals a warp instead of 32·C, and
    /// none of them a memory barrier.
    pub(super) fn ws_release(&mut self, wl: &WsLowering, stage: Reg, when: Reg) {
        let empty = self.ws_bar_addr(wl, stage, 1);
        if !wl.plan.multicasts() {
            self.emit_guarded(Inst::MbarArrive { addr: empty }, Some((when, false)));
            return;
        }
        let lane = self.op("and.b32", RegClass::B32, vec![self.tid.into(), Operand::Imm(31)]);
        let lane0 = self.op("setp.eq.u32", RegClass::Pred, vec![lane.into(), Operand::Imm(0)]);
        let guard = self.and_pred(Some(when), Some(lane0)).map(|p| (p, false));
        for rank in 0..wl.plan.cluster as i64 {
            let remote =
                self.op("mapa.shared::cluster.u32", RegClass::B32, vec![empty.base.clone(), Operand::Imm(rank)]);
            self.emit_guarded(Inst::MbarArriveCluster { addr: remote.into() }, guard);
        }
    }

    /// The producer's last waits, when operands are multicast: one more
    /// round of the ring, waiting until every stage's last fill has been
    /// released by every consumer of the cluster. Those releases include
    /// the other blocks' arrivals on this block's barriers, which must not
    /// reach a block that has exited.
    pub(super) fn ws_producer_tail(&mut self, wl: &WsLowering, st: &ProducerState) -> R<()> {
        if !wl.plan.multicasts() {
            return Ok(());
        }
        let (stage, phase) = (st.stage, st.phase);
        let kr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let lowered = self.capture(|x| {
            let empty = x.ws_bar_addr(wl, stage, 1);
            let parity = x.op("xor.b32", RegClass::B32, vec![phase.into(), Operand::Imm(1)]);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait { addr: empty, parity: parity.into(), pred: p });
            x.ws_advance(wl, stage, phase);
            Ok(())
        })?;
        let stages = Operand::Imm(wl.plan.stages as i64);
        self.cur().push(Stmt::For {
            var: kr,
            start: Operand::Imm(0),
            end: stages,
            exit,
            uniform: false,
            body: lowered,
        });
        Ok(())
    }

    /// `if tid >= T { setmaxnreg.dec; if tid == T { issue } exit }`, then
    /// the consumers' `setmaxnreg.inc`.
    pub(super) fn ws_split(&mut self, wl: &WsLowering, issue: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let ws = &wl.plan;
        let t = ws.consumer_threads as i64;
        let tid = self.tid;
        let is_producer = self.op("setp.ge.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(t)]);
        let producer = self.capture(|x| {
            x.emit(Inst::SetMaxNreg { inc: false, count: ws.producer_regs });
            let leader = x.op("setp.eq.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(t)]);
            let code = x.capture(issue)?;
            x.emit_if(Some(leader), false, code, vec![]);
            x.emit(Inst::Exit);
            Ok(())
        })?;
        self.cur().push(Stmt::If {
            cond: is_producer,
            negate: false,
            uniform: false,
            then: producer,
            otherwise: vec![],
        });
        self.emit(Inst::SetMaxNreg { inc: true, count: ws.consumer_regs });
        Ok(())
    }

    /// Lowers the warp-specialized pipelined loop (see the module doc).
    pub(super) fn lower_ws_loop(
        &mut self,
        wl: &WsLowering,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
    ) -> R<()> {
        let (a, b) = self.loop_bounds(start, end)?;
        self.ws_init_barriers(wl)?;
        self.ws_split(wl, |x| {
            let st = x.ws_producer_state(wl)?;
            x.ws_producer_loop(wl, &st, var, a, b, body)?;
            x.ws_producer_tail(wl, &st)
        })?;
        let st = self.ws_consumer_state(wl)?;
        self.ws_consumer_loop(wl, &st, a, b)?;
        // Everything after the loop may reuse the stage memory that the
        // other warpgroup's last wgmmas read.
        self.emit(Inst::BarSync);
        Ok(())
    }

    /// The producer's tensor map addresses and its stage/phase counters.
    pub(super) fn ws_producer_state(&mut self, wl: &WsLowering) -> R<ProducerState> {
        let ws = &wl.plan;
        let mut maps = Vec::new();
        for tm in ws.tensor_maps().iter().take(ws.operands.len()) {
            let r = self.new_reg(RegClass::B64);
            self.emit(Inst::TensorMapAddr { dst: r, param: tm.param.clone() });
            maps.push(r);
        }
        let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(stage, Operand::Imm(0), DType::I32);
        self.mov(phase, Operand::Imm(0), DType::I32);
        let (mut ranks, mut mask) = (Vec::new(), None);
        if ws.multicasts() {
            let rank = self.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::ClusterCtaRank)]);
            for r in 0..ws.cluster as i64 {
                ranks.push(self.op("setp.eq.u32", RegClass::Pred, vec![rank.into(), Operand::Imm(r)]));
            }
            mask = Some(self.op("mov.b16", RegClass::B16, vec![Operand::Imm((1i64 << ws.cluster) - 1)]));
        }
        Ok(ProducerState { maps, stage, phase, ranks, mask })
    }

    /// The producer thread's loop over `a..b`: wait for a free stage, then TMA.
    pub(super) fn ws_producer_loop(
        &mut self,
        wl: &WsLowering,
        st: &ProducerState,
        var: VarId,
        a: Reg,
        b: Reg,
        body: &[TStmt],
    ) -> R<()> {
        let ws = &wl.plan;
        let stage_bytes: i64 = ws.operands.iter().map(|o| o.stage_bytes()).sum();
        let (stage, phase) = (st.stage, st.phase);
        let kr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let saved = self.vars.insert(var, kr);
        let lowered = self.capture(|x| {
            let empty = x.ws_bar_addr(wl, stage, 1);
            let parity = x.op("xor.b32", RegClass::B32, vec![phase.into(), Operand::Imm(1)]);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait { addr: empty, parity: parity.into(), pred: p });
            let full = x.ws_bar_addr(wl, stage, 0);
            x.emit(Inst::MbarArriveExpectTx { addr: full.clone(), tx_bytes: Operand::Imm(stage_bytes) });
            for (o, map) in ws.operands.iter().zip(&st.maps) {
                let StmtKind::Copy { src, cache, .. } = &body[o.copy].kind else {
                    return Err(x.err("internal: warp-specialized operand is not a copy"));
                };
                let hint = x.l2_policy(*cache);
                let mut origin = Vec::new();
                for e in &src.origin {
                    let v = x.expr(e)?;
                    let v = x.convert(v, DType::I32)?;
                    origin.push(x.materialize(&v));
                }
                let dst = x.ws_stage_addr(o, stage)?;
                for (i, (off, dr, dc)) in o.boxes().into_iter().enumerate() {
                    let col = x.add_i32(origin[1].into(), Operand::Imm(dc));
                    let row = x.add_i32(origin[0].into(), Operand::Imm(dr));
                    let load = Inst::TmaLoad {
                        dst: Address { base: dst.into(), offset: off },
                        tmap: (*map).into(),
                        coords: vec![col, row],
                        mbar: full.clone(),
                        cache_hint: hint.map(Operand::Reg),
                        cta_dst: false,
                        multicast: st.mask.filter(|_| o.multicast).map(Operand::Reg),
                        region: None,
                    };
                    // A multicast box is issued by one block of the cluster.
                    let issuer = o.multicast.then(|| (st.ranks[i % st.ranks.len()], false));
                    x.emit_guarded(load, issuer);
                }
            }
            x.ws_advance(wl, stage, phase);
            Ok(())
        });
        match saved {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        let lowered = lowered?;
        self.cur().push(Stmt::For { var: kr, start: a.into(), end: b.into(), exit, uniform: false, body: lowered });
        Ok(())
    }

    /// The consumers' accumulator registers (wgmma `d` order, checked
    /// against the layout), warpgroup index and stage/phase counters.
    pub(super) fn ws_consumer_state(&mut self, wl: &WsLowering) -> R<ConsumerState> {
        let ws = &wl.plan;
        let mut dregs = Vec::new();
        for g in &ws.gemms {
            let name = &self.k.buffer(g.c).name;
            let want = FragLayout::full(ws_accumulator(g.m, g.n, ws.consumer_threads).map_err(|e| self.err(e))?);
            let have =
                self.plan.frags.get(&g.c).ok_or_else(|| self.err(format!("internal: `{name}` has no layout")))?;
            if !have.agrees(&want) {
                return Err(self.err(format!(
                    "internal: `{name}` is laid out as {}, not as the wgmma accumulator",
                    have.describe()
                )));
            }
            let creg = self.frags.get(&g.c).cloned().unwrap_or_default();
            if creg.len() != want.num_regs() {
                return Err(self.err(format!("internal: accumulator `{name}` has no registers")));
            }
            let mut slices = Vec::new();
            for s in 0..g.slices {
                let mut d = vec![Reg(0); (g.n / 2) as usize];
                for lr in 0..2 {
                    for lc in 0..g.n / 4 {
                        d[wgmma_d_index(lr, lc)] = creg[want.flatten(&[2 * s + lr, lc])];
                    }
                }
                slices.push(d);
            }
            dregs.push(slices);
        }
        let tid = self.tid;
        let lane_wg = self.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
        let wg = self.warp_uniform(lane_wg);
        let (stage, phase, prev) =
            (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        for r in [stage, phase, prev] {
            self.mov(r, Operand::Imm(0), DType::I32);
        }
        Ok(ConsumerState { dregs, wg, stage, phase, prev })
    }

    /// The consumers' loop over `a..b`: wait for a full stage, wgmma,
    /// release the previous one; then wait for the last wgmmas and release
    /// the last stage (so that the producer may refill it while this block
    /// runs its epilogue).
    pub(super) fn ws_consumer_loop(&mut self, wl: &WsLowering, st: &ConsumerState, a: Reg, b: Reg) -> R<()> {
        let ws = &wl.plan;
        let (stage, phase, prev, wg) = (st.stage, st.phase, st.prev, st.wg);
        let kr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let lowered = self.capture(|x| {
            let full = x.ws_bar_addr(wl, stage, 0);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait { addr: full, parity: phase.into(), pred: p });
            // Stage addresses >> 4 (descriptor start units), per operand.
            let mut base16 = Vec::new();
            for o in &ws.operands {
                let addr = x.ws_stage_addr(o, stage)?;
                let s16 = x.op("shr.u32", RegClass::B32, vec![addr.into(), Operand::Imm(4)]);
                base16.push(x.descriptor_start(s16));
            }
            x.emit(Inst::WgmmaFence);
            for (g, d) in ws.gemms.iter().zip(&st.dregs) {
                x.ws_gemm(wl, g, d, &base16, wg)?;
            }
            x.emit(Inst::WgmmaCommit);
            x.emit(Inst::WgmmaWait { pending: 1 });
            let later = x.op("setp.gt.s32", RegClass::Pred, vec![kr.into(), a.into()]);
            x.ws_release(wl, prev, later);
            x.mov(prev, stage.into(), DType::I32);
            x.ws_advance(wl, stage, phase);
            Ok(())
        })?;
        self.cur().push(Stmt::For { var: kr, start: a.into(), end: b.into(), exit, uniform: true, body: lowered });
        self.emit(Inst::WgmmaWait { pending: 0 });
        let ran = self.op("setp.gt.s32", RegClass::Pred, vec![b.into(), a.into()]);
        self.ws_release(wl, prev, ran);
        Ok(())
    }

    /// One gemm of the loop body: K/16 wgmma per warpgroup and 64-row slice.
    pub(super) fn ws_gemm(&mut self, wl: &WsLowering, g: &WsGemm, d: &[Vec<Reg>], base16: &[Reg], wg: Reg) -> R<()> {
        let ws = &wl.plan;
        let (oa, ob) = (&ws.operands[g.a], &ws.operands[g.b]);
        let ab = match oa.dtype {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            t => return Err(self.err(format!("wgmma operands must be f16 or bf16, not {t}"))),
        };
        // The warpgroup's first A row (K-major) or column panel (MN-major), in 16-byte units.
        let wa = oa.swizzle.bytes() as i64;
        // Bytes from one 64-row slice of A to the next (a warpgroup has `slices`).
        let slice_step = if g.trans_a { (64 / oa.panel_cols) * oa.panel_bytes() } else { 64 * wa };
        let wg_step = slice_step * g.slices;
        let a_base =
            self.op("mad.lo.s32", RegClass::B32, vec![wg.into(), Operand::Imm(wg_step / 16), base16[g.a].into()]);
        let a64 = self.op("cvt.u64.u32", RegClass::B64, vec![a_base.into()]);
        let b64 = self.op("cvt.u64.u32", RegClass::B64, vec![base16[g.b].into()]);
        for ks in 0..g.k / 16 {
            let db = operand_desc(ob, !g.trans_b, 16 * ks).encode().map_err(|e| self.err(e))?;
            let rb = self.op("add.s64", RegClass::B64, vec![b64.into(), Operand::Imm(db as i64)]);
            for (s, ds) in d.iter().enumerate() {
                let mut desc = operand_desc(oa, g.trans_a, 16 * ks);
                desc.start += (slice_step * s as i64) as u32;
                let da = desc.encode().map_err(|e| self.err(e))?;
                let ra = self.op("add.s64", RegClass::B64, vec![a64.into(), Operand::Imm(da as i64)]);
                self.emit(Inst::Wgmma {
                    n: g.n as u32,
                    ab,
                    d: ds.clone(),
                    a: WgmmaA::Desc(ra.into()),
                    b_desc: rb.into(),
                    scale_d: Operand::Imm(!(g.clear && ks == 0) as i64),
                    neg_a: false,
                    neg_b: false,
                    trans_a: g.trans_a,
                    trans_b: !g.trans_b,
                    regions: vec![],
                });
            }
        }
        Ok(())
    }
}

/// The descriptor of the k16 slice at `k0` of operand `o`, relative to its
/// stage (and, for A, to its warpgroup's rows): `mn_major` when the
/// operand's rows are K (its columns M or N, contiguous).
fn operand_desc(o: &TmaOperand, mn_major: bool, k0: i64) -> MatrixDescriptor {
    let w = o.swizzle.bytes() as i64;
    let elem = o.dtype.size_bytes() as i64;
    let start = if mn_major { k0 * w } else { (k0 / o.panel_cols) * o.panel_bytes() + (k0 % o.panel_cols) * elem };
    let lbo = if mn_major { o.panel_bytes() } else { 16 };
    MatrixDescriptor { start: start as u32, lbo: lbo as u32, sbo: (8 * w) as u32, base_offset: 0, swizzle: o.swizzle }
}

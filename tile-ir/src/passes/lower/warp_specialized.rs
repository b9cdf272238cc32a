//! The warp-specialized schedule of a pipelined GEMM loop (sm_90a): TMA
//! loads by a producer warpgroup, wgmma by the kernel's own threads, stages
//! handed over through full/empty mbarriers.
//!
//! Expects the [`WsPlan`] of [`crate::passes::warp_specialize`] (set on the
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
//! A fresh mbarrier is in phase 0, so the producer's first `S` waits (parity
//! 1, "the phase before") return at once. Each consumer warpgroup's wgmma
//! reads the rows of A its 64 accumulator rows need and all of B, through
//! descriptors whose start is the stage's address `>> 4` plus the constant
//! offset of the k16 slice (`hopper-facts.md`: K-major SBO = 8 rows of the
//! swizzle span; MN-major LBO = the panel size). Out-of-range tiles are
//! zero-filled by TMA and still complete the full box's bytes.

use super::*;
use crate::hopper::{wgmma_d_index, ws_accumulator, MatrixDescriptor};
use crate::ir::Stmt as TStmt;
use crate::passes::warp_specialize::{TmaOperand, WsGemm, WsStore, PRODUCER_REGS};
use crate::thread_ir::WgmmaA;

/// What the producer thread carries across loops (and tiles).
struct ProducerState {
    maps: Vec<Reg>,
    stage: Reg,
    phase: Reg,
}

/// What the consumers carry across loops (and tiles).
struct ConsumerState {
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
    pub(super) fn ws_setup(&mut self) {
        let Some(ws) = self.ws else { return };
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
        self.ws_store_base = ws.operands.iter().filter_map(|o| self.shared.get(&o.buf).map(|p| p.0)).min().unwrap_or(0);
        if let (Some(st), true) = (&ws.store, ws.persistent) {
            let off = (self.smem_top + 1023) / 1024 * 1024;
            self.smem_top = off + st.panel_bytes() * (st.cols / st.panel_cols());
            self.ws_store_base = off;
        }
        // full[0..S] then empty[0..S], 8 bytes each.
        self.ws_bars = self.alloc_smem(16 * ws.stages as i64);
        for tm in ws.tensor_maps() {
            self.f.params.push((tm.param.clone(), crate::thread_ir::TENSOR_MAP_PARAM));
            self.f.tensor_maps.push(tm);
        }
        self.f.threads = ws.consumer_threads + 128;
        self.f.barrier_threads = Some(ws.consumer_threads);
        self.f.min_blocks_per_sm = Some(1);
        self.f.persistent = ws.persistent;
    }

    /// `smem + ws_bars + 8·(stage + which·S)`: full (`which` 0) or empty (1).
    fn ws_bar_addr(&mut self, stage: Reg, which: i64) -> Address {
        let stages = self.ws.map(|w| w.stages as i64).unwrap_or(1);
        let smem = self.smem;
        let base =
            self.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(self.ws_bars + 8 * stages * which)]);
        let addr = self.op("mad.lo.s32", RegClass::B32, vec![stage.into(), Operand::Imm(8), base.into()]);
        Address { base: addr.into(), offset: 0 }
    }

    /// `stage = stage + 1`, wrapping to 0 at `S` and then flipping `phase`.
    fn ws_advance(&mut self, stage: Reg, phase: Reg) {
        let stages = self.ws.map(|w| w.stages as i64).unwrap_or(1);
        let next = self.op("add.s32", RegClass::B32, vec![stage.into(), Operand::Imm(1)]);
        let wrap = self.op("setp.eq.s32", RegClass::Pred, vec![next.into(), Operand::Imm(stages)]);
        self.op_into("selp.b32", stage, vec![Operand::Imm(0), next.into(), wrap.into()]);
        let flip = self.op("selp.b32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), wrap.into()]);
        self.op_into("xor.b32", phase, vec![phase.into(), flip.into()]);
    }

    /// The stage's byte address of operand `o`: `smem + off + stage·stride`.
    fn ws_stage_addr(&mut self, o: &TmaOperand, stage: Reg) -> R<Reg> {
        let (off, _) = *self.shared.get(&o.buf).ok_or_else(|| self.err("internal: stage buffer not placed"))?;
        let stride = self.stage_stride.get(&o.buf).copied().unwrap_or(0);
        let smem = self.smem;
        let base = self.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(off)]);
        Ok(self.op("mad.lo.s32", RegClass::B32, vec![stage.into(), Operand::Imm(stride), base.into()]))
    }

    /// Thread 0 initializes the barriers; all `T + 128` threads sync.
    fn ws_init_barriers(&mut self) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let (t, stages, bars) = (ws.consumer_threads as i64, ws.stages as i64, self.ws_bars);
        let init = self.capture(|x| {
            let smem = x.smem;
            for s in 0..stages {
                x.emit(Inst::MbarInit {
                    addr: Address { base: smem.into(), offset: bars + 8 * s },
                    count: Operand::Imm(1),
                });
                x.emit(Inst::MbarInit {
                    addr: Address { base: smem.into(), offset: bars + 8 * (stages + s) },
                    count: Operand::Imm(t),
                });
            }
            x.emit(Inst::FenceMbarrierInit);
            Ok(())
        })?;
        let t0 = self.is_t0;
        self.emit_if(Some(t0), false, init, vec![]);
        self.emit(Inst::NamedBarSync { id: 0, threads: (t + 128) as u32 });
        Ok(())
    }

    /// `if tid >= T { setmaxnreg.dec; if tid == T { issue } exit }`, then
    /// the consumers' `setmaxnreg.inc`.
    fn ws_split(&mut self, issue: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let t = ws.consumer_threads as i64;
        let tid = self.tid;
        let is_producer = self.op("setp.ge.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(t)]);
        let producer = self.capture(|x| {
            x.emit(Inst::SetMaxNreg { inc: false, count: PRODUCER_REGS });
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
    pub(super) fn lower_ws_loop(&mut self, var: VarId, start: &Expr, end: &Expr, body: &[TStmt]) -> R<()> {
        let (a, b) = self.loop_bounds(start, end)?;
        self.ws_init_barriers()?;
        self.ws_split(|x| {
            let st = x.ws_producer_state()?;
            x.ws_producer_loop(&st, var, a, b, body)
        })?;
        let st = self.ws_consumer_state()?;
        self.ws_consumer_loop(&st, a, b)?;
        // Everything after the loop may reuse the stage memory that the
        // other warpgroup's last wgmmas read.
        self.emit(Inst::BarSync);
        Ok(())
    }

    /// The persistent form (see [`crate::passes::warp_specialize::WsPlan::persistent`]):
    /// the whole body (`pre`, the loop, the TMA store) runs once per tile
    /// `ctaid.x + i·nctaid.x` below the grid's block count, the block
    /// indices derived from the tile as the launch would (rasterization
    /// included); both sides carry their stage and phase across tiles, so
    /// the producer loads the next tile while the consumers store this one.
    pub(super) fn lower_ws_persistent(&mut self, body: &[TStmt]) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let store = ws.store.as_ref().ok_or_else(|| self.err("internal: a persistent plan without a TMA store"))?;
        let (pre, rest) = body.split_at(ws.loop_index);
        let StmtKind::For { var, start, end, body: loop_body, .. } = &rest[0].kind else {
            return Err(self.err("internal: the warp-specialized loop is not a loop"));
        };
        let StmtKind::Copy { dst, .. } = &body[store.index].kind else {
            return Err(self.err("internal: the TMA store is not a copy"));
        };
        // Tiles: the grid's blocks, in launch order.
        let mut g = Vec::new();
        for e in self.k.grid.clone().iter() {
            let v = self.expr(e)?;
            let v = self.convert(v, DType::I32)?;
            g.push(self.materialize(&v));
        }
        let gxy = self.op("mul.lo.s32", RegClass::B32, vec![g[0].into(), g[1].into()]);
        let total = self.op("mul.lo.s32", RegClass::B32, vec![gxy.into(), g[2].into()]);
        let cta = self.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::CtaId(0))]);
        let ncta = self.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::NctaId(0))]);
        // This block's tiles: i in 0..ceil((total - cta) / ncta).
        let left = self.op("sub.s32", RegClass::B32, vec![total.into(), cta.into()]);
        let t1 = self.op("add.s32", RegClass::B32, vec![left.into(), ncta.into()]);
        let t2 = self.op("sub.s32", RegClass::B32, vec![t1.into(), Operand::Imm(1)]);
        let count = self.op("div.s32", RegClass::B32, vec![t2.into(), ncta.into()]);
        let gx = g[0];
        self.ws_init_barriers()?;
        self.ws_split(|x| {
            let st = x.ws_producer_state()?;
            x.ws_tiles(count, cta, ncta, false, |y, tile| {
                y.ws_bind_tile(tile, gx, gxy)?;
                // Only what the copies' origins and the bounds may use: the
                // producer keeps few registers (no accumulator fills).
                for s in pre {
                    if matches!(s.kind, StmtKind::Let { .. } | StmtKind::Assign { .. }) {
                        y.stmt(s)?;
                    }
                }
                let (a, b) = y.loop_bounds(start, end)?;
                y.ws_producer_loop(&st, *var, a, b, loop_body)
            })
        })?;
        let st = self.ws_consumer_state()?;
        self.ws_tiles(count, cta, ncta, true, |x, tile| {
            x.ws_bind_tile(tile, gx, gxy)?;
            for s in pre {
                x.stmt(s)?;
            }
            let (a, b) = x.loop_bounds(start, end)?;
            x.ws_consumer_loop(&st, a, b)?;
            // The previous tile's store must have read its shared panels.
            let wait = x.capture(|y| {
                y.emit(Inst::BulkWaitRead { pending: 0 });
                Ok(())
            })?;
            let t0 = x.is_t0;
            x.emit_if(Some(t0), false, wait, vec![]);
            x.emit(Inst::BarSync);
            x.lower_ws_store(store, dst)
        })?;
        let wait = self.capture(|y| {
            y.emit(Inst::BulkWaitRead { pending: 0 });
            Ok(())
        })?;
        let t0 = self.is_t0;
        self.emit_if(Some(t0), false, wait, vec![]);
        Ok(())
    }

    /// `for i in 0..count { tile = cta + i·ncta; f(tile) }`.
    fn ws_tiles(
        &mut self,
        count: Reg,
        cta: Reg,
        ncta: Reg,
        uniform: bool,
        f: impl FnOnce(&mut Self, Reg) -> R<()>,
    ) -> R<()> {
        let i = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let body = self.capture(|x| {
            let tile = x.op("mad.lo.s32", RegClass::B32, vec![i.into(), ncta.into(), cta.into()]);
            f(x, tile)
        })?;
        self.cur().push(Stmt::For { var: i, start: Operand::Imm(0), end: count.into(), exit, uniform, body });
        Ok(())
    }

    /// Binds the block-index variables to those of linear block `tile`
    /// (`ctaid.y · gx + ctaid.x` in a launch of the whole grid), through the
    /// kernel's rasterization when it has one.
    fn ws_bind_tile(&mut self, tile: Reg, gx: Reg, gxy: Reg) -> R<()> {
        let block_var = |k: &Kernel, axis: u8| {
            k.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32))
        };
        let (vx, vy, vz) = (block_var(self.k, 0), block_var(self.k, 1), block_var(self.k, 2));
        let bz = self.op("div.u32", RegClass::B32, vec![tile.into(), gxy.into()]);
        let lin = self.op("rem.u32", RegClass::B32, vec![tile.into(), gxy.into()]);
        if let Some(v) = vz {
            self.vars.insert(v, bz);
        }
        match (self.k.rasterize, vx, vy) {
            (Some(panel), Some(x), Some(y)) => {
                // `rasterize_exprs` over the linear id, held in `x`'s slot.
                self.vars.insert(x, lin);
                let (ex, ey) = crate::abi::rasterize_exprs(panel, &self.k.grid[0], &self.k.grid[1], &Expr::Var(x));
                let nx = self.expr(&ex)?;
                let nx = self.materialize(&nx);
                let ny = self.expr(&ey)?;
                let ny = self.materialize(&ny);
                self.vars.insert(x, nx);
                self.vars.insert(y, ny);
            }
            _ => {
                let bx = self.op("rem.u32", RegClass::B32, vec![lin.into(), gx.into()]);
                let by = self.op("div.u32", RegClass::B32, vec![lin.into(), gx.into()]);
                if let Some(v) = vx {
                    self.vars.insert(v, bx);
                }
                if let Some(v) = vy {
                    self.vars.insert(v, by);
                }
            }
        }
        Ok(())
    }

    /// The producer's tensor map addresses and its stage/phase counters.
    fn ws_producer_state(&mut self) -> R<ProducerState> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let mut maps = Vec::new();
        for tm in ws.tensor_maps().iter().take(ws.operands.len()) {
            let r = self.new_reg(RegClass::B64);
            self.emit(Inst::TensorMapAddr { dst: r, param: tm.param.clone() });
            maps.push(r);
        }
        let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(stage, Operand::Imm(0), DType::I32);
        self.mov(phase, Operand::Imm(0), DType::I32);
        Ok(ProducerState { maps, stage, phase })
    }

    /// The producer thread's loop over `a..b`: wait for a free stage, then TMA.
    fn ws_producer_loop(&mut self, st: &ProducerState, var: VarId, a: Reg, b: Reg, body: &[TStmt]) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let stage_bytes: i64 = ws.operands.iter().map(|o| o.stage_bytes()).sum();
        let (stage, phase) = (st.stage, st.phase);
        let kr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let saved = self.vars.insert(var, kr);
        let lowered = self.capture(|x| {
            let empty = x.ws_bar_addr(stage, 1);
            let parity = x.op("xor.b32", RegClass::B32, vec![phase.into(), Operand::Imm(1)]);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait { addr: empty, parity: parity.into(), pred: p });
            let full = x.ws_bar_addr(stage, 0);
            x.emit(Inst::MbarArriveExpectTx { addr: full.clone(), tx_bytes: Operand::Imm(stage_bytes) });
            for (o, map) in ws.operands.iter().zip(&st.maps) {
                let StmtKind::Copy { src, .. } = &body[o.copy].kind else {
                    return Err(x.err("internal: warp-specialized operand is not a copy"));
                };
                let mut origin = Vec::new();
                for e in &src.origin {
                    let v = x.expr(e)?;
                    let v = x.convert(v, DType::I32)?;
                    origin.push(x.materialize(&v));
                }
                let dst = x.ws_stage_addr(o, stage)?;
                for (off, dr, dc) in o.boxes() {
                    let col = x.add_i32(origin[1].into(), Operand::Imm(dc));
                    let row = x.add_i32(origin[0].into(), Operand::Imm(dr));
                    x.emit(Inst::TmaLoad {
                        dst: Address { base: dst.into(), offset: off },
                        tmap: (*map).into(),
                        coords: vec![col, row],
                        mbar: full.clone(),
                        cache_hint: None,
                        cta_dst: false,
                        region: None,
                    });
                }
            }
            x.ws_advance(stage, phase);
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
    fn ws_consumer_state(&mut self) -> R<ConsumerState> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
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
        let wg = self.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
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
    fn ws_consumer_loop(&mut self, st: &ConsumerState, a: Reg, b: Reg) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let (stage, phase, prev, wg) = (st.stage, st.phase, st.prev, st.wg);
        let kr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let lowered = self.capture(|x| {
            let full = x.ws_bar_addr(stage, 0);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait { addr: full, parity: phase.into(), pred: p });
            // Stage addresses >> 4 (descriptor start units), per operand.
            let mut base16 = Vec::new();
            for o in &ws.operands {
                let addr = x.ws_stage_addr(o, stage)?;
                let s16 = x.op("shr.u32", RegClass::B32, vec![addr.into(), Operand::Imm(4)]);
                base16.push(s16);
            }
            x.emit(Inst::WgmmaFence);
            for (g, d) in ws.gemms.iter().zip(&st.dregs) {
                x.ws_gemm(g, d, &base16, wg)?;
            }
            x.emit(Inst::WgmmaCommit);
            x.emit(Inst::WgmmaWait { pending: 1 });
            let later = x.op("setp.gt.s32", RegClass::Pred, vec![kr.into(), a.into()]);
            let empty = x.ws_bar_addr(prev, 1);
            x.emit_guarded(Inst::MbarArrive { addr: empty }, Some((later, false)));
            x.mov(prev, stage.into(), DType::I32);
            x.ws_advance(stage, phase);
            Ok(())
        })?;
        self.cur().push(Stmt::For { var: kr, start: a.into(), end: b.into(), exit, uniform: true, body: lowered });
        self.emit(Inst::WgmmaWait { pending: 0 });
        let ran = self.op("setp.gt.s32", RegClass::Pred, vec![b.into(), a.into()]);
        let empty = self.ws_bar_addr(prev, 1);
        self.emit_guarded(Inst::MbarArrive { addr: empty }, Some((ran, false)));
        Ok(())
    }

    /// One gemm of the loop body: K/16 wgmma per warpgroup and 64-row slice.
    fn ws_gemm(&mut self, g: &WsGemm, d: &[Vec<Reg>], base16: &[Reg], wg: Reg) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
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

impl Lx<'_> {
    /// The accumulator → tensor copy after the loop as a TMA store (see
    /// [`crate::passes::warp_specialize::WsStore`]): each consumer thread
    /// rounds its accumulator pairs and writes them into 128B-swizzled
    /// shared panels laid over the stage buffers (dead: the loop ended with
    /// a consumer barrier after every wgmma completed, and the producer has
    /// issued its last load, which the consumers waited for); a proxy fence
    /// and a barrier later, thread 0 stores each panel with one TMA box and
    /// waits until the boxes have been read out of shared memory.
    pub(super) fn lower_ws_store(&mut self, st: &WsStore, dst: &crate::ir::TileRef) -> R<()> {
        let ws = self.ws.ok_or_else(|| self.err("internal: no warp-specialization plan"))?;
        let g =
            ws.gemms.iter().find(|g| g.c == st.acc).ok_or_else(|| self.err("internal: store of a non-accumulator"))?;
        let base = self.ws_store_base;
        let cvt = match st.dtype {
            DType::F16 => "cvt.rn.f16x2.f32",
            DType::BF16 => "cvt.rn.bf16x2.f32",
            t => return Err(self.err(format!("internal: TMA store of {t}"))),
        };
        let want = FragLayout::full(ws_accumulator(st.rows, st.cols, ws.consumer_threads).map_err(|e| self.err(e))?);
        let slices = g.slices;
        let creg = self.frags.get(&st.acc).cloned().unwrap_or_default();
        if creg.len() != want.num_regs() {
            return Err(self.err("internal: the stored accumulator has no registers"));
        }
        // Thread t (warpgroup j, warp w in it) holds rows
        // r = 64·slices·j + 64·s + 16·w + lane/4 (+ 8) and columns
        // 8c + 2·(lane%4) (+ 1); r % 8 = lane/4 picks the swizzle.
        let tid = self.tid;
        let smem = self.smem;
        let wgi = self.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
        let warp_t = self.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(5)]);
        let warp = self.op("and.b32", RegClass::B32, vec![warp_t.into(), Operand::Imm(3)]);
        let lane = self.op("and.b32", RegClass::B32, vec![tid.into(), Operand::Imm(31)]);
        let g8 = self.op("shr.u32", RegClass::B32, vec![lane.into(), Operand::Imm(2)]);
        let q = self.op("and.b32", RegClass::B32, vec![lane.into(), Operand::Imm(3)]);
        let row0 = self.op("mad.lo.s32", RegClass::B32, vec![warp.into(), Operand::Imm(16), g8.into()]);
        let row = self.op("mad.lo.s32", RegClass::B32, vec![wgi.into(), Operand::Imm(64 * slices), row0.into()]);
        // row·128 + 4q + smem + base
        let r128 = self.op("shl.b32", RegClass::B32, vec![row.into(), Operand::Imm(7)]);
        let t0 = self.op("mad.lo.s32", RegClass::B32, vec![q.into(), Operand::Imm(4), r128.into()]);
        let t1 = self.op("add.s32", RegClass::B32, vec![t0.into(), smem.into()]);
        let rowbase = self.op("add.s32", RegClass::B32, vec![t1.into(), Operand::Imm(base)]);
        // Per 16-byte chunk index c (0..8) of a panel row: ((c ^ g) << 4) + rowbase.
        let mut chunk = Vec::new();
        for c in 0..8 {
            let x = self.op("xor.b32", RegClass::B32, vec![g8.into(), Operand::Imm(c)]);
            chunk.push(self.op("mad.lo.s32", RegClass::B32, vec![x.into(), Operand::Imm(16), rowbase.into()]));
        }
        let pc = st.panel_cols();
        for s in 0..slices {
            for j in 0..st.cols / 8 {
                for half in 0..2 {
                    let lo = creg[want.flatten(&[2 * s + half, 2 * j])];
                    let hi = creg[want.flatten(&[2 * s + half, 2 * j + 1])];
                    let w = self.op(cvt, RegClass::B32, vec![hi.into(), lo.into()]);
                    // Column 8j: panel (8j) / pc, chunk (8j % pc) / 8.
                    let panel = (8 * j) / pc;
                    let c = ((8 * j) % pc) / 8;
                    let offset = panel * st.panel_bytes() + (64 * s + 8 * half) * 128;
                    let addr = Address { base: chunk[c as usize].into(), offset };
                    self.emit(Inst::St { space: Space::Shared, ty: "b32", srcs: vec![w.into()], addr, region: None });
                }
            }
        }
        self.emit(Inst::FenceProxyAsync);
        self.emit(Inst::BarSync);
        // Thread 0: one TMA box per panel.
        let map_index = ws.operands.len();
        let param = ws
            .tensor_maps()
            .get(map_index)
            .map(|m| m.param.clone())
            .ok_or_else(|| self.err("internal: no store map"))?;
        let mut origin = Vec::new();
        for e in &dst.origin {
            let v = self.expr(e)?;
            let v = self.convert(v, DType::I32)?;
            origin.push(self.materialize(&v));
        }
        let issue = self.capture(|x| {
            let map = x.new_reg(RegClass::B64);
            x.emit(Inst::TensorMapAddr { dst: map, param });
            let src0 = x.op("add.s32", RegClass::B32, vec![smem.into(), Operand::Imm(base)]);
            for p in 0..st.cols / pc {
                let col = x.add_i32(origin[1].into(), Operand::Imm(p * pc));
                x.emit(Inst::TmaStore {
                    tmap: map.into(),
                    coords: vec![col, origin[0].into()],
                    src: Address { base: src0.into(), offset: p * st.panel_bytes() },
                    region: None,
                });
            }
            x.emit(Inst::BulkCommit);
            if !ws.persistent {
                // (Persistent: waited for before the next tile's store and at the end.)
                x.emit(Inst::BulkWaitRead { pending: 0 });
            }
            Ok(())
        })?;
        let t0p = self.is_t0;
        self.emit_if(Some(t0p), false, issue, vec![]);
        Ok(())
    }
}

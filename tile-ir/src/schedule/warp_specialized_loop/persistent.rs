//! The persistent variant of the warp-specialized loop
//! (`warp_specialized_loop_persistent`, [`super::plan_persistent`]): each
//! block runs the grid's blocks as tiles, so that the producer loads the
//! next tile's Q, K and V while the consumers finish this one (its last
//! iterations, its epilogue) and the pipeline fill and drain are paid once
//! per block rather than once per tile.
//!
//! Expects the plan of [`super::plan_persistent`] in the [`WslLowering`]
//! (the lowering core then leaves the block indices to this file:
//! `ScheduleLowering::binds_block_indices`) and a layout plan whose epilogue
//! scratches alias no buffer (`super::compile_planned` drops the aliases: the
//! producer rewrites the stages and Q while a tile's epilogue runs).
//!
//! Guarantees (`G = gx·gy·gz` the grid's blocks, in launch order: linear
//! tile `t` is the block `abi::unfold(t)` of a launch of the whole grid,
//! rasterization included, so each tile computes what that block computes),
//! with the dynamic tile scheduler: a block's first tile is `ctaid.x`, each
//! next one `nctaid.x + atomicAdd(counter, 1)` (the counter,
//! `abi::TILE_COUNTER_PARAM`, reads 0 at the launch: each tile `≥ nctaid.x`
//! is taken exactly once, in launch order, by the block that asks first;
//! a null counter gives `t + nctaid.x`, the static stride):
//! ```text
//! thread 0: init the rings, pre (1 arrival), pre_empty (T arrivals)    // once
//! producer thread T: st, ph = 0, 0; t = ctaid.x                        // carried across tiles
//!     for i in 0..: wait pre_empty parity (i & 1) ^ 1                    // tile i − 1's slot read, its Q released
//!         slot = t < G ? t : −1
//!         if t ≥ G: arrive pre; end                                    // the sentinel
//!         block indices of t; its `let`s
//!         arrive.expect_tx pre; the pre-loop copies' boxes (Q of t)    // (plain arrive without pre-loop copies)
//!         for k in a(t)..b(t): the ring's waits and boxes (st, ph advance)
//!         t = fetch (atom.global.add, once t's loads are issued)
//! consumers: st, ph = 0, 0                                             // carried across tiles
//!     take: wait pre parity i & 1; t = slot (no pre-loop copies: arrive pre_empty)
//!     take (i = 0); for i in 0.. while t ≥ 0: block indices of t
//!         the statements before the loop (a pre-loop copy: nothing, its phase of pre was waited for)
//!         the consumers' loop over a(t)..b(t) (`lower.rs`/`defer.rs`), then its bar.sync 1, T
//!         arrive pre_empty                                              // after the last statement reading Q
//!         the statements after the loop (the epilogue)
//!         take (i + 1)
//! ```
//! Every phase of `pre` completes once per tile and once for the sentinel,
//! every phase of `pre_empty` once per tile (and, without pre-loop copies,
//! for the sentinel, which nobody waits for: complete, not pending); the
//! producer's write of the slot for tile `i` waits for the consumers'
//! arrival of tile `i − 1` (parity `(i − 1) & 1`; tile 0's wait, parity 1,
//! returns at once on the fresh barrier), which comes after their read of
//! that slot, so it is never more than one phase ahead of a waiter and
//! never overwrites an index not yet read. Both sides see the same tiles
//! and, per tile, the same iterations, so the rings' counts and parities
//! are those of one long loop over all the tiles' iterations (`lower.rs`'s
//! proof, for any trip counts, 0 included). The ping-pong (`lower.rs`) is
//! balanced per tile and its barriers are idle after the loop's
//! `bar.sync 1, T`, so each tile starts with warpgroup 0's turn. Shared
//! memory the consumers alone use (an epilogue's scratch) is ordered
//! across tiles by the barrier pass, which follows the tile loop's
//! back-edge.

use super::lower::WslLowering;
use crate::ir::{DType, Expr, Stmt as TStmt, VarId, VarKind};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::touches_memory;
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Space, Special, Stmt};

impl Lx<'_> {
    /// The grid's blocks `G = gx·gy·gz` (the tiles).
    fn wsl_total_tiles(&mut self) -> R<Reg> {
        let mut g = Vec::new();
        for e in self.k.grid.clone().iter() {
            let v = self.expr(e)?;
            let v = self.convert(v, DType::I32)?;
            g.push(self.materialize(&v));
        }
        let gxy = self.op("mul.lo.s32", RegClass::B32, vec![g[0].into(), g[1].into()]);
        Ok(self.op("mul.lo.s32", RegClass::B32, vec![gxy.into(), g[2].into()]))
    }

    /// Binds the kernel's block-index variables to those of linear tile
    /// `tile` (`abi::unfold_exprs`, rasterization included: the block a
    /// launch of the whole grid gives linear id `tile`).
    fn wsl_bind_tile(&mut self, tile: Reg) -> R<()> {
        let block_var =
            |axis: u8| self.k.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32));
        let vars = [block_var(0), block_var(1), block_var(2)];
        let Some(slot) = vars.iter().flatten().next().copied() else { return Ok(()) };
        let grid = self.k.grid.clone();
        let panel = if vars[0].is_some() && vars[1].is_some() { self.k.rasterize } else { None };
        let exprs = crate::abi::unfold_exprs(panel, &grid, &Expr::Var(slot));
        self.vars.insert(slot, tile);
        let mut regs = [None; 3];
        for a in 0..3 {
            if vars[a].is_some() {
                let v = self.expr(&exprs[a])?;
                let v = self.convert(v, DType::I32)?;
                regs[a] = Some(self.materialize(&v));
            }
        }
        for (v, r) in vars.iter().zip(regs) {
            if let (Some(v), Some(r)) = (v, r) {
                self.vars.insert(*v, r);
            }
        }
        Ok(())
    }

    /// `for i in 0..limit` with `limit` a register the body sets to 0 to
    /// end the loop after this iteration (it starts at `i32::MAX`, or 0 when
    /// `first` is given and false: no tile at all).
    fn wsl_open_loop(
        &mut self,
        uniform: bool,
        first: Option<Reg>,
        f: impl FnOnce(&mut Self, Reg, Reg) -> R<()>,
    ) -> R<()> {
        let i = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let limit = self.new_reg(RegClass::B32);
        match first {
            Some(p) => self.op_into("selp.b32", limit, vec![Operand::Imm(i32::MAX as i64), Operand::Imm(0), p.into()]),
            None => self.mov(limit, Operand::Imm(i32::MAX as i64), DType::I32),
        }
        let body = self.capture(|x| f(x, i, limit))?;
        self.cur().push(Stmt::For { var: i, start: Operand::Imm(0), end: limit.into(), exit, uniform, body });
        Ok(())
    }

    /// The producer thread of the persistent variant (see the module doc).
    /// The caller restores the variable bindings afterwards.
    pub(super) fn wsl_producer_tiles(&mut self, wl: &WslLowering) -> R<()> {
        let ws = &wl.plan;
        let k = self.k;
        let maps = self.wsl_tensor_map_addrs(wl);
        let smem = self.smem;
        let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(stage, Operand::Imm(0), DType::I32);
        self.mov(phase, Operand::Imm(0), DType::I32);
        let counter = self.new_reg(RegClass::B64);
        self.emit(Inst::LdParam { ty: "u64", dst: counter, name: crate::abi::TILE_COUNTER_PARAM.to_string() });
        let is_static = self.op("setp.eq.u64", RegClass::Pred, vec![counter.into(), Operand::Imm(0)]);
        let counter = self.op("cvta.to.global.u64", RegClass::B64, vec![counter.into()]);
        let total = self.wsl_total_tiles()?;
        let tile = self.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::CtaId(0))]);
        self.wsl_open_loop(false, None, |x, i, limit| {
            // The consumers read the previous tile's index (and released its Q).
            let low = x.op("and.b32", RegClass::B32, vec![i.into(), Operand::Imm(1)]);
            let parity = x.op("xor.b32", RegClass::B32, vec![low.into(), Operand::Imm(1)]);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait {
                addr: Address { base: smem.into(), offset: wl.pre_empty_bar() },
                parity: parity.into(),
                pred: p,
            });
            let valid = x.op("setp.lt.s32", RegClass::Pred, vec![tile.into(), total.into()]);
            let handed = x.op("selp.b32", RegClass::B32, vec![tile.into(), Operand::Imm(-1), valid.into()]);
            x.emit(Inst::St {
                space: Space::Shared,
                ty: "b32",
                srcs: vec![handed.into()],
                addr: Address { base: smem.into(), offset: wl.tile_slot() },
                region: None,
            });
            let work = x.capture(|y| {
                y.wsl_bind_tile(tile)?;
                for &l in &ws.producer_lets {
                    y.stmt(&k.body[l])?;
                }
                if wl.has_pre_copies() {
                    y.wsl_producer_pre_copies(wl)?;
                } else {
                    y.emit(Inst::MbarArrive { addr: Address { base: smem.into(), offset: wl.pre_bar() } });
                }
                let bounds = y.wsl_producer_bounds(wl)?;
                y.wsl_producer_loop(wl, &maps, (stage, phase), bounds)?;
                // The next tile, claimed once this one's loads are issued:
                // `nctaid.x + atomicAdd(counter, 1)` (launch order, each
                // tile once), or `tile + nctaid.x` with a null counter.
                // The producer is then at most `stages` iterations ahead of
                // the consumers, so the claim reflects when this block will
                // be free (claimed at the tile's start, the next tile went to
                // blocks in the order they started: longest-first orders
                // and the row blocks sharing KV in L2 fell apart, MLA b128
                // read 10 % more from DRAM), and its latency still hides
                // behind the consumers' last iterations.
                let ncta = y.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::NctaId(0))]);
                let taken = y.new_reg(RegClass::B32);
                y.mov(taken, Operand::Imm(0), DType::I32);
                y.emit_guarded(
                    Inst::AtomAdd {
                        space: Space::Global,
                        ty: "u32",
                        dst: taken,
                        addr: Address { base: counter.into(), offset: 0 },
                        src: Operand::Imm(1),
                    },
                    Some((is_static, true)),
                );
                let dynamic = y.op("add.s32", RegClass::B32, vec![taken.into(), ncta.into()]);
                let strided = y.op("add.s32", RegClass::B32, vec![tile.into(), ncta.into()]);
                let next = y.op("selp.b32", RegClass::B32, vec![strided.into(), dynamic.into(), is_static.into()]);
                y.mov(tile, next.into(), DType::I32);
                Ok(())
            })?;
            // The sentinel: the consumers' last wait completes, both sides end.
            let last = x.capture(|y| {
                y.emit(Inst::MbarArrive { addr: Address { base: smem.into(), offset: wl.pre_bar() } });
                y.mov(limit, Operand::Imm(0), DType::I32);
                Ok(())
            })?;
            x.emit_if(Some(valid), false, work, last);
            Ok(())
        })
    }

    /// The consumers' read of the next tile's index: the wait for `pre`'s
    /// phase `phase_of` (a tile counter, its low bit the parity), the load of
    /// the slot, and, with no pre-loop copies, the release of the slot.
    fn wsl_consumer_take_tile(&mut self, wl: &WslLowering, phase_of: Operand) -> Reg {
        let smem = self.smem;
        let parity = match phase_of {
            Operand::Imm(n) => Operand::Imm(n & 1),
            other => self.op("and.b32", RegClass::B32, vec![other, Operand::Imm(1)]).into(),
        };
        let p = self.new_reg(RegClass::Pred);
        self.emit(Inst::MbarWait { addr: Address { base: smem.into(), offset: wl.pre_bar() }, parity, pred: p });
        let tile = self.new_reg(RegClass::B32);
        self.emit(Inst::Ld {
            space: Space::Shared,
            ty: "b32",
            dsts: vec![tile],
            addr: Address { base: smem.into(), offset: wl.tile_slot() },
            region: None,
        });
        if !wl.has_pre_copies() {
            self.emit(Inst::MbarArrive { addr: Address { base: smem.into(), offset: wl.pre_empty_bar() } });
        }
        tile
    }

    /// The consumers of the persistent variant: the kernel's body once per
    /// tile (see the module doc).
    pub(super) fn lower_wsl_consumer_tiles(&mut self, wl: &WslLowering, body: &[TStmt]) -> R<()> {
        let ws = &wl.plan;
        let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(stage, Operand::Imm(0), DType::I32);
        self.mov(phase, Operand::Imm(0), DType::I32);
        wl.ring_regs.set(Some((stage, phase)));
        // Q is released after the last top-level statement that touches a
        // pre-loop copy's buffer, the loop at the earliest.
        let pre = wl.pre_buffers();
        let release_after = (0..body.len())
            .filter(|&i| {
                i >= ws.loop_index
                    && (i == ws.loop_index
                        || pre.iter().any(|&b| {
                            let (r, w) = touches_memory(self.k, &body[i], b);
                            r || w
                        }))
            })
            .max()
            .unwrap_or(ws.loop_index);
        let first = self.wsl_consumer_take_tile(wl, Operand::Imm(0));
        let tile = self.new_reg(RegClass::B32);
        self.mov(tile, first.into(), DType::I32);
        let any = self.op("setp.ge.s32", RegClass::Pred, vec![first.into(), Operand::Imm(0)]);
        let result = self.wsl_open_loop(true, Some(any), |x, i, limit| {
            x.wsl_bind_tile(tile)?;
            wl.tile.set(Some(i));
            x.lower_block_in_place(&body[..=release_after]);
            if wl.has_pre_copies() {
                let smem = x.smem;
                x.emit(Inst::MbarArrive { addr: Address { base: smem.into(), offset: wl.pre_empty_bar() } });
            }
            x.lower_block_in_place(&body[release_after + 1..]);
            // The next tile (phase i + 1), or the sentinel (< 0): the end.
            let next_phase = x.op("add.s32", RegClass::B32, vec![i.into(), Operand::Imm(1)]);
            let next = x.wsl_consumer_take_tile(wl, next_phase.into());
            x.mov(tile, next.into(), DType::I32);
            let more = x.op("setp.ge.s32", RegClass::Pred, vec![next.into(), Operand::Imm(0)]);
            x.op_into("selp.b32", limit, vec![limit.into(), Operand::Imm(0), more.into()]);
            Ok(())
        });
        wl.tile.set(None);
        wl.ring_regs.set(None);
        result
    }
}

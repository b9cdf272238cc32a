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
//! rasterization included, so each tile computes what that block computes;
//! `n = ⌈(G − ctaid.x) / nctaid.x⌉` tiles per block, 0 when `ctaid.x ≥ G`):
//! ```text
//! thread 0: init the rings, pre (1 arrival), pre_empty (T arrivals)    // once
//! producer thread T: st, ph = 0, 0                                     // carried across tiles
//!     for i in 0..n: t = ctaid.x + i·nctaid.x; block indices of t; its `let`s
//!         wait pre_empty parity (i & 1) ^ 1                             // tile i − 1's Q released
//!         arrive.expect_tx pre; the pre-loop copies' boxes (Q of t)
//!         for k in a(t)..b(t): the ring's waits and boxes (st, ph advance)
//! consumers: st, ph = 0, 0                                             // carried across tiles
//!     for i in 0..n: t = ctaid.x + i·nctaid.x; block indices of t
//!         the statements before the loop, a pre-loop copy replaced by: wait pre parity i & 1
//!         the consumers' loop over a(t)..b(t) (`lower.rs`/`defer.rs`), then its bar.sync 1, T
//!         arrive pre_empty                                              // after the last statement reading Q
//!         the statements after the loop (the epilogue)
//! ```
//! Every phase of `pre` and `pre_empty` completes once per tile, and the
//! producer's tile `i` waits for the consumers' release of tile `i − 1`
//! (parity `(i − 1) & 1`; tile 0's wait, parity 1, returns at once on the
//! fresh barrier), so it is never more than one phase ahead of a waiter.
//! Both sides run the same tiles and, per tile, the same iterations, so the
//! rings' counts and parities are those of one long loop over all the
//! tiles' iterations (`lower.rs`'s proof, for any trip counts, 0 included).
//! The ping-pong (`lower.rs`) is balanced per tile and its barriers are idle
//! after the loop's `bar.sync 1, T`, so each tile starts with warpgroup 0's
//! turn. Shared memory the consumers alone use (an epilogue's scratch) is
//! ordered across tiles by the barrier pass, which follows the tile loop's
//! back-edge.

use super::lower::WslLowering;
use crate::ir::{DType, Expr, Stmt as TStmt, VarId, VarKind};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::touches_memory;
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Special, Stmt};

impl Lx<'_> {
    /// This block's tile count `n` (see the module doc).
    fn wsl_tile_count(&mut self) -> R<Reg> {
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
        // ⌈(G − cta) / ncta⌉, with G − cta > −ncta (so 0 when cta ≥ G).
        let left = self.op("sub.s32", RegClass::B32, vec![total.into(), cta.into()]);
        let up = self.op("add.s32", RegClass::B32, vec![left.into(), ncta.into()]);
        let up = self.op("sub.s32", RegClass::B32, vec![up.into(), Operand::Imm(1)]);
        Ok(self.op("div.s32", RegClass::B32, vec![up.into(), ncta.into()]))
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

    /// `for i in 0..count { f(i, ctaid.x + i·nctaid.x) }` (`uniform`: the
    /// consumers' loop, which may hold barriers). `ctaid.x` and `nctaid.x`
    /// are read again in each tile rather than kept live across it (the
    /// epilogue of head dim 256 has no register to spare).
    fn wsl_tiles(&mut self, count: Reg, uniform: bool, f: impl FnOnce(&mut Self, Reg, Reg) -> R<()>) -> R<()> {
        let i = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let body = self.capture(|x| {
            let cta = x.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::CtaId(0))]);
            let ncta = x.op("mov.u32", RegClass::B32, vec![Operand::Special(Special::NctaId(0))]);
            let tile = x.op("mad.lo.s32", RegClass::B32, vec![i.into(), ncta.into(), cta.into()]);
            f(x, i, tile)
        })?;
        self.cur().push(Stmt::For { var: i, start: Operand::Imm(0), end: count.into(), exit, uniform, body });
        Ok(())
    }

    /// The producer thread of the persistent variant (see the module doc).
    /// The caller restores the variable bindings afterwards.
    pub(super) fn wsl_producer_tiles(&mut self, wl: &WslLowering) -> R<()> {
        let ws = &wl.plan;
        let k = self.k;
        let maps = self.wsl_tensor_map_addrs(wl);
        let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(stage, Operand::Imm(0), DType::I32);
        self.mov(phase, Operand::Imm(0), DType::I32);
        let tiles = self.wsl_tile_count()?;
        self.wsl_tiles(tiles, false, |x, i, tile| {
            x.wsl_bind_tile(tile)?;
            for &l in &ws.producer_lets {
                x.stmt(&k.body[l])?;
            }
            if wl.has_pre_copies() {
                // The consumers released the previous tile's Q.
                let low = x.op("and.b32", RegClass::B32, vec![i.into(), Operand::Imm(1)]);
                let parity = x.op("xor.b32", RegClass::B32, vec![low.into(), Operand::Imm(1)]);
                let smem = x.smem;
                let p = x.new_reg(RegClass::Pred);
                x.emit(Inst::MbarWait {
                    addr: Address { base: smem.into(), offset: wl.pre_empty_bar() },
                    parity: parity.into(),
                    pred: p,
                });
                x.wsl_producer_pre_copies(wl)?;
            }
            let bounds = x.wsl_producer_bounds(wl)?;
            x.wsl_producer_loop(wl, &maps, (stage, phase), bounds)
        })
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
        let tiles = self.wsl_tile_count()?;
        let result = self.wsl_tiles(tiles, true, |x, i, tile| {
            x.wsl_bind_tile(tile)?;
            wl.tile.set(Some(i));
            x.lower_block_in_place(&body[..=release_after]);
            if wl.has_pre_copies() {
                let smem = x.smem;
                x.emit(Inst::MbarArrive { addr: Address { base: smem.into(), offset: wl.pre_empty_bar() } });
            }
            x.lower_block_in_place(&body[release_after + 1..]);
            Ok(())
        });
        wl.tile.set(None);
        wl.ring_regs.set(None);
        result
    }
}

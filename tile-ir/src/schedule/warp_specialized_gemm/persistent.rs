//! The persistent option of the warp-specialized GEMM
//! ([`super::WsPlan::persistent`]): the whole body (the statements before
//! the loop, the loop, the TMA store) runs once per tile
//! `ctaid.x + i·nctaid.x` below the grid's block count.
//!
//! Expects a plan whose kernel is exactly those statements and whose stage
//! buffers, store panels and barriers fit side by side (the store's panels
//! apart from the stages, `lower.rs`'s setup places them so). Guarantees
//! that the block indices of each tile are the ones the launch of the whole
//! grid would give it (rasterization included), and that the producer may
//! load the next tile while the consumers store this one: both sides carry
//! their stage and phase across tiles, and each store waits until the
//! previous tile's store has read its shared panels.

use super::lower::WsLowering;
use crate::ir::{DType, Expr, Kernel, Stmt as TStmt, StmtKind, VarId, VarKind};
use crate::passes::lower::{Lx, R};
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Special, Stmt};

impl Lx<'_> {
    /// The persistent form (see [`super::WsPlan::persistent`]):
    /// the whole body (`pre`, the loop, the TMA store) runs once per tile
    /// `ctaid.x + i·nctaid.x` below the grid's block count, the block
    /// indices derived from the tile as the launch would (rasterization
    /// included); both sides carry their stage and phase across tiles, so
    /// the producer loads the next tile while the consumers store this one.
    pub(super) fn lower_ws_persistent(&mut self, wl: &WsLowering, body: &[TStmt]) -> R<()> {
        let ws = &wl.plan;
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
        self.ws_init_barriers(wl)?;
        self.ws_split(wl, |x| {
            let st = x.ws_producer_state(wl)?;
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
                y.ws_producer_loop(wl, &st, *var, a, b, loop_body)
            })
        })?;
        let st = self.ws_consumer_state(wl)?;
        self.ws_tiles(count, cta, ncta, true, |x, tile| {
            x.ws_bind_tile(tile, gx, gxy)?;
            for s in pre {
                x.stmt(s)?;
            }
            let (a, b) = x.loop_bounds(start, end)?;
            x.ws_consumer_loop(wl, &st, a, b)?;
            // The previous tile's store must have read its shared panels.
            let wait = x.capture(|y| {
                y.emit(Inst::BulkWaitRead { pending: 0 });
                Ok(())
            })?;
            let t0 = x.is_t0;
            x.emit_if(Some(t0), false, wait, vec![]);
            x.emit(Inst::BarSync);
            x.lower_ws_store(wl, store, dst)
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
    pub(super) fn ws_tiles(
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
    pub(super) fn ws_bind_tile(&mut self, tile: Reg, gx: Reg, gxy: Reg) -> R<()> {
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
}

//! The TMA-store option of the warp-specialized GEMM
//! ([`crate::CompileOptions::tma_store`], [`super::WsStore`]): the copy of
//! the accumulator right after the loop, through 128B-swizzled shared
//! panels and one TMA box per panel.
//!
//! Expects the consumers' accumulator in the wgmma layout and the stage
//! buffers dead (the loop ended with a consumer barrier after every wgmma
//! completed). Guarantees the tensor gets the accumulator rounded to its
//! element type, out-of-range elements not written, and (not persistent)
//! the panels read out before the copy's code ends.

use super::lower::WsLowering;
use super::plan::WsStore;
use crate::hopper::ws_accumulator;
use crate::ir::DType;
use crate::layout::FragLayout;
use crate::passes::lower::{Lx, R};
use crate::thread_ir::{Address, Inst, Operand, RegClass, Space};

impl Lx<'_> {
    /// The accumulator → tensor copy after the loop as a TMA store (see
    /// [`super::WsStore`]): each consumer thread
    /// rounds its accumulator pairs and writes them into 128B-swizzled
    /// shared panels laid over the stage buffers (dead: the loop ended with
    /// a consumer barrier after every wgmma completed, and the producer has
    /// issued its last load, which the consumers waited for); a proxy fence
    /// and a barrier later, thread 0 stores each panel with one TMA box and
    /// waits until the boxes have been read out of shared memory.
    pub(super) fn lower_ws_store(&mut self, wl: &WsLowering, st: &WsStore, dst: &crate::ir::TileRef) -> R<()> {
        let ws = &wl.plan;
        let g =
            ws.gemms.iter().find(|g| g.c == st.acc).ok_or_else(|| self.err("internal: store of a non-accumulator"))?;
        let base = wl.store_base.get();
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

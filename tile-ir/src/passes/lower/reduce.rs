//! Reductions of a fragment along one dimension: registers, then warp
//! shuffles, then shared memory across warps, through one scratch region
//! that all the kernel's reductions share ([`Lx::reduce_scratch`]).

use super::*;

impl<'a> Lx<'a> {
    /// The cross-warp scratch of a reduction: one region of shared memory
    /// (one barrier region) that every reduction of the kernel reuses, sized
    /// for the largest: `bytes` at its start. The first reduction allocates
    /// it; a larger one grows it in place when nothing was allocated after
    /// it, else moves it to fresh memory of the new size (the old bytes stay
    /// unused). Every reuse is a dependence on the one region, so barrier
    /// insertion orders a reduction's writes after the previous one's reads
    /// (write-after-read across warps).
    pub(crate) fn reduce_scratch(&mut self, bytes: i64) -> (i64, u32) {
        match self.reduce_scratch {
            Some((off, size, id)) if bytes <= size => (off, id),
            Some((off, size, id)) if off + size == self.smem_top => {
                self.smem_top = off + bytes;
                self.reduce_scratch = Some((off, bytes, id));
                (off, id)
            }
            other => {
                let off = self.alloc_smem(bytes);
                let id = other.map(|(_, _, id)| id).unwrap_or_else(|| {
                    self.next_region += 1;
                    self.next_region - 1
                });
                self.reduce_scratch = Some((off, bytes, id));
                (off, id)
            }
        }
    }

    pub(crate) fn lower_reduce(&mut self, op: ReduceOp, src: BufferId, dst: BufferId, dim: usize, keep: bool) -> R<()> {
        let (sb, db) = (self.k.buffer(src), self.k.buffer(dst));
        if sb.scope != Scope::Fragment || db.scope != Scope::Fragment {
            return Err(self.err(format!("reduce from `{}` into `{}`: both must be fragments", sb.name, db.name)));
        }
        let (sdt, ddt) = (sb.dtype, db.dtype);
        let acc_t = match sdt {
            DType::F16 | DType::BF16 | DType::F32 => DType::F32,
            DType::I32 | DType::U32 => sdt,
            _ => return Err(self.err(format!("reduce over {sdt} is not supported (f16, bf16, f32, i32, u32 are)"))),
        };
        let ls = self.plan.frags.get(&src).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?;
        let ld = self.plan.frags.get(&dst).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?;
        if dim >= ls.rank() {
            return Err(self.err(format!("reduce dim {dim} is out of range for `{}`", sb.name)));
        }
        if !ld.agrees(&ls.reduced(dim)) {
            return Err(self.err(format!(
                "layout conflict: `{}` is laid out as {} but the reduction of `{}` along dim {dim} produces {}",
                db.name,
                ld.describe(),
                sb.name,
                ls.reduced(dim).describe()
            )));
        }
        let (ident, ty) = match (op, acc_t) {
            (ReduceOp::Sum, DType::F32) => (Operand::F32(0.0), "f32"),
            (ReduceOp::Max, DType::F32) => (Operand::F32(f32::NEG_INFINITY), "f32"),
            (ReduceOp::Min, DType::F32) => (Operand::F32(f32::INFINITY), "f32"),
            (ReduceOp::Sum, DType::I32) => (Operand::Imm(0), "s32"),
            (ReduceOp::Max, DType::I32) => (Operand::Imm(i32::MIN as i64), "s32"),
            (ReduceOp::Min, DType::I32) => (Operand::Imm(i32::MAX as i64), "s32"),
            (ReduceOp::Sum, _) => (Operand::Imm(0), "u32"),
            (ReduceOp::Max, _) => (Operand::Imm(0), "u32"),
            (ReduceOp::Min, _) => (Operand::Imm(u32::MAX as i64), "u32"),
        };
        let opname = match op {
            ReduceOp::Sum => format!("add.{ty}"),
            ReduceOp::Max => format!("max.{ty}"),
            ReduceOp::Min => format!("min.{ty}"),
        };
        let c = class_of(acc_t);
        let root = ls.root.clone();
        let rk = ls.kept[dim];
        let src_regs = self.frags.get(&src).cloned().unwrap_or_default();
        let dst_regs = self.frags.get(&dst).cloned().unwrap_or_default();
        let base_k = self.tbase(&root, rk);
        // 1. Per-thread partials over the registers along `dim`.
        let mut partials = Vec::new();
        for rd in 0..ld.num_regs() {
            let ldv = ld.unflatten(rd);
            let acc = self.new_reg(c);
            self.mov(acc, ident.clone(), acc_t);
            for lk in 0..root.regs_along(rk) {
                let mut l = ldv.clone();
                l.insert(dim, lk);
                let rs = ls.flatten(&l);
                let x = *src_regs.get(rs).ok_or_else(|| self.err("internal: fragment register out of range"))?;
                let x = self.convert(Val { op: x.into(), ty: sdt }, acc_t)?;
                let mut x = self.materialize(&x);
                if root.dim_padded(rk) {
                    let bound = root.shape[rk] - root.reg_offset(rk, lk);
                    if bound <= 0 {
                        continue;
                    }
                    if bound <= root.dims[rk].max_thread_part() {
                        let b = self.materialize(&Val { op: base_k.clone(), ty: DType::I32 });
                        let p = self.op("setp.lt.s32", RegClass::Pred, vec![b.into(), Operand::Imm(bound)]);
                        x = self.op(format!("selp.{}", mov_ty(acc_t)), c, vec![x.into(), ident.clone(), p.into()]);
                    }
                }
                self.op_into(opname.clone(), acc, vec![acc.into(), x.into()]);
            }
            partials.push(acc);
        }
        // 2. Butterfly within a warp over the thread bits of `dim`.
        let mask = root.dims[rk].thread_mask();
        for bit in 0..5 {
            if mask & (1 << bit) == 0 {
                continue;
            }
            for &p in &partials {
                let y = self.new_reg(c);
                self.emit(Inst::ShflBfly { dst: y, src: p, lane_mask: 1 << bit });
                self.op_into(opname.clone(), p, vec![p.into(), y.into()]);
            }
        }
        // 3. Across warps through shared memory: the threads with zero lane
        // bits of `dim` write their partial to slot (row key, warp key);
        // every thread then combines the `h` slots of its row key.
        let warp_mask = mask & !31;
        let h = 1i64 << warp_mask.count_ones();
        if h > 1 && root.owner.is_some() {
            // Its barrier would be inside the warpgroup's branch, where the
            // block's barriers cannot go.
            return Err(self.err(format!(
                "reduce of `{}` along dim {dim}: `{}` is one warpgroup's (a gemm with `policy(Warpgroup(..))`) and its warps split that dim, which would need a barrier of the warpgroup's own; reduce along the dim its lanes split (the rows' columns), or copy it to shared memory first",
                sb.name, sb.name
            )));
        }
        if h > 1 {
            let active = root.active_threads();
            let rows = active / root.dims[rk].threads_along();
            let nd = partials.len() as i64;
            let (off, region_id) = self.reduce_scratch(nd * rows * h * 4);
            let region = Region { id: region_id, op: self.cur_op };
            self.cur_op += 1;
            let read_region = Region { id: region.id, op: self.cur_op };
            let tid = self.tid;
            let all_bits = (active as u64).saturating_sub(1);
            let rowkey = self.extract_bits(tid, all_bits & !mask);
            let hk = self.extract_bits(tid, warp_mask);
            let lane_bits = self.op("and.b32", RegClass::B32, vec![tid.into(), Operand::Imm((mask & 31) as i64)]);
            let writer = self.op("setp.eq.u32", RegClass::Pred, vec![lane_bits.into(), Operand::Imm(0)]);
            let live = self.active_pred(&root);
            let writer = self.and_pred(Some(writer), live);
            let sm = self.smem;
            let rowkey = Operand::Reg(self.materialize(&Val { op: rowkey, ty: DType::I32 }));
            let slot = self.op("mad.lo.s32", RegClass::B32, vec![rowkey.clone(), Operand::Imm(h), hk]);
            let waddr = self.op("mad.lo.s32", RegClass::B32, vec![slot.into(), Operand::Imm(4), sm.into()]);
            let raddr = self.op("mad.lo.s32", RegClass::B32, vec![rowkey, Operand::Imm(h * 4), sm.into()]);
            let parts = partials.clone();
            let body = self.capture(|s| {
                for (rd, p) in parts.iter().enumerate() {
                    let a = Address { base: waddr.into(), offset: off + rd as i64 * rows * h * 4 };
                    s.emit(Inst::St {
                        space: Space::Shared,
                        ty: ty_b32(ty),
                        srcs: vec![(*p).into()],
                        addr: a,
                        region: Some(region),
                    });
                }
                Ok(())
            })?;
            self.emit_if(writer, false, body, vec![]);
            let body = self.capture(|s| {
                for (rd, p) in parts.iter().enumerate() {
                    s.mov(*p, ident.clone(), acc_t);
                    for j in 0..h {
                        let y = s.new_reg(c);
                        let a = Address { base: raddr.into(), offset: off + (rd as i64 * rows * h + j) * 4 };
                        s.emit(Inst::Ld {
                            space: Space::Shared,
                            ty: ty_b32(ty),
                            dsts: vec![y],
                            addr: a,
                            region: Some(read_region),
                        });
                        s.op_into(opname.clone(), *p, vec![(*p).into(), y.into()]);
                    }
                }
                Ok(())
            })?;
            self.emit_if(live, false, body, vec![]);
        }
        // 4. Result (combined with the destination's values under `keep`).
        for (rd, p) in partials.iter().enumerate() {
            let d = *dst_regs.get(rd).ok_or_else(|| self.err("internal: fragment register out of range"))?;
            let mut x = *p;
            if keep {
                let old = self.convert(Val { op: d.into(), ty: ddt }, acc_t)?;
                let old = self.materialize(&old);
                x = self.op(opname.clone(), c, vec![old.into(), x.into()]);
            }
            let y = self.convert(Val { op: x.into(), ty: acc_t }, ddt)?;
            self.mov(d, y.op, ddt);
        }
        Ok(())
    }
}

//! cp.async copies (sm_80+): global → shared copies of one element type
//! with a zero fill ([`Lx::async_copy_ok`]) as cp.async chunks.
//!
//! Expects the lowering of a copy to call [`Lx::copy_groups_any`] with the
//! copy's layout and sides. Guarantees: a copy chunk of 16 bytes becomes
//! `cp.async.cg ... 16, src_bytes`, one of 4 or 8 bytes `cp.async.ca`;
//! `src_bytes` counts the chunk's in-bounds elements (a chunk never straddles
//! the start of a row, because chunks are aligned to their width), the rest
//! is zero-filled, and an empty chunk reads from the tensor's base address so
//! that no address outside the tensor is formed for the hardware; narrower
//! elements (f16/bf16 without a provable 4-byte group, bool) use the plain
//! path. Committing and waiting is the caller's: [`Lx::lower_copy`] waits at
//! once, a pipelined loop's stage issue (`crate::schedule::cp_async_pipeline`)
//! leaves that to the loop's schedule.

use super::*;

impl Lx<'_> {
    /// Whether a copy can use cp.async: global → shared, no conversion, and
    /// masked elements filled with zero (what `src_bytes` zero-filling gives).
    pub(crate) fn async_copy_ok(&self, src: &Side, dst: &Side, sdt: DType, ddt: DType, fill: Option<&Expr>) -> bool {
        matches!(src, Side::Global { .. })
            && src.contiguous()
            && matches!(dst, Side::Shared(_))
            && sdt == ddt
            && sdt != DType::Bool
            && fill.is_none_or(Expr::is_zero_constant)
    }

    /// The copy's element groups as cp.async chunks (`use_async`), else the
    /// plain path.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_groups_any(
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
        let (Side::Global { buf, origin, dims }, Side::Shared(db)) = (src, dst) else {
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
                let g = self.global_coords(origin, dims, &c);
                let dst_addr = self.shared_addr(*db, &c)?;
                self.cp_async_chunk(*buf, &g, chunk as i64, size as i64, dst_addr, valid, region)?;
            }
        }
        Ok(())
    }

    /// One cp.async of `m` elements of `size` bytes starting at global
    /// coordinates `g`, zero-filling the elements outside the tensor.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cp_async_chunk(
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
}

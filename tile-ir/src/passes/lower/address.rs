//! Integer arithmetic on operands and addressing: global addresses and
//! bounds checks, shared addresses through each buffer's [`SharedLayout`]
//! (swizzles, panels, stage offsets), hoisted per-thread bases.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn add_i32(&mut self, a: Operand, b: Operand) -> Operand {
        match (&a, &b) {
            (Operand::Imm(x), Operand::Imm(y)) => Operand::Imm((*x as i32).wrapping_add(*y as i32) as i64),
            (_, Operand::Imm(0)) => a,
            (Operand::Imm(0), _) => b,
            (Operand::Imm(x), Operand::Reg(r)) | (Operand::Reg(r), Operand::Imm(x)) => {
                let (x, r) = (*x, *r);
                let d = self.op("add.s32", RegClass::B32, vec![r.into(), Operand::Imm(x)]);
                // Remember `d = r + x` so that shared addresses can fold `x`.
                let (base, off) = self.affine.get(&r).copied().unwrap_or((r, 0));
                self.affine.insert(d, (base, off + x));
                Operand::Reg(d)
            }
            _ => Operand::Reg(self.op("add.s32", RegClass::B32, vec![a, b])),
        }
    }
    /// `a · b + c` in 32 bits.
    pub(crate) fn mad_i32(&mut self, a: Operand, b: i64, c: Operand) -> Operand {
        if let Operand::Imm(x) = a {
            return self.add_i32(Operand::Imm((x as i32).wrapping_mul(b as i32) as i64), c);
        }
        Operand::Reg(self.op("mad.lo.s32", RegClass::B32, vec![a, Operand::Imm(b), c]))
    }
    /// Row-major element offset of `idx` in `shape` (32 bits).
    pub(crate) fn rowmajor_i32(&mut self, idx: &[Operand], shape: &[i64]) -> Operand {
        let mut off = Operand::Imm(0);
        for (i, x) in idx.iter().enumerate() {
            off = if i == 0 { x.clone() } else { self.mad_i32(off, shape[i], x.clone()) };
        }
        off
    }
    pub(crate) fn widen_s64(&mut self, x: Operand) -> Operand {
        match x {
            Operand::Imm(_) => x,
            _ => Operand::Reg(self.op("cvt.s64.s32", RegClass::B64, vec![x])),
        }
    }

    /// Byte address of element `coords` of global tensor `buf` (64-bit arithmetic).
    pub(crate) fn global_addr(&mut self, buf: BufferId, coords: &[Operand]) -> R<Reg> {
        let info = self.tensors.get(&buf).ok_or_else(|| self.err("internal: tensor parameter not bound"))?;
        let dims64 = info.dims64.clone();
        let ptr = info.ptr;
        let mut off = Operand::Imm(0);
        for (d, c) in coords.iter().enumerate() {
            let c64 = self.widen_s64(c.clone());
            if d == 0 {
                off = c64;
                continue;
            }
            off = match (&off, &dims64[d], &c64) {
                (Operand::Imm(a), Operand::Imm(b), Operand::Imm(c)) => Operand::Imm(a * b + c),
                _ => {
                    let a = match off {
                        Operand::Imm(_) => Operand::Reg(self.op("mov.b64", RegClass::B64, vec![off.clone()])),
                        _ => off.clone(),
                    };
                    Operand::Reg(self.op("mad.lo.s64", RegClass::B64, vec![a, dims64[d].clone(), c64]))
                }
            };
        }
        let size = self.k.buffer(buf).dtype.size_bytes() as i64;
        let addr = match off {
            Operand::Imm(o) => self.op("add.s64", RegClass::B64, vec![ptr.into(), Operand::Imm(o * size)]),
            _ => self.op("mad.lo.s64", RegClass::B64, vec![off, Operand::Imm(size), ptr.into()]),
        };
        Ok(addr)
    }

    /// `0 ≤ coords < dims` for a global tensor, with `extra` added to the
    /// innermost coordinate (vector end). `None` when statically true.
    pub(crate) fn in_bounds(&mut self, buf: BufferId, coords: &[Operand], extra: i64) -> R<Option<Reg>> {
        let dims = self.tensors.get(&buf).ok_or_else(|| self.err("internal: tensor parameter not bound"))?.dims.clone();
        let mut p = None;
        let n = coords.len();
        for d in 0..n {
            let c = if d + 1 == n { self.add_i32(coords[d].clone(), Operand::Imm(extra)) } else { coords[d].clone() };
            let q = match (&c, &dims[d]) {
                (Operand::Imm(x), Operand::Imm(y)) => {
                    if (*x as u32) < (*y as u32) {
                        continue;
                    }
                    self.const_pred(false)
                }
                (Operand::Imm(_), _) => {
                    let r = self.materialize(&Val { op: c, ty: DType::I32 });
                    self.op("setp.lt.u32", RegClass::Pred, vec![r.into(), dims[d].clone()])
                }
                _ => self.op("setp.lt.u32", RegClass::Pred, vec![c, dims[d].clone()]),
            };
            p = self.and_pred(p, Some(q));
        }
        Ok(p)
    }

    /// The address of element `idx` of shared buffer `buf`.
    ///
    /// Every access to a shared buffer goes through here (or through
    /// [`Lx::shared_offset`]), so that a buffer whose layout the compiler
    /// chose (a swizzled tensor-core operand, [`LayoutPlan::shared`]) is
    /// read and written consistently.
    pub(crate) fn shared_addr(&mut self, buf: BufferId, idx: &[Operand]) -> R<Address> {
        let (base, _) = *self.shared.get(&buf).ok_or_else(|| self.err("internal: shared buffer not allocated"))?;
        let addr = if let Some((reg, imm)) = self.shared_addr_hoisted(buf, idx)? {
            Address { base: reg.into(), offset: base + imm }
        } else {
            let off = self.shared_offset(buf, idx)?;
            let sm = self.smem;
            match off {
                Operand::Imm(o) => Address { base: sm.into(), offset: base + o },
                _ => {
                    let a = self.op("add.s32", RegClass::B32, vec![off, sm.into()]);
                    Address { base: a.into(), offset: base }
                }
            }
        };
        Ok(self.with_stage(buf, addr))
    }

    /// `addr` moved to the buffer's current pipelining slot ([`Lx::shared_stage`]).
    pub(crate) fn with_stage(&mut self, buf: BufferId, addr: Address) -> Address {
        match self.stage_of(buf) {
            None => addr,
            Some(Operand::Imm(x)) => Address { base: addr.base, offset: addr.offset + x },
            Some(extra) => {
                let b = self.op("add.s32", RegClass::B32, vec![addr.base, extra]);
                Address { base: b.into(), offset: addr.offset }
            }
        }
    }

    /// The current pipelining slot offset of `buf` ([`Lx::shared_stage`]):
    /// a view's is its parent's.
    pub(crate) fn stage_of(&self, buf: BufferId) -> Option<Operand> {
        let (root, _) = self.k.view_root(buf);
        self.shared_stage.get(&buf).or_else(|| self.shared_stage.get(&root)).cloned()
    }

    /// `Some((reg, imm))` with address = `reg + imm` (plus the buffer's
    /// offset) when `idx` is 2-D, each coordinate is a prologue (per-thread)
    /// register plus a constant, and the constants commute with the layout
    /// (the row constant is a whole number of swizzle periods; the column
    /// constant is zero or the layout is not swizzled): `reg` is then
    /// computed once, in the prologue, and the access costs no arithmetic.
    pub(crate) fn shared_addr_hoisted(&mut self, buf: BufferId, idx: &[Operand]) -> R<Option<(Reg, i64)>> {
        if idx.len() != 2 {
            return Ok(None);
        }
        let lay = self.shared_layout(buf)?;
        let split = |s: &Self, o: &Operand| -> Option<(Operand, i64)> {
            match o {
                Operand::Imm(x) => Some((Operand::Imm(0), *x)),
                Operand::Reg(r) => {
                    let (b, x) = s.affine.get(r).copied().unwrap_or((*r, 0));
                    s.tbases.values().any(|t| *t == b).then_some((Operand::Reg(b), x))
                }
                _ => None,
            }
        };
        let (Some((rt, cr)), Some((ct, cc))) = (split(self, &idx[0]), split(self, &idx[1])) else { return Ok(None) };
        if cr % lay.row_period() != 0 || (cr * lay.row_stride) % 256 != 0 || (cc != 0 && lay.swizzle.is_some()) {
            return Ok(None);
        }
        let as_reg = |o: &Operand| if let Operand::Reg(r) = o { Some(*r) } else { None };
        let key = (buf, as_reg(&rt), as_reg(&ct));
        let reg = match self.shared_bases.get(&key) {
            Some(r) => *r,
            None => {
                let mut reg = None;
                let code = self.capture(|s| {
                    let off = s.shared_offset(buf, &[rt, ct])?;
                    let sm = s.smem;
                    let a = s.add_i32(Operand::Reg(sm), off);
                    reg = Some(s.materialize(&Val { op: a, ty: DType::I32 }));
                    Ok(())
                })?;
                self.push_pro(code);
                let r = reg.ok_or_else(|| self.err("internal: shared base"))?;
                self.shared_bases.insert(key, r);
                r
            }
        };
        Ok(Some((reg, cr * lay.row_stride + cc * lay.elem)))
    }

    /// The layout of shared buffer `buf` (row-major unless layout inference chose another).
    pub(crate) fn shared_layout(&self, buf: BufferId) -> R<SharedLayout> {
        if let Some(l) = self.plan.shared.get(&buf) {
            return Ok(*l);
        }
        let b = self.k.buffer(buf);
        let shape = b.const_shape().ok_or_else(|| self.err("shared buffers need a constant shape"))?;
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape.iter().rev().skip(1).product::<i64>();
        Ok(SharedLayout::row_major(rows, cols, b.dtype.size_bytes() as i64))
    }

    /// The byte offset of element `idx` of shared buffer `buf` from the
    /// buffer's start, through the buffer's [`SharedLayout`] (swizzled for
    /// tensor-core operands). THE one place that maps shared coordinates to
    /// bytes: copies, element accesses in nests, ldmatrix (via the same
    /// layout) and the cp.async writes of pipelining must all use it.
    /// Constant coordinates fold to an immediate.
    ///
    /// For the pipelining pass (cp.async writes of a global→shared copy):
    /// call [`Lx::shared_addr`] with the tile coordinates of each 16-byte
    /// chunk. It returns `[reg + imm]` with `reg` computed once in the
    /// prologue when the coordinates are per-thread layout coordinates plus
    /// constants (what `coord()` gives), honours [`Lx::shared_stage`] (set
    /// it to a stage slot's byte offset while lowering that stage's copy or
    /// gemm), and the buffer's size is `shared_layout(buf).bytes()`. A
    /// 16-byte chunk never straddles swizzle units (the XOR moves whole
    /// 16-byte chunks), so a chunk that is contiguous in the tile is
    /// contiguous in shared memory.
    pub(crate) fn shared_offset(&mut self, buf: BufferId, idx: &[Operand]) -> R<Operand> {
        let b = self.k.buffer(buf);
        let shape = b.const_shape().ok_or_else(|| self.err("shared buffers need a constant shape"))?;
        let lay = self.shared_layout(buf)?;
        if idx.len() != shape.len() || idx.is_empty() {
            return Err(self.err(format!(
                "`{}` has {} dimensions but is indexed with {}",
                b.name,
                shape.len(),
                idx.len()
            )));
        }
        let n = idx.len();
        let row = self.rowmajor_i32(&idx[..n - 1], &shape[..n - 1]);
        let col = idx[n - 1].clone();
        if let (Operand::Imm(r), Operand::Imm(c)) = (&row, &col) {
            return Ok(Operand::Imm(lay.offset(*r, *c)));
        }
        if let Some(pc) = lay.panel_cols {
            // Panelled (wgmma operands, `SharedLayout::panelled`): the panel's
            // offset plus the offset inside the panel, whose layout has no panels.
            let inner = SharedLayout { cols: pc, panel_cols: None, ..lay };
            let (panel, c) = match &col {
                Operand::Imm(c) => (Operand::Imm(c / pc * lay.panel_bytes()), Operand::Imm(c % pc)),
                _ => {
                    let p = self.op("shr.u32", RegClass::B32, vec![col.clone(), Operand::Imm(log2(pc))]);
                    let p = self.op("mul.lo.s32", RegClass::B32, vec![p.into(), Operand::Imm(lay.panel_bytes())]);
                    let c = self.op("and.b32", RegClass::B32, vec![col.clone(), Operand::Imm(pc - 1)]);
                    (Operand::Reg(p), Operand::Reg(c))
                }
            };
            let off = self.swizzled_offset(&inner, row, c);
            return Ok(self.add_i32(off, panel));
        }
        Ok(self.swizzled_offset(&lay, row, col))
    }

    /// `row · stride + col · elem`, swizzled, for a layout without panels.
    pub(crate) fn swizzled_offset(&mut self, lay: &SharedLayout, row: Operand, col: Operand) -> Operand {
        if let (Operand::Imm(r), Operand::Imm(c)) = (&row, &col) {
            return Operand::Imm(lay.offset(*r, *c));
        }
        // row · stride + col · elem
        let lin = match &row {
            Operand::Imm(r) => {
                let c = self.mad_i32(col, lay.elem, Operand::Imm(0));
                self.add_i32(c, Operand::Imm(r * lay.row_stride))
            }
            _ => {
                let c = self.mad_i32(col, lay.elem, Operand::Imm(0));
                self.mad_i32(row.clone(), lay.row_stride, c)
            }
        };
        let Some((bits, shift)) = lay.swizzle else { return lin };
        // XOR the chunk bits with bits [shift + 4, +bits) of the row's byte offset.
        let x = match &row {
            Operand::Imm(r) => Operand::Imm(lay.xor_of_row(*r)),
            _ => {
                let rb = self.op("mul.lo.s32", RegClass::B32, vec![row.clone(), Operand::Imm(lay.row_stride)]);
                let sh = self.op("shr.u32", RegClass::B32, vec![rb.into(), Operand::Imm(shift as i64)]);
                Operand::Reg(self.op(
                    "and.b32",
                    RegClass::B32,
                    vec![sh.into(), Operand::Imm(((1i64 << bits) - 1) << 4)],
                ))
            }
        };
        if x == Operand::Imm(0) {
            return lin;
        }
        let l = self.materialize(&Val { op: lin, ty: DType::I32 });
        Operand::Reg(self.op("xor.b32", RegClass::B32, vec![l.into(), x]))
    }
}

//! Memory operations: vector loads and stores, fragment registers, local
//! buffers (registers with unrolled dynamic indexing), element loads and
//! stores, the side-effect guard, and `fill`.

use super::*;

impl<'a> Lx<'a> {
    /// Loads `n` contiguous elements (aligned to the access size) into fresh registers.
    pub(crate) fn load_vec(
        &mut self,
        space: Space,
        region: Option<Region>,
        addr: &Address,
        dt: DType,
        n: usize,
    ) -> Vec<Reg> {
        let size = dt.size_bytes() as usize;
        let mut out = Vec::new();
        if dt == DType::Bool {
            for e in 0..n {
                let w = self.new_reg(RegClass::B32);
                let a = Address { base: addr.base.clone(), offset: addr.offset + e as i64 };
                self.emit(Inst::Ld { space, ty: "u8", dsts: vec![w], addr: a, region });
                out.push(self.op("setp.ne.u32", RegClass::Pred, vec![w.into(), Operand::Imm(0)]));
            }
            return out;
        }
        let chunk = (16 / size).max(1);
        let mut e = 0;
        while e < n {
            let m = chunk.min(n - e);
            let a = Address { base: addr.base.clone(), offset: addr.offset + (e * size) as i64 };
            if size == 2 && m >= 2 {
                let words: Vec<Reg> = (0..m / 2).map(|_| self.new_reg(RegClass::B32)).collect();
                self.emit(Inst::Ld { space, ty: "b32", dsts: words.clone(), addr: a, region });
                for w in words {
                    let lo = self.new_reg(RegClass::B16);
                    let hi = self.new_reg(RegClass::B16);
                    self.emit(Inst::Unpack { lo, hi, src: w });
                    out.push(lo);
                    out.push(hi);
                }
            } else {
                let regs: Vec<Reg> = (0..m).map(|_| self.new_reg(class_of(dt))).collect();
                self.emit(Inst::Ld { space, ty: mem_ty(dt), dsts: regs.clone(), addr: a, region });
                out.extend(regs);
            }
            e += m;
        }
        out
    }

    /// Stores `vals` (contiguous, aligned to the access size).
    pub(crate) fn store_vec(&mut self, space: Space, region: Option<Region>, addr: &Address, dt: DType, vals: &[Reg]) {
        let size = dt.size_bytes() as usize;
        let n = vals.len();
        if dt == DType::Bool {
            for (e, v) in vals.iter().enumerate() {
                let w = self.op("selp.u32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), (*v).into()]);
                let a = Address { base: addr.base.clone(), offset: addr.offset + e as i64 };
                self.emit(Inst::St { space, ty: "u8", srcs: vec![w.into()], addr: a, region });
            }
            return;
        }
        let chunk = (16 / size).max(1);
        let mut e = 0;
        while e < n {
            let m = chunk.min(n - e);
            let a = Address { base: addr.base.clone(), offset: addr.offset + (e * size) as i64 };
            if size == 2 && m >= 2 {
                let mut words = Vec::new();
                for p in 0..m / 2 {
                    let w = self.new_reg(RegClass::B32);
                    self.emit(Inst::Pack { dst: w, lo: vals[e + 2 * p], hi: vals[e + 2 * p + 1] });
                    words.push(Operand::Reg(w));
                }
                self.emit(Inst::St { space, ty: "b32", srcs: words, addr: a, region });
            } else {
                let srcs = vals[e..e + m].iter().map(|r| Operand::Reg(*r)).collect();
                self.emit(Inst::St { space, ty: mem_ty(dt), srcs, addr: a, region });
            }
            e += m;
        }
    }

    /// Checks that `index` has one coordinate per dim of `buf`.
    pub(crate) fn check_rank(&self, buf: BufferId, index: &[Expr]) -> R<()> {
        let b = self.k.buffer(buf);
        if index.len() != b.rank() {
            return Err(self.err(format!(
                "`{}` has {} dimensions but is indexed with {}",
                b.name,
                b.rank(),
                index.len()
            )));
        }
        Ok(())
    }

    pub(crate) fn index_ops(&mut self, index: &[Expr]) -> R<Vec<Operand>> {
        index
            .iter()
            .map(|e| {
                let v = self.expr(e)?;
                Ok(self.convert(v, DType::I32)?.op)
            })
            .collect()
    }

    /// The register of fragment `buf` that the current nest iteration touches.
    pub(crate) fn frag_reg(&mut self, buf: BufferId, index: &[Expr]) -> R<Reg> {
        let name = &self.k.buffer(buf).name;
        let nest = self
            .nest
            .as_ref()
            .ok_or_else(|| self.err(format!("fragment `{name}` can only be indexed inside a parallel loop")))?;
        let pos = nest_positions(&nest.vars, index).ok_or_else(|| {
            self.err(format!(
                "fragment `{name}` must be indexed by the enclosing parallel loop variables, in loop order"
            ))
        })?;
        let layout = self.plan.frags.get(&buf).ok_or_else(|| self.err(format!("fragment `{name}` has no layout")))?;
        let view =
            FragLayout { root: nest.layout.root.clone(), kept: pos.iter().map(|&p| nest.layout.kept[p]).collect() };
        if !layout.agrees(&view) {
            return Err(self.err(format!(
                "layout conflict: fragment `{name}` is laid out as {} but this parallel loop reads it as {}",
                layout.describe(),
                view.describe()
            )));
        }
        let l: Vec<i64> = pos.iter().map(|&p| nest.l[p]).collect();
        let r = layout.flatten(&l);
        self.frags
            .get(&buf)
            .and_then(|v| v.get(r).copied())
            .ok_or_else(|| self.err("internal: fragment register out of range"))
    }

    /// Reads local element `idx` (every thread holds every element).
    pub(crate) fn local_read(&mut self, buf: BufferId, idx: &[Operand]) -> R<Val> {
        let b = self.k.buffer(buf);
        let t = b.dtype;
        let shape = b.const_shape().ok_or_else(|| self.err("local buffers need a constant shape"))?;
        let regs = self.locals.get(&buf).cloned().unwrap_or_default();
        let flat = self.rowmajor_i32(idx, &shape);
        if let Operand::Imm(i) = flat {
            let r = regs
                .get(i as usize)
                .copied()
                .ok_or_else(|| self.err(format!("index {i} out of bounds of local `{}`", b.name)))?;
            return Ok(Val { op: r.into(), ty: t });
        }
        // Unrolled select over every element.
        let acc = self.new_reg(class_of(t));
        let first = regs.first().copied().ok_or_else(|| self.err("empty local buffer"))?;
        self.mov(acc, first.into(), t);
        for (i, r) in regs.iter().enumerate().skip(1) {
            let p = self.op("setp.eq.s32", RegClass::Pred, vec![flat.clone(), Operand::Imm(i as i64)]);
            self.emit_guarded(
                Inst::Op { op: format!("mov.{}", mov_ty(t)), dst: acc, args: vec![(*r).into()] },
                Some((p, false)),
            );
        }
        Ok(Val { op: acc.into(), ty: t })
    }

    pub(crate) fn local_write(&mut self, buf: BufferId, idx: &[Operand], v: Val) -> R<()> {
        let b = self.k.buffer(buf);
        let t = b.dtype;
        let shape = b.const_shape().ok_or_else(|| self.err("local buffers need a constant shape"))?;
        let regs = self.locals.get(&buf).cloned().unwrap_or_default();
        let v = self.convert(v, t)?;
        let flat = self.rowmajor_i32(idx, &shape);
        if let Operand::Imm(i) = flat {
            let r = regs
                .get(i as usize)
                .copied()
                .ok_or_else(|| self.err(format!("index {i} out of bounds of local `{}`", b.name)))?;
            self.mov(r, v.op, t);
            return Ok(());
        }
        let src = self.materialize(&v);
        for (i, r) in regs.iter().enumerate() {
            let p = self.op("setp.eq.s32", RegClass::Pred, vec![flat.clone(), Operand::Imm(i as i64)]);
            self.emit_guarded(
                Inst::Op { op: format!("mov.{}", mov_ty(t)), dst: *r, args: vec![src.into()] },
                Some((p, false)),
            );
        }
        Ok(())
    }

    pub(crate) fn load(&mut self, buf: BufferId, index: &[Expr]) -> R<Val> {
        self.check_rank(buf, index)?;
        let b = self.k.buffer(buf);
        let t = b.dtype;
        match b.scope {
            Scope::Fragment => {
                let r = self.frag_reg(buf, index)?;
                Ok(Val { op: r.into(), ty: t })
            }
            Scope::Local => {
                let idx = self.index_ops(index)?;
                self.local_read(buf, &idx)
            }
            Scope::Shared => {
                let idx = self.index_ops(index)?;
                let addr = self.shared_addr(buf, &idx)?;
                let region = self.region_of(buf);
                let r = self.load_vec(Space::Shared, region, &addr, t, 1);
                Ok(Val { op: r[0].into(), ty: t })
            }
            Scope::Global => {
                let idx = self.index_ops(index)?;
                let p = self.in_bounds(buf, &idx, 0)?;
                let addr = self.global_addr(buf, &idx)?;
                let r = self.new_reg(class_of(t));
                let zero = self.zero(t);
                self.mov(r, zero, t);
                let ld = Inst::Ld {
                    space: Space::Global,
                    ty: mem_ty(t),
                    dsts: vec![r],
                    addr: Address { base: addr.into(), offset: 0 },
                    region: None,
                };
                self.emit_guarded(ld, p.map(|p| (p, false)));
                Ok(Val { op: r.into(), ty: t })
            }
        }
    }

    pub(crate) fn zero(&self, t: DType) -> Operand {
        match t {
            DType::F32 => Operand::F32(0.0),
            DType::F16 | DType::BF16 => Operand::B16(0),
            _ => Operand::Imm(0),
        }
    }

    /// The guard for a side effect on memory: thread 0 in uniform code, the
    /// first replica in a replicated parallel nest.
    pub(crate) fn side_effect_guard(&self) -> Option<Reg> {
        match &self.nest {
            None => Some(self.is_t0),
            Some(n) => n.primary,
        }
    }

    pub(crate) fn lower_fill(&mut self, buf: BufferId, value: &Expr) -> R<()> {
        let b = self.k.buffer(buf);
        let t = b.dtype;
        let v = self.expr(value)?;
        let v = self.convert(v, t)?;
        match b.scope {
            Scope::Fragment => {
                for r in self.frags.get(&buf).cloned().unwrap_or_default() {
                    self.mov(r, v.op.clone(), t);
                }
                Ok(())
            }
            Scope::Local => {
                for r in self.locals.get(&buf).cloned().unwrap_or_default() {
                    self.mov(r, v.op.clone(), t);
                }
                Ok(())
            }
            Scope::Shared => {
                let shape = b.const_shape().ok_or_else(|| self.err("shared buffers need a constant shape"))?;
                let lay =
                    FragLayout::full(RootLayout::blocked(&shape, self.k.threads, (16 / t.size_bytes() as i64).max(1)));
                let x = self.materialize(&v);
                let vw = lay.vec_width() as usize;
                let region = self.region_of(buf);
                for r0 in (0..lay.num_regs()).step_by(vw) {
                    let l = lay.unflatten(r0);
                    let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(&lay, a, l[a])).collect();
                    let valid = self.valid_pred(&lay, &l);
                    let addr = self.shared_addr(buf, &coords)?;
                    let body = self.capture(|s| {
                        s.store_vec(Space::Shared, region, &addr, t, &vec![x; vw]);
                        Ok(())
                    })?;
                    self.emit_if(valid, false, body, vec![]);
                }
                Ok(())
            }
            Scope::Global => {
                Err(self.err(format!("fill of tensor `{}`: fill needs a shared, fragment or local buffer", b.name)))
            }
        }
    }
}

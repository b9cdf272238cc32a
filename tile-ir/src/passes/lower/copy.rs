//! Tile copies: the dispatch over the sides (global, shared, fragment,
//! local), vectorized and masked element groups, conversions.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn side(&mut self, t: &TileRef) -> R<Side> {
        let b = self.k.buffer(t.buf);
        Ok(match b.scope {
            Scope::Global => {
                let origin = self.index_ops(&t.origin)?;
                Side::Global { buf: t.buf, origin, dims: t.spanned() }
            }
            Scope::Shared => Side::Shared(t.buf),
            Scope::Fragment => Side::Frag(t.buf),
            Scope::Local => Side::Local(t.buf),
        })
    }

    pub(crate) fn lower_copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) -> R<()> {
        self.lower_copy_with(src, dst, fill, true)
    }

    /// A copy whose cp.asyncs are issued but neither committed nor waited
    /// for: a pipelined loop's stage issue, whose schedule does that.
    pub(crate) fn issue_copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) -> R<()> {
        self.lower_copy_with(src, dst, fill, false)
    }

    /// [`Lx::lower_copy`]; `complete`: commit and wait for its cp.asyncs.
    fn lower_copy_with(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>, complete: bool) -> R<()> {
        let (sb, db) = (self.k.buffer(src.buf), self.k.buffer(dst.buf));
        let (sdt, ddt) = (sb.dtype, db.dtype);
        if sb.scope == Scope::Global && db.scope == Scope::Global {
            return Err(self.err(format!(
                "copy from tensor `{}` to tensor `{}`: a copy needs a shared, fragment or local side to give the tile's extent",
                sb.name, db.name
            )));
        }
        let tile_buf = if sb.scope == Scope::Global { db } else { sb };
        let shape = tile_buf.const_shape().ok_or_else(|| self.err("the tile side of a copy needs a constant shape"))?;
        if sb.scope != Scope::Global && db.scope != Scope::Global && sb.const_shape() != db.const_shape() {
            return Err(self.err(format!("copy from `{}` to `{}`: shapes differ", sb.name, db.name)));
        }
        let fill_val = match fill {
            Some(e) => {
                let v = self.expr(e)?;
                let v = self.convert(v, ddt)?;
                Val { op: Operand::Reg(self.materialize(&v)), ty: ddt }
            }
            None => Val { op: self.zero(ddt), ty: ddt },
        };
        let mut s_side = self.side(src)?;
        let mut d_side = self.side(dst)?;
        let mut global_origin_expr: Option<(&Expr, BufferId)> = None;
        for (side, t) in [(&mut s_side, src), (&mut d_side, dst)] {
            if let Side::Global { buf, origin, dims } = side {
                let rank = self.k.buffer(*buf).rank();
                if origin.len() != rank {
                    return Err(self.err(format!(
                        "tile of `{}` needs {} origin coordinates, found {}",
                        self.k.buffer(*buf).name,
                        rank,
                        origin.len()
                    )));
                }
                if shape.len() != dims.len() || shape.is_empty() {
                    return Err(self.err(format!(
                        "a {}-D tile does not fit the {} spanned dims of tensor `{}`",
                        shape.len(),
                        dims.len(),
                        self.k.buffer(*buf).name
                    )));
                }
                // Vector widths and alignment follow the tensor's last dim,
                // which only a contiguous window walks along.
                if dims.last() == Some(&(rank - 1)) {
                    global_origin_expr = t.origin.last().map(|e| (e, *buf));
                }
            }
        }
        if matches!(s_side, Side::Local(_)) || matches!(d_side, Side::Local(_)) {
            return self.copy_local(&s_side, &d_side, &shape, sdt, ddt, &fill_val);
        }
        if let (Side::Frag(fb), Side::Global { buf, origin, dims }) = (&s_side, &d_side) {
            // Accumulator epilogues: per-thread base address, immediate column offsets.
            if dims.iter().copied().eq(0..origin.len())
                && self.store_fragment_2d(*fb, *buf, origin, global_origin_expr.map(|e| e.0))?
            {
                return Ok(());
            }
        }
        let layout = match (&s_side, &d_side) {
            (Side::Frag(a), Side::Frag(b)) => {
                let (la, lb) = (self.plan.frags.get(a), self.plan.frags.get(b));
                match (la, lb) {
                    (Some(la), Some(lb)) if la.agrees(lb) => la.clone(),
                    _ => {
                        return Err(self.err(format!(
                            "copy from fragment `{}` to fragment `{}`: their layouts differ",
                            sb.name, db.name
                        )))
                    }
                }
            }
            (Side::Frag(a), _) | (_, Side::Frag(a)) => {
                self.plan.frags.get(a).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?
            }
            _ => {
                let other = if sb.scope == Scope::Global { sdt } else { ddt };
                FragLayout::full(RootLayout::blocked(&shape, self.k.threads, (16 / other.size_bytes() as i64).max(1)))
            }
        };
        if layout.shape() != shape {
            return Err(self.err("internal: layout shape differs from the copy's tile"));
        }
        let v = layout.vec_width();
        let use_async = self.async_copy_ok(&s_side, &d_side, sdt, ddt, fill);
        self.copy_dispatch(&layout, &s_side, &d_side, sdt, ddt, &fill_val, v, global_origin_expr, use_async)?;
        if use_async && complete {
            // Outside pipelined loops the copy completes here; the barrier
            // pass puts a `bar.sync` before the first read by other threads.
            self.emit(Inst::CpAsyncCommit);
            self.emit(Inst::CpAsyncWait { pending: 0 });
        }
        Ok(())
    }

    /// Emits the copy's element groups: vectorized where alignment is proven
    /// (or tested at run time), as cp.async when `use_async`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_dispatch(
        &mut self,
        layout: &FragLayout,
        s_side: &Side,
        d_side: &Side,
        sdt: DType,
        ddt: DType,
        fill_val: &Val,
        v: i64,
        global_origin_expr: Option<(&Expr, BufferId)>,
        use_async: bool,
    ) -> R<()> {
        let layout = layout.clone();
        let (s_side, d_side, fill_val) = (s_side.clone(), d_side.clone(), fill_val.clone());
        match global_origin_expr {
            Some((origin_last, gbuf)) if v > 1 => {
                let aligned_origin = self.known_multiple(origin_last) % v == 0;
                let last_extent = *self.k.buffer(gbuf).shape.last().unwrap_or(&Extent::Const(1));
                match (aligned_origin, last_extent) {
                    (true, Extent::Const(c)) if c % v == 0 => {
                        self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, true, use_async)
                    }
                    (true, Extent::Dyn(dv)) if self.var_mult.get(&dv).copied().unwrap_or(1) % v == 0 => {
                        // Known to be a multiple of v (a versioned pipelined loop).
                        self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, true, use_async)
                    }
                    (true, Extent::Dyn(dv)) => {
                        // Uniform run-time test: vector path when the row length is a multiple of v.
                        let dr = *self.vars.get(&dv).ok_or_else(|| self.err("internal: dim not bound"))?;
                        let m = self.op("and.b32", RegClass::B32, vec![dr.into(), Operand::Imm(v - 1)]);
                        let p = self.op("setp.eq.u32", RegClass::Pred, vec![m.into(), Operand::Imm(0)]);
                        let (ss, ds, fv) = (s_side.clone(), d_side.clone(), fill_val.clone());
                        let then =
                            self.capture(|s| s.copy_groups_any(&layout, &ss, &ds, sdt, ddt, &fv, true, use_async))?;
                        let other = self.capture(|s| {
                            s.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, false, use_async)
                        })?;
                        self.emit_if(Some(p), true, then, other);
                        Ok(())
                    }
                    _ => self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, false, use_async),
                }
            }
            _ => self.copy_groups_any(&layout, &s_side, &d_side, sdt, ddt, &fill_val, v > 1, use_async),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_groups(
        &mut self,
        lay: &FragLayout,
        src: &Side,
        dst: &Side,
        sdt: DType,
        ddt: DType,
        fill: &Val,
        vectorize: bool,
    ) -> R<()> {
        let v = lay.vec_width() as usize;
        // A replicated layout (a reduction's result) writes memory from its
        // first replica only.
        let mut primary = None;
        if matches!(dst, Side::Global { .. } | Side::Shared(_)) {
            for d in 0..lay.root.rank() {
                if lay.kept.contains(&d) || lay.root.dims[d].fields.is_empty() {
                    continue;
                }
                let b = self.tbase(&lay.root.clone(), d);
                let q = self.op("setp.eq.u32", RegClass::Pred, vec![b, Operand::Imm(0)]);
                primary = self.and_pred(primary, Some(q));
            }
        }
        for r0 in (0..lay.num_regs()).step_by(v) {
            let l = lay.unflatten(r0);
            let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(lay, a, l[a])).collect();
            let fvalid = self.valid_pred(lay, &l);
            let vals = self.read_side(src, &coords, r0, v, fvalid, sdt, ddt, fill, vectorize)?;
            let wvalid = self.and_pred(fvalid, primary);
            self.write_side(dst, &coords, r0, wvalid, ddt, &vals, vectorize)?;
        }
        Ok(())
    }

    /// The tensor coordinates of tile coordinates `coords`: tile dim `a`
    /// adds to the origin of tensor dim `dims[a]`; squeezed dims keep theirs.
    pub(crate) fn global_coords(&mut self, origin: &[Operand], dims: &[usize], coords: &[Operand]) -> Vec<Operand> {
        let mut g: Vec<Operand> = origin.to_vec();
        for (&d, c) in dims.iter().zip(coords) {
            g[d] = self.add_i32(origin[d].clone(), c.clone());
        }
        g
    }

    /// The tensor coordinates of element `e` of a group at tile `coords`
    /// (the group runs along the tile's innermost dim).
    fn strided_coords(&mut self, origin: &[Operand], dims: &[usize], coords: &[Operand], e: usize) -> R<Vec<Operand>> {
        let mut c = coords.to_vec();
        let last = c.len().checked_sub(1).ok_or_else(|| self.err("internal: a 0-D tile"))?;
        c[last] = self.add_i32(c[last].clone(), Operand::Imm(e as i64));
        Ok(self.global_coords(origin, dims, &c))
    }

    /// Reads `v` contiguous elements at tile `coords` (starting at register
    /// `r0` for fragments) and converts them to `ddt`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_side(
        &mut self,
        side: &Side,
        coords: &[Operand],
        r0: usize,
        v: usize,
        fvalid: Option<Reg>,
        sdt: DType,
        ddt: DType,
        fill: &Val,
        vectorize: bool,
    ) -> R<Vec<Reg>> {
        match side {
            Side::Frag(b) => {
                let regs = self.frags.get(b).cloned().unwrap_or_default();
                let mut out = Vec::new();
                for e in 0..v {
                    let r = *regs.get(r0 + e).ok_or_else(|| self.err("internal: fragment register out of range"))?;
                    let c = self.convert(Val { op: r.into(), ty: sdt }, ddt)?;
                    out.push(self.materialize(&c));
                }
                Ok(out)
            }
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, coords)?;
                let region = self.region_of(*b);
                let mut raw = Vec::new();
                let body = self.capture(|s| {
                    raw = s.load_vec(Space::Shared, region, &addr, sdt, v);
                    Ok(())
                })?;
                self.emit_if(fvalid, false, body, vec![]);
                let mut out = Vec::new();
                for r in raw {
                    let c = self.convert(Val { op: r.into(), ty: sdt }, ddt)?;
                    out.push(self.materialize(&c));
                }
                Ok(out)
            }
            Side::Global { buf, origin, dims } if !side.contiguous() => {
                // A strided window: each element at its own address.
                let mut outs = Vec::new();
                for e in 0..v {
                    let g = self.strided_coords(origin, dims, coords, e)?;
                    let p = self.in_bounds(*buf, &g, 0)?;
                    let p = self.and_pred(p, fvalid);
                    let addr = self.global_addr(*buf, &g)?;
                    let out = self.new_reg(class_of(ddt));
                    self.mov(out, fill.op.clone(), ddt);
                    let body = self.capture(|s| {
                        let x = s.load_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, sdt, 1);
                        let y = s.convert(Val { op: x[0].into(), ty: sdt }, ddt)?;
                        s.mov(out, y.op, ddt);
                        Ok(())
                    })?;
                    self.emit_if(p, false, body, vec![]);
                    outs.push(out);
                }
                Ok(outs)
            }
            Side::Global { buf, origin, dims } => {
                let g = self.global_coords(origin, dims, coords);
                let addr = self.global_addr(*buf, &g)?;
                let outs: Vec<Reg> = (0..v).map(|_| self.new_reg(class_of(ddt))).collect();
                let access =
                    GlobalAccess { buf: *buf, coords: &g, addr, elems: v, elem_bytes: sdt.size_bytes() as i64 };
                self.global_access(
                    &access,
                    fvalid,
                    vectorize,
                    &mut |s, a| {
                        let xs = s.load_vec(Space::Global, None, a, sdt, v);
                        for (x, out) in xs.iter().zip(&outs) {
                            let c = s.convert(Val { op: (*x).into(), ty: sdt }, ddt)?;
                            s.mov(*out, c.op, ddt);
                        }
                        Ok(())
                    },
                    &mut |s, e| s.mov(outs[e], fill.op.clone(), ddt),
                    &mut |s, e, a| {
                        let x = s.load_vec(Space::Global, None, a, sdt, 1);
                        let c = s.convert(Val { op: x[0].into(), ty: sdt }, ddt)?;
                        s.mov(outs[e], c.op, ddt);
                        Ok(())
                    },
                )?;
                Ok(outs)
            }
            Side::Local(_) => Err(self.err("internal: local copy on the distributed path")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_side(
        &mut self,
        side: &Side,
        coords: &[Operand],
        r0: usize,
        fvalid: Option<Reg>,
        ddt: DType,
        vals: &[Reg],
        vectorize: bool,
    ) -> R<()> {
        match side {
            Side::Frag(b) => {
                let regs = self.frags.get(b).cloned().unwrap_or_default();
                for (e, x) in vals.iter().enumerate() {
                    let r = *regs.get(r0 + e).ok_or_else(|| self.err("internal: fragment register out of range"))?;
                    self.mov(r, (*x).into(), ddt);
                }
                Ok(())
            }
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, coords)?;
                let region = self.region_of(*b);
                let body = self.capture(|s| {
                    s.store_vec(Space::Shared, region, &addr, ddt, vals);
                    Ok(())
                })?;
                self.emit_if(fvalid, false, body, vec![]);
                Ok(())
            }
            Side::Global { buf, origin, dims } if !side.contiguous() => {
                // A strided window: each element at its own address.
                for (e, x) in vals.iter().enumerate() {
                    let g = self.strided_coords(origin, dims, coords, e)?;
                    let p = self.in_bounds(*buf, &g, 0)?;
                    let p = self.and_pred(p, fvalid);
                    let addr = self.global_addr(*buf, &g)?;
                    let body = self.capture(|s| {
                        s.store_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, ddt, &[*x]);
                        Ok(())
                    })?;
                    self.emit_if(p, false, body, vec![]);
                }
                Ok(())
            }
            Side::Global { buf, origin, dims } => {
                let g = self.global_coords(origin, dims, coords);
                let addr = self.global_addr(*buf, &g)?;
                let access = GlobalAccess {
                    buf: *buf,
                    coords: &g,
                    addr,
                    elems: vals.len(),
                    elem_bytes: ddt.size_bytes() as i64,
                };
                self.global_access(
                    &access,
                    fvalid,
                    vectorize,
                    &mut |s, a| {
                        s.store_vec(Space::Global, None, a, ddt, vals);
                        Ok(())
                    },
                    &mut |_, _| {},
                    &mut |s, e, a| {
                        s.store_vec(Space::Global, None, a, ddt, &[vals[e]]);
                        Ok(())
                    },
                )
            }
            Side::Local(_) => Err(self.err("internal: local copy on the distributed path")),
        }
    }

    /// The masks of a global side's access to `access.elems` contiguous
    /// elements (shared by [`Lx::read_side`] and [`Lx::write_side`]): with
    /// `vectorize` and more than one element, one vector access (`vector`)
    /// when the last element is in bounds, else (and without `vectorize`)
    /// each element `e` on its own: `before(e)` unguarded, then `elem(e)`
    /// at its address under its bounds test; everything under `fvalid`.
    #[allow(clippy::type_complexity)]
    fn global_access(
        &mut self,
        access: &GlobalAccess<'_>,
        fvalid: Option<Reg>,
        vectorize: bool,
        vector: &mut dyn FnMut(&mut Self, &Address) -> R<()>,
        before: &mut dyn FnMut(&mut Self, usize),
        elem: &mut dyn FnMut(&mut Self, usize, &Address) -> R<()>,
    ) -> R<()> {
        let &GlobalAccess { buf, coords: g, addr, elems: v, elem_bytes: size } = access;
        let mut scalar = |s: &mut Self| -> R<()> {
            for e in 0..v {
                before(s, e);
                let mut ge = g.to_vec();
                let last = ge.len() - 1;
                ge[last] = s.add_i32(ge[last].clone(), Operand::Imm(e as i64));
                let p = s.in_bounds(buf, &ge, 0)?;
                let p = s.and_pred(p, fvalid);
                let a = Address { base: addr.into(), offset: e as i64 * size };
                let body = s.capture(|s| elem(s, e, &a))?;
                s.emit_if(p, false, body, vec![]);
            }
            Ok(())
        };
        if vectorize && v > 1 {
            let p = self.in_bounds(buf, g, v as i64 - 1)?;
            let p = self.and_pred(p, fvalid);
            let then = self.capture(|s| vector(s, &Address { base: addr.into(), offset: 0 }))?;
            match p {
                None => self.cur().extend(then),
                Some(p) => {
                    let other = self.capture(scalar)?;
                    self.cur().push(Stmt::If { cond: p, negate: false, uniform: false, then, otherwise: other });
                }
            }
            Ok(())
        } else {
            scalar(self)
        }
    }

    /// Copies where one side is a local buffer (block-uniform registers).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_local(
        &mut self,
        src: &Side,
        dst: &Side,
        shape: &[i64],
        sdt: DType,
        ddt: DType,
        fill: &Val,
    ) -> R<()> {
        let n: i64 = shape.iter().product();
        let unflat = |mut f: i64| -> Vec<Operand> {
            let mut c = vec![Operand::Imm(0); shape.len()];
            for d in (0..shape.len()).rev() {
                c[d] = Operand::Imm(f % shape[d]);
                f /= shape[d];
            }
            c
        };
        match (src, dst) {
            (Side::Frag(_), _) | (_, Side::Frag(_)) if matches!(src, Side::Frag(_)) => Err(self.err(
                "copy from a fragment to a local buffer is not supported (a fragment is spread over threads; copy it through shared memory)",
            )),
            (_, Side::Local(db)) => {
                // Every thread reads every element.
                for f in 0..n {
                    let c = unflat(f);
                    let x = self.read_elem(src, &c, sdt, ddt, fill)?;
                    self.local_write(*db, &c, x)?;
                }
                Ok(())
            }
            (Side::Local(sb), Side::Frag(fb)) => {
                let lay = self.plan.frags.get(fb).cloned().ok_or_else(|| self.err("internal: fragment has no layout"))?;
                let regs = self.frags.get(fb).cloned().unwrap_or_default();
                for (r, reg) in regs.iter().enumerate() {
                    let l = lay.unflatten(r);
                    let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(&lay, a, l[a])).collect();
                    let x = self.local_read(*sb, &coords)?;
                    let x = self.convert(x, ddt)?;
                    self.mov(*reg, x.op, ddt);
                }
                Ok(())
            }
            (Side::Local(sb), _) => {
                // Side effects happen once: thread 0 writes every element.
                let t0 = self.is_t0;
                let body = self.capture(|s| {
                    for f in 0..n {
                        let c = unflat(f);
                        let x = s.local_read(*sb, &c)?;
                        let x = s.convert(x, ddt)?;
                        let xr = s.materialize(&x);
                        s.write_elem(dst, &c, ddt, xr)?;
                    }
                    Ok(())
                })?;
                self.emit_if(Some(t0), false, body, vec![]);
                Ok(())
            }
            _ => Err(self.err("internal: copy_local without a local side")),
        }
    }

    /// Reads one element at constant tile coordinates (uniform), converted to `ddt`.
    pub(crate) fn read_elem(&mut self, side: &Side, c: &[Operand], sdt: DType, ddt: DType, fill: &Val) -> R<Val> {
        let x = match side {
            Side::Local(b) => self.local_read(*b, c)?,
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, c)?;
                let region = self.region_of(*b);
                let r = self.load_vec(Space::Shared, region, &addr, sdt, 1);
                Val { op: r[0].into(), ty: sdt }
            }
            Side::Global { buf, origin, dims } => {
                let g = self.global_coords(origin, dims, c);
                let p = self.in_bounds(*buf, &g, 0)?;
                let addr = self.global_addr(*buf, &g)?;
                let out = self.new_reg(class_of(ddt));
                self.mov(out, fill.op.clone(), ddt);
                let body = self.capture(|s| {
                    let x = s.load_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, sdt, 1);
                    let y = s.convert(Val { op: x[0].into(), ty: sdt }, ddt)?;
                    s.mov(out, y.op, ddt);
                    Ok(())
                })?;
                self.emit_if(p, false, body, vec![]);
                return Ok(Val { op: out.into(), ty: ddt });
            }
            Side::Frag(_) => return Err(self.err("internal: element read of a fragment outside a parallel loop")),
        };
        self.convert(x, ddt)
    }

    /// Writes one element at tile coordinates (caller guards the thread).
    pub(crate) fn write_elem(&mut self, side: &Side, c: &[Operand], ddt: DType, x: Reg) -> R<()> {
        match side {
            Side::Shared(b) => {
                let addr = self.shared_addr(*b, c)?;
                let region = self.region_of(*b);
                self.store_vec(Space::Shared, region, &addr, ddt, &[x]);
                Ok(())
            }
            Side::Global { buf, origin, dims } => {
                let g = self.global_coords(origin, dims, c);
                let p = self.in_bounds(*buf, &g, 0)?;
                let addr = self.global_addr(*buf, &g)?;
                let body = self.capture(|s| {
                    s.store_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, ddt, &[x]);
                    Ok(())
                })?;
                self.emit_if(p, false, body, vec![]);
                Ok(())
            }
            _ => Err(self.err("internal: unsupported element write")),
        }
    }
}

/// A global side's access: `elems` contiguous elements of `elem_bytes` at
/// tensor coordinates `coords` (the first one's), address `addr`.
struct GlobalAccess<'c> {
    buf: BufferId,
    coords: &'c [Operand],
    addr: Reg,
    elems: usize,
    elem_bytes: i64,
}

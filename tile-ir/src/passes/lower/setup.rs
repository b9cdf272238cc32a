//! Kernel entry: thread index, parameters, block indices (rasterized),
//! and the placement of every buffer (shared offsets, fragment and local
//! registers), with the schedule's hooks around it.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn setup(&mut self) {
        let k = self.k;
        self.tid = self.new_reg(RegClass::B32);
        let tid = self.tid;
        self.emit_pro(Inst::Op { op: "mov.u32".into(), dst: tid, args: vec![Operand::Special(Special::TidX)] });
        self.is_t0 = self.new_reg(RegClass::Pred);
        let t0 = self.is_t0;
        self.emit_pro(Inst::Op { op: "setp.eq.u32".into(), dst: t0, args: vec![tid.into(), Operand::Imm(0)] });
        self.smem = self.new_reg(RegClass::B32);
        let sm = self.smem;
        self.emit_pro(Inst::Op { op: "mov.u32".into(), dst: sm, args: vec![Operand::Symbol(SMEM.into())] });

        let mut pi = 0usize;
        // PTX identifiers: ASCII letters, digits and `_` (names are only hints).
        let mut pname = |n: &str| {
            pi += 1;
            let clean: String =
                n.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
            format!("p{}_{}", pi - 1, clean)
        };
        // Tensor pointers.
        let mut ptrs = Vec::new();
        for p in &k.params {
            if let ParamKind::Tensor(b) = p.kind {
                let name = pname(&p.name);
                self.f.params.push((name.clone(), ".u64"));
                let raw = self.new_reg(RegClass::B64);
                self.emit_pro(Inst::LdParam { ty: "u64", dst: raw, name });
                let g = self.new_reg(RegClass::B64);
                self.emit_pro(Inst::Op { op: "cvta.to.global.u64".into(), dst: g, args: vec![raw.into()] });
                ptrs.push((b, g));
            }
        }
        // Dynamic dims.
        let mut dim64 = HashMap::new();
        for &d in &k.dims {
            let name = pname(&k.var(d).name);
            self.f.params.push((name.clone(), ".s32"));
            let r = self.new_reg(RegClass::B32);
            self.emit_pro(Inst::LdParam { ty: "s32", dst: r, name });
            let r64 = self.new_reg(RegClass::B64);
            self.emit_pro(Inst::Op { op: "cvt.s64.s32".into(), dst: r64, args: vec![r.into()] });
            self.vars.insert(d, r);
            dim64.insert(d, r64);
        }
        // Scalars.
        for p in &k.params {
            if let ParamKind::Scalar(v) = p.kind {
                let t = k.var(v).dtype;
                let (pty, lty) = match t {
                    DType::F32 => (".f32", "f32"),
                    DType::I32 => (".s32", "s32"),
                    DType::U32 => (".u32", "u32"),
                    DType::F16 | DType::BF16 => (".b16", "b16"),
                    DType::I64 => (".s64", "s64"),
                    DType::Bool => (".u32", "u32"),
                };
                let name = pname(&p.name);
                self.f.params.push((name.clone(), pty));
                if t == DType::Bool {
                    let r = self.new_reg(RegClass::B32);
                    self.emit_pro(Inst::LdParam { ty: lty, dst: r, name });
                    let pr = self.new_reg(RegClass::Pred);
                    self.emit_pro(Inst::Op {
                        op: "setp.ne.u32".into(),
                        dst: pr,
                        args: vec![r.into(), Operand::Imm(0)],
                    });
                    self.vars.insert(v, pr);
                } else {
                    let r = self.new_reg(class_of(t));
                    self.emit_pro(Inst::LdParam { ty: lty, dst: r, name });
                    self.vars.insert(v, r);
                }
            }
        }
        // The launch's divisors (`divide.rs`), whatever this variant uses.
        self.divisor_params(&mut pname);
        for (b, ptr) in ptrs {
            let buf = k.buffer(b);
            let mut dims = Vec::new();
            let mut dims64 = Vec::new();
            for e in &buf.shape {
                match *e {
                    Extent::Const(c) => {
                        dims.push(Operand::Imm(c));
                        dims64.push(Operand::Imm(c));
                    }
                    Extent::Dyn(v) => {
                        dims.push(self.vars.get(&v).map(|r| Operand::Reg(*r)).unwrap_or(Operand::Imm(0)));
                        dims64.push(dim64.get(&v).map(|r| Operand::Reg(*r)).unwrap_or(Operand::Imm(0)));
                    }
                }
            }
            self.tensors.insert(b, TensorInfo { ptr, dims, dims64 });
        }
        // Block indices: `ctaid`, or unfolded from the linear block id.
        let folded = crate::abi::folds_grid(k) && !self.schedule.binds_block_indices();
        for (i, v) in k.vars.iter().enumerate() {
            if let (VarKind::BlockIdx(a), false) = (v.kind, folded) {
                let r = self.new_reg(RegClass::B32);
                self.emit_pro(Inst::Op {
                    op: "mov.u32".into(),
                    dst: r,
                    args: vec![Operand::Special(Special::CtaId(a.min(2)))],
                });
                self.vars.insert(VarId(i as u32), r);
            }
        }
        let blocks = if folded { self.fold_blocks() } else { self.rasterize_blocks() };
        if let Err(e) = blocks {
            self.errors.push(e);
        }
        // The schedule's own buffers come first (aligned).
        let schedule = self.schedule.clone();
        schedule.place_buffers(self);
        // Buffers: shared offsets, fragment and local registers.
        let mut wgmma_align = self.wgmma_operand_alignment();
        // A view's alignment is asked of its parent (the view starts a
        // multiple of its swizzle span into it, `SharedLayout::window`).
        for (&b, &a) in wgmma_align.clone().iter() {
            let (root, _) = k.view_root(b);
            if root != b {
                let e = wgmma_align.entry(root).or_insert(128);
                *e = (*e).max(a);
            }
        }
        for (i, b) in k.buffers.iter().enumerate() {
            let id = BufferId(i as u32);
            if self.shared.contains_key(&id) || b.view.is_some() {
                continue;
            }
            let n: i64 = b.const_shape().map(|s| s.iter().product()).unwrap_or(0);
            match b.scope {
                Scope::Shared => {
                    let bytes = self.shared_layout(id).map(|l| l.bytes()).unwrap_or(n * b.dtype.size_bytes() as i64);
                    let stages = schedule.stages_of(id) as i64;
                    // Stage copies start 128-byte aligned, like buffers
                    // (wgmma operands: 8 rows of their swizzle span).
                    let align = wgmma_align.get(&id).copied().unwrap_or(128);
                    let align = schedule.buffer_alignment(id, align);
                    let stride = (bytes + align - 1) / align * align;
                    let footprint = if stages > 1 { stride * stages } else { bytes };
                    // An epilogue scratch takes the memory (and the region,
                    // so that barriers order it after the last accesses) of
                    // a buffer dead from its first use on, when it fits.
                    let alias = self.plan.aliases.get(&id).and_then(|dead| {
                        let (off, region) = *self.shared.get(dead)?;
                        let room = self.footprint.get(dead).copied()?;
                        (stages == 1 && bytes <= room).then_some((off, region))
                    });
                    if let Some(place) = alias {
                        self.shared.insert(id, place);
                        continue;
                    }
                    let off = self.alloc_smem_aligned(footprint, align);
                    if stages > 1 {
                        self.stage_stride.insert(id, stride);
                    }
                    self.footprint.insert(id, footprint);
                    self.shared.insert(id, (off, i as u32));
                }
                Scope::Fragment => {
                    if let Some(l) = self.plan.frags.get(&id) {
                        if l.num_regs() > MAX_REGS_PER_THREAD {
                            self.errors.push(CompileError::new(
                                b.span,
                                format!(
                                    "fragment `{}` needs {} registers per thread with {} threads (at most {MAX_REGS_PER_THREAD}); use a smaller tile or more threads",
                                    b.name,
                                    l.num_regs(),
                                    k.threads
                                ),
                            ));
                            continue;
                        }
                        let regs = match l.root.owner {
                            Some(w) => self.owned_regs(w, class_of(b.dtype), l.num_regs()),
                            None => (0..l.num_regs()).map(|_| self.f.new_reg(class_of(b.dtype))).collect(),
                        };
                        self.frags.insert(id, regs);
                    }
                }
                Scope::Local => {
                    if n > MAX_REGS_PER_THREAD as i64 {
                        self.errors.push(CompileError::new(
                            b.span,
                            format!(
                                "local `{}` has {n} elements (at most {MAX_REGS_PER_THREAD}); use shared memory",
                                b.name
                            ),
                        ));
                        continue;
                    }
                    let regs = (0..n.max(0)).map(|_| self.f.new_reg(class_of(b.dtype))).collect();
                    self.locals.insert(id, regs);
                }
                Scope::Global => {}
            }
        }
        self.place_views();
        schedule.after_buffers(self);
    }

    /// Views ([`crate::ir::View`]) take their parent's memory at the
    /// window's byte offset in the parent's layout (`SharedLayout::window`,
    /// which layout inference checked), its region (barriers order a view's
    /// accesses with its parent's and its siblings'), and its stage stride.
    fn place_views(&mut self) {
        let k = self.k;
        for (i, b) in k.buffers.iter().enumerate() {
            let Some(v) = &b.view else { continue };
            let id = BufferId(i as u32);
            let placed = (|| {
                let &(off, region) = self.shared.get(&v.of)?;
                let pshape = k.buffer(v.of).const_shape()?;
                let shape = b.const_shape()?;
                let (base, _) = self.shared_layout(v.of).ok()?.window(&pshape, &v.origin, &shape).ok()?;
                Some((off + base, region))
            })();
            match placed {
                Some(place) => {
                    self.shared.insert(id, place);
                    if let Some(&stride) = self.stage_stride.get(&v.of) {
                        self.stage_stride.insert(id, stride);
                    }
                }
                None => self.errors.push(CompileError::new(
                    b.span,
                    format!("internal: view `{}` of `{}` could not be placed", b.name, k.buffer(v.of).name),
                )),
            }
        }
    }

    /// `n` registers of `class` for a fragment of warpgroup `w` alone: a
    /// set of another warpgroup's fragment ([`Lx::owned_sets`]), or new ones.
    fn owned_regs(&mut self, w: u32, class: RegClass, n: usize) -> Vec<Reg> {
        let fits = |(regs, takers): &(Vec<Reg>, Vec<u32>)| {
            regs.len() == n && !takers.contains(&w) && regs.first().is_some_and(|r| self.f.regs[r.0 as usize] == class)
        };
        if let Some(i) = self.owned_sets.iter().position(fits) {
            self.owned_sets[i].1.push(w);
            return self.owned_sets[i].0.clone();
        }
        let regs: Vec<Reg> = (0..n).map(|_| self.f.new_reg(class)).collect();
        self.owned_sets.push((regs.clone(), vec![w]));
        regs
    }

    pub(crate) fn region_of(&self, buf: BufferId) -> Option<Region> {
        if let Some(r) = self.region_override.get(&buf) {
            return Some(*r);
        }
        self.shared.get(&buf).map(|s| Region { id: s.1, op: self.cur_op })
    }

    pub(crate) fn alloc_smem(&mut self, bytes: i64) -> i64 {
        self.alloc_smem_aligned(bytes, 128)
    }

    /// `bytes` of shared memory at an offset that is a multiple of `align`
    /// (a power of two ≥ 128).
    pub(crate) fn alloc_smem_aligned(&mut self, bytes: i64, align: i64) -> i64 {
        let off = (self.smem_top + align - 1) / align * align;
        self.smem_top = off + bytes.max(0);
        off
    }

    /// `use_swizzle(panel)`: rebinds the x and y block indices to the
    /// panel-rasterized order of `abi::rasterize` (the formula the interpreter
    /// and the tests share), in the prologue, before anything reads them.
    /// Rasterization only reorders blocks, so a kernel that does not bind
    /// both indices keeps the plain order.
    pub(crate) fn rasterize_blocks(&mut self) -> R<()> {
        let Some(panel) = self.k.rasterize else { return Ok(()) };
        let block_var =
            |axis: u8| self.k.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32));
        let (Some(bx), Some(by)) = (block_var(0), block_var(1)) else { return Ok(()) };
        let (gx, gy) = (self.k.grid[0].clone(), self.k.grid[1].clone());
        let linear = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, Expr::Var(by), gx.clone()), Expr::Var(bx));
        let (new_bx, new_by) = crate::abi::rasterize_exprs(panel, &gx, &gy, &linear);
        let mut regs = (None, None);
        let code = self.capture(|lx| {
            let x = lx.expr(&new_bx)?;
            let y = lx.expr(&new_by)?;
            regs = (Some(lx.materialize(&x)), Some(lx.materialize(&y)));
            Ok(())
        })?;
        self.push_pro(code);
        if let (Some(x), Some(y)) = regs {
            self.vars.insert(bx, x);
            self.vars.insert(by, y);
        }
        Ok(())
    }

    /// A kernel that folds its grid ([`crate::abi::folds_grid`]): binds the
    /// block indices to the user's block that this launch's block runs as,
    /// `abi::unfold_exprs` (rasterization included) of the linear id
    /// `ctaid.x + nctaid.x·(ctaid.y + nctaid.y·ctaid.z)`, in the prologue,
    /// before anything reads them. Right for the plain launch `(gx, gy, gz)`
    /// and for the folded one `(gx·gy·gz, 1, 1)` (`abi::launch_shape`).
    /// Without rasterization the plain launch (`nctaid.x == gx`, tested once)
    /// takes `ctaid` as it is and only a folded one divides (by `gx`, and by
    /// `gx·gy` when `gz` may be other than 1): a division by a runtime value
    /// is some 20 instructions of dependent latency at every block's start,
    /// which short blocks (causal attention's) feel.
    pub(crate) fn fold_blocks(&mut self) -> R<()> {
        let block_var =
            |axis: u8| self.k.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32));
        let vars = [block_var(0), block_var(1), block_var(2)];
        // The linear id goes in the slot of a block index the kernel has;
        // a kernel with none has nothing to bind.
        let Some(slot) = vars.iter().flatten().next().copied() else { return Ok(()) };
        let grid = self.k.grid.clone();
        let panel = if vars[0].is_some() && vars[1].is_some() { self.k.rasterize } else { None };
        let exprs = crate::abi::unfold_exprs(panel, &grid, &Expr::Var(slot));
        let z_plane = grid[2] != Expr::i32(1);
        let regs: [Option<Reg>; 3] = std::array::from_fn(|a| vars[a].map(|_| self.new_reg(RegClass::B32)));
        let code = self.capture(|lx| {
            let special = |lx: &mut Lx<'_>, s: Special| lx.op("mov.u32", RegClass::B32, vec![Operand::Special(s)]);
            let (x, nx, y) =
                (special(lx, Special::CtaId(0)), special(lx, Special::NctaId(0)), special(lx, Special::CtaId(1)));
            let z = if z_plane { Some(special(lx, Special::CtaId(2))) } else { None };
            let unfold = lx.capture(|lx| {
                let yz = match z {
                    Some(z) => {
                        let ny = special(lx, Special::NctaId(1));
                        lx.op("mad.lo.s32", RegClass::B32, vec![ny.into(), z.into(), y.into()])
                    }
                    None => y,
                };
                let linear = lx.op("mad.lo.s32", RegClass::B32, vec![nx.into(), yz.into(), x.into()]);
                lx.vars.insert(slot, linear);
                for a in 0..3 {
                    if let Some(r) = regs[a] {
                        let v = lx.expr(&exprs[a])?;
                        let v = lx.convert(v, DType::I32)?;
                        lx.mov(r, v.op, DType::I32);
                    }
                }
                Ok(())
            })?;
            if panel.is_some() {
                lx.cur().extend(unfold);
                return Ok(());
            }
            // The plain launch `(gx, gy, gz)` (`nctaid.x == gx`; a folded one
            // has `gx·gy·gz` blocks on x, as many only when `gy·gz = 1`, where
            // `ctaid` is the block too) runs block `ctaid`: no division.
            let gx = lx.expr(&grid[0])?;
            let gx = lx.convert(gx, DType::I32)?;
            let plain = lx.op("setp.eq.s32", RegClass::Pred, vec![nx.into(), gx.op]);
            let direct = lx.capture(|lx| {
                for (a, r) in regs.iter().enumerate() {
                    if let Some(r) = *r {
                        let c = match a {
                            0 => x.into(),
                            1 => y.into(),
                            _ => z.map_or(Operand::Imm(0), Operand::Reg),
                        };
                        lx.mov(r, c, DType::I32);
                    }
                }
                Ok(())
            })?;
            lx.emit_if(Some(plain), true, direct, unfold);
            Ok(())
        })?;
        self.push_pro(code);
        for (v, r) in vars.iter().zip(regs) {
            if let (Some(v), Some(r)) = (v, r) {
                self.vars.insert(*v, r);
            }
        }
        Ok(())
    }

    /// Errors when the stage copies of the multi-buffered shared buffers
    /// ([`Lx::stage_stride`]) make the kernel exceed the target's shared memory.
    pub(crate) fn check_staged_budget(&mut self) {
        let limit = self.target.info().shared_limit as i64;
        if self.stage_stride.is_empty() || self.smem_top <= limit {
            return;
        }
        let mut parts: Vec<(u32, String)> = Vec::new();
        for (&b, &stride) in &self.stage_stride {
            let buf = self.k.buffer(b);
            let stages = self.footprint.get(&b).copied().unwrap_or(0) / stride.max(1);
            parts.push((b.0, format!("`{}` {} × {} bytes", buf.name, stages, stride)));
        }
        parts.sort();
        let span = parts.first().map(|p| self.k.buffer(BufferId(p.0)).span).unwrap_or(SpanId::NONE);
        let list: Vec<String> = parts.into_iter().map(|p| p.1).collect();
        self.errors.push(CompileError::new(
            span,
            format!(
                "kernel `{}` needs {} bytes of shared memory with its pipeline stages ({}), more than the {} bytes a block can have on {}; use fewer stages or smaller tiles",
                self.k.name,
                self.smem_top,
                list.join(", "),
                limit,
                self.target.name()
            ),
        ));
    }
}

//! Statements: blocks (with the local entry code of epilogue copies), the
//! statement dispatch, scalar stores and atomics, serial loops and `if`s.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn lower_block(&mut self, body: &[TStmt]) {
        for s in body {
            let local = self.blocks.len() == 1
                && self.local_prologue.is_none()
                && matches!(&s.kind, StmtKind::Copy { src, dst, .. }
                    if self.plan.scratch.contains(&src.buf) || self.plan.scratch.contains(&dst.buf));
            let at = self.blocks[0].len();
            if local {
                self.local_prologue = Some(Vec::new());
            }
            if let Err(e) = self.stmt(s) {
                self.errors.push(e);
            }
            if local {
                let code = self.local_prologue.take().unwrap_or_default();
                self.blocks[0].splice(at..at, code);
            }
        }
    }

    /// [`Lx::lower_block`] into the current block as if it were the top
    /// level: an epilogue scratch's copy gets its entry code right before
    /// it (the persistent warp-specialized loop's tile body, where each
    /// statement dominates the rest of the tile).
    pub(crate) fn lower_block_in_place(&mut self, body: &[TStmt]) {
        for s in body {
            let top = self.blocks.len() - 1;
            let local = self.local_prologue.is_none()
                && matches!(&s.kind, StmtKind::Copy { src, dst, .. }
                    if self.plan.scratch.contains(&src.buf) || self.plan.scratch.contains(&dst.buf));
            let at = self.blocks[top].len();
            if local {
                self.local_prologue = Some(Vec::new());
            }
            if let Err(e) = self.stmt(s) {
                self.errors.push(e);
            }
            if local {
                let code = self.local_prologue.take().unwrap_or_default();
                self.blocks[top].splice(at..at, code);
            }
        }
    }

    /// Lowers statement `s`; one on a warpgroup's fragments
    /// ([`Lx::owner_of`]) inside that warpgroup's branch.
    pub(crate) fn stmt(&mut self, s: &TStmt) -> R<()> {
        self.span = s.span;
        if self.nest.is_none() {
            if let Some(w) = self.owner_of(s)? {
                let mut code = self.capture(|x| x.stmt_of_all(s))?;
                // A gemm's closing wait goes after the branch, run by every
                // thread (a no-op where no wgmma is in flight), when its
                // accumulator's registers are also another warpgroup's
                // fragment's (`owned_regs`; MLA's seesaw: block 0's scores
                // on warpgroup 0, block 1's on warpgroup 1) and the schedule
                // asks for it: ptxas takes a wgmma waited for only inside a
                // branch as possibly still in flight after it, and
                // serializes every wgmma of the plain warp-specialized loop
                // (C7514) once the other warpgroup's code touches those
                // registers (FlashMLA's sources note the same of nvcc);
                // where another warpgroup may have a wgmma in flight (the
                // persistent loop, a last gemm left in flight across
                // iterations) the wait outside does that (C7515).
                let wait =
                    matches!(code.last(), Some(Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None }))
                        && self.schedule.owner_gemm_waits_outside()
                        && matches!(&s.kind, StmtKind::Gemm { c, .. } if self.regs_shared_across_warpgroups(*c));
                if wait {
                    code.pop();
                }
                let p = self.warpgroup_pred(w);
                self.cur().push(Stmt::If { cond: p, negate: false, uniform: false, then: code, otherwise: vec![] });
                if wait {
                    self.emit(Inst::WgmmaWait { pending: 0 });
                }
                return Ok(());
            }
        }
        self.stmt_of_all(s)
    }

    /// Whether fragment `buf` is one warpgroup's whose registers another
    /// warpgroup's fragment also takes ([`Lx::owned_sets`]).
    fn regs_shared_across_warpgroups(&self, buf: BufferId) -> bool {
        let Some(regs) = self.frags.get(&buf) else { return false };
        self.owned_sets.iter().any(|(set, takers)| set == regs && takers.len() > 1)
    }

    /// The warpgroup whose fragments statement `s` (a tile operation or a
    /// parallel loop, outside parallel loops) works on, when the block has
    /// other warpgroups ([`crate::layout::RootLayout::owner`]): it then
    /// runs on that warpgroup only. `None` for the statements of every
    /// thread (scalar code, loops and ifs, whose statements are asked one
    /// by one, and tile operations on shared and global memory).
    pub(crate) fn owner_of(&self, s: &TStmt) -> R<Option<u32>> {
        if self.k.threads <= 128 {
            return Ok(None);
        }
        let frag = |b: BufferId| (self.k.buffer(b).scope == Scope::Fragment).then_some(b);
        let mut bufs: Vec<BufferId> = Vec::new();
        match &s.kind {
            StmtKind::Copy { src, dst, .. } => bufs.extend([frag(src.buf), frag(dst.buf)].into_iter().flatten()),
            StmtKind::Fill { buf, .. } => bufs.extend(frag(*buf)),
            StmtKind::Reduce { src, dst, .. } => bufs.extend([*src, *dst]),
            StmtKind::Gemm { a, c, .. } => bufs.extend([frag(*a), Some(*c)].into_iter().flatten()),
            StmtKind::For { kind: LoopKind::Parallel, body, .. } => {
                crate::passes::layout_infer::visit_frag_accesses(self.k, body, &mut |b, _| bufs.push(b))
            }
            _ => {}
        }
        let mut owner = None;
        for b in bufs {
            let Some(w) = self.plan.frags.get(&b).and_then(|l| l.root.owner) else { continue };
            match owner {
                Some(o) if o != w => {
                    return Err(self.err(format!(
                        "this statement works on fragments of warpgroup {o} and of warpgroup {w} (`{}`); each warpgroup's fragments are its own: pass values through shared memory",
                        self.k.buffer(b).name
                    )))
                }
                _ => owner = Some(w),
            }
        }
        Ok(owner)
    }

    /// The entry code's predicate "this thread is in warpgroup `w`", from
    /// the warpgroup index broadcast from lane 0 (`Inst::WarpBroadcast`),
    /// so that ptxas sees the branches on it as warp-uniform (wgmmas in a
    /// branch it takes for divergent are serialized, C7520).
    /// This thread's warpgroup's own barrier (`LOCAL_BARRIER + w`, the
    /// barrier pass's for warpgroup `w`'s dependences), computed once in
    /// the entry code: a warpgroup's vote ([`Inst::BarRedOr`]) syncs only
    /// its own threads.
    pub(crate) fn warpgroup_barrier_id(&mut self) -> Reg {
        if let Some(r) = self.warpgroup_barrier {
            return r;
        }
        let tid = self.tid;
        let mut id = Reg(0);
        let code = self.capture(|x| {
            let wg = x.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
            let wg = x.warp_uniform(wg);
            let base = crate::passes::barriers::LOCAL_BARRIER as i64;
            id = x.op("add.s32", RegClass::B32, vec![wg.into(), Operand::Imm(base)]);
            Ok(())
        });
        match code {
            Ok(code) => self.push_pro(code),
            Err(e) => self.errors.push(e),
        }
        self.warpgroup_barrier = Some(id);
        id
    }

    pub(crate) fn warpgroup_pred(&mut self, w: u32) -> Reg {
        if let Some(p) = self.warpgroup_preds.get(&w) {
            return *p;
        }
        let tid = self.tid;
        let mut p = Reg(0);
        let code = self.capture(|x| {
            let wg = x.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
            let wg = x.warp_uniform(wg);
            p = x.op("setp.eq.u32", RegClass::Pred, vec![wg.into(), Operand::Imm(w as i64)]);
            Ok(())
        });
        match code {
            Ok(code) => self.push_pro(code),
            Err(e) => self.errors.push(e),
        }
        self.warpgroup_preds.insert(w, p);
        self.f.warpgroup_preds.push((p, w));
        p
    }

    /// [`Lx::stmt`] run by every thread.
    fn stmt_of_all(&mut self, s: &TStmt) -> R<()> {
        if self.nest.is_none() {
            self.cur_op += 1;
        }
        if let Some(n) = parallel_nest(s) {
            let n = n?;
            if self.nest.is_some() {
                return Err(self.err("a parallel loop cannot be nested inside another parallel loop's body"));
            }
            return self.lower_nest(&n);
        }
        let in_nest = self.nest.is_some();
        let collective = |s: &Self, what: &str| {
            s.err(format!("`{what}` is a block-wide operation and cannot appear inside a parallel loop"))
        };
        if !in_nest {
            if let Some(lowered) = self.schedule.clone().lower_stmt(self, s) {
                return lowered;
            }
        }
        match &s.kind {
            StmtKind::Let { var, value } => {
                let v = self.expr(value)?;
                let t = self.k.var(*var).dtype;
                let v = self.convert(v, t)?;
                let r = self.new_reg(class_of(t));
                self.mov(r, v.op, t);
                self.vars.insert(*var, r);
                if in_nest {
                    self.nest_bound.insert(*var);
                } else if self.k.var(*var).kind == VarKind::Let {
                    let m = self.known_multiple(value);
                    self.var_mult.insert(*var, m);
                }
                Ok(())
            }
            StmtKind::Assign { var, value } => {
                if in_nest && !self.nest_bound.contains(var) {
                    return Err(self.err(format!(
                        "`{}` is assigned inside a parallel loop but declared outside it; parallel iterations cannot update a shared scalar",
                        self.k.var(*var).name
                    )));
                }
                let v = self.expr(value)?;
                let t = self.k.var(*var).dtype;
                let v = self.convert(v, t)?;
                let r = *self.vars.get(var).ok_or_else(|| self.err("assignment to an unbound variable"))?;
                self.mov(r, v.op, t);
                Ok(())
            }
            StmtKind::Store { buf, index, value } => self.lower_store(*buf, index, value),
            StmtKind::AtomicAdd { buf, index, value } => self.lower_atomic(*buf, index, value),
            StmtKind::For { var, start, end, kind, body } => {
                debug_assert!(!matches!(kind, LoopKind::Parallel));
                if self.k.var(*var).dtype != DType::I32 {
                    return Err(self.err("loop variables must be i32"));
                }
                if !in_nest {
                    if let Some(lowered) = self.schedule.clone().lower_loop(self, s, *var, start, end, body) {
                        return lowered;
                    }
                }
                let s0 = self.expr(start)?;
                let s0 = self.convert(s0, DType::I32)?.op;
                let e0 = self.expr(end)?;
                let e0 = self.convert(e0, DType::I32)?.op;
                // The range is evaluated once (Rust semantics): snapshot a
                // register bound so that the body may reassign its variable.
                let e0 = match e0 {
                    Operand::Reg(r) => {
                        let c = self.new_reg(RegClass::B32);
                        self.mov(c, r.into(), DType::I32);
                        Operand::Reg(c)
                    }
                    other => other,
                };
                let vr = self.new_reg(RegClass::B32);
                let exit = self.new_reg(RegClass::Pred);
                self.vars.insert(*var, vr);
                if in_nest {
                    self.nest_bound.insert(*var);
                }
                self.loop_depth += 1;
                let b = self.capture(|s| {
                    s.lower_block(body);
                    Ok(())
                });
                self.loop_depth -= 1;
                let b = b?;
                self.cur().push(Stmt::For { var: vr, start: s0, end: e0, exit, uniform: !in_nest, body: b });
                Ok(())
            }
            StmtKind::If { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let c = self.materialize(&c);
                let t = self.capture(|s| {
                    s.lower_block(then);
                    Ok(())
                })?;
                let o = self.capture(|s| {
                    s.lower_block(otherwise);
                    Ok(())
                })?;
                self.cur().push(Stmt::If { cond: c, negate: false, uniform: !in_nest, then: t, otherwise: o });
                Ok(())
            }
            StmtKind::Copy { src, dst, fill, .. } => {
                if in_nest {
                    return Err(collective(self, "copy"));
                }
                self.lower_copy(src, dst, fill.as_ref())
            }
            StmtKind::Fill { buf, value } => {
                if in_nest {
                    return Err(collective(self, "fill"));
                }
                self.lower_fill(*buf, value)
            }
            StmtKind::Reduce { op, src, dst, dim, keep } => {
                if in_nest {
                    return Err(collective(self, "reduce"));
                }
                self.lower_reduce(*op, *src, *dst, *dim, *keep)
            }
            StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy } => {
                if in_nest {
                    return Err(collective(self, "gemm"));
                }
                self.lower_gemm(*a, *b, *c, *trans_a, *trans_b, *clear, *policy)
            }
            StmtKind::Print { format, args } => self.lower_print(format, args),
            StmtKind::Barrier => {
                if in_nest {
                    return Err(collective(self, "barrier"));
                }
                self.emit(Inst::BarSync);
                Ok(())
            }
        }
    }

    /// A print: its arguments converted as `vprintf` takes them (floats to
    /// f64, bool to s32), called by thread 0 outside a parallel nest and by
    /// the first replica of each iteration inside one.
    pub(crate) fn lower_print(&mut self, format: &str, args: &[Expr]) -> R<()> {
        let pieces = crate::print_format::parse(format).map_err(|e| self.err(e))?;
        let mut regs = Vec::with_capacity(args.len());
        let mut types = Vec::with_capacity(args.len());
        for a in args {
            let v = self.expr(a)?;
            types.push(v.ty);
            let arg = match v.ty {
                DType::F16 | DType::BF16 | DType::F32 => {
                    let f = self.convert(v, DType::F32)?;
                    let f = self.materialize(&f);
                    (self.op("cvt.f64.f32", RegClass::B64, vec![f.into()]), "f64")
                }
                DType::Bool => {
                    let p = self.materialize(&v);
                    (self.op("selp.s32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), p.into()]), "s32")
                }
                DType::I32 => (self.materialize(&v), "s32"),
                DType::U32 => (self.materialize(&v), "u32"),
                DType::I64 => (self.materialize(&v), "s64"),
            };
            regs.push(arg);
        }
        let id = self.prints;
        self.prints += 1;
        let inst = Inst::Printf { id, format: crate::print_format::c_format(&pieces, &types), args: regs };
        let guard = match &self.nest {
            Some(n) => n.primary,
            None => Some(self.is_t0),
        };
        let call = vec![Stmt::Inst { inst, guard: None }];
        self.emit_if(guard, false, call, vec![]);
        Ok(())
    }

    /// A power of two known to divide `e` (alignment proofs for vector accesses).
    pub(crate) fn known_multiple(&self, e: &Expr) -> i64 {
        const CAP: i64 = 1 << 20;
        match e {
            Expr::Const(Value::I32(0)) | Expr::Const(Value::I64(0)) | Expr::Const(Value::U32(0)) => CAP,
            Expr::Const(Value::I32(c)) => (1i64 << (*c as i64).trailing_zeros().min(20)).min(CAP),
            Expr::Const(Value::U32(c)) => (1i64 << (*c as i64).trailing_zeros().min(20)).min(CAP),
            Expr::Const(Value::I64(c)) => (1i64 << c.trailing_zeros().min(20)).min(CAP),
            Expr::Var(v) => self.var_mult.get(v).copied().unwrap_or(1),
            Expr::Cast { to, arg } if to.is_int() => self.known_multiple(arg),
            Expr::Binary { op: BinOp::Add | BinOp::Sub | BinOp::Min | BinOp::Max, lhs, rhs } => {
                self.known_multiple(lhs).min(self.known_multiple(rhs))
            }
            Expr::Binary { op: BinOp::Mul, lhs, rhs } => (self.known_multiple(lhs) * self.known_multiple(rhs)).min(CAP),
            Expr::Binary { op: BinOp::Shl, lhs, rhs } => match const_int(rhs) {
                Some(s) if (0..20).contains(&s) => (self.known_multiple(lhs) << s).min(CAP),
                _ => 1,
            },
            _ => 1,
        }
    }

    pub(crate) fn lower_store(&mut self, buf: BufferId, index: &[Expr], value: &Expr) -> R<()> {
        self.check_rank(buf, index)?;
        let b = self.k.buffer(buf);
        let t = b.dtype;
        match b.scope {
            Scope::Fragment => {
                let r = self.frag_reg(buf, index)?;
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                self.mov(r, v.op, t);
                Ok(())
            }
            Scope::Local => {
                if self.nest.is_some() {
                    return Err(self.err(format!(
                        "local `{}` is block-uniform and cannot be written inside a parallel loop",
                        b.name
                    )));
                }
                let idx = self.index_ops(index)?;
                let v = self.expr(value)?;
                self.local_write(buf, &idx, v)
            }
            Scope::Shared => {
                let idx = self.index_ops(index)?;
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                let vr = self.materialize(&v);
                let addr = self.shared_addr(buf, &idx)?;
                let region = self.region_of(buf);
                let g = self.side_effect_guard();
                let body = self.capture(|s| {
                    s.store_vec(Space::Shared, region, &addr, t, &[vr]);
                    Ok(())
                })?;
                self.emit_if(g, false, body, vec![]);
                Ok(())
            }
            Scope::Global => {
                let idx = self.index_ops(index)?;
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                let vr = self.materialize(&v);
                let p = self.in_bounds(buf, &idx, 0)?;
                let g = self.side_effect_guard();
                let p = self.and_pred(p, g);
                let addr = self.global_addr(buf, &idx)?;
                let body = self.capture(|s| {
                    s.store_vec(Space::Global, None, &Address { base: addr.into(), offset: 0 }, t, &[vr]);
                    Ok(())
                })?;
                self.emit_if(p, false, body, vec![]);
                Ok(())
            }
        }
    }

    pub(crate) fn lower_atomic(&mut self, buf: BufferId, index: &[Expr], value: &Expr) -> R<()> {
        self.check_rank(buf, index)?;
        let b = self.k.buffer(buf);
        let t = b.dtype;
        if b.scope != Scope::Global {
            return Err(
                self.err(format!("atomic_add needs a global tensor element; `{}` is not a tensor parameter", b.name))
            );
        }
        let ty = match t {
            DType::F32 => "f32",
            DType::I32 => "s32",
            DType::U32 => "u32",
            DType::I64 => "u64",
            DType::F16 => "f16",
            DType::BF16 if self.target.has(Feature::Bf16Native) => "bf16",
            _ => {
                return Err(self.err(format!("atomic_add on {t} is not supported for {}", self.target.name())));
            }
        };
        let idx = self.index_ops(index)?;
        let v = self.expr(value)?;
        let v = self.convert(v, t)?;
        let vr = self.materialize(&v);
        let p = self.in_bounds(buf, &idx, 0)?;
        let g = self.side_effect_guard();
        let p = self.and_pred(p, g);
        let addr = self.global_addr(buf, &idx)?;
        let dst = self.new_reg(class_of(t));
        let body = self.capture(|s| {
            s.emit(Inst::AtomAdd {
                space: Space::Global,
                ty,
                dst,
                addr: Address { base: addr.into(), offset: 0 },
                src: vr.into(),
            });
            Ok(())
        })?;
        self.emit_if(p, false, body, vec![]);
        Ok(())
    }

    /// A loop's bounds as i32 registers, snapshots taken before the body
    /// runs (it may reassign variables the bounds mention).
    pub(crate) fn loop_bounds(&mut self, start: &Expr, end: &Expr) -> R<(Reg, Reg)> {
        let s0 = self.expr(start)?;
        let s0 = self.convert(s0, DType::I32)?;
        let s0 = self.materialize(&s0);
        let e0 = self.expr(end)?;
        let e0 = self.convert(e0, DType::I32)?;
        let e0 = self.materialize(&e0);
        let (a, b) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(a, s0.into(), DType::I32);
        self.mov(b, e0.into(), DType::I32);
        Ok((a, b))
    }
}

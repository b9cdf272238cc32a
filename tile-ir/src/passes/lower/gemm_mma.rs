//! Lowering of [`StmtKind::Gemm`](crate::ir::StmtKind::Gemm) to tensor-core
//! instructions: `ldmatrix` + `mma.sync.aligned.m16n8k16.row.col.f32` (sm_80
//! and later; on sm_90a for the gemms that [`crate::hopper::wgmma_gemm`]
//! rejects: the others go to wgmma, `lower/wgmma.rs`).
//!
//! Expects layout inference to have given the accumulator `c` the mma
//! accumulator layout of the gemm's warp grid ([`RootLayout::mma_accumulator`]),
//! a shared operand its ldmatrix layout ([`SharedLayout::for_ldmatrix`]) and
//! a fragment `a` the accumulator layout of an `[M, K]` tile with the same
//! warps along M (warps split M only).
//!
//! Guarantees: each warp computes its `TM × TN` tile (`TM = M / wm`,
//! `TN = N / wn`) as `TM/16 × TN/8` m16n8 atoms, K in k16 steps, fully
//! unrolled. Per k16 step a warp issues `TM/16` ldmatrix.x4 for A (none when A
//! is a fragment: registers are packed pairwise, the FlashAttention-2 trick),
//! `TN/16` ldmatrix.x4 for B (plus one .x2 when `TN/8` is odd), and
//! `TM/16 · TN/8` mma. The fragments of step `k+1` are loaded before the mmas
//! of step `k` are issued (register double-buffering). Shared addresses are
//! per-thread registers computed once in the kernel prologue (one per distinct
//! swizzled column offset); row offsets are immediates, so the unrolled loop
//! has no address arithmetic at all.

use super::{Lx, Val, R};
use crate::ir::{BufferId, DType, Expr, Extent, Scope, WarpPolicy};
use crate::layout::{mma_warp_grid, FragLayout, RootLayout, ThreadField};
use crate::thread_ir::Space;
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Stmt};

/// One ldmatrix: which matrix rows/columns each lane addresses.
struct LdmPlan {
    buf: BufferId,
    trans: bool,
    /// Thread parts of the row and column each lane addresses.
    row_fields: Vec<ThreadField>,
    col_fields: Vec<ThreadField>,
}

fn field(shift: u32, count: i64, mult: i64) -> Option<ThreadField> {
    (count > 1).then_some(ThreadField { shift, count, mult })
}

impl Lx<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lower_gemm(
        &mut self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        trans_a: bool,
        trans_b: bool,
        clear: bool,
        policy: WarpPolicy,
    ) -> R<()> {
        if let Some(g) = self.wgmma_plan(a, b, c, (trans_a, trans_b), policy) {
            return self.lower_wgmma(&g, a, b, c, clear);
        }
        let k = self.k;
        let (ab, cb) = (k.buffer(a), k.buffer(c));
        let shape = |buf: &crate::ir::Buffer| match buf.const_shape().as_deref() {
            Some([r, c]) => Ok((*r, *c)),
            _ => Err(self.err(format!("gemm operand `{}` must be a 2-D buffer with a constant shape", buf.name))),
        };
        let (m, n) = shape(cb)?;
        let (ar, ac) = shape(ab)?;
        let kk = if trans_a { ar } else { ac };
        let ty = match ab.dtype {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            t => return Err(self.err(format!("gemm operands must be f16 or bf16, `{}` is {t}", ab.name))),
        };
        if m % 16 != 0 || n % 8 != 0 || kk % 16 != 0 {
            return Err(self.err(format!(
                "gemm tile M×N×K = {m}×{n}×{kk} is not supported: mma.sync m16n8k16 needs M a multiple of 16, N a multiple of 8 and K a multiple of 16"
            )));
        }
        let have = self.plan.frags.get(&c).ok_or_else(|| self.err("internal: gemm accumulator has no layout"))?;
        // An accumulator that a wgmma gemm also writes has the wgmma layout
        // (warps (M/16, 1), layout inference): mma.sync computes it with those warps.
        let wgmma_warps = (m / 16, 1);
        let (wm, wn) = if m / 16 * 32 <= k.threads as i64
            && have.agrees(&FragLayout::full(RootLayout::mma_accumulator(m, n, k.threads, wgmma_warps)))
        {
            wgmma_warps
        } else {
            mma_warp_grid(m, n, k.threads, policy).map_err(|e| self.err(e))?
        };
        // A warpgroup's alone (`policy(Warpgroup(w))`): its four warps, on
        // its threads (the statement runs in its branch).
        let acc = match policy.owner() {
            Some(w) => RootLayout::warpgroup_tile(n, k.threads, w)
                .ok_or_else(|| self.err(format!("the block has no warpgroup {w}")))?,
            None => RootLayout::mma_accumulator(m, n, k.threads, (wm, wn)),
        };
        let acc = FragLayout::full(acc);
        if !have.agrees(&acc) {
            return Err(self.err(format!(
                "layout conflict on `{}`: it is laid out as {} but this gemm (warps {wm}×{wn}) produces {}",
                cb.name,
                have.describe(),
                acc.describe()
            )));
        }
        let (tm, tn) = (m / wm, n / wn);
        let (rm, rn, ksteps) = (tm / 16, tn / 8, kk / 16);
        let creg = self.frags.get(&c).cloned().unwrap_or_default();
        if creg.len() != acc.num_regs() {
            return Err(self.err(format!("internal: gemm accumulator `{}` has no registers", cb.name)));
        }
        let acc_reg = |am: i64, an: i64, i: i64| creg[acc.flatten(&[2 * am + i / 2, 2 * an + i % 2])];

        // Lane and warp bits (warp w = wm_i · wn + wn_i).
        let wn_bits = 63 - (wn as u64).leading_zeros();
        let warp_m = field(5 + wn_bits, wm, tm);
        let warp_n = field(5, wn, tn);
        let a_plan = (ab.scope == Scope::Shared).then(|| {
            if !trans_a {
                // [M, K]: matrices (m0-7,k0-7), (m8-15,k0-7), (m0-7,k8-15), (m8-15,k8-15).
                LdmPlan {
                    buf: a,
                    trans: false,
                    row_fields: [field(0, 8, 1), field(3, 2, 8), warp_m].into_iter().flatten().collect(),
                    col_fields: [field(4, 2, 8)].into_iter().flatten().collect(),
                }
            } else {
                // [K, M] read transposed: the same four matrices, stored k-major.
                LdmPlan {
                    buf: a,
                    trans: true,
                    row_fields: [field(0, 8, 1), field(4, 2, 8)].into_iter().flatten().collect(),
                    col_fields: [field(3, 2, 8), warp_m].into_iter().flatten().collect(),
                }
            }
        });
        let b_plan = if trans_b {
            // [N, K]: matrices (n0-7,k0-7), (n0-7,k8-15), (n8-15,k0-7), (n8-15,k8-15).
            LdmPlan {
                buf: b,
                trans: false,
                row_fields: [field(0, 8, 1), field(4, 2, 8), warp_n].into_iter().flatten().collect(),
                col_fields: [field(3, 2, 8)].into_iter().flatten().collect(),
            }
        } else {
            // [K, N] read transposed: (k0-7,n0-7), (k8-15,n0-7), (k0-7,n8-15), (k8-15,n8-15).
            LdmPlan {
                buf: b,
                trans: true,
                row_fields: [field(0, 8, 1), field(3, 2, 8)].into_iter().flatten().collect(),
                col_fields: [field(4, 2, 8), warp_n].into_iter().flatten().collect(),
            }
        };
        let a_frag = if ab.scope == Scope::Fragment {
            let want = FragLayout::full(RootLayout::mma_accumulator(m, kk, k.threads, (wm, wn)));
            let have = self.plan.frags.get(&a).ok_or_else(|| self.err("internal: gemm operand has no layout"))?;
            if wn != 1 || trans_a || !have.agrees(&want) {
                return Err(self.err(format!(
                    "gemm with A from fragment `{}` needs A laid out as the accumulator of a gemm with the same warps along M (warps {wm}×1, untransposed); here warps are {wm}×{wn} and A is {}",
                    ab.name,
                    have.describe()
                )));
            }
            let regs = self.frags.get(&a).cloned().unwrap_or_default();
            if regs.len() != want.num_regs() {
                return Err(self.err(format!("internal: fragment `{}` has no registers", ab.name)));
            }
            Some((want, regs))
        } else {
            None
        };

        let body = self.capture(|s| {
            if clear {
                for r in &creg {
                    s.mov(*r, Operand::F32(0.0), DType::F32);
                }
            }
            // A fragments of step `ks`: per m16 atom four b32 registers.
            let load_a = |s: &mut Self, ks: i64| -> R<Vec<[Reg; 4]>> {
                let mut out = Vec::new();
                for am in 0..rm {
                    if let Some((lay, regs)) = &a_frag {
                        let pick = |lr: i64, lc: i64| regs[lay.flatten(&[lr, lc])];
                        let mut words = [Reg(0); 4];
                        for (j, (lr, atom)) in
                            [(2 * am, 2 * ks), (2 * am + 1, 2 * ks), (2 * am, 2 * ks + 1), (2 * am + 1, 2 * ks + 1)]
                                .into_iter()
                                .enumerate()
                        {
                            let w = s.new_reg(RegClass::B32);
                            s.emit(Inst::Pack { dst: w, lo: pick(lr, 2 * atom), hi: pick(lr, 2 * atom + 1) });
                            words[j] = w;
                        }
                        out.push(words);
                    } else if let Some(p) = &a_plan {
                        let (row, col) = if trans_a { (16 * ks, 16 * am) } else { (16 * am, 16 * ks) };
                        let d = s.ldmatrix(p, row, col, 4)?;
                        out.push([d[0], d[1], d[2], d[3]]);
                    }
                }
                Ok(out)
            };
            // B fragments of step `ks`: per n8 atom two b32 registers.
            let load_b = |s: &mut Self, ks: i64| -> R<Vec<[Reg; 2]>> {
                let mut out = Vec::new();
                let mut an = 0;
                while an < rn {
                    let num = if an + 1 < rn { 4 } else { 2 };
                    let (row, col) = if trans_b { (8 * an, 16 * ks) } else { (16 * ks, 8 * an) };
                    let d = s.ldmatrix(&b_plan, row, col, num)?;
                    out.push([d[0], d[1]]);
                    if num == 4 {
                        out.push([d[2], d[3]]);
                    }
                    an += num as i64 / 2;
                }
                Ok(out)
            };
            let mut a_cur = load_a(s, 0)?;
            let mut b_cur = load_b(s, 0)?;
            for ks in 0..ksteps {
                // Next step's operands first: their latency hides behind these mmas.
                let next = if ks + 1 < ksteps { Some((load_a(s, ks + 1)?, load_b(s, ks + 1)?)) } else { None };
                for am in 0..rm {
                    for j in 0..rn {
                        // Serpentine over N so consecutive mmas share B or A registers.
                        let an = if am % 2 == 0 { j } else { rn - 1 - j };
                        let d = [acc_reg(am, an, 0), acc_reg(am, an, 1), acc_reg(am, an, 2), acc_reg(am, an, 3)];
                        let bw = b_cur[an as usize];
                        s.emit(Inst::Mma { ab: ty, d, a: a_cur[am as usize], b: bw, c: d });
                    }
                }
                if let Some((na, nb)) = next {
                    a_cur = na;
                    b_cur = nb;
                }
            }
            Ok(())
        })?;
        // Whole warps idle: mma and ldmatrix are warp-collective.
        match self.active_pred(&acc.root) {
            Some(p) => {
                self.cur().push(Stmt::If { cond: p, negate: false, uniform: false, then: body, otherwise: vec![] })
            }
            None => self.cur().extend(body),
        }
        Ok(())
    }

    /// Emits one ldmatrix of `num` 8×8 matrices from `p.buf`, at constant
    /// element offset `(row, col)` from each lane's own row and column.
    fn ldmatrix(&mut self, p: &LdmPlan, row: i64, col: i64, num: usize) -> R<Vec<Reg>> {
        let lay = self.shared_layout(p.buf)?;
        if row % lay.row_period() != 0 || (row * lay.row_stride) % 128 != 0 {
            return Err(self.err("internal: ldmatrix row offset breaks the swizzle pattern"));
        }
        let base = self.ldmatrix_base(p, col)?;
        let (buf_off, _) = *self.shared.get(&p.buf).ok_or_else(|| self.err("internal: shared buffer not allocated"))?;
        let dsts: Vec<Reg> = (0..num).map(|_| self.new_reg(RegClass::B32)).collect();
        let region = self.region_of(p.buf);
        let addr = Address { base: base.into(), offset: buf_off + row * lay.row_stride };
        let addr = self.with_stage(p.buf, addr);
        self.emit(Inst::Ldmatrix { trans: p.trans, dsts: dsts.clone(), addr, region });
        Ok(dsts)
    }

    /// The calling thread's shared address (without the buffer's offset) of
    /// its ldmatrix row at column offset `col`: computed once in the prologue
    /// through [`Lx::shared_offset`], and cached.
    fn ldmatrix_base(&mut self, p: &LdmPlan, col: i64) -> R<Reg> {
        let key = (p.buf, p.row_fields.clone(), p.col_fields.clone(), col);
        if let Some(r) = self.ldm_bases.get(&key) {
            return Ok(*r);
        }
        let row_t = self.thread_bits_value(&p.row_fields);
        let col_t = self.thread_bits_value(&p.col_fields);
        let code = self.capture(|s| {
            let col = s.add_i32(col_t, Operand::Imm(col));
            let off = s.shared_offset(p.buf, &[row_t, col])?;
            let sm = s.smem;
            let sum = s.add_i32(Operand::Reg(sm), off);
            let r = s.materialize(&Val { op: sum, ty: DType::I32 });
            s.ldm_bases.insert(key, r);
            Ok(())
        })?;
        self.push_pro(code);
        self.ldm_bases
            .get(&(p.buf, p.row_fields.clone(), p.col_fields.clone(), col))
            .copied()
            .ok_or_else(|| self.err("internal: ldmatrix base"))
    }

    /// The epilogue store of a full 2-D fragment (an accumulator) to a 2-D
    /// tensor tile at `origin`: one 64-bit base address per thread, one row
    /// step per distinct row register, column offsets as immediates, so each
    /// vector group costs an add, a bounds test and a store. Returns `false`
    /// (nothing emitted) when the copy is not of that shape; the generic copy
    /// path handles it then.
    pub(crate) fn store_fragment_2d(
        &mut self,
        frag: BufferId,
        dst: BufferId,
        origin: &[Operand],
        origin_last: Option<&Expr>,
    ) -> R<bool> {
        let k = self.k;
        let (fb, gb) = (k.buffer(frag), k.buffer(dst));
        let Some(lay) = self.plan.frags.get(&frag).cloned() else { return Ok(false) };
        let root = &lay.root;
        if lay.kept != [0, 1]
            || gb.rank() != 2
            || origin.len() != 2
            || root.active_threads() != k.threads as i64
            || root.dim_padded(0)
            || root.dim_padded(1)
        {
            return Ok(false);
        }
        let (sdt, ddt) = (fb.dtype, gb.dtype);
        let regs = self.frags.get(&frag).cloned().unwrap_or_default();
        if sdt == DType::Bool || ddt == DType::Bool || regs.len() != lay.num_regs() {
            return Ok(false);
        }
        let info = self.tensors.get(&dst).ok_or_else(|| self.err("internal: tensor parameter not bound"))?;
        let (rows, cols, cols64) = (info.dims[0].clone(), info.dims[1].clone(), info.dims64[1].clone());
        let size = ddt.size_bytes() as i64;
        let v = lay.vec_width();
        let tr = self.tbase(root, 0);
        let tc = self.tbase(root, 1);
        let rb = self.add_i32(origin[0].clone(), tr);
        let cb = self.add_i32(origin[1].clone(), tc);
        let rb = self.materialize(&Val { op: rb, ty: DType::I32 });
        let cb = self.materialize(&Val { op: cb, ty: DType::I32 });
        let base = self.global_addr(dst, &[rb.into(), cb.into()])?;
        // Vector stores need the row length and the tile's first column to be multiples of `v`.
        let origin_ok = origin_last.map(|e| self.known_multiple(e) % v == 0).unwrap_or(false);
        let body = |s: &mut Self, vectorize: bool| -> R<()> {
            for lr in 0..root.regs_along(0) {
                let roff = root.reg_offset(0, lr);
                let row = s.add_i32(rb.into(), Operand::Imm(roff));
                let prow = s.op("setp.lt.u32", RegClass::Pred, vec![row, rows.clone()]);
                let row_addr = match &cols64 {
                    Operand::Imm(n) => Address { base: base.into(), offset: roff * n * size },
                    n => {
                        let step = s.op("mul.lo.s64", RegClass::B64, vec![n.clone(), Operand::Imm(roff * size)]);
                        let a = s.op("add.s64", RegClass::B64, vec![base.into(), step.into()]);
                        Address { base: a.into(), offset: 0 }
                    }
                };
                let group = if vectorize { v } else { 1 };
                let mut lc = 0;
                while lc < root.regs_along(1) {
                    let coff = root.reg_offset(1, lc);
                    let mut vals = Vec::new();
                    for e in 0..group {
                        let x = regs[lay.flatten(&[lr, lc + e])];
                        let y = s.convert(Val { op: x.into(), ty: sdt }, ddt)?;
                        vals.push(s.materialize(&y));
                    }
                    let last = s.add_i32(cb.into(), Operand::Imm(coff + group - 1));
                    let pcol = s.op("setp.lt.u32", RegClass::Pred, vec![last, cols.clone()]);
                    let p = s.op("and.pred", RegClass::Pred, vec![prow.into(), pcol.into()]);
                    let a = Address { base: row_addr.base.clone(), offset: row_addr.offset + coff * size };
                    let st = s.capture(|s| {
                        s.store_vec(Space::Global, None, &a, ddt, &vals);
                        Ok(())
                    })?;
                    let edge = if group > 1 {
                        // The tile sticks out of the tensor: element by element.
                        s.capture(|s| {
                            for (e, x) in vals.iter().enumerate() {
                                let c = s.add_i32(cb.into(), Operand::Imm(coff + e as i64));
                                let pc = s.op("setp.lt.u32", RegClass::Pred, vec![c, cols.clone()]);
                                let pe = s.op("and.pred", RegClass::Pred, vec![prow.into(), pc.into()]);
                                let ae = Address { base: a.base.clone(), offset: a.offset + e as i64 * size };
                                s.emit_guarded(
                                    Inst::St {
                                        space: Space::Global,
                                        ty: super::mem_ty(ddt),
                                        srcs: vec![(*x).into()],
                                        addr: ae,
                                        region: None,
                                    },
                                    Some((pe, false)),
                                );
                            }
                            Ok(())
                        })?
                    } else {
                        vec![]
                    };
                    s.cur().push(Stmt::If { cond: p, negate: false, uniform: false, then: st, otherwise: edge });
                    lc += group;
                }
            }
            Ok(())
        };
        let last_extent = gb.shape[1];
        match (v > 1 && origin_ok, last_extent) {
            (true, Extent::Const(c)) if c % v == 0 => body(self, true)?,
            (true, Extent::Dyn(_)) => {
                let cr = self.materialize(&Val { op: cols.clone(), ty: DType::I32 });
                let m = self.op("and.b32", RegClass::B32, vec![cr.into(), Operand::Imm(v - 1)]);
                let p = self.op("setp.eq.u32", RegClass::Pred, vec![m.into(), Operand::Imm(0)]);
                let then = self.capture(|s| body(s, true))?;
                let other = self.capture(|s| body(s, false))?;
                self.cur().push(Stmt::If { cond: p, negate: false, uniform: true, then, otherwise: other });
            }
            _ => body(self, false)?,
        }
        Ok(true)
    }
}

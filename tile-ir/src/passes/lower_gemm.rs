//! Lowering of [`StmtKind::Gemm`](crate::ir::StmtKind::Gemm) to tensor-core
//! instructions: `ldmatrix` + `mma.sync.aligned.m16n8k16.row.col.f32` (sm_80
//! and later; also used on sm_90a).
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
use crate::ir::{BufferId, DType, Scope, WarpPolicy};
use crate::layout::{mma_warp_grid, FragLayout, RootLayout, ThreadField};
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
    pub(super) fn lower_gemm(
        &mut self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        trans_a: bool,
        trans_b: bool,
        clear: bool,
        policy: WarpPolicy,
    ) -> R<()> {
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
        let (wm, wn) = mma_warp_grid(m, n, k.threads, policy).map_err(|e| self.err(e))?;
        let acc = FragLayout::full(RootLayout::mma_accumulator(m, n, k.threads, (wm, wn)));
        let have = self.plan.frags.get(&c).ok_or_else(|| self.err("internal: gemm accumulator has no layout"))?;
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
        let creg = self.frags.get(&c).cloned().ok_or_else(|| self.err("internal: gemm accumulator has no registers"))?;
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
            Some((want, self.frags.get(&a).cloned().ok_or_else(|| self.err("internal: fragment has no registers"))?))
        } else {
            None
        };

        let active = acc.root.active_threads();
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
                        for (j, (lr, atom)) in [(2 * am, 2 * ks), (2 * am + 1, 2 * ks), (2 * am, 2 * ks + 1), (2 * am + 1, 2 * ks + 1)]
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
        if active < k.threads as i64 {
            // Whole warps idle: mma and ldmatrix are warp-collective.
            let tid = self.tid;
            let p = self.op("setp.lt.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(active)]);
            self.cur().push(Stmt::If { cond: p, negate: false, uniform: false, then: body, otherwise: vec![] });
        } else {
            self.cur().extend(body);
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
        self.prologue.extend(code);
        self.ldm_bases.get(&(p.buf, p.row_fields.clone(), p.col_fields.clone(), col)).copied().ok_or_else(|| self.err("internal: ldmatrix base"))
    }
}

//! `gemm` → `wgmma.mma_async` in the general (not warp-specialized) sm_90a
//! lowering.
//!
//! Expects a gemm that [`crate::hopper::wgmma_shape`] accepts (the test that
//! layout inference applied too: [`crate::passes::layout_infer::infer_layouts_for`])
//! and a layout plan that gave its accumulator the wgmma accumulator layout
//! ([`wgmma_accumulator`]) and a fragment A the register-A layout
//! ([`wgmma_a_fragment`]); the shared operands were placed at offsets that
//! are multiples of 8 rows of their swizzle span, and so are their
//! pipelining stages ([`Lx::wgmma_operand_alignment`]).
//!
//! Guarantees, per gemm (`M = 64·W` over `W` warpgroups, every thread of
//! the block active):
//! ```text
//! [A from a fragment: pack the K/16 × 4 A registers, pairs of 16-bit values]
//! wgmma.fence                         // accumulator / A writes before the wgmmas
//! for s in 0..K/16:                   // warpgroup w computes rows 64w..64w+64
//!     wgmma.mma_async.m64nNk16 d, A_s, B_s, scale-d = !(clear && s == 0)
//! wgmma.commit_group
//! wgmma.wait_group 0                  // results in `d`, operands read
//! ```
//! A descriptor's start is the operand's shared address `>> 4` (`smem` + the
//! buffer's offset, plus `64·W_A` bytes per warpgroup for a K-major A, or
//! one 64-column panel for a panelled MN-major A: computed once in the
//! entry code; plus the current pipelining stage's offset, [`Lx::shared_stage`])
//! plus the k16 slice's constant descriptor from [`operand_descriptor`]; the start field holds
//! shared addresses below 256 KB, so the 64-bit add never carries into the
//! other fields. Each wgmma names the shared regions it reads, so that
//! [`crate::passes::barriers`] orders the writes before it (with the proxy
//! fence the async proxy needs) and the writes after it.
//!
//! The wait right after the commit makes each gemm synchronous for its
//! warpgroup: simple and correct. Deferring it to the next use of the
//! accumulator (overlap with independent work) is not done here.

use super::*;
use crate::hopper::{
    operand_descriptor, wgmma_a_frag_index, wgmma_a_fragment, wgmma_accumulator, wgmma_d_index, wgmma_shape, Major,
    Swizzle, WgmmaGemm,
};
use crate::thread_ir::WgmmaA;

/// Where a wgmma's A comes from.
enum ASource {
    /// A descriptor: the 64-bit (address >> 4) of the warpgroup's slice.
    Desc { base: Reg, layout: SharedLayout, major: Major },
    /// Registers: per k16 slice, four packed `.b32` words.
    Regs(Vec<[Reg; 4]>),
}

impl Lx<'_> {
    /// The byte alignment each shared buffer read by a wgmma needs: 8 rows
    /// of its swizzle span (the descriptors assume base offset 0, and the
    /// hardware swizzles absolute address bits; `smem` itself is
    /// 1024-aligned, see [`crate::hopper`]).
    pub(crate) fn wgmma_operand_alignment(&self) -> HashMap<BufferId, i64> {
        fn walk(lx: &Lx<'_>, body: &[TStmt], out: &mut HashMap<BufferId, i64>) {
            for s in body {
                match &s.kind {
                    StmtKind::Gemm { a, b, c, trans_a, trans_b, .. } => {
                        let Some(g) = wgmma_shape(lx.k, *a, *b, *c, *trans_a, *trans_b, lx.target) else { continue };
                        let ops = [g.a.as_ref().map(|(l, _)| (*a, *l)), Some((*b, g.b.0))];
                        for (buf, l) in ops.into_iter().flatten() {
                            let atom = 8 * Swizzle::of_layout(&l).map_or(16, |s| s.bytes() as i64);
                            let e = out.entry(buf).or_insert(128);
                            *e = (*e).max(atom);
                        }
                    }
                    StmtKind::For { body, .. } => walk(lx, body, out),
                    StmtKind::If { then, otherwise, .. } => {
                        walk(lx, then, out);
                        walk(lx, otherwise, out);
                    }
                    _ => {}
                }
            }
        }
        let mut out = HashMap::new();
        if self.schedule.wgmma_gemms() {
            walk(self, &self.k.body, &mut out);
        }
        out
    }

    /// The wgmma plan of a gemm, when it lowers to wgmma here: eligible
    /// ([`wgmma_shape`]) and its accumulator laid out for wgmma (layout
    /// inference for this target did that; a plan made for sm_80 did not,
    /// and the gemm then stays on mma.sync). The warp-specialized variant
    /// keeps mma.sync outside its loop.
    pub(crate) fn wgmma_plan(
        &self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        trans_a: bool,
        trans_b: bool,
    ) -> Option<WgmmaGemm> {
        if !self.schedule.wgmma_gemms() {
            return None;
        }
        let g = wgmma_shape(self.k, a, b, c, trans_a, trans_b, self.target)?;
        let want = FragLayout::full(wgmma_accumulator(g.m, g.n, self.k.threads).ok()?);
        // The shared operands must be laid out as the descriptors assume.
        let placed = |buf: BufferId, l: &SharedLayout| self.plan.shared.get(&buf) == Some(l);
        let operands_ok = g.a.as_ref().is_none_or(|(l, _)| placed(a, l)) && placed(b, &g.b.0);
        (operands_ok && self.plan.frags.get(&c)?.agrees(&want)).then_some(g)
    }

    /// The 64-bit descriptor start (`address >> 4`) of operand `buf` for the
    /// calling thread: `(smem + buf's offset + extra) >> 4` computed once in
    /// the entry code (`extra`: the warpgroup's rows of A), plus the current
    /// pipelining stage's offset `>> 4` here (stage offsets are multiples of
    /// 1024, and the sum stays below 2^14: no carry out of the start field).
    /// `stages` caches the 64-bit `stage >> 4` of the stage registers seen.
    fn wgmma_start(&mut self, buf: BufferId, wg_step: i64, stages: &mut Vec<(Operand, Reg)>) -> R<Reg> {
        let (off, _) = *self.shared.get(&buf).ok_or_else(|| self.err("internal: wgmma operand not allocated"))?;
        let mut base = None;
        let code = self.capture(|x| {
            let sm = x.smem;
            let mut abs = x.op("add.s32", RegClass::B32, vec![sm.into(), Operand::Imm(off)]);
            if wg_step != 0 {
                let tid = x.tid;
                let wg = x.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
                abs = x.op("mad.lo.s32", RegClass::B32, vec![wg.into(), Operand::Imm(wg_step), abs.into()]);
            }
            let a16 = x.op("shr.u32", RegClass::B32, vec![abs.into(), Operand::Imm(4)]);
            base = Some(x.op("cvt.u64.u32", RegClass::B64, vec![a16.into()]));
            Ok(())
        })?;
        self.push_pro(code);
        let base = base.ok_or_else(|| self.err("internal: wgmma operand base"))?;
        Ok(match self.stage_of(buf) {
            None | Some(Operand::Imm(0)) => base,
            Some(Operand::Imm(x)) => self.op("add.s64", RegClass::B64, vec![base.into(), Operand::Imm(x >> 4)]),
            Some(stage) => {
                let s64 = match stages.iter().find(|(o, _)| *o == stage) {
                    Some((_, r)) => *r,
                    None => {
                        let s16 = self.op("shr.u32", RegClass::B32, vec![stage.clone(), Operand::Imm(4)]);
                        let s64 = self.op("cvt.u64.u32", RegClass::B64, vec![s16.into()]);
                        stages.push((stage, s64));
                        s64
                    }
                };
                self.op("add.s64", RegClass::B64, vec![base.into(), s64.into()])
            }
        })
    }

    /// The descriptor register of the k16 slice `s` of an operand whose
    /// start (>> 4, 64-bit) is `base`.
    fn wgmma_desc(&mut self, base: Reg, layout: &SharedLayout, major: Major, s: i64) -> R<Reg> {
        let (row0, col0) = match major {
            Major::K => (0, 16 * s),
            Major::MN => (16 * s, 0),
        };
        let d = operand_descriptor(layout, major, 0, row0, col0)
            .and_then(|d| d.encode())
            .map_err(|e| self.err(format!("internal: {e}")))?;
        Ok(self.op("add.s64", RegClass::B64, vec![base.into(), Operand::Imm(d as i64)]))
    }

    /// Lowers `gemm a, b -> c` as wgmma (see the module doc).
    pub(crate) fn lower_wgmma(&mut self, g: &WgmmaGemm, a: BufferId, b: BufferId, c: BufferId, clear: bool) -> R<()> {
        let k = self.k;
        let acc = FragLayout::full(wgmma_accumulator(g.m, g.n, k.threads).map_err(|e| self.err(e))?);
        let creg = self.frags.get(&c).cloned().unwrap_or_default();
        if creg.len() != acc.num_regs() {
            return Err(self.err(format!("internal: gemm accumulator `{}` has no registers", k.buffer(c).name)));
        }
        // Accumulator registers in the order of wgmma's `d` list.
        let mut d = vec![Reg(0); (g.n / 2) as usize];
        for lr in 0..2 {
            for lc in 0..g.n / 4 {
                d[wgmma_d_index(lr, lc)] = creg[acc.flatten(&[lr, lc])];
            }
        }
        let mut regions = Vec::new();
        let mut stages = Vec::new();
        let a_src = match &g.a {
            Some((layout, major)) => {
                // Warpgroup w reads A rows 64w..: 64 rows of the span W
                // (K-major), or the 64-column panels from 64w on (MN-major).
                let step = match (g.warpgroups > 1, major) {
                    (false, _) => 0,
                    (true, Major::K) => 64 * Swizzle::of_layout(layout).map_or(0, |s| s.bytes() as i64),
                    (true, Major::MN) => 64 / layout.panel_cols.unwrap_or(layout.cols).max(1) * layout.panel_bytes(),
                };
                let base = self.wgmma_start(a, step, &mut stages)?;
                regions.extend(self.region_of(a));
                ASource::Desc { base, layout: *layout, major: *major }
            }
            None => {
                let want = FragLayout::full(wgmma_a_fragment(g.m, g.k, k.threads).map_err(|e| self.err(e))?);
                let name = &k.buffer(a).name;
                let have = self
                    .plan
                    .frags
                    .get(&a)
                    .ok_or_else(|| self.err(format!("internal: fragment `{name}` has no layout")))?;
                if !have.agrees(&want) {
                    return Err(self.err(format!(
                        "gemm with A from fragment `{name}` needs A laid out as the wgmma register-A operand {}; it is {}",
                        want.describe(),
                        have.describe()
                    )));
                }
                let regs = self.frags.get(&a).cloned().unwrap_or_default();
                if regs.len() != want.num_regs() {
                    return Err(self.err(format!("internal: fragment `{name}` has no registers")));
                }
                // Packed before the fence: wgmma.fence orders these writes.
                let mut words = Vec::new();
                for s in 0..g.k / 16 {
                    let mut w = [Reg(0); 4];
                    for (j, slot) in w.iter_mut().enumerate() {
                        let half = |h: i64| {
                            let (lr, lc) = wgmma_a_frag_index(s, j as i64, h);
                            regs[want.flatten(&[lr, lc])]
                        };
                        let (lo, hi) = (half(0), half(1));
                        let dst = self.new_reg(RegClass::B32);
                        self.emit(Inst::Pack { dst, lo, hi });
                        *slot = dst;
                    }
                    words.push(w);
                }
                ASource::Regs(words)
            }
        };
        let b_base = self.wgmma_start(b, 0, &mut stages)?;
        regions.extend(self.region_of(b));
        let (b_layout, b_major) = g.b;
        self.emit(Inst::WgmmaFence);
        for s in 0..g.k / 16 {
            let (a_op, trans_a) = match &a_src {
                ASource::Desc { base, layout, major } => {
                    let r = self.wgmma_desc(*base, layout, *major, s)?;
                    (WgmmaA::Desc(r.into()), *major == Major::MN)
                }
                ASource::Regs(words) => (WgmmaA::Regs(words[s as usize]), false),
            };
            let b_desc = self.wgmma_desc(b_base, &b_layout, b_major, s)?;
            self.emit(Inst::Wgmma {
                n: g.n as u32,
                ab: g.ab,
                d: d.clone(),
                a: a_op,
                b_desc: b_desc.into(),
                scale_d: Operand::Imm(!(clear && s == 0) as i64),
                neg_a: false,
                neg_b: false,
                trans_a,
                trans_b: b_major == Major::MN,
                regions: regions.clone(),
            });
        }
        self.emit(Inst::WgmmaCommit);
        self.emit(Inst::WgmmaWait { pending: 0 });
        Ok(())
    }
}

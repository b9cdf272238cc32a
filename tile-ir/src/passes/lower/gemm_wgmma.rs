//! `gemm` → `wgmma.mma_async` in the general (not warp-specialized) sm_90a
//! lowering.
//!
//! Expects a gemm that [`crate::hopper::wgmma_gemm`] accepts (the test that
//! layout inference applied too: [`crate::passes::layout_infer::infer_layouts_for`])
//! and a layout plan that gave its accumulator the wgmma accumulator layout
//! of its warpgroup grid ([`crate::hopper::wgmma_split_accumulator`], or
//! one warpgroup's alone: [`WgmmaGemm::accumulator`]) and a fragment A the
//! register-A layout ([`WgmmaGemm::a_fragment`]); the shared operands were
//! placed at offsets that are multiples of 8 rows of their swizzle span,
//! and so are their pipelining stages ([`Lx::wgmma_operand_alignment`]).
//!
//! Guarantees, per gemm (`W` warpgroups as an `M/64 × C` grid, `C` =
//! [`WgmmaGemm::col_groups`]; warpgroup `w` owns rows `64·(w / C)..+64` and
//! columns `(w % C)·N/C..+N/C`; every thread of the block active):
//! ```text
//! [A from a fragment (C = 1 only): pack the K/16 × 4 A registers, pairs of 16-bit values]
//! wgmma.fence                         // accumulator / A writes before the wgmmas
//! for s in 0..K/16:
//!     for (c0, n) in insts:           // the warpgroup's N/C columns, ≤ 256 each
//!         wgmma.mma_async.m64n{n}k16 d[c0..c0+n], A_s, B_s(c0), scale-d = !(clear && s == 0)
//! wgmma.commit_group
//! wgmma.wait_group 0                  // results in `d`, operands read
//! ```
//! A descriptor's start is the operand's shared address `>> 4` (`smem` + the
//! buffer's offset + a byte offset into it, [`Lx::wgmma_start`]'s `at`, plus
//! per warpgroup: for A, `64·W_A` bytes per row band for a K-major A, or
//! one 64-column panel for a panelled MN-major A; for B, `N/C` rows of its
//! span (K-major) or `N/C / 64` panels (MN-major) per column group:
//! computed once in the entry code; plus the current pipelining stage's
//! offset, [`Lx::shared_stage`]) plus the k16 slice's (and instruction's
//! first column's) constant descriptor from [`operand_descriptor`]; the start field holds
//! shared addresses below 256 KB, so the 64-bit add never carries into the
//! other fields. Each wgmma names the shared regions it reads, so that
//! [`crate::passes::barriers`] orders the writes before it (with the proxy
//! fence the async proxy needs) and the writes after it.
//!
//! The wait right after the commit makes each gemm synchronous for its
//! warpgroup; [`crate::passes::wgmma_wait`] defers it to the first
//! statement that touches what any wgmma uses (all of a gemm's
//! instructions are in one commit group, so one wait covers them).

use super::*;
use crate::hopper::{operand_descriptor, wgmma_a_frag_index, wgmma_d_index, wgmma_gemm, Major, Swizzle, WgmmaGemm};
use crate::ir::WarpPolicy;
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
                    StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                        let Some(g) = wgmma_gemm(lx.k, *a, *b, *c, *trans_a, *trans_b, *policy, lx.target) else {
                            continue;
                        };
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
    /// ([`wgmma_gemm`]) and its accumulator laid out for wgmma (layout
    /// inference for this target did that; a plan made for sm_80 did not,
    /// and the gemm then stays on mma.sync). The warp-specialized variant
    /// keeps mma.sync outside its loop.
    pub(crate) fn wgmma_plan(
        &self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        (trans_a, trans_b): (bool, bool),
        policy: WarpPolicy,
    ) -> Option<WgmmaGemm> {
        if !self.schedule.wgmma_gemms() {
            return None;
        }
        let g = wgmma_gemm(self.k, a, b, c, trans_a, trans_b, policy, self.target)?;
        let want = FragLayout::full(g.accumulator(self.k.threads).ok()?);
        // The shared operands must be laid out as the descriptors assume.
        let placed = |buf: BufferId, l: &SharedLayout| self.plan.shared.get(&buf) == Some(l);
        let operands_ok = g.a.as_ref().is_none_or(|(l, _)| placed(a, l)) && placed(b, &g.b.0);
        (operands_ok && self.plan.frags.get(&c)?.agrees(&want)).then_some(g)
    }

    /// A shared address `>> 4` as a descriptor's start field: its low 14
    /// bits. In a thread block cluster a block's own shared addresses carry
    /// its rank above the 256 KB of the field (the shared::cta window sits
    /// inside the cluster's), which would carry into LBO: measured on the
    /// H100, the rank-1 block of an MLA pair read the wrong 64-column panels
    /// of V (an MN-major B) while its K-major scores, whose LBO the hardware
    /// ignores, were right. Without a cluster the addresses are below 256 KB
    /// and the value is returned as is (the PTX of such kernels unchanged).
    pub(crate) fn descriptor_start(&mut self, a16: Reg) -> Reg {
        if self.k.cluster == [1, 1, 1] {
            return a16;
        }
        self.op("and.b32", RegClass::B32, vec![a16.into(), Operand::Imm(0x3FFF)])
    }

    /// The 64-bit descriptor start (`address >> 4`) of operand `buf` for the
    /// calling thread: `(smem + buf's offset + at + the warpgroup's step) >> 4`
    /// computed once in the entry code, plus the current pipelining stage's
    /// offset `>> 4` here (stage offsets are multiples of 1024, and the sum
    /// stays below 2^14: no carry out of the start field). `at`: a byte
    /// offset into the buffer (0: its start; a view of part of a buffer
    /// passes where the part starts, a multiple of the layout's atom).
    /// `wg`: `(shift, groups, step)`, the warpgroup's operand starts `step`
    /// bytes per unit of `(tid >> shift) % groups` (`groups` 0: no modulo),
    /// or `None` (every warpgroup reads the same slice).
    /// `stages` caches the 64-bit `stage >> 4` of the stage registers seen.
    fn wgmma_start(
        &mut self,
        buf: BufferId,
        at: i64,
        wg: Option<(i64, i64, i64)>,
        stages: &mut Vec<(Operand, Reg)>,
    ) -> R<Reg> {
        let (off, _) = *self.shared.get(&buf).ok_or_else(|| self.err("internal: wgmma operand not allocated"))?;
        let mut base = None;
        let code = self.capture(|x| {
            let sm = x.smem;
            let mut abs = x.op("add.s32", RegClass::B32, vec![sm.into(), Operand::Imm(off + at)]);
            if let Some((shift, groups, step)) = wg.filter(|w| w.2 != 0) {
                let tid = x.tid;
                let mut wg = x.op("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(shift)]);
                if shift >= 5 {
                    wg = x.warp_uniform(wg);
                }
                if groups > 0 {
                    wg = x.op("and.b32", RegClass::B32, vec![wg.into(), Operand::Imm(groups - 1)]);
                }
                abs = x.op("mad.lo.s32", RegClass::B32, vec![wg.into(), Operand::Imm(step), abs.into()]);
            }
            let a16 = x.op("shr.u32", RegClass::B32, vec![abs.into(), Operand::Imm(4)]);
            let a16 = x.descriptor_start(a16);
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
    /// start (>> 4, 64-bit) is `base`, from its M/N row or column `mn0` on
    /// (an instruction's first column within the warpgroup's).
    fn wgmma_desc(&mut self, base: Reg, layout: &SharedLayout, major: Major, s: i64, mn0: i64) -> R<Reg> {
        let (row0, col0) = match major {
            Major::K => (mn0, 16 * s),
            Major::MN => (16 * s, mn0),
        };
        let d = operand_descriptor(layout, major, 0, row0, col0)
            .and_then(|d| d.encode())
            .map_err(|e| self.err(format!("internal: {e}")))?;
        Ok(self.op("add.s64", RegClass::B64, vec![base.into(), Operand::Imm(d as i64)]))
    }

    /// Lowers `gemm a, b -> c` as wgmma (see the module doc).
    pub(crate) fn lower_wgmma(&mut self, g: &WgmmaGemm, a: BufferId, b: BufferId, c: BufferId, clear: bool) -> R<()> {
        let k = self.k;
        let acc = FragLayout::full(g.accumulator(k.threads).map_err(|e| self.err(e))?);
        let creg = self.frags.get(&c).cloned().unwrap_or_default();
        if creg.len() != acc.num_regs() {
            return Err(self.err(format!("internal: gemm accumulator `{}` has no registers", k.buffer(c).name)));
        }
        // Per instruction, its accumulator registers in the order of
        // wgmma's `d` list: the warpgroup's columns `[c0, c0 + n)` are the
        // per-dim column registers from `c0 / 4` on.
        let mut ds = Vec::new();
        for &(c0, n) in &g.insts {
            let mut d = vec![Reg(0); (n / 2) as usize];
            for lr in 0..2 {
                for lc in 0..n / 4 {
                    d[wgmma_d_index(lr, lc)] = creg[acc.flatten(&[lr, c0 / 4 + lc])];
                }
            }
            ds.push(d);
        }
        let col_bits = g.col_groups.trailing_zeros() as i64;
        let row_groups = g.warpgroups / g.col_groups;
        let mut regions = Vec::new();
        let mut stages = Vec::new();
        let a_src = match &g.a {
            Some((layout, major)) => {
                // Warpgroup w reads the A rows of its band 64·(w / col_groups)..:
                // 64 rows of the span W (K-major), or the 64-column panels
                // from there (MN-major).
                let step = match (row_groups > 1, major) {
                    (false, _) => 0,
                    (true, Major::K) => 64 * Swizzle::of_layout(layout).map_or(0, |s| s.bytes() as i64),
                    (true, Major::MN) => 64 / layout.panel_cols.unwrap_or(layout.cols).max(1) * layout.panel_bytes(),
                };
                let base = self.wgmma_start(a, 0, Some((7 + col_bits, 0, step)), &mut stages)?;
                regions.extend(self.region_of(a));
                ASource::Desc { base, layout: *layout, major: *major }
            }
            None => {
                let want = FragLayout::full(g.a_fragment(k.threads).map_err(|e| self.err(e))?);
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
        let (b_layout, b_major) = g.b;
        // Warpgroup w reads B from its columns (w % col_groups) · nw on: nw
        // rows of the span (K-major), or nw / 64 panels (MN-major, where
        // `wgmma_gemm` made nw a multiple of the panel's columns).
        let nw = g.n / g.col_groups;
        let b_step = match (g.col_groups > 1, b_major) {
            (false, _) => 0,
            (true, Major::K) => nw * Swizzle::of_layout(&b_layout).map_or(0, |s| s.bytes() as i64),
            (true, Major::MN) => nw / b_layout.panel_cols.unwrap_or(b_layout.cols).max(1) * b_layout.panel_bytes(),
        };
        let b_groups = if row_groups > 1 { g.col_groups } else { 0 };
        let b_base = self.wgmma_start(b, 0, Some((7, b_groups, b_step)), &mut stages)?;
        regions.extend(self.region_of(b));
        self.emit(Inst::WgmmaFence);
        for s in 0..g.k / 16 {
            let (a_op, trans_a) = match &a_src {
                ASource::Desc { base, layout, major } => {
                    let r = self.wgmma_desc(*base, layout, *major, s, 0)?;
                    (WgmmaA::Desc(r.into()), *major == Major::MN)
                }
                ASource::Regs(words) => (WgmmaA::Regs(words[s as usize]), false),
            };
            // The instructions side by side share A.
            for (&(c0, n), d) in g.insts.iter().zip(&ds) {
                let b_desc = self.wgmma_desc(b_base, &b_layout, b_major, s, c0)?;
                self.emit(Inst::Wgmma {
                    n: n as u32,
                    ab: g.ab,
                    d: d.clone(),
                    a: a_op.clone(),
                    b_desc: b_desc.into(),
                    scale_d: Operand::Imm(!(clear && s == 0) as i64),
                    neg_a: false,
                    neg_b: false,
                    trans_a,
                    trans_b: b_major == Major::MN,
                    regions: regions.clone(),
                });
            }
        }
        self.emit(Inst::WgmmaCommit);
        self.emit(Inst::WgmmaWait { pending: 0 });
        Ok(())
    }
}

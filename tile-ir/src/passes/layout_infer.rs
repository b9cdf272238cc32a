//! Layout inference: gives every fragment a [`FragLayout`] and every
//! parallel loop nest the layout its iterations are distributed by.
//!
//! Expects a verified kernel. Gemms go first: the hardware dictates their
//! layouts. A gemm gives its accumulator `c` the mma.sync accumulator layout
//! of its warp grid ([`RootLayout::mma_accumulator`], [`mma_warp_grid`]), a
//! fragment `a` the accumulator layout of an `[M, K]` tile with the same
//! warps, and its shared operands an ldmatrix-friendly (swizzled or padded)
//! [`SharedLayout`] ([`LayoutPlan::shared`]). On sm_90a
//! ([`infer_layouts_for`]) a gemm that lowers to wgmma
//! ([`crate::hopper::wgmma_gemm`]) gives its accumulator the wgmma layout
//! (warps `(M/16, 1)`, the same as mma.sync's with that grid, so the rest
//! of inference treats it alike; or, when warpgroups share 64 rows, the
//! column-split layout [`crate::hopper::wgmma_split_accumulator`], whose
//! rows span warpgroups) and its shared operands wider than 128
//! bytes a row are stored in 64-column panels
//! ([`crate::hopper::gemm_operand_layout`]). Unless the buffer carries an
//! `annotate_layout` ([`crate::ir::Buffer::layout`]), which then wins; unsupported tile shapes and
//! accumulators over [`MAX_ACCUMULATOR_REGS`] registers are errors. Then the
//! body is walked in program order; the first statement that touches a
//! fragment fixes its layout:
//! - a copy from/to global or shared memory: a blocked layout whose
//!   vector width is 16 bytes of the other side's element type (so global
//!   accesses can be 16-byte vectors);
//! - a reduction: the destination gets the source's layout without the
//!   reduced dim (replicated across the threads that held a row);
//! - a fragment-to-fragment copy: both sides share one layout (taken
//!   before the reductions when the source's layout is already fixed: a
//!   gemm's scores copied out of its accumulator and then reduced);
//! - a parallel nest: the nest takes the layout of a fragment indexed by all
//!   its loop variables (in order); fragments indexed by a subset take the
//!   nest's layout restricted to those dims; a nest whose only fixed
//!   fragments are row vectors (`m[i]` from a reduction) distributes its
//!   rows like them and its innermost dim over the remaining thread bits.
//!
//! Later uses must agree (same threads and registers for every coordinate,
//! [`FragLayout::agrees`]); otherwise a [`CompileError`] names both uses.
//! Guarantees: every fragment that is used has a layout whose shape is the
//! fragment's shape; every parallel nest (keyed by its outermost loop
//! variable) has a layout whose shape is its iteration space.

use crate::ir::{BufferId, Expr, Extent, Kernel, LoopKind, Scope, SpanId, Stmt, StmtKind, VarId};
use crate::ir::{DType, WarpPolicy};
use crate::layout::{mma_warp_grid, FragLayout, RootLayout, SharedLayout};
use crate::{CompileError, Target};
use std::collections::{HashMap, HashSet};

/// Accumulator registers per thread a gemm may use (the register file holds
/// 255; operands, addresses and the epilogue need the rest).
pub const MAX_ACCUMULATOR_REGS: usize = 192;

/// The layouts chosen for a kernel.
#[derive(Clone, Debug, Default)]
pub struct LayoutPlan {
    /// The layout of each fragment buffer.
    pub frags: HashMap<BufferId, FragLayout>,
    /// The layout of each parallel nest, keyed by its outermost loop variable.
    pub nests: HashMap<VarId, FragLayout>,
    /// Shared buffers with a layout other than row-major (tensor-core
    /// operands); every access to such a buffer goes through it.
    pub shared: HashMap<BufferId, SharedLayout>,
    /// Compiler scratch buffers (epilogue staging, [`super::epilogue`]) that
    /// may take the memory of a shared buffer dead from their first use on:
    /// `scratch → dead buffer`. Lowering places the scratch at the dead
    /// buffer's offset, under its region (so that barrier insertion orders
    /// the scratch after the buffer's last accesses), when it fits there.
    pub aliases: HashMap<BufferId, BufferId>,
    /// The epilogue scratch buffers. Lowering computes the per-thread values
    /// of the copies through them right before those copies, not in the
    /// entry code, so that they do not stay live across the main loop.
    pub scratch: HashSet<BufferId>,
}

/// A maximal nest of `Parallel` loops.
pub struct Nest<'a> {
    /// The loop variables, outermost first.
    pub vars: Vec<VarId>,
    /// Each loop's (constant) start.
    pub starts: Vec<i64>,
    /// Each loop's (constant) trip count.
    pub extents: Vec<i64>,
    /// The innermost loop's body.
    pub body: &'a [Stmt],
}

/// Evaluates an integer expression made of constants only.
pub fn const_int(e: &Expr) -> Option<i64> {
    use crate::ir::{BinOp, Value};
    match e {
        Expr::Const(Value::I32(v)) => Some(*v as i64),
        Expr::Const(Value::U32(v)) => Some(*v as i64),
        Expr::Const(Value::I64(v)) => Some(*v),
        Expr::Cast { arg, to } if to.is_int() => const_int(arg),
        Expr::Binary { op, lhs, rhs } => {
            let (a, b) = (const_int(lhs)?, const_int(rhs)?);
            Some(match op {
                BinOp::Add => a.checked_add(b)?,
                BinOp::Sub => a.checked_sub(b)?,
                BinOp::Mul => a.checked_mul(b)?,
                BinOp::Div if b != 0 => a / b,
                BinOp::Rem if b != 0 => a % b,
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                _ => return None,
            })
        }
        _ => None,
    }
}

/// If `stmt` is a parallel loop, the maximal nest it starts: the chain of
/// parallel loops each of which is the only statement of its parent's body.
pub fn parallel_nest(stmt: &Stmt) -> Option<Result<Nest<'_>, CompileError>> {
    let StmtKind::For { kind: LoopKind::Parallel, .. } = &stmt.kind else { return None };
    let mut nest = Nest { vars: vec![], starts: vec![], extents: vec![], body: &[] };
    let mut cur = stmt;
    loop {
        let StmtKind::For { var, start, end, body, .. } = &cur.kind else {
            return Some(Err(CompileError::new(cur.span, "internal: parallel nest chain contains a non-loop")));
        };
        let (Some(s), Some(e)) = (const_int(start), const_int(end)) else {
            return Some(Err(CompileError::new(cur.span, "a parallel loop needs constant bounds")));
        };
        if e <= s {
            return Some(Err(CompileError::new(cur.span, "a parallel loop needs a non-empty constant range")));
        }
        nest.vars.push(*var);
        nest.starts.push(s);
        nest.extents.push(e - s);
        match body.as_slice() {
            [inner @ Stmt { kind: StmtKind::For { kind: LoopKind::Parallel, .. }, .. }] => cur = inner,
            _ => {
                nest.body = body;
                break;
            }
        }
    }
    if nest.vars.len() > 3 {
        return Some(Err(CompileError::new(stmt.span, "parallel loop nests may have at most 3 dimensions")));
    }
    Some(Ok(nest))
}

/// Which nest dims a fragment index names: `Some(positions)` when every index
/// is a distinct nest variable in increasing nest order.
pub fn nest_positions(nest_vars: &[VarId], index: &[Expr]) -> Option<Vec<usize>> {
    let mut pos = Vec::new();
    for e in index {
        let Expr::Var(v) = e else { return None };
        let p = nest_vars.iter().position(|x| x == v)?;
        if pos.last().is_some_and(|&l| l >= p) {
            return None;
        }
        pos.push(p);
    }
    Some(pos)
}

struct Infer<'k> {
    k: &'k Kernel,
    plan: LayoutPlan,
    /// Where each fragment's layout was fixed (for conflict messages).
    origin: HashMap<BufferId, String>,
    /// Preferred vector width of each fragment (from its copies), and
    /// whether it comes from a global copy.
    vec_hint: HashMap<BufferId, (bool, i64)>,
    errors: Vec<CompileError>,
    phase: Phase,
    /// Accumulators of gemms that lower to wgmma (warp-specialized sm_90a
    /// variant): their warps split M only, 16 rows each, so that warpgroup
    /// `j` owns rows `64j..64j+64` ([`crate::hopper::wgmma_accumulator`]).
    wgmma_accs: HashSet<BufferId>,
    /// The target whose shared operand layouts are chosen
    /// ([`crate::hopper::gemm_operand_layout`]: panels on sm_90a).
    target: Target,
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Phase {
    Gemms,
    Reductions,
    Nests,
    Rest,
}

/// Infers the layouts of `kernel`'s fragments and parallel nests, every
/// gemm as mma.sync (the sm_80 choice; [`infer_layouts_for`] knows the target).
pub fn infer_layouts(kernel: &Kernel) -> Result<LayoutPlan, Vec<CompileError>> {
    infer_layouts_with(kernel, &HashSet::new())
}

/// [`infer_layouts`] for `target`: the accumulators of the gemms that lower
/// to wgmma there ([`wgmma_accumulators`]) get the wgmma accumulator layout,
/// and their fragment A operands the wgmma register-A layout.
pub fn infer_layouts_for(kernel: &Kernel, target: Target) -> Result<LayoutPlan, Vec<CompileError>> {
    infer(kernel, &wgmma_accumulators(kernel, target), target)
}

/// The accumulators of `kernel`'s gemms that lower to wgmma on `target`
/// ([`crate::hopper::wgmma_gemm`], the test the lowering applies too).
/// Another gemm into the same accumulator that is not eligible lowers to
/// mma.sync with the same warp grid `(M/16, 1)`.
///
/// An accumulator whose wgmma gemms split its columns over warpgroups
/// ([`crate::hopper::WgmmaGemm::col_groups`] > 1) has a layout mma.sync
/// cannot compute: when another gemm into it is not eligible, none of its
/// gemms uses wgmma (all take mma.sync with the policy's warp grid).
pub fn wgmma_accumulators(kernel: &Kernel, target: Target) -> HashSet<BufferId> {
    /// Per accumulator: (some gemm is eligible, some gemm is not, some eligible one splits N).
    fn walk(k: &Kernel, body: &[Stmt], target: Target, out: &mut HashMap<BufferId, (bool, bool, bool)>) {
        for s in body {
            match &s.kind {
                StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                    let g = crate::hopper::wgmma_gemm(k, *a, *b, *c, *trans_a, *trans_b, *policy, target);
                    let e = out.entry(*c).or_default();
                    match g {
                        Some(g) => {
                            e.0 = true;
                            e.2 |= g.col_groups > 1;
                        }
                        None => e.1 = true,
                    }
                }
                StmtKind::For { body, .. } => walk(k, body, target, out),
                StmtKind::If { then, otherwise, .. } => {
                    walk(k, then, target, out);
                    walk(k, otherwise, target, out);
                }
                _ => {}
            }
        }
    }
    let mut all = HashMap::new();
    walk(kernel, &kernel.body, target, &mut all);
    all.into_iter().filter(|(_, (some, not, split))| *some && !(*not && *split)).map(|(c, _)| c).collect()
}

/// [`infer_layouts`], where the gemms into the accumulators `wgmma_accs`
/// give them the wgmma accumulator layout (warps `(M/16, 1)`) instead of
/// the one their warp policy picks for mma.sync.
/// Shared operands get their sm_80 layouts ([`SharedLayout::for_ldmatrix`]).
pub fn infer_layouts_with(kernel: &Kernel, wgmma_accs: &HashSet<BufferId>) -> Result<LayoutPlan, Vec<CompileError>> {
    infer(kernel, wgmma_accs, Target::Sm80)
}

fn infer(kernel: &Kernel, wgmma_accs: &HashSet<BufferId>, target: Target) -> Result<LayoutPlan, Vec<CompileError>> {
    let mut inf = Infer {
        target,
        k: kernel,
        plan: LayoutPlan::default(),
        origin: HashMap::new(),
        vec_hint: HashMap::new(),
        errors: vec![],
        phase: Phase::Gemms,
        wgmma_accs: wgmma_accs.clone(),
    };
    inf.collect_hints(&kernel.body);
    // `annotate_layout(..)`: the user's layout replaces the one this pass
    // would choose (the verifier has checked that it fits the buffer).
    for (i, b) in kernel.buffers.iter().enumerate() {
        if let (Scope::Shared, Some(spec), Some(shape)) = (b.scope, b.layout, b.const_shape()) {
            let cols = shape.last().copied().unwrap_or(1);
            let rows = shape.iter().rev().skip(1).product::<i64>();
            match SharedLayout::from_spec(spec, rows, cols, b.dtype.size_bytes() as i64) {
                Ok(l) => {
                    inf.plan.shared.insert(BufferId(i as u32), l);
                }
                Err(why) => inf
                    .errors
                    .push(CompileError::new(b.span, format!("`annotate_layout` of shared buffer `{}`: {why}", b.name))),
            }
        }
    }
    // Gemms fix their accumulators (and fragment A operands) first: the
    // hardware dictates those layouts.
    inf.phase = Phase::Gemms;
    inf.block(&kernel.body);
    // Reductions constrain the most (their results must be replicated rows
    // of their sources), then parallel nests and fragment-to-fragment
    // copies; copies to/from memory and fills accept any layout.
    inf.phase = Phase::Reductions;
    inf.block(&kernel.body);
    // Nests and fragment copies: those that touch a fragment whose layout is
    // already fixed go first (they propagate it); when none is left, the
    // first remaining one picks a default layout, and so on.
    inf.phase = Phase::Nests;
    let mut items = Vec::new();
    collect_nest_items(kernel, &kernel.body, &mut items);
    let mut done = vec![false; items.len()];
    loop {
        let mut progress = false;
        for (i, s) in items.iter().enumerate() {
            if !done[i] && inf.touches_fixed(s) {
                inf.stmt(s);
                done[i] = true;
                progress = true;
            }
        }
        if progress {
            continue;
        }
        match done.iter().position(|d| !d) {
            Some(i) => {
                inf.stmt(items[i]);
                done[i] = true;
            }
            None => break,
        }
    }
    inf.phase = Phase::Rest;
    inf.block(&kernel.body);
    inf.view_layouts();
    if inf.errors.is_empty() {
        Ok(inf.plan)
    } else {
        Err(inf.errors)
    }
}

/// The parallel nests and fragment-to-fragment copies of `body`, in program order.
fn collect_nest_items<'a>(k: &Kernel, body: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in body {
        if parallel_nest(s).is_some() {
            out.push(s);
            continue;
        }
        match &s.kind {
            StmtKind::For { body, .. } => collect_nest_items(k, body, out),
            StmtKind::If { then, otherwise, .. } => {
                collect_nest_items(k, then, out);
                collect_nest_items(k, otherwise, out);
            }
            StmtKind::Copy { src, dst, .. }
                if k.buffer(src.buf).scope == Scope::Fragment && k.buffer(dst.buf).scope == Scope::Fragment =>
            {
                out.push(s)
            }
            _ => {}
        }
    }
}

impl Infer<'_> {
    /// Whether a nest or fragment copy touches a fragment with a fixed layout.
    fn touches_fixed(&self, s: &Stmt) -> bool {
        match &s.kind {
            StmtKind::Copy { src, dst, .. } => {
                self.plan.frags.contains_key(&src.buf) || self.plan.frags.contains_key(&dst.buf)
            }
            _ => {
                let mut any = false;
                if let Some(Ok(n)) = parallel_nest(s) {
                    visit_frag_accesses(self.k, n.body, &mut |b, _| any |= self.plan.frags.contains_key(&b));
                }
                any
            }
        }
    }

    fn is_frag(&self, b: BufferId) -> bool {
        self.k.buffer(b).scope == Scope::Fragment
    }
    fn name(&self, b: BufferId) -> &str {
        &self.k.buffer(b).name
    }

    fn collect_hints(&mut self, body: &[Stmt]) {
        for s in body {
            match &s.kind {
                StmtKind::Copy { src, dst, .. } => {
                    for (a, b) in [(src.buf, dst.buf), (dst.buf, src.buf)] {
                        let other = self.k.buffer(b);
                        if self.is_frag(a) && matches!(other.scope, Scope::Global | Scope::Shared) {
                            // Global copies decide (16-byte global vectors
                            // matter most); shared ones only when no global does.
                            let v = (16 / other.dtype.size_bytes() as i64).max(1);
                            let global = other.scope == Scope::Global;
                            match self.vec_hint.get(&a) {
                                Some((true, _)) => {}
                                Some((false, _)) if !global => {}
                                _ => {
                                    self.vec_hint.insert(a, (global, v));
                                }
                            }
                        }
                    }
                }
                StmtKind::For { body, .. } => self.collect_hints(body),
                StmtKind::If { then, otherwise, .. } => {
                    self.collect_hints(then);
                    self.collect_hints(otherwise);
                }
                _ => {}
            }
        }
    }

    fn default_layout(&self, b: BufferId) -> FragLayout {
        let buf = self.k.buffer(b);
        let shape = buf.const_shape().unwrap_or_default();
        let hint = self.vec_hint.get(&b).map(|h| h.1).unwrap_or((16 / buf.dtype.size_bytes() as i64).max(1));
        FragLayout::full(RootLayout::blocked(&shape, self.k.threads, hint))
    }

    fn ensure(&mut self, b: BufferId, why: impl FnOnce() -> String) {
        if !self.plan.frags.contains_key(&b) {
            let l = self.default_layout(b);
            self.plan.frags.insert(b, l);
            self.origin.insert(b, why());
        }
    }

    /// Gives `b` the layout `want` (set by `why`), or checks that its layout agrees.
    fn constrain(&mut self, b: BufferId, want: FragLayout, why: String, span: SpanId) {
        match self.plan.frags.get(&b) {
            None => {
                self.plan.frags.insert(b, want);
                self.origin.insert(b, why);
            }
            Some(have) if have.agrees(&want) => {}
            Some(have) => {
                let msg = format!(
                    "layout conflict on fragment `{}`: {} gives it {}, but {} needs {}",
                    self.name(b),
                    self.origin.get(&b).cloned().unwrap_or_default(),
                    have.describe(),
                    why,
                    want.describe()
                );
                self.errors.push(CompileError::new(span, msg));
            }
        }
    }

    fn block(&mut self, body: &[Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        if let Some(nest) = parallel_nest(s) {
            if self.phase != Phase::Nests {
                return;
            }
            match nest {
                Ok(n) => self.nest(&n, s.span),
                Err(e) => self.errors.push(e),
            }
            return;
        }
        match &s.kind {
            StmtKind::For { body, .. } => self.block(body),
            StmtKind::If { then, otherwise, .. } => {
                self.block(then);
                self.block(otherwise);
            }
            StmtKind::Copy { src, dst, .. } => {
                let (sf, df) = (self.is_frag(src.buf), self.is_frag(dst.buf));
                if sf && df {
                    let (a, b) = (src.buf, dst.buf);
                    if self.phase == Phase::Reductions {
                        // A copy of a fragment the gemms laid out gives its
                        // destination that layout before a reduction of the
                        // destination would choose one (scores copied out of
                        // the accumulator's registers, then reduced).
                        if let (Some(la), false) = (self.plan.frags.get(&a).cloned(), self.plan.frags.contains_key(&b))
                        {
                            let why = format!("the copy from `{}` to `{}`", self.name(a), self.name(b));
                            self.constrain(b, la, why, s.span);
                        }
                        return;
                    }
                    if self.phase != Phase::Nests {
                        return;
                    }
                    let why = format!("the copy from `{}` to `{}`", self.name(a), self.name(b));
                    match (self.plan.frags.get(&a).cloned(), self.plan.frags.get(&b).cloned()) {
                        (Some(la), _) => self.constrain(b, la, why, s.span),
                        (None, Some(lb)) => self.constrain(a, lb, why, s.span),
                        (None, None) => {
                            self.ensure(a, || why.clone());
                            let la = self.plan.frags[&a].clone();
                            self.constrain(b, la, why, s.span);
                        }
                    }
                } else if self.phase == Phase::Rest {
                    for b in [src.buf, dst.buf] {
                        if self.is_frag(b) {
                            let (sn, dn) = (self.name(src.buf).to_string(), self.name(dst.buf).to_string());
                            self.ensure(b, || format!("the copy from `{sn}` to `{dn}`"));
                        }
                    }
                }
            }
            StmtKind::Fill { buf, .. } if self.is_frag(*buf) && self.phase == Phase::Rest => {
                let n = self.name(*buf).to_string();
                self.ensure(*buf, || format!("the fill of `{n}`"));
            }
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } if self.phase == Phase::Gemms => {
                if let Err(msg) = self.gemm(*a, *b, *c, *trans_a, *trans_b, *policy, s.span) {
                    self.errors.push(CompileError::new(s.span, msg));
                }
            }
            StmtKind::Reduce { src, dst, dim, .. } => {
                if !self.is_frag(*src) || !self.is_frag(*dst) || self.phase != Phase::Reductions {
                    return;
                }
                let sn = self.name(*src).to_string();
                self.ensure(*src, || format!("the reduction of `{sn}`"));
                let sl = self.plan.frags[src].clone();
                if *dim >= sl.rank() {
                    self.errors.push(CompileError::new(s.span, format!("reduce dim {dim} is out of range for `{sn}`")));
                    return;
                }
                let why = format!("the reduction of `{sn}` along dim {dim}");
                self.constrain(*dst, sl.reduced(*dim), why, s.span);
            }
            _ => {}
        }
    }

    /// Checks a gemm's operands and fixes the layouts it dictates: the mma
    /// accumulator layout of `c`, the ldmatrix-friendly layout of shared
    /// operands, and (for a fragment `a`) the accumulator layout of an
    /// `[M, K]` tile with the same warps along M.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        a: BufferId,
        b: BufferId,
        c: BufferId,
        trans_a: bool,
        trans_b: bool,
        policy: WarpPolicy,
        span: SpanId,
    ) -> Result<(), String> {
        let (ab, bb, cb) = (self.k.buffer(a), self.k.buffer(b), self.k.buffer(c));
        let shape2 = |buf: &crate::ir::Buffer| -> Result<(i64, i64), String> {
            match buf.const_shape().as_deref() {
                Some([r, c]) => Ok((*r, *c)),
                _ => Err(format!("gemm operand `{}` must be a 2-D buffer with a constant shape", buf.name)),
            }
        };
        let (ar, ac) = shape2(ab)?;
        let (br, bc) = shape2(bb)?;
        let (m, n) = shape2(cb)?;
        let (am, ak) = if trans_a { (ac, ar) } else { (ar, ac) };
        let (bk, bn) = if trans_b { (bc, br) } else { (br, bc) };
        if cb.scope != Scope::Fragment || cb.dtype != DType::F32 {
            return Err(format!("gemm accumulator `{}` must be an f32 fragment", cb.name));
        }
        if bb.scope != Scope::Shared {
            return Err(format!("gemm operand B `{}` must be a shared buffer", bb.name));
        }
        if !matches!(ab.scope, Scope::Shared | Scope::Fragment) {
            return Err(format!("gemm operand A `{}` must be a shared buffer or a fragment", ab.name));
        }
        if ab.dtype != bb.dtype || !matches!(ab.dtype, DType::F16 | DType::BF16) {
            return Err(format!(
                "gemm operands `{}` ({}) and `{}` ({}) must both be f16 or both bf16",
                ab.name, ab.dtype, bb.name, bb.dtype
            ));
        }
        if am != m || bn != n || ak != bk {
            return Err(format!(
                "gemm shapes do not agree: A `{}` is {m2}×{ak}, B `{}` is {bk}×{bn}, C `{}` is {m}×{n} (after transposes)",
                ab.name,
                bb.name,
                cb.name,
                m2 = am
            ));
        }
        if m % 16 != 0 || n % 8 != 0 || ak % 16 != 0 {
            return Err(format!(
                "gemm tile M×N×K = {m}×{n}×{ak} is not supported: mma.sync m16n8k16 needs M a multiple of 16, N a multiple of 8 and K a multiple of 16"
            ));
        }
        // A wgmma accumulator whose 64-row bands are fewer than the
        // warpgroups: its columns are split over them.
        let groups = self.k.threads as i64 / 128;
        let col_split = if self.wgmma_accs.contains(&c) && m % (64 * groups.max(1)) != 0 {
            crate::hopper::wgmma_col_groups(m, self.k.threads, policy).filter(|&g| g > 1)
        } else {
            None
        };
        let warps = match col_split {
            Some(g) => (m / 16, g),
            None if self.wgmma_accs.contains(&c) => (m / 16, 1),
            None => match mma_warp_grid(m, n, self.k.threads, policy) {
                Ok(w) => w,
                Err(e) => return Err(self.register_a_refusal(a, m, policy).unwrap_or(e)),
            },
        };
        // A warpgroup alone (`policy(Warpgroup(w))`): its four warps' tile,
        // on its threads, with wgmma or mma.sync alike.
        // (`plain`: the layout of `cols` columns when the policy names none.)
        let owned = |cols: i64, plain: RootLayout| match policy.owner() {
            Some(w) => RootLayout::warpgroup_tile(cols, self.k.threads, w).ok_or_else(|| {
                format!("gemm into `{}` with `policy(Warpgroup({w}))`: the block has no warpgroup {w}", cb.name)
            }),
            None => Ok(plain),
        };
        let acc = if policy.owner().is_some() {
            FragLayout::full(owned(n, RootLayout::mma_accumulator(m, n, self.k.threads, warps))?)
        } else if let Some(g) = col_split {
            FragLayout::full(crate::hopper::wgmma_split_accumulator(m, n, self.k.threads, g)?)
        } else if self.wgmma_accs.contains(&c) && m == 64 * groups {
            // A warpgroup per 64 rows: N may take several instructions.
            FragLayout::full(crate::hopper::wgmma_split_accumulator(m, n, self.k.threads, 1)?)
        } else if self.wgmma_accs.contains(&c) {
            // The warp-specialized variant: a warpgroup may own several 64-row slices.
            FragLayout::full(crate::hopper::ws_accumulator(m, n, self.k.threads)?)
        } else {
            FragLayout::full(RootLayout::mma_accumulator(m, n, self.k.threads, warps))
        };
        let regs = acc.num_regs();
        if regs > MAX_ACCUMULATOR_REGS {
            return Err(format!(
                "gemm accumulator `{}` ({m}×{n} f32 over {} threads) needs {regs} registers per thread, more than {MAX_ACCUMULATOR_REGS}; use a smaller tile or more threads",
                cb.name, self.k.threads
            ));
        }
        let why = format!("the gemm into `{}` (mma accumulator, warps {}×{})", cb.name, warps.0, warps.1);
        self.constrain(c, acc, why, span);
        if ab.scope == Scope::Fragment {
            if let Some(why) = self.register_a_refusal(a, m, policy).filter(|_| !trans_a && warps.1 != 1) {
                return Err(why);
            }
            if trans_a || warps.1 != 1 {
                return Err(format!(
                    "gemm with A from fragment `{}` is supported only untransposed and when warps split M only (policy FullRow, or Square giving warps {}×1); this gemm uses warps {}×{}{}",
                    ab.name,
                    warps.0 * warps.1,
                    warps.0,
                    warps.1,
                    if trans_a { " and a transposed A" } else { "" }
                ));
            }
            let want = FragLayout::full(owned(ak, RootLayout::mma_accumulator(m, ak, self.k.threads, warps))?);
            let why = format!("the gemm into `{}` (A operand from registers, warps {}×1)", cb.name, warps.0);
            self.constrain(a, want, why, span);
        }
        for (buf, rows, cols) in [(a, ar, ac), (b, br, bc)] {
            if self.k.buffer(buf).view.is_some() {
                // A view has its parent's layout (`view_layouts`): the
                // parent is laid out for the gemms on its views.
                let (root, _) = self.k.view_root(buf);
                if self.k.buffer(root).layout.is_none() {
                    if let Some(l) = crate::hopper::gemm_operand_layout(self.k, root, self.target) {
                        self.plan.shared.insert(root, l);
                    }
                }
                continue;
            }
            if self.k.buffer(buf).scope == Scope::Shared {
                let l = match self.k.buffer(buf).layout {
                    // Annotated: already in the plan (the user's choice wins).
                    Some(_) => match self.plan.shared.get(&buf) {
                        Some(l) => *l,
                        None => continue,
                    },
                    None => crate::hopper::gemm_operand_layout(self.k, buf, self.target)
                        .unwrap_or_else(|| SharedLayout::for_ldmatrix(rows, cols, 2)),
                };
                if l.row_stride % 16 != 0 {
                    return Err(format!(
                        "gemm operand `{}`: rows of {} bytes; ldmatrix needs rows that are a multiple of 16 bytes",
                        self.k.buffer(buf).name,
                        cols * 2
                    ));
                }
                self.plan.shared.insert(buf, l);
            }
        }
        Ok(())
    }

    /// Why a gemm with A from fragment `a` cannot split the columns of its
    /// `[m, _]` output over warpgroups with wgmma (sm_90a, M = 64 per
    /// warpgroup band shared by several warpgroups), when that is the
    /// reason it fails: each warpgroup then multiplies every one of its
    /// band's rows of A, but a fragment holds each element in one thread.
    fn register_a_refusal(&self, a: BufferId, m: i64, policy: WarpPolicy) -> Option<String> {
        let ab = self.k.buffer(a);
        if ab.scope != Scope::Fragment || !self.target.has(crate::target::Feature::Wgmma) {
            return None;
        }
        let g = crate::hopper::wgmma_col_groups(m, self.k.threads, policy).filter(|&g| g > 1)?;
        Some(format!(
            "gemm with A from fragment `{name}`: its output's columns are split over {g} warpgroups that share each 64 rows \
             (M = {m} over {t} threads), so every one of them multiplies all those rows of `{name}`, but a fragment holds each \
             element in one thread; stage `{name}` through shared memory (`copy(&{name}, &mut {name}_s)`, then gemm from \
             `{name}_s`), or give each warpgroup its own 64 rows (M = 64 · threads / 128)",
            name = ab.name,
            t = self.k.threads
        ))
    }

    /// Every view's layout: its window of its parent's layout (the one
    /// this pass chose, else row-major as the lowering defaults), or an
    /// error at the view when the window is not expressible in it.
    fn view_layouts(&mut self) {
        for (i, b) in self.k.buffers.iter().enumerate() {
            let Some(v) = &b.view else { continue };
            let parent = self.k.buffer(v.of);
            let (Some(pshape), Some(shape)) = (parent.const_shape(), b.const_shape()) else { continue };
            let Some(&cols) = pshape.last() else { continue };
            let rows = pshape.iter().rev().skip(1).product::<i64>();
            let pl = self
                .plan
                .shared
                .get(&v.of)
                .copied()
                .unwrap_or_else(|| SharedLayout::row_major(rows, cols, parent.dtype.size_bytes() as i64));
            match pl.window(&pshape, &v.origin, &shape) {
                Ok((_, l)) => {
                    self.plan.shared.insert(BufferId(i as u32), l);
                }
                Err(why) => {
                    let origin: Vec<String> = v.origin.iter().map(|o| o.to_string()).collect();
                    self.errors.push(CompileError::new(
                        b.span,
                        format!(
                            "view `{}` of `{}` at [{}] is not expressible in the layout of `{}` ({}): {why}; move the view onto the layout's units, or choose the layout with `annotate_layout(&{}, ..)`",
                            b.name,
                            parent.name,
                            origin.join(", "),
                            parent.name,
                            pl.describe(),
                            parent.name
                        ),
                    ))
                }
            }
        }
    }

    /// A layout for nest `n` that agrees with the fragments it reads that
    /// already have layouts and cover its outer dims (e.g. `m[i]` from a
    /// reduction read in a nest over `(i, j)`), when there is one.
    fn layout_from_rows(
        &self,
        n: &Nest<'_>,
        uses: &[(BufferId, Vec<usize>)],
        full: Option<BufferId>,
    ) -> Option<FragLayout> {
        let mut fixed: Vec<Option<crate::layout::DimDist>> = vec![None; n.vars.len()];
        let mut active = 1;
        // The warpgroup the fragments read are held by, if one (a
        // disagreement is the conflict `nest` reports).
        let mut owner = None;
        for (b, p) in uses {
            let Some(l) = self.plan.frags.get(b) else { continue };
            active = active.max(l.root.active_threads());
            owner = owner.or(l.root.owner);
            for (a, &nd) in p.iter().enumerate() {
                let want = l.root.dims[l.kept[a]].clone();
                match &fixed[nd] {
                    None => fixed[nd] = Some(want),
                    Some(x) if *x == want => {}
                    Some(_) => return None,
                }
            }
        }
        let prefix: Vec<crate::layout::DimDist> = fixed.iter().map_while(|x| x.clone()).collect();
        if prefix.is_empty() || fixed[prefix.len()..].iter().any(|x| x.is_some()) {
            return None;
        }
        let hint = match full {
            Some(b) => self.default_layout(b).vec_width().max(1),
            None => 1,
        };
        let hint = full.and_then(|b| self.vec_hint.get(&b).map(|h| h.1)).unwrap_or(hint);
        RootLayout::with_outer_fixed(&n.extents, self.k.threads, hint, &prefix, (active, owner)).map(FragLayout::full)
    }

    fn nest(&mut self, n: &Nest<'_>, span: SpanId) {
        // Fragment accesses in the body: (buffer, positions).
        let mut uses: Vec<(BufferId, Vec<usize>)> = Vec::new();
        let mut bad: Vec<String> = Vec::new();
        visit_frag_accesses(self.k, n.body, &mut |b, index| match nest_positions(&n.vars, index) {
            Some(p) => uses.push((b, p)),
            None => bad.push(self.k.buffer(b).name.clone()),
        });
        for name in bad {
            self.errors.push(CompileError::new(
                span,
                format!("fragment `{name}` must be indexed by the enclosing parallel loop variables, in loop order"),
            ));
        }
        let vars: Vec<String> = n.vars.iter().map(|v| self.k.var(*v).name.clone()).collect();
        let loop_desc = format!("the parallel loop over ({})", vars.join(", "));
        let rank = n.vars.len();
        // The nest's layout: from a fragment indexed by every loop variable.
        let full: Vec<BufferId> = uses.iter().filter(|(_, p)| p.len() == rank).map(|(b, _)| *b).collect();
        let nest_layout = if let Some(&b) = full.iter().find(|b| self.plan.frags.contains_key(b)) {
            self.plan.frags[&b].clone()
        } else if let Some(l) = self.layout_from_rows(n, &uses, full.first().copied()) {
            l
        } else if let Some(&b) = full.first() {
            let why = format!("{loop_desc} (first use of `{}`)", self.name(b));
            self.ensure(b, || why);
            self.plan.frags[&b].clone()
        } else {
            FragLayout::full(RootLayout::blocked(&n.extents, self.k.threads, 1))
        };
        if nest_layout.shape() != n.extents {
            self.errors.push(CompileError::new(
                span,
                format!(
                    "{loop_desc} has extents {:?} but the fragments it indexes have shape {:?}",
                    n.extents,
                    nest_layout.shape()
                ),
            ));
            return;
        }
        for (b, p) in uses {
            // A fragment indexed over other extents than its own shape (the
            // fuzz test's `y[i]` of a 65536-element `y` in a 2048-loop).
            let over: Vec<i64> = p.iter().map(|&i| n.extents[i]).collect();
            let shape: Vec<i64> =
                self.k.buffer(b).shape.iter().map(|e| if let Extent::Const(c) = e { *c } else { -1 }).collect();
            if over != shape {
                self.errors.push(CompileError::new(
                    span,
                    format!(
                        "{loop_desc} indexes fragment `{}` over extents {over:?}, but its shape is {shape:?}; a fragment in a parallel loop has the extents of the loop variables indexing it",
                        self.name(b)
                    ),
                ));
                continue;
            }
            let view =
                FragLayout { root: nest_layout.root.clone(), kept: p.iter().map(|&i| nest_layout.kept[i]).collect() };
            let why = format!("{loop_desc} (its access to `{}`)", self.name(b));
            self.constrain(b, view, why, span);
        }
        self.plan.nests.insert(n.vars[0], nest_layout);
    }
}

/// Calls `f(buffer, index)` for every fragment element access in `body`.
pub fn visit_frag_accesses(k: &Kernel, body: &[Stmt], f: &mut dyn FnMut(BufferId, &[Expr])) {
    fn expr(k: &Kernel, e: &Expr, f: &mut dyn FnMut(BufferId, &[Expr])) {
        match e {
            Expr::Load { buf, index } => {
                if k.buffer(*buf).scope == Scope::Fragment {
                    f(*buf, index);
                }
                for i in index {
                    expr(k, i, f);
                }
            }
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => expr(k, arg, f),
            Expr::Binary { lhs, rhs, .. } => {
                expr(k, lhs, f);
                expr(k, rhs, f);
            }
            Expr::Fma { a, b, c } => {
                expr(k, a, f);
                expr(k, b, f);
                expr(k, c, f);
            }
            Expr::Select { cond, then, otherwise } => {
                expr(k, cond, f);
                expr(k, then, f);
                expr(k, otherwise, f);
            }
            Expr::Const(_) | Expr::Var(_) => {}
        }
    }
    for s in body {
        match &s.kind {
            StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => expr(k, value, f),
            StmtKind::Store { buf, index, value } => {
                if k.buffer(*buf).scope == Scope::Fragment {
                    f(*buf, index);
                }
                for i in index {
                    expr(k, i, f);
                }
                expr(k, value, f);
            }
            StmtKind::AtomicAdd { index, value, .. } => {
                for i in index {
                    expr(k, i, f);
                }
                expr(k, value, f);
            }
            StmtKind::For { start, end, body, .. } => {
                expr(k, start, f);
                expr(k, end, f);
                visit_frag_accesses(k, body, f);
            }
            StmtKind::If { cond, then, otherwise } => {
                expr(k, cond, f);
                visit_frag_accesses(k, then, f);
                visit_frag_accesses(k, otherwise, f);
            }
            StmtKind::Fill { value, .. } => expr(k, value, f),
            StmtKind::Copy { fill: Some(v), .. } => expr(k, v, f),
            StmtKind::Print { args, .. } => {
                for a in args {
                    expr(k, a, f);
                }
            }
            _ => {}
        }
    }
}

//! The plan of the warp-specialized GEMM: whether a kernel has the shape
//! this schedule takes, and how its loop becomes producer and consumers.
//!
//! Expects a verified kernel. Takes it (returns a [`WsPlan`]) only on
//! sm_90a, without `warp_specialize = false`, and when it has this shape,
//! which is what a Hopper GEMM main loop looks like (else the reason it
//! does not, a [`NotApplicable`]):
//!
//! - exactly one `pipelined(n, stages ≥ 2)` loop, at the top level of the
//!   body, and no other pipelined loop;
//! - before it, only statements that touch no memory (scalar `let`s and
//!   assignments without loads, fills of fragments and locals): the
//!   producer warpgroup runs them too, harmlessly;
//! - its body is exactly its pipelined copies ([`crate::passes::pipeline::plan`])
//!   and gemms; every copy is TMA-able (a 2-D f16/bf16 global tensor tile
//!   into a 2-D shared buffer of the same type, zero fill) and every gemm
//!   reads two of those buffers into an f32 fragment `[M, N]` with
//!   `M = 64 · threads / 128` (one warpgroup per 64 rows), `N` a multiple
//!   of 8 up to 256, and `K` a multiple of 16;
//! - each operand's contiguous dim is 16, 32 or a multiple of 64 elements
//!   (32B, 64B or 128B swizzle; wider tiles are stored as 64-column panels).
//!
//! With `cluster = (C, 1, 1)` an operand whose tile provably is the same in
//! every block of the cluster (its origin and the loop's bounds do not
//! depend on `bx`; see [`WsPlan::cluster`]) is multicast: its box is split
//! into `C` boxes, each block issues one share to all of them.
//!
//! Guarantees that the variant it compiles computes what the general one
//! does: a producer warpgroup (threads `T..T+128`, `T = kernel.threads`)
//! whose first thread issues the TMA loads of each iteration into stage
//! buffers guarded by full/empty mbarriers, while the kernel's own `T`
//! threads consume the stages with wgmma and run everything after the loop
//! (`lower.rs` has the schedule). Anything else: no plan, and the kernel
//! has only its other variants.

use crate::abi::TensorMapUse;
use crate::hopper::Swizzle;
use crate::ir::{BufferId, DType, Expr, Kernel, LoopKind, ParamKind, Scope, Stmt, StmtKind, VarId, VarKind};
use crate::passes::pipeline;
use crate::schedule::not_applicable::NotApplicable;
use crate::target::{Feature, PRODUCER_THREADS};
use crate::Target;
use std::collections::{HashMap, HashSet};

/// How one pipelined copy becomes TMA loads into panelled stage buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmaOperand {
    /// Index of the copy in the loop body.
    pub copy: usize,
    /// The shared destination (one stage of it).
    pub buf: BufferId,
    /// Index into `kernel.params` of the global source tensor.
    pub param: usize,
    /// The element type (f16 or bf16).
    pub dtype: DType,
    /// The destination's `[rows, cols]`.
    pub rows: i64,
    /// The destination's columns (`rows` above has its rows).
    pub cols: i64,
    /// The swizzle of every panel (its span is a panel row in bytes).
    pub swizzle: Swizzle,
    /// Columns per panel: a panel is `[rows, panel_cols]`, rows of
    /// `swizzle.bytes()` bytes, panels one after the other.
    pub panel_cols: i64,
    /// Rows of one TMA box (at most 256).
    pub box_rows: i64,
    /// The tile is the same for every block of the cluster
    /// ([`WsPlan::cluster`] > 1): its boxes (of `rows / cluster` rows) are
    /// shared out over the cluster's blocks, and each block multicasts its
    /// boxes to all of them.
    pub multicast: bool,
}

impl TmaOperand {
    /// Bytes of one panel.
    pub fn panel_bytes(&self) -> i64 {
        self.rows * self.swizzle.bytes() as i64
    }
    /// Bytes of one stage (all panels).
    pub fn stage_bytes(&self) -> i64 {
        self.panel_bytes() * (self.cols / self.panel_cols)
    }
    /// The byte offset of element `(r, c)` from the stage's start (the
    /// panelled, swizzled placement TMA writes and wgmma reads).
    pub fn offset(&self, r: i64, c: i64) -> i64 {
        let w = self.swizzle.bytes() as i64;
        let within = r * w + (c % self.panel_cols) * self.dtype.size_bytes() as i64;
        let bits = (w / 16).trailing_zeros() as i64;
        let xor = ((within >> 7) & ((1 << bits) - 1)) << 4;
        (c / self.panel_cols) * self.panel_bytes() + (within ^ xor)
    }
    /// The TMA boxes of one stage: (byte offset in the stage, row offset,
    /// column offset) of each.
    pub fn boxes(&self) -> Vec<(i64, i64, i64)> {
        let mut out = Vec::new();
        for p in 0..self.cols / self.panel_cols {
            for j in 0..self.rows / self.box_rows {
                out.push((
                    p * self.panel_bytes() + j * self.box_rows * self.swizzle.bytes() as i64,
                    j * self.box_rows,
                    p * self.panel_cols,
                ));
            }
        }
        out
    }
}

/// One gemm of the loop body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsGemm {
    /// Index of the gemm in the loop body.
    pub stmt: usize,
    /// Indices into [`WsPlan::operands`].
    pub a: usize,
    /// B's index into [`WsPlan::operands`] (`a` is A's).
    pub b: usize,
    /// The f32 accumulator fragment.
    pub c: BufferId,
    /// A is stored `[K, M]`.
    pub trans_a: bool,
    /// B is stored `[N, K]`.
    pub trans_b: bool,
    /// The gemm overwrites `c` (its first use in the iteration zeroes it).
    pub clear: bool,
    /// The accumulator's rows.
    pub m: i64,
    /// The accumulator's columns.
    pub n: i64,
    /// The reduction length per iteration.
    pub k: i64,
    /// 64-row slices per warpgroup (`M / (64 · warpgroups)`): each its own
    /// `m64nNk16` chain ([`crate::hopper::ws_accumulator`]).
    pub slices: i64,
}

/// The accumulator store right after the loop, done by TMA: the consumers
/// write the accumulator, rounded, into shared panels of 64 columns
/// (128B-swizzled, over the dead stage buffers), and one thread stores each
/// panel with a TMA box (out-of-range elements are not written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsStore {
    /// Index of the copy in `kernel.body` (the statement after the loop).
    pub index: usize,
    /// The accumulator (one of the gemms').
    pub acc: BufferId,
    /// Index into `kernel.params` of the destination tensor.
    pub param: usize,
    /// The destination's element type (f16 or bf16).
    pub dtype: DType,
    /// The accumulator's rows.
    pub rows: i64,
    /// The accumulator's columns.
    pub cols: i64,
}

impl WsStore {
    /// Columns per shared panel (a 128-byte row).
    pub fn panel_cols(&self) -> i64 {
        128 / self.dtype.size_bytes() as i64
    }
    /// Bytes of one shared panel (`rows` rows of 128 bytes).
    pub fn panel_bytes(&self) -> i64 {
        self.rows * 128
    }
}

/// The warp specialization of one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsPlan {
    /// Index of the pipelined loop in `kernel.body`.
    pub loop_index: usize,
    /// The loop's stages: slots of the full/empty mbarrier ring.
    pub stages: u32,
    /// The producer's TMA loads, one per pipelined copy.
    pub operands: Vec<TmaOperand>,
    /// The consumers' gemms, in body order.
    pub gemms: Vec<WsGemm>,
    /// The kernel's threads: the consumer warpgroups.
    pub consumer_threads: u32,
    /// Registers per producer thread after `setmaxnreg.dec` (the target's
    /// split, [`crate::target::RegisterSplit`]).
    pub producer_regs: u32,
    /// Registers per consumer thread after `setmaxnreg.inc`.
    pub consumer_regs: u32,
    /// The TMA store of the accumulator after the loop, when it has one.
    pub store: Option<WsStore>,
    /// Blocks of the kernel's thread block cluster that share the
    /// [`TmaOperand::multicast`] operands (the cluster's x extent, with
    /// `cluster = (C, 1, 1)`), or 1: no operand is multicast.
    pub cluster: u32,
    /// Whether the variant is persistent (`lower/warp_specialized.rs`):
    /// the kernel is exactly pre-statements, the loop and the TMA store,
    /// and the stages, the store's panels and the barriers fit in shared
    /// memory side by side.
    pub persistent: bool,
}

impl WsPlan {
    /// Whether some operand is multicast over the cluster.
    pub fn multicasts(&self) -> bool {
        self.cluster > 1 && self.operands.iter().any(|o| o.multicast)
    }
    /// The accumulators that get the wgmma layout.
    pub fn accumulators(&self) -> HashSet<BufferId> {
        self.gemms.iter().map(|g| g.c).collect()
    }
    /// Whether `buf` is a stage buffer the pass places.
    pub fn operand_of(&self, buf: BufferId) -> Option<&TmaOperand> {
        self.operands.iter().find(|o| o.buf == buf)
    }
    /// The tensor maps the variant takes (one per operand, then the
    /// store's), named as the lowering declares them.
    pub fn tensor_maps(&self) -> Vec<TensorMapUse> {
        let mut maps: Vec<TensorMapUse> = self
            .operands
            .iter()
            .enumerate()
            .map(|(i, o)| TensorMapUse {
                param: format!("tmap{i}"),
                tensor: o.param,
                box_shape: vec![o.box_rows as u32, o.panel_cols as u32],
                swizzle: o.swizzle,
            })
            .collect();
        if let Some(st) = &self.store {
            maps.push(TensorMapUse {
                param: format!("tmap{}", maps.len()),
                tensor: st.param,
                box_shape: vec![st.rows as u32, st.panel_cols() as u32],
                swizzle: Swizzle::B128,
            });
        }
        maps
    }
}

/// Whether (and how) `kernel` is warp-specialized on `target`, or why not;
/// see the module doc.
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub fn plan(kernel: &Kernel, target: Target) -> Result<WsPlan, NotApplicable> {
    let no = |reason: &str| NotApplicable::new(reason);
    // A producer warpgroup issuing TMA, consumers on wgmma, and registers
    // moved between them with setmaxnreg.
    let info = target.info();
    let needs = [Feature::Wgmma, Feature::Tma, Feature::Setmaxnreg];
    let (true, Some(split)) = (needs.iter().all(|f| target.has(*f)), info.registers.split.as_ref()) else {
        return Err(NotApplicable::new(format!("warp specialization needs sm_90a, not {}", target.name())));
    };
    if !kernel.warp_specialize {
        return Err(no("the kernel says `warp_specialize = false`"));
    }
    if kernel.buffers.iter().any(|b| b.view.is_some()) {
        return Err(no("the kernel has sub-views of shared buffers (`.view(..)`), which this schedule's operand placement does not know"));
    }
    let threads = kernel.threads;
    if threads % 128 != 0 || threads == 0 || threads + 128 > 1024 {
        return Err(NotApplicable::new(format!(
            "threads = {threads}: the consumers must be whole warpgroups (a multiple of 128) with room for a producer warpgroup (at most 896)"
        )));
    }
    let pipe = pipeline::plan(kernel);
    let (loop_index, lp) = kernel
        .body
        .iter()
        .enumerate()
        .find(|(_, s)| matches!(s.kind, StmtKind::For { kind: LoopKind::Pipelined { .. }, .. }))
        .ok_or_else(|| no("the kernel has no `pipelined` loop at the top level of its body"))?;
    let StmtKind::For { var, body, kind: LoopKind::Pipelined { stages }, .. } = &lp.kind else {
        return Err(no("the kernel has no `pipelined` loop at the top level of its body"));
    };
    let pl =
        pipe.loops.get(var).ok_or_else(|| no("the pipeline analysis does not take the top-level pipelined loop"))?;
    if pipe.loops.len() != 1 || count_pipelined(&kernel.body) != 1 || *stages < 2 {
        return Err(no("the kernel must have exactly one pipelined loop, with at least 2 stages"));
    }
    if !kernel.body[..loop_index].iter().all(|s| touches_no_memory(kernel, s)) {
        return Err(no(
            "a statement before the pipelined loop touches memory; the producer warpgroup runs those statements too",
        ));
    }
    let mut operands = Vec::new();
    let mut gemms = Vec::new();
    for (i, s) in body.iter().enumerate() {
        match &s.kind {
            StmtKind::Copy { src, dst, fill, .. } if pl.copies.contains(&i) => {
                operands.push(tma_operand(kernel, i, src, dst, fill.as_ref()).ok_or_else(|| {
                    NotApplicable::new(format!(
                        "the pipelined copy into `{}` is not a TMA box (a 2-D f16/bf16 global tile into a 2-D shared buffer of its type without an annotated layout, zero fill, rows of 32, 64 or a multiple of 128 bytes)",
                        kernel.buffer(dst.buf).name
                    ))
                })?);
            }
            StmtKind::Gemm { policy: crate::ir::WarpPolicy::Warpgroup(w), .. } => {
                return Err(no(&format!(
                    "a gemm of the pipelined loop runs on warpgroup {w} alone (`policy(Warpgroup({w}))`); the warp-specialized GEMM splits every gemm over all its consumer warpgroups"
                )))
            }
            StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, .. } => {
                gemms.push((i, *a, *b, *c, *trans_a, *trans_b, *clear));
            }
            StmtKind::Copy { .. } => {
                return Err(no("the pipelined loop's body has a copy the pipeline does not take; the warp-specialized GEMM takes only pipelined copies and gemms"))
            }
            _ => {
                return Err(no(
                    "the pipelined loop's body has a statement other than a copy or a gemm; the warp-specialized GEMM takes only copies and gemms",
                ))
            }
        }
    }
    if gemms.is_empty() {
        return Err(no("the pipelined loop has no gemm"));
    }
    let warpgroups = (threads / 128) as i64;
    let mut ws_gemms = Vec::new();
    for (stmt, a, b, c, trans_a, trans_b, clear) in gemms {
        let not_staged = || no("a gemm reads a buffer that no pipelined copy of the loop fills");
        let ai = operands.iter().position(|o| o.buf == a).ok_or_else(not_staged)?;
        let bi = operands.iter().position(|o| o.buf == b).ok_or_else(not_staged)?;
        let (oa, ob) = (&operands[ai], &operands[bi]);
        let cb = kernel.buffer(c);
        let shape = cb.const_shape().and_then(|s| <[i64; 2]>::try_from(s).ok());
        let [m, n] = shape.ok_or_else(|| no("a gemm's accumulator is not a constant 2-D fragment"))?;
        if cb.scope != Scope::Fragment || cb.dtype != DType::F32 || oa.dtype != ob.dtype {
            return Err(no("a gemm's accumulator is not an f32 fragment, or its operands differ in type"));
        }
        let (am, ak) = if trans_a { (oa.cols, oa.rows) } else { (oa.rows, oa.cols) };
        let (bk, bn) = if trans_b { (ob.cols, ob.rows) } else { (ob.rows, ob.cols) };
        if am != m
            || bn != n
            || ak != bk
            || m % (64 * warpgroups) != 0
            || n % 8 != 0
            || !(8..=256).contains(&n)
            || ak % 16 != 0
        {
            return Err(NotApplicable::new(format!(
                "gemm `{}` is {m}×{n}×{ak}: M must be a multiple of 64 rows per warpgroup ({} warpgroups), N a multiple of 8 up to 256, K a multiple of 16, and the operands' shapes must agree",
                cb.name, warpgroups
            )));
        }
        // One or two 64-row slices per warpgroup, at most 128 accumulator
        // registers per thread (the consumers keep room for addresses).
        let slices = m / (64 * warpgroups);
        if !(1..=2).contains(&slices) || slices * n / 2 > 128 {
            return Err(NotApplicable::new(format!(
                "gemm `{}` needs {slices} slices of 64 rows per warpgroup and {} accumulator registers per thread (at most 2 and 128)",
                cb.name,
                slices * n / 2
            )));
        }
        // The K-major operand's k16 slices lie inside one panel; the
        // MN-major A's 64-row warpgroup slice starts on a panel.
        if (!trans_a && oa.panel_cols % 16 != 0)
            || (trans_a && 64 % oa.panel_cols != 0)
            || (trans_b && ob.panel_cols % 16 != 0)
        {
            return Err(NotApplicable::new(format!(
                "gemm `{}`: an operand's 16-wide k slices or 64-row warpgroup slices would straddle its shared panels",
                cb.name
            )));
        }
        ws_gemms.push(WsGemm { stmt, a: ai, b: bi, c, trans_a, trans_b, clear, m, n, k: ak, slices });
    }
    // Registers: the producer keeps its share; the consumers split the rest
    // of the block's pool (an `N`-th of the file with `blocks_per_sm = N`).
    let producer_regs = split.producer;
    let blocks = kernel.blocks_per_sm.max(1);
    if let Some(problem) =
        crate::verify::rules::blocks_per_sm_problem(blocks.into(), (threads + PRODUCER_THREADS).into())
    {
        return Err(NotApplicable::new(format!("with its producer warpgroup: {problem}")));
    }
    let Some(consumer_regs) = info.consumer_regs_after(producer_regs, threads, blocks) else {
        return Err(NotApplicable::new(format!("{} has no register split between warpgroups", target.name())));
    };
    let cluster = multicast_operands(kernel, loop_index, &mut operands, target);
    let store = tma_store(kernel, loop_index + 1, &ws_gemms, &operands, *stages);
    // A persistent block runs tiles of other clusters: it would multicast
    // to blocks that are not its tile's neighbours.
    let persistent = cluster == 1
        && store.as_ref().is_some_and(|st| {
            let stages_bytes: i64 =
                operands.iter().map(|o| (o.stage_bytes() + 1023) / 1024 * 1024 * *stages as i64).sum();
            let panels = st.panel_bytes() * (st.cols / st.panel_cols());
            st.index + 1 == kernel.body.len() && stages_bytes + panels + 16 * *stages as i64 <= info.shared_limit as i64
        });
    Ok(WsPlan {
        loop_index,
        stages: *stages,
        operands,
        gemms: ws_gemms,
        consumer_threads: threads,
        producer_regs,
        consumer_regs,
        store,
        cluster,
        persistent,
    })
}

/// Marks the operands every block of the kernel's cluster loads alike as
/// [`TmaOperand::multicast`] (their boxes split over the cluster's blocks)
/// and returns the cluster's size, or 1 (nothing multicast) unless all of:
/// - the target has clusters and the kernel asks for `cluster = (C, 1, 1)`,
///   `C ≥ 2`: the cluster's blocks are `C` consecutive blocks along x
///   (`ctaid.x = C·i .. C·i + C`, one `ctaid.y` and `ctaid.z`);
/// - no rasterization, or one whose panel is a multiple of `C`: then
///   (the grid's x being a multiple of `C`, which the launch checks) the
///   cluster's linear ids `C·j .. C·j + C` fall in one row of one panel
///   ([`crate::abi::rasterize`]: panels and their widths are multiples of
///   `C`), so the blocks share `by` and `bz` and differ in `bx` only;
/// - the loop's bounds do not depend on `bx` (with the body's `let`s
///   inlined): every block of the cluster runs the same iterations, which
///   the shared stages' barriers count on;
/// - the operand's tile origin does not depend on `bx` either, and its
///   rows split into `C` boxes of whole 8-row swizzle atoms.
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
fn multicast_operands(kernel: &Kernel, loop_index: usize, operands: &mut [TmaOperand], target: Target) -> u32 {
    let Some((c, lets)) = cluster_loop(kernel, loop_index, target) else { return 1 };
    let StmtKind::For { body, .. } = &kernel.body[loop_index].kind else { return 1 };
    let mut any = false;
    for o in operands.iter_mut() {
        let StmtKind::Copy { src, .. } = &body[o.copy].kind else { continue };
        if src.origin.iter().all(|e| cluster_uniform(kernel, e, &lets)) && o.box_rows % (8 * c as i64) == 0 {
            o.box_rows /= c as i64;
            o.multicast = true;
            any = true;
        }
    }
    if any {
        c
    } else {
        1
    }
}

/// The cluster's size `C` and the `let`s before the loop at `loop_index`
/// (never reassigned, by variable: what [`cluster_uniform`] looks
/// through), when the loop's blocks may share tiles: the target has
/// clusters, the kernel asks for `cluster = (C, 1, 1)`, `C ≥ 2`, with no
/// rasterization whose panel is not a multiple of `C` (the cluster's blocks
/// then differ in `bx` only), and the loop's bounds are the same in every
/// block of the cluster (every block runs the same iterations, which the
/// shared stages' barriers count on). The multicast plans of both
/// warp-specialized schedules start here.
pub(crate) fn cluster_loop(kernel: &Kernel, loop_index: usize, target: Target) -> Option<(u32, HashMap<VarId, &Expr>)> {
    let [c, 1, 1] = kernel.cluster else { return None };
    if c < 2 || !target.has(Feature::Clusters) || kernel.rasterize.is_some_and(|p| p % c != 0) {
        return None;
    }
    let lets: HashMap<VarId, &Expr> = kernel.body[..loop_index]
        .iter()
        .filter_map(|s| match &s.kind {
            StmtKind::Let { var, value } if kernel.var(*var).kind == VarKind::Let => Some((*var, value)),
            _ => None,
        })
        .collect();
    let StmtKind::For { start, end, .. } = &kernel.body[loop_index].kind else { return None };
    (cluster_uniform(kernel, start, &lets) && cluster_uniform(kernel, end, &lets)).then_some((c, lets))
}

/// Whether `e` has one value in every block of a `(C, 1, 1)` cluster (see
/// [`multicast_operands`]): it reads no `bx`, and memory only through loads
/// of global tensors the kernel never writes at such indices (MLA's
/// `block_table[(bi, kb)]` of a batch `bi = chunks[(order[by], 0)]`: an
/// input is the same for every block during a launch), and its other
/// variables are dims, scalar parameters, `by`, `bz`, loop counters (the
/// pipelined loop's, whose bounds are checked alike) and `let`s before the
/// loop whose values are such expressions.
pub(crate) fn cluster_uniform(k: &Kernel, e: &Expr, lets: &HashMap<VarId, &Expr>) -> bool {
    let uniform = |x: &Expr| cluster_uniform(k, x, lets);
    match e {
        Expr::Const(_) => true,
        Expr::Var(v) => match k.var(*v).kind {
            VarKind::Dim | VarKind::Param | VarKind::Loop | VarKind::BlockIdx(1 | 2) => true,
            VarKind::Let => lets.get(v).is_some_and(|x| uniform(x)),
            VarKind::BlockIdx(_) | VarKind::Mut => false,
        },
        Expr::Load { index, .. } => pipeline::non_constant_load(k, e).is_none() && index.iter().all(uniform),
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => uniform(arg),
        Expr::Binary { lhs, rhs, .. } => uniform(lhs) && uniform(rhs),
        Expr::Fma { a, b, c } => uniform(a) && uniform(b) && uniform(c),
        Expr::Select { cond, then, otherwise } => uniform(cond) && uniform(then) && uniform(otherwise),
    }
}

/// The statement at `index`, when it is `copy(acc, tensor.tile(..))` of a
/// gemm accumulator into a 2-D f16/bf16 tensor whose tile is whole 64-column
/// panels of at most 256 rows that fit in the stage buffers.
fn tma_store(k: &Kernel, index: usize, gemms: &[WsGemm], operands: &[TmaOperand], stages: u32) -> Option<WsStore> {
    let StmtKind::Copy { src, dst, fill: None, .. } = &k.body.get(index)?.kind else {
        return None;
    };
    let g = gemms.iter().find(|g| g.c == src.buf)?;
    let db = k.buffer(dst.buf);
    if db.scope != Scope::Global
        || db.shape.len() != 2
        || dst.origin.len() != 2
        || !dst.squeezed.is_empty()
        || src.origin.iter().any(|e| !e.is_zero_constant())
    {
        return None;
    }
    if !matches!(db.dtype, DType::F16 | DType::BF16) {
        return None;
    }
    let param = k.params.iter().position(|p| p.kind == ParamKind::Tensor(dst.buf))?;
    let st = WsStore { index, acc: g.c, param, dtype: db.dtype, rows: g.m, cols: g.n };
    let stage_room: i64 = operands.iter().map(|o| (o.stage_bytes() + 1023) / 1024 * 1024 * stages as i64).sum();
    if st.cols % st.panel_cols() != 0 || st.rows > 256 || st.panel_bytes() * (st.cols / st.panel_cols()) > stage_room {
        return None;
    }
    Some(st)
}

pub(crate) fn count_pipelined(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match &s.kind {
            StmtKind::For { kind, body, .. } => {
                (matches!(kind, LoopKind::Pipelined { .. }) as usize) + count_pipelined(body)
            }
            StmtKind::If { then, otherwise, .. } => count_pipelined(then) + count_pipelined(otherwise),
            _ => 0,
        })
        .sum()
}

/// Statements every thread (the producer's too) may run before the split.
fn touches_no_memory(k: &Kernel, s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => !has_load(value),
        StmtKind::Fill { buf, value } => {
            matches!(k.buffer(*buf).scope, Scope::Fragment | Scope::Local) && !has_load(value)
        }
        _ => false,
    }
}

pub(crate) fn has_load(e: &Expr) -> bool {
    match e {
        Expr::Const(_) | Expr::Var(_) => false,
        Expr::Load { .. } => true,
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => has_load(arg),
        Expr::Binary { lhs, rhs, .. } => has_load(lhs) || has_load(rhs),
        Expr::Fma { a, b, c } => has_load(a) || has_load(b) || has_load(c),
        Expr::Select { cond, then, otherwise } => has_load(cond) || has_load(then) || has_load(otherwise),
    }
}

fn tma_operand(
    k: &Kernel,
    copy: usize,
    src: &crate::ir::TileRef,
    dst: &crate::ir::TileRef,
    fill: Option<&Expr>,
) -> Option<TmaOperand> {
    let (sb, db) = (k.buffer(src.buf), k.buffer(dst.buf));
    if sb.scope != Scope::Global
        || db.scope != Scope::Shared
        || sb.dtype != db.dtype
        || !matches!(sb.dtype, DType::F16 | DType::BF16)
    {
        return None;
    }
    if sb.shape.len() != 2
        || src.origin.len() != 2
        || !src.squeezed.is_empty()
        || dst.origin.iter().any(|e| !e.is_zero_constant())
        || fill.is_some_and(|f| !f.is_zero_constant())
    {
        return None;
    }
    if db.layout.is_some() {
        // The user chose a layout for ldmatrix; the TMA path places its own.
        return None;
    }
    let param = k.params.iter().position(|p| p.kind == ParamKind::Tensor(src.buf))?;
    let [rows, cols] = db.const_shape()?.try_into().ok()?;
    let elem = sb.dtype.size_bytes() as i64;
    let row_bytes = cols * elem;
    let (swizzle, panel_cols) = match row_bytes {
        32 => (Swizzle::B32, cols),
        64 => (Swizzle::B64, cols),
        b if b >= 128 && b % 128 == 0 => (Swizzle::B128, 128 / elem),
        _ => return None,
    };
    let box_rows = rows.min(256);
    if rows % 8 != 0 || rows % box_rows != 0 {
        return None;
    }
    Some(TmaOperand {
        copy,
        buf: dst.buf,
        param,
        dtype: sb.dtype,
        rows,
        cols,
        swizzle,
        panel_cols,
        box_rows,
        multicast: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operand(rows: i64, cols: i64) -> TmaOperand {
        let (swizzle, panel_cols) = match cols * 2 {
            32 => (Swizzle::B32, cols),
            64 => (Swizzle::B64, cols),
            _ => (Swizzle::B128, 64),
        };
        TmaOperand {
            copy: 0,
            buf: BufferId(0),
            param: 0,
            dtype: DType::F16,
            rows,
            cols,
            swizzle,
            panel_cols,
            box_rows: rows.min(256),
            multicast: false,
        }
    }

    /// The panelled placement is a bijection onto the stage's bytes, keeps
    /// 16-byte chunks contiguous, and inside a panel is the `Swizzle<b,4,3>`
    /// pattern wgmma descriptors describe ([`crate::layout::SharedLayout::for_ldmatrix`]).
    #[test]
    fn panelled_offsets_are_a_bijection_matching_the_swizzle() {
        for (rows, cols) in [(64, 256), (128, 64), (256, 64), (64, 32), (64, 16), (64, 128)] {
            let o = operand(rows, cols);
            let mut seen = HashSet::new();
            for r in 0..rows {
                for c in 0..cols {
                    let off = o.offset(r, c);
                    assert!(off >= 0 && off < o.stage_bytes() && off % 2 == 0);
                    assert!(seen.insert(off));
                    if c % 8 != 0 {
                        assert_eq!(off, o.offset(r, c - 1) + 2);
                    }
                    let panel = crate::layout::SharedLayout::for_ldmatrix(rows, o.panel_cols, 2);
                    assert_eq!(off % o.panel_bytes(), panel.offset(r, c % o.panel_cols), "{rows}x{cols} ({r}, {c})");
                }
            }
            assert_eq!(seen.len() as i64 * 2, o.stage_bytes());
            let boxes = o.boxes();
            assert_eq!(boxes.len() as i64, (cols / o.panel_cols) * (rows / o.box_rows));
            for (off, r0, c0) in boxes {
                assert_eq!(off, o.offset(r0, c0));
            }
        }
    }
}

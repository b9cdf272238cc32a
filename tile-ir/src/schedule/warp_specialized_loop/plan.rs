//! The plan of the warp-specialized loop: whether a kernel has a pipelined
//! loop whose copies a producer warpgroup can issue as TMA boxes while the
//! kernel's own threads run everything else.
//!
//! Expects a verified kernel. Takes it (returns a [`WslPlan`]) only on
//! sm_90a, without `warp_specialize = false`, with `threads` a multiple of
//! 128 (at most 896, room for the producer warpgroup), and when:
//!
//! - it has exactly one `pipelined(n, stages)` loop, at the top level
//!   of its body, which the pipeline analysis takes
//!   ([`crate::passes::pipeline::plan_with`], copies whose destination the
//!   body writes afterwards included: MLA's V rows past the sequence zeroed
//!   in the stage); with one stage only where its copies form at least two
//!   independent rings (`independent_rings`: no statement, and no gemm
//!   chain from a `clear`, reads two of them), each released by its own
//!   last reader, so that the producer refills one while the consumers
//!   read another (two key blocks per iteration, FlashMLA's `sK0`/`sK1`);
//! - every pipelined copy of that loop is one TMA may do as far as the
//!   kernel alone tells (`tma_copy`'s acceptance: a 2-D window of a tensor of
//!   rank 2 to 5 spanning the innermost dim, into a shared buffer of its
//!   type at origin 0, zero fill); its shared layout is checked while
//!   lowering, with the same code as the TMA-copy schedule's;
//! - what the producer computes, the loop's bounds and the pipelined copies'
//!   origins (the body's `let`s they use inlined, as the pipeline analysis
//!   resolves them: a page index `block_table[(b, kb)]`), depends only on
//!   the loop variable, dims, scalar parameters, block indices, loads of
//!   tensors the kernel never writes (`block_table`, `cache_seqlens`) and
//!   `let`s before the loop of such values (never reassigned): the producer
//!   evaluates exactly those, loads included, itself;
//! - the warp-specialized GEMM does not take it (its loop is only copies and
//!   gemms, and that schedule knows more about it);
//! - it has more than one consumer warpgroup, or its loop has no gemm, or
//!   [`CompileOptions::wsloop_one_warpgroup`] is on: with one consumer
//!   warpgroup the TMA-copy variant's 2-4 blocks per SM overlap softmax and
//!   wgmma better than this schedule's one or two (measured on the H200,
//!   BENCHMARKS.md: FlashAttention at 128 threads, 0.6-0.8x the TMA-copy
//!   variant), so it comes first there.
//!
//! A copy before the loop that TMA may do (the same acceptance), whose
//! shared destination no other statement writes or reads before it, whose
//! source tensor the kernel never writes, and whose origin the producer can
//! compute (as above), is the producer's too ([`WslPlan::pre_copies`]): it
//! issues it once, before its loop, on a barrier of its own, and the
//! consumers wait for that barrier where the copy was (FA3's Q tile).
//!
//! The loop body, the statements before it (which may read memory) and
//! those after it may be anything the lowering core lowers: they run on
//! the consumers only. Anything else: a [`NotApplicable`] saying why.

use crate::ir::{Kernel, LoopKind, StmtKind, VarId, VarKind};
use crate::passes::pipeline::{self, expr_vars, touches, touches_memory, PipelinePlan};
use crate::schedule::not_applicable::NotApplicable;
use crate::schedule::tma_copy::tma_candidate;
use crate::schedule::warp_specialized_gemm::{self, count_pipelined};
use crate::target::Feature;
use crate::{CompileOptions, Target};
use std::collections::HashSet;

/// The warp specialization of one kernel's pipelined loop.
#[derive(Clone, Debug)]
pub struct WslPlan {
    /// Index of the pipelined loop in `kernel.body`.
    pub loop_index: usize,
    /// Its variable.
    pub var: VarId,
    /// The loop's stages: slots of each copy's full/empty mbarrier ring.
    pub stages: u32,
    /// Indices (into the loop body) of the pipelined copies: the producer's.
    pub copies: Vec<usize>,
    /// The pipeline analysis (which shared buffers have stages).
    pub pipe: PipelinePlan,
    /// Indices (into `kernel.body`, before the loop) of the `let`s the
    /// producer evaluates, in order.
    pub producer_lets: Vec<usize>,
    /// Indices (into `kernel.body`, before the loop) of the copies the
    /// producer issues once, before its loop (see the module doc).
    pub pre_copies: Vec<usize>,
    /// The kernel's threads: the consumer warpgroups.
    pub consumer_threads: u32,
    /// Registers per producer thread after `setmaxnreg.dec`.
    pub producer_regs: u32,
    /// Registers per consumer thread after `setmaxnreg.inc`.
    pub consumer_regs: u32,
    /// The persistent variant ([`plan_persistent`], `persistent.rs`): each
    /// block runs the grid's blocks `ctaid.x + i·nctaid.x` as tiles.
    pub persistent: bool,
    /// The blocks of the kernel's thread block cluster that load the
    /// [`WslPlan::multicast`] copies together (`cluster = (C, 1, 1)`), or 1.
    pub cluster: u32,
    /// Indices (into the loop body) of the pipelined copies whose tile is
    /// the same in every block of the cluster (`multicast_copies`): each
    /// block's producer loads `1/C` of every box and multicasts it to all
    /// of them (where the stage's layout splits so: `lower.rs` decides).
    pub multicast: Vec<usize>,
}

/// Whether (and how) `kernel`'s pipelined loop is warp-specialized on
/// `target`, or why not; see the module doc.
#[allow(clippy::manual_is_multiple_of)] // MSRV 1.85 lacks `is_multiple_of`
pub fn plan(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<WslPlan, NotApplicable> {
    let no = |reason: &str| NotApplicable::new(reason);
    let info = target.info();
    let needs = [Feature::Tma, Feature::Setmaxnreg, Feature::MbarrierTx];
    let (true, Some(split)) = (needs.iter().all(|f| target.has(*f)), info.registers.split.as_ref()) else {
        return Err(NotApplicable::new(format!("warp specialization needs sm_90a, not {}", target.name())));
    };
    if !kernel.warp_specialize {
        return Err(no("the kernel says `warp_specialize = false`"));
    }
    let threads = kernel.threads;
    if threads % 128 != 0 || threads == 0 || threads + 128 > 1024 {
        return Err(NotApplicable::new(format!(
            "threads = {threads}: the consumers must be whole warpgroups (a multiple of 128) with room for a producer warpgroup (at most 896)"
        )));
    }
    let (loop_index, lp) = kernel
        .body
        .iter()
        .enumerate()
        .find(|(_, s)| matches!(s.kind, StmtKind::For { kind: LoopKind::Pipelined { .. }, .. }))
        .ok_or_else(|| no("the kernel has no `pipelined` loop at the top level of its body"))?;
    let StmtKind::For { var, start, end, body, kind: LoopKind::Pipelined { stages } } = &lp.kind else {
        return Err(no("the kernel has no `pipelined` loop at the top level of its body"));
    };
    if count_pipelined(&kernel.body) != 1 || *stages < 1 {
        return Err(no("the kernel must have exactly one pipelined loop"));
    }
    // A copy the body writes into afterwards is the producer's too: the
    // consumers release its stage after the last statement touching it.
    let pipe = pipeline::plan_with(kernel, true);
    let pl = pipe.loops.get(var).ok_or_else(|| {
        let mut why = String::from("the pipeline analysis takes no copy of the pipelined loop (a global → shared copy whose origin depends on the loop variable, reading only tensors the kernel never writes)");
        for r in &pipe.refusals {
            why.push_str("; ");
            why.push_str(r);
        }
        NotApplicable::new(why)
    })?;
    if *stages == 1 && independent_rings(kernel, body, &pl.copies) < 2 {
        return Err(no(
            "one stage: the producer could refill a ring only after the consumers are done with it; one stage is taken only where the loop's copies form at least two rings read by separate statements (no statement, and no gemm chain from a `clear`, reads two of them), so that one ring refills while another is read",
        ));
    }
    for &i in &pl.copies {
        let StmtKind::Copy { src, dst, fill, .. } = &body[i].kind else {
            return Err(no("internal: a pipelined statement is not a copy"));
        };
        if !tma_candidate(kernel, src, dst, fill.as_ref()) {
            return Err(NotApplicable::new(format!(
                "the pipelined copy into `{}` is not a TMA box: the producer issues only TMA (a 2-D global tile of f16, bf16, f32, i32 or u32 of a tensor of rank 2 to 5, the other dims squeezed, spanning the innermost dim, into a shared buffer of its type at origin 0 with a zero fill)",
                kernel.buffer(dst.buf).name
            )));
        }
    }
    // What the producer computes: the bounds and the copies' origins.
    let mut need = HashSet::new();
    let mut loads = false;
    expr_vars(start, &mut need, &mut loads);
    expr_vars(end, &mut need, &mut loads);
    if loads && [start, end].iter().any(|e| pipeline::non_constant_load(kernel, e).is_some()) {
        return Err(no(
            "the pipelined loop's bounds read a buffer the kernel writes; the producer warpgroup computes them, and it reads only tensors the kernel never writes",
        ));
    }
    for &i in &pl.copies {
        if let StmtKind::Copy { src, dst, .. } = &body[i].kind {
            for e in &pipe.source(src, dst).origin {
                expr_vars(e, &mut need, &mut loads);
            }
        }
    }
    producer_lets(kernel, loop_index, *var, need.clone())?;
    // Copies before the loop the producer can issue too.
    let mut pre_copies = Vec::new();
    for (i, s) in kernel.body[..loop_index].iter().enumerate() {
        let StmtKind::Copy { src, dst, fill, .. } = &s.kind else { continue };
        if !tma_candidate(kernel, src, dst, fill.as_ref()) {
            continue;
        }
        let others = kernel.body.iter().enumerate().filter(|(j, _)| *j != i);
        let clash = others.clone().any(|(j, x)| {
            let (r, w) = touches_memory(kernel, x, dst.buf);
            w || (r && j < i)
        }) || kernel.body.iter().any(|x| touches(x, src.buf).1);
        if clash {
            continue;
        }
        let mut more = need.clone();
        let mut loads = false;
        for e in &src.origin {
            expr_vars(e, &mut more, &mut loads);
        }
        let constant = src.origin.iter().all(|e| pipeline::non_constant_load(kernel, e).is_none());
        if (!loads || constant) && producer_lets(kernel, loop_index, *var, more.clone()).is_ok() {
            need = more;
            pre_copies.push(i);
        }
    }
    let producer_lets = producer_lets(kernel, loop_index, *var, need)?;
    let (cluster, multicast) = if options.wsloop_multicast {
        multicast_copies(kernel, loop_index, &pl.copies, &pipe, target)
    } else {
        (1, vec![])
    };
    if warp_specialized_gemm::plan(kernel, target).is_ok() {
        return Err(no("the warp-specialized GEMM takes this kernel (its loop is only TMA copies and gemms)"));
    }
    if threads == 128 && !options.wsloop_one_warpgroup && has_gemm(body) {
        return Err(no(
            "one consumer warpgroup: the TMA-copy variant's 2-4 blocks per SM overlap softmax and wgmma better (measured on the H200, BENCHMARKS.md)",
        ));
    }
    // The producer is one thread issuing TMA boxes: FA3's 24 registers
    // (`setmaxnreg`'s least) leave two consumer warpgroups 240 each.
    let producer_regs = PRODUCER_REGS.min(split.producer);
    let consumer_regs = info.consumer_regs_after(producer_regs, threads, 1).unwrap_or(split.consumer_max);
    Ok(WslPlan {
        loop_index,
        var: *var,
        stages: *stages,
        copies: pl.copies.clone(),
        pipe: pipe.clone(),
        producer_lets,
        pre_copies,
        consumer_threads: threads,
        producer_regs,
        consumer_regs,
        persistent: false,
        cluster,
        multicast,
    })
}

/// The pipelined copies (indices into the loop body) every block of the
/// kernel's `(C, 1, 1)` cluster loads alike, and `C`; `(1, [])` unless the
/// cluster and the loop's bounds allow it (the warp-specialized GEMM's
/// conditions, [`warp_specialized_gemm::cluster_loop`]) and some copy's
/// origin, with the body's `let`s inlined (a page index read from a
/// table), is the same in every block of the cluster too
/// ([`warp_specialized_gemm::cluster_uniform`]: loads of tensors the kernel
/// never writes allowed). The persistent variant takes no cluster kernel
/// ([`plan_persistent`]).
fn multicast_copies(
    kernel: &Kernel,
    loop_index: usize,
    copies: &[usize],
    pipe: &PipelinePlan,
    target: Target,
) -> (u32, Vec<usize>) {
    let Some((c, lets)) = warp_specialized_gemm::cluster_loop(kernel, loop_index, target) else {
        return (1, vec![]);
    };
    let uniform = |e: &crate::ir::Expr| warp_specialized_gemm::cluster_uniform(kernel, e, &lets);
    let StmtKind::For { body, .. } = &kernel.body[loop_index].kind else { return (1, vec![]) };
    let multicast: Vec<usize> = copies
        .iter()
        .copied()
        .filter(|&i| match &body[i].kind {
            StmtKind::Copy { src, dst, .. } => pipe.source(src, dst).origin.iter().all(uniform),
            _ => false,
        })
        .collect();
    if multicast.is_empty() {
        (1, vec![])
    } else {
        (c, multicast)
    }
}

/// The plan of the persistent variant (`persistent.rs`): [`plan`]'s, when
/// [`CompileOptions::wsloop_persistent`] is on, the kernel asks for no thread
/// block cluster (the runtime launches a clustered kernel's whole grid) and
/// reads a block index (else every block does the same work); the tiles
/// are then the grid's blocks in launch order, each block running
/// `ctaid.x, ctaid.x + nctaid.x, ...` below their count.
pub fn plan_persistent(kernel: &Kernel, target: Target, options: CompileOptions) -> Result<WslPlan, NotApplicable> {
    if !options.wsloop_persistent {
        return Err(NotApplicable::new("`CompileOptions::wsloop_persistent` is off"));
    }
    let mut p = plan(kernel, target, options)?;
    // Its thread also keeps the tile loop (the count, the stride, the tile,
    // the block indices unfolded from it) live across the ring's loop: 32
    // registers (ptxas spills at 24 with d256's boxes), which leave two
    // consumer warpgroups 232 each: the block holds 168 · 384 from its
    // launch, (64,512 − 128·32) / 256 = 236. (240, a share of the whole
    // SM's file, was 1,024 registers more than the block's pool:
    // `setmaxnreg.inc` waited forever on the H200.)
    let info = target.info();
    if let Some(split) = info.registers.split.as_ref() {
        p.producer_regs = PERSISTENT_PRODUCER_REGS.min(split.producer);
        p.consumer_regs =
            info.consumer_regs_after(p.producer_regs, p.consumer_threads, 1).unwrap_or(split.consumer_max);
    }
    if p.stages == 1 {
        // Measured by ptxas on MLA's seesaw kernel (321159e): 60 bytes of
        // spills (the tile loop's registers beside two warpgroups' scores)
        // and its wgmmas serialized (C7514; with the owner gemms' waits
        // after their branches, 76 bytes of spills).
        return Err(NotApplicable::new(
            "one-stage rings: the persistent loop's registers beside them spill and ptxas serializes its wgmmas (MLA's seesaw); the plain variant takes it",
        ));
    }
    if kernel.cluster != [1, 1, 1] {
        return Err(NotApplicable::new(
            "the kernel asks for a thread block cluster: the runtime launches a clustered kernel's whole grid",
        ));
    }
    if !kernel.vars.iter().any(|v| matches!(v.kind, VarKind::BlockIdx(_))) {
        return Err(NotApplicable::new("the kernel reads no block index: there are no tiles to loop over"));
    }
    let words = fragment_words(kernel, p.consumer_threads);
    if words > PERSISTENT_FRAGMENT_WORDS {
        return Err(NotApplicable::new(format!(
            "its fragments hold {words} registers per consumer thread, more than {PERSISTENT_FRAGMENT_WORDS}: in the \
             persistent variant's {} (the plain variant's {}) they spill (attention at head dim 256: 52 bytes), and \
             the plain variant was faster on the H200 (d256 b2 h16 s4096: 625.5 vs 591.9 TFLOPS, causal 520.2 vs 492.3)",
            p.consumer_regs, split_consumer_regs(target, p.consumer_threads)
        )));
    }
    Ok(WslPlan { persistent: true, ..p })
}

/// The plain variant's consumer registers ([`plan`]'s split), for messages.
fn split_consumer_regs(target: Target, threads: u32) -> u32 {
    target.info().registers.split.as_ref().map_or(0, |s| {
        target.info().consumer_regs_after(s.producer, threads, 1).unwrap_or(s.consumer_max).min(s.consumer_max)
    })
}

/// The 32-bit registers per consumer thread that the kernel's fragments
/// hold, each spread evenly over the `threads` consumers (16-bit elements
/// two to a register, each buffer rounded up): attention at head dim 256
/// (128-row query blocks, key blocks of 64, two consumer warpgroups) 245,
/// head dim 128 with key blocks of 128 197, MLA's split kernel 149.
fn fragment_words(kernel: &Kernel, threads: u32) -> u64 {
    kernel
        .buffers
        .iter()
        .filter(|b| b.scope == crate::ir::Scope::Fragment)
        .map(|b| {
            let elems: u64 =
                b.shape.iter().map(|e| if let crate::ir::Extent::Const(n) = e { *n as u64 } else { 1 }).product();
            (elems * b.dtype.size_bytes() as u64).div_ceil(4 * threads.max(1) as u64)
        })
        .sum()
}

/// The most fragment registers per consumer thread
/// ([`fragment_words`]) of a kernel the persistent variant takes: its
/// consumers get 232 registers (the tile loop's producer keeps 32), the
/// plain variant's 240; above this the accumulators, the scores and the
/// converted output no longer fit beside the addresses and the loop state.
const PERSISTENT_FRAGMENT_WORDS: u64 = 224;

/// Registers the persistent variant's producer warpgroup keeps (see
/// [`plan_persistent`]).
const PERSISTENT_PRODUCER_REGS: u32 = 32;

/// Registers the producer warpgroup keeps (`setmaxnreg.dec`): its one
/// issuing thread needs only the stage, the phase, the loop counter and the
/// boxes' coordinates.
const PRODUCER_REGS: u32 = 24;

/// The `let`s before the loop (indices into `kernel.body`, in order) that
/// bind the variables in `need`, transitively; errors when one of them is
/// not such a `let` of a memory-free value, or is reassigned.
fn producer_lets(
    kernel: &Kernel,
    loop_index: usize,
    loop_var: VarId,
    mut need: HashSet<VarId>,
) -> Result<Vec<usize>, NotApplicable> {
    let mut lets = Vec::new();
    let mut assigned = HashSet::new();
    assigned_vars(&kernel.body, &mut assigned);
    for i in (0..loop_index).rev() {
        let StmtKind::Let { var, value } = &kernel.body[i].kind else { continue };
        if !need.remove(var) {
            continue;
        }
        if let Some(b) = pipeline::non_constant_load(kernel, value) {
            return Err(NotApplicable::new(format!(
                "`{}` reads `{}`, which the kernel writes (or which is not a global tensor), and a pipelined copy's origin or the loop's bounds use it; the producer warpgroup computes those, and it reads only tensors the kernel never writes",
                kernel.var(*var).name,
                kernel.buffer(b).name
            )));
        }
        let mut loads = false;
        expr_vars(value, &mut need, &mut loads);
        lets.push(i);
    }
    for v in &need {
        let ok = *v == loop_var || matches!(kernel.var(*v).kind, VarKind::Dim | VarKind::Param | VarKind::BlockIdx(_));
        if !ok {
            return Err(NotApplicable::new(format!(
                "a pipelined copy's origin or the loop's bounds use `{}`, which is not a dim, a parameter, a block index or a `let` before the loop; the producer warpgroup cannot compute it",
                kernel.var(*v).name
            )));
        }
    }
    for &i in &lets {
        if let StmtKind::Let { var, .. } = &kernel.body[i].kind {
            if assigned.contains(var) {
                return Err(NotApplicable::new(format!(
                    "`{}` is reassigned, and a pipelined copy's origin or the loop's bounds use it; the producer warpgroup computes those from the values before the loop",
                    kernel.var(*var).name
                )));
            }
        }
    }
    lets.reverse();
    Ok(lets)
}

/// Whether `body` has a gemm, at any depth.
fn has_gemm(body: &[crate::ir::Stmt]) -> bool {
    body.iter().any(|s| match &s.kind {
        StmtKind::Gemm { .. } => true,
        StmtKind::For { body, .. } => has_gemm(body),
        StmtKind::If { then, otherwise, .. } => has_gemm(then) || has_gemm(otherwise),
        _ => false,
    })
}

fn assigned_vars(body: &[crate::ir::Stmt], out: &mut HashSet<VarId>) {
    for s in body {
        match &s.kind {
            StmtKind::Assign { var, .. } => {
                out.insert(*var);
            }
            StmtKind::For { body, .. } => assigned_vars(body, out),
            StmtKind::If { then, otherwise, .. } => {
                assigned_vars(then, out);
                assigned_vars(otherwise, out);
            }
            _ => {}
        }
    }
}

/// How many independent rings a one-stage loop's pipelined copies form:
/// their destinations grouped so that no statement of `body` touches two
/// groups, nor does a gemm chain (a `clear` gemm and the gemms after it
/// accumulating into the same fragment: one product over both buffers).
fn independent_rings(kernel: &Kernel, body: &[crate::ir::Stmt], copies: &[usize]) -> usize {
    let bufs: Vec<_> = copies
        .iter()
        .filter_map(|&i| match &body[i].kind {
            StmtKind::Copy { dst, .. } => Some(dst.buf),
            _ => None,
        })
        .collect();
    let mut group: Vec<usize> = (0..bufs.len()).collect();
    fn find(g: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while g[r] != r {
            r = g[r];
        }
        g[x] = r;
        r
    }
    fn join(g: &mut [usize], members: &[usize]) {
        if let Some((&first, rest)) = members.split_first() {
            for &m in rest {
                let (a, b) = (find(g, first), find(g, m));
                g[b] = a;
            }
        }
    }
    let mut chain: Option<(crate::ir::BufferId, Vec<usize>)> = None;
    for (i, s) in body.iter().enumerate() {
        if copies.contains(&i) {
            continue;
        }
        let touched: Vec<usize> = (0..bufs.len())
            .filter(|&k| {
                let (r, w) = touches_memory(kernel, s, bufs[k]);
                r || w
            })
            .collect();
        join(&mut group, &touched);
        match &s.kind {
            StmtKind::Gemm { c, clear: true, .. } => chain = Some((*c, touched)),
            StmtKind::Gemm { c, clear: false, .. } if chain.as_ref().is_some_and(|(acc, _)| acc == c) => {
                if let Some((_, members)) = chain.as_mut() {
                    members.extend(touched);
                    join(&mut group, members);
                }
            }
            _ => chain = None,
        }
    }
    let mut roots: Vec<usize> = (0..bufs.len()).map(|k| find(&mut group, k)).collect();
    roots.sort_unstable();
    roots.dedup();
    roots.len()
}

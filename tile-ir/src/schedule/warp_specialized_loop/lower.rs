//! The warp-specialized schedule of one pipelined loop (sm_90a): TMA boxes
//! by a producer warpgroup, everything else by the kernel's own threads,
//! stages handed over through full/empty mbarriers.
//!
//! Expects the [`super::WslPlan`] of [`super::plan`] in the [`WslLowering`]
//! of the lowering (the core then gives each pipelined shared buffer `S`
//! stage copies, 1024-byte aligned) and a layout plan for sm_90a.
//!
//! Guarantees the schedule (`T` consumer threads, `S` stages, `st` = stage,
//! `ph` = its phase parity, each side carrying its own; one ring of
//! `full_c[s]`/`empty_c[s]` per pipelined copy `c`, so that K's stage is
//! refilled as soon as Q·Kᵀ has read it and P·V waits only for V):
//! ```text
//! thread 0: init full_c[s] (1 arrival), empty_c[s] (T arrivals), pre (1); fence
//! bar.sync 0, T+128
//! producer warpgroup (tid ≥ T): setmaxnreg.dec P; thread T only:
//!     the `let`s the origins and the bounds need
//!     arrive.expect_tx pre, bytes; the boxes of the pre-loop copies (Q)
//!     a, b = bounds
//!     for k in a..b: for each copy c:
//!                        wait empty_c[st] parity ph^1     // the consumers released it
//!                        arrive.expect_tx full_c[st], bytes of c's boxes
//!                        c's TMA boxes at k → stage st
//!                    advance st (ph flips at the wrap)
//!     exit
//! consumers (tid < T): setmaxnreg.inc C
//!     the statements before the loop, a pre-loop copy replaced by: wait pre parity 0
//!     for k in a..b: the body on stage st, its pipelined copies left out:
//!                        wait full_c[st] parity ph before the first statement using c's buffer
//!                        arrive empty_c[st] after the last one  // every thread, after its reads
//!                                                               // (and writes: fenced, see below)
//!                    advance st
//!     bar.sync 1, T                                  // stage memory may be reused
//!     the statements after the loop
//! ```
//! A stage the body writes into after its copy (MLA's V rows past the
//! sequence zeroed: [`crate::passes::pipeline::PipelinePlan::rewritten`])
//! is released after the last statement touching it, read or write, like
//! any other; the writes go to the current stage (every statement of the
//! body addresses its stage), are dead at the next fill (the copy fills the
//! whole buffer), and reach the async proxy of that fill through a
//! `fence.proxy.async` before the arrive, unless the last user is a wgmma
//! gemm reading the stage, before which the barrier pass fences them anyway.
//! The loops that issue ahead or defer a gemm take no such ring (its buffer
//! has more than the one gemm using it).
//!
//! **Multicast** ([`super::WslPlan::multicast`], `cluster = (C, 1, 1)`): a
//! ring whose tile every block of the cluster loads alike has its boxes
//! shared out ([`WslCopy::share`]: box rows split into `C` shares of whole
//! swizzle periods; the tensor map's box is one share). Then:
//! ```text
//! thread 0: empty_c[s] counts T·C arrivals (T/32·C: by warp, below); fence
//! bar.sync 0, T+128; barrier.cluster.arrive; barrier.cluster.wait   // every block's barriers initialized
//! producer: for k: wait empty_c[st]; arrive.expect_tx full_c[st] (or each piece), the whole box's bytes
//!                  block rank r's share of every box (rows + r·rows, at + r·bytes), multicast to all
//!           then S more waits of every multicast ring's empty_c (advancing st, ph)
//! consumers: every consumer waits for the ring's stage (a ring one warpgroup reads: the others in
//!            its branch's `else`), then releases it on empty_c of every block (mapa + remote arrive)
//! ```
//! A block's `full` phase completes only with its own producer's arrival
//! and every share's bytes (a peer's may land before the announcement:
//! the transaction count goes negative until it), so a consumer that waited
//! for round `n` knows that every producer of the cluster waited for round
//! `n − 1`'s releases before issuing its share: its own release is counted
//! in round `n` on every block's barrier, and no producer refills a stage
//! that a consumer of any block still reads. Hence every consumer waits
//! before it releases. The producer's last round of waits keeps its block
//! alive until every release of it, the peers' remote ones included, has
//! arrived (a remote arrival to an exited block faults). Where every reader
//! of the ring is a gemm on wgmma and the last statement touching it is one
//! (MLA's K and V), lane 0 of each warp releases for the warp, after the
//! `wgmma.wait_group` every lane passes together (`Lx::wsl_warp_releases`).
//!
//! A ring whose first reader is a wgmma gemm taking the stage as its
//! K-major B may get one full barrier per TMA box instead
//! ([`crate::CompileOptions::piece_barriers`], `pieces.rs`): the wait before
//! its first user is then the gemm's own, box by box.
//!
//! Consecutive gemms on wgmma accumulating into one fragment (MLA's
//! `S = Q·Kᵀ` over the 512 "nope" columns, then `S += Q_pe·K_peᵀ`, or the
//! rope columns first): the first is left in flight, without its
//! `wgmma.wait_group 0`; the second's wgmmas, issued after it by the
//! same warpgroup into the same registers, are ordered after it, and its
//! wait retires both groups (between them only the second's ring wait and
//! `wgmma.fence`). A ring whose last user is the first (K_pe's, rope
//! first) is released after that wait, with the second's own.
//!
//! The stage's reads are done before the arrive: generic loads complete in
//! program order, and a wgmma reading the stage is waited for before it
//! (`wgmma.wait_group 0` of the general lowering moves down only to the
//! first statement that is not plain arithmetic or a load,
//! [`crate::passes::wgmma_wait`], and the arrive is not; statements are
//! lowered one after the other, so a statement's reads are issued before
//! the arrive that follows it). A fresh mbarrier
//! is in phase 0, so the producer's first `S` waits (parity 1, "the phase
//! before") return at once; each side runs exactly the iterations `a..b`,
//! so for any trip count (0, 1, 2, ...) every box issued is waited for once
//! and nobody waits for a phase that never completes. Every `bar.sync` of
//! the consumers (the core's, the barrier pass's, the reductions') is named
//! over the `T` consumers (`Function::barrier_threads`); the producer never
//! reaches one. Out-of-range boxes are zero-filled by TMA and still complete
//! their bytes.
//!
//! **The last gemm's wait** ([`crate::CompileOptions::late_last_wait`]),
//! when the loop neither issues ahead nor defers a gemm and its two
//! warpgroups ping-pong (the other's softmax runs under both gemms; three
//! warpgroups, d64, lost 2.4 % on the H200, MLA's two in lockstep gained
//! nothing beyond the noise): a body that starts
//! with a gemm on wgmma (or a chain of them into one fragment: MLA's two
//! Q·Kᵀ) and ends with another (P·V), where nothing up to the end of that
//! chain writes the last gemm's operands or accumulator or reads its
//! accumulator, leaves the last gemm in flight across the back-edge:
//! ```text
//! for k: the first gemm(s) of k issued (turn, commit, hand-over)
//!        wgmma.wait_group 0                  // retires them and gemm_last(k − 1)
//!        if k > a: arrive empty_V[st − 1]   // the rings gemm_last is the last user of
//!        the rest of the body; gemm_last(k) issued, committed, not waited for
//! wgmma.wait_group 0; if a < b: arrive empty_V[st − 1]
//! ```
//! so P·V(k) and Q·Kᵀ(k + 1) run back to back on the tensor cores, both
//! under the other warpgroup's softmax, instead of the
//! warpgroup waiting for P·V before it takes its next turn; it costs no
//! registers (S is free once P is made, P and O are not touched before the
//! wait). Each stage is still released once, one iteration later for the
//! delayed rings: the producer's fill of V's stage `k + S` waits for the
//! release in iteration `k + 1`, which needs only stages filled before it
//! (K's stage `k + 1`, whose fill follows V's stage `k`'s, which waited
//! for the release in iteration `k − S + 1 ≤ k`), so nothing deadlocks for
//! any trip count. A generic write of a shared operand of the last gemm
//! (MLA's P) comes after the wait in the next iteration, and the barriers
//! that order it after the other warpgroup's reads (the barrier pass sees
//! the wgmma's read at its issue) come after each warpgroup's own wait.
//!
//! **Deferred waits** ([`crate::CompileOptions::wsloop_deferred_waits`]):
//! a gemm on wgmma that every consumer runs, with both operands in shared
//! memory (or, in a loop split per warpgroup with owner waits, one
//! warpgroup's, its A also from that warpgroup's registers: FlashMLA's
//! local P·V), that is not the body's last, nor pieced, chained, left late or
//! where the late gemm is retired, is issued and committed without its
//! wait; the wait and the releases of the rings it is the last reader of
//! come right before the first later statement that is a gemm, writes one
//! of its operands (or a view of them), or touches a fragment whose
//! registers are its accumulator's or its register A's (another
//! warpgroup's fragment may share them), else at the end of the body. A
//! deferred gemm that ends a chain keeps the chain's gemms in flight with
//! it: a ring one of them reads is released only after its wait. Each ring is still released
//! once per iteration, only later, after its reader's wait; no register
//! the gemm writes is touched while it runs, and no shared write reaches
//! what it reads (MLA's seesaw: block 1's softmax on warpgroup 1 under
//! block 0's P·V). (ptxas serializes every wgmma, C7515, when registers a
//! score gemm writes are written while such a gemm is in flight: the
//! seesaw copies its scores out first.)
//!
//! **Guarded waits** ([`crate::CompileOptions::wsloop_guarded_waits`]):
//! a deferred gemm's accumulator rescaled by a nest under a row test
//! (`if alpha[i] != 1.0 { acc[(i, j)] = acc[(i, j)] * alpha[i]; }`) and
//! then accumulated into by a gemm of the same instructions (MLA's seesaw:
//! O rescaled by block 1's factor between block 0's P·V and block 1's):
//! ```text
//! the row tests; vote = bar.red.or (the warpgroup's own barrier) of them
//! if vote: wgmma.wait_group 0; the rows' rescales  // uniform: the vote's
//! the later gemm issued, committed                 // behind the pending one
//! wgmma.wait_group 1; arrive empty_c[st] for the pending gemm's rings
//! wgmma.wait_group 0; arrive empty_c[st] for the later gemm's rings
//! ```
//! `wgmma.wait_group` is warpgroup-collective: the vote makes the wait's
//! branch uniform over the warpgroup. Where no row moved its maximum
//! (nearly every block), the later gemm queues on the tensor cores behind
//! the pending one instead of waiting for it: wgmmas of one shape into
//! one accumulator run in issue order (PTX ISA, `wgmma.fence`). The
//! pending gemm's rings are still released only after a wait that
//! retires it.
//!
//! **One loop per warpgroup** ([`crate::CompileOptions::wsloop_split_warpgroups`]):
//! with two consumer warpgroups and statements of one warpgroup in the body
//! (plain or persistent), the loop is marked for
//! [`crate::passes::split_warpgroups`], which runs it as one copy per
//! warpgroup once the barriers are placed: ptxas then never sees one
//! warpgroup's writes of the registers the two share (`owned_regs`) on a
//! path where the other's wgmma is in flight (C7515 otherwise: MLA's seesaw
//! ran block 1's softmax on a copy of its scores before).
//!
//! Issuing the first gemm ahead and the ping-pong of two consumer
//! warpgroups (and both, and what three warpgroups take) are `turns.rs`'s;
//! the producer's code is `producer.rs`'s.

use super::plan::WslPlan;
use crate::ir::{BufferId, CacheHint, DType, Expr, Stmt as TStmt, StmtKind, VarId};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::{touches, touches_memory};
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass, Stmt};
use std::cell::{Cell, RefCell};

/// One pipelined copy the producer issues.
#[derive(Clone, Debug)]
pub(super) struct WslCopy {
    /// Index of the copy in the loop body (a pre-loop copy's: in the kernel's).
    pub(super) index: usize,
    /// Its shared destination.
    pub(super) dst: BufferId,
    /// The tensor map parameter.
    pub(super) param: String,
    /// Boxes: (byte offset in the stage, row offset, column offset).
    pub(super) boxes: Vec<(i64, i64, i64)>,
    /// Bytes of all its boxes.
    pub(super) bytes: i64,
    /// Its L2 policy.
    pub(super) cache: CacheHint,
    /// Multicast over the cluster ([`super::WslPlan::multicast`]): each box
    /// is `C` boxes of `rows` rows, the block of rank `r` loading the one
    /// `r·rows` rows in, `r·bytes` bytes on in the stage, into every block
    /// of the cluster. `None`: this block loads whole boxes for itself.
    pub(super) share: Option<Share>,
}

/// One block's share of a multicast copy's boxes (see [`WslCopy::share`]).
#[derive(Copy, Clone, Debug)]
pub(super) struct Share {
    /// Rows of each share.
    pub(super) rows: i64,
    /// Bytes between consecutive shares of a box in the stage.
    pub(super) bytes: i64,
    /// Whether lane 0 of each consumer warp releases the stage for its
    /// warp ([`Lx::wsl_warp_releases`]), rather than every consumer thread.
    pub(super) by_warp: bool,
}

/// The per-piece barriers of one ring (`pieces.rs`, which decides and
/// places them).
#[derive(Clone, Debug)]
pub(super) struct Pieces {
    /// The body's statement that first reads the ring's buffer (the gemm).
    pub(super) gemm: usize,
    /// Byte offset in `smem` of piece 0's barrier of stage 0; box `j`'s of
    /// stage `s` is `8·(S·j + s)` bytes on.
    pub(super) bars: i64,
    /// The boxes (the ring's, in the producer's order).
    pub(super) boxes: usize,
    /// Bytes of each box.
    pub(super) box_bytes: i64,
    /// Per k16 slice of the gemm: the box it reads.
    pub(super) slices: Vec<usize>,
    /// wgmma instructions per k16 slice (side by side, sharing A).
    pub(super) per_slice: usize,
    /// Each box released on its own barrier (`pieces.rs`,
    /// [`crate::CompileOptions::wsloop_piece_releases`]).
    pub(super) releases: Option<PieceReleases>,
}

/// The per-box releases of a pieced ring (`pieces.rs`).
#[derive(Clone, Debug)]
pub(super) struct PieceReleases {
    /// Byte offset in `smem` of box 0's empty barrier of stage 0; box
    /// `j`'s of stage `s` is `8·(S·j + s)` bytes on.
    pub(super) empties: i64,
    /// Per consumer warpgroup, per box: the body's statement (no gemm)
    /// after which that warpgroup releases the box, its last touching it;
    /// `None`: with the ring's release.
    pub(super) early: Vec<Vec<Option<usize>>>,
}

/// The schedule's state while one kernel is lowered.
pub(crate) struct WslLowering {
    pub(crate) plan: WslPlan,
    /// Byte offset of the ring's mbarriers in `smem`: `full[0..S]`, then `empty[0..S]`.
    bars: Cell<i64>,
    pub(super) copies: RefCell<Vec<WslCopy>>,
    /// The copies before the loop the producer issues (`index` into
    /// `kernel.body`), on the barrier after the ring.
    pub(super) pre: RefCell<Vec<WslCopy>>,
    /// Bytes the pre-loop copies deliver.
    pub(super) pre_bytes: Cell<i64>,
    /// While the plain consumers' loop body is lowered, when no gemm is in
    /// flight across its iterations (none issued ahead, none left late)
    /// and the variant is not persistent: a warpgroup's gemm sharing its
    /// accumulator's registers with another warpgroup's fragment waits
    /// after its branch (`ScheduleLowering::owner_gemm_waits_outside`: a
    /// no-op for the other warpgroups, which have nothing in flight then).
    pub(super) owner_waits_outside: Cell<bool>,
    /// Whether a gemm of every consumer leaves its wait for the first later
    /// statement that needs it ([`crate::CompileOptions::wsloop_deferred_waits`]).
    deferred_waits: bool,
    /// Whether the consumers' loop runs as one copy per warpgroup where
    /// its body has statements of one warpgroup
    /// ([`crate::CompileOptions::wsloop_split_warpgroups`]).
    pub(super) split_warpgroups: bool,
    /// Whether a split loop's gemms of one warpgroup wait in its branch
    /// ([`crate::CompileOptions::wsloop_owner_waits`]).
    owner_waits: bool,
    /// Whether the consumers that do not run a ring's first reader wait
    /// for its stage before their own first statement touching it
    /// ([`crate::CompileOptions::wsloop_lazy_waits`]).
    lazy_waits: bool,
    /// Whether the other consumers of a pieced stage that one warpgroup's
    /// gemm reads first skip their waits where barriers order it for them
    /// ([`crate::CompileOptions::wsloop_ordered_observers`], `observers.rs`).
    ordered_observers: bool,
    /// Whether a row-guarded rescale of a pending gemm's accumulator waits
    /// only where the warpgroup takes it, and a later gemm into the same
    /// accumulator issues behind the pending one
    /// ([`crate::CompileOptions::wsloop_guarded_waits`]).
    pub(super) guarded_waits: bool,
    /// Whether to ping-pong two consumer warpgroups
    /// ([`crate::CompileOptions::ping_pong`]), where the loop allows it.
    ping_pong: bool,
    /// Whether to issue the loop's first gemm one iteration ahead
    /// ([`crate::CompileOptions::lookahead`]), where the loop allows it.
    pub(super) lookahead: bool,
    /// Whether to do both with two consumer warpgroups
    /// ([`crate::CompileOptions::ping_pong_lookahead`]).
    pub(super) both: bool,
    /// Whether to issue the body's last gemm in the next iteration, after
    /// its first ([`crate::CompileOptions::defer_last_gemm`], `defer.rs`),
    /// where the loop allows it; preferred to issuing ahead.
    pub(super) defer_last_gemm: bool,
    /// Whether to run the deferred gemm's rescale nest with it
    /// ([`crate::CompileOptions::hoist_rescale`], `defer.rs`).
    pub(super) hoist_rescale: bool,
    /// Whether to give a ring's boxes their own barriers
    /// ([`crate::CompileOptions::piece_barriers`], `pieces.rs`), where the
    /// loop allows it.
    pub(super) piece_barriers: bool,
    /// Whether to leave the body's last gemm in flight across the
    /// back-edge ([`crate::CompileOptions::late_last_wait`]), where the
    /// loop allows it.
    late_last_wait: bool,
    /// Whether to issue the body's opening chain of one warpgroup's gemms
    /// at the end of the previous iteration
    /// ([`crate::CompileOptions::wsloop_rotate_scores`], `rotate.rs`).
    pub(super) rotate_scores: bool,
    /// Whether a pieced ring's boxes are released one by one, each by each
    /// warpgroup after its last statement touching it
    /// ([`crate::CompileOptions::wsloop_piece_releases`], `pieces.rs`).
    pub(super) piece_releases: bool,
    /// Whether the producer prefetches each ring's next boxes into L2
    /// ([`crate::CompileOptions::wsloop_l2_prefetch`], `producer.rs`).
    pub(super) l2_prefetch: bool,
    /// Per ring, its per-piece barriers (`pieces.rs`), decided with the
    /// barriers' placement.
    pub(super) pieces: RefCell<Vec<Option<Pieces>>>,
    /// The persistent variant (`persistent.rs`): the consumers' tile
    /// counter while they lower a tile (its low bit is the pre-loop
    /// barrier's parity).
    pub(super) tile: Cell<Option<Reg>>,
    /// The persistent variant: the consumers' ring stage and phase,
    /// carried across tiles (else each loop starts its own at 0).
    pub(super) ring_regs: Cell<Option<(Reg, Reg)>>,
}

impl WslLowering {
    pub(super) fn new(plan: WslPlan, options: &crate::CompileOptions) -> WslLowering {
        WslLowering {
            plan,
            bars: Cell::new(0),
            copies: RefCell::new(Vec::new()),
            pre: RefCell::new(Vec::new()),
            pre_bytes: Cell::new(0),
            owner_waits_outside: Cell::new(false),
            deferred_waits: options.wsloop_deferred_waits,
            split_warpgroups: options.wsloop_split_warpgroups,
            // The rotation and per-box releases were built and checked
            // with the owner's waits in the other consumers' `else` (the
            // simulator finds a shared-memory race with both on: session 37).
            owner_waits: options.wsloop_owner_waits && !options.wsloop_rotate_scores && !options.wsloop_piece_releases,
            lazy_waits: options.wsloop_lazy_waits,
            ordered_observers: options.wsloop_ordered_observers,
            guarded_waits: options.wsloop_guarded_waits,
            ping_pong: options.ping_pong,
            lookahead: options.lookahead,
            both: options.ping_pong_lookahead,
            defer_last_gemm: options.defer_last_gemm,
            hoist_rescale: options.hoist_rescale,
            piece_barriers: options.piece_barriers,
            late_last_wait: options.late_last_wait,
            rotate_scores: options.wsloop_rotate_scores,
            piece_releases: options.wsloop_piece_releases,
            l2_prefetch: options.wsloop_l2_prefetch,
            pieces: RefCell::new(Vec::new()),
            tile: Cell::new(None),
            ring_regs: Cell::new(None),
        }
    }

    /// Whether the loop's two consumer warpgroups are to ping-pong (where
    /// the loop allows it).
    pub(super) fn wants_ping_pong(&self) -> bool {
        self.ping_pong && self.plan.consumer_threads == 256
    }

    /// `full[0]` of ring `c` (`empty[0]` is `8·S` bytes on).
    pub(super) fn ring(&self, c: usize) -> i64 {
        self.bars.get() + 16 * self.plan.stages as i64 * c as i64
    }

    /// The pre-loop copies' barrier, after the rings.
    pub(super) fn pre_bar(&self) -> i64 {
        self.ring(self.copies.borrow().len().max(1))
    }

    /// The persistent variant's barrier the consumers release the pre-loop
    /// copies' buffers on (`T` arrivals), after [`WslLowering::pre_bar`].
    pub(super) fn pre_empty_bar(&self) -> i64 {
        self.pre_bar() + 8
    }

    /// The persistent variant's shared word the producer hands the next
    /// tile's index over in (−1: no more tiles), after
    /// [`WslLowering::pre_empty_bar`]; written after `pre_empty`'s wait,
    /// published by the arrival on `pre`.
    pub(super) fn tile_slot(&self) -> i64 {
        self.pre_bar() + 16
    }

    /// Whether the producer issues copies before its loop.
    pub(super) fn has_pre_copies(&self) -> bool {
        !self.pre.borrow().is_empty()
    }

    /// The shared buffers the producer's pre-loop copies fill.
    pub(super) fn pre_buffers(&self) -> Vec<BufferId> {
        self.pre.borrow().iter().map(|c| c.dst).collect()
    }

    /// Whether `buf` is the destination of a pre-loop copy the producer
    /// issues.
    pub(super) fn issues_before_loop(&self, buf: BufferId) -> bool {
        self.pre.borrow().iter().any(|c| c.dst == buf)
    }
}

impl Lx<'_> {
    /// Declares a tensor map per pipelined copy (its boxes from the shared
    /// layout, as the TMA-copy schedule decides them: `Lx::tma_copy_of`)
    /// and the launch shape: `T + 128` threads, named consumer barriers, a
    /// register cap for `setmaxnreg`.
    pub(super) fn wsl_setup(&mut self, wl: &WslLowering) {
        let ws = &wl.plan;
        let StmtKind::For { body, .. } = &self.k.body[ws.loop_index].kind else {
            self.errors.push(self.err("internal: the warp-specialized loop is not a loop"));
            return;
        };
        if ws.persistent {
            // The tile counter (`abi::TILE_COUNTER_PARAM`), after the
            // launch ABI's parameters, before the tensor maps.
            self.f.params.push((crate::abi::TILE_COUNTER_PARAM.to_string(), ".u64"));
        }
        for &i in &ws.copies {
            let StmtKind::Copy { src, dst, fill, cache } = &body[i].kind else { continue };
            let Some(tma) = self.tma_copy_of(src, dst, fill.as_ref()) else {
                self.errors.push(crate::CompileError::new(
                    body[i].span,
                    format!(
                        "the pipelined copy into `{}` has a shared layout TMA cannot write (swizzled rows of 32, 64 or 128 bytes, 64-column panels, or dense rows of a multiple of 16 bytes)",
                        self.k.buffer(dst.buf).name
                    ),
                ));
                continue;
            };
            let share = if ws.multicast.contains(&i) { self.wsl_share(src, dst.buf, &tma.1, &tma.3) } else { None };
            let copy = self.wsl_copy(i, src, dst.buf, *cache, tma, share);
            wl.copies.borrow_mut().push(copy);
        }
        // The copies before the loop whose shared layout TMA writes (the
        // others the consumers do themselves).
        let mut pre_bytes = 0;
        for &i in &ws.pre_copies {
            let StmtKind::Copy { src, dst, fill, cache } = &self.k.body[i].kind else { continue };
            let Some(tma) = self.tma_copy_of(src, dst, fill.as_ref()) else {
                continue;
            };
            let copy = self.wsl_copy(i, src, dst.buf, *cache, tma, None);
            pre_bytes += copy.bytes;
            wl.pre.borrow_mut().push(copy);
        }
        wl.pre_bytes.set(pre_bytes);
        self.f.threads = ws.consumer_threads + crate::target::PRODUCER_THREADS;
        self.f.barrier_threads = Some(ws.consumer_threads);
        self.f.persistent = ws.persistent;
        // One block per SM unless `Lx::wsl_occupancy` finds room for two.
        self.f.min_blocks_per_sm = Some(1);
    }

    /// The producer's copy at `index` (of the loop body or, before the
    /// loop, of the kernel's) from `src` into `dst`, with its TMA boxes as
    /// `Lx::tma_copy_of` gives them and its share of a multicast, and the
    /// tensor map parameter it reads through, declared here (its box one
    /// share's rows when multicast).
    fn wsl_copy(
        &mut self,
        index: usize,
        src: &crate::ir::TileRef,
        dst: BufferId,
        cache: CacheHint,
        (tensor, boxes, bytes, mut box_shape, swizzle): crate::schedule::tma_copy::TmaCopyOf,
        share: Option<Share>,
    ) -> WslCopy {
        if let (Some(sh), Some((row_dim, _))) = (share, crate::schedule::tma_copy::tma_window_dims(self.k, src)) {
            box_shape[row_dim] = sh.rows as u32;
        }
        let param = format!("tmap{}", self.f.tensor_maps.len());
        self.f.params.push((param.clone(), crate::thread_ir::TENSOR_MAP_PARAM));
        self.f.tensor_maps.push(crate::abi::TensorMapUse { param: param.clone(), tensor, box_shape, swizzle });
        WslCopy { index, dst, param, boxes, bytes, cache, share }
    }

    /// How the cluster's blocks share the boxes of a multicast copy from
    /// `src` into `buf` (boxes `boxes` of `box_shape`), or `None` (each
    /// block loads whole boxes) unless every box splits into `C` shares of
    /// whole swizzle periods (8 rows of 128-byte rows: TMA swizzles by the
    /// destination address, so a share must start where the pattern does)
    /// that lie `bytes` apart in the stage, the same for every box.
    fn wsl_share(
        &self,
        src: &crate::ir::TileRef,
        buf: BufferId,
        boxes: &[(i64, i64, i64)],
        box_shape: &[u32],
    ) -> Option<Share> {
        let c = self.k.cluster[0] as i64;
        let (row_dim, _) = crate::schedule::tma_copy::tma_window_dims(self.k, src)?;
        let l = self.shared_layout(buf).ok()?;
        let box_rows = *box_shape.get(row_dim)? as i64;
        let rows = box_rows / c;
        let period = l.row_period().max(8);
        if c < 2 || box_rows % c != 0 || rows % period != 0 {
            return None;
        }
        let bytes = l.offset(rows, 0) - l.offset(0, 0);
        let atom = 1024;
        let linear = boxes.iter().all(|&(off, r0, c0)| (0..c).all(|i| l.offset(r0 + i * rows, c0) == off + i * bytes));
        (linear && bytes % atom == 0).then_some(Share { rows, bytes, by_warp: false })
    }

    /// Whether the stage of ring `ci` may be released by lane 0 of each
    /// consumer warp for the whole warp: every statement of the loop body
    /// that reads its buffer is a gemm on wgmma (others may only write it,
    /// as MLA's zeroing of V's rows past the sequence does: those writes are
    /// fenced and barriered before the gemm that reads them) and the last
    /// statement touching it is such a gemm, so the release comes after
    /// that gemm's `wgmma.wait_group`, which every lane of the warp passes
    /// together (`.sync.aligned`) once the stage's reads are done. One
    /// remote arrival a warp and block instead of 32 (measured on the H100:
    /// MLA's pair of row blocks ran at 0.64× the unclustered kernel with an
    /// arrival per thread).
    fn wsl_warp_releases(&self, wl: &WslLowering, ci: usize) -> bool {
        let StmtKind::For { body, .. } = &self.k.body[wl.plan.loop_index].kind else { return false };
        let users = self.wsl_ring_users(wl, body);
        let Some(users) = users.get(ci) else { return false };
        let dst = wl.copies.borrow()[ci].dst;
        let on_wgmma = |i: usize| self.wsl_on_wgmma(&body[i]);
        let reads_only_by_wgmma = users.iter().all(|&i| on_wgmma(i) || !touches_memory(self.k, &body[i], dst).0);
        reads_only_by_wgmma && users.last().is_some_and(|&i| on_wgmma(i))
    }

    /// Whether `s` is a gemm on wgmma.
    pub(super) fn wsl_on_wgmma(&self, s: &TStmt) -> bool {
        match &s.kind {
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy).is_some()
            }
            _ => false,
        }
    }

    /// Whether some ring is multicast over the cluster.
    pub(super) fn wsl_multicasts(&self, wl: &WslLowering) -> bool {
        wl.copies.borrow().iter().any(|c| c.share.is_some())
    }

    /// Ring `ci`'s release of `stage`: one arrival on its `empty` barrier,
    /// or, when the ring is multicast, one on that barrier of every block
    /// of the cluster (`mapa` + a remote arrive at CTA scope, as the
    /// warp-specialized GEMM's): each block's producer writes the stage of
    /// all of them, so it may refill it only once every consumer of the
    /// cluster is done with it.
    pub(super) fn wsl_arrive_empty(&mut self, wl: &WslLowering, ci: usize, stage: Reg) {
        let empty = self.ring_bar_addr(wl.ring(ci), wl.plan.stages as i64, stage, 1);
        self.wsl_arrive_at(wl, ci, empty);
    }

    /// [`Lx::wsl_arrive_empty`] on the barrier at `empty` (ring `ci`'s
    /// `empty` of the stage, computed by the caller).
    pub(super) fn wsl_arrive_at(&mut self, wl: &WslLowering, ci: usize, empty: Address) {
        if wl.copies.borrow()[ci].share.is_none() {
            self.emit(Inst::MbarArrive { addr: empty });
            return;
        }
        let by_warp = wl.copies.borrow()[ci].share.is_some_and(|sh| sh.by_warp);
        let guard = by_warp.then(|| {
            let lane = self.op("and.b32", RegClass::B32, vec![self.tid.into(), Operand::Imm(31)]);
            (self.op("setp.eq.u32", RegClass::Pred, vec![lane.into(), Operand::Imm(0)]), false)
        });
        let at = self.op("add.s32", RegClass::B32, vec![empty.base.clone(), Operand::Imm(empty.offset)]);
        for rank in 0..wl.plan.cluster as i64 {
            let remote = self.op("mapa.shared::cluster.u32", RegClass::B32, vec![at.into(), Operand::Imm(rank)]);
            self.emit_guarded(Inst::MbarArriveCluster { addr: remote.into() }, guard);
        }
    }

    /// The producer's last waits, when a ring is multicast: one more round
    /// of the rings, until every stage's last fill has been released by
    /// every consumer of the cluster. Those releases include the other
    /// blocks' arrivals on this block's barriers, which must not reach a
    /// block that has exited.
    pub(super) fn wsl_producer_tail(&mut self, wl: &WslLowering, (stage, phase): (Reg, Reg)) -> R<()> {
        if !self.wsl_multicasts(wl) {
            return Ok(());
        }
        let stages = wl.plan.stages as i64;
        let rings: Vec<usize> =
            wl.copies.borrow().iter().enumerate().filter(|(_, c)| c.share.is_some()).map(|(i, _)| i).collect();
        let kr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        let lowered = self.capture(|x| {
            let parity = x.op("xor.b32", RegClass::B32, vec![phase.into(), Operand::Imm(1)]);
            for &ci in &rings {
                let empty = x.ring_bar_addr(wl.ring(ci), stages, stage, 1);
                let p = x.new_reg(RegClass::Pred);
                x.emit(Inst::MbarWait { addr: empty, parity: parity.into(), pred: p });
            }
            x.ring_advance(stages, stage, phase);
            Ok(())
        })?;
        self.cur().push(Stmt::For {
            var: kr,
            start: Operand::Imm(0),
            end: Operand::Imm(stages),
            exit,
            uniform: false,
            body: lowered,
        });
        Ok(())
    }

    /// The rings' mbarriers (one ring per pipelined copy), after the
    /// buffers, then the pre-loop copies'.
    pub(super) fn wsl_barriers(&mut self, wl: &WslLowering) {
        let rings = wl.copies.borrow().len().max(1) as i64;
        // The persistent variant: `pre_empty` and the tile slot.
        let pre_empty = if wl.plan.persistent { 16 } else { 0 };
        let bars = self.alloc_smem(16 * wl.plan.stages as i64 * rings + 8 + pre_empty);
        wl.bars.set(bars);
        // The per-piece barriers, in a region of their own after those (so
        // that a kernel without them keeps its layout).
        let mut pieces = self.wsl_piece_plan(wl);
        let total: usize = pieces.iter().flatten().map(|p| p.boxes).sum();
        if total > 0 {
            let mut at = self.alloc_smem(8 * wl.plan.stages as i64 * total as i64);
            for p in pieces.iter_mut().flatten() {
                p.bars = at;
                at += 8 * wl.plan.stages as i64 * p.boxes as i64;
            }
        }
        // Their empty barriers where each box is released on its own.
        let released: usize = pieces.iter().flatten().filter(|p| p.releases.is_some()).map(|p| p.boxes).sum();
        if released > 0 {
            let mut at = self.alloc_smem(8 * wl.plan.stages as i64 * released as i64);
            for p in pieces.iter_mut().flatten() {
                if let Some(r) = p.releases.as_mut() {
                    r.empties = at;
                    at += 8 * wl.plan.stages as i64 * p.boxes as i64;
                }
            }
        }
        *wl.pieces.borrow_mut() = pieces;
        let n = wl.copies.borrow().len();
        for ci in 0..n {
            let by_warp = self.wsl_warp_releases(wl, ci);
            if let Some(sh) = wl.copies.borrow_mut()[ci].share.as_mut() {
                sh.by_warp = by_warp;
            }
        }
    }

    /// The consumers' side of a pre-loop copy the producer issues: the wait
    /// for its barrier (its only phase), in the copy's place. `None`: not
    /// such a copy.
    pub(super) fn wsl_pre_copy_wait(&mut self, wl: &WslLowering, s: &TStmt) -> Option<R<()>> {
        let k = self.k;
        if !wl.pre.borrow().iter().any(|c| std::ptr::eq(s, &k.body[c.index])) {
            return None;
        }
        if wl.tile.get().is_some() {
            // The persistent variant: the consumers waited for this phase
            // of `pre` when they took the tile (`persistent.rs`).
            return Some(Ok(()));
        }
        let bar = wl.pre_bar();
        let smem = self.smem;
        // Its only phase.
        let parity = Operand::Imm(0);
        let p = self.new_reg(RegClass::Pred);
        self.emit(Inst::MbarWait { addr: Address { base: smem.into(), offset: bar }, parity, pred: p });
        Some(Ok(()))
    }

    /// The whole body: barrier init, the split, then the consumers' code
    /// (the loop through [`Lx::lower_wsl_consumer_loop`]).
    pub(super) fn lower_wsl_body(&mut self, wl: &WslLowering, body: &[TStmt]) -> R<()> {
        let ws = &wl.plan;
        let (t, stages) = (ws.consumer_threads as i64, ws.stages as i64);
        let rings = wl.copies.borrow().len().max(1);
        // A multicast ring's stage is released by every consumer (or every
        // consumer warp) of the cluster.
        let releases: Vec<i64> = (0..rings)
            .map(|c| match wl.copies.borrow().get(c).and_then(|cp| cp.share) {
                Some(sh) if sh.by_warp => t / 32 * ws.cluster as i64,
                Some(_) => t * ws.cluster as i64,
                None => t,
            })
            .collect();
        let init = self.capture(|x| {
            let smem = x.smem;
            for (c, &released) in releases.iter().enumerate() {
                let bars = wl.ring(c);
                for s in 0..stages {
                    x.emit(Inst::MbarInit {
                        addr: Address { base: smem.into(), offset: bars + 8 * s },
                        count: Operand::Imm(1),
                    });
                    x.emit(Inst::MbarInit {
                        addr: Address { base: smem.into(), offset: bars + 8 * (stages + s) },
                        count: Operand::Imm(released),
                    });
                }
            }
            for (c, p) in wl.pieces.borrow().iter().enumerate() {
                let Some(p) = p else { continue };
                for at in (0..stages * p.boxes as i64).map(|i| p.bars + 8 * i) {
                    x.emit(Inst::MbarInit { addr: Address { base: smem.into(), offset: at }, count: Operand::Imm(1) });
                }
                if let Some(r) = &p.releases {
                    for at in (0..stages * p.boxes as i64).map(|i| r.empties + 8 * i) {
                        let count = Operand::Imm(releases[c]);
                        x.emit(Inst::MbarInit { addr: Address { base: smem.into(), offset: at }, count });
                    }
                }
            }
            if !wl.pre.borrow().is_empty() || ws.persistent {
                let at = Address { base: smem.into(), offset: wl.pre_bar() };
                x.emit(Inst::MbarInit { addr: at, count: Operand::Imm(1) });
                if ws.persistent {
                    let at = Address { base: smem.into(), offset: wl.pre_empty_bar() };
                    x.emit(Inst::MbarInit { addr: at, count: Operand::Imm(t) });
                }
            }
            x.emit(Inst::FenceMbarrierInit);
            Ok(())
        })?;
        let t0 = self.is_t0;
        self.emit_if(Some(t0), false, init, vec![]);
        self.emit(Inst::NamedBarSync { id: 0, threads: (t + crate::target::PRODUCER_THREADS as i64) as u32 });
        if self.wsl_multicasts(wl) {
            // The other blocks' multicasts and releases reach this block's
            // barriers only once every block of the cluster has initialized
            // its own.
            self.emit(Inst::ClusterArrive);
            self.emit(Inst::ClusterWait);
        }
        let consumer_regs = self.wsl_occupancy(wl);
        // The producer warpgroup: its registers go to the consumers; one
        // thread issues, the others leave.
        let tid = self.tid;
        let is_producer = self.op("setp.ge.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(t)]);
        let producer = self.capture(|x| {
            x.emit(Inst::SetMaxNreg { inc: false, count: ws.producer_regs });
            let leader = x.op("setp.eq.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(t)]);
            let code = x.capture(|y| y.wsl_producer(wl))?;
            x.emit_if(Some(leader), false, code, vec![]);
            x.emit(Inst::Exit);
            Ok(())
        })?;
        self.cur().push(Stmt::If {
            cond: is_producer,
            negate: false,
            uniform: false,
            then: producer,
            otherwise: vec![],
        });
        self.emit(Inst::SetMaxNreg { inc: true, count: consumer_regs });
        if ws.persistent {
            return self.lower_wsl_consumer_tiles(wl, body);
        }
        self.lower_block(body);
        Ok(())
    }

    /// Blocks per SM (the launch bound `.minnctapersm`) and the consumers'
    /// registers after `setmaxnreg.inc`: two blocks when the consumers are
    /// one warpgroup whose fragments (estimated: their registers, 16-bit
    /// ones at half, plus 32) fit in 160 and two blocks' shared memory fits
    /// in the SM: four consumer warps alone per SM leave the SM idle while
    /// they wait (the TMA-copy variant runs three or four blocks of them);
    /// else one, with the plan's split. Two blocks share the file: each
    /// gets `(entry·(T + 128) - 128·producer) / T` registers per consumer thread
    /// (`TargetInfo::consumer_regs_after`: the block's own pool, entry = per_sm / 2 / (T + 128))
    /// (232 for `T = 128`; ptxas then allocates at most 128 per thread at
    /// entry, which such fragments fit).
    fn wsl_occupancy(&mut self, wl: &WslLowering) -> u32 {
        let ws = &wl.plan;
        let info = self.target.info();
        let est = self.fragment_regs() + 32;
        let two = ws.consumer_threads == 128 && est <= 160 && 2 * self.smem_top <= info.shared_limit as i64;
        let blocks: u32 = if two { 2 } else { 1 };
        self.f.min_blocks_per_sm = Some(blocks);
        if blocks == 1 {
            return ws.consumer_regs;
        }
        info.consumer_regs_after(ws.producer_regs, ws.consumer_threads, blocks)
            .map_or(ws.consumer_regs, |r| r.min(ws.consumer_regs))
    }

    /// The fragments' registers per thread, 16-bit ones at half (two to a
    /// 32-bit register).
    pub(super) fn fragment_regs(&self) -> usize {
        self.frags
            .values()
            .map(|regs| {
                regs.iter().map(|r| if self.f.regs[r.0 as usize] == RegClass::B16 { 1 } else { 2 }).sum::<usize>()
            })
            .sum::<usize>()
            / 2
    }

    /// The consumers' loop (see the module doc).
    pub(super) fn lower_wsl_consumer_loop(
        &mut self,
        wl: &WslLowering,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[TStmt],
    ) -> R<()> {
        let ws = &wl.plan;
        let stages = ws.stages as i64;
        let (a, b) = self.loop_bounds(start, end)?;
        // Ring c's stage is waited for right before the first statement
        // that touches its buffer and released right after the last one
        // (at the top and the end when none does).
        let copies = wl.copies.borrow().clone();
        let users = self.wsl_ring_users(wl, body);
        let pieces = wl.pieces.borrow().clone();
        if let Some(d) = self.wsl_deferred_gemms(wl, body, &users) {
            return self.lower_wsl_deferred_loop(wl, var, (a, b), body, d);
        }
        let first = |ci: usize| users[ci].first().copied();
        let last = |ci: usize| users[ci].last().copied();
        let fenced: Vec<bool> =
            (0..copies.len()).map(|ci| self.wsl_release_fence(wl, body, &users[ci], copies[ci].dst)).collect();
        let (stage, phase) = self.wsl_consumer_ring(wl);
        let vr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        // The first gemm one iteration ahead (see the module doc): its
        // statement, its ring, its accumulator's registers and their twins.
        let mut look = None;
        if let Some((gi, kc)) = self.wsl_lookahead_gemm(wl, body, &users) {
            let StmtKind::Gemm { c, .. } = &body[gi].kind else {
                return Err(self.err("internal: the statement issued ahead is not a gemm"));
            };
            let regs = self.frags.get(c).cloned().unwrap_or_default();
            // The gemm of iteration `a`, before the loop, waited for.
            let ran = self.op("setp.lt.s32", RegClass::Pred, vec![a.into(), b.into()]);
            let saved_var = self.vars.insert(var, a);
            let first_gemm = self.capture(|x| {
                x.wsl_full_wait(wl, kc, stages, (stage, phase));
                let st = x.select_stage(copies[kc].dst, &Operand::Reg(stage));
                let r = x.stmt(&body[gi]);
                x.restore_stage(st);
                r
            });
            match saved_var {
                Some(r) => self.vars.insert(var, r),
                None => self.vars.remove(&var),
            };
            let first_gemm = first_gemm?;
            // On wgmma only (an mma.sync gemm is synchronous: nothing to
            // overlap); else the loop is lowered as it is.
            if insts_of(&first_gemm).iter().any(|i| matches!(i, Inst::Wgmma { .. })) {
                self.emit_if(Some(ran), true, first_gemm, vec![]);
                let twins: Vec<Reg> = regs.iter().map(|r| self.f.new_reg(self.f.regs[r.0 as usize])).collect();
                look = Some((gi, kc, *c, regs, twins));
            }
        }
        let chained = self.wsl_chained_gemms(wl, body, look.as_ref().map(|l| l.0));
        let late = if look.is_none() { self.wsl_late_wait(wl, body, &users, &chained) } else { None };
        // One warpgroup's opening chain issued at the end of the previous
        // iteration (`rotate.rs`).
        let rot = if look.is_none() && late.is_none() { self.wsl_rotation(wl, body, &users) } else { None };
        // Two consumer warpgroups whose loop is split per warpgroup: a
        // gemm of one warpgroup waits in its branch (each copy of the loop
        // is one warpgroup's path: nothing for ptxas to serialize), and may
        // leave its wait for later as a gemm of every consumer does.
        let owner_local = wl.split_warpgroups && wl.owner_waits && self.k.threads == 256;
        wl.owner_waits_outside.set(!owner_local && !wl.plan.persistent && look.is_none() && late.is_none());
        let saved_var = self.vars.insert(var, vr);
        self.loop_depth += 1;
        // Where the next iteration's gemm is issued (an `if` at the top
        // level of the loop body), when it is issued ahead.
        let mut ahead_at = None;
        // A ring whose every user runs on one warpgroup alone (MLA's K_pe,
        // read by warpgroup 0's scores only): that warpgroup waits for its
        // stage in its branch (every consumer still releases it). The
        // others wait too, in the branch's `else`, when the ring is
        // multicast: a release counts towards the round of every block's
        // `empty` barrier, and only a wait for this round's bytes, which
        // come from every block's producer, each of which waited for the
        // previous round's releases, orders it after all of those (a
        // warpgroup releasing unwaited could run ahead of a lagging peer
        // block and complete the previous round's phase for it, and a
        // producer would then overwrite a stage the peer still reads). In
        // the `else`, not between the owner's branches, so that the merge
        // pass joins the owner's gemms and waits into one branch (a wait of
        // every thread between two chained gemms of one warpgroup made
        // ptxas serialize the kernel's wgmmas, C7514).
        let mut ring_owner: Vec<Option<(u32, bool)>> = Vec::with_capacity(users.len());
        for (ci, u) in users.iter().enumerate() {
            let mut owners = Vec::with_capacity(u.len());
            for &i in u {
                owners.push(self.owner_of(&body[i])?);
            }
            let w = owners.first().copied().flatten();
            let multicast = copies.get(ci).is_some_and(|c| c.share.is_some());
            ring_owner.push(w.filter(|_| owners.iter().all(|&o| o == w)).map(|w| (w, multicast)));
        }
        // The rings whose other consumers skip their waits (`observers.rs`),
        // with the warpgroup that waits: `Function::observed_rings`.
        let mut observed: Vec<(u32, BufferId)> = Vec::new();
        let lowered = self.capture(|x| {
            let wait = |x: &mut Self, ci: usize| {
                if pieces.get(ci).is_some_and(|p| p.is_some()) {
                    // Its first reader waits for each piece (`pieces.rs`).
                    return;
                }
                let code = x.capture(|y| {
                    y.wsl_full_wait(wl, ci, stages, (stage, phase));
                    Ok(())
                });
                match (code, ring_owner[ci]) {
                    (Ok(code), Some((w, others_wait))) => {
                        let cond = x.warpgroup_pred(w);
                        let otherwise = if others_wait { code.clone() } else { vec![] };
                        x.cur().push(Stmt::If { cond, negate: false, uniform: false, then: code, otherwise });
                    }
                    (Ok(code), None) => x.cur().extend(code),
                    (Err(e), _) => x.errors.push(e),
                }
            };
            let release = |x: &mut Self, ci: usize| x.wsl_release(wl, ci, stage, fenced[ci]);
            // The previous iteration's last gemm, left in flight: waited
            // for with this iteration's first (its chain's wait, or this
            // one), then its rings' stages released (none in the first
            // iteration).
            let retire_late = |x: &mut Self, late: &LateWait| -> R<()> {
                x.emit(Inst::WgmmaWait { pending: 0 });
                let not_first = x.op("setp.gt.s32", RegClass::Pred, vec![vr.into(), a.into()]);
                let code = x.wsl_release_previous(wl, &late.rings, stage, &fenced)?;
                x.emit_if(Some(not_first), true, code, vec![]);
                Ok(())
            };
            for ci in (0..copies.len()).filter(|&ci| first(ci).is_none()) {
                wait(x, ci);
            }
            let mut rotated = false;
            let mut rotated_rest = Vec::new();
            let mut saved = Vec::new();
            for &i in &ws.copies {
                if let StmtKind::Copy { dst, .. } = &body[i].kind {
                    saved.push(x.select_stage(dst.buf, &Operand::Reg(stage)));
                }
            }
            let mut more = None;
            // Rings whose last user is a chained gemm, released after the
            // chain's last gemm (whose wait retires the whole chain).
            let mut after_chain: Vec<usize> = Vec::new();
            if let Some((gi, kc, c, _, twins)) = &look {
                // This iteration's gemm was issued (and waited for) by the
                // previous one, or before the loop: its stage is free.
                release(x, *kc);
                // The next iteration's, into the twins, left in flight.
                let k1 = x.op("add.s32", RegClass::B32, vec![vr.into(), Operand::Imm(1)]);
                let m = x.op("setp.lt.s32", RegClass::Pred, vec![k1.into(), b.into()]);
                more = Some(m);
                let next = x.op("add.s32", RegClass::B32, vec![stage.into(), Operand::Imm(1)]);
                let wrap = x.op("setp.eq.s32", RegClass::Pred, vec![next.into(), Operand::Imm(stages)]);
                let st1 = x.op("selp.b32", RegClass::B32, vec![Operand::Imm(0), next.into(), wrap.into()]);
                let flip = x.op("selp.b32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), wrap.into()]);
                let ph1 = x.op("xor.b32", RegClass::B32, vec![phase.into(), flip.into()]);
                let ahead = x.capture(|y| {
                    y.wsl_full_wait(wl, *kc, stages, (st1, ph1));
                    let st = y.select_stage(copies[*kc].dst, &Operand::Reg(st1));
                    let saved_k = y.vars.insert(var, k1);
                    let own = y.frags.insert(*c, twins.clone());
                    let r = y.stmt(&body[*gi]);
                    if let Some(own) = own {
                        y.frags.insert(*c, own);
                    }
                    if let Some(kr) = saved_k {
                        y.vars.insert(var, kr);
                    }
                    y.restore_stage(st);
                    r
                })?;
                x.emit_if(Some(m), true, without_final_wait(ahead), vec![]);
                ahead_at = Some(x.cur().len() - 1);
            }
            // Gemms whose wait is left for the first later statement that
            // needs it (`wsl_deferrable`), with the rings each is the last
            // reader of, released then, and the warpgroup that runs it alone
            // (which waits in its branch).
            let mut pending: Vec<Pending> = Vec::new();
            // The chained gemms issued since the last chain's end, unwaited.
            let mut open_chain: Vec<usize> = Vec::new();
            let retire = |x: &mut Self, pending: Vec<Pending>| {
                for p in pending {
                    match p.owner {
                        Some(w) => {
                            let cond = x.warpgroup_pred(w);
                            let then = vec![Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None }];
                            x.emit_if(Some(cond), false, then, vec![]);
                        }
                        None => x.emit(Inst::WgmmaWait { pending: 0 }),
                    }
                    for ci in p.rings {
                        release(x, ci);
                    }
                }
            };
            // Rings whose other consumers wait for the stage (or its pieces)
            // only before their first statement touching it (none: they
            // never wait), and the warpgroup whose statement waits first.
            let mut lazy: Vec<(usize, u32)> = Vec::new();
            let last_stmt = (0..body.len()).rev().find(|i| !ws.copies.contains(i));
            for (i, s) in body.iter().enumerate() {
                if ws.copies.contains(&i) || look.as_ref().is_some_and(|l| l.0 == i) {
                    continue;
                }
                let at = x.cur().len();
                let due = x.wsl_due(wl, body, &mut pending, s, owner_local)?;
                // A plain gemm's place: its own wait after its issue.
                let plain = pieces.iter().flatten().all(|p| p.gemm != i)
                    && late.as_ref().is_none_or(|l| l.last != i && l.after != i)
                    && !chained.contains(&i)
                    && after_chain.is_empty();
                let guarded = if wl.guarded_waits { x.wsl_guarded(body, &due, s, plain)? } else { Guarded::No };
                // Pending gemms the gemm `s` issues behind (retired after its issue).
                let mut behind = Vec::new();
                match guarded {
                    Guarded::No => retire(x, due),
                    Guarded::Vote => {
                        pending.extend(due);
                        pending.sort_by_key(|p| p.gemm);
                        x.vote_wait = true;
                    }
                    Guarded::Behind => behind = due,
                }
                let owner = x.owner_of(s)?;
                for ci in (0..copies.len()).filter(|&ci| first(ci) == Some(i)) {
                    // A ring first read by one warpgroup's statement, read
                    // later by the others too: that warpgroup waits for
                    // its stage now, the others before their first
                    // statement touching it (lazy waits), or not at all
                    // where barriers order the stage for them
                    // (`observers.rs`); not multicast: see above.
                    let lazily = owner_local && wl.lazy_waits;
                    match owner {
                        Some(w)
                            if ring_owner[ci].is_none()
                                && pieces[ci].is_none()
                                && copies[ci].share.is_none()
                                && (lazily
                                    || (wl.ordered_observers
                                        && x.wsl_observers_ordered(body, &ws.copies, i, w, copies[ci].dst)?)) =>
                        {
                            let code = x.capture(|y| {
                                y.wsl_full_wait(wl, ci, stages, (stage, phase));
                                Ok(())
                            })?;
                            let cond = x.warpgroup_pred(w);
                            x.emit_if(Some(cond), false, code, vec![]);
                            if lazily {
                                lazy.push((ci, w));
                            } else {
                                observed.push((w, copies[ci].dst));
                            }
                        }
                        _ => wait(x, ci),
                    }
                }
                let mut j = 0;
                while j < lazy.len() {
                    let (ci, w) = lazy[j];
                    let touches = touches_memory(x.k, s, copies[ci].dst);
                    if (touches.0 || touches.1) && owner != Some(w) {
                        lazy.remove(j);
                        let waits = x.capture(|y| {
                            match &pieces[ci] {
                                Some(p) => {
                                    for b in 0..p.boxes {
                                        y.wsl_piece_wait(p, stages, (stage, phase), b);
                                    }
                                }
                                None => y.wsl_full_wait(wl, ci, stages, (stage, phase)),
                            }
                            Ok(())
                        })?;
                        let cond = x.warpgroup_pred(w);
                        x.emit_if(Some(cond), false, vec![], waits);
                    } else {
                        j += 1;
                    }
                }
                let pieced = pieces.iter().flatten().find(|p| p.gemm == i).cloned();
                let left_in_flight = late.as_ref().is_some_and(|l| l.last == i);
                // (Not a chain's last gemm: the chain's rings are released
                // after its wait; nor where the late gemm is retired.)
                let deferred = wl.deferred_waits
                    && !left_in_flight
                    && pieced.is_none()
                    && !chained.contains(&i)
                    && after_chain.is_empty()
                    && late.as_ref().is_none_or(|l| l.after != i)
                    && Some(i) != last_stmt
                    && behind.is_empty()
                    && x.wsl_deferrable(s, owner_local)?;
                if deferred {
                    match x.capture(|y| y.stmt(s)) {
                        Ok(code) => x.cur().extend(without_final_wait(code)),
                        Err(e) => x.errors.push(e),
                    }
                    let rings = (0..copies.len()).filter(|&ci| last(ci) == Some(i)).collect();
                    let chain = std::mem::take(&mut open_chain);
                    pending.push(Pending { gemm: i, chain, rings, owner });
                    continue;
                }
                if left_in_flight {
                    // Waited for in the next iteration, or after the loop.
                    match x.capture(|y| y.stmt(s)) {
                        Ok(code) => x.cur().extend(without_final_wait(code)),
                        Err(e) => x.errors.push(e),
                    }
                } else if chained.contains(&i) || pieced.is_some() {
                    // Pieced: each box waited for before its first slice
                    // (with `lazy_waits`, by the other consumers of a ring
                    // of one warpgroup's gemm where they first touch the
                    // stage; not multicast: see `wait`'s comment).
                    // Chained, left in flight: the next gemm accumulates
                    // into the same registers, and its wait retires both
                    // groups.
                    let lazy_ring = pieced.as_ref().and_then(|p| {
                        (0..copies.len()).find(|&ci| {
                            pieces[ci].as_ref().is_some_and(|q| q.gemm == p.gemm) && copies[ci].share.is_none()
                        })
                    });
                    let lazily = owner_local && wl.lazy_waits && owner.is_some() && lazy_ring.is_some();
                    if let (true, Some(ci), Some(w)) = (lazily, lazy_ring, owner) {
                        lazy.push((ci, w));
                    }
                    // The other consumers skip their waits where barriers
                    // order the stage for them (`observers.rs`).
                    let ordered = match (&pieced, lazy_ring, owner) {
                        (Some(_), Some(ci), Some(w)) if !lazily && wl.ordered_observers => {
                            x.wsl_observers_ordered(body, &ws.copies, i, w, copies[ci].dst)?
                        }
                        _ => false,
                    };
                    if let (true, Some(ci), Some(w)) = (ordered, lazy_ring, owner) {
                        observed.push((w, copies[ci].dst));
                    }
                    let code = x.capture(|y| y.stmt(s)).and_then(|code| match &pieced {
                        Some(p) => x.wsl_piece_waits(p, stages, (stage, phase), code, !lazily && !ordered, None),
                        None => Ok(code),
                    });
                    match code {
                        Ok(code) if chained.contains(&i) => x.cur().extend(without_final_wait(code)),
                        Ok(code) => x.cur().extend(code),
                        Err(e) => x.errors.push(e),
                    }
                } else if !behind.is_empty() {
                    // Issued behind the pending gemms into its accumulator
                    // (ordered after them), which are then retired but for
                    // its own groups, and their rings released.
                    match x.capture(|y| y.stmt(s)) {
                        Ok(code) => {
                            // (Every consumer's gemm: no warpgroup branches.)
                            let commits = insts_of(&code).iter().filter(|i| matches!(i, Inst::WgmmaCommit)).count();
                            x.cur().extend(without_final_wait(code));
                            x.emit(Inst::WgmmaWait { pending: commits as u32 });
                            for p in std::mem::take(&mut behind) {
                                for ci in p.rings {
                                    release(x, ci);
                                }
                            }
                            x.emit(Inst::WgmmaWait { pending: 0 });
                        }
                        Err(e) => x.errors.push(e),
                    }
                } else if let Some(r) = rot.as_ref().filter(|_| Some(i) == last_stmt && x.wsl_on_wgmma(s)) {
                    // The body's last gemm, not waited for: the next
                    // iteration's chain issued behind it (`rotate.rs`).
                    match x.capture(|y| y.stmt(s)) {
                        Ok(code) => x.cur().extend(without_final_wait(code)),
                        Err(e) => x.errors.push(e),
                    }
                    retire(x, std::mem::take(&mut pending));
                    let (n, rest) = x.wsl_rotated_next(wl, r, body, (var, vr, b), (stage, phase), &users)?;
                    rotated_rest = rest;
                    let cond = x.warpgroup_pred(r.owner);
                    let wait = |pending| vec![Stmt::Inst { inst: Inst::WgmmaWait { pending }, guard: None }];
                    x.cur().push(Stmt::If { cond, negate: false, uniform: false, then: wait(n), otherwise: wait(0) });
                    rotated = true;
                } else if let Err(e) = x.stmt(s) {
                    x.errors.push(e);
                }
                if rot.as_ref().is_some_and(|r| r.stmts.contains(&i)) {
                    // Issued before the loop or by the previous iteration.
                    Self::wsl_rotated_top(&mut x.cur()[at..]);
                }
                if std::mem::take(&mut x.vote_wait) {
                    return Err(x.err("internal: a guarded rescale was not lowered as a parallel nest"));
                }
                // A stage released here may still be read by a pending gemm
                // of another warpgroup (a view of it): that one is retired
                // first (a release is every consumer's).
                let releasing: Vec<usize> = if chained.contains(&i) {
                    vec![]
                } else {
                    (0..copies.len())
                        .filter(|&ci| last(ci) == Some(i) && !left_in_flight)
                        .chain(after_chain.iter().copied())
                        .collect()
                };
                let readers = x.wsl_pending_readers(&mut pending, body, &releasing, &copies);
                retire(x, readers);
                for ci in (0..copies.len()).filter(|&ci| last(ci) == Some(i)) {
                    if chained.contains(&i) {
                        // Its wgmmas are still in flight: released after the
                        // chain's wait.
                        after_chain.push(ci);
                    } else if !left_in_flight {
                        release(x, ci);
                    }
                }
                if !chained.contains(&i) {
                    for ci in std::mem::take(&mut after_chain) {
                        release(x, ci);
                    }
                }
                // Boxes a warpgroup touches last here (`pieces.rs`).
                for (ci, p) in pieces.iter().enumerate() {
                    let Some((p, r)) = p.as_ref().and_then(|p| p.releases.as_ref().map(|r| (p, r))) else { continue };
                    if r.early.iter().flatten().any(|&e| e == Some(i)) {
                        let readers = x.wsl_pending_readers(&mut pending, body, &[ci], &copies);
                        retire(x, readers);
                        let wrote = touches_memory(x.k, s, copies[ci].dst).1;
                        for (w, early) in r.early.iter().enumerate() {
                            let boxes: Vec<usize> = (0..p.boxes).filter(|&j| early[j] == Some(i)).collect();
                            x.wsl_piece_release(wl, ci, p, stage, w as u32, &boxes, wrote);
                        }
                    }
                }
                if let Some(l) = late.as_ref().filter(|l| l.after == i) {
                    retire_late(x, l)?;
                }
                // The rotated chain's rest, after the last statement's
                // releases (`rotate.rs`).
                let rest = std::mem::take(&mut rotated_rest);
                x.cur().extend(rest);
                if chained.contains(&i) {
                    open_chain.push(i);
                } else {
                    open_chain.clear();
                }
            }
            retire(x, std::mem::take(&mut pending));
            for st in saved {
                x.restore_stage(st);
            }
            for ci in (0..copies.len()).filter(|&ci| last(ci).is_none()) {
                release(x, ci);
            }
            if let Some(r) = rot.as_ref().filter(|_| !rotated) {
                // (The last statement is no gemm: the chain after it all.)
                let (_, rest) = x.wsl_rotated_next(wl, r, body, (var, vr, b), (stage, phase), &users)?;
                x.cur().extend(rest);
            }
            if let (Some((_, _, c, regs, twins)), Some(m)) = (&look, more) {
                // The next iteration's scores, landed (a body's later gemm
                // waits for every group before it too; this wait, then
                // merged with that one, holds when there is none), become
                // this accumulator.
                x.emit(Inst::WgmmaWait { pending: 0 });
                let t = x.k.buffer(*c).dtype;
                let moves = x.capture(|y| {
                    for (r, tw) in regs.iter().zip(twins) {
                        y.mov(*r, (*tw).into(), t);
                    }
                    Ok(())
                })?;
                // An accumulator of one warpgroup: its registers are another
                // warpgroup's fragment's on the other threads (`owned_regs`),
                // so only its warpgroup moves them.
                let moves = match x.plan.frags.get(c).and_then(|l| l.root.owner) {
                    Some(w) => {
                        let cond = x.warpgroup_pred(w);
                        vec![Stmt::If { cond, negate: false, uniform: false, then: moves, otherwise: vec![] }]
                    }
                    None => moves,
                };
                x.emit_if(Some(m), true, moves, vec![]);
            }
            x.ring_advance(stages, stage, phase);
            Ok(())
        });
        wl.owner_waits_outside.set(false);
        self.loop_depth -= 1;
        match saved_var {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        let mut lowered = lowered?;
        // The turns: around the first gemm's issue, or around the next
        // iteration's issued ahead (the `if` holding it: its wait for the
        // stage, fence, wgmmas and commit).
        let points = match (wl.wants_ping_pong() && rot.is_none(), &look, ahead_at) {
            (false, _, _) => None,
            (true, None, _) => WslLowering::ping_pong_points(&lowered),
            (true, Some(_), Some(at)) => (!lowered.iter().any(WslLowering::blocks_ping_pong)).then_some((at, at)),
            (true, Some(_), None) => None,
        };
        if let Some(p) = points {
            self.wsl_ping_pong(&mut lowered, p, vr, a, b)?;
        }
        // Two consumer warpgroups with statements of their own: one copy of
        // the loop each (only the consumers run it: the producer has its own
        // loop and exits).
        let preds: Vec<Reg> = self.f.warpgroup_preds.iter().map(|p| p.0).collect();
        let own = branches_on(&lowered, &preds);
        let lp = Stmt::For { var: vr, start: a.into(), end: b.into(), exit, uniform: true, body: lowered };
        let guard = match &rot {
            // The rotated chain's first issue before the loop, the last
            // iteration's last gemm (left in flight by the chain's wait)
            // waited for after it, all in an `if a < b` (`rotate.rs`).
            Some(r) => {
                let ran = self.op("setp.lt.s32", RegClass::Pred, vec![a.into(), b.into()]);
                let (mut then, _) = self.wsl_rotated_issue(wl, r, body, (var, a), (stage, phase), &users, None)?;
                then.push(lp);
                then.push(Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None });
                self.cur().push(Stmt::If { cond: ran, negate: false, uniform: true, then, otherwise: vec![] });
                Some(ran)
            }
            None => {
                self.cur().push(lp);
                None
            }
        };
        let regions = copies.iter().filter_map(|c| self.region_of(c.dst).map(|r| r.id)).collect();
        self.f.ring_loops.push((vr, regions));
        let observed = observed.iter().filter_map(|&(w, b)| self.region_of(b).map(|r| (w, r.id))).collect();
        self.f.observed_rings.push((vr, observed));
        if wl.split_warpgroups && self.k.threads == 256 && own {
            let preds = vec![self.warpgroup_pred(0), self.warpgroup_pred(1)];
            self.f.split_loops.push(crate::passes::split_warpgroups::SplitLoop { var: vr, preds, guard });
        }
        if let Some(late) = &late {
            // The last iteration's last gemm: waited for (unconditionally:
            // a conditional wait makes ptxas serialize the wgmmas), its
            // stages released when the loop ran.
            self.emit(Inst::WgmmaWait { pending: 0 });
            let ran = self.op("setp.lt.s32", RegClass::Pred, vec![a.into(), b.into()]);
            let code = self.wsl_release_previous(wl, &late.rings, stage, &fenced)?;
            self.emit_if(Some(ran), true, code, vec![]);
        }
        // What follows may reuse the stage memory (an epilogue's scratch)
        // that other consumer warps' last reads still use.
        self.emit(Inst::BarSync);
        Ok(())
    }

    /// The body's gemms whose `wgmma.wait_group 0` the consumers' loop
    /// leaves out (see the module doc): a gemm on wgmma (not the one issued
    /// ahead, `ahead`) whose next statement, copies aside, is a gemm on
    /// wgmma accumulating (no `clear`) into the same fragment. A ring whose
    /// last user it is is released after the chain's last gemm, whose wait
    /// retires the whole chain (its stage is still being read before).
    fn wsl_chained_gemms(&self, wl: &WslLowering, body: &[TStmt], ahead: Option<usize>) -> Vec<usize> {
        let ws = &wl.plan;
        let on_wgmma = |s: &TStmt| match &s.kind {
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, clear } => {
                self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy).is_some().then_some((*c, *clear))
            }
            _ => None,
        };
        let stmts: Vec<usize> = (0..body.len()).filter(|i| !ws.copies.contains(i) && Some(*i) != ahead).collect();
        let mut out = Vec::new();
        for w in stmts.windows(2) {
            let (i, j) = (w[0], w[1]);
            let (Some((c1, _)), Some((c2, false))) = (on_wgmma(&body[i]), on_wgmma(&body[j])) else { continue };
            // A ring whose last user is `i` is released after the chain's
            // wait instead (`lower_wsl_consumer_loop`).
            if c1 == c2 && self.k.buffer(c1).scope == crate::ir::Scope::Fragment {
                out.push(i);
            }
        }
        out
    }

    /// Whether statement `s` may leave its `wgmma.wait_group 0` for later
    /// ([`crate::CompileOptions::wsloop_deferred_waits`]): a gemm on wgmma
    /// that every consumer runs, both operands in shared memory; or, with
    /// `owner_local`, one warpgroup's, A also from registers (a fragment
    /// of that warpgroup: [`Lx::wsl_needs_gemm`] keeps its registers
    /// untouched until the wait).
    fn wsl_deferrable(&self, s: &TStmt, owner_local: bool) -> R<bool> {
        let StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } = &s.kind else { return Ok(false) };
        let scope = |x: BufferId| self.k.buffer(x).scope;
        let owner = self.owner_of(s)?;
        let a_ok = match scope(*a) {
            crate::ir::Scope::Shared => true,
            crate::ir::Scope::Fragment => owner_local && owner.is_some() && self.frags.contains_key(a),
            _ => false,
        };
        Ok(a_ok
            && scope(*b) == crate::ir::Scope::Shared
            && self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy).is_some()
            && (owner_local || owner.is_none()))
    }

    /// The pending gemms (taken out of `pending`, in order) that read the
    /// stage of one of rings `rings` (or a view of it).
    fn wsl_pending_readers(
        &self,
        pending: &mut Vec<Pending>,
        body: &[TStmt],
        rings: &[usize],
        copies: &[WslCopy],
    ) -> Vec<Pending> {
        let reads =
            |p: &Pending| rings.iter().any(|&ci| p.gemms().any(|g| touches_memory(self.k, &body[g], copies[ci].dst).0));
        let (out, keep): (Vec<Pending>, Vec<Pending>) = pending.drain(..).partition(reads);
        *pending = keep;
        out
    }

    /// The pending gemms (taken out of `pending`, in order) that statement
    /// `s` needs retired first ([`Lx::wsl_needs_gemm`]; with `owner_local`,
    /// a gemm of one warpgroup only where `s` is that warpgroup's or every
    /// consumer's, or writes its shared operands), and with them every
    /// other pending gemm reading a ring that one of them releases (a
    /// release is every consumer's: none may still read the stage).
    fn wsl_due(
        &self,
        wl: &WslLowering,
        body: &[TStmt],
        pending: &mut Vec<Pending>,
        s: &TStmt,
        owner_local: bool,
    ) -> R<Vec<Pending>> {
        let owner = self.owner_of(s)?;
        let mut due = vec![false; pending.len()];
        for (k, p) in pending.iter().enumerate() {
            for g in p.gemms().map(|g| &body[g]) {
                due[k] |= match (owner_local, p.owner, owner) {
                    (true, Some(w), Some(v)) if v != w => {
                        let StmtKind::Gemm { a, b, .. } = &g.kind else {
                            return Err(self.err("internal: a pending statement is not a gemm"));
                        };
                        touches_memory(self.k, s, *a).1 || touches_memory(self.k, s, *b).1
                    }
                    _ => self.wsl_needs_gemm(g, s),
                };
            }
        }
        let copies = wl.copies.borrow();
        loop {
            let released: Vec<BufferId> = pending
                .iter()
                .zip(&due)
                .filter(|p| *p.1)
                .flat_map(|p| p.0.rings.iter().map(|&ci| copies[ci].dst))
                .collect();
            let more: Vec<usize> = (0..pending.len())
                .filter(|&k| {
                    !due[k]
                        && released.iter().any(|&b| pending[k].gemms().any(|g| touches_memory(self.k, &body[g], b).0))
                })
                .collect();
            if more.is_empty() {
                break;
            }
            for k in more {
                due[k] = true;
            }
        }
        let mut out = Vec::new();
        let mut keep = Vec::new();
        for (p, d) in pending.drain(..).zip(due) {
            if d {
                out.push(p);
            } else {
                keep.push(p);
            }
        }
        *pending = keep;
        Ok(out)
    }

    /// Whether statement `s` needs the deferred gemm `g` retired first: it
    /// is a gemm (one wait retires every group), writes `g`'s operands (or
    /// a view of them), or touches a fragment whose registers are `g`'s
    /// accumulator's or its register A's (another warpgroup's fragment may
    /// share them).
    fn wsl_needs_gemm(&self, g: &TStmt, s: &TStmt) -> bool {
        let StmtKind::Gemm { a, b, c, .. } = &g.kind else { return true };
        if matches!(s.kind, StmtKind::Gemm { .. }) {
            return true;
        }
        if touches_memory(self.k, s, *a).1 || touches_memory(self.k, s, *b).1 {
            return true;
        }
        let Some(acc) = self.frags.get(c) else { return true };
        let a_regs = self.frags.get(a).map(Vec::as_slice).unwrap_or(&[]);
        (0..self.k.buffers.len() as u32).map(BufferId).any(|f| {
            let (r, w) = touches(s, f);
            (r || w)
                && self.frags.get(&f).is_some_and(|regs| regs.iter().any(|x| acc.contains(x) || a_regs.contains(x)))
        })
    }

    /// How statement `s` may run with the pending gemms `due` it needs
    /// retired still in flight ([`crate::CompileOptions::wsloop_guarded_waits`];
    /// every one a gemm of every consumer, and `s` too):
    /// - [`Guarded::Vote`]: `s` is a nest whose body is one row test
    ///   (`if alpha[i] != 1.0 { acc[(i, j)] = .. }`, `nest.rs`'s `row_guard`)
    ///   that needs them only for their accumulators' registers: it waits
    ///   only where a thread of its warpgroup takes the test, and they stay
    ///   pending;
    /// - [`Guarded::Behind`]: `s` is a gemm on wgmma accumulating (no
    ///   `clear`) into the accumulator of every one of them with the same
    ///   instructions, both operands in shared memory, lowered in its own
    ///   place (`plain`: not pieced, chained, or the late gemm's): wgmmas
    ///   into one accumulator of one shape run in issue order (PTX ISA,
    ///   `wgmma.fence`), so it issues before they are retired.
    fn wsl_guarded(&self, body: &[TStmt], due: &[Pending], s: &TStmt, plain: bool) -> R<Guarded> {
        if due.is_empty() || due.iter().any(|p| p.owner.is_some() || !p.chain.is_empty()) || self.owner_of(s)?.is_some()
        {
            return Ok(Guarded::No);
        }
        let gemm = |t: &TStmt| match &t.kind {
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, clear, .. } => {
                Some((*a, *b, *c, *clear, self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy)))
            }
            _ => None,
        };
        let shape = |g: &crate::hopper::WgmmaGemm| (g.m, g.n, g.ab, g.warpgroups, g.col_groups, g.insts.clone());
        if let Some((a, b, c, clear, plan)) = gemm(s) {
            let shared = |x: BufferId| self.k.buffer(x).scope == crate::ir::Scope::Shared;
            let Some(plan) = plan.filter(|_| plain && !clear && shared(a) && shared(b)) else {
                return Ok(Guarded::No);
            };
            let same = due.iter().all(|p| {
                gemm(&body[p.gemm])
                    .is_some_and(|(_, _, pc, _, pp)| pc == c && pp.is_some_and(|q| shape(&q) == shape(&plan)))
            });
            return Ok(if same { Guarded::Behind } else { Guarded::No });
        }
        let Some(loads) = crate::passes::lower::row_guard_loads(self.k, s) else {
            return Ok(Guarded::No);
        };
        for p in due {
            let Some((a, b, c, _, _)) = gemm(&body[p.gemm]) else { return Ok(Guarded::No) };
            let acc = self.frags.get(&c).cloned().unwrap_or_default();
            let shares = |f: &BufferId| self.frags.get(f).is_some_and(|r| r.iter().any(|x| acc.contains(x)));
            if touches_memory(self.k, s, a).1 || touches_memory(self.k, s, b).1 || loads.iter().any(shares) {
                return Ok(Guarded::No);
            }
        }
        Ok(Guarded::Vote)
    }

    /// The body's last gemm to leave in flight across the back-edge (see
    /// the module doc, "The last gemm's wait"), when the loop allows it:
    /// its first statement (copies and scalar `let`s aside) is a gemm on wgmma, possibly the
    /// head of a chain into one fragment (`chained`), its last another gemm
    /// on wgmma, not pieced, after that chain, and nothing up to the
    /// chain's end writes the last gemm's operands or accumulator or reads
    /// its accumulator (so it may still run while they execute).
    fn wsl_late_wait(
        &self,
        wl: &WslLowering,
        body: &[TStmt],
        users: &[Vec<usize>],
        chained: &[usize],
    ) -> Option<LateWait> {
        let ws = &wl.plan;
        if !wl.late_last_wait || !self.target.has(crate::target::Feature::Wgmma) {
            return None;
        }
        // Where the warpgroups ping-pong (two consumer warpgroups, a body
        // writing no shared memory): the other's softmax runs under both
        // gemms. Measured on the H200 (BENCHMARKS.md, session 12), same
        // runs: attention d128 +3 to +10 % (causal +7 to +10 %); three
        // warpgroups (d64, 192 x 128) −2.4 %; MLA (two warpgroups in
        // lockstep, P written to shared memory) within the noise (±3 %).
        if !wl.wants_ping_pong() {
            return None;
        }
        let stmts: Vec<usize> = (0..body.len()).filter(|i| !ws.copies.contains(i)).collect();
        let shared: Vec<BufferId> = (0..self.k.buffers.len() as u32)
            .map(BufferId)
            .filter(|&b| self.k.buffer(b).scope == crate::ir::Scope::Shared)
            .collect();
        if stmts.iter().any(|&i| shared.iter().any(|&b| touches_memory(self.k, &body[i], b).1)) {
            return None;
        }
        let on_wgmma = |i: usize| match &body[i].kind {
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy).is_some().then_some([*a, *b, *c])
            }
            _ => None,
        };
        // The first statement but scalar `let`s (a paged copy's page index).
        let mut at = stmts.iter().position(|&i| !matches!(body[i].kind, StmtKind::Let { .. }))?;
        let last = *stmts.last()?;
        on_wgmma(stmts[at])?;
        let operands = on_wgmma(last)?;
        // The chain's end (a gemm on wgmma, as every chain member's
        // successor is): its wait is the one the last gemm's joins.
        while chained.contains(&stmts[at]) {
            at += 1;
        }
        let after = stmts[at];
        if after >= last {
            return None;
        }
        if wl.pieces.borrow().iter().flatten().any(|p| p.gemm == last) {
            return None;
        }
        let acc = operands[2];
        let clash = stmts[..=at].iter().any(|&i| {
            operands.iter().any(|&buf| touches_memory(self.k, &body[i], buf).1)
                || touches_memory(self.k, &body[i], acc).0
        });
        if clash {
            return None;
        }
        let rings = (0..users.len()).filter(|&c| users[c].last() == Some(&last)).collect();
        Some(LateWait { after, last, rings })
    }

    /// The wait for ring `ci`'s stage `stage` to land (its full barrier's
    /// phase `phase`).
    pub(super) fn wsl_full_wait(&mut self, wl: &WslLowering, ci: usize, stages: i64, (stage, phase): (Reg, Reg)) {
        let full = self.ring_bar_addr(wl.ring(ci), stages, stage, 0);
        let p = self.new_reg(RegClass::Pred);
        self.emit(Inst::MbarWait { addr: full, parity: phase.into(), pred: p });
    }

    /// The consumers' release of ring `ci`'s stage `stage` (`fenced`: its
    /// generic writes ordered before the producer's refill first).
    fn wsl_release(&mut self, wl: &WslLowering, ci: usize, stage: Reg, fenced: bool) {
        if fenced {
            self.emit(Inst::FenceProxyAsync);
        }
        let pieced = wl.pieces.borrow().get(ci).cloned().flatten();
        match pieced.as_ref().and_then(|p| p.releases.as_ref().map(|r| (p, r))) {
            // Each warpgroup's boxes not released early (`pieces.rs`).
            Some((p, r)) => {
                for (w, early) in r.early.iter().enumerate() {
                    let boxes: Vec<usize> = (0..p.boxes).filter(|&j| early[j].is_none()).collect();
                    self.wsl_piece_release(wl, ci, p, stage, w as u32, &boxes, false);
                }
            }
            None => self.wsl_arrive_empty(wl, ci, stage),
        }
    }

    /// `stage − 1`, wrapping to `stages − 1` at 0. (`defer.rs` computes it
    /// inline with the other instruction order; one helper for both
    /// reorders two instructions in 46 modules and changes their SASS.)
    fn ring_previous(&mut self, stages: i64, stage: Reg) -> Reg {
        let back = self.op("add.s32", RegClass::B32, vec![stage.into(), Operand::Imm(-1)]);
        let wrap = self.op("setp.eq.s32", RegClass::Pred, vec![stage.into(), Operand::Imm(0)]);
        self.op("selp.b32", RegClass::B32, vec![Operand::Imm(stages - 1), back.into(), wrap.into()])
    }

    /// The releases of `rings` at the stage before `stage` (the late last
    /// gemm's), as code for the caller's `if`.
    fn wsl_release_previous(&mut self, wl: &WslLowering, rings: &[usize], stage: Reg, fenced: &[bool]) -> R<Vec<Stmt>> {
        self.capture(|x| {
            let pst = x.ring_previous(wl.plan.stages as i64, stage);
            for &ci in rings {
                x.wsl_release(wl, ci, pst, fenced[ci]);
            }
            Ok(())
        })
    }

    /// Whether the release of the ring whose stage buffer is `buf` (touched
    /// by the body's statements `users`) needs a `fence.proxy.async` first:
    /// the body writes the stage through the generic proxy
    /// ([`crate::passes::pipeline::PipelinePlan::rewritten`]) and its last
    /// user is not a wgmma gemm reading it (before which the barrier pass
    /// fences those writes already), so that the producer's TMA refill
    /// (async proxy) is ordered after them.
    fn wsl_release_fence(&self, wl: &WslLowering, body: &[TStmt], users: &[usize], buf: BufferId) -> bool {
        if !wl.plan.pipe.rewritten.contains(&buf) {
            return false;
        }
        let Some(&last) = users.last() else { return true };
        let StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } = &body[last].kind else {
            return true;
        };
        let reads = touches_memory(self.k, &body[last], buf).0;
        !(reads && self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy).is_some())
    }

    /// The consumers' ring stage and phase: the persistent variant's,
    /// carried across tiles, else two fresh registers at 0.
    pub(super) fn wsl_consumer_ring(&mut self, wl: &WslLowering) -> (Reg, Reg) {
        if let Some(regs) = wl.ring_regs.get() {
            return regs;
        }
        let (stage, phase) = (self.new_reg(RegClass::B32), self.new_reg(RegClass::B32));
        self.mov(stage, Operand::Imm(0), DType::I32);
        self.mov(phase, Operand::Imm(0), DType::I32);
        (stage, phase)
    }
}

/// The body's last gemm left in flight across the back-edge
/// (`Lx::wsl_late_wait`).
struct LateWait {
    /// The statement (the end of the body's first gemm chain) after which
    /// the previous iteration's last gemm is waited for.
    after: usize,
    /// The last gemm.
    last: usize,
    /// The rings whose last user it is: released once it is waited for.
    rings: Vec<usize>,
}

/// The instructions of `body`, recursively.
pub(super) fn insts_of(body: &[Stmt]) -> Vec<&Inst> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Inst { inst, .. } => out.push(inst),
            Stmt::If { then, otherwise, .. } => {
                out.extend(insts_of(then));
                out.extend(insts_of(otherwise));
            }
            Stmt::For { body, .. } => out.extend(insts_of(body)),
            Stmt::Comment(_) => {}
        }
    }
    out
}

/// Whether `body` branches on one of the warpgroup predicates `preds`.
fn branches_on(body: &[Stmt], preds: &[Reg]) -> bool {
    body.iter().any(|s| match s {
        Stmt::If { cond, then, otherwise, .. } => {
            preds.contains(cond) || branches_on(then, preds) || branches_on(otherwise, preds)
        }
        Stmt::For { body, .. } => branches_on(body, preds),
        Stmt::Inst { .. } | Stmt::Comment(_) => false,
    })
}

/// A gemm's code without the `wgmma.wait_group 0` that ends it (the
/// general lowering's: its group is then left in flight), inside the
/// branch of the warpgroup that runs it alone (`policy(Warpgroup(w))`).
pub(super) fn without_final_wait(mut code: Vec<Stmt>) -> Vec<Stmt> {
    if let Some(i) = code.iter().rposition(|s| matches!(s, Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, .. })) {
        code.remove(i);
    } else if let [Stmt::If { then, uniform: false, .. }] = &mut code[..] {
        // (Its `else`, the other warpgroups' piece waits, has no wgmma.)
        *then = without_final_wait(std::mem::take(then));
    }
    code
}

/// How a statement goes on with the pending gemms it needs retired
/// ([`Lx::wsl_guarded`]).
enum Guarded {
    /// They are retired before it.
    No,
    /// It waits only where its warpgroup takes its row test; they stay pending.
    Vote,
    /// It is a gemm into their accumulator, issued before they are retired.
    Behind,
}

/// A gemm of the consumers' loop body whose wait is left for later.
struct Pending {
    /// Its statement in the body.
    gemm: usize,
    /// The gemms of the chain it ends (`wsl_chained_gemms`), issued before
    /// it without a wait: in flight until its wait too.
    chain: Vec<usize>,
    /// The rings it is the last reader of, released when it is retired.
    rings: Vec<usize>,
    /// The warpgroup that runs it alone (`policy(Warpgroup(w))`), if any.
    owner: Option<u32>,
}

impl Pending {
    /// Its gemm and the chain's before it, all in flight until its wait.
    fn gemms(&self) -> impl Iterator<Item = usize> + '_ {
        self.chain.iter().copied().chain([self.gemm])
    }
}

/// Consumer threads of three warpgroups (FA3's head-dim-64 schedule: 192
/// query rows, no ping-pong, the last gemm deferred at any width).
pub(super) const THREE_WARPGROUPS: u32 = 384;

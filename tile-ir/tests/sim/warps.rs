//! Warps that run independently (see the module doc of `mod.rs`): each warp
//! a stack of frames over the structured Thread IR, a scheduler that runs
//! them until every warp has finished (or reports a deadlock), barriers
//! counted per warp, warpgroup rendezvous, `exit`, the cluster barrier, and
//! the vector clocks that order shared-memory accesses across warps.
//!
//! The warps are the cluster's (one block's without a cluster): block `r`'s
//! are `r * stride / 32 ..`, numbered across the cluster (the clocks' slots
//! too), a block's last ones empty (no lanes, finished from the start) when
//! its threads are not a whole number of warpgroups. Named barriers and
//! `bar.sync` are per block; the cluster barrier spans the cluster.
//!
//! Expects a `Sim` whose registers and shared memory are set up for the
//! cluster. Guarantees: a blocking statement is attempted again (without
//! side effects beyond landing TMA bytes) until it can complete; a barrier
//! arrival happens once per warp and barrier instance; the warps'
//! interleaving depends only on `Sim::seed` (and the cluster's `ctaid`).

use super::*;

/// Clock slots for mbarriers (the TMA bytes their phases complete), after
/// the warps' slots.
pub(super) const MAX_MBARRIERS: usize = 64;

#[derive(Copy, Clone)]
enum Kind<'f> {
    /// The function body.
    Body,
    /// The `then` lanes of an `if`; the `else` lanes run next.
    Then {
        otherwise: &'f [Stmt],
        else_mask: u32,
    },
    Else,
    /// One iteration of a `for`: `outer` is the mask the loop started with.
    Loop {
        var: Reg,
        end: &'f Operand,
        uniform: bool,
        outer: u32,
    },
}

/// A block of statements being run by some lanes of a warp.
#[derive(Copy, Clone)]
struct Frame<'f> {
    body: &'f [Stmt],
    pc: usize,
    mask: u32,
    kind: Kind<'f>,
}

/// One warp: where it is, which of its lanes exist and which exited.
#[derive(Default)]
pub(super) struct Warp<'f> {
    frames: Vec<Frame<'f>>,
    pub(super) done: bool,
    lanes: u32,
    exited: u32,
}

/// A warp's state at the blocking instructions it is in.
#[derive(Clone, Default)]
pub(super) struct WarpSync<'f> {
    /// The barrier it arrived at and waits on; set free by its completion.
    at_bar: Option<u32>,
    bar_released: bool,
    /// The cluster-barrier instance it arrived at (`barrier.cluster.arrive`)
    /// and has not waited on yet.
    cluster: Option<u64>,
    /// The warpgroup-collective statement it waits at, with its lanes; set
    /// free once the warpgroup has run it.
    collective: Option<(&'f Stmt, u32)>,
    collective_done: bool,
    /// The outcome of the `bar.red.or` instance it waited on, handed over
    /// when the instance completed.
    vote: Option<bool>,
}

/// One of the 16 named barriers: the thread count of the current instance
/// (`None`: every thread that has not exited), the warps arrived (each
/// counts 32 threads, whether by `bar.sync` or `bar.arrive`, and at most
/// once per instance) and which of them wait, the join of their clocks at
/// arrival. An instance completes when its count has arrived (PTX ISA,
/// barrier{.cta}); arrivals still pending when the block ends are an error.
#[derive(Clone, Default)]
pub(super) struct NamedBar {
    count: Option<u32>,
    arrived: Vec<usize>,
    waiting: Vec<usize>,
    joined: Vec<u32>,
    completed: u64,
    /// Of a `bar.red.or` instance: whether any arrived thread voted true.
    any: bool,
    /// The instruction (its statement's address) at which the warps waiting
    /// on this instance with an aligned `bar.sync` wait (reset when it
    /// completes): PTX ISA
    /// (barrier{.cta}.sync.aligned, which `bar.sync` is) wants every thread
    /// to execute the same instruction; `barrier.sync` (not aligned) may be
    /// reached at different ones (compute-sanitizer's synccheck reports
    /// "divergent threads in block" otherwise).
    aligned_site: Option<usize>,
}

/// The cluster barrier (`barrier.cluster.arrive.release` /
/// `barrier.cluster.wait.acquire`, `.aligned`): the warps arrived at the
/// current instance and the join of their clocks; the instances completed
/// so far and the join of the last one (what a wait acquires). An instance
/// completes when every warp of the cluster that has not finished has
/// arrived: exited threads do not hold it up (PTX ISA, `exit`), a live
/// thread that never arrives does (a deadlock).
#[derive(Clone, Default)]
pub(super) struct ClusterBar {
    arrived: Vec<usize>,
    joined: Vec<u32>,
    completed: u64,
    done_vc: Vec<u32>,
}

/// What an attempt at a blocking statement did.
enum Step {
    Done,
    /// Blocked, having arrived at a barrier (the block's state changed).
    Arrived,
    Blocked,
}

fn lanes(mask: u32) -> impl Iterator<Item = usize> {
    (0..32).filter(move |l| mask & (1 << l) != 0)
}

impl<'f> Sim<'f> {
    pub(super) fn start_warps(&mut self) {
        let nw = self.threads.div_ceil(32);
        assert!(
            self.nblocks == 1 || nw <= 64,
            "the simulator models clusters of at most 64 warps (warpgroups whole in each block), not {nw}"
        );
        self.nwarps = nw;
        let slots = nw + MAX_MBARRIERS * self.nblocks;
        self.vc = (0..nw)
            .map(|w| {
                let mut v = vec![0; slots];
                v[w] = 1;
                v
            })
            .collect();
        let f: &'f Function = self.f;
        self.warps = (0..nw)
            .map(|w| {
                // Its first thread's index in its block.
                let first = 32 * w % self.stride;
                let n = self.block_threads.saturating_sub(first).min(32);
                let lanes = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
                Warp {
                    frames: if n == 0 {
                        vec![]
                    } else {
                        vec![Frame { body: &f.body, pc: 0, mask: lanes, kind: Kind::Body }]
                    },
                    done: n == 0,
                    lanes,
                    exited: 0,
                }
            })
            .collect();
        self.sync = vec![WarpSync::default(); nw];
        self.bars = vec![NamedBar::default(); 16 * self.nblocks];
        self.cbar = ClusterBar::default();
        self.rng =
            self.seed.unwrap_or(0) ^ 0x9E37_79B9_7F4A_7C15 ^ ((self.ctaid[0] as u64) << 32 | self.ctaid[1] as u64);
    }

    fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Runs the block's warps until all have finished; a round in which no
    /// warp makes progress is a deadlock.
    pub(super) fn run_warps(&mut self) {
        let nw = self.warps.len();
        let mut order: Vec<usize> = (0..nw).collect();
        loop {
            if self.seed.is_some() {
                for i in (1..nw).rev() {
                    let j = (self.next_rand() % (i as u64 + 1)) as usize;
                    order.swap(i, j);
                }
            }
            let (mut live, mut progress) = (false, false);
            for i in 0..nw {
                let w = order[i];
                if self.warps[w].done {
                    continue;
                }
                live = true;
                let budget = if self.seed.is_some() { 1 + (self.next_rand() % 48) as usize } else { usize::MAX };
                progress |= self.run_warp(w, budget);
            }
            if !live {
                // Arrivals no barrier instruction consumed: a protocol that
                // does not balance (the next use of that barrier in the
                // block would complete early, without its waiters).
                for (i, b) in self.bars.iter().enumerate() {
                    assert!(
                        b.arrived.is_empty(),
                        "barrier {}{} has arrivals of warps {} left pending when the block ends ({:?} threads expected)",
                        i % 16,
                        if self.nblocks == 1 { String::new() } else { format!(" of block {}", i / 16) },
                        self.warp_list(&b.arrived),
                        b.count
                    );
                }
                return;
            }
            if !progress {
                panic!("{}", self.deadlock_report());
            }
        }
    }

    /// The lanes of `mask` whose guard holds.
    fn guarded(&self, w: usize, mask: u32, guard: &Option<(Reg, bool)>) -> u32 {
        match guard {
            None => mask,
            Some((p, neg)) => {
                let mut m = 0;
                for l in lanes(mask) {
                    if (self.regs[32 * w + l][p.0 as usize] != 0) != *neg {
                        m |= 1 << l;
                    }
                }
                m
            }
        }
    }

    /// Runs warp `w` for at most `budget` statements or until it blocks;
    /// whether it made progress.
    fn run_warp(&mut self, w: usize, mut budget: usize) -> bool {
        let mut frames = std::mem::take(&mut self.warps[w].frames);
        let mut progress = false;
        while budget > 0 {
            let Some(fr) = frames.last_mut() else {
                self.finish_warp(w);
                return true;
            };
            if fr.pc >= fr.body.len() || fr.mask == 0 {
                let fr = frames.pop().unwrap();
                let exited = self.warps[w].exited;
                match fr.kind {
                    Kind::Body | Kind::Else => {}
                    Kind::Then { otherwise, else_mask } => {
                        let em = else_mask & !exited;
                        if em != 0 && !otherwise.is_empty() {
                            frames.push(Frame { body: otherwise, pc: 0, mask: em, kind: Kind::Else });
                        }
                    }
                    Kind::Loop { var, end, uniform, outer } => {
                        for l in lanes(fr.mask & !exited) {
                            let v = &mut self.regs[32 * w + l][var.0 as usize];
                            *v = ((*v as u32 as i32).wrapping_add(1)) as u32 as u64;
                        }
                        let outer = outer & !exited;
                        let m = self.loop_mask(w, outer, var, end);
                        if m != 0 {
                            if uniform {
                                assert_eq!(m, outer, "uniform loop diverged in warp {w}");
                            }
                            frames.push(Frame { pc: 0, mask: m, kind: Kind::Loop { var, end, uniform, outer }, ..fr });
                        }
                    }
                }
                continue;
            }
            let s: &'f Stmt = &fr.body[fr.pc];
            let mask = fr.mask;
            match s {
                Stmt::Comment(_) => fr.pc += 1,
                Stmt::Inst { inst: Inst::Exit, guard } => {
                    fr.pc += 1;
                    let gone = self.guarded(w, mask, guard);
                    self.steps += gone.count_ones() as u64;
                    self.warps[w].exited |= gone;
                    for fr in frames.iter_mut() {
                        fr.mask &= !gone;
                        match &mut fr.kind {
                            Kind::Then { else_mask, .. } => *else_mask &= !gone,
                            Kind::Loop { outer, .. } => *outer &= !gone,
                            _ => {}
                        }
                    }
                    if self.warps[w].exited == self.warps[w].lanes {
                        self.finish_warp(w);
                        return true;
                    }
                }
                Stmt::Inst { inst, guard } => match self.attempt(w, s, inst, guard, mask) {
                    Step::Done => frames.last_mut().unwrap().pc += 1,
                    Step::Arrived => {
                        progress = true;
                        break;
                    }
                    Step::Blocked => break,
                },
                Stmt::If { cond, negate, uniform, then, otherwise } => {
                    fr.pc += 1;
                    let mut c = 0u32;
                    for l in lanes(mask) {
                        if (self.regs[32 * w + l][cond.0 as usize] != 0) != *negate {
                            c |= 1 << l;
                        }
                    }
                    let (tm, em) = (mask & c, mask & !c);
                    if *uniform {
                        assert!(tm == 0 || em == 0, "uniform branch diverged in warp {w}");
                    }
                    if tm != 0 {
                        frames.push(Frame {
                            body: then,
                            pc: 0,
                            mask: tm,
                            kind: Kind::Then { otherwise, else_mask: em },
                        });
                    } else if em != 0 && !otherwise.is_empty() {
                        frames.push(Frame { body: otherwise, pc: 0, mask: em, kind: Kind::Else });
                    }
                }
                Stmt::For { var, start, end, uniform, body, .. } => {
                    fr.pc += 1;
                    for l in lanes(mask) {
                        let t = 32 * w + l;
                        self.regs[t][var.0 as usize] = self.val(t, start) as u32 as u64;
                    }
                    let m = self.loop_mask(w, mask, *var, end);
                    if m != 0 {
                        if *uniform {
                            assert_eq!(m, mask, "uniform loop diverged in warp {w}");
                        }
                        let kind = Kind::Loop { var: *var, end, uniform: *uniform, outer: mask };
                        frames.push(Frame { body, pc: 0, mask: m, kind });
                    }
                }
            }
            progress = true;
            budget -= 1;
        }
        self.warps[w].frames = frames;
        progress
    }

    /// The lanes of `mask` whose loop counter `var` is below `end`.
    fn loop_mask(&self, w: usize, mask: u32, var: Reg, end: &Operand) -> u32 {
        let mut m = 0;
        for l in lanes(mask) {
            let t = 32 * w + l;
            if (self.regs[t][var.0 as usize] as u32 as i32) < (self.val(t, end) as u32 as i32) {
                m |= 1 << l;
            }
        }
        m
    }

    /// Warp `w` has finished (every lane exited or ran off the end): it no
    /// longer counts for barriers without a thread count (nor for the
    /// cluster barrier). When its block's last warp finishes, the block has exited (in a
    /// cluster: checked for TMA loads still landing in it, `hopper.rs`).
    fn finish_warp(&mut self, w: usize) {
        self.warps[w].done = true;
        self.warps[w].frames.clear();
        let r = self.warp_block(w);
        for id in 16 * r..16 * r + 16 {
            self.bar_try_complete(id);
        }
        let per = self.stride.div_ceil(32);
        if !self.block_done[r] && self.warps[per * r..(per * r + per).min(self.nwarps)].iter().all(|x| x.done) {
            self.block_done[r] = true;
            if self.nblocks > 1 {
                self.hopper_block_exit(r);
            }
        }
        self.cluster_try_complete();
    }

    /// One attempt at instruction `inst` (statement `s`) by the `mask`
    /// lanes of warp `w`.
    fn attempt(&mut self, w: usize, s: &'f Stmt, inst: &Inst, guard: &Option<(Reg, bool)>, mask: u32) -> Step {
        match inst {
            Inst::BarSync => {
                let count = self.f.barrier_threads;
                self.aligned_at(w, count.is_some() as u32, s);
                self.bar_sync(w, count.is_some() as u32, count, self.guarded(w, mask, guard))
            }
            Inst::NamedBarSync { id, threads } => {
                self.aligned_at(w, *id, s);
                self.bar_sync(w, *id, Some(*threads), self.guarded(w, mask, guard))
            }
            Inst::BarrierSync { id, threads } => self.bar_sync(w, *id, Some(*threads), self.guarded(w, mask, guard)),
            Inst::BarRedOr { dst, src, id, threads } => {
                let on = self.guarded(w, mask, guard);
                let ids: Vec<u64> = lanes(on).map(|l| self.val(32 * w + l, id)).collect();
                assert!(ids.windows(2).all(|p| p[0] == p[1]), "bar.red.or in warp {w} with barrier ids {ids:?}");
                let id = ids.first().copied().unwrap_or(0) as u32;
                if !self.sync[w].bar_released && self.sync[w].at_bar.is_none() && on != 0 {
                    // This warp's arrival: its lanes' votes.
                    let bi = 16 * self.warp_block(w) + id as usize;
                    let any = lanes(on).any(|l| self.regs[32 * w + l][src.0 as usize] != 0);
                    self.bars[bi].any |= any;
                }
                self.aligned_at(w, id, s);
                let step = self.bar_sync(w, id, Some(*threads), on);
                if matches!(step, Step::Done) && on != 0 {
                    let any = self.sync[w].vote.take().expect("a completed bar.red.or hands over its outcome");
                    for l in lanes(on) {
                        self.regs[32 * w + l][dst.0 as usize] = any as u64;
                    }
                }
                step
            }
            Inst::NamedBarArrive { id, threads } | Inst::BarrierArrive { id, threads } => {
                self.bar_arrive(w, *id, *threads, self.guarded(w, mask, guard))
            }
            Inst::ClusterArrive => self.cluster_arrive(w, self.guarded(w, mask, guard)),
            Inst::ClusterWait => self.cluster_wait(w, self.guarded(w, mask, guard)),
            Inst::MbarWait { addr, parity, pred } => {
                self.mbar_wait_warp(w, addr, parity, *pred, self.guarded(w, mask, guard))
            }
            Inst::WgmmaFence
            | Inst::WgmmaCommit
            | Inst::WgmmaWait { .. }
            | Inst::Wgmma { .. }
            | Inst::SetMaxNreg { .. } => {
                assert!(guard.is_none(), "guarded warpgroup-collective {inst:?}");
                self.collective(w, s, inst, mask)
            }
            Inst::ShflBfly { dst, src, lane_mask } => {
                assert!(guard.is_none());
                assert_eq!(mask, u32::MAX, "shfl.sync with inactive lanes in warp {w}");
                assert!(*lane_mask < 32, "shfl.bfly lane mask {lane_mask}");
                let vals: Vec<u64> = (0..32).map(|l| self.regs[32 * w + l][src.0 as usize]).collect();
                for l in 0..32 {
                    self.regs[32 * w + l][dst.0 as usize] = vals[l ^ *lane_mask as usize];
                }
                self.steps += 32;
                Step::Done
            }
            Inst::WarpBroadcast { dst, src } => {
                assert!(guard.is_none());
                assert_eq!(mask, u32::MAX, "shfl.sync with inactive lanes in warp {w}");
                let v = self.regs[32 * w][src.0 as usize];
                for l in 0..32 {
                    self.regs[32 * w + l][dst.0 as usize] = v;
                }
                self.steps += 32;
                Step::Done
            }
            Inst::ElectSync { pred } => {
                assert!(guard.is_none(), "guarded elect.sync");
                for (i, l) in lanes(mask).enumerate() {
                    self.regs[32 * w + l][pred.0 as usize] = (i == 0) as u64;
                }
                Step::Done
            }
            Inst::Ldmatrix { .. } | Inst::Mma { .. } => {
                assert!(guard.is_none(), "guarded warp-collective instruction");
                self.warp_collective(w, inst, mask);
                Step::Done
            }
            _ => {
                for l in lanes(self.guarded(w, mask, guard)) {
                    self.steps += 1;
                    self.inst(32 * w + l, inst);
                }
                if std::mem::take(&mut self.released) {
                    self.vc[w][w] += 1;
                }
                Step::Done
            }
        }
    }

    /// `bar.sync id[, count]` by the `on` lanes of warp `w` (all of its
    /// lanes that have not exited: `bar.sync` is `barrier.sync.aligned`).
    /// Warp `w` at an aligned `bar.sync` on barrier `id` (statement `s`):
    /// the warps waiting on the barrier's instance must all be at `s`.
    fn aligned_at(&mut self, w: usize, id: u32, s: &Stmt) {
        if self.sync[w].bar_released || self.sync[w].at_bar.is_some() {
            return;
        }
        let site = s as *const Stmt as usize;
        let bi = 16 * self.warp_block(w) + id as usize;
        if self.bars[bi].waiting.is_empty() {
            self.bars[bi].aligned_site = Some(site);
            return;
        }
        let b = &self.bars[bi];
        assert!(
            b.aligned_site.is_none_or(|x| x == site),
            "{} waits at barrier {id} with a bar.sync other than the one warps {} wait at: an aligned bar.sync must be executed at the same instruction by every thread taking part (barrier.sync, not aligned, may not)",
            self.warp_name(w),
            self.warp_list(&b.waiting)
        );
    }

    fn bar_sync(&mut self, w: usize, id: u32, count: Option<u32>, on: u32) -> Step {
        let sy = &mut self.sync[w];
        if sy.bar_released {
            sy.bar_released = false;
            return Step::Done;
        }
        if sy.at_bar.is_some() {
            return Step::Blocked;
        }
        if on == 0 {
            return Step::Done;
        }
        self.bar_arrival(w, id, count, on, true);
        if std::mem::take(&mut self.sync[w].bar_released) {
            Step::Done
        } else {
            Step::Arrived
        }
    }

    /// `bar.arrive id, count` by the `on` lanes of warp `w`: the warp's
    /// arrival counts (32 threads) and releases its clock to the warps that
    /// wait at the barrier; it goes on at once (`Inst::NamedBarArrive`,
    /// `Inst::BarrierArrive`).
    fn bar_arrive(&mut self, w: usize, id: u32, count: u32, on: u32) -> Step {
        if on != 0 {
            self.bar_arrival(w, id, Some(count), on, false);
            self.vc[w][w] += 1;
        }
        Step::Done
    }

    /// Warp `w`'s arrival at barrier `id` (`waits`: a `bar.sync`).
    fn bar_arrival(&mut self, w: usize, id: u32, count: Option<u32>, on: u32, waits: bool) {
        let live = self.warps[w].lanes & !self.warps[w].exited;
        assert_eq!(
            on,
            live,
            "bar.sync in divergent code: {} reaches barrier {id} with lanes {on:#x} of {live:#x}",
            self.warp_name(w)
        );
        assert!(id < 16, "barrier id {id}: a block has barriers 0..15");
        if let Some(n) = count {
            assert!(n > 0 && n % 32 == 0, "bar.sync {id}, {n}: the thread count must be a multiple of 32");
        }
        let slots = self.vc[w].len();
        // The block's barrier `id`.
        let bi = 16 * self.warp_block(w) + id as usize;
        let b = &self.bars[bi];
        if !b.arrived.is_empty() {
            assert_eq!(
                b.count,
                count,
                "{} arrives at barrier {id} with thread count {count:?}, warps {} with {:?}",
                self.warp_name(w),
                self.warp_list(&b.arrived),
                b.count
            );
        }
        // PTX ISA (barrier{.cta}): a warp must not execute more barrier
        // instructions than intended on a barrier (a `bar.arrive`, then any
        // other on the same barrier) before its reset: unpredictable.
        assert!(
            !b.arrived.contains(&w),
            "{} arrives at barrier {id} again before it completes (arrived: warps {}): a bar.arrive followed by another barrier instruction on the same barrier before its reset is unpredictable",
            self.warp_name(w),
            self.warp_list(&b.arrived)
        );
        let b = &mut self.bars[bi];
        if b.arrived.is_empty() {
            b.count = count;
            b.joined = vec![0; slots];
        }
        b.arrived.push(w);
        for (j, x) in b.joined.iter_mut().zip(&self.vc[w]) {
            *j = (*j).max(*x);
        }
        if waits {
            b.waiting.push(w);
            self.sync[w].at_bar = Some(id);
        }
        self.bar_try_complete(bi);
    }

    /// Completes barrier `id` (`16 * block + id` in the block) when its count
    /// (or every live warp of its block) has arrived: the arrivals' clocks are
    /// joined and each warp goes on.
    fn bar_try_complete(&mut self, id: usize) {
        let b = &self.bars[id];
        if b.arrived.is_empty() {
            return;
        }
        let r = id / 16;
        let complete = match b.count {
            Some(n) => 32 * b.arrived.len() >= n as usize,
            None => {
                b.arrived.len() >= (0..self.nwarps).filter(|&v| self.warp_block(v) == r && !self.warps[v].done).count()
            }
        };
        if !complete {
            return;
        }
        let b = &mut self.bars[id];
        b.arrived.clear();
        b.aligned_site = None;
        b.completed += 1;
        let (waiting, joined) = (std::mem::take(&mut b.waiting), std::mem::take(&mut b.joined));
        let any = std::mem::take(&mut b.any);
        for &a in &waiting {
            self.sync[a].vote = Some(any);
            for (x, j) in self.vc[a].iter_mut().zip(&joined) {
                *x = (*x).max(*j);
            }
            self.vc[a][a] += 1;
            self.sync[a].at_bar = None;
            self.sync[a].bar_released = true;
        }
    }

    /// `barrier.cluster.arrive.release.aligned` by the `on` lanes of warp `w`
    /// (all of its lanes that have not exited): the warp's clock is
    /// released into the barrier; it goes on at once.
    fn cluster_arrive(&mut self, w: usize, on: u32) -> Step {
        if on == 0 {
            return Step::Done;
        }
        self.cluster_aligned(w, on, "barrier.cluster.arrive");
        assert!(
            self.sync[w].cluster.is_none(),
            "{} arrives at the cluster barrier again before its barrier.cluster.wait",
            self.warp_name(w)
        );
        let slots = self.vc[w].len();
        let cb = &mut self.cbar;
        if cb.arrived.is_empty() {
            cb.joined = vec![0; slots];
        }
        cb.arrived.push(w);
        for (j, x) in cb.joined.iter_mut().zip(&self.vc[w]) {
            *j = (*j).max(*x);
        }
        self.sync[w].cluster = Some(cb.completed);
        self.vc[w][w] += 1;
        self.steps += on.count_ones() as u64;
        self.cluster_try_complete();
        Step::Done
    }

    /// `barrier.cluster.wait.acquire.aligned` by the `on` lanes of warp `w`:
    /// done (acquiring every arrival of the instance) once the instance it
    /// arrived at has completed.
    fn cluster_wait(&mut self, w: usize, on: u32) -> Step {
        if on == 0 {
            return Step::Done;
        }
        self.cluster_aligned(w, on, "barrier.cluster.wait");
        let Some(n) = self.sync[w].cluster else {
            panic!(
                "{} waits on the cluster barrier without arriving first (barrier.cluster.arrive before barrier.cluster.wait)",
                self.warp_name(w)
            )
        };
        if self.cbar.completed <= n {
            return Step::Blocked;
        }
        // Instance n + 1 needs this warp's arrival: the last one is n.
        for (x, d) in self.vc[w].iter_mut().zip(&self.cbar.done_vc) {
            *x = (*x).max(*d);
        }
        self.vc[w][w] += 1;
        self.sync[w].cluster = None;
        self.steps += on.count_ones() as u64;
        Step::Done
    }

    /// `.aligned`: every lane of warp `w` that has not exited executes it.
    fn cluster_aligned(&self, w: usize, on: u32, what: &str) {
        let live = self.warps[w].lanes & !self.warps[w].exited;
        assert_eq!(
            on,
            live,
            "{what}.aligned in divergent code: {} executes it with lanes {on:#x} of {live:#x}",
            self.warp_name(w)
        );
    }

    /// Completes the cluster barrier's instance once every warp that has
    /// not finished has arrived.
    fn cluster_try_complete(&mut self) {
        let cb = &self.cbar;
        if cb.arrived.is_empty() || (0..self.nwarps).any(|v| !self.warps[v].done && !cb.arrived.contains(&v)) {
            return;
        }
        let cb = &mut self.cbar;
        cb.arrived.clear();
        cb.completed += 1;
        cb.done_vc = std::mem::take(&mut cb.joined);
    }

    /// The `mbarrier.try_wait.parity` loop of the `on` lanes of warp `w`:
    /// done (acquiring the completed phases) when every lane's phase has
    /// completed.
    fn mbar_wait_warp(&mut self, w: usize, addr: &Address, parity: &Operand, pred: Reg, on: u32) -> Step {
        if on == 0 {
            return Step::Done;
        }
        let mut waits: Vec<(usize, u64)> = Vec::new();
        for l in lanes(on) {
            let t = 32 * w + l;
            let a = self.mbar_at(t, addr, "waits on");
            let p = self.val(t, parity) & 1;
            if !waits.contains(&(a, p)) {
                waits.push((a, p));
            }
        }
        for &(a, p) in &waits {
            if !self.mbar_wait(a, p) {
                return Step::Blocked;
            }
        }
        for &(a, _) in &waits {
            let done = &self.hopper.mbarriers[&a].done_vc;
            for (x, d) in self.vc[w].iter_mut().zip(done) {
                *x = (*x).max(*d);
            }
        }
        self.vc[w][w] += 1;
        for l in lanes(on) {
            self.regs[32 * w + l][pred.0 as usize] = 1;
        }
        self.steps += on.count_ones() as u64;
        Step::Done
    }

    /// A warpgroup-collective instruction: the warpgroup's four warps meet
    /// at statement `s`; the last to arrive runs it for all 128 threads.
    fn collective(&mut self, w: usize, s: &'f Stmt, inst: &Inst, mask: u32) -> Step {
        if std::mem::take(&mut self.sync[w].collective_done) {
            return Step::Done;
        }
        let arrived = self.sync[w].collective.is_none();
        self.sync[w].collective = Some((s, mask));
        let wg = w / 4;
        let members: Vec<usize> = (4 * wg..(4 * wg + 4).min(self.nwarps)).collect();
        let mut on = 0;
        for &v in &members {
            match self.sync[v].collective {
                Some((sv, m)) if std::ptr::eq(sv, s) => on += m.count_ones(),
                Some((sv, _)) => panic!(
                    "warpgroup {wg} diverges at warpgroup-collective instructions: warp {w} is at {inst:?}, warp {v} at {sv:?}"
                ),
                None => return if arrived { Step::Arrived } else { Step::Blocked },
            }
        }
        assert_eq!(on, 128, "warpgroup-collective {inst:?} with {on} of 128 threads of warpgroup {wg} active");
        // `setmaxnreg.inc` waits, the whole warpgroup at it, until the
        // block's pool holds what it takes (`regs.rs`).
        if self.setmaxnreg_short(wg, inst) > 0 {
            return if arrived { Step::Arrived } else { Step::Blocked };
        }
        self.steps += 128;
        self.warpgroup(wg, inst);
        for &v in &members {
            self.sync[v].collective = None;
            self.sync[v].collective_done = v != w;
        }
        Step::Done
    }

    /// Where every warp is and what it waits for.
    fn deadlock_report(&self) -> String {
        let mut out = String::from("deadlock: every live warp is blocked");
        if self.nblocks > 1 {
            let [x, y, z] = self.ctaid;
            let _ = write!(
                out,
                " in the cluster of blocks ctaid.x {x}..{} (ctaid.y {y}, ctaid.z {z}; block r: rank r, ctaid.x {x} + r)",
                x as usize + self.nblocks
            );
        }
        for (w, wp) in self.warps.iter().enumerate() {
            if wp.lanes == 0 {
                continue;
            }
            if wp.done {
                let _ = write!(out, "\n  {}: exited", self.warp_name(w));
                continue;
            }
            let Some(fr) = wp.frames.last() else { continue };
            // Each frame's statement index (an enclosing frame has moved past its `if`/`for`).
            let mut path = Vec::new();
            let top = wp.frames.len() - 1;
            for (i, f) in wp.frames.iter().enumerate() {
                let kind = match f.kind {
                    Kind::Body => "body",
                    Kind::Then { .. } => "then",
                    Kind::Else => "else",
                    Kind::Loop { .. } => "for",
                };
                path.push(format!("{kind}[{}]", if i == top { f.pc } else { f.pc - 1 }));
            }
            let (s, mask) = (&fr.body[fr.pc], fr.mask);
            let _ = write!(out, "\n  {} (lanes {mask:#010x}) at {}: ", self.warp_name(w), path.join(" > "));
            let Stmt::Inst { inst, .. } = s else {
                let _ = write!(out, "{s:?}");
                continue;
            };
            match inst {
                Inst::MbarWait { addr, parity, .. } => {
                    let mut seen = Vec::new();
                    for l in lanes(mask) {
                        let t = 32 * w + l;
                        let a = self.sbase(self.block_of(t)) + self.own_shared(t, self.addr(t, addr));
                        let p = self.val(t, parity) & 1;
                        if seen.contains(&(a, p)) {
                            continue;
                        }
                        seen.push((a, p));
                        let m = &self.hopper.mbarriers[&a];
                        let tma = self.hopper.tma_in_flight(a);
                        let _ = write!(
                            out,
                            "{} waits forever on the mbarrier at {} for parity {p} (phase {}, {} of {} arrivals and {} tx bytes pending, {tma} TMA loads in flight on it); ",
                            self.thread_name(t),
                            self.byte_name(a),
                            m.phase,
                            m.pending,
                            m.expected,
                            m.tx
                        );
                    }
                }
                Inst::BarSync | Inst::NamedBarSync { .. } | Inst::BarrierSync { .. } | Inst::BarRedOr { .. } => {
                    let id = match inst {
                        Inst::NamedBarSync { id, .. } | Inst::BarrierSync { id, .. } => *id,
                        Inst::BarRedOr { id, .. } => self.sync[w].at_bar.unwrap_or_else(|| self.val(32 * w, id) as u32),
                        _ => self.f.barrier_threads.is_some() as u32,
                    };
                    let b = &self.bars[16 * self.warp_block(w) + id as usize];
                    let want = match b.count {
                        Some(n) => format!("{n} threads"),
                        None => "every thread that has not exited".to_string(),
                    };
                    let _ = write!(
                        out,
                        "waits at barrier {id} for {want}; arrived: warps {} ({} threads)",
                        self.warp_list(&b.arrived),
                        32 * b.arrived.len()
                    );
                }
                Inst::ClusterWait => {
                    let missing: Vec<String> = (0..self.nwarps)
                        .filter(|&v| !self.warps[v].done && !self.cbar.arrived.contains(&v))
                        .map(|v| self.warp_name(v))
                        .collect();
                    let _ = write!(
                        out,
                        "waits at the cluster barrier (barrier.cluster.wait) for every thread of the cluster's {} blocks that has not exited; not arrived: {}",
                        self.nblocks,
                        missing.join(", ")
                    );
                }
                _ => {
                    let wg = w / 4;
                    let where_: Vec<String> = (4 * wg..(4 * wg + 4).min(self.nwarps))
                        .map(|v| match (&self.sync[v].collective, self.warps[v].done) {
                            (_, true) => format!("{} exited", self.warp_name(v)),
                            (Some(_), _) => format!("{} here", self.warp_name(v)),
                            (None, _) => format!("{} elsewhere", self.warp_name(v)),
                        })
                        .collect();
                    let _ = write!(
                        out,
                        "waits at warpgroup-collective {} for warpgroup {wg} ({})",
                        inst.opcode(),
                        where_.join(", ")
                    );
                    if let Inst::SetMaxNreg { inc: true, count } = inst {
                        if self.setmaxnreg_short(wg, inst) > 0 {
                            let _ = write!(out, "; {}", self.setmaxnreg_report(wg, *count));
                        }
                    }
                }
            }
        }
        out
    }
}

use std::fmt::Write;

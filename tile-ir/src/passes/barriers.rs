//! Barrier insertion on the Thread IR.
//!
//! Expects a Thread IR body whose shared-memory instructions name their
//! [`Region`], where non-uniform `If`/`For` statements contain no barriers,
//! and where every explicit `bar.sync` sits in uniform code.
//!
//! Guarantees a `bar.sync 0` (placed in uniform code) between a write to a
//! region and a later read or write of it (RAW, WAW), and between a read and a
//! later write (WAR), including dependences carried around uniform loop
//! back-edges; no barrier is added where no such dependence exists.
//! Non-uniform control flow is treated as one compound access (a barrier
//! cannot be placed inside it), so a barrier goes before it when needed.
//! Dependences are tracked per region, conservatively assuming that any two
//! accesses of a region may touch the same bytes from different threads.
//!
//! A `cp.async` is a write of its region whose data lands only when a
//! `cp.async.wait_group` retires its group. A barrier after such a write
//! resolves a dependence only if a wait came first: when a barrier is needed
//! against a cp.async write that no `wait_group 0` has retired yet, the pass
//! puts `cp.async.commit_group; cp.async.wait_group 0` before it. (The
//! lowering already waits after every copy outside pipelined loops, and the
//! pipeline schedule orders its stage refills itself, so this is a safety
//! net.) `wait_group N` with `N > 0` is taken to retire nothing.
//!
//! A `wgmma` reads its shared operands (the [`Region`]s it names) through
//! the async proxy. It counts as a read of them from the instruction to the
//! `wgmma.wait_group N` that retires its commit group (all but the newest
//! `N`): a barrier between the two does not order a later write after it
//! (a gemm left in flight past a barrier: a write after the wait gets a
//! barrier of its own after the wait). A generic-proxy write
//! (`st.shared`, a landed `cp.async`) becomes visible to the async proxy only
//! through `fence.proxy.async.shared::cta` executed by the writing thread
//! before the barrier that orders it before the wgmma. So, in a function
//! with such wgmmas, every barrier (inserted or explicit) that has generic
//! shared writes pending before it (since the previous barrier, or
//! cp.asyncs still in flight) gets a `fence.proxy.async` right before it,
//! after the cp.async wait when the pass adds one. This is conservative
//! on purpose: the stage refills of a pipelined loop write under region ids
//! of their own, so region ids alone cannot tell which writes a wgmma will
//! read; a fence where none is needed only costs its issue.

use crate::thread_ir::{Inst, Region, Space, Stmt};
use std::collections::BTreeSet;

#[derive(Clone, Default, PartialEq, Eq, Debug)]
struct State {
    reads: BTreeSet<Region>,
    writes: BTreeSet<Region>,
    /// Regions written by cp.asyncs not yet retired by a `wait_group 0`.
    in_flight: BTreeSet<Region>,
    /// Regions read by wgmmas not yet retired by a `wgmma.wait_group`, by
    /// group (oldest first; the last one the wgmmas not yet committed):
    /// still being read across a barrier, they become reads pending since
    /// the last barrier at the wait that retires their group (a gemm whose
    /// wait is left past a barrier: a later write needs a barrier after the
    /// wait, not the one before it).
    wgmma_groups: Vec<BTreeSet<Region>>,
    /// Of an access set: the regions its wgmmas read (conflicting at their
    /// issue as reads do), and the reads of earlier wgmmas its waits retired.
    issued: BTreeSet<Region>,
    retired: BTreeSet<Region>,
}

impl State {
    fn union(&mut self, o: &State) {
        self.reads.extend(o.reads.iter().copied());
        self.writes.extend(o.writes.iter().copied());
        self.in_flight.extend(o.in_flight.iter().copied());
        // Groups aligned on the newest (the ones a `wait_group N` keeps).
        let n = self.wgmma_groups.len().max(o.wgmma_groups.len());
        let pad = |g: &[BTreeSet<Region>]| {
            let mut v = vec![BTreeSet::new(); n - g.len()];
            v.extend(g.iter().cloned());
            v
        };
        let (mut a, b) = (pad(&self.wgmma_groups), pad(&o.wgmma_groups));
        for (x, y) in a.iter_mut().zip(b) {
            x.extend(y);
        }
        // (A loop that never waits would grow them without end: the oldest merge.)
        while a.len() > 8 {
            let g = a.remove(0);
            a[0].extend(g);
        }
        self.wgmma_groups = a;
    }
    /// The sequential composition of this state and access set `acc`
    /// (whose wgmma groups started from this state's).
    fn then(&mut self, acc: State) {
        self.reads.extend(acc.reads);
        self.reads.extend(acc.retired);
        self.writes.extend(acc.writes);
        self.in_flight.extend(acc.in_flight);
        self.wgmma_groups = acc.wgmma_groups;
    }
    /// The last group is the open one (wgmmas not yet committed).
    fn open_group(&mut self) -> &mut BTreeSet<Region> {
        if self.wgmma_groups.is_empty() {
            self.wgmma_groups.push(BTreeSet::new());
        }
        self.wgmma_groups.last_mut().unwrap()
    }
    fn wgmma_issue(&mut self, regions: &[Region]) {
        self.open_group().extend(regions.iter().copied());
        self.issued.extend(regions.iter().copied());
    }
    /// `wgmma.commit_group`: the open group closes (a new one opens).
    fn wgmma_commit(&mut self) {
        self.open_group();
        self.wgmma_groups.push(BTreeSet::new());
    }
    /// `wgmma.wait_group pending`: the reads of every committed group but
    /// the newest `pending` are done.
    fn wgmma_wait(&mut self, pending: usize) {
        self.open_group();
        let cut = (self.wgmma_groups.len() - 1).saturating_sub(pending);
        for g in self.wgmma_groups.drain(..cut) {
            self.retired.extend(g);
        }
    }
    /// After a barrier (cp.asyncs and wgmmas still in flight stay in flight).
    fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
    /// Whether a barrier against `acc` must first wait for cp.asyncs: an
    /// access of `acc` conflicts with an in-flight cp.async write.
    fn needs_wait(&self, acc: &State) -> bool {
        let clash = |a: &Region| self.in_flight.iter().any(|b| b.id == a.id && b.op != a.op);
        acc.reads.iter().chain(&acc.issued).chain(&acc.writes).any(clash)
    }
    /// Whether an access set `acc` (reads, writes) conflicts with pending accesses.
    fn conflicts(&self, acc: &State) -> bool {
        let clash = |a: &Region, set: &BTreeSet<Region>| set.iter().any(|b| b.id == a.id && b.op != a.op);
        // An in-flight cp.async write stays pending across barriers.
        // (A wgmma's reads conflict when it issues and when it is retired:
        // a barrier between the two orders nothing after them.)
        acc.reads.iter().chain(&acc.issued).any(|r| clash(r, &self.writes) || clash(r, &self.in_flight))
            || acc.writes.iter().any(|w| {
                clash(w, &self.writes)
                    || clash(w, &self.reads)
                    || clash(w, &self.in_flight)
                    || self.wgmma_groups.iter().any(|g| clash(w, g))
            })
    }
}

/// Inserts the barriers that shared-memory dependences need (and the proxy
/// fences that wgmma reads need, see the module doc).
pub fn insert_barriers(body: &mut Vec<Stmt>) {
    let mut st = State::default();
    let cx = Cx { proxy_fences: reads_through_async_proxy(body) };
    walk(body, &mut st, true, &cx);
}

/// What the walk needs to know about the whole function.
struct Cx {
    /// Some instruction reads shared memory through the async proxy (a
    /// wgmma with regions): barriers after generic writes get a proxy fence.
    proxy_fences: bool,
}

fn reads_through_async_proxy(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Inst { inst: Inst::Wgmma { regions, .. }, .. } => !regions.is_empty(),
        Stmt::Inst { .. } | Stmt::Comment(_) => false,
        Stmt::If { then, otherwise, .. } => reads_through_async_proxy(then) || reads_through_async_proxy(otherwise),
        Stmt::For { body, .. } => reads_through_async_proxy(body),
    })
}

/// `fence.proxy.async` before a barrier, when generic shared writes are
/// pending (written since the last barrier, or cp.asyncs in flight).
fn proxy_fence(st: &State, cx: &Cx, out: &mut Vec<Stmt>, apply: bool) {
    if apply && cx.proxy_fences && !(st.writes.is_empty() && st.in_flight.is_empty()) {
        out.push(Stmt::Inst { inst: Inst::FenceProxyAsync, guard: None });
    }
}

/// The shared accesses of a statement (recursively).
fn accesses(s: &Stmt, acc: &mut State) {
    match s {
        Stmt::Inst { inst: Inst::Ld { space: Space::Shared, region: Some(r), .. }, .. } => {
            acc.reads.insert(*r);
        }
        Stmt::Inst { inst: Inst::St { space: Space::Shared, region: Some(r), .. }, .. } => {
            acc.writes.insert(*r);
        }
        Stmt::Inst { inst: Inst::CpAsync { region: Some(r), .. }, .. } => {
            acc.writes.insert(*r);
            acc.in_flight.insert(*r);
        }
        Stmt::Inst { inst: Inst::Ldmatrix { region: Some(r), .. }, .. } => {
            acc.reads.insert(*r);
        }
        Stmt::Inst { inst: Inst::Wgmma { regions, .. }, .. } => acc.wgmma_issue(regions),
        Stmt::Inst { inst: Inst::WgmmaCommit, .. } => acc.wgmma_commit(),
        Stmt::Inst { inst: Inst::WgmmaWait { pending }, .. } => acc.wgmma_wait(*pending as usize),
        Stmt::Inst { .. } | Stmt::Comment(_) => {}
        Stmt::If { then, otherwise, .. } => {
            for x in then.iter().chain(otherwise) {
                accesses(x, acc);
            }
        }
        Stmt::For { body, .. } => {
            for x in body {
                accesses(x, acc);
            }
        }
    }
}

fn bar() -> Stmt {
    Stmt::Inst { inst: Inst::BarSync, guard: None }
}

/// Emits the barrier that `acc` needs after `st` (preceded by a cp.async
/// wait when an in-flight cp.async write is involved) and updates `st`.
fn barrier_before(acc: &State, st: &mut State, out: &mut Vec<Stmt>, apply: bool, cx: &Cx) {
    let mut fence_state = st.clone();
    if st.needs_wait(acc) {
        if apply {
            out.push(Stmt::Inst { inst: Inst::CpAsyncCommit, guard: None });
            out.push(Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, guard: None });
        }
        // The writes of the retired cp.asyncs are still pending generic writes.
        fence_state.writes.extend(st.in_flight.iter().copied());
        st.in_flight.clear();
    }
    proxy_fence(&fence_state, cx, out, apply);
    if apply {
        out.push(bar());
    }
    st.clear();
}

/// Walks `body` from state `st`; with `apply`, inserts the barriers.
fn walk(body: &mut Vec<Stmt>, st: &mut State, apply: bool, cx: &Cx) {
    let old = std::mem::take(body);
    let mut out = Vec::with_capacity(old.len());
    for mut s in old {
        match &mut s {
            Stmt::Inst { inst: Inst::BarSync, .. } => {
                proxy_fence(st, cx, &mut out, apply);
                st.clear()
            }
            Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, guard: None } => {
                // The landed bytes are generic writes the next barrier's
                // proxy fence must cover, even when a barrier came between
                // their issue and this wait (and cleared `writes`).
                let landed = std::mem::take(&mut st.in_flight);
                st.writes.extend(landed);
            }
            Stmt::If { uniform: true, then, otherwise, .. } => {
                let mut a = st.clone();
                walk(then, &mut a, apply, cx);
                let mut b = st.clone();
                walk(otherwise, &mut b, apply, cx);
                a.union(&b);
                *st = a;
            }
            Stmt::For { uniform: true, body, .. } => {
                // A dependence on code before the loop is resolved once, before
                // it, rather than on every iteration inside it.
                let mut acc = State::default();
                for x in body.iter() {
                    accesses(x, &mut acc);
                }
                if st.conflicts(&acc) {
                    barrier_before(&acc, st, &mut out, apply, cx);
                }
                // Fixpoint of the state at the loop head (entry ∪ back-edge).
                let mut head = st.clone();
                loop {
                    let mut s2 = head.clone();
                    let mut copy = body.clone();
                    walk(&mut copy, &mut s2, false, cx);
                    let mut next = head.clone();
                    next.union(&s2);
                    if next == head {
                        break;
                    }
                    head = next;
                }
                let mut s2 = head.clone();
                walk(body, &mut s2, apply, cx);
                *st = head;
            }
            other => {
                // (Its waits may retire wgmmas issued before it.)
                let mut acc = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
                accesses(other, &mut acc);
                if st.conflicts(&acc) {
                    barrier_before(&acc, st, &mut out, apply, cx);
                }
                st.then(acc);
            }
        }
        out.push(s);
    }
    *body = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_ir::{Address, Operand, Reg};

    fn next_op() -> u32 {
        static OP: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        OP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
    fn st(r: u32) -> Stmt {
        Stmt::Inst {
            inst: Inst::St {
                space: Space::Shared,
                ty: "f32",
                srcs: vec![Operand::Reg(Reg(0))],
                addr: Address { base: Operand::Imm(0), offset: 0 },
                region: Some(Region { id: r, op: next_op() }),
            },
            guard: None,
        }
    }
    fn ld(r: u32) -> Stmt {
        Stmt::Inst {
            inst: Inst::Ld {
                space: Space::Shared,
                ty: "f32",
                dsts: vec![Reg(0)],
                addr: Address { base: Operand::Imm(0), offset: 0 },
                region: Some(Region { id: r, op: next_op() }),
            },
            guard: None,
        }
    }
    fn count(b: &[Stmt]) -> usize {
        b.iter()
            .map(|s| match s {
                Stmt::Inst { inst: Inst::BarSync, .. } => 1,
                Stmt::If { then, otherwise, .. } => count(then) + count(otherwise),
                Stmt::For { body, .. } => count(body),
                _ => 0,
            })
            .sum()
    }
    fn lp(body: Vec<Stmt>) -> Stmt {
        Stmt::For { var: Reg(1), start: Operand::Imm(0), end: Operand::Imm(4), exit: Reg(2), uniform: true, body }
    }

    #[test]
    fn raw_war_and_independent_regions() {
        let mut b = vec![st(0), ld(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 1);
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::BarSync, .. }));
        let mut b = vec![st(0), ld(1), st(2)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 0);
        let mut b = vec![ld(0), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 1);
        let mut b = vec![ld(0), ld(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 0);
        // Accesses of one region by one collective operation never conflict.
        let one = Region { id: 7, op: 1 };
        let mk = |store: bool| Stmt::Inst {
            inst: if store {
                Inst::St {
                    space: Space::Shared,
                    ty: "f32",
                    srcs: vec![Operand::Reg(Reg(0))],
                    addr: Address { base: Operand::Imm(0), offset: 0 },
                    region: Some(one),
                }
            } else {
                Inst::Ld {
                    space: Space::Shared,
                    ty: "f32",
                    dsts: vec![Reg(0)],
                    addr: Address { base: Operand::Imm(0), offset: 0 },
                    region: Some(one),
                }
            },
            guard: None,
        };
        let mut b = vec![mk(true), mk(true), mk(false)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 0);
    }

    #[test]
    fn loop_back_edge_needs_a_barrier() {
        // for { write S; read S }: RAW inside, WAR across the back-edge.
        let mut b = vec![lp(vec![st(0), ld(0)])];
        insert_barriers(&mut b);
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(count(body), 2, "{body:?}");
        assert!(matches!(body[0], Stmt::Inst { inst: Inst::BarSync, .. }));
        // Reads only: nothing.
        let mut b = vec![st(0), lp(vec![ld(0)])];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 1);
        let Stmt::For { body, .. } = &b[2] else { panic!() };
        assert_eq!(count(body), 0);
    }

    fn cp(r: u32) -> Stmt {
        Stmt::Inst {
            inst: Inst::CpAsync {
                bytes: 16,
                dst: Address { base: Operand::Imm(0), offset: 0 },
                src: Address { base: Operand::Imm(0), offset: 0 },
                src_bytes: Operand::Imm(16),
                region: Some(Region { id: r, op: next_op() }),
            },
            guard: None,
        }
    }
    fn commit() -> Stmt {
        Stmt::Inst { inst: Inst::CpAsyncCommit, guard: None }
    }
    fn wait(n: u32) -> Stmt {
        Stmt::Inst { inst: Inst::CpAsyncWait { pending: n }, guard: None }
    }
    fn waits(b: &[Stmt]) -> usize {
        b.iter().filter(|s| matches!(s, Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, .. })).count()
    }

    #[test]
    fn cp_async_writes_need_a_wait_before_the_barrier() {
        // Waited for by the lowering: only the barrier is added, after the wait.
        let mut b = vec![cp(0), commit(), wait(0), ld(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 1);
        assert!(matches!(b[3], Stmt::Inst { inst: Inst::BarSync, .. }), "{b:?}");
        assert_eq!(waits(&b), 1);
        // Not waited for: the pass commits and waits before the barrier.
        let mut b = vec![cp(0), ld(0)];
        insert_barriers(&mut b);
        assert_eq!(b.len(), 5, "{b:?}");
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::CpAsyncCommit, .. }));
        assert!(matches!(b[2], Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, .. }));
        assert!(matches!(b[3], Stmt::Inst { inst: Inst::BarSync, .. }));
        // A barrier alone does not land a cp.async; `wait_group 1` retires nothing.
        let mut b = vec![cp(0), commit(), wait(1), Stmt::Inst { inst: Inst::BarSync, guard: None }, ld(0)];
        insert_barriers(&mut b);
        assert_eq!(waits(&b), 1, "{b:?}");
        assert_eq!(count(&b), 2);
        // A read before the cp.async (WAR) needs a barrier but no wait.
        let mut b = vec![ld(0), cp(0), commit(), wait(0)];
        insert_barriers(&mut b);
        assert_eq!((count(&b), waits(&b)), (1, 1));
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::BarSync, .. }));
        // Other regions are unaffected.
        let mut b = vec![cp(0), ld(1)];
        insert_barriers(&mut b);
        assert_eq!((count(&b), waits(&b)), (0, 0));
    }

    #[test]
    fn cp_async_in_a_loop_is_waited_for_around_the_back_edge() {
        // for { cp S; read S }: the wait + barrier go before the read; the
        // back-edge WAR (read, then next iteration's cp) needs a barrier too.
        let mut b = vec![lp(vec![cp(0), ld(0)])];
        insert_barriers(&mut b);
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(count(body), 2, "{body:?}");
        assert_eq!(waits(body), 1, "{body:?}");
    }

    #[test]
    fn divergent_blocks_get_barriers_outside() {
        let div = |x: Vec<Stmt>| Stmt::If { cond: Reg(3), negate: false, uniform: false, then: x, otherwise: vec![] };
        let mut b = vec![div(vec![st(0)]), div(vec![ld(0)])];
        insert_barriers(&mut b);
        assert_eq!(b.len(), 3);
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::BarSync, .. }));
    }

    fn wgmma(r: u32) -> Stmt {
        use crate::thread_ir::WgmmaA;
        Stmt::Inst {
            inst: Inst::Wgmma {
                n: 8,
                ab: "f16",
                d: vec![Reg(0); 4],
                a: WgmmaA::Desc(Operand::Reg(Reg(5))),
                b_desc: Operand::Reg(Reg(6)),
                scale_d: Operand::Imm(1),
                neg_a: false,
                neg_b: false,
                trans_a: false,
                trans_b: false,
                regions: vec![Region { id: r, op: next_op() }],
            },
            guard: None,
        }
    }
    fn is(s: &Stmt, want: &Inst) -> bool {
        matches!(s, Stmt::Inst { inst, .. } if std::mem::discriminant(inst) == std::mem::discriminant(want))
    }

    #[test]
    fn wgmma_reads_last_until_their_group_is_retired() {
        let bar = || Stmt::Inst { inst: Inst::BarSync, guard: None };
        let wg_commit = || Stmt::Inst { inst: Inst::WgmmaCommit, guard: None };
        let wg_wait = |n| Stmt::Inst { inst: Inst::WgmmaWait { pending: n }, guard: None };
        // A wgmma left in flight past an explicit barrier: the write after
        // its wait needs a barrier of its own, after the wait.
        let mut b = vec![wgmma(0), wg_commit(), bar(), wg_wait(0), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 2, "{b:?}");
        assert!(is(&b[3], &Inst::WgmmaWait { pending: 0 }) && is(&b[4], &Inst::BarSync), "{b:?}");
        // Retired before the barrier: that barrier orders the write.
        let mut b = vec![wgmma(0), wg_commit(), wg_wait(0), bar(), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 1, "{b:?}");
        // `wait_group 1` retires the older group only: region 0's write
        // after the explicit barrier needs none, region 1's needs one.
        let mut b = vec![wgmma(0), wg_commit(), wgmma(1), wg_commit(), bar(), wg_wait(1), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 2, "{b:?}");
        let mut b = vec![wgmma(0), wg_commit(), wgmma(1), wg_commit(), wg_wait(1), bar(), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 1, "{b:?}");
        // A write while the group is still in flight gets a barrier too
        // (the lowering waits first; this is the safety net).
        let mut b = vec![wgmma(0), wg_commit(), bar(), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 2, "{b:?}");
        // Retired inside a warpgroup's branch: still a read pending after it.
        let div = |x: Vec<Stmt>| Stmt::If { cond: Reg(3), negate: false, uniform: false, then: x, otherwise: vec![] };
        let mut b = vec![div(vec![wgmma(0), wg_commit()]), bar(), div(vec![wg_wait(0)]), st(0)];
        insert_barriers(&mut b);
        assert_eq!(count(&b), 2, "{b:?}");
    }

    #[test]
    fn wgmma_reads_get_barriers_and_proxy_fences() {
        // st S; wgmma reads S: fence.proxy.async, then the barrier.
        let mut b = vec![st(0), wgmma(0)];
        insert_barriers(&mut b);
        assert_eq!(b.len(), 4, "{b:?}");
        assert!(is(&b[1], &Inst::FenceProxyAsync) && is(&b[2], &Inst::BarSync));
        // wgmma reads S; st S: WAR barrier (no generic write pending: no fence).
        let mut b = vec![wgmma(0), st(0)];
        insert_barriers(&mut b);
        assert_eq!(b.len(), 3, "{b:?}");
        assert!(is(&b[1], &Inst::BarSync));
        // cp.async S (not waited for); wgmma: commit, wait 0, fence, barrier.
        let mut b = vec![cp(0), wgmma(0)];
        insert_barriers(&mut b);
        assert_eq!(b.len(), 6, "{b:?}");
        assert!(is(&b[1], &Inst::CpAsyncCommit) && is(&b[2], &Inst::CpAsyncWait { pending: 0 }));
        assert!(is(&b[3], &Inst::FenceProxyAsync) && is(&b[4], &Inst::BarSync));
        // An explicit barrier after generic writes gets the fence too (the
        // pipelined loop's `wait_group; bar.sync` before the stage is read).
        let mut b = vec![lp(vec![cp(9), commit(), wait(1), Stmt::Inst { inst: Inst::BarSync, guard: None }, wgmma(0)])];
        insert_barriers(&mut b);
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert!(is(&body[3], &Inst::FenceProxyAsync) && is(&body[4], &Inst::BarSync), "{body:?}");
        // Without wgmma reads, barriers get no fence.
        let mut b = vec![st(0), ld(0)];
        insert_barriers(&mut b);
        assert!(!b.iter().any(|s| is(s, &Inst::FenceProxyAsync)));
        // Wgmmas without regions (mbarrier-ordered, warp-specialized): no fence.
        let mut w = wgmma(0);
        if let Stmt::Inst { inst: Inst::Wgmma { regions, .. }, .. } = &mut w {
            regions.clear();
        }
        let mut b = vec![st(0), ld(0), w];
        insert_barriers(&mut b);
        assert!(!b.iter().any(|s| is(s, &Inst::FenceProxyAsync)), "{b:?}");
    }
}

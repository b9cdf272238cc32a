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
//! With the function's warpgroup predicates ([`Options::warpgroups`]), a
//! branch on one (warpgroup `w`'s statements) is walked as `w`'s code: a
//! dependence on another warpgroup's or every thread's accesses gets the
//! barrier of every thread before the branch, one whose both accesses are
//! `w`'s gets `w`'s own barrier (`bar.sync LOCAL_BARRIER + w, 128`) inside
//! it, before the access. `w`'s barrier orders `w`'s pending accesses
//! before its later ones only: they stay pending for the others. With two
//! warpgroups, the other passes as many barriers of its own in the branch's
//! `else` (compute-sanitizer's racecheck reported the epilogue's hand-over
//! between the warpgroups as a hazard when one warpgroup's threads had
//! passed more barriers than the other's).
//!
//! [`Options::rings`]: in a loop whose iterations each start a new round of
//! a ring (the warp-specialized consumers' loop), accesses of the ring's
//! regions made in earlier iterations are ordered before this iteration's
//! by the ring's mbarriers (every access of a stage follows its thread's
//! wait for the stage's full barrier, which the producer completes only
//! after every consumer released the stage's previous use): no barrier for
//! them. [`Options::sink`]: a barrier of every thread needed right after a
//! uniform `if` without `else` only because of what its branch wrote goes
//! at the end of the branch, when the path that skips it needs none.
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

use crate::thread_ir::{Inst, Reg, Region, Space, Stmt};
use std::collections::{BTreeMap, BTreeSet};

/// The first named barrier of the warpgroup-local barriers: warpgroup
/// `w`'s is `LOCAL_BARRIER + w` (0 is the block's, 1 the consumers', 2
/// and 3 the ping-pong's turns).
pub const LOCAL_BARRIER: u32 = 4;

/// Who makes an access: every thread, or the threads of one warpgroup (in
/// its branch); of a pending access, also: one warpgroup's, already
/// ordered before that warpgroup's later accesses by its own barrier (but
/// not before the others').
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Who {
    All,
    Warpgroup(u32),
    Ordered(u32),
}

/// Whether pending access `b` and later access `a` of the same region by
/// different collective operations need a barrier (`b` ordered by its
/// warpgroup's barrier: not against that warpgroup's accesses).
fn clash(a: &Access, b: &Access) -> bool {
    a.0.id == b.0.id && a.0.op != b.0.op && !matches!((a.1, b.1), (Who::Warpgroup(x), Who::Ordered(y)) if x == y)
}

/// A barrier: of every thread, or of one warpgroup's 128 threads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Need {
    Full,
    Local(u32),
}

type Access = (Region, Who);

#[derive(Clone, Default, PartialEq, Eq, Debug)]
struct State {
    reads: BTreeSet<Access>,
    writes: BTreeSet<Access>,
    /// Regions written by cp.asyncs not yet retired by a `wait_group 0`.
    in_flight: BTreeSet<Region>,
    /// Regions read by wgmmas not yet retired by a `wgmma.wait_group`, by
    /// issuer (a warpgroup's in its branch, or every thread's) and group
    /// (oldest first; the last one the wgmmas not yet committed): still
    /// being read across a barrier, they become reads pending since the
    /// last barrier at the wait that retires their group (a gemm whose
    /// wait is left past a barrier: a later write needs a barrier after the
    /// wait, not the one before it). A warpgroup's wait retires its own
    /// groups; a wait of every thread, every group.
    wgmma_groups: BTreeMap<Who, Vec<BTreeSet<Region>>>,
    /// Of an access set: the regions its wgmmas read (conflicting at their
    /// issue as reads do), and the reads of earlier wgmmas its waits retired.
    issued: BTreeSet<Access>,
    retired: BTreeSet<Access>,
}

impl State {
    fn union(&mut self, o: &State) {
        self.reads.extend(o.reads.iter().copied());
        self.writes.extend(o.writes.iter().copied());
        self.in_flight.extend(o.in_flight.iter().copied());
        let keys: BTreeSet<Who> = self.wgmma_groups.keys().chain(o.wgmma_groups.keys()).copied().collect();
        for k in keys {
            let mine = self.wgmma_groups.get(&k).cloned().unwrap_or_default();
            let theirs = o.wgmma_groups.get(&k).cloned().unwrap_or_default();
            // Groups aligned on the newest (the ones a `wait_group N` keeps).
            let n = mine.len().max(theirs.len());
            let pad = |g: &[BTreeSet<Region>]| {
                let mut v = vec![BTreeSet::new(); n - g.len()];
                v.extend(g.iter().cloned());
                v
            };
            let (mut a, b) = (pad(&mine), pad(&theirs));
            for (x, y) in a.iter_mut().zip(b) {
                x.extend(y);
            }
            // (A loop that never waits would grow them without end: the oldest merge.)
            while a.len() > 8 {
                let g = a.remove(0);
                a[0].extend(g);
            }
            self.wgmma_groups.insert(k, a);
        }
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
    /// `who`'s open group (wgmmas not yet committed).
    fn open_group(&mut self, who: Who) -> &mut BTreeSet<Region> {
        let groups = self.wgmma_groups.entry(who).or_default();
        if groups.is_empty() {
            groups.push(BTreeSet::new());
        }
        groups.last_mut().expect("pushed above")
    }
    fn wgmma_issue(&mut self, who: Who, regions: &[Region]) {
        self.open_group(who).extend(regions.iter().copied());
        self.issued.extend(regions.iter().map(|r| (*r, who)));
    }
    /// `wgmma.commit_group` by `who`: its open groups close (every thread:
    /// each warpgroup's).
    fn wgmma_commit(&mut self, who: Who) {
        let keys: Vec<Who> = match who {
            Who::All => self.wgmma_groups.keys().copied().chain([Who::All]).collect(),
            w => vec![w],
        };
        for k in keys {
            self.open_group(k);
            self.wgmma_groups.entry(k).or_default().push(BTreeSet::new());
        }
    }
    /// `wgmma.wait_group pending` by `who`: the reads of every committed
    /// group but the newest `pending` are done (a warpgroup's: of its own
    /// groups; every thread's: of every group).
    fn wgmma_wait(&mut self, who: Who, pending: usize) {
        let keys: Vec<Who> = match who {
            Who::All => self.wgmma_groups.keys().copied().collect(),
            w => vec![w],
        };
        for k in keys {
            self.open_group(k);
            let groups = self.wgmma_groups.entry(k).or_default();
            let cut = (groups.len() - 1).saturating_sub(pending);
            for g in groups.drain(..cut) {
                self.retired.extend(g.into_iter().map(|r| (r, k)));
            }
        }
    }
    /// After a barrier of every thread (cp.asyncs and wgmmas still in
    /// flight stay in flight).
    fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
    /// The accesses of regions `ids` made so far, ordered by other means.
    fn forget(&mut self, ids: &[u32]) {
        self.reads.retain(|a| !ids.contains(&a.0.id));
        self.writes.retain(|a| !ids.contains(&a.0.id));
        for groups in self.wgmma_groups.values_mut() {
            for g in groups.iter_mut() {
                g.retain(|r| !ids.contains(&r.id));
            }
        }
    }
    /// After warpgroup `w`'s barrier: its own accesses are ordered before
    /// its later ones (still pending for the others').
    fn order_warpgroup(&mut self, w: u32) {
        let order = |set: &mut BTreeSet<Access>| {
            *set =
                set.iter().map(|&(r, who)| (r, if who == Who::Warpgroup(w) { Who::Ordered(w) } else { who })).collect()
        };
        order(&mut self.reads);
        order(&mut self.writes);
    }
    /// The state without warpgroup `w`'s pending accesses (what `w`'s own
    /// barrier can order).
    fn without_warpgroup(&self, w: u32) -> State {
        let mut others = self.clone();
        let mine = |a: &Access| a.1 == Who::Warpgroup(w) || a.1 == Who::Ordered(w);
        others.reads.retain(|a| !mine(a));
        others.writes.retain(|a| !mine(a));
        others.wgmma_groups.remove(&Who::Warpgroup(w));
        others
    }
    /// Whether a barrier against `acc` must first wait for cp.asyncs: an
    /// access of `acc` conflicts with an in-flight cp.async write.
    fn needs_wait(&self, acc: &State) -> bool {
        let clash = |a: &Access| self.in_flight.iter().any(|b| b.id == a.0.id && b.op != a.0.op);
        acc.reads.iter().chain(&acc.issued).chain(&acc.writes).any(clash)
    }
    /// Whether an access set `acc` (reads, writes) conflicts with pending accesses.
    fn conflicts(&self, acc: &State) -> bool {
        // An in-flight cp.async write stays pending across barriers.
        // (A wgmma's reads conflict when it issues and when it is retired:
        // a barrier between the two orders nothing after them.)
        let in_flight = |a: &Access| self.in_flight.iter().any(|f| f.id == a.0.id && f.op != a.0.op);
        let groups =
            |a: &Access| self.wgmma_groups.iter().any(|(by, g)| g.iter().flatten().any(|r| clash(a, &(*r, *by))));
        acc.reads.iter().chain(&acc.issued).any(|r| self.writes.iter().any(|w| clash(r, w)) || in_flight(r))
            || acc
                .writes
                .iter()
                .any(|w| self.writes.iter().chain(&self.reads).any(|x| clash(w, x)) || in_flight(w) || groups(w))
    }
}

/// What [`insert_barriers`] may use beyond the code.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The predicates "this thread is in warpgroup `w`" and their `w`
    /// ([`crate::thread_ir::Function::warpgroup_preds`]): a dependence
    /// inside one warpgroup's branches gets that warpgroup's barrier
    /// (none: every thread's).
    pub warpgroups: Vec<(Reg, u32)>,
    /// Loops (by their variable) and the regions of the rings they turn
    /// ([`crate::thread_ir::Function::ring_loops`]).
    pub rings: Vec<(Reg, Vec<u32>)>,
    /// Whether a barrier may sink into the branch of a uniform `if` just
    /// before it (see the module doc).
    pub sink: bool,
}

/// Inserts the barriers that shared-memory dependences need (and the proxy
/// fences that wgmma reads need, see the module doc).
pub fn insert_barriers(body: &mut Vec<Stmt>, options: &Options) {
    let mut st = State::default();
    let cx = Cx {
        proxy_fences: reads_through_async_proxy(body),
        warpgroups: options.warpgroups.clone(),
        rings: options.rings.clone(),
        sink: options.sink,
    };
    walk(body, &mut st, true, &cx, Who::All);
}

/// What the walk needs to know about the whole function.
struct Cx {
    /// Some instruction reads shared memory through the async proxy (a
    /// wgmma with regions): barriers after generic writes get a proxy fence.
    proxy_fences: bool,
    /// The warpgroup predicates and their warpgroups.
    warpgroups: Vec<(Reg, u32)>,
    /// Loops (by their variable) and the regions of the rings they turn
    /// ([`crate::thread_ir::Function::ring_loops`]).
    rings: Vec<(Reg, Vec<u32>)>,
    /// Whether barriers may sink ([`Sink`]).
    sink: bool,
}

impl Cx {
    /// The warpgroup whose threads alone run `s`'s `then` (a branch on its
    /// predicate, not negated), seen from code of `who`.
    fn branch_of(&self, s: &Stmt, who: Who) -> Option<u32> {
        match s {
            Stmt::If { cond, negate: false, uniform: false, .. } if who == Who::All => {
                self.warpgroups.iter().find(|p| p.0 == *cond).map(|p| p.1)
            }
            _ => None,
        }
    }
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
/// pending (written since the last barrier by the threads it orders, or
/// cp.asyncs in flight).
fn proxy_fence(st: &State, cx: &Cx, out: &mut Vec<Stmt>, apply: bool, need: Need) {
    let writes = match need {
        Need::Full => !st.writes.is_empty(),
        Need::Local(w) => st.writes.iter().any(|a| a.1 == Who::Warpgroup(w)),
    };
    if apply && cx.proxy_fences && (writes || !st.in_flight.is_empty()) {
        out.push(Stmt::Inst { inst: Inst::FenceProxyAsync, guard: None });
    }
}

/// The shared accesses of a statement (recursively), made by `who` (a
/// branch on a warpgroup's predicate: that warpgroup's).
fn accesses(s: &Stmt, acc: &mut State, who: Who, cx: &Cx) {
    match s {
        Stmt::Inst { inst: Inst::Ld { space: Space::Shared, region: Some(r), .. }, .. } => {
            acc.reads.insert((*r, who));
        }
        Stmt::Inst { inst: Inst::St { space: Space::Shared, region: Some(r), .. }, .. } => {
            acc.writes.insert((*r, who));
        }
        Stmt::Inst { inst: Inst::CpAsync { region: Some(r), .. }, .. } => {
            acc.writes.insert((*r, who));
            acc.in_flight.insert(*r);
        }
        Stmt::Inst { inst: Inst::Ldmatrix { region: Some(r), .. }, .. } => {
            acc.reads.insert((*r, who));
        }
        Stmt::Inst { inst: Inst::Wgmma { regions, .. }, .. } => acc.wgmma_issue(who, regions),
        Stmt::Inst { inst: Inst::WgmmaCommit, .. } => acc.wgmma_commit(who),
        Stmt::Inst { inst: Inst::WgmmaWait { pending }, .. } => acc.wgmma_wait(who, *pending as usize),
        Stmt::Inst { .. } | Stmt::Comment(_) => {}
        Stmt::If { then, otherwise, .. } => {
            let inner = cx.branch_of(s, who).map_or(who, Who::Warpgroup);
            for x in then {
                accesses(x, acc, inner, cx);
            }
            for x in otherwise {
                accesses(x, acc, who, cx);
            }
        }
        Stmt::For { body, .. } => {
            for x in body {
                accesses(x, acc, who, cx);
            }
        }
    }
}

/// The barrier code of `who` can place: every thread's, or in a
/// warpgroup's branch, that warpgroup's (what conflicts with the others'
/// accesses got one of every thread before the branch).
fn placeable(who: Who) -> Need {
    match who {
        Who::All => Need::Full,
        Who::Warpgroup(w) | Who::Ordered(w) => Need::Local(w),
    }
}

fn local_bar(w: u32) -> Inst {
    Inst::NamedBarSync { id: LOCAL_BARRIER + w, threads: 128 }
}

fn bar(need: Need) -> Stmt {
    match need {
        Need::Full => Stmt::Inst { inst: Inst::BarSync, guard: None },
        Need::Local(w) => Stmt::Inst { inst: Inst::NamedBarSync { id: LOCAL_BARRIER + w, threads: 128 }, guard: None },
    }
}

/// Emits the barrier `need` that `acc` needs after `st` (preceded by a
/// cp.async wait when an in-flight cp.async write is involved) and updates
/// `st`.
fn barrier_before(acc: &State, st: &mut State, out: &mut Vec<Stmt>, apply: bool, cx: &Cx, need: Need) {
    let mut fence_state = st.clone();
    if st.needs_wait(acc) {
        if apply {
            out.push(Stmt::Inst { inst: Inst::CpAsyncCommit, guard: None });
            out.push(Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, guard: None });
        }
        // The writes of the retired cp.asyncs are still pending generic writes.
        fence_state.writes.extend(st.in_flight.iter().map(|r| (*r, Who::All)));
        st.in_flight.clear();
    }
    proxy_fence(&fence_state, cx, out, apply, need);
    if apply {
        out.push(bar(need));
    }
    match need {
        Need::Full => st.clear(),
        Need::Local(w) => st.order_warpgroup(w),
    }
}

/// A uniform `if` without `else` just emitted (at `out[at]`), whose
/// branch wrote what a later statement needs a barrier of every thread
/// against: the barrier can go at the end of the branch instead, where
/// only a run that took the branch pays for it (MLA's zeroing of the keys
/// past the sequence in the last block), when the path that skipped it
/// needs none.
struct Sink {
    at: usize,
    /// The state at the end of the branch, and where it was skipped.
    taken: State,
    skipped: State,
}

/// Sinks the barrier every thread needs before the next statement into the
/// branch of `sink` (see [`Sink`]) when the state after that, `st'`, no
/// longer `needs` one; then `st` is `st'`.
fn try_sink(
    sink: &Option<Sink>,
    out: &mut [Stmt],
    st: &mut State,
    apply: bool,
    cx: &Cx,
    needs: &dyn Fn(&State) -> bool,
    acc: &State,
) -> bool {
    let Some(sk) = sink.as_ref().filter(|_| cx.sink) else { return false };
    let mut taken = sk.taken.clone();
    let mut code = Vec::new();
    barrier_before(acc, &mut taken, &mut code, apply, cx, Need::Full);
    let mut after = taken;
    after.union(&sk.skipped);
    if needs(&after) {
        return false;
    }
    if let Some(Stmt::If { then, .. }) = out.get_mut(sk.at) {
        then.extend(code);
        *st = after;
        return true;
    }
    false
}

/// Walks `body` (code run by `who`) from state `st`; with `apply`, inserts
/// the barriers.
fn walk(body: &mut Vec<Stmt>, st: &mut State, apply: bool, cx: &Cx, who: Who) {
    let old = std::mem::take(body);
    let mut out = Vec::with_capacity(old.len());
    let mut sink: Option<Sink> = None;
    for mut s in old {
        let branch = cx.branch_of(&s, who);
        // Whether `s` leaves the state as it was (no shared access, wgmma
        // or barrier): a barrier may still sink past it.
        let mut effect = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
        accesses(&s, &mut effect, who, cx);
        let inert = effect == State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() }
            && !has_barrier(std::slice::from_ref(&s));
        let mut next_sink = None;
        match &mut s {
            Stmt::Inst { inst: Inst::BarSync, .. } => {
                proxy_fence(st, cx, &mut out, apply, Need::Full);
                st.clear()
            }
            Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, guard: None } => {
                // The landed bytes are generic writes the next barrier's
                // proxy fence must cover, even when a barrier came between
                // their issue and this wait (and cleared `writes`).
                let landed = std::mem::take(&mut st.in_flight);
                st.writes.extend(landed.into_iter().map(|r| (r, who)));
            }
            Stmt::If { then, otherwise, .. } if branch.is_some() => {
                // Warpgroup `w`'s branch: what conflicts with another's
                // accesses (or every thread's) gets a barrier of every
                // thread before it; what conflicts with `w`'s own, one of
                // `w`'s inside it, before the access. (The `else`, the
                // other warpgroups' code, is one compound access.)
                let w = branch.expect("matched");
                let mut acc = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
                for x in then.iter() {
                    accesses(x, &mut acc, Who::Warpgroup(w), cx);
                }
                let mut rest = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
                for x in otherwise.iter() {
                    accesses(x, &mut rest, who, cx);
                }
                let needs = |st: &State| st.without_warpgroup(w).conflicts(&acc) || st.conflicts(&rest);
                if needs(st) && !try_sink(&sink, &mut out, st, apply, cx, &needs, &acc) {
                    let mut both = acc.clone();
                    both.then(rest.clone());
                    barrier_before(&both, st, &mut out, apply, cx, Need::Full);
                }
                walk(then, st, apply, cx, Who::Warpgroup(w));
                // The other warpgroup (of two) syncs its own threads as
                // often, in the `else`: every consumer warp then passes as
                // many barriers (racecheck counts barrier epochs per CTA).
                let others: Vec<u32> = cx.warpgroups.iter().map(|p| p.1).filter(|&v| v != w).collect();
                if let ([v], true) = (&others[..], apply) {
                    let n = count_inst(then, &local_bar(w));
                    if let Stmt::If { otherwise, .. } = &mut s {
                        let mine = count_inst(otherwise, &local_bar(*v));
                        for _ in mine..n {
                            otherwise.insert(0, bar(Need::Local(*v)));
                        }
                    }
                }
                let Stmt::If { otherwise, .. } = &s else { unreachable!("matched above") };
                let mut rest = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
                for x in otherwise.iter() {
                    accesses(x, &mut rest, who, cx);
                }
                st.then(rest);
            }
            Stmt::If { uniform: true, then, otherwise, .. } => {
                let mut a = st.clone();
                walk(then, &mut a, apply, cx, who);
                let mut b = st.clone();
                walk(otherwise, &mut b, apply, cx, who);
                if otherwise.is_empty() {
                    next_sink = Some(Sink { at: out.len(), taken: a.clone(), skipped: b.clone() });
                }
                a.union(&b);
                *st = a;
            }
            Stmt::For { uniform: true, body, var, .. } => {
                // A dependence on code before the loop is resolved once, before
                // it, rather than on every iteration inside it.
                let mut acc = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
                for x in body.iter() {
                    accesses(x, &mut acc, who, cx);
                }
                if st.conflicts(&acc) {
                    barrier_before(&acc, st, &mut out, apply, cx, placeable(who));
                }
                // The rings' regions: earlier iterations' accesses are
                // ordered before this one's by the rings' mbarriers.
                let rings = cx.rings.iter().find(|r| r.0 == *var).map(|r| r.1.clone()).unwrap_or_default();
                // Fixpoint of the state at the loop head (entry ∪ back-edge).
                let mut head = st.clone();
                loop {
                    let mut s2 = head.clone();
                    s2.forget(&rings);
                    let mut copy = body.clone();
                    walk(&mut copy, &mut s2, false, cx, who);
                    let mut next = head.clone();
                    next.union(&s2);
                    if next == head {
                        break;
                    }
                    head = next;
                }
                let mut s2 = head.clone();
                s2.forget(&rings);
                walk(body, &mut s2, apply, cx, who);
                *st = head;
            }
            other => {
                // (Its waits may retire wgmmas issued before it.)
                let mut acc = State { wgmma_groups: st.wgmma_groups.clone(), ..State::default() };
                accesses(other, &mut acc, who, cx);
                if st.conflicts(&acc) {
                    let needs = |st: &State| st.conflicts(&acc);
                    if who != Who::All || !try_sink(&sink, &mut out, st, apply, cx, &needs, &acc) {
                        barrier_before(&acc, st, &mut out, apply, cx, placeable(who));
                    }
                }
                st.then(acc);
            }
        }
        out.push(s);
        if next_sink.is_some() || !inert {
            sink = next_sink;
        }
    }
    *body = out;
}

/// The instructions `want` in `body` (recursively).
fn count_inst(body: &[Stmt], want: &Inst) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Inst { inst, .. } => usize::from(inst == want),
            Stmt::Comment(_) => 0,
            Stmt::If { then, otherwise, .. } => count_inst(then, want) + count_inst(otherwise, want),
            Stmt::For { body, .. } => count_inst(body, want),
        })
        .sum()
}

/// Whether `body` has a barrier instruction (a sunk barrier may not pass it).
fn has_barrier(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Inst { inst, .. } => inst.is_barrier(),
        Stmt::Comment(_) => false,
        Stmt::If { then, otherwise, .. } => has_barrier(then) || has_barrier(otherwise),
        Stmt::For { body, .. } => has_barrier(body),
    })
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
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 1);
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::BarSync, .. }));
        let mut b = vec![st(0), ld(1), st(2)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 0);
        let mut b = vec![ld(0), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 1);
        let mut b = vec![ld(0), ld(0)];
        insert_barriers(&mut b, &Options::default());
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
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 0);
    }

    #[test]
    fn loop_back_edge_needs_a_barrier() {
        // for { write S; read S }: RAW inside, WAR across the back-edge.
        let mut b = vec![lp(vec![st(0), ld(0)])];
        insert_barriers(&mut b, &Options::default());
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(count(body), 2, "{body:?}");
        assert!(matches!(body[0], Stmt::Inst { inst: Inst::BarSync, .. }));
        // Reads only: nothing.
        let mut b = vec![st(0), lp(vec![ld(0)])];
        insert_barriers(&mut b, &Options::default());
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
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 1);
        assert!(matches!(b[3], Stmt::Inst { inst: Inst::BarSync, .. }), "{b:?}");
        assert_eq!(waits(&b), 1);
        // Not waited for: the pass commits and waits before the barrier.
        let mut b = vec![cp(0), ld(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(b.len(), 5, "{b:?}");
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::CpAsyncCommit, .. }));
        assert!(matches!(b[2], Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, .. }));
        assert!(matches!(b[3], Stmt::Inst { inst: Inst::BarSync, .. }));
        // A barrier alone does not land a cp.async; `wait_group 1` retires nothing.
        let mut b = vec![cp(0), commit(), wait(1), Stmt::Inst { inst: Inst::BarSync, guard: None }, ld(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(waits(&b), 1, "{b:?}");
        assert_eq!(count(&b), 2);
        // A read before the cp.async (WAR) needs a barrier but no wait.
        let mut b = vec![ld(0), cp(0), commit(), wait(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!((count(&b), waits(&b)), (1, 1));
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::BarSync, .. }));
        // Other regions are unaffected.
        let mut b = vec![cp(0), ld(1)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!((count(&b), waits(&b)), (0, 0));
    }

    #[test]
    fn cp_async_in_a_loop_is_waited_for_around_the_back_edge() {
        // for { cp S; read S }: the wait + barrier go before the read; the
        // back-edge WAR (read, then next iteration's cp) needs a barrier too.
        let mut b = vec![lp(vec![cp(0), ld(0)])];
        insert_barriers(&mut b, &Options::default());
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(count(body), 2, "{body:?}");
        assert_eq!(waits(body), 1, "{body:?}");
    }

    #[test]
    fn divergent_blocks_get_barriers_outside() {
        let div = |x: Vec<Stmt>| Stmt::If { cond: Reg(3), negate: false, uniform: false, then: x, otherwise: vec![] };
        let mut b = vec![div(vec![st(0)]), div(vec![ld(0)])];
        insert_barriers(&mut b, &Options::default());
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
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 2, "{b:?}");
        assert!(is(&b[3], &Inst::WgmmaWait { pending: 0 }) && is(&b[4], &Inst::BarSync), "{b:?}");
        // Retired before the barrier: that barrier orders the write.
        let mut b = vec![wgmma(0), wg_commit(), wg_wait(0), bar(), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 1, "{b:?}");
        // `wait_group 1` retires the older group only: region 0's write
        // after the explicit barrier needs none, region 1's needs one.
        let mut b = vec![wgmma(0), wg_commit(), wgmma(1), wg_commit(), bar(), wg_wait(1), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 2, "{b:?}");
        let mut b = vec![wgmma(0), wg_commit(), wgmma(1), wg_commit(), wg_wait(1), bar(), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 1, "{b:?}");
        // A write while the group is still in flight gets a barrier too
        // (the lowering waits first; this is the safety net).
        let mut b = vec![wgmma(0), wg_commit(), bar(), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 2, "{b:?}");
        // Retired inside a warpgroup's branch: still a read pending after it.
        let div = |x: Vec<Stmt>| Stmt::If { cond: Reg(3), negate: false, uniform: false, then: x, otherwise: vec![] };
        let mut b = vec![div(vec![wgmma(0), wg_commit()]), bar(), div(vec![wg_wait(0)]), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(count(&b), 2, "{b:?}");
    }

    #[test]
    fn wgmma_reads_get_barriers_and_proxy_fences() {
        // st S; wgmma reads S: fence.proxy.async, then the barrier.
        let mut b = vec![st(0), wgmma(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(b.len(), 4, "{b:?}");
        assert!(is(&b[1], &Inst::FenceProxyAsync) && is(&b[2], &Inst::BarSync));
        // wgmma reads S; st S: WAR barrier (no generic write pending: no fence).
        let mut b = vec![wgmma(0), st(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(b.len(), 3, "{b:?}");
        assert!(is(&b[1], &Inst::BarSync));
        // cp.async S (not waited for); wgmma: commit, wait 0, fence, barrier.
        let mut b = vec![cp(0), wgmma(0)];
        insert_barriers(&mut b, &Options::default());
        assert_eq!(b.len(), 6, "{b:?}");
        assert!(is(&b[1], &Inst::CpAsyncCommit) && is(&b[2], &Inst::CpAsyncWait { pending: 0 }));
        assert!(is(&b[3], &Inst::FenceProxyAsync) && is(&b[4], &Inst::BarSync));
        // An explicit barrier after generic writes gets the fence too (the
        // pipelined loop's `wait_group; bar.sync` before the stage is read).
        let mut b = vec![lp(vec![cp(9), commit(), wait(1), Stmt::Inst { inst: Inst::BarSync, guard: None }, wgmma(0)])];
        insert_barriers(&mut b, &Options::default());
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert!(is(&body[3], &Inst::FenceProxyAsync) && is(&body[4], &Inst::BarSync), "{body:?}");
        // Without wgmma reads, barriers get no fence.
        let mut b = vec![st(0), ld(0)];
        insert_barriers(&mut b, &Options::default());
        assert!(!b.iter().any(|s| is(s, &Inst::FenceProxyAsync)));
        // Wgmmas without regions (mbarrier-ordered, warp-specialized): no fence.
        let mut w = wgmma(0);
        if let Stmt::Inst { inst: Inst::Wgmma { regions, .. }, .. } = &mut w {
            regions.clear();
        }
        let mut b = vec![st(0), ld(0), w];
        insert_barriers(&mut b, &Options::default());
        assert!(!b.iter().any(|s| is(s, &Inst::FenceProxyAsync)), "{b:?}");
    }

    #[test]
    fn one_warpgroups_dependences_get_its_own_barrier() {
        let (p0, p1) = (Reg(10), Reg(11));
        let options = Options { warpgroups: vec![(p0, 0), (p1, 1)], ..Options::default() };
        let wg = |p: Reg, x: Vec<Stmt>| Stmt::If { cond: p, negate: false, uniform: false, then: x, otherwise: vec![] };
        // Written and read by warpgroup 0: its barrier, inside its branch.
        let mut b = vec![wg(p0, vec![st(0)]), wg(p0, vec![ld(0)])];
        insert_barriers(&mut b, &options);
        assert_eq!((count(&b), count_inst(&b, &local_bar(0))), (0, 1), "{b:?}");
        let Stmt::If { then, .. } = &b[1] else { panic!("{b:?}") };
        assert!(matches!(&then[0], Stmt::Inst { inst, .. } if *inst == local_bar(0)), "{b:?}");
        // Written by warpgroup 0, read by warpgroup 1: every thread's, before the branch.
        let mut b = vec![wg(p0, vec![st(0)]), wg(p1, vec![ld(0)])];
        insert_barriers(&mut b, &options);
        assert_eq!((count(&b), count_inst(&b, &local_bar(0))), (1, 0), "{b:?}");
        assert!(is(&b[1], &Inst::BarSync), "{b:?}");
        // Ordered for warpgroup 0 by its barrier, still pending for warpgroup 1.
        let mut b = vec![wg(p0, vec![st(0)]), wg(p0, vec![ld(0)]), wg(p1, vec![ld(0)])];
        insert_barriers(&mut b, &options);
        assert_eq!((count(&b), count_inst(&b, &local_bar(0))), (1, 1), "{b:?}");
        // Without the predicates, the old rule: every thread's barrier.
        let mut b = vec![wg(p0, vec![st(0)]), wg(p0, vec![ld(0)])];
        insert_barriers(&mut b, &Options::default());
        assert_eq!((count(&b), count_inst(&b, &local_bar(0))), (1, 0), "{b:?}");
        // A wgmma of warpgroup 1 retired in its branch: its reads are
        // warpgroup 1's, and warpgroup 0's write needs every thread's barrier.
        let wg_commit = || Stmt::Inst { inst: Inst::WgmmaCommit, guard: None };
        let wg_wait = || Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None };
        let mut b = vec![wg(p1, vec![wgmma(0), wg_commit(), wg_wait()]), wg(p1, vec![st(0)]), wg(p0, vec![st(0)])];
        insert_barriers(&mut b, &options);
        assert_eq!((count(&b), count_inst(&b, &local_bar(1))), (1, 1), "{b:?}");
    }

    #[test]
    fn ring_turns_and_sunk_barriers() {
        // for { write S; read S } on a ring's region: the RAW inside, but no
        // barrier for the WAR across the back-edge (the ring's mbarriers).
        let mut b = vec![lp(vec![st(5), ld(5)])];
        insert_barriers(&mut b, &Options { rings: vec![(Reg(1), vec![5])], ..Options::default() });
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(count(body), 1, "{body:?}");
        // Another loop's rings change nothing.
        let mut b = vec![lp(vec![st(5), ld(5)])];
        insert_barriers(&mut b, &Options { rings: vec![(Reg(9), vec![5])], ..Options::default() });
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(count(body), 2, "{body:?}");
        // A write in a uniform `if`, read after it: the barrier at the end
        // of the branch; not when the skipping path needs one too.
        let uif = |x: Vec<Stmt>| Stmt::If { cond: Reg(4), negate: false, uniform: true, then: x, otherwise: vec![] };
        let sink = Options { sink: true, ..Options::default() };
        let mut b = vec![uif(vec![st(0)]), ld(0)];
        insert_barriers(&mut b, &sink);
        assert_eq!(b.len(), 2, "{b:?}");
        let Stmt::If { then, .. } = &b[0] else { panic!() };
        assert!(is(then.last().unwrap(), &Inst::BarSync), "{b:?}");
        let mut b = vec![st(0), uif(vec![st(0)]), ld(0)];
        insert_barriers(&mut b, &sink);
        assert!(is(&b[b.len() - 2], &Inst::BarSync), "{b:?}");
        let mut b = vec![uif(vec![st(0)]), ld(0)];
        insert_barriers(&mut b, &Options::default());
        assert!(is(&b[1], &Inst::BarSync), "{b:?}");
    }
}

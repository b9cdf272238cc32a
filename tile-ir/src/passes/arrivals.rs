//! One warpgroup's half of a consumers' barrier becomes an arrival
//! (Thread IR → Thread IR).
//!
//! Expects a function whose consumers' loops of two warpgroups are split
//! ([`super::split_warpgroups`]: `if p₀ { loop₀ .. } else { loop₁ .. }`,
//! each copy with every barrier of the consumers, `barrier.sync 1, N`, in
//! the same order, placed by [`super::barriers`]), and where the statement
//! after that `if` is a barrier of every consumer.
//!
//! A barrier of both warpgroups orders each one's earlier accesses before
//! the other's later ones. Where warpgroup `w`'s accesses after a barrier
//! `X` at the top level of the loop body (up to the next barrier `w` waits
//! at, around the back-edge included) need nothing that the other, `v`,
//! did before `X` (since the last barrier before `X` that `w` waits at),
//! `w` only hands its own accesses over: `barrier.arrive` ([`Inst::BarrierArrive`])
//! in `w`'s copy, `barrier.sync` in `v`'s, on a barrier id of `X`'s own
//! ([`FIRST_ARRIVAL_BARRIER`] up), followed in `w`'s copy by `w`'s own
//! 128-thread barrier ([`super::barriers::LOCAL_BARRIER`] `+ w`) when
//! `w`'s accesses on both sides of `X` depend on each other (different
//! threads of `w`). MLA's seesaw: warpgroup 0 hands P₀ over and issues its
//! half of P·V₀ at once, without waiting for warpgroup 1's maximum; then
//! warpgroup 1 hands P₁ over and issues its half of P·V₁ (FlashMLA's order).
//!
//! Where only accesses inside a uniform `if` without `else` at the top
//! level of the body stand in the way (MLA's zeroing of the keys past the
//! sequence, in the last block only), that branch gets a barrier of every
//! consumer (with `fence.proxy.async`) at its start (it wrote after `X`
//! what the other had read before) or at its end (the other reads after
//! `X` what it wrote before), in both copies: those cost only where the
//! branch runs, and the arrival is then valid on every path.
//!
//! Guarantees: every dependence the barriers ordered stays ordered (the
//! check is conservative: regions as [`super::barriers`] sees them, a
//! wgmma's reads from its issue on, and every gemm's reads where a window
//! holds a `wgmma.wait_group` (it may retire a gemm issued before the
//! window), nested barriers counted only on their own path; a ring stage
//! that only the other warpgroup waits for, which `w` reads ordered after
//! those waits by a barrier ([`Function::observed_rings`]), as written by
//! the other's mbarrier waits); `v` still waits at `X` for all of `w`; a warpgroup arrives at
//! an id again only after waiting at another barrier the other reaches
//! after completing that id (a barrier `w` waits at follows `X` in the
//! loop); ids are ones the function does not otherwise use.

use super::barriers::LOCAL_BARRIER;
use crate::thread_ir::{Function, Inst, Reg, Region, Space, Stmt};
use std::collections::BTreeSet;

/// The first barrier id given to a barrier turned into an arrival (0 is
/// the block's, 1 the consumers', 2 and 3 the ping-pong's, 4 and 5 the
/// warpgroups' own).
pub const FIRST_ARRIVAL_BARRIER: u32 = 6;

/// Turns barriers into arrivals where the module doc allows.
pub fn arrive_where_possible(func: &mut Function) {
    let Some(threads) = func.barrier_threads else { return };
    let mut used = BTreeSet::new();
    barrier_ids(&func.body, &mut used);
    let cx = Cx {
        threads,
        loops: func
            .split_loops
            .iter()
            .filter(|l| l.guard.is_none() && l.preds.len() == 2)
            .map(|l| (l.var, [l.preds[0], l.preds[1]]))
            .collect(),
        warpgroup_of: func.warpgroup_preds.clone(),
        observed: func.observed_rings.clone(),
    };
    let mut free = (FIRST_ARRIVAL_BARRIER..16).filter(|id| !used.contains(id)).collect::<Vec<u32>>().into_iter();
    visit(&mut func.body, &cx, &mut free);
}

struct Cx {
    /// The consumers' barrier's thread count.
    threads: u32,
    /// The split loops (by their variable) and their two predicates.
    loops: Vec<(Reg, [Reg; 2])>,
    /// Each warpgroup predicate's warpgroup.
    warpgroup_of: Vec<(Reg, u32)>,
    /// The split loops' observed rings ([`Function::observed_rings`]).
    observed: Vec<(Reg, Vec<(u32, u32)>)>,
}

/// Finds the split loops (`if p₀ { loop₀ .. } else { loop₁ .. }` followed
/// by a barrier of every consumer) in `body`.
fn visit(body: &mut [Stmt], cx: &Cx, free: &mut dyn Iterator<Item = u32>) {
    for i in 0..body.len() {
        let exit_ordered = body.get(i + 1).is_some_and(|s| is_consumer_barrier(s, cx.threads));
        match &mut body[i] {
            Stmt::If { cond, negate, then, otherwise, .. } => {
                let pair = if *negate { None } else { split_pair(*cond, then, otherwise, cx) };
                match pair {
                    Some((ws, var)) if exit_ordered => {
                        let (a, b) = (body_of(then, var), body_of(otherwise, var));
                        // (A loop the lowering did not describe keeps its barriers.)
                        let observed = cx.observed.iter().find(|o| o.0 == var).map(|o| o.1.as_slice());
                        if let (Some(a), Some(b), Some(observed)) = (a, b, observed) {
                            convert([a, b], ws, observed, cx, free);
                        }
                    }
                    _ => {
                        visit(then, cx, free);
                        visit(otherwise, cx, free);
                    }
                }
            }
            Stmt::For { body, .. } => visit(body, cx, free),
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
        }
    }
}

/// `(warpgroups of the two copies, the loop's variable)` when `if cond
/// { then } else { otherwise }` is a split loop whose copies have no shared
/// access after the loop.
fn split_pair(cond: Reg, then: &[Stmt], otherwise: &[Stmt], cx: &Cx) -> Option<([u32; 2], Reg)> {
    let (var, preds) = cx.loops.iter().find(|(_, p)| p[0] == cond)?;
    let wg = |p: Reg| cx.warpgroup_of.iter().find(|x| x.0 == p).map(|x| x.1);
    let ws = [wg(preds[0])?, wg(preds[1])?];
    let tail_clean = |s: &[Stmt]| {
        matches!(s.first(), Some(Stmt::For { var: v, uniform: true, .. }) if v == var) && {
            let mut acc = Vec::new();
            s[1..].iter().for_each(|x| collect(x, Origin::Top, &mut acc));
            acc.is_empty()
        }
    };
    (tail_clean(then) && tail_clean(otherwise)).then_some((ws, *var))
}

fn body_of(copy: &mut [Stmt], var: Reg) -> Option<&mut Vec<Stmt>> {
    match copy.first_mut() {
        Some(Stmt::For { var: v, body, .. }) if *v == var => Some(body),
        _ => None,
    }
}

/// Whether `s` is a barrier of every consumer (before or after the split).
fn is_consumer_barrier(s: &Stmt, threads: u32) -> bool {
    matches!(s, Stmt::Inst { inst: Inst::BarSync, guard: None })
        || matches!(s, Stmt::Inst { inst: Inst::NamedBarSync { id: 1, threads: t } | Inst::BarrierSync { id: 1, threads: t }, guard: None } if *t == threads)
}

fn barrier_ids(body: &[Stmt], out: &mut BTreeSet<u32>) {
    for s in body {
        match s {
            Stmt::Inst {
                inst:
                    Inst::NamedBarSync { id, .. }
                    | Inst::BarrierSync { id, .. }
                    | Inst::NamedBarArrive { id, .. }
                    | Inst::BarrierArrive { id, .. },
                ..
            } => {
                out.insert(*id);
            }
            Stmt::Inst { inst: Inst::BarRedOr { .. }, .. } => {
                // Its id may be a register: keep every local id out of reach
                // (they are below FIRST_ARRIVAL_BARRIER).
            }
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
            Stmt::If { then, otherwise, .. } => {
                barrier_ids(then, out);
                barrier_ids(otherwise, out);
            }
            Stmt::For { body, .. } => barrier_ids(body, out),
        }
    }
}

/// Where an access stands: in straight code of the loop body, or inside
/// the uniform `if` (without `else`) at the top level whose condition is
/// this register.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Origin {
    Top,
    Branch(Reg),
}

/// A shared access: its region, whether it writes, where it stands.
type Access = (Region, bool, Origin);

/// The shared accesses of `s` (a wgmma's operands as reads).
fn collect(s: &Stmt, origin: Origin, out: &mut Vec<Access>) {
    match s {
        Stmt::Inst { inst, .. } => match inst {
            Inst::Ld { space: Space::Shared, region: Some(r), .. } | Inst::Ldmatrix { region: Some(r), .. } => {
                out.push((*r, false, origin))
            }
            Inst::St { space: Space::Shared, region: Some(r), .. } | Inst::CpAsync { region: Some(r), .. } => {
                out.push((*r, true, origin))
            }
            // A TMA access of a region outside the producer: both ways, to be safe.
            Inst::TmaLoad { region: Some(r), .. } | Inst::TmaStore { region: Some(r), .. } => {
                out.push((*r, true, origin))
            }
            Inst::Wgmma { regions, .. } => out.extend(regions.iter().map(|r| (*r, false, origin))),
            _ => {}
        },
        Stmt::Comment(_) => {}
        Stmt::If { then, otherwise, .. } => {
            then.iter().chain(otherwise).for_each(|x| collect(x, origin, out));
        }
        Stmt::For { body, .. } => body.iter().for_each(|x| collect(x, origin, out)),
    }
}

/// Whether two accesses need ordering (one writes; different operations).
fn clash(a: &Access, b: &Access) -> bool {
    a.0.id == b.0.id && a.0.op != b.0.op && (a.1 || b.1)
}

/// One copy's loop body, seen through its top-level barriers.
struct LoopCopy<'a> {
    body: &'a [Stmt],
    /// The positions of the top-level consumers' barriers.
    bars: Vec<usize>,
    /// Its warpgroup.
    w: u32,
    /// The regions every wgmma of the body reads: a window with a
    /// `wgmma.wait_group` may retire gemms issued before it (in flight
    /// across the barrier it started at), whose reads count as its own.
    wgmma_reads: Vec<Access>,
    /// The ring regions whose stage another warpgroup waits for, this one
    /// relying on a barrier after those waits.
    observes: Vec<u32>,
}

impl<'a> LoopCopy<'a> {
    fn new(body: &'a [Stmt], bars: Vec<usize>, w: u32, observed: &[(u32, u32)]) -> Self {
        let mut wgmma_reads = Vec::new();
        body.iter().for_each(|s| gemm_reads(s, &mut wgmma_reads));
        let observes = observed.iter().filter(|o| o.0 != w).map(|o| o.1).collect();
        LoopCopy { body, bars, w, wgmma_reads, observes }
    }
    /// `s`'s accesses, with every gemm's reads when it waits for gemms, and
    /// the ring waits' hand-over: an mbarrier wait counts as a write of
    /// [`RING_WAITS`], a touch of a ring this warpgroup observes as a read
    /// of it (the observer must wait at a barrier after the owner's waits).
    fn accesses(&self, s: &Stmt, origin: Origin, out: &mut Vec<Access>) {
        let at = out.len();
        collect(s, origin, out);
        let observed = out[at..].iter().any(|a| self.observes.contains(&a.0.id));
        if observed {
            out.push((Region { id: RING_WAITS, op: 0 }, false, origin));
        }
        if waits_for(s, &|i| matches!(i, Inst::MbarWait { .. })) {
            out.push((Region { id: RING_WAITS, op: 1 }, true, origin));
        }
        if waits_for(s, &|i| matches!(i, Inst::WgmmaWait { .. })) {
            out.extend(self.wgmma_reads.iter().copied());
        }
    }
}

fn gemm_reads(s: &Stmt, out: &mut Vec<Access>) {
    match s {
        Stmt::Inst { inst: Inst::Wgmma { regions, .. }, .. } => {
            out.extend(regions.iter().map(|r| (*r, false, Origin::Top)))
        }
        Stmt::Inst { .. } | Stmt::Comment(_) => {}
        Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).for_each(|x| gemm_reads(x, out)),
        Stmt::For { body, .. } => body.iter().for_each(|x| gemm_reads(x, out)),
    }
}

/// A pseudo-region: the stages of the rings, as the owner's mbarrier waits
/// make them visible and an observer reads them.
const RING_WAITS: u32 = u32::MAX;

/// Whether `s` holds an instruction `is` accepts.
fn waits_for(s: &Stmt, is: &dyn Fn(&Inst) -> bool) -> bool {
    match s {
        Stmt::Inst { inst, .. } => is(inst),
        Stmt::Comment(_) => false,
        Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).any(|x| waits_for(x, is)),
        Stmt::For { body, .. } => body.iter().any(|x| waits_for(x, is)),
    }
}

/// Which barriers a walk stops at: the top-level consumers' barrier `k`
/// when `stops(k)`, a nested one always (never converted), and the
/// warpgroup's own barrier when `local`.
struct Stops<'a> {
    stops: &'a dyn Fn(usize) -> bool,
    local: Option<u32>,
    threads: u32,
}

impl Stops<'_> {
    fn nested(&self, s: &Stmt) -> bool {
        is_consumer_barrier(s, self.threads) || self.is_local(s)
    }
    fn is_local(&self, s: &Stmt) -> bool {
        matches!((s, self.local), (Stmt::Inst { inst: Inst::BarrierSync { id, threads: 128 }, .. }, Some(w)) if *id == LOCAL_BARRIER + w)
    }
}

/// The accesses of `body[range]` walked backward (`back`) or forward from
/// one end to the first barrier `stops` names on each path (a uniform
/// `if`'s branch is a path of its own; the path that skips it goes on);
/// whether every path stopped.
fn walk(copy: &LoopCopy, range: std::ops::Range<usize>, back: bool, st: &Stops, out: &mut Vec<Access>) -> bool {
    let idx: Vec<usize> = if back { range.rev().collect() } else { range.collect() };
    for i in idx {
        let s = &copy.body[i];
        if let Some(k) = copy.bars.iter().position(|&p| p == i) {
            if (st.stops)(k) {
                return true;
            }
            continue;
        }
        if st.is_local(s) {
            return true;
        }
        match s {
            Stmt::If { cond, uniform: true, then, otherwise, .. } if otherwise.is_empty() => {
                branch(copy, then, back, st, Origin::Branch(*cond), out);
            }
            _ => copy.accesses(s, Origin::Top, out),
        }
    }
    false
}

/// A branch's accesses from its start (or end, `back`) to its first
/// barrier on the way.
fn branch(copy: &LoopCopy, body: &[Stmt], back: bool, st: &Stops, origin: Origin, out: &mut Vec<Access>) {
    let order: Vec<&Stmt> = if back { body.iter().rev().collect() } else { body.iter().collect() };
    for s in order {
        if st.nested(s) {
            return;
        }
        copy.accesses(s, origin, out);
    }
}

/// The decisions for one split loop: which warpgroup (copy index) arrives
/// at each top-level barrier, and the branches that get barriers at their
/// start and at their end.
#[derive(Clone, Default)]
struct Plan {
    arrive: Vec<Option<usize>>,
    start: BTreeSet<Reg>,
    end: BTreeSet<Reg>,
}

/// Whether barrier `k` may be an arrival of copy `c` under `plan`: `Ok`
/// with whether `c` then needs its own barrier after it, or `Err` with the
/// branches whose barriers would make it valid (none: it cannot be).
fn check(copies: &[LoopCopy; 2], plan: &Plan, k: usize, c: usize, threads: u32) -> Result<bool, (Vec<Reg>, Vec<Reg>)> {
    let v = 1 - c;
    let n = copies[c].body.len();
    // The top-level barriers other than `k` that `c` waits at.
    let waits = |j: usize| j != k && plan.arrive[j] != Some(c);
    // The other's accesses since the last barrier `c` waits at, in this iteration.
    let mut pre = Vec::new();
    let st = Stops { stops: &waits, local: None, threads };
    if !walk(&copies[v], 0..copies[v].bars[k], true, &st, &mut pre) {
        return Err((Vec::new(), Vec::new()));
    }
    // `c`'s accesses up to the next barrier it waits at (around the back-edge).
    let mut post = Vec::new();
    let pk = copies[c].bars[k];
    if !walk(&copies[c], pk + 1..n, false, &st, &mut post) && !walk(&copies[c], 0..pk, false, &st, &mut post) {
        return Err((Vec::new(), Vec::new()));
    }
    let mut start = Vec::new();
    let mut end = Vec::new();
    for a in &pre {
        for b in post.iter().filter(|b| clash(a, b)) {
            match (a.2, b.2) {
                (Origin::Branch(r), _) if !plan.end.contains(&r) => end.push(r),
                (_, Origin::Branch(r)) if !plan.start.contains(&r) => start.push(r),
                _ => return Err((Vec::new(), Vec::new())),
            }
        }
    }
    if !start.is_empty() || !end.is_empty() {
        return Err((start, end));
    }
    // `c`'s own accesses on both sides of the barrier.
    let mut mine_pre = Vec::new();
    let mut mine_post = Vec::new();
    let st = Stops { stops: &waits, local: Some(copies[c].w), threads };
    // (Around the back-edge, both ways.)
    let a = walk(&copies[c], 0..pk, true, &st, &mut mine_pre) || walk(&copies[c], pk + 1..n, true, &st, &mut mine_pre);
    let b =
        walk(&copies[c], pk + 1..n, false, &st, &mut mine_post) || walk(&copies[c], 0..pk, false, &st, &mut mine_post);
    let local = !a || !b || mine_pre.iter().any(|x| mine_post.iter().any(|y| clash(x, y)));
    Ok(local)
}

/// Decides and applies the arrivals of one split loop (`bodies`: the two
/// copies' loop bodies, of warpgroups `ws`).
fn convert(
    bodies: [&mut Vec<Stmt>; 2],
    ws: [u32; 2],
    observed: &[(u32, u32)],
    cx: &Cx,
    free: &mut dyn Iterator<Item = u32>,
) {
    let bars = |b: &[Stmt]| -> Vec<usize> {
        b.iter().enumerate().filter(|(_, s)| is_consumer_barrier(s, cx.threads)).map(|(i, _)| i).collect()
    };
    let [b0, b1] = bodies;
    let mut plan = Plan::default();
    let mut locals = Vec::new();
    let n = bars(b0).len();
    if n != bars(b1).len() || n == 0 {
        return;
    }
    plan.arrive = vec![None; n];
    // The decisions are made on copies of the bodies with the branch
    // barriers of the plan tried (`with_branch_barriers`).
    for k in 0..n {
        'who: for c in 0..2 {
            let mut trial = plan.clone();
            trial.arrive[k] = Some(c);
            // Up to a few rounds of branch barriers.
            for _ in 0..4 {
                let (x0, x1) = (with_branch_barriers(b0, &trial, cx), with_branch_barriers(b1, &trial, cx));
                let copies =
                    [LoopCopy::new(&x0, bars(&x0), ws[0], observed), LoopCopy::new(&x1, bars(&x1), ws[1], observed)];
                let mut fix = (Vec::new(), Vec::new());
                let mut ok = true;
                for (j, a) in trial.arrive.iter().enumerate() {
                    if let Some(who) = *a {
                        match check(&copies, &trial, j, who, cx.threads) {
                            Ok(_) => {}
                            Err((s, e)) if s.is_empty() && e.is_empty() => continue 'who,
                            Err((s, e)) => {
                                fix.0.extend(s);
                                fix.1.extend(e);
                                ok = false;
                            }
                        }
                    }
                }
                if ok {
                    plan = trial;
                    break 'who;
                }
                trial.start.extend(fix.0);
                trial.end.extend(fix.1);
            }
        }
    }
    if plan.arrive.iter().all(Option::is_none) {
        return;
    }
    // Which arrivals need the warpgroup's own barrier after them.
    {
        let (x0, x1) = (with_branch_barriers(b0, &plan, cx), with_branch_barriers(b1, &plan, cx));
        let copies = [LoopCopy::new(&x0, bars(&x0), ws[0], observed), LoopCopy::new(&x1, bars(&x1), ws[1], observed)];
        for (k, a) in plan.arrive.iter().enumerate() {
            if let Some(c) = *a {
                locals.push((k, c, check(&copies, &plan, k, c, cx.threads).unwrap_or(true)));
            }
        }
    }
    let mut ids = Vec::new();
    for _ in &locals {
        match free.next() {
            Some(id) => ids.push(id),
            None => return,
        }
    }
    for (c, body) in [b0, b1].into_iter().enumerate() {
        *body = with_branch_barriers(body, &plan, cx);
        let pos = bars(body);
        // From the last, so that earlier positions stay valid.
        for ((k, who, local), id) in locals.iter().zip(&ids).rev() {
            let at = pos[*k];
            if *who == c {
                body[at] = Stmt::Inst { inst: Inst::BarrierArrive { id: *id, threads: cx.threads }, guard: None };
                if *local {
                    let own = Inst::BarrierSync { id: LOCAL_BARRIER + ws[c], threads: 128 };
                    body.insert(at + 1, Stmt::Inst { inst: own, guard: None });
                }
            } else {
                body[at] = Stmt::Inst { inst: Inst::BarrierSync { id: *id, threads: cx.threads }, guard: None };
            }
        }
    }
}

/// `body` with a barrier of every consumer (after `fence.proxy.async`) at
/// the start of the branches `plan.start` names and at the end of those
/// `plan.end` names.
fn with_branch_barriers(body: &[Stmt], plan: &Plan, cx: &Cx) -> Vec<Stmt> {
    let bar = || {
        [
            Stmt::Inst { inst: Inst::FenceProxyAsync, guard: None },
            Stmt::Inst { inst: Inst::BarrierSync { id: 1, threads: cx.threads }, guard: None },
        ]
    };
    body.iter()
        .map(|s| match s {
            Stmt::If { cond, negate, uniform: true, then, otherwise } if otherwise.is_empty() => {
                let mut t = then.clone();
                if plan.start.contains(cond) {
                    t.splice(0..0, bar());
                }
                if plan.end.contains(cond) {
                    t.extend(bar());
                }
                Stmt::If { cond: *cond, negate: *negate, uniform: true, then: t, otherwise: Vec::new() }
            }
            _ => s.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::split_warpgroups::SplitLoop;
    use crate::thread_ir::{Address, Operand, RegClass};

    fn access(write: bool, id: u32, op: u32) -> Stmt {
        let (addr, region) = (Address { base: Operand::Imm(0), offset: 0 }, Some(Region { id, op }));
        let inst = if write {
            Inst::St { space: Space::Shared, ty: "f32", srcs: vec![Operand::Imm(0)], addr, region }
        } else {
            Inst::Ld { space: Space::Shared, ty: "f32", dsts: vec![Reg(0)], addr, region }
        };
        Stmt::Inst { inst, guard: None }
    }
    fn st(id: u32, op: u32) -> Stmt {
        access(true, id, op)
    }
    fn ld(id: u32, op: u32) -> Stmt {
        access(false, id, op)
    }
    fn sync(id: u32, threads: u32) -> Stmt {
        Stmt::Inst { inst: Inst::BarrierSync { id, threads }, guard: None }
    }
    fn arrive(id: u32) -> Stmt {
        Stmt::Inst { inst: Inst::BarrierArrive { id, threads: 256 }, guard: None }
    }
    fn fence() -> Stmt {
        Stmt::Inst { inst: Inst::FenceProxyAsync, guard: None }
    }

    /// A split loop of two warpgroups with these copies' bodies, followed by
    /// a barrier of the consumers; the branch condition a test may use.
    fn split(copy0: Vec<Stmt>, copy1: Vec<Stmt>) -> (Function, Reg) {
        split_observed(copy0, copy1, vec![])
    }
    /// [`split`] with these observed rings (warpgroup that waits, region).
    fn split_observed(copy0: Vec<Stmt>, copy1: Vec<Stmt>, observed: Vec<(u32, u32)>) -> (Function, Reg) {
        let mut f = Function { barrier_threads: Some(256), ..Function::default() };
        let [p0, p1, var, exit, cond] =
            [RegClass::Pred, RegClass::Pred, RegClass::B32, RegClass::Pred, RegClass::Pred].map(|c| f.new_reg(c));
        f.warpgroup_preds = vec![(p0, 0), (p1, 1)];
        f.split_loops = vec![SplitLoop { var, preds: vec![p0, p1], guard: None }];
        f.observed_rings = vec![(var, observed)];
        let lp = |body| Stmt::For { var, start: Operand::Imm(0), end: Operand::Imm(4), exit, uniform: true, body };
        let copy0 = copy0.into_iter().map(|s| with_cond(s, cond)).collect();
        let copy1 = copy1.into_iter().map(|s| with_cond(s, cond)).collect();
        f.body = vec![
            Stmt::If { cond: p0, negate: false, uniform: false, then: vec![lp(copy0)], otherwise: vec![lp(copy1)] },
            Stmt::Inst { inst: Inst::BarSync, guard: None },
        ];
        (f, cond)
    }
    /// Tests write a uniform branch's condition as `Reg(u32::MAX)`.
    fn with_cond(s: Stmt, cond: Reg) -> Stmt {
        match s {
            Stmt::If { cond: Reg(u32::MAX), negate, uniform, then, otherwise } => {
                Stmt::If { cond, negate, uniform, then, otherwise }
            }
            s => s,
        }
    }
    fn branch(then: Vec<Stmt>) -> Stmt {
        Stmt::If { cond: Reg(u32::MAX), negate: false, uniform: true, then, otherwise: Vec::new() }
    }
    fn copies(f: &Function) -> (Vec<Stmt>, Vec<Stmt>) {
        let Stmt::If { then, otherwise, .. } = &f.body[0] else { panic!("the split") };
        let body = |c: &[Stmt]| match &c[0] {
            Stmt::For { body, .. } => body.clone(),
            _ => panic!("a loop"),
        };
        (body(then), body(otherwise))
    }

    /// Warpgroup 0 writes P and hands it over; it reads P itself after the
    /// barrier (its own barrier follows the arrival), warpgroup 1 reads it
    /// after waiting. The barrier at the top, where warpgroup 0 must wait
    /// (warpgroup 1 read the last P), stays.
    #[test]
    fn the_writer_arrives_and_orders_its_own_reads() {
        let (mut f, _) =
            split(vec![sync(1, 256), st(1, 1), sync(1, 256), ld(1, 2)], vec![sync(1, 256), sync(1, 256), ld(1, 3)]);
        arrive_where_possible(&mut f);
        let (a, b) = copies(&f);
        assert_eq!(a, vec![sync(1, 256), st(1, 1), arrive(6), sync(LOCAL_BARRIER, 128), ld(1, 2)]);
        assert_eq!(b, vec![sync(1, 256), sync(6, 256), ld(1, 3)]);
    }

    /// Each warpgroup reads after the barrier what the other wrote before
    /// it: nothing changes.
    #[test]
    fn an_exchange_stays_a_barrier() {
        let c0 = vec![sync(1, 256), st(1, 1), sync(1, 256), ld(2, 2)];
        let c1 = vec![sync(1, 256), st(2, 3), sync(1, 256), ld(1, 4)];
        let (mut f, _) = split(c0.clone(), c1.clone());
        arrive_where_possible(&mut f);
        assert_eq!(copies(&f), (c0, c1));
    }

    /// What stands in the way is written in a uniform branch (both
    /// warpgroups, before the barrier): the branch gets a barrier of its
    /// own at its end, and warpgroup 0 arrives.
    #[test]
    fn a_branch_in_the_way_gets_its_own_barrier() {
        let (mut f, _) = split(
            vec![sync(1, 256), branch(vec![st(1, 5)]), sync(1, 256), ld(1, 2)],
            vec![sync(1, 256), branch(vec![st(1, 5)]), sync(1, 256)],
        );
        arrive_where_possible(&mut f);
        let (a, b) = copies(&f);
        let fenced = branch(vec![st(1, 5), fence(), sync(1, 256)]);
        let (Stmt::If { cond, .. }, Stmt::If { then, .. }) = (&a[1], &b[1]) else { panic!("the branch") };
        let fenced = with_cond(fenced, *cond);
        assert_eq!(a, vec![sync(1, 256), fenced.clone(), arrive(6), ld(1, 2)]);
        assert_eq!(b, vec![sync(1, 256), fenced, sync(6, 256)]);
        assert_eq!(then.len(), 3);
    }

    /// No barrier that the arriving warpgroup waits at besides this one:
    /// it could arrive twice before the other completes the barrier.
    #[test]
    fn a_lone_barrier_stays() {
        let c0 = vec![st(1, 1), sync(1, 256)];
        let c1 = vec![sync(1, 256), ld(1, 3)];
        let (mut f, _) = split(c0.clone(), c1.clone());
        arrive_where_possible(&mut f);
        assert_eq!(copies(&f), (c0, c1));
    }

    /// Warpgroup 1 reads a ring's stage that only warpgroup 0 waits for
    /// (an observer): it may not arrive at the barrier after that wait,
    /// though no shared access of warpgroup 0 stands in the way.
    #[test]
    fn an_observer_keeps_its_wait() {
        let wait = Stmt::Inst {
            inst: Inst::MbarWait {
                addr: Address { base: Operand::Imm(0), offset: 0 },
                parity: Operand::Imm(0),
                pred: Reg(0),
            },
            guard: None,
        };
        let c0 = vec![sync(1, 256), wait, sync(1, 256), ld(2, 4)];
        let c1 = vec![sync(1, 256), st(2, 5), sync(1, 256), ld(9, 3)];
        let (mut f, _) = split_observed(c0.clone(), c1.clone(), vec![(0, 9)]);
        arrive_where_possible(&mut f);
        assert_eq!(copies(&f), (c0.clone(), c1.clone()));
        // Not observed (warpgroup 1 waits for it itself): it arrives.
        let (mut f, _) = split(c0, c1);
        arrive_where_possible(&mut f);
        assert!(matches!(copies(&f).1[2], Stmt::Inst { inst: Inst::BarrierArrive { .. }, .. }));
    }
}

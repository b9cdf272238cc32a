//! Deferring `wgmma.wait_group 0` so that independent work overlaps the
//! asynchronous wgmmas (Thread IR → Thread IR, before barrier insertion).
//!
//! Runs only on functions whose wgmmas name regions (the general
//! lowering's; the warp-specialized loop schedules its own waits).
//! Expects the general sm_90a lowering's pattern (`lower/wgmma.rs`): each
//! gemm is `wgmma.fence; wgmma...; wgmma.commit_group; wgmma.wait_group 0`,
//! every wgmma naming the shared regions it reads, all in uniform code.
//!
//! Guarantees: a `wgmma.wait_group 0` only moves later, and never past a
//! statement that could observe an unfinished wgmma:
//! - one that reads or writes a register that any wgmma of the function
//!   uses (accumulators, register A, descriptors);
//! - a shared-memory write into a region any wgmma reads (by region id),
//!   or a shared write without a region;
//! - a barrier (after it, other threads may write what a wgmma of this
//!   warpgroup still reads), control flow (`If`, `For`), and any other
//!   instruction than plain arithmetic, loads, global stores and cp.async
//!   bookkeeping (whitelist); `bar.arrive` is passable: it only signals
//!   another warpgroup's turn (the ping-pong of the warp-specialized loop)
//!   and orders no memory access.
//!
//! It moves within its block to just before the first such statement. When
//! that is the end of a uniform loop's body (and the body's statements after
//! the wait are all passable), the wait is rotated around the back-edge:
//! it leaves the end of the body, goes to the first such statement from the
//! body's start (so the wgmmas of iteration `k` run on while iteration
//! `k+1` waits for its cp.async data, up to the barrier before the stage
//! refill), and one more wait follows the loop. A wait with no wgmma
//! pending returns at once. Two adjacent waits become one.
//!
//! Why cp.async waits are passable: the data they land was issued by a
//! cp.async earlier in program order. One issued after the wgmma and before
//! the wait is a shared write the scan stops at; one issued before the
//! wgmma that writes what the wgmma reads would have been a hazard in the
//! original program (barrier insertion orders it before the wgmma); and the
//! software pipeline's stage refills never write the stage being read.

use crate::thread_ir::{Address, Inst, Operand, Reg, Region, Space, Stmt, WgmmaA};
use std::collections::HashSet;

/// What the wgmmas of a function touch.
#[derive(Default)]
struct Footprint {
    regs: HashSet<Reg>,
    regions: HashSet<u32>,
}

/// Defers the wgmma waits of `body` (see the module doc).
pub fn defer_wgmma_waits(body: &mut Vec<Stmt>) {
    let mut fp = Footprint::default();
    collect(body, &mut fp);
    // Only the general lowering's wgmmas name regions; the warp-specialized
    // loop schedules its own waits.
    if fp.regions.is_empty() {
        return;
    }
    block(body, &fp);
}

fn collect(body: &[Stmt], fp: &mut Footprint) {
    for s in body {
        match s {
            Stmt::Inst { inst: Inst::Wgmma { d, a, b_desc, scale_d, regions, .. }, .. } => {
                fp.regs.extend(d.iter().copied());
                match a {
                    WgmmaA::Desc(o) => fp.regs.extend(reg_of(o)),
                    WgmmaA::Regs(r) => fp.regs.extend(r.iter().copied()),
                }
                fp.regs.extend(reg_of(b_desc));
                fp.regs.extend(reg_of(scale_d));
                fp.regions.extend(regions.iter().map(|r| r.id));
            }
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
            Stmt::If { then, otherwise, .. } => {
                collect(then, fp);
                collect(otherwise, fp);
            }
            Stmt::For { body, .. } => collect(body, fp),
        }
    }
}

fn reg_of(o: &Operand) -> Option<Reg> {
    match o {
        Operand::Reg(r) => Some(*r),
        _ => None,
    }
}

fn is_wait(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None })
}

/// Whether a wait may move past `s`.
fn passable(s: &Stmt, fp: &Footprint) -> bool {
    let (inst, guard) = match s {
        Stmt::Comment(_) => return true,
        Stmt::Inst { inst, guard } => (inst, guard),
        Stmt::If { .. } | Stmt::For { .. } => return false,
    };
    let mut regs: Vec<Reg> = guard.iter().map(|g| g.0).collect();
    let mut ops: Vec<&Operand> = Vec::new();
    let addr = |a: &'_ Address| -> Option<Reg> { reg_of(&a.base) };
    let region_ok = |r: &Option<Region>| matches!(r, Some(r) if !fp.regions.contains(&r.id));
    match inst {
        Inst::Op { dst, args, .. } => {
            regs.push(*dst);
            ops.extend(args);
        }
        Inst::Pack { dst, lo, hi } => regs.extend([*dst, *lo, *hi]),
        Inst::Unpack { lo, hi, src } => regs.extend([*lo, *hi, *src]),
        Inst::Ld { dsts, addr: a, .. } | Inst::Ldmatrix { dsts, addr: a, .. } => {
            regs.extend(dsts.iter().copied());
            regs.extend(addr(a));
        }
        Inst::LdParam { dst, .. } => regs.push(*dst),
        Inst::St { space, srcs, addr: a, region, .. } => {
            if *space == Space::Shared && !region_ok(region) {
                return false;
            }
            ops.extend(srcs);
            regs.extend(addr(a));
        }
        Inst::AtomAdd { space: Space::Global, dst, addr: a, src, .. } => {
            regs.push(*dst);
            regs.extend(addr(a));
            ops.push(src);
        }
        Inst::ShflBfly { dst, src, .. } | Inst::WarpBroadcast { dst, src } => regs.extend([*dst, *src]),
        Inst::CpAsync { dst, src, src_bytes, region, .. } => {
            if !region_ok(region) {
                return false;
            }
            regs.extend(addr(dst));
            regs.extend(addr(src));
            ops.push(src_bytes);
        }
        Inst::CpAsyncCommit | Inst::CpAsyncWait { .. } => {}
        // A scheduling signal that orders no memory access (its doc).
        Inst::NamedBarArrive { .. } => {}
        Inst::Mma { d, a, b, c, .. } => regs.extend(d.iter().chain(a).chain(b).chain(c).copied()),
        _ => return false,
    }
    regs.extend(ops.into_iter().filter_map(reg_of));
    !regs.iter().any(|r| fp.regs.contains(r))
}

/// Defers the waits of one block (nested blocks first).
fn block(body: &mut Vec<Stmt>, fp: &Footprint) {
    for s in body.iter_mut() {
        match s {
            Stmt::If { then, otherwise, .. } => {
                block(then, fp);
                block(otherwise, fp);
            }
            Stmt::For { body: inner, .. } => block(inner, fp),
            _ => {}
        }
    }
    // Within the block: each wait sinks to its first blocking statement.
    let mut i = 0;
    while i < body.len() {
        if !is_wait(&body[i]) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < body.len() && passable(&body[j], fp) {
            j += 1;
        }
        let wait = body.remove(i);
        // `j - 1`: the index of the blocking statement after the removal.
        if j - 1 < body.len() && is_wait(&body[j - 1]) {
            // Merged into the next wait, which is deferred in turn.
            i = j - 1;
        } else {
            body.insert(j - 1, wait);
            i = j;
        }
    }
    // Around uniform loops' back-edges.
    let mut i = 0;
    while i < body.len() {
        let rotated = match &mut body[i] {
            Stmt::For { uniform: true, body: inner, .. } => rotate(inner, fp),
            _ => false,
        };
        if rotated {
            let next_is_wait = body.get(i + 1).is_some_and(is_wait);
            if !next_is_wait {
                body.insert(i + 1, Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None });
            }
        }
        i += 1;
    }
}

/// Moves a wait at the end of a loop body to the first blocking statement
/// from the body's start; true when it did (a wait must follow the loop).
fn rotate(body: &mut Vec<Stmt>, fp: &Footprint) -> bool {
    if !body.last().is_some_and(is_wait) {
        return false;
    }
    let mut j = 0;
    while j + 1 < body.len() && passable(&body[j], fp) {
        j += 1;
    }
    if j + 1 >= body.len() {
        // Nothing in the body blocks: keep the wait where it is.
        return false;
    }
    if let Some(w) = body.pop() {
        body.insert(j, w);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(i: Inst) -> Stmt {
        Stmt::Inst { inst: i, guard: None }
    }
    fn wgmma(d: u32, region: u32) -> Stmt {
        inst(Inst::Wgmma {
            n: 8,
            ab: "f16",
            d: vec![Reg(d); 4],
            a: WgmmaA::Desc(Operand::Reg(Reg(90))),
            b_desc: Operand::Reg(Reg(91)),
            scale_d: Operand::Imm(1),
            neg_a: false,
            neg_b: false,
            trans_a: false,
            trans_b: false,
            regions: vec![Region { id: region, op: 1 }],
        })
    }
    fn op(dst: u32, src: u32) -> Stmt {
        inst(Inst::Op { op: "add.s32".into(), dst: Reg(dst), args: vec![Operand::Reg(Reg(src)), Operand::Imm(1)] })
    }
    fn st_shared(region: u32) -> Stmt {
        inst(Inst::St {
            space: Space::Shared,
            ty: "f32",
            srcs: vec![Operand::Reg(Reg(50))],
            addr: Address { base: Operand::Reg(Reg(51)), offset: 0 },
            region: Some(Region { id: region, op: 7 }),
        })
    }
    fn wait() -> Stmt {
        inst(Inst::WgmmaWait { pending: 0 })
    }
    fn commit() -> Stmt {
        inst(Inst::WgmmaCommit)
    }
    fn position(b: &[Stmt]) -> Vec<usize> {
        b.iter().enumerate().filter(|(_, s)| is_wait(s)).map(|(i, _)| i).collect()
    }

    #[test]
    fn waits_sink_to_the_first_dependent_statement() {
        // Independent arithmetic and a write to another region pass; a use of
        // the accumulator stops the wait.
        let mut b = vec![wgmma(10, 3), commit(), wait(), op(20, 21), st_shared(4), op(22, 10), op(23, 24)];
        defer_wgmma_waits(&mut b);
        assert_eq!(position(&b), vec![4], "{b:?}");
        // A write to the region the wgmma reads stops it.
        let mut b = vec![wgmma(10, 3), commit(), wait(), op(20, 21), st_shared(3)];
        defer_wgmma_waits(&mut b);
        assert_eq!(position(&b), vec![3]);
        // So do barriers.
        let mut b = vec![wgmma(10, 3), commit(), wait(), op(20, 21), inst(Inst::BarSync), op(22, 23)];
        defer_wgmma_waits(&mut b);
        assert_eq!(position(&b), vec![3]);
        // At the end of a straight block it stays at the end.
        let mut b = vec![wgmma(10, 3), commit(), wait(), op(20, 21)];
        defer_wgmma_waits(&mut b);
        assert_eq!(position(&b), vec![3]);
        // Adjacent waits merge.
        let mut b = vec![wgmma(10, 3), commit(), wait(), op(20, 21), wait(), op(22, 10)];
        defer_wgmma_waits(&mut b);
        assert_eq!(position(&b), vec![3], "{b:?}");
    }

    #[test]
    fn loop_waits_rotate_to_before_the_barrier() {
        // for { cp.async.wait; bar; use acc; wgmma; commit; wait; i++ }:
        // the wait goes before the barrier, and after the loop.
        let body = vec![
            inst(Inst::CpAsyncWait { pending: 1 }),
            inst(Inst::BarSync),
            op(10, 10),
            wgmma(10, 3),
            commit(),
            wait(),
            op(30, 30),
        ];
        let mut b = vec![Stmt::For {
            var: Reg(1),
            start: Operand::Imm(0),
            end: Operand::Imm(4),
            exit: Reg(2),
            uniform: true,
            body,
        }];
        defer_wgmma_waits(&mut b);
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(position(body), vec![1], "{body:?}");
        assert!(matches!(body[2], Stmt::Inst { inst: Inst::BarSync, .. }));
        assert!(is_wait(&b[1]), "{b:?}");
        // A body whose wait cannot reach the end keeps it inside.
        let body = vec![inst(Inst::BarSync), wgmma(10, 3), commit(), wait(), op(11, 10)];
        let mut b = vec![Stmt::For {
            var: Reg(1),
            start: Operand::Imm(0),
            end: Operand::Imm(4),
            exit: Reg(2),
            uniform: true,
            body,
        }];
        defer_wgmma_waits(&mut b);
        assert_eq!(b.len(), 1);
        let Stmt::For { body, .. } = &b[0] else { panic!() };
        assert_eq!(position(body), vec![3]);
    }
}

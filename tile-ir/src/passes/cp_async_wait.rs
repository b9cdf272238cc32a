//! Deferring a straight-line `cp.async.wait_group 0` past the independent
//! work after it (Thread IR → Thread IR, before barrier insertion), so that
//! a copy before a pipelined loop (attention's Q tile) is in flight while
//! the loop's prologue issues its first stages: the block waits for both
//! memory round trips at once instead of one after the other, which a block
//! of few iterations (causal attention's short rows) feels.
//!
//! Expects the lowering's pattern for a synchronous copy into shared memory
//! (`cp.async ...; cp.async.commit_group; cp.async.wait_group 0`), each
//! `cp.async` naming its shared region.
//!
//! Guarantees: only a `cp.async.wait_group 0` at the top level of the
//! function body moves, only later, and never past a statement that could
//! see the data it lands or change what it waits for: it passes register
//! arithmetic, parameter and global loads, tensor-map addresses, mbarrier
//! initialization and arrivals, TMA loads into regions no `cp.async` of the
//! function writes, `cp.async.commit_group` (the wait then covers one more
//! group, holding no `cp.async` issued after its old place: it waits for
//! more, never less), and an `if` made only of those (thread 0's TMA
//! issue); it stops at any shared-memory load or store, a `cp.async`, another
//! wait, barriers and fences, wgmmas, loops, and anything else. The barrier pass then orders
//! the data's readers after the wait where it now is (it places the
//! `bar.sync` for a cp.async writer after the wait that lands it).

use crate::thread_ir::{Inst, Space, Stmt};
use std::collections::HashSet;

/// Defers the top-level `cp.async.wait_group 0`s of `body` (see the module doc).
pub fn defer_cp_async_waits(body: &mut Vec<Stmt>) {
    let mut regions = HashSet::new();
    let mut unnamed = false;
    cp_async_regions(body, &mut regions, &mut unnamed);
    if unnamed {
        return;
    }
    let mut i = 0;
    while i < body.len() {
        if is_wait(&body[i]) {
            let mut j = i + 1;
            while j < body.len() && passable(&body[j], &regions) {
                j += 1;
            }
            if j > i + 1 {
                let wait = body.remove(i);
                body.insert(j - 1, wait);
                i = j;
                continue;
            }
        }
        i += 1;
    }
}

fn is_wait(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst { inst: Inst::CpAsyncWait { pending: 0 }, guard: None })
}

/// The shared regions the function's `cp.async`s write; `unnamed` when one
/// names none (then nothing moves).
fn cp_async_regions(body: &[Stmt], out: &mut HashSet<u32>, unnamed: &mut bool) {
    for s in body {
        match s {
            Stmt::Inst { inst: Inst::CpAsync { region, .. }, .. } => match region {
                Some(r) => {
                    out.insert(r.id);
                }
                None => *unnamed = true,
            },
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
            Stmt::If { then, otherwise, .. } => {
                cp_async_regions(then, out, unnamed);
                cp_async_regions(otherwise, out, unnamed);
            }
            Stmt::For { body, .. } => cp_async_regions(body, out, unnamed),
        }
    }
}

/// Whether a `cp.async.wait_group 0` may move past `s`.
fn passable(s: &Stmt, regions: &HashSet<u32>) -> bool {
    match s {
        Stmt::Comment(_) => true,
        Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).all(|s| passable(s, regions)),
        Stmt::For { .. } => false,
        Stmt::Inst { inst, .. } => match inst {
            Inst::Op { .. } | Inst::Pack { .. } | Inst::Unpack { .. } | Inst::LdParam { .. } => true,
            Inst::Ld { space, .. } => *space == Space::Global,
            Inst::TensorMapAddr { .. }
            | Inst::MbarInit { .. }
            | Inst::MbarArriveExpectTx { .. }
            | Inst::MbarArrive { .. }
            | Inst::ElectSync { .. }
            // The wait then also covers the group this closes, whose
            // cp.asyncs (none issued after the wait's old place: the scan
            // stops at one) were issued before: it waits for more, never
            // less (the TMA-copy pipeline's empty groups of its prologue).
            | Inst::CpAsyncCommit => true,
            Inst::TmaLoad { region, .. } => matches!(region, Some(r) if !regions.contains(&r.id)),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_ir::{Address, Operand, Reg, Region};

    fn at() -> Address {
        Address { base: Operand::Imm(0), offset: 0 }
    }
    fn inst(inst: Inst) -> Stmt {
        Stmt::Inst { inst, guard: None }
    }
    fn cp(r: u32) -> Stmt {
        inst(Inst::CpAsync {
            bytes: 16,
            dst: at(),
            src: at(),
            src_bytes: Operand::Imm(16),
            region: Some(Region { id: r, op: 0 }),
        })
    }
    fn tma(r: u32) -> Stmt {
        inst(Inst::TmaLoad {
            dst: at(),
            tmap: Operand::Imm(0),
            coords: vec![Operand::Imm(0)],
            mbar: at(),
            cache_hint: None,
            cta_dst: false,
            multicast: None,
            region: Some(Region { id: r, op: 0 }),
        })
    }
    fn thread0(then: Vec<Stmt>) -> Stmt {
        Stmt::If { cond: Reg(0), negate: false, uniform: false, then, otherwise: vec![] }
    }
    fn arith() -> Stmt {
        inst(Inst::Op { op: "add.s32".into(), dst: Reg(1), args: vec![Operand::Imm(1), Operand::Imm(2)] })
    }
    fn wait_at(b: &[Stmt]) -> usize {
        b.iter().position(is_wait).expect("a wait")
    }

    /// Q's copy, then the loop prologue's TMA of K and V (thread 0, their
    /// barriers, the pipeline's empty groups), then the fence before the
    /// loop: the wait lands after the issue, before the fence.
    #[test]
    fn the_wait_moves_past_the_prologue_issue() {
        let arrive = || inst(Inst::MbarArriveExpectTx { addr: at(), tx_bytes: Operand::Imm(16384) });
        let mut b = vec![
            cp(0),
            inst(Inst::CpAsyncCommit),
            inst(Inst::CpAsyncWait { pending: 0 }),
            arith(),
            thread0(vec![arrive(), tma(1)]),
            inst(Inst::CpAsyncCommit),
            thread0(vec![arrive(), tma(2)]),
            inst(Inst::CpAsyncCommit),
            inst(Inst::FenceProxyAsync),
        ];
        defer_cp_async_waits(&mut b);
        assert_eq!(wait_at(&b), 7, "{b:?}");
        assert!(matches!(b[8], Stmt::Inst { inst: Inst::FenceProxyAsync, .. }));
        assert_eq!(b.len(), 9);
    }

    /// What a wait must not pass: a TMA into a region a cp.async writes, a
    /// shared load, another cp.async, a barrier, a loop.
    #[test]
    fn the_wait_stops_where_its_data_or_its_groups_matter() {
        let shared_ld =
            inst(Inst::Ld { space: Space::Shared, ty: "b32", dsts: vec![Reg(2)], addr: at(), region: None });
        let stops = [
            thread0(vec![tma(0)]),
            shared_ld,
            cp(3),
            inst(Inst::BarSync),
            Stmt::For {
                var: Reg(3),
                start: Operand::Imm(0),
                end: Operand::Imm(1),
                exit: Reg(4),
                uniform: true,
                body: vec![],
            },
        ];
        for stop in stops {
            let mut b = vec![
                cp(0),
                inst(Inst::CpAsyncCommit),
                inst(Inst::CpAsyncWait { pending: 0 }),
                arith(),
                stop.clone(),
                arith(),
            ];
            defer_cp_async_waits(&mut b);
            assert_eq!(wait_at(&b), 3, "{stop:?}: {b:?}");
        }
        // A waited-for group that is not the last: the wait stays.
        let mut b = vec![cp(0), inst(Inst::CpAsyncWait { pending: 1 }), arith()];
        defer_cp_async_waits(&mut b);
        assert!(matches!(b[1], Stmt::Inst { inst: Inst::CpAsyncWait { pending: 1 }, .. }));
    }
}

//! The consumers' loop with the body's last gemm deferred by one iteration
//! ([`crate::CompileOptions::defer_last_gemm`], FA3's intra-warpgroup
//! overlap): iteration `k` issues its first gemm (attention's `S = Q·Kᵀ`)
//! and then the previous iteration's last gemm (`O += P·V`), and runs its
//! softmax while that second gemm is still on the tensor cores.
//!
//! Expects a consumers' loop of [`super::lower`] whose body, after its
//! pipelined copies, starts with a `clear` gemm `g1` reading ring `K`'s
//! buffer (nothing else in the body touches it) and an operand nothing in
//! the body writes, and ends with a gemm `g2` reading ring `V`'s buffer
//! (nothing else touches it either) and writing a fragment accumulator,
//! with exactly these two rings, both gemms on wgmma, `g2`'s other operand
//! a fragment (never a shared buffer the warpgroups rewrite), `g2` reading
//! nothing `g1` writes, and `g2`'s accumulator wider than `g1`'s (where it was
//! measured faster) unless the consumers are three warpgroups (FA3's
//! head-dim-64 schedule defers at any width, where the fragments leave
//! room for P beside the next S). The statements between them are `X`; `X[j]` is the first
//! that touches `g2`'s accumulator or its other operand (the rescale of O,
//! the conversion of S into P), `n` when none does. Where `X[j]` only
//! rescales `g2`'s accumulator (`R`: a parallel nest of stores into it,
//! reading fragments that neither `g1` nor anything after `R` writes, and
//! variables the body never binds; nothing between `R` and `g2` touching the
//! accumulator) and [`crate::CompileOptions::hoist_rescale`] is on, `R` of
//! iteration `k − 1` runs right before `g2(k − 1)`'s issue instead (FA3's
//! order: the rescale under `g1(k)`, not between the softmax and the next
//! issue), and `X[j..]` below means `X[j..]` without `R`.
//!
//! Guarantees (`st`/`ph` iteration `k`'s stage and parity; `pst`/`pph`
//! those of `k − 1`):
//! ```text
//! for k in a..b:
//!     wait full_K[st]
//!     (ping-pong: bar.sync 2 + w)           // my turn at the tensor cores
//!     g1(k) issued; commit                  // S in flight
//!     (R hoisted: wgmma.wait_group 1)       // a no-op, for ptxas: g2(k − 2) retired
//!     if k > a: wait full_V[pst]; (R(k − 1)); g2(k − 1) issued; commit
//!     else: fence; commit                   // an empty group
//!     (ping-pong: bar.arrive 2 + (1 − w), but warpgroup 1's in the last iteration)
//!     wgmma.wait_group 1                    // S landed
//!     arrive empty_K[st]
//!     X[0..j]                               // under g2(k − 1)
//!     if ctaid.x == 2³² − 1: nanosleep      // never: a block boundary ptxas keeps
//!     wgmma.wait_group 0                    // O and P free again
//!     if k > a: arrive empty_V[pst]
//!     X[j..]
//!     advance st, ph
//! if a < b: wait full_V[pst]; (R(b − 1)); g2(b − 1); wgmma.wait_group 0; arrive empty_V[pst]
//! bar.sync 1, T
//! ```
//! Every stage of both rings is waited for and released exactly once, K's
//! in its own iteration and V's one iteration later (or after the loop), so
//! the producer, which fills K's and V's stage `k` in iteration `k` after
//! their releases of iteration `k − S`, never waits for a release that
//! needs a later fill: the consumers' iteration `k` needs K[k], whose fill
//! follows V[k − 1]'s, which waited for V[k − 1 − S]'s release (iteration
//! `k − S ≤ k − 1`). No statement reads a register a wgmma in flight
//! writes or writes one it reads: S is read after `wait_group` leaves only
//! `g2` pending, and `g2`'s accumulator and operand are touched only after
//! `wait_group 0`. The ping-pong takes one turn per iteration, as the plain
//! loop's, so its counts and proof are those of [`super::lower`].

use super::lower::{without_final_wait, WslLowering, THREE_WARPGROUPS};
use std::collections::HashSet;

use crate::ir::{BufferId, Expr, LoopKind, Stmt as TStmt, StmtKind, VarId};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::{bound_vars, expr_vars, touches_memory};
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Stmt};

/// The two gemms of a body whose last gemm is deferred, and where its
/// operands are first touched (see the module doc).
#[derive(Copy, Clone, Debug)]
pub(super) struct Deferred {
    /// `g1`'s index in the body, and its ring.
    first: usize,
    first_ring: usize,
    /// `g2`'s index in the body (its last statement), and its ring.
    last: usize,
    last_ring: usize,
    /// The first statement after `g1` that touches `g2`'s accumulator or
    /// its other operand (`last` when none does).
    split: usize,
    /// `X[j]` when it only rescales `g2`'s accumulator (see
    /// [`rescale_nest`]): run with `g2`, before its issue, instead of in
    /// the body ([`crate::CompileOptions::hoist_rescale`]).
    hoisted: Option<usize>,
}

/// Whether `s` is a nest of parallel loops whose only statements are
/// stores into `acc` (attention's `acc[(i, j)] = acc[(i, j)] * alpha[i]`),
/// possibly under an `if` without `else` (`if alpha[i] != 1.0 { .. }`);
/// collects the buffers it reads (`acc` among them) and the variables
/// its expressions read that are not its own loops'.
fn rescale_nest(
    s: &TStmt,
    acc: BufferId,
    loops: &mut Vec<VarId>,
    reads: &mut Vec<BufferId>,
    outer: &mut HashSet<VarId>,
) -> bool {
    let mut note = |e: &Expr, loops: &Vec<VarId>| {
        let mut vars = HashSet::new();
        expr_vars(e, &mut vars, &mut false);
        outer.extend(vars.into_iter().filter(|v| !loops.contains(v)));
        e.collect_loads(reads);
    };
    match &s.kind {
        StmtKind::For { var, start, end, kind: LoopKind::Parallel, body } => {
            note(start, loops);
            note(end, loops);
            loops.push(*var);
            body.iter().all(|x| rescale_nest(x, acc, loops, reads, outer))
        }
        StmtKind::Store { buf, index, value } if *buf == acc => {
            for e in index.iter().chain([value]) {
                note(e, loops);
            }
            true
        }
        // A row's scaling skipped where its factor is 1 (a lazy rescale).
        StmtKind::If { cond, then, otherwise } if otherwise.is_empty() => {
            note(cond, loops);
            then.iter().all(|x| rescale_nest(x, acc, loops, reads, outer))
        }
        _ => false,
    }
}

/// Registers per consumer thread left beside the fragments when three
/// consumer warpgroups defer the last gemm (see `wsl_deferred_gemms`).
const THREE_DEFER_MARGIN: usize = 48;

impl Lx<'_> {
    /// The gemms of `body` to lower with [`Lx::lower_wsl_deferred_loop`],
    /// when the loop has that shape (see the module doc); `users[c]`: the
    /// statements touching ring `c`'s buffer.
    pub(super) fn wsl_deferred_gemms(
        &self,
        wl: &WslLowering,
        body: &[TStmt],
        users: &[Vec<usize>],
    ) -> Option<Deferred> {
        let ws = &wl.plan;
        if !wl.defer_last_gemm || !self.target.has(crate::target::Feature::Wgmma) {
            return None;
        }
        let copies = wl.copies.borrow();
        if copies.len() != 2 {
            return None;
        }
        let ring_of = |buf| copies.iter().position(|cp| cp.dst == buf);
        let stmts: Vec<usize> = (0..body.len()).filter(|i| !ws.copies.contains(i)).collect();
        let (&first, &last) = (stmts.first()?, stmts.last()?);
        if first == last {
            return None;
        }
        let StmtKind::Gemm { a: a1, b: b1, c: c1, clear: true, trans_a: ta1, trans_b: tb1, policy: p1 } =
            &body[first].kind
        else {
            return None;
        };
        let StmtKind::Gemm { a: a2, b: b2, c: c2, trans_a: ta2, trans_b: tb2, policy: p2, .. } = &body[last].kind
        else {
            return None;
        };
        // Both on wgmma (an mma.sync gemm is synchronous: nothing to overlap).
        if self.wgmma_plan(*a1, *b1, *c1, (*ta1, *tb1), *p1).is_none()
            || self.wgmma_plan(*a2, *b2, *c2, (*ta2, *tb2), *p2).is_none()
        {
            return None;
        }
        // One operand of each gemm is its ring's stage, the other not.
        let (first_ring, other1) = match (ring_of(*a1), ring_of(*b1)) {
            (None, Some(r)) => (r, *a1),
            (Some(r), None) => (r, *b1),
            _ => return None,
        };
        let (last_ring, other2) = match (ring_of(*a2), ring_of(*b2)) {
            (None, Some(r)) => (r, *a2),
            (Some(r), None) => (r, *b2),
            _ => return None,
        };
        if first_ring == last_ring || users[first_ring] != [first] || users[last_ring] != [last] {
            return None;
        }
        // g1's other operand (Q) is written by nothing in the body; g2 reads
        // nothing g1 writes (its issue follows the next g1's).
        if body.iter().enumerate().any(|(i, s)| i != first && touches_memory(self.k, s, other1).1)
            || other2 == *c1
            || c2 == c1
        {
            return None;
        }
        // g2's other operand in registers too (attention's P): one in shared
        // memory that the body writes (P staged through `p_s` when the
        // warpgroups split its columns) would be rewritten by one warpgroup
        // while the other's deferred g2 still reads it, and the wait that
        // retires a g2 is its own warpgroup's only.
        let fragment = |b| self.k.buffer(b).scope == crate::ir::Scope::Fragment;
        if !fragment(*c1) || !fragment(*c2) || !fragment(other2) {
            return None;
        }
        // Only where the last gemm is the wider one (attention with a head
        // dim above the key block, d256 with key blocks of 64): measured on
        // the H200 (BENCHMARKS.md) 1–2 % faster there, and 2–6 % slower
        // with d128 and key blocks of 128, where the ping-pong alone already
        // hides the softmax and the longer live ranges cost more.
        // Three consumer warpgroups (FA3's head-dim-64 schedule, no
        // ping-pong) defer at any width: nothing else overlaps a
        // warpgroup's softmax with its own wgmmas there.
        let cols = |b| self.k.buffer(b).const_shape().and_then(|s| s.last().copied());
        let three = ws.consumer_threads == THREE_WARPGROUPS;
        if !three && !matches!((cols(*c1), cols(*c2)), (Some(n1), Some(n2)) if n2 > n1) {
            return None;
        }
        // There, where P stays live beside the next S in 160 registers
        // (ptxas -v: d64 with key blocks of 64, 106 fragment registers,
        // assembles without spills; 96 and more, 130 and more, spill).
        if three && self.fragment_regs() + THREE_DEFER_MARGIN > ws.consumer_regs as usize {
            return None;
        }
        let split = (first + 1..last)
            .find(|&i| {
                let (r1, w1) = touches_memory(self.k, &body[i], *c2);
                let (r2, w2) = touches_memory(self.k, &body[i], other2);
                r1 || w1 || r2 || w2
            })
            .unwrap_or(last);
        let hoisted = (wl.hoist_rescale && split < last).then_some(split).filter(|&j| {
            // X[j] only scales g2's accumulator, from fragments that g1 and
            // nothing after X[j] writes and variables the body never binds
            // (the loop's own, bound outside it, is bound to k − 1 with g2): run in the next
            // iteration after g1's issue, it reads what it read here; nothing
            // after it in the body touches the accumulator, so moving it past
            // them changes nothing they see.
            let (mut reads, mut outer) = (Vec::new(), HashSet::new());
            rescale_nest(&body[j], *c2, &mut Vec::new(), &mut reads, &mut outer)
                && {
                    let mut bound = HashSet::new();
                    bound_vars(body, &mut bound);
                    outer.is_disjoint(&bound)
                }
                && reads.iter().filter(|&&r| r != *c2).all(|&r| {
                    fragment(r)
                        && r != *c1
                        && r != other2
                        && body[j + 1..=last].iter().all(|x| !touches_memory(self.k, x, r).1)
                })
                && body[j + 1..last].iter().all(|x| touches_memory(self.k, x, *c2) == (false, false))
        });
        Some(Deferred { first, first_ring, last, last_ring, split, hoisted })
    }

    /// A basic-block boundary that ptxas's scheduler keeps: a uniform
    /// branch over a `nanosleep` no block takes (`%ctaid.x` never reaches
    /// 2³² − 1). Before `g2`'s `wgmma.wait_group 0` it keeps the softmax
    /// above the wait: without it ptxas schedules the wait near the top of
    /// the softmax's block, and the softmax no longer runs under `g2`
    /// (measured: 8–15 % slower on the H200 than not deferring at all).
    fn schedule_fence(&mut self) {
        let x = self.op("mov.u32", RegClass::B32, vec![Operand::Special(crate::thread_ir::Special::CtaId(0))]);
        let never = self.op("setp.eq.u32", RegClass::Pred, vec![x.into(), Operand::Imm(u32::MAX as i64)]);
        let sleep = vec![Stmt::Inst { inst: Inst::Nanosleep { ns: 0 }, guard: None }];
        self.emit_if(Some(never), true, sleep, vec![]);
    }

    /// The consumers' loop over `a..b` with the last gemm deferred (see the
    /// module doc).
    pub(super) fn lower_wsl_deferred_loop(
        &mut self,
        wl: &WslLowering,
        var: VarId,
        (a, b): (Reg, Reg),
        body: &[TStmt],
        d: Deferred,
    ) -> R<()> {
        let stages = wl.plan.stages as i64;
        let copies = wl.copies.borrow().clone();
        let (kbuf, vbuf) = (copies[d.first_ring].dst, copies[d.last_ring].dst);
        let (kring, vring) = (wl.ring(d.first_ring), wl.ring(d.last_ring));
        let (stage, phase) = self.wsl_consumer_ring(wl);
        let vr = self.new_reg(RegClass::B32);
        let exit = self.new_reg(RegClass::Pred);
        // `g2` of iteration `k` (the loop variable bound to `k`) on V's
        // stage `st`: its wait for the stage, then the gemm; with or without
        // its final `wgmma.wait_group 0`.
        let last_gemm = |x: &mut Self, k: Reg, st: Reg, ph: Reg, keep_wait: bool| -> R<Vec<Stmt>> {
            x.capture(|y| {
                let full = y.ring_bar_addr(vring, stages, st, 0);
                let p = y.new_reg(RegClass::Pred);
                y.emit(Inst::MbarWait { addr: full, parity: ph.into(), pred: p });
                let saved_k = y.vars.insert(var, k);
                let saved_st = y.select_stage(vbuf, &Operand::Reg(st));
                let code = y.capture(|z| {
                    if let Some(j) = d.hoisted {
                        z.stmt(&body[j])?;
                    }
                    z.stmt(&body[d.last])
                });
                y.restore_stage(saved_st);
                match saved_k {
                    Some(r) => y.vars.insert(var, r),
                    None => y.vars.remove(&var),
                };
                let code = code?;
                y.cur().extend(if keep_wait { code } else { without_final_wait(code) });
                Ok(())
            })
        };
        // The stage and parity of the iteration before: `st − 1` (wrapping,
        // with the parity flipped).
        let previous = |x: &mut Self| -> (Reg, Reg) {
            let at0 = x.op("setp.eq.s32", RegClass::Pred, vec![stage.into(), Operand::Imm(0)]);
            let down = x.op("add.s32", RegClass::B32, vec![stage.into(), Operand::Imm(-1)]);
            let pst = x.op("selp.b32", RegClass::B32, vec![Operand::Imm(stages - 1), down.into(), at0.into()]);
            let flip = x.op("selp.b32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), at0.into()]);
            let pph = x.op("xor.b32", RegClass::B32, vec![phase.into(), flip.into()]);
            (pst, pph)
        };
        let saved_var = self.vars.insert(var, vr);
        self.loop_depth += 1;
        // Where the turn is taken and handed over in the loop body (indices
        // at its top level: g1's first statement, the `if` issuing g2).
        let mut points = (0, 0);
        let lowered = self.capture(|x| {
            let later = x.op("setp.gt.s32", RegClass::Pred, vec![vr.into(), a.into()]);
            let full = x.ring_bar_addr(kring, stages, stage, 0);
            let p = x.new_reg(RegClass::Pred);
            x.emit(Inst::MbarWait { addr: full, parity: phase.into(), pred: p });
            let saved_st = x.select_stage(kbuf, &Operand::Reg(stage));
            let g1 = x.capture(|y| y.stmt(&body[d.first]));
            x.restore_stage(saved_st);
            let g1 = without_final_wait(g1?);
            points.1 = x.cur().len();
            let (pst, pph) = previous(x);
            let km1 = x.op("add.s32", RegClass::B32, vec![vr.into(), Operand::Imm(-1)]);
            let g2 = last_gemm(x, km1, pst, pph, false)?;
            // g1 goes right before the `if` (the stage arithmetic of the
            // previous iteration above it is plain arithmetic).
            let at = points.1;
            let mut g1 = g1;
            if d.hoisted.is_some() {
                // A no-op (g1's group is the only one pending: the previous
                // iteration's `wait_group 0` retired g2(k − 2)) that ptxas
                // needs: it does not carry that wait across the back-edge,
                // takes the rescale below for a read of a wgmma accumulator
                // in flight and waits for g1 before g2's issue (C7517,
                // `warpgroup.wait is injected`), which serializes the two.
                g1.push(Stmt::Inst { inst: Inst::WgmmaWait { pending: 1 }, guard: None });
            }
            for (n, s) in g1.into_iter().enumerate() {
                x.cur().insert(at + n, s);
            }
            // The first iteration commits an empty group instead, so that one
            // `wait_group 1` below is S's on every path (ptxas serializes the
            // wgmmas when a path could read S pending); after a fence, which
            // ptxas would otherwise inject (C7519).
            let empty_group = vec![
                Stmt::Inst { inst: Inst::WgmmaFence, guard: None },
                Stmt::Inst { inst: Inst::WgmmaCommit, guard: None },
            ];
            x.emit_if(Some(later), true, g2, empty_group);
            points.0 = x.cur().len() - 1;
            x.emit(Inst::WgmmaWait { pending: 1 });
            x.wsl_arrive_empty(wl, d.first_ring, stage);
            // Before X[j]: g2(k − 1) retired (past the fence ptxas keeps), V's
            // stage of k − 1 released (none in the first iteration).
            let retire_g2 = |x: &mut Self| -> R<()> {
                x.schedule_fence();
                x.emit(Inst::WgmmaWait { pending: 0 });
                let empty = x.ring_bar_addr(vring, stages, pst, 1);
                let release = x.capture(|y| {
                    y.wsl_arrive_at(wl, d.last_ring, empty);
                    Ok(())
                })?;
                x.emit_if(Some(later), true, release, vec![]);
                Ok(())
            };
            for (i, s) in body.iter().enumerate().take(d.last).skip(d.first + 1) {
                if i == d.split {
                    retire_g2(x)?;
                }
                if wl.plan.copies.contains(&i) || d.hoisted == Some(i) {
                    continue;
                }
                if let Err(e) = x.stmt(s) {
                    x.errors.push(e);
                }
            }
            if d.split == d.last {
                retire_g2(x)?;
            }
            x.ring_advance(stages, stage, phase);
            Ok(())
        });
        self.loop_depth -= 1;
        match saved_var {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        let mut lowered = lowered?;
        if wl.wants_ping_pong() && !lowered.iter().any(WslLowering::blocks_ping_pong) {
            self.wsl_ping_pong(&mut lowered, points, vr, a, b)?;
        }
        self.cur().push(Stmt::For { var: vr, start: a.into(), end: b.into(), exit, uniform: true, body: lowered });
        // The last iteration's g2, after the loop.
        let ran = self.op("setp.lt.s32", RegClass::Pred, vec![a.into(), b.into()]);
        let tail = self.capture(|x| {
            let (pst, pph) = previous(x);
            let km1 = x.op("add.s32", RegClass::B32, vec![b.into(), Operand::Imm(-1)]);
            let g2 = last_gemm(x, km1, pst, pph, true)?;
            x.cur().extend(g2);
            x.wsl_arrive_empty(wl, d.last_ring, pst);
            Ok(())
        })?;
        self.emit_if(Some(ran), true, tail, vec![]);
        // What follows may reuse the stage memory that other consumer
        // warps' last reads still use.
        self.emit(Inst::BarSync);
        Ok(())
    }
}

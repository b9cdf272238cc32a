//! The body's last gemm deferred by one iteration where it reads an operand
//! the body stages in shared memory
//! ([`crate::CompileOptions::defer_through_shared`]): MLA's `S = Q·Kᵀ` on
//! warpgroup 0, the softmax, `P` stored into `p_s`, `O += P·V` from `p_s`
//! on both warpgroups (each its half of O's columns). FA3's order
//! (`defer.rs`, which keeps P in registers and so does not take this body):
//! iteration `k` issues its first gemm, then the previous iteration's last
//! gemm, and runs the softmax under that second gemm; the tensor cores, idle
//! during warpgroup 0's softmax in the plain loop, run `P·V(k − 1)` there.
//!
//! Expects a consumers' loop of [`super::lower`] (nothing issued ahead, not
//! `defer.rs`'s shape, `S ≥ 2` stages; a body that writes shared memory
//! never ping-pongs) whose body, copies
//! and leading `let`s aside, starts with a gemm on wgmma or a chain of them
//! into one fragment (`lower.rs`'s chained gemms) and ends with a gemm `g2`
//! on wgmma, not pieced, into a fragment accumulator, reading a shared
//! buffer that the body writes and that is no ring's stage (`p_s`), and
//! reading any ring's stage only where an earlier statement of the body
//! uses that ring too (MLA's `kv_s`, also K: its stage was waited for, by
//! every consumer that reads it, in the iteration that filled it); nothing
//! up to the chain's end writes `g2`'s operands or touches its
//! accumulator. `X[j]` is the first statement after the chain that touches
//! `g2`'s accumulator or writes one of its operands (MLA's `copy(&s, &mut
//! p_s)`; `n`, the end, when none does).
//!
//! Guarantees (`st`/`ph` iteration `k`'s stage and parity, `pst` that of
//! `k − 1`; `V` the rings whose last user is `g2`):
//! ```text
//! for k in a..b:
//!     the chain g1(k) issued as in `lower.rs` (ring waits, pieces), without its final wait
//!     if k > a: g2(k − 1) issued on stage pst, committed
//!     else: fence; commit                          // an empty group
//!     wgmma.wait_group 1                           // g1's groups retired: S landed
//!     releases of the rings whose last user is in the chain
//!     X[..j]                                       // under g2(k − 1)
//!     if ctaid.x == 2³² − 1: nanosleep             // never: a block boundary ptxas keeps
//!     wgmma.wait_group 0                           // g2(k − 1) retired
//!     if k > a: arrive empty_V[pst]
//!     bar.sync                                     // every warpgroup's g2(k − 1) retired
//!     X[j..]                                       // P(k) into p_s, O's rescale, …
//!     advance st, ph
//! if a < b: g2(b − 1) issued on stage pst
//! wgmma.wait_group 0; if a < b: arrive empty_V[pst]
//! bar.sync
//! ```
//! `g2(k − 1)` reads what it read at the end of iteration `k − 1`: its
//! operands are written only in `X[j..]` (by the definition of `j`, and
//! the chain writes none of them), its accumulator is touched by nothing
//! between, and its ring stages are `k − 1`'s. The barrier pass orders the
//! writes of `X[j..]` (P) before `g2`'s issue as before (a barrier before
//! the next iteration's first statement that conflicts, the first gemm at
//! the latest); but it sees `g2`'s read of its shared operands at the issue
//! and would take any barrier after the issue (one that a store of the
//! softmax needs) as ordering that read before the writes of `X[j..]`,
//! although another warpgroup's `g2` may still be reading; hence the
//! explicit `bar.sync` after the retirement, which every consumer reaches
//! only after its own `wait_group 0`. Every stage is waited for and
//! released once: the rings `V` one iteration later, or after the loop.
//! The producer's fill of `V`'s stage `k` waits for the release of `k − S`,
//! made in iteration `k − S + 1 ≤ k − 1`, which needs only fills before `k`,
//! so nothing deadlocks for any trip count (0, 1, 2, …); with one stage it
//! would (iteration `k`'s first gemm would wait for a fill that waits for
//! its own iteration's release), hence `S ≥ 2`. The first iteration's empty
//! group keeps `wait_group 1` the chain's on every path (ptxas serializes
//! the wgmmas where a path could read the scores still pending).

use super::lower::{LateWait, WslLowering};
use crate::ir::{Scope, Stmt as TStmt, StmtKind, VarId};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::touches_memory;
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Stmt};

impl Lx<'_> {
    /// The deferral of `body`'s last gemm through shared memory, when the
    /// loop has that shape (see the module doc): a [`LateWait`] whose
    /// `split` is `X[j]`'s index. `users[c]`: the statements touching ring
    /// `c`'s buffer; `chained`: the body's chained gemms.
    pub(super) fn wsl_shared_deferral(
        &self,
        wl: &WslLowering,
        body: &[TStmt],
        users: &[Vec<usize>],
        chained: &[usize],
    ) -> Option<LateWait> {
        let ws = &wl.plan;
        // (A body writing shared memory never ping-pongs: `turns.rs`.)
        if !wl.defer_through_shared || !self.target.has(crate::target::Feature::Wgmma) || ws.stages < 2 {
            return None;
        }
        let stmts: Vec<usize> = (0..body.len()).filter(|i| !ws.copies.contains(i)).collect();
        let on_wgmma = |i: usize| match &body[i].kind {
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy).is_some().then_some([*a, *b, *c])
            }
            _ => None,
        };
        let mut at = stmts.iter().position(|&i| !matches!(body[i].kind, StmtKind::Let { .. }))?;
        let last = *stmts.last()?;
        on_wgmma(stmts[at])?;
        let [a2, b2, c2] = on_wgmma(last)?;
        while chained.contains(&stmts[at]) {
            at += 1;
        }
        let after = stmts[at];
        if after >= last || wl.pieces.borrow().iter().flatten().any(|p| p.gemm == last) {
            return None;
        }
        let copies = wl.copies.borrow();
        let ring_of = |buf| copies.iter().position(|cp| cp.dst == buf);
        let scope = |b| self.k.buffer(b).scope;
        if scope(c2) != Scope::Fragment {
            return None;
        }
        let writes = |i: usize, b| touches_memory(self.k, &body[i], b).1;
        // A staged operand (P): shared, no ring's, written by the body.
        let staged = [a2, b2]
            .into_iter()
            .any(|op| scope(op) == Scope::Shared && ring_of(op).is_none() && stmts.iter().any(|&i| writes(i, op)));
        if !staged {
            return None;
        }
        // A ring stage g2 reads was waited for by an earlier user.
        if [a2, b2].into_iter().filter_map(ring_of).any(|r| users[r].first() == Some(&last)) {
            return None;
        }
        let clash = stmts[..=at].iter().any(|&i| {
            [a2, b2, c2].into_iter().any(|buf| writes(i, buf)) || touches_memory(self.k, &body[i], c2).0
        });
        if clash {
            return None;
        }
        let split = stmts[at + 1..]
            .iter()
            .copied()
            .find(|&i| {
                let (r, w) = touches_memory(self.k, &body[i], c2);
                r || w || writes(i, a2) || writes(i, b2)
            })
            .unwrap_or(last);
        let rings = (0..users.len()).filter(|&c| users[c].last() == Some(&last)).collect();
        Some(LateWait { after, last, rings, split: Some(split) })
    }

    /// `g2` of iteration `k` (the loop variable bound to `k`) issued on
    /// ring stage `pst`, committed and not waited for, as code.
    pub(super) fn wsl_deferred_issue(
        &mut self,
        wl: &WslLowering,
        (var, k): (VarId, Reg),
        g2: &TStmt,
        pst: Reg,
    ) -> R<Vec<Stmt>> {
        let copies = wl.copies.borrow().clone();
        self.capture(|x| {
            let saved_k = x.vars.insert(var, k);
            let mut saved = Vec::new();
            for cp in &copies {
                if touches_memory(x.k, g2, cp.dst).0 {
                    saved.push(x.select_stage(cp.dst, &Operand::Reg(pst)));
                }
            }
            let code = x.capture(|y| y.stmt(g2));
            for st in saved.into_iter().rev() {
                x.restore_stage(st);
            }
            match saved_k {
                Some(r) => x.vars.insert(var, r),
                None => x.vars.remove(&var),
            };
            x.cur().extend(super::lower::without_final_wait(code?));
            Ok(())
        })
    }

    /// In iteration `vr` of `a..` (on ring stage `stage`): `g2(vr − 1)`
    /// issued on the stage before (none in
    /// the first iteration, which commits an empty group instead), then
    /// the wait that retires the chain's groups (see the module doc). Where
    /// the chain's end `g1` is one warpgroup's, in both sides of a branch on
    /// that warpgroup (the merge pass joins it with the chain's): ptxas
    /// takes a wgmma group pending where the paths of a warpgroup's branch
    /// meet for one still in flight on every later read of its
    /// accumulator, and serializes the kernel's wgmmas (C7515).
    pub(super) fn wsl_deferred_issue_in_loop(
        &mut self,
        wl: &WslLowering,
        (var, vr, a): (VarId, Reg, Reg),
        g2: &TStmt,
        stage: Reg,
        g1: &TStmt,
    ) -> R<()> {
        // Each side computes its own operands: nothing between the chain's
        // branch and this one, so that the merge pass joins them.
        let side = |x: &mut Self| -> R<Vec<Stmt>> {
            x.capture(|y| {
                let pst = y.ring_previous(wl.plan.stages as i64, stage);
                let later = y.op("setp.gt.s32", RegClass::Pred, vec![vr.into(), a.into()]);
                let km1 = y.op("add.s32", RegClass::B32, vec![vr.into(), Operand::Imm(-1)]);
                let issue = y.wsl_deferred_issue(wl, (var, km1), g2, pst)?;
                let empty_group = vec![
                    Stmt::Inst { inst: Inst::WgmmaFence, guard: None },
                    Stmt::Inst { inst: Inst::WgmmaCommit, guard: None },
                ];
                y.emit_if(Some(later), true, issue, empty_group);
                y.emit(Inst::WgmmaWait { pending: 1 });
                Ok(())
            })
        };
        match self.owner_of(g1)? {
            Some(w) => {
                let (then, otherwise) = (side(self)?, side(self)?);
                let cond = self.warpgroup_pred(w);
                self.cur().push(Stmt::If { cond, negate: false, uniform: false, then, otherwise });
            }
            None => {
                let code = side(self)?;
                self.cur().extend(code);
            }
        }
        Ok(())
    }
}

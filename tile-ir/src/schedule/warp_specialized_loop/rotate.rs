//! The body's last gemm rotated to the top of the next iteration
//! ([`crate::CompileOptions::rotate_last_gemm`]): MLA's `S = Q·Kᵀ` on
//! warpgroup 0, the softmax, `P` stored into `p_s`, `O += P·V` from `p_s`
//! on both warpgroups (each its half of O's columns). The plain loop waits
//! for `P·V(k)` at the end of iteration `k` and issues `Q·Kᵀ(k + 1)` after
//! the back-edge: the tensor cores drain and refill in between. Rotated,
//! `P·V(k)` is issued at the top of iteration `k + 1`, right before
//! `Q·Kᵀ(k + 1)`, and waited for right after that issue: the two run back
//! to back, and `P·V`'s stage is released when it retires, as early as in
//! the plain loop. (Deferring it further, FA3's order with the softmax under
//! `P·V`, holds the stage it reads, which is also `Q·Kᵀ`'s, until the
//! softmax ends: measured 0.81× on the H100, the producer's lead for the
//! next block gone; leaving it in flight across the back-edge until the
//! scores land, `lower.rs`'s late wait, holds it for `Q·Kᵀ`: 0.96–0.98×.)
//!
//! Expects a consumers' loop of [`super::lower`] (nothing issued ahead, no
//! late wait, not `defer.rs`'s shape, `S ≥ 2` stages) whose body, copies
//! and leading `let`s aside, starts with a gemm on wgmma or a chain of them
//! into one fragment (`lower.rs`'s chained gemms, one commit group each)
//! and ends with a gemm `g2` on wgmma, not pieced, into a fragment
//! accumulator, reading a shared buffer that the body writes and that is no
//! ring's stage (`p_s`: the case measured), and reading any ring's stage
//! only where an earlier statement of the body uses that ring too (MLA's
//! `kv_s`, also K: its stage was waited for, by every consumer that reads
//! it, in the iteration that filled it); nothing in the chain writes `g2`'s
//! operands or touches its accumulator.
//!
//! Guarantees (`st`/`ph` iteration `k`'s stage and parity, `pst` that of
//! `k − 1`; `V` the rings whose last user is `g2`; `n` the chain's gemms;
//! `w` the warpgroup owning the chain, whose branches the merge pass joins):
//! ```text
//! for k in a..b:
//!     the leading lets
//!     if w: { if k > a: g2(k − 1) on pst, committed; else: fence; commit }   // an empty group
//!     else: { the same }
//!     the chain g1(k) issued as in `lower.rs` (ring waits, pieces), without its final wait
//!     if w: { wgmma.wait_group n                  // g2(k − 1) retired, g1 in flight
//!             if k > a: arrive empty_V[pst]
//!             wgmma.wait_group 0 }                // S landed
//!     else: { wgmma.wait_group 0; if k > a: arrive empty_V[pst] }
//!     the rest of the body but g2 (releases of the chain's rings, softmax, P, …)
//!     advance st, ph
//! if a < b: g2(b − 1) issued on stage pst
//! wgmma.wait_group 0; if a < b: arrive empty_V[pst]
//! bar.sync
//! ```
//! `g2(k − 1)` reads what it read at the end of iteration `k − 1`: between
//! the two points only the leading `let`s run (scalars), its accumulator
//! and operands are written by nothing, and its ring stages are `k − 1`'s.
//! Every consumer retires it before the rest of the body, so the barrier
//! the pass puts before the body's first write of its shared operands (P)
//! comes after every warpgroup's retirement. The barrier pass also orders
//! the previous iteration's writes of those operands before the issue (a
//! barrier before the branch that issues it). Every stage is waited for and
//! released once: the rings `V` at the top of the next iteration, or after
//! the loop; the producer's fill of `V`'s stage `k` waits for the release of
//! `k − S`, made in iteration `k − S + 1 ≤ k − 1` after only fills before
//! `k` were waited for, so nothing deadlocks for any trip count (0, 1, 2,
//! …); with one stage it would (iteration `k`'s chain waits for a fill that
//! waits for its own iteration's release), hence `S ≥ 2`. The first
//! iteration's empty group keeps the group counts of every path equal.
//! Issue and retirement sit in both sides of a branch on the chain's
//! warpgroup, with nothing between them and the chain's own branches: ptxas
//! takes a wgmma group pending where a warpgroup branch's paths meet for one
//! in flight on every later read of its accumulator, and serializes the
//! kernel's wgmmas (C7514, C7515).

use super::lower::{LateWait, WslLowering};
use crate::ir::{Scope, Stmt as TStmt, StmtKind, VarId};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::touches_memory;
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Stmt};

impl Lx<'_> {
    /// The rotation of `body`'s last gemm, when the loop has that shape
    /// (see the module doc): a [`LateWait`] whose `rotated` is the chain's
    /// first statement. `users[c]`: the statements touching ring `c`'s
    /// buffer; `chained`: the body's chained gemms.
    pub(super) fn wsl_rotated_gemm(
        &self,
        wl: &WslLowering,
        body: &[TStmt],
        users: &[Vec<usize>],
        chained: &[usize],
    ) -> Option<LateWait> {
        let ws = &wl.plan;
        if !wl.rotate_last_gemm || !self.target.has(crate::target::Feature::Wgmma) || ws.stages < 2 {
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
        let first = stmts[at];
        let last = *stmts.last()?;
        on_wgmma(first)?;
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
        let clash = stmts[..=at]
            .iter()
            .any(|&i| [a2, b2, c2].into_iter().any(|buf| writes(i, buf)) || touches_memory(self.k, &body[i], c2).0);
        if clash {
            return None;
        }
        let rings = (0..users.len()).filter(|&c| users[c].last() == Some(&last)).collect();
        Some(LateWait { after, last, rings, rotated: Some(first) })
    }

    /// `g2` of iteration `k` (the loop variable bound to `k`) issued on
    /// ring stage `pst`, committed and not waited for, as code.
    pub(super) fn wsl_rotated_gemm_code(
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

    /// Emits `code(x, owner_side)` in both sides of a branch on the
    /// warpgroup owning `g1` (each side lowered apart: nothing between it
    /// and `g1`'s own branch, so that the merge pass joins them), or once
    /// where `g1` runs on every consumer.
    fn wsl_beside_chain(&mut self, g1: &TStmt, code: impl Fn(&mut Self, bool) -> R<Vec<Stmt>>) -> R<()> {
        match self.owner_of(g1)? {
            Some(w) => {
                let (then, otherwise) = (code(self, true)?, code(self, false)?);
                let cond = self.warpgroup_pred(w);
                self.cur().push(Stmt::If { cond, negate: false, uniform: false, then, otherwise });
            }
            None => {
                let code = code(self, true)?;
                self.cur().extend(code);
            }
        }
        Ok(())
    }

    /// Before the chain's first statement `g1` in iteration `vr` (on ring
    /// stage `stage`, not the first): `g2(vr − 1)` issued on the stage
    /// before (see the module doc).
    pub(super) fn wsl_rotated_issue(
        &mut self,
        wl: &WslLowering,
        (var, vr): (VarId, Reg),
        g2: &TStmt,
        stage: Reg,
        g1: &TStmt,
    ) -> R<()> {
        self.wsl_beside_chain(g1, |x, _| {
            x.capture(|y| {
                let pst = y.ring_previous(wl.plan.stages as i64, stage);
                let km1 = y.op("add.s32", RegClass::B32, vec![vr.into(), Operand::Imm(-1)]);
                let issue = y.wsl_rotated_gemm_code(wl, (var, km1), g2, pst)?;
                y.cur().extend(issue);
                Ok(())
            })
        })
    }

    /// After the chain's end `g1` (its final wait left out), in an
    /// iteration but the first: the rotated gemm retired and its rings'
    /// stages released, then the chain's `groups` groups retired (see the
    /// module doc).
    pub(super) fn wsl_rotated_retire(
        &mut self,
        wl: &WslLowering,
        late: &LateWait,
        stage: Reg,
        fenced: &[bool],
        groups: u32,
        g1: &TStmt,
    ) -> R<()> {
        self.wsl_beside_chain(g1, |x, own| {
            x.capture(|y| {
                y.emit(Inst::WgmmaWait { pending: if own { groups } else { 0 } });
                let release = y.wsl_release_previous(wl, &late.rings, stage, fenced)?;
                y.cur().extend(release);
                if own {
                    y.emit(Inst::WgmmaWait { pending: 0 });
                }
                Ok(())
            })
        })
    }

    /// The chain's first gemm's pieced code `code` (`[if w { .. } else {
    /// the others' piece waits }]`) with the rotated gemm retired right
    /// after the first piece's slices: there a commit, `wgmma.wait_group 1`
    /// (the rotated gemm's group and the first piece's: the former retired)
    /// and the releases; the others retire it and release first.
    pub(super) fn wsl_rotated_retire_in_pieces(
        &mut self,
        wl: &WslLowering,
        late: &LateWait,
        stage: Reg,
        fenced: &[bool],
        mut code: Vec<Stmt>,
    ) -> R<Vec<Stmt>> {
        let [Stmt::If { then, otherwise, uniform: false, .. }] = &mut code[..] else {
            return Err(self.err("internal: a rotated chain's pieced gemm is not one warpgroup's"));
        };
        let waits: Vec<usize> = then
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Stmt::Inst { inst: Inst::MbarWait { .. }, .. }))
            .map(|(i, _)| i)
            .collect();
        let Some(&second) = waits.get(1) else {
            return Err(self.err("internal: a rotated chain's pieced gemm has one piece"));
        };
        // The second piece's wait, with the address arithmetic before it.
        let mut at = second;
        while at > 0 && !matches!(then[at - 1], Stmt::Inst { inst: Inst::Wgmma { .. }, .. }) {
            at -= 1;
        }
        let own = self.capture(|x| {
            x.emit(Inst::WgmmaCommit);
            x.emit(Inst::WgmmaWait { pending: 1 });
            let release = x.wsl_release_previous(wl, &late.rings, stage, fenced)?;
            x.cur().extend(release);
            Ok(())
        })?;
        for (n, s) in own.into_iter().enumerate() {
            then.insert(at + n, s);
        }
        let others = self.capture(|x| {
            x.emit(Inst::WgmmaWait { pending: 0 });
            let release = x.wsl_release_previous(wl, &late.rings, stage, fenced)?;
            x.cur().extend(release);
            Ok(())
        })?;
        for (n, s) in others.into_iter().enumerate() {
            otherwise.insert(n, s);
        }
        Ok(code)
    }
}

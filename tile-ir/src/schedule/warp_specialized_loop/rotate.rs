//! The scores issued one turn early ([`crate::CompileOptions::wsloop_rotate_scores`]):
//! a loop body that opens with one warpgroup's chain of gemms into a
//! fragment of its own (MLA's seesaw: warpgroup 0's `S₀ = Q·K₀ᵀ + Q_pe·K_peᵀ`)
//! issues the chain of iteration `k + 1` at the end of iteration `k`,
//! right behind the body's last gemm (block 1's P·V), instead of at the
//! top of `k + 1`: the tensor cores go from one to the other without
//! draining at the loop's turn, and the chain's wait for the next stage's
//! boxes runs while the last gemm does. The chain's accumulator is dead
//! there (the chain's first gemm overwrites it), so no twin registers are
//! needed, unlike issuing ahead (`turns.rs`).
//!
//! Expects the plain consumers' loop of [`super::lower`] split per
//! warpgroup (two consumer warpgroups, `wsloop_split_warpgroups`): no
//! gemm issued ahead or left late, no ping-pong, no guarded waits, no
//! multicast ring (persistent or not); a body whose statements before the
//! chain are `let`s and the pipelined copies, whose chain's operands are
//! ring stages or buffers the body never writes, and whose last statement
//! does not touch the chain's accumulator.
//!
//! Guarantees (`w` the chain's warpgroup, `G(k)` its chain for iteration
//! `k`: the ring waits or piece waits of its stages, then its wgmmas and
//! commits, `n` commits in all):
//! ```text
//! if a < b:                                   // uniform; split whole per warpgroup
//!   if w: G(a)                                // on the loop's first stage and phase
//!   for k in a..b:
//!     top:              (the other warpgroups' waits for the chain's stages, as before)
//!                       wgmma.wait_group 0    // retires G(k) on w
//!     ...
//!     the last statement: its wgmmas, committed, not waited for
//!                       (pending gemms retired)
//!                       if k + 1 < b: (if w: G(k + 1) on stage st + 1, its phase)
//!                       else: (if w: fence, n empty commit groups)
//!                       if w: wgmma.wait_group n else: wgmma.wait_group 0
//!                       the last statement's rings released
//!   wgmma.wait_group 0
//! ```
//! (When the last statement is not a gemm, `G(k + 1)` is issued after
//! everything else and no wait is changed.) `wgmma.wait_group n` retires
//! every group but the last `n` (groups complete in order): `G(k + 1)`'s,
//! or the empty ones in the last iteration, so the last gemm's rings are
//! released after its reads in every iteration (the persistent variant's
//! producer refills them for its next tile). `G(k + 1)` waits for the next
//! stage's boxes, which the producer refills once every consumer released
//! iteration `k`'s; each warpgroup releases them within its own iteration
//! `k`, before any barrier of iteration `k + 1`, so `w` waiting there at
//! the end of its iteration `k` blocks nobody it waits for.
//!
//! With per-box releases (`wsloop_piece_releases`) and one-stage rings
//! (the seesaw), the chain is cut in two: the slices reading the boxes
//! the other warpgroup releases early (V's left half of block 0, which its
//! half of P·V does not read) first, then `wait_group 1` (retiring the last gemm) and the
//! last statement's releases, then the rest, left in flight. Without the
//! cut, `w` released block 1's ring only after block 0's whole refill had
//! landed, and the producer's refill of block 1 waited behind it (timed
//! on an H100: 9–10 % slower than not rotating; cut, 5 %). FlashMLA
//! orders its next scores so too (4 boxes, then the release, then 5).
//! ```text
//!   if k + 1 < b: (if w: G₁(k + 1), commit) else: (if w: fence, 1 empty group)
//!   if w: wgmma.wait_group 1 else: wgmma.wait_group 0
//!   the last statement's rings released
//!   if k + 1 < b: (if w: G₂(k + 1))
//! ```
//!
//! The shape is ptxas's: every path into the loop's top passes an issue of
//! the chain (the first before the loop, in the `if` that skips the loop),
//! and the chain is issued only in `w`'s copy of the split loop. A top
//! issuing in the first iteration only (`if k == a`), or a first issue
//! outside the `if`, made ptxas serialize the persistent variant's wgmmas
//! (C7515: on the path skipping the issue, the accumulator's registers
//! last written by the previous tile's softmax); one before the split
//! would be in flight, for ptxas, through the other warpgroup's copy,
//! whose fragments may share its registers.

use super::lower::{without_final_wait, WslLowering};
use super::pieces::CHAIN_CUT;
use crate::ir::{BufferId, Scope, Stmt as TStmt, StmtKind, VarId, WarpPolicy};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::{touches, touches_memory};
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Stmt};

/// The chain issued one turn early (see the module doc).
#[derive(Clone, Debug)]
pub(super) struct Rotation {
    /// The chain's statements in the body, in order.
    pub(super) stmts: Vec<usize>,
    /// The warpgroup that runs them (`policy(Warpgroup(w))`).
    pub(super) owner: u32,
}

impl Lx<'_> {
    /// The chain to issue one turn early, when the loop body `body` (its
    /// rings' users `users`) has one (see the module doc).
    pub(super) fn wsl_rotation(&self, wl: &WslLowering, body: &[TStmt], users: &[Vec<usize>]) -> Option<Rotation> {
        let ws = &wl.plan;
        if !wl.rotate_scores
            || wl.guarded_waits
            || !wl.split_warpgroups
            || self.k.threads != 256
            || !self.target.has(crate::target::Feature::Wgmma)
        {
            return None;
        }
        let copies = wl.copies.borrow();
        if copies.iter().any(|c| c.share.is_some()) {
            return None;
        }
        let stmts: Vec<usize> = (0..body.len()).filter(|i| !ws.copies.contains(i)).collect();
        let head = stmts.iter().position(|&i| !matches!(body[i].kind, StmtKind::Let { .. }))?;
        let is_ring = |b: BufferId| copies.iter().any(|c| c.dst == b);
        let written = |b: BufferId| body.iter().any(|s| touches_memory(self.k, s, b).1);
        let mut chain = Vec::new();
        let mut acc_owner: Option<(BufferId, u32)> = None;
        for &i in &stmts[head..] {
            let StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy: WarpPolicy::Warpgroup(w) } = &body[i].kind
            else {
                break;
            };
            match acc_owner {
                None if *clear => acc_owner = Some((*c, *w)),
                Some((c0, w0)) if !*clear && c0 == *c && w0 == *w => {}
                _ => break,
            }
            let ok_operand = |x: BufferId| is_ring(x) || !written(x);
            if self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), WarpPolicy::Warpgroup(*w)).is_none()
                || !ok_operand(*a)
                || !ok_operand(*b)
            {
                return None;
            }
            chain.push(i);
        }
        let (acc, owner) = acc_owner?;
        let last = *stmts.last()?;
        if chain.contains(&last) || self.k.buffer(acc).scope != Scope::Fragment {
            return None;
        }
        if self.plan.frags.get(&acc).and_then(|l| l.root.owner) != Some(owner) {
            return None;
        }
        let (r, w) = touches(&body[last], acc);
        // Every ring the chain reads is first read by it (its stage waits
        // move with it).
        let first_in_chain = (0..copies.len())
            .filter(|&ci| chain.iter().any(|&i| touches_memory(self.k, &body[i], copies[ci].dst).0))
            .all(|ci| users[ci].first().is_some_and(|f| chain.contains(f)));
        (!r && !w && first_in_chain).then_some(Rotation { stmts: chain, owner })
    }

    /// The chain `rot` of iteration `k` (the loop variable `var` bound to
    /// it) on the rings' stage and phase `(stage, phase)`: per statement,
    /// the full waits of the unpieced rings it reads first, then its
    /// wgmmas (a pieced gemm's each box waited for before its first
    /// slice), committed and not waited for; all in warpgroup `w`'s branch.
    /// With `cut`, split before the wait for box `cut` of the first gemm
    /// into two such branches, the first committed at its end (the second
    /// part empty without a cut).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wsl_rotated_issue(
        &mut self,
        wl: &WslLowering,
        rot: &Rotation,
        body: &[TStmt],
        (var, k): (VarId, Reg),
        (stage, phase): (Reg, Reg),
        users: &[Vec<usize>],
        cut: Option<usize>,
    ) -> R<(Vec<Stmt>, Vec<Stmt>)> {
        let stages = wl.plan.stages as i64;
        let copies = wl.copies.borrow().clone();
        let pieces = wl.pieces.borrow().clone();
        let saved_var = self.vars.insert(var, k);
        let code = self.capture(|x| {
            let selected: Vec<_> = copies.iter().map(|c| x.select_stage(c.dst, &Operand::Reg(stage))).collect();
            for &i in &rot.stmts {
                for ci in (0..copies.len()).filter(|&ci| users[ci].first() == Some(&i)) {
                    if pieces.get(ci).is_none_or(|p| p.is_none()) {
                        x.wsl_full_wait(wl, ci, stages, (stage, phase));
                    }
                }
                let code = x.capture(|y| y.stmt(&body[i]))?;
                let code = match pieces.iter().flatten().find(|p| p.gemm == i) {
                    Some(p) => {
                        x.wsl_piece_waits(p, stages, (stage, phase), code, false, cut.filter(|_| i == rot.stmts[0]))?
                    }
                    None => code,
                };
                x.cur().extend(without_final_wait(code));
            }
            for st in selected.into_iter().rev() {
                x.restore_stage(st);
            }
            Ok(())
        });
        match saved_var {
            Some(r) => self.vars.insert(var, r),
            None => self.vars.remove(&var),
        };
        let (mut first, rest) = split_at_cut(code?);
        let cond = self.warpgroup_pred(rot.owner);
        let branch = |then| vec![Stmt::If { cond, negate: false, uniform: false, then, otherwise: vec![] }];
        Ok(match rest {
            Some(rest) => {
                first.push(Stmt::Inst { inst: Inst::WgmmaCommit, guard: None });
                (branch(first), branch(rest))
            }
            None => (branch(first), vec![]),
        })
    }

    /// Where the chain of `rot` is cut (see the module doc): the box of
    /// its first gemm's ring before which the slices read only boxes the
    /// other warpgroup releases early, when there are such slices and
    /// others after them.
    fn wsl_rotation_cut(&self, wl: &WslLowering, rot: &Rotation) -> Option<usize> {
        let pieces = wl.pieces.borrow();
        let p = pieces.iter().flatten().find(|p| p.gemm == rot.stmts[0])?;
        let other = p.releases.as_ref()?.early.get(1 - rot.owner as usize)?;
        let first_late = p.slices.iter().position(|&j| other.get(j).is_none_or(|e| e.is_none()))?;
        (first_late > 0).then(|| p.slices[first_late])
    }

    /// The top of the loop's part of the chain statement lowered into
    /// `code`: its issue (warpgroup `w`'s branch holding wgmmas) dropped,
    /// the closing waits (in the branch or after it) and the other
    /// warpgroups' waits kept.
    pub(super) fn wsl_rotated_top(code: &mut [Stmt]) {
        for s in code {
            if let Stmt::If { then, .. } = s {
                if super::lower::insts_of(then).iter().any(|i| matches!(i, Inst::Wgmma { .. })) {
                    let waits = then
                        .iter()
                        .rev()
                        .take_while(|s| matches!(s, Stmt::Inst { inst: Inst::WgmmaWait { .. }, .. }))
                        .count();
                    then.drain(..then.len() - waits);
                }
            }
        }
    }

    /// The chain of iteration `k + 1` at the end of iteration `k` (stage
    /// `stage`, phase `phase`, loop over `..b`), issued when `k + 1 < b`,
    /// and the number of groups it commits; with the chain cut (see the
    /// module doc), its first part issued here and the rest returned (for
    /// after the last statement's releases; empty when uncut).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wsl_rotated_next(
        &mut self,
        wl: &WslLowering,
        rot: &Rotation,
        body: &[TStmt],
        (var, k, b): (VarId, Reg, Reg),
        (stage, phase): (Reg, Reg),
        users: &[Vec<usize>],
    ) -> R<(u32, Vec<Stmt>)> {
        let stages = wl.plan.stages as i64;
        let k1 = self.op("add.s32", RegClass::B32, vec![k.into(), Operand::Imm(1)]);
        let more = self.op("setp.lt.s32", RegClass::Pred, vec![k1.into(), b.into()]);
        let next = self.op("add.s32", RegClass::B32, vec![stage.into(), Operand::Imm(1)]);
        let wrap = self.op("setp.eq.s32", RegClass::Pred, vec![next.into(), Operand::Imm(stages)]);
        let st1 = self.op("selp.b32", RegClass::B32, vec![Operand::Imm(0), next.into(), wrap.into()]);
        let flip = self.op("selp.b32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), wrap.into()]);
        let ph1 = self.op("xor.b32", RegClass::B32, vec![phase.into(), flip.into()]);
        let cut = self.wsl_rotation_cut(wl, rot);
        let (code, rest) = self.wsl_rotated_issue(wl, rot, body, (var, k1), (st1, ph1), users, cut)?;
        let commits = super::lower::insts_of(&code).iter().filter(|i| matches!(i, Inst::WgmmaCommit)).count();
        // In the last iteration, as many empty groups: `wait_group n` then
        // retires the last gemm before its rings are released (the
        // persistent variant's producer refills them for the next tile).
        let mut empty = vec![Stmt::Inst { inst: Inst::WgmmaFence, guard: None }];
        empty.extend(vec![Stmt::Inst { inst: Inst::WgmmaCommit, guard: None }; commits]);
        let cond = self.warpgroup_pred(rot.owner);
        let empty = vec![Stmt::If { cond, negate: false, uniform: false, then: empty, otherwise: vec![] }];
        self.emit_if(Some(more), true, code, empty);
        let rest = match rest.is_empty() {
            true => vec![],
            false => vec![Stmt::If { cond: more, negate: false, uniform: true, then: rest, otherwise: vec![] }],
        };
        Ok((commits as u32, rest))
    }
}

/// `code` split at the [`CHAIN_CUT`] mark (removed), an `if` holding it
/// split into two with the same condition; `None` for the second part when
/// there is no mark.
fn split_at_cut(mut code: Vec<Stmt>) -> (Vec<Stmt>, Option<Vec<Stmt>>) {
    for i in 0..code.len() {
        match &mut code[i] {
            Stmt::Comment(c) if c == CHAIN_CUT => {
                let rest = code.split_off(i + 1);
                code.pop();
                return (code, Some(rest));
            }
            Stmt::If { cond, negate, uniform, then, otherwise } if otherwise.is_empty() => {
                let (a, b) = split_at_cut(std::mem::take(then));
                let Some(b) = b else {
                    *then = a;
                    continue;
                };
                let (cond, negate, uniform) = (*cond, *negate, *uniform);
                *then = a;
                let mut rest = vec![Stmt::If { cond, negate, uniform, then: b, otherwise: vec![] }];
                rest.extend(code.split_off(i + 1));
                return (code, Some(rest));
            }
            _ => {}
        }
    }
    (code, None)
}

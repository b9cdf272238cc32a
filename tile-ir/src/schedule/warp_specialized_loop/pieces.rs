//! Per-piece barriers ([`crate::CompileOptions::piece_barriers`],
//! FlashMLA's 64×64 pieces): a ring whose stage arrives as several TMA
//! boxes and whose first reader is a wgmma gemm taking the stage as its
//! K-major B (MLA's `S = Q·Kᵀ` over the 8 boxes of 64 columns of `kv_s`)
//! gets one full barrier per box and stage instead of one per stage, and
//! the gemm waits for each box right before its first k16 slice reading it,
//! so the first wgmmas run while the later boxes are still in flight.
//!
//! Expects the plain consumers' loop of [`super::lower`] (not one that
//! issues ahead, defers its last gemm, or ping-pongs: those keep one
//! barrier per stage), in the plain or the persistent variant (whose rings
//! carry their stages and phases across tiles: the pieces' with them).
//!
//! Guarantees (ring `c` of `n` boxes `B_j`, `piece_c[j][s]` one arrival +
//! `B_j`'s bytes each; the ring's `full_c[s]` is left unused):
//! ```text
//! producer, per iteration: wait empty_c[st]
//!                          for j: arrive.expect_tx piece_c[j][st], bytes(B_j); TMA B_j on piece_c[j][st]
//! consumers, the first reader (the gemm):
//!     wgmma.fence
//!     for s in 0..K/16: if s is the first slice reading box j: wait piece_c[j][st] parity ph; wgmma.fence
//!                       wgmma(s)
//!     commit ...
//! ```
//! Every box of the stage is read by some slice (the boxes tile the
//! stage's columns, which are the gemm's K), so after the gemm every piece
//! of the stage has been waited for once, and the statements after it
//! (MLA's masking, P·V) read a landed stage with no further wait. A gemm
//! that one warpgroup runs alone (`policy(Warpgroup(w))`) does this in
//! that warpgroup's branch; every other consumer thread waits for each
//! piece in the branch's `else`, so the statements after it read a landed
//! stage on every thread too (unless barriers order the stage for them
//! after the owner's waits, `observers.rs`). Each
//! piece barrier completes once per use of its stage, as `full_c[s]` did,
//! so the parities are the ring's (`ph`), and the release (`empty_c`) is
//! unchanged: the counts and the proof of [`super::lower`] hold piece by
//! piece. A wait between wgmmas of one group touches no register the
//! wgmmas use (a predicate); the `wgmma.fence` after it is the one ptxas
//! would inject after the wait's loop (its info C7519), as CUTLASS's
//! mainloop fences after each stage's wait with earlier wgmmas in flight.
//!
//! **Per-box releases** ([`crate::CompileOptions::wsloop_piece_releases`];
//! two consumer warpgroups, not persistent, not multicast): each box also
//! gets its own empty barrier per stage (the ring's count of arrivals),
//! and the producer waits for box `j`'s before announcing and issuing box
//! `j`. Every consumer thread still arrives once per box and iteration:
//! warpgroup `w` after its last statement touching box `j`, where that
//! statement is no gemm and not the ring's last user (after any pending
//! gemm reading the ring is retired, behind a `fence.proxy.async` when the
//! statement wrote the stage); else with the ring's release (after its
//! last reader's wait, as the whole stage was). A gemm whose warpgroups
//! split N (`FullCol`) reading the stage as its B stored `[K, N]` touches
//! only the boxes of its warpgroup's columns; every other statement
//! touches every box. MLA's seesaw: warpgroup 0 frees V's left half of a
//! block (boxes 0–3) once its half of P·V is waited for, and the right half
//! right after the masking of the keys past the sequence (its last touch
//! there), warpgroup 1 the other way round, so the producer refills the
//! left half while warpgroup 1 still runs block 1's softmax.

use super::lower::{PieceReleases, Pieces, WslCopy, WslLowering};
use crate::hopper::Major;
use crate::ir::{Scope, StmtKind};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::touches_memory;
use crate::thread_ir::{Inst, Reg, RegClass, Stmt};

/// The mark [`Lx::wsl_piece_waits`] leaves where a chain is cut (a
/// comment, removed by the cut).
pub(super) const CHAIN_CUT: &str = "rotated chain cut";

impl Lx<'_> {
    /// Per ring, the statements of the loop body `body` touching its
    /// buffer (its pipelined copy aside), in order.
    pub(super) fn wsl_ring_users(&self, wl: &WslLowering, body: &[crate::ir::Stmt]) -> Vec<Vec<usize>> {
        let ws = &wl.plan;
        wl.copies
            .borrow()
            .iter()
            .map(|c| {
                (0..body.len())
                    .filter(|i| {
                        let (r, w) = touches_memory(self.k, &body[*i], c.dst);
                        !ws.copies.contains(i) && (r || w)
                    })
                    .collect()
            })
            .collect()
    }

    /// Per ring, its per-piece barriers when it gets them (see the module
    /// doc), with `bars` still 0.
    pub(super) fn wsl_piece_plan(&self, wl: &WslLowering) -> Vec<Option<Pieces>> {
        let ws = &wl.plan;
        let copies = wl.copies.borrow().clone();
        let none = vec![None; copies.len()];
        if !wl.piece_barriers || !self.target.has(crate::target::Feature::Wgmma) {
            return none;
        }
        let StmtKind::For { body, .. } = &self.k.body[ws.loop_index].kind else { return none };
        let users = self.wsl_ring_users(wl, body);
        if self.wsl_deferred_gemms(wl, body, &users).is_some() || self.wsl_lookahead_gemm(wl, body, &users).is_some() {
            return none;
        }
        // A loop that would ping-pong keeps its turns around one plain gemm
        // (the ping-pong needs a body without shared-memory writes).
        let writes_shared = body.iter().enumerate().any(|(i, s)| {
            !ws.copies.contains(&i)
                && (0..self.k.buffers.len()).any(|b| {
                    let b = crate::ir::BufferId(b as u32);
                    self.k.buffer(b).scope == Scope::Shared && touches_memory(self.k, s, b).1
                })
        });
        if wl.wants_ping_pong() && !writes_shared {
            return none;
        }
        copies
            .iter()
            .enumerate()
            .map(|(ci, cp)| {
                let &gi = users[ci].first()?;
                let StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } = &body[gi].kind else {
                    return None;
                };
                let n = cp.boxes.len();
                if *b != cp.dst || *a == cp.dst || n < 2 || cp.bytes % n as i64 != 0 {
                    return None;
                }
                let g = self.wgmma_plan(*a, *b, *c, (*trans_a, *trans_b), *policy)?;
                if g.b.1 != Major::K || g.insts.is_empty() {
                    return None;
                }
                // The boxes span every row and tile the columns (the gemm's K).
                let width = *self.f.tensor_maps.iter().find(|m| m.param == cp.param)?.box_shape.last()? as i64;
                let cols = *self.k.buffer(cp.dst).const_shape()?.last()?;
                if cp.boxes.iter().any(|bx| bx.1 != 0) || width % 16 != 0 || g.k != cols || width * n as i64 != cols {
                    return None;
                }
                let slices: Vec<usize> = (0..g.k / 16)
                    .map(|s| cp.boxes.iter().position(|bx| bx.2 <= 16 * s && 16 * s < bx.2 + width))
                    .collect::<Option<_>>()?;
                if (0..n).any(|j| !slices.contains(&j)) {
                    return None;
                }
                let early = self.wsl_piece_early_releases(wl, body, &users[ci], cp, width);
                Some(Pieces {
                    gemm: gi,
                    bars: 0,
                    boxes: n,
                    box_bytes: cp.bytes / n as i64,
                    slices,
                    per_slice: g.insts.len(),
                    releases: early.map(|early| PieceReleases { empties: 0, early }),
                })
            })
            .collect()
    }

    /// Per consumer warpgroup and box of ring `cp` (boxes of `width`
    /// columns; `users` the body's statements touching it), the statement
    /// after which the warpgroup releases the box early, when it is worth
    /// it (see the module doc): the last statement touching the box on
    /// that warpgroup, where that is no gemm and not the ring's last user.
    fn wsl_piece_early_releases(
        &self,
        wl: &WslLowering,
        body: &[crate::ir::Stmt],
        users: &[usize],
        cp: &WslCopy,
        width: i64,
    ) -> Option<Vec<Vec<Option<usize>>>> {
        if !wl.piece_releases || wl.plan.persistent || cp.share.is_some() || self.k.threads != 256 {
            return None;
        }
        let (&last, n) = (users.last()?, cp.boxes.len());
        let mut touch = vec![vec![None; n]; 2];
        for &i in users {
            let s = &body[i];
            let runners = match self.owner_of(s).ok()? {
                Some(w) => vec![w as usize],
                None => vec![0, 1],
            };
            for w in runners {
                for (j, t) in touch.get_mut(w)?.iter_mut().enumerate() {
                    if self.wsl_touches_box(s, cp, (j, width), w as i64) {
                        *t = Some(i);
                    }
                }
            }
        }
        let early: Vec<Vec<Option<usize>>> = touch
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .map(|t| t.filter(|&i| i != last && !matches!(body[i].kind, StmtKind::Gemm { .. })))
                    .collect()
            })
            .collect();
        early.iter().flatten().any(Option::is_some).then_some(early)
    }

    /// Whether warpgroup `w` running statement `s` may touch box `j` (of
    /// `width` columns) of ring `cp`'s stage: a gemm whose warpgroups split
    /// N reading the stage as its B stored `[K, N]` reads only its own
    /// columns; any other statement is taken to touch every box.
    fn wsl_touches_box(&self, s: &crate::ir::Stmt, cp: &WslCopy, (j, width): (usize, i64), w: i64) -> bool {
        let StmtKind::Gemm { a, b, c, trans_a, trans_b: false, policy, .. } = &s.kind else { return true };
        if *b != cp.dst || *a == cp.dst {
            return true;
        }
        match self.wgmma_plan(*a, *b, *c, (*trans_a, false), *policy) {
            Some(g) if g.owner.is_none() && g.col_groups > 1 => {
                let cols = g.n / g.col_groups;
                let lo = (w % g.col_groups) * cols;
                let x = cp.boxes[j].2;
                x < lo + cols && lo < x + width
            }
            _ => true,
        }
    }

    /// Warpgroup `w`'s release of `boxes` of ring `ci` (pieced as `p`) at
    /// `stage`, in its branch (`fenced`: its generic writes of the stage
    /// ordered before the producer's refill first).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wsl_piece_release(
        &mut self,
        wl: &WslLowering,
        ci: usize,
        p: &Pieces,
        stage: Reg,
        w: u32,
        boxes: &[usize],
        fenced: bool,
    ) {
        if p.releases.is_none() || boxes.is_empty() {
            return;
        }
        let stages = wl.plan.stages as i64;
        let code = self.capture(|x| {
            if fenced {
                x.emit(Inst::FenceProxyAsync);
            }
            for &j in boxes {
                if let Some(empty) = x.wsl_piece_empty(p, stages, stage, j) {
                    x.wsl_arrive_at(wl, ci, empty);
                }
            }
            Ok(())
        });
        match code {
            Ok(code) => {
                let cond = self.warpgroup_pred(w);
                self.emit_if(Some(cond), false, code, vec![]);
            }
            Err(e) => self.errors.push(e),
        }
    }

    /// The empty barrier of box `j` of `p` at stage `stage` (of `stages`),
    /// where each box is released on its own.
    pub(super) fn wsl_piece_empty(
        &mut self,
        p: &Pieces,
        stages: i64,
        stage: Reg,
        j: usize,
    ) -> Option<crate::thread_ir::Address> {
        let r = p.releases.as_ref()?;
        Some(self.ring_bar_addr(r.empties + 8 * stages * j as i64, stages, stage, 0))
    }

    /// The barrier of box `j` of `p` at stage `stage` (of `stages`).
    pub(super) fn wsl_piece_bar(&mut self, p: &Pieces, stages: i64, stage: Reg, j: usize) -> crate::thread_ir::Address {
        self.ring_bar_addr(p.bars + 8 * stages * j as i64, stages, stage, 0)
    }

    /// The wait for box `j` of the current stage (its piece barrier's phase).
    pub(super) fn wsl_piece_wait(&mut self, p: &Pieces, stages: i64, (stage, phase): (Reg, Reg), j: usize) {
        let bar = self.wsl_piece_bar(p, stages, stage, j);
        let pred = self.new_reg(RegClass::Pred);
        self.emit(Inst::MbarWait { addr: bar, parity: phase.into(), pred });
    }

    /// The first reader's lowered code `code` (the gemm of `p`) with the
    /// wait for each box before the first wgmma of the first slice reading
    /// it (see the module doc). A gemm that one warpgroup runs alone
    /// (`policy(Warpgroup(w))`: its code is that warpgroup's branch) waits
    /// so in the branch, and the other warpgroups, which read the stage
    /// later (MLA's P·V), wait for every box in its `else`. With `cut`,
    /// a [`CHAIN_CUT`] comment marks the place of box `cut`'s wait (where
    /// `rotate.rs` splits a rotated chain).
    pub(super) fn wsl_piece_waits(
        &mut self,
        p: &Pieces,
        stages: i64,
        (stage, phase): (Reg, Reg),
        mut code: Vec<Stmt>,
        others_wait: bool,
        cut: Option<usize>,
    ) -> R<Vec<Stmt>> {
        // (The owner's branch, then the gemm's closing wait run by every
        // thread, when it has one: `Lx::stmt`.)
        if let [Stmt::If { then, otherwise, uniform: false, .. }, rest @ ..] = &mut code[..] {
            let waits_only = rest.iter().all(|s| matches!(s, Stmt::Inst { inst: Inst::WgmmaWait { .. }, .. }));
            if otherwise.is_empty() && waits_only {
                *then = self.wsl_piece_waits(p, stages, (stage, phase), std::mem::take(then), false, cut)?;
                if others_wait {
                    *otherwise = self.capture(|x| {
                        for j in 0..p.boxes {
                            x.wsl_piece_wait(p, stages, (stage, phase), j);
                        }
                        Ok(())
                    })?;
                }
                return Ok(code);
            }
        }
        let mut out = Vec::with_capacity(code.len() + 2 * p.boxes);
        let mut waited = vec![false; p.boxes];
        let mut n = 0;
        for s in code {
            if let Stmt::Inst { inst: Inst::Wgmma { .. }, .. } = &s {
                if n % p.per_slice == 0 {
                    let j = *p
                        .slices
                        .get(n / p.per_slice)
                        .ok_or_else(|| self.err("internal: a pieced gemm has more k16 slices than planned"))?;
                    if !waited[j] {
                        waited[j] = true;
                        if cut == Some(j) {
                            out.push(Stmt::Comment(CHAIN_CUT.into()));
                        }
                        let wait = self.capture(|x| {
                            x.wsl_piece_wait(p, stages, (stage, phase), j);
                            // ptxas puts a `wgmma.fence` after a wait loop
                            // between wgmmas anyway (C7519): said here.
                            x.emit(Inst::WgmmaFence);
                            Ok(())
                        })?;
                        out.extend(wait);
                    }
                }
                n += 1;
            }
            out.push(s);
        }
        if n != p.slices.len() * p.per_slice || waited.contains(&false) {
            return Err(self.err("internal: a pieced gemm's wgmmas do not read every box of its stage"));
        }
        Ok(out)
    }
}

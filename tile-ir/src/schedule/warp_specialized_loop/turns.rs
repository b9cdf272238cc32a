//! The consumers' overlap of one gemm with the rest of the loop body in the
//! warp-specialized loop: the loop's first gemm issued one iteration ahead,
//! the ping-pong of two consumer warpgroups, both, and what three
//! warpgroups take. `lower.rs`'s consumers' loop asks [`Lx::wsl_lookahead_gemm`]
//! which gemm to issue ahead and places the turns with [`Lx::wsl_ping_pong`] at
//! [`WslLowering::ping_pong_points`]; `defer.rs` takes its turns the same way.
//!
//! Expects the consumers' loop of `lower.rs` (or `defer.rs`) being lowered.
//! Guarantees, for any trip count, the barrier counts below: every turn
//! taken is handed over, no arrival is left pending after the loop, and
//! every stage is still waited for and released once per iteration.
//!
//! **Issuing ahead** ([`crate::CompileOptions::lookahead`], FA3's
//! intra-warpgroup overlap), when the loop does not ping-pong or
//! [`crate::CompileOptions::ping_pong_lookahead`] asks for both: a body whose
//! first statement (after the copies) is a `clear` gemm into a fragment of
//! at most 64 registers, reading one ring's buffer that nothing else uses and
//! an operand nothing in the body writes (attention's `S = Q·Kᵀ`), issues
//! that gemm one iteration ahead into a second set of registers (S double
//! buffered):
//! ```text
//! if a < b: wait full_K[0]; S = gemm(k = a); wait_group 0
//! for k: arrive empty_K[st]                       // S's gemm was waited for
//!        if k+1 < b: wait full_K[st+1]; S' = gemm(k+1); commit   // in flight
//!        the rest of the body on S (softmax, P·V: its wait_group 0 retires S' too)
//!        wait_group 0; if k+1 < b: S = S'          // register moves
//! ```
//! so the next Q·Kᵀ runs on the tensor cores under this iteration's softmax.
//! The ring's stage for `k+1` is waited for one iteration early and
//! released one iteration later; every stage is still waited for and
//! released once per iteration, so the counts and parities are those of
//! `lower.rs`'s protocol.
//!
//! **Ping-pong** ([`crate::CompileOptions::ping_pong`], FA3's schedule of two
//! consumer warpgroups): with `T = 256` and a loop body of at least two gemm
//! groups at its top level and nothing a barrier could be needed for (no
//! shared-memory write, cp.async or barrier in it), the warpgroups take turns
//! at the tensor cores, so that one's softmax runs under the other's gemms:
//! they issue the body's first gemm (Q·Kᵀ) alternately (FA3's warp
//! scheduler barrier), with named barriers `2 + w` over both warpgroups, so
//! the offset of one gemm between them that the first turn sets stays:
//! ```text
//! before the loop, if a < b:  wg 1: bar.arrive 2, 256       // wg 0 goes first
//! for k: wait full[st]
//!        bar.sync 2 + w, 256                                // my turn
//!        Q·Kᵀ issue; commit
//!        if w == 0 || k + 1 < b: bar.arrive 2 + (1 - w), 256  // the other's turn
//!        softmax, P·V ...
//! ```
//! Barrier `2` gets `n` arrivals from warpgroup 1 (before the loop and in
//! its iterations but the last) and `n` waits from warpgroup 0, barrier `3`
//! `n` of each the other way, for any trip count `n` (none when `n = 0`):
//! no arrival is left pending after the loop, and each warpgroup executes
//! the same number of `bar.sync`s (`n`), so the barriers after the loop
//! (`bar.sync 1, T`, the epilogue's) are every consumer warp's same
//! instance by count too. Between two arrivals of one warpgroup at a
//! barrier it waits for the other at the other barrier, whose arrival comes
//! after the other consumed the first, so a barrier never completes without
//! its waiter. `bar.arrive` orders no memory: the wgmma waits move past it.
//! (Before, warpgroup 1 handed over in its last iteration too and warpgroup
//! 0 took that turn after the loop: as correct by the PTX ISA, but one
//! `bar.sync` more on warpgroup 0; with it compute-sanitizer's racecheck
//! reported RAW hazards on the epilogue's staging scratch, written by
//! warpgroup 0 and read by warpgroup 1 across the `bar.sync 1, 256` between
//! them: racecheck orders accesses by each thread's count of barrier
//! instructions, a false positive (`tile-runtime/tests/gpu_racecheck.rs`,
//! measured on the H200), which the balanced turns no longer trigger.)
//!
//! **Three consumer warpgroups** (`T = 384`, FA3's head-dim-64 schedule:
//! 192 query rows, 64 a warpgroup, wgmma accumulators over 12 warps:
//! [`crate::hopper::wgmma_accumulator`]): the same rings and counts (`T`
//! arrivals at each `empty`, `bar.sync 1, 384`), no ping-pong (FA3 has
//! none there), the body's last gemm deferred ([`super::defer`]) where P
//! fits beside the next S in their 160 registers, else S issued ahead
//! where its twins fit (as with the ping-pong), else neither.
//!
//! **Both** ([`crate::CompileOptions::ping_pong_lookahead`], FA3's full
//! schedule): two consumer warpgroups that would ping-pong issue ahead too
//! when the twin scores fit beside the fragments (their registers, 16-bit
//! ones at half, plus the twins plus 64 at most the consumer registers:
//! measured with ptxas -v, d128 with key blocks of 64 fits, key blocks of
//! 128 and d256 spill), and the turn is taken around the `if` that issues
//! the next iteration's gemm (its stage's wait, fence, wgmmas, commit):
//! ```text
//! before the loop, if a < b: S = gemm(a), waited for; wg 1: bar.arrive 2, 256
//! for k: arrive empty_K[st]
//!        bar.sync 2 + w, 256
//!        if k+1 < b: wait full_K[st+1]; S' = gemm(k+1); commit
//!        if w == 0 || k + 1 < b: bar.arrive 2 + (1 - w), 256
//!        softmax(S), P·V; wait_group 0; if k+1 < b: S = S'
//! ```
//! The turns are taken once per iteration whether or not the `if` issues,
//! so their counts are the plain ping-pong's.

use super::lower::{WslLowering, THREE_WARPGROUPS};
use crate::ir::{Stmt as TStmt, StmtKind};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::touches_memory;
use crate::thread_ir::{Inst, Operand, Reg, RegClass, Stmt};

impl Lx<'_> {
    /// The gemm the consumers issue one iteration ahead (see the module
    /// doc), when the loop has one: `(its index in the body, its ring)`.
    /// It is the body's first statement after the copies, a `clear` gemm
    /// into a fragment of at most 64 registers per thread, reading exactly
    /// one ring's buffer that no other statement uses, its other operand
    /// written by nothing in the body, and no later gemm accumulating into
    /// its fragment (a chain's head); two consumer warpgroups that would
    /// ping-pong do that instead unless [`WslLowering::both`].
    pub(super) fn wsl_lookahead_gemm(
        &self,
        wl: &WslLowering,
        body: &[TStmt],
        users: &[Vec<usize>],
    ) -> Option<(usize, usize)> {
        let ws = &wl.plan;
        if !wl.lookahead || (wl.wants_ping_pong() && !wl.both) {
            return None;
        }
        let gi = (0..body.len()).find(|i| !ws.copies.contains(i))?;
        let StmtKind::Gemm { a, b, c, clear: true, .. } = &body[gi].kind else { return None };
        let copies = wl.copies.borrow();
        let ring_of = |buf| copies.iter().position(|cp| cp.dst == buf);
        let (kc, other) = match (ring_of(*a), ring_of(*b)) {
            (None, Some(kc)) => (kc, *a),
            (Some(kc), None) => (kc, *b),
            _ => return None,
        };
        let regs = self.frags.get(c)?.len();
        // With the ping-pong the twins must fit beside the fragments
        // (ptxas -v: 152 fragment registers with the twins assemble without
        // spills under 232 consumer registers, 200 and more spill).
        // Three consumer warpgroups (160 registers each) likewise: d64 with
        // key blocks of 128 spills with the twins (ptxas -v).
        let crowded = wl.wants_ping_pong() || ws.consumer_threads == THREE_WARPGROUPS;
        if crowded && self.fragment_regs() + regs + PING_PONG_LOOKAHEAD_MARGIN > ws.consumer_regs as usize {
            return None;
        }
        let written = body.iter().enumerate().any(|(i, s)| i != gi && touches_memory(self.k, s, other).1);
        // The head of a chain into its accumulator (MLA's scores rope
        // first, `S = Q_pe·K_peᵀ` before `S += Q·Kᵀ`): they are not whole
        // before the chain's end, so issuing the head ahead overlaps
        // nothing and costs the twins.
        let chain_head = body
            .iter()
            .enumerate()
            .any(|(i, s)| i != gi && matches!(&s.kind, StmtKind::Gemm { c: c2, clear: false, .. } if c2 == c));
        if chain_head {
            return None;
        }
        let c_fragment = self.k.buffer(*c).scope == crate::ir::Scope::Fragment;
        (users[kc] == [gi] && !written && c_fragment && regs <= 64 && self.target.has(crate::target::Feature::Wgmma))
            .then_some((gi, kc))
    }

    /// The ping-pong of two consumer warpgroups (see the module doc) in
    /// the consumers' loop body `body` (over `k` in `a..b`): the turn is
    /// taken before statement `fence` (the gemm's issue) and handed over
    /// after statement `commit` (its commit, or the `if` issuing it ahead),
    /// by warpgroup 1 in every iteration but the last; warpgroup 1 gives
    /// warpgroup 0 the first turn before the loop (when it runs at all).
    pub(super) fn wsl_ping_pong(
        &mut self,
        body: &mut Vec<Stmt>,
        (commit, fence): (usize, usize),
        k: Reg,
        a: Reg,
        b: Reg,
    ) -> R<()> {
        if fence > commit || commit >= body.len() {
            return Err(self.err("internal: no ping-pong points in the warp-specialized loop"));
        }
        let tid = self.tid;
        let wg1 = self.op("setp.ge.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(128)]);
        let ran = self.op("setp.gt.s32", RegClass::Pred, vec![b.into(), a.into()]);
        let grant = Stmt::If { cond: wg1, negate: false, uniform: false, then: vec![arrive(TURN)], otherwise: vec![] };
        self.cur().push(Stmt::If { cond: ran, negate: false, uniform: true, then: vec![grant], otherwise: vec![] });
        let turn = |wg1| Stmt::If {
            cond: wg1,
            negate: false,
            uniform: false,
            then: vec![sync(TURN + 1)],
            otherwise: vec![sync(TURN)],
        };
        // Warpgroup 1's hand-over in the last iteration would have no turn
        // of warpgroup 0 to take it.
        let handover = self.capture(|x| {
            let k1 = x.op("add.s32", RegClass::B32, vec![k.into(), Operand::Imm(1)]);
            let more = x.op("setp.lt.s32", RegClass::Pred, vec![k1.into(), b.into()]);
            let last_but_one =
                Stmt::If { cond: more, negate: false, uniform: true, then: vec![arrive(TURN)], otherwise: vec![] };
            x.cur().push(Stmt::If {
                cond: wg1,
                negate: false,
                uniform: false,
                then: vec![last_but_one],
                otherwise: vec![arrive(TURN + 1)],
            });
            Ok(())
        })?;
        body.splice(commit + 1..commit + 1, handover);
        body.insert(fence, turn(wg1));
        Ok(())
    }
}

/// Registers per consumer thread left beside the fragments and their twins
/// when two consumer warpgroups ping-pong and issue ahead (addresses,
/// indices, the softmax's temporaries; see `wsl_lookahead_gemm`).
const PING_PONG_LOOKAHEAD_MARGIN: usize = 64;
/// The first of the two named barriers of the ping-pong: warpgroup `w`
/// waits for its turn at `TURN + w` (over both warpgroups, 256 threads).
const TURN: u32 = 2;

fn sync(id: u32) -> Stmt {
    Stmt::Inst { inst: Inst::NamedBarSync { id, threads: 256 }, guard: None }
}

fn arrive(id: u32) -> Stmt {
    Stmt::Inst { inst: Inst::NamedBarArrive { id, threads: 256 }, guard: None }
}

impl WslLowering {
    /// Whether `s` has something a barrier could need, or a barrier (a
    /// shared-memory write, cp.async, a barrier): a loop body with one does
    /// not ping-pong (the barrier pass must add none inside the loop, and the
    /// warpgroups may run a gemm apart).
    pub(super) fn blocks_ping_pong(s: &Stmt) -> bool {
        match s {
            Stmt::Inst { inst, .. } => {
                inst.is_barrier()
                    || matches!(
                        inst,
                        Inst::CpAsync { .. }
                            | Inst::St { space: crate::thread_ir::Space::Shared, .. }
                            | Inst::AtomAdd { space: crate::thread_ir::Space::Shared, .. }
                    )
            }
            Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).any(Self::blocks_ping_pong),
            Stmt::For { body, .. } => body.iter().any(Self::blocks_ping_pong),
            Stmt::Comment(_) => false,
        }
    }

    /// Where the ping-pong goes in a consumers' loop body: (the first
    /// `wgmma.commit_group`, the first `wgmma.fence`), both at its top level,
    /// when the body has at least two gemm groups, every wgmma at its top
    /// level, and nothing that a barrier could need (no shared-memory write,
    /// cp.async or barrier anywhere in it: the barrier pass then adds none
    /// inside the loop, and the warpgroups may run a gemm apart).
    pub(super) fn ping_pong_points(body: &[Stmt]) -> Option<(usize, usize)> {
        fn nested_wgmma(s: &Stmt) -> bool {
            match s {
                Stmt::Inst { inst, .. } => matches!(inst, Inst::Wgmma { .. } | Inst::WgmmaCommit | Inst::WgmmaFence),
                Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).any(nested_wgmma),
                Stmt::For { body, .. } => body.iter().any(nested_wgmma),
                Stmt::Comment(_) => false,
            }
        }
        if body.iter().any(Self::blocks_ping_pong)
            || body.iter().any(|s| !matches!(s, Stmt::Inst { .. }) && nested_wgmma(s))
        {
            return None;
        }
        let is = |s: &Stmt, f: fn(&Inst) -> bool| matches!(s, Stmt::Inst { inst, .. } if f(inst));
        let commit = body.iter().position(|s| is(s, |i| matches!(i, Inst::WgmmaCommit)))?;
        let fence = body.iter().position(|s| is(s, |i| matches!(i, Inst::WgmmaFence)))?;
        let later = body.iter().rposition(|s| is(s, |i| matches!(i, Inst::WgmmaFence)))?;
        (fence < commit && commit < later).then_some((commit, fence))
    }
}

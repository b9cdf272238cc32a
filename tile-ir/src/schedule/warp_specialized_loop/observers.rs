//! The other consumers of a pieced stage (`pieces.rs`) that one warpgroup's
//! gemm reads first: when they need not wait for its pieces
//! ([`crate::CompileOptions::wsloop_ordered_observers`]).
//!
//! A gemm of warpgroup `w` alone (`policy(Warpgroup(w))`: MLA's scores)
//! waits for each piece of its ring's stage before its first slice reading
//! it; the other consumer warpgroups (the observers) read the stage later
//! (P·V's half of V) and by default wait for every piece in the branch's
//! `else`, right where `w` issues the gemm. Those nine `mbarrier.try_wait`
//! round trips sit on the observer's path before its own next work (MLA's
//! seesaw: warpgroup 0 waited for block 1's pieces between its scores and
//! its softmax, 12 % of its time in Nsight Compute's samples, session 36).
//!
//! Expects the consumers' loop body, the pieced gemm `g`, its owner `w` and
//! the ring's buffer. Guarantees: the observers skip their waits only when
//! every statement of theirs that touches the stage after `g` comes after a
//! barrier of all consumers that follows `w`'s waits in `w`'s program order,
//! or only writes the stage where `g` reads it (the barrier pass orders
//! such a write after `g`'s `wgmma.wait_group`, which follows the waits):
//! - an explicit `barrier()` of the body;
//! - a statement the observers run that accesses shared memory in conflict
//!   with one `w` alone runs since `g` (`g`'s read of its operands
//!   included), both accesses unconditional (not under an `if`): a
//!   dependence between two warpgroups, which the barrier pass orders with
//!   a `bar.sync` of every consumer before the observer's access.
//!
//! The TMA's bytes are then visible to the observers through `w`'s
//! completed wait and that barrier (happens-before is transitive:
//! FlashMLA's warpgroups never wait for the blocks whose scores the other
//! one computes). The skip is taken only where the observers run work of
//! their own between `g` and their first touch of the stage (where the
//! waits would delay it): elsewhere they would wait at the barrier anyway,
//! and MLA's plain kernel (warpgroup 1 idle until P) measured 1.4 % slower
//! without them on the H100. Multicast rings keep their waits (`lower.rs`:
//! a release must follow this round's bytes from every block).

use crate::ir::{BufferId, Expr, Kernel, LoopKind, Scope, Stmt as TStmt, StmtKind};
use crate::passes::lower::{Lx, R};
use crate::passes::pipeline::{expr_reads, touches_memory};

/// Reads and writes of a statement's shared memory that happen on every
/// path through it: not inside an `if`'s branches (its condition counts),
/// nor a serial loop's body (which may run no iteration).
fn certain_touches(k: &Kernel, s: &TStmt, buf: BufferId) -> (bool, bool) {
    let (root, _) = k.view_root(buf);
    let reads = |e: &Expr| std::iter::once(root).chain(k.views_of(root)).any(|b| expr_reads(e, b));
    match &s.kind {
        StmtKind::If { cond, .. } => (reads(cond), false),
        StmtKind::For { kind: LoopKind::Parallel, body, .. } => {
            body.iter().map(|x| certain_touches(k, x, buf)).fold((false, false), |a, b| (a.0 || b.0, a.1 || b.1))
        }
        StmtKind::For { start, end, .. } => (reads(start) || reads(end), false),
        _ => touches_memory(k, s, buf),
    }
}

impl Lx<'_> {
    /// The warpgroup that runs statement `s` alone, looking through an
    /// `if` whose branches hold only that warpgroup's statements (MLA's
    /// mask of one warpgroup's scores); `None`: every consumer.
    fn wsl_runs_on(&self, s: &TStmt) -> R<Option<u32>> {
        if let StmtKind::If { then, otherwise, .. } = &s.kind {
            let mut w = None;
            for x in then.iter().chain(otherwise) {
                match (self.wsl_runs_on(x)?, w) {
                    (None, _) => return Ok(None),
                    (Some(o), Some(p)) if o != p => return Ok(None),
                    (o, _) => w = o,
                }
            }
            return Ok(w);
        }
        self.owner_of(s)
    }

    /// Whether the consumers other than warpgroup `w` may skip their waits
    /// for the pieces of `ring`, whose first reader is `w`'s gemm
    /// `body[g]` ([`observers_ordered`] with this lowering's owners).
    pub(super) fn wsl_observers_ordered(
        &self,
        body: &[TStmt],
        copies: &[usize],
        g: usize,
        w: u32,
        ring: BufferId,
    ) -> R<bool> {
        observers_ordered(self.k, body, copies, (g, w), ring, &mut |s| self.wsl_runs_on(s))
    }
}

/// Whether the consumers other than warpgroup `w` may skip their waits for
/// the stage of `ring`, whose first reader is `w`'s gemm `body[g]` (see the
/// module docs); `copies` are the body's pipelined copies (the producer's),
/// `runs_on` the warpgroup that runs a statement alone (`None`: every
/// consumer).
pub(super) fn observers_ordered<E>(
    k: &Kernel,
    body: &[TStmt],
    copies: &[usize],
    (g, w): (usize, u32),
    ring: BufferId,
    runs_on: &mut dyn FnMut(&TStmt) -> Result<Option<u32>, E>,
) -> Result<bool, E> {
    let shared: Vec<BufferId> = (0..k.buffers.len() as u32)
        .map(BufferId)
        .filter(|&b| k.buffer(b).scope == Scope::Shared && k.view_root(b).0 == b)
        .collect();
    // Statements `w` alone runs since `g`.
    let mut own: Vec<usize> = vec![g];
    let mut ordered = false;
    // Whether the observers run a statement of theirs before their first
    // touch of the stage, and whether they touched it yet.
    let mut work = false;
    let mut touched = false;
    for (t, s) in body.iter().enumerate().skip(g + 1) {
        if copies.contains(&t) {
            continue;
        }
        if matches!(s.kind, StmtKind::Barrier) {
            ordered = true;
            continue;
        }
        if runs_on(s)? == Some(w) {
            own.push(t);
            continue;
        }
        let (reads, writes) = touches_memory(k, s, ring);
        work |= !touched && !reads && !writes;
        touched |= reads || writes;
        if ordered {
            continue;
        }
        if reads {
            return Ok(false);
        }
        // (`g` reads the ring: the barrier pass orders a write of it after
        // `g`'s wait wherever the write happens.)
        let conflict = shared.iter().any(|&b| {
            let (tr, tw) = certain_touches(k, s, b);
            own.iter().any(|&u| {
                let (ur, uw) = certain_touches(k, &body[u], b);
                (uw && (tr || tw)) || (ur && tw)
            })
        });
        let unconditional = match &s.kind {
            StmtKind::If { .. } => false,
            StmtKind::For { kind, .. } => *kind == LoopKind::Parallel,
            _ => true,
        };
        ordered = conflict && unconditional;
    }
    Ok(work)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::print::parse_kernel;

    /// A loop body in which warpgroup 0's gemm reads the stage `k_s` first
    /// (statement 0) and warpgroup 1 reads it later, around `middle`
    /// (statements owned by the warpgroup their line names: `w0`/`w1`).
    fn ordered(middle: &[(&str, u32)]) -> bool {
        let mut lines = vec![("gemm q_s, k_s.t -> s0, clear, policy=full_row".to_string(), Some(0))];
        for &(l, w) in middle {
            lines.push((l.to_string(), (w < 2).then_some(w)));
        }
        lines.push(("gemm p_s, k_s -> acc, policy=full_row".to_string(), None));
        let body: String = lines.iter().map(|(l, _)| format!("    {l}\n")).collect();
        let text = format!(
            "kernel observed(@0 x: &f16[64, 64]) threads=256 grid=(1, 1, 1) {{
  @1 q_s: shared f16[64, 64]
  @2 k_s: shared f16[64, 64]
  @3 p_s: shared f16[64, 64]
  @4 a_s: shared f32[64]
  @5 s0: fragment f32[64, 64]
  @6 s1: fragment f32[64, 64]
  @7 acc: fragment f32[64, 64]
  for %0 kb in pipelined(1) 0..4 {{
{body}  }}
}}"
        );
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let StmtKind::For { body, .. } = &k.body.last().unwrap().kind else { panic!("no loop") };
        let owners: Vec<Option<u32>> = lines.iter().map(|(_, w)| *w).collect();
        let mut runs_on = |s: &TStmt| -> Result<Option<u32>, ()> {
            Ok(owners[body.iter().position(|x| std::ptr::eq(x, s)).unwrap()])
        };
        observers_ordered(&k, body, &[], (0, 0), BufferId(2), &mut runs_on).unwrap()
    }

    const OWN_WORK: (&str, u32) = ("fill s1, 0.0", 1);
    const BARRIER: (&str, u32) = ("barrier", 2);
    const WRITE_A: (&str, u32) = ("for %1 i in parallel 0..64 {\n      a_s[%1] = 1.0\n    }", 0);
    const READ_A: (&str, u32) = ("for %2 i in parallel 0..64 {\n      for %3 j in parallel 0..64 {\n        s1[%2, %3] = a_s[%2]\n      }\n    }", 1);

    #[test]
    fn a_read_of_the_stage_needs_a_barrier_after_the_owners_wait() {
        assert!(!ordered(&[OWN_WORK]), "no barrier: the observer waits");
        assert!(ordered(&[OWN_WORK, BARRIER]), "an explicit barrier");
        // A dependence between the warpgroups: the barrier pass's bar.sync.
        assert!(ordered(&[OWN_WORK, WRITE_A, READ_A]));
        assert!(!ordered(&[OWN_WORK, READ_A, WRITE_A]), "the conflict after the read");
    }

    #[test]
    fn conditional_accesses_order_nothing() {
        let cond_write: (&str, u32) =
            ("if kb > 0 {\n      for %1 i in parallel 0..64 {\n        a_s[%1] = 1.0\n      }\n    }", 0);
        assert!(!ordered(&[OWN_WORK, cond_write, READ_A]));
        let cond_read: (&str, u32) =
            ("if kb > 0 {\n      for %2 i in parallel 0..64 {\n        s1[%2, 0] = a_s[%2]\n      }\n    }", 1);
        assert!(!ordered(&[OWN_WORK, WRITE_A, cond_read]));
    }

    #[test]
    fn observers_idle_until_their_first_touch_keep_their_waits() {
        assert!(!ordered(&[BARRIER]), "nothing of theirs before the read");
        assert!(ordered(&[BARRIER, OWN_WORK]), "work of theirs after the barrier, before the read");
        // A write of the stage (ordered after the owner's read wherever it
        // happens) is their first touch: no work before it.
        let mask: (&str, u32) = ("if kb > 2 {\n      for %1 j in parallel 0..64 {\n        for %2 c in parallel 0..64 {\n          k_s[%1, %2] = 0.0\n        }\n      }\n    }", 2);
        assert!(!ordered(&[mask, OWN_WORK, BARRIER]));
        assert!(ordered(&[OWN_WORK, mask, BARRIER]));
    }
}

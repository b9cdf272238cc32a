//! A loop run by every consumer warpgroup, split into one copy per
//! warpgroup (Thread IR → Thread IR).
//!
//! Expects a function whose barriers are placed ([`super::barriers`]) and
//! whose warpgroup branches are joined ([`super::merge_branches`]), and
//! [`Function::split_loops`]: uniform loops (by their variable) that only
//! the threads of the listed warpgroups run, each listed with the
//! predicates "this thread is in warpgroup `w`" (set once in the entry
//! code, never written again), one per warpgroup, so that exactly one
//! holds for every thread that reaches the loop (the warp-specialized
//! loop's consumers; its producer has exited).
//!
//! A loop listed with a `guard` stands at the top level of a uniform
//! `if guard { .. }` holding what must run before it on the same path
//! (a rotated chain's first issue, `rotate.rs`): that `if` is split whole.
//!
//! Guarantees the same behaviour with such a loop written
//! `if p₀ { loop₀ } else if p₁ { loop₁ } ..` (the `wgmma.wait_group`s
//! right after the loop, warpgroup-collective, in each copy after its
//! loop): `loopᵥ` is the loop with
//! each branch on a listed predicate resolved for warpgroup `w` (its
//! `then` where the predicate is `w`'s, its `else` where it is another's,
//! at every nesting level; other statements kept), which is what
//! warpgroup `w`'s threads run in the loop as written. Every copy keeps
//! every barrier (they stand in uniform code, outside the resolved
//! branches), in the same order, so the named barriers still meet; each
//! becomes `barrier.sync` ([`Inst::BarrierSync`]), not `bar.sync`, which is
//! `.aligned`: every thread taking part must execute the same instruction
//! (compute-sanitizer's synccheck: "divergent threads in block"). A loop
//! with a `bar.arrive` (also aligned) is left whole.
//! ptxas then sees each warpgroup's code as a path of its own: registers
//! that two warpgroups' fragments share (`owned_regs`) are never written
//! on one path while the other's wgmma is in flight, which it would
//! otherwise assume possible (and serialize the wgmmas, C7514/C7515).

use crate::thread_ir::{Function, Inst, Reg, Stmt};

/// A loop [`split_warpgroup_loops`] splits: its variable, and the
/// predicates of the warpgroups that run it, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitLoop {
    /// The loop's variable (each loop has its own).
    pub var: Reg,
    /// "This thread is in warpgroup `w`", for each warpgroup `w` that runs it.
    pub preds: Vec<Reg>,
    /// The condition of the uniform `if` the loop stands in, split whole
    /// with it (see the module doc).
    pub guard: Option<Reg>,
}

/// Splits the loops of `func.split_loops` (see the module doc).
pub fn split_warpgroup_loops(func: &mut Function) {
    if func.split_loops.is_empty() {
        return;
    }
    let loops = func.split_loops.clone();
    let cx = Cx { bar_threads: func.barrier_threads };
    split(&mut func.body, &loops, &cx);
}

struct Cx {
    /// The threads a `bar.sync` of this function waits for
    /// ([`Function::barrier_threads`]; barrier 1 when set).
    bar_threads: Option<u32>,
}

fn split(body: &mut Vec<Stmt>, loops: &[SplitLoop], cx: &Cx) {
    let mut i = 0;
    while i < body.len() {
        let unit = match &body[i] {
            Stmt::For { var, body: b, .. } => {
                loops.iter().find(|l| l.var == *var && l.guard.is_none() && splittable(b, cx))
            }
            Stmt::If { cond, uniform: true, then, otherwise, .. } if otherwise.is_empty() => loops.iter().find(|l| {
                l.guard == Some(*cond)
                    && then.iter().any(|s| matches!(s, Stmt::For { var, .. } if *var == l.var))
                    && splittable(then, cx)
            }),
            _ => None,
        };
        match &mut body[i] {
            _ if unit.is_some() => {
                let l = unit.expect("matched above");
                // The `wgmma.wait_group`s right after the loop go into each
                // copy: ptxas takes the wgmmas one copy leaves in flight at
                // its exit as in flight through the next copy's code too
                // (which may write their registers: C7515), unless a wait
                // comes before that copy.
                let waits = body[i + 1..]
                    .iter()
                    .take_while(|s| matches!(s, Stmt::Inst { inst: Inst::WgmmaWait { .. }, guard: None }))
                    .count();
                let mut original: Vec<Stmt> = body.drain(i..i + 1 + waits).collect();
                let lp = original.remove(0);
                let split = copies(&lp, &original, &l.preds, 0, cx);
                let n = split.len();
                body.splice(i..i, split);
                i += n;
                continue;
            }
            Stmt::For { body, .. } => split(body, loops, cx),
            Stmt::If { then, otherwise, .. } => {
                split(then, loops, cx);
                split(otherwise, loops, cx);
            }
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
        }
        i += 1;
    }
}

/// Whether every barrier instruction of `body` has a form the copies can
/// reach at different instructions: no `bar.arrive`, no `bar.sync` of
/// every thread.
fn splittable(body: &[Stmt], cx: &Cx) -> bool {
    body.iter().all(|s| match s {
        Stmt::Inst { inst: Inst::NamedBarArrive { .. }, .. } => false,
        Stmt::Inst { inst: Inst::BarSync, .. } => cx.bar_threads.is_some(),
        Stmt::Inst { .. } | Stmt::Comment(_) => true,
        Stmt::If { then, otherwise, .. } => splittable(then, cx) && splittable(otherwise, cx),
        Stmt::For { body, .. } => splittable(body, cx),
    })
}

/// `if preds[w] { loop for w; after } else { .. the next warpgroups' }`;
/// the last warpgroup's copy is the final `else` (one of the predicates
/// holds).
fn copies(l: &Stmt, after: &[Stmt], preds: &[Reg], w: usize, cx: &Cx) -> Vec<Stmt> {
    let mut mine = vec![resolve(l, preds, w, cx)];
    mine.extend_from_slice(after);
    if w + 1 == preds.len() {
        return mine;
    }
    vec![Stmt::If {
        cond: preds[w],
        negate: false,
        uniform: false,
        then: mine,
        otherwise: copies(l, after, preds, w + 1, cx),
    }]
}

/// Statement `s` as warpgroup `w` runs it: branches on the listed
/// predicates resolved, barriers not aligned.
fn resolve(s: &Stmt, preds: &[Reg], w: usize, cx: &Cx) -> Stmt {
    match s {
        Stmt::For { var, start, end, exit, uniform, body } => Stmt::For {
            var: *var,
            start: start.clone(),
            end: end.clone(),
            exit: *exit,
            uniform: *uniform,
            body: resolve_all(body, preds, w, cx),
        },
        Stmt::If { cond, negate, uniform, then, otherwise } => Stmt::If {
            cond: *cond,
            negate: *negate,
            uniform: *uniform,
            then: resolve_all(then, preds, w, cx),
            otherwise: resolve_all(otherwise, preds, w, cx),
        },
        Stmt::Inst { inst: Inst::BarSync, guard } => match cx.bar_threads {
            Some(threads) => Stmt::Inst { inst: Inst::BarrierSync { id: 1, threads }, guard: *guard },
            None => s.clone(),
        },
        Stmt::Inst { inst: Inst::NamedBarSync { id, threads }, guard } => {
            Stmt::Inst { inst: Inst::BarrierSync { id: *id, threads: *threads }, guard: *guard }
        }
        Stmt::Inst { .. } | Stmt::Comment(_) => s.clone(),
    }
}

fn resolve_all(body: &[Stmt], preds: &[Reg], w: usize, cx: &Cx) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        match s {
            Stmt::If { cond, negate, then, otherwise, .. } if preds.contains(cond) => {
                let holds = (*cond == preds[w]) != *negate;
                out.extend(resolve_all(if holds { then } else { otherwise }, preds, w, cx));
            }
            _ => out.push(resolve(s, preds, w, cx)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_ir::{Operand, RegClass};

    fn mark(n: i64) -> Stmt {
        Stmt::Inst { inst: Inst::Op { op: "mov.b32".into(), dst: Reg(9), args: vec![Operand::Imm(n)] }, guard: None }
    }
    fn marks(s: &[Stmt], out: &mut Vec<i64>) {
        for s in s {
            match s {
                Stmt::Inst { inst: Inst::Op { args, .. }, .. } => {
                    if let [Operand::Imm(n)] = args[..] {
                        out.push(n)
                    }
                }
                Stmt::If { then, otherwise, .. } => {
                    marks(then, out);
                    marks(otherwise, out);
                }
                Stmt::For { body, .. } => marks(body, out),
                _ => {}
            }
        }
    }

    /// A function of two warpgroups' consumers and its registers: the
    /// warpgroups' predicates, a loop's variable and exit, one more predicate.
    fn function() -> (Function, [Reg; 5]) {
        let mut f = Function { barrier_threads: Some(256), ..Function::default() };
        let classes = [RegClass::Pred, RegClass::Pred, RegClass::B32, RegClass::Pred, RegClass::Pred];
        let regs = classes.map(|c| f.new_reg(c));
        (f, regs)
    }

    #[test]
    fn each_warpgroup_gets_its_branches_and_the_shared_code() {
        let (mut f, [p, q, v, e, other]) = function();
        let br = |cond, negate, then, otherwise| Stmt::If { cond, negate, uniform: false, then, otherwise };
        let body = vec![
            mark(1),
            br(p, false, vec![mark(2)], vec![mark(3)]),
            Stmt::Inst { inst: Inst::BarSync, guard: None },
            br(q, false, vec![mark(4), br(other, false, vec![mark(5)], vec![])], vec![]),
            br(p, true, vec![mark(6)], vec![mark(7)]),
        ];
        let lp = Stmt::For { var: v, start: Operand::Imm(0), end: Operand::Imm(3), exit: e, uniform: true, body };
        f.body = vec![mark(0), lp];
        f.split_loops = vec![SplitLoop { var: v, preds: vec![p, q], guard: None }];
        split_warpgroup_loops(&mut f);
        let Stmt::If { cond, then, otherwise, .. } = &f.body[1] else { panic!("{:?}", f.body) };
        assert_eq!(*cond, p);
        let (mut a, mut b) = (vec![], vec![]);
        marks(then, &mut a);
        marks(otherwise, &mut b);
        assert_eq!(a, [1, 2, 7]);
        assert_eq!(b, [1, 3, 4, 5, 6]);
        // Both copies keep the barrier, not aligned, and the loop.
        for c in [then, otherwise] {
            let [Stmt::For { body, .. }] = &c[..] else { panic!("{c:?}") };
            let bars = |i: &Inst| body.iter().filter(|s| matches!(s, Stmt::Inst { inst, .. } if inst == i)).count();
            assert_eq!(bars(&Inst::BarrierSync { id: 1, threads: 256 }), 1);
            assert_eq!(bars(&Inst::BarSync), 0);
        }
        // A loop with a bar.arrive stays whole.
        let body = vec![
            br(p, false, vec![mark(2)], vec![]),
            Stmt::Inst { inst: Inst::NamedBarArrive { id: 2, threads: 256 }, guard: None },
        ];
        let lp = Stmt::For { var: v, start: Operand::Imm(0), end: Operand::Imm(3), exit: e, uniform: true, body };
        f.body = vec![lp.clone()];
        split_warpgroup_loops(&mut f);
        assert_eq!(f.body, vec![lp]);
    }

    #[test]
    fn a_guarded_loop_is_split_with_its_guard() {
        let (mut f, [p, q, v, e, g]) = function();
        let br = |cond, then| Stmt::If { cond, negate: false, uniform: false, then, otherwise: vec![] };
        let wait = Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None };
        let body = vec![br(p, vec![mark(2)]), br(q, vec![mark(3)])];
        let lp = Stmt::For { var: v, start: Operand::Imm(0), end: Operand::Imm(3), exit: e, uniform: true, body };
        // Warpgroup p's issue before the loop, the wait after it, in `if g`.
        let guarded = Stmt::If {
            cond: g,
            negate: false,
            uniform: true,
            then: vec![br(p, vec![mark(1)]), lp.clone(), wait.clone()],
            otherwise: vec![],
        };
        f.body = vec![mark(0), guarded.clone(), mark(4)];
        f.split_loops = vec![SplitLoop { var: v, preds: vec![p, q], guard: Some(g) }];
        split_warpgroup_loops(&mut f);
        let Stmt::If { cond, then, otherwise, .. } = &f.body[1] else { panic!("{:?}", f.body) };
        assert_eq!(*cond, p);
        for (copy, want) in [(then, vec![1, 2]), (otherwise, vec![3])] {
            let [Stmt::If { cond, uniform: true, then: inner, .. }] = &copy[..] else { panic!("{copy:?}") };
            assert_eq!(*cond, g);
            assert!(matches!(&inner[..], [.., Stmt::For { .. }, w] if *w == wait), "{inner:?}");
            let mut m = vec![];
            marks(inner, &mut m);
            assert_eq!(m, want);
        }
        assert_eq!(f.body.len(), 3);
        // Without the guard listed, the loop alone is split (inside the `if`).
        f.body = vec![guarded];
        f.split_loops = vec![SplitLoop { var: v, preds: vec![p, q], guard: None }];
        split_warpgroup_loops(&mut f);
        let Stmt::If { cond, then, .. } = &f.body[0] else { panic!() };
        assert_eq!(*cond, g);
        assert!(matches!(&then[..], [Stmt::If { .. }, Stmt::If { .. }]), "{then:?}");
    }
}

//! Joins a warpgroup's consecutive branches (Thread IR → Thread IR).
//!
//! Expects a function whose barriers are placed ([`super::barriers`]) and
//! whose [`Function::warpgroup_preds`] are predicates set once, in the entry
//! code, and never written again: the branches the lowering puts around each
//! statement on one warpgroup's fragments
//! ([`crate::layout::RootLayout::owner`]).
//!
//! Guarantees the same behaviour with `if p { A } else { A' } if p { B }
//! else { B' }` (the same warpgroup predicate, the same sense, nothing but
//! comments between them) written `if p { A B } else { A' B' }`, at every
//! nesting level: the predicate does not change between the two tests, so
//! the threads that run `A` are the ones that run `B` (and `A'`, `B'`), and
//! no barrier stands between them (barriers are placed before this pass,
//! outside such branches). The warpgroup then runs its statements in one
//! stretch, which ptxas schedules as one block, and the others jump over
//! them once; and ptxas sees no path through one branch's `then` and the
//! next one's `else` (a wgmma issued in the first and waited for in the
//! second would otherwise look in flight on that path, and be serialized).

use crate::thread_ir::{Function, Reg, Stmt};

/// Joins the consecutive branches on one of `func`'s warpgroup predicates.
pub fn merge_warpgroup_branches(func: &mut Function) {
    if func.warpgroup_preds.is_empty() {
        return;
    }
    let preds: Vec<Reg> = func.warpgroup_preds.iter().map(|p| p.0).collect();
    merge(&mut func.body, &preds);
}

fn merge(body: &mut Vec<Stmt>, preds: &[Reg]) {
    for s in body.iter_mut() {
        match s {
            Stmt::If { then, otherwise, .. } => {
                merge(then, preds);
                merge(otherwise, preds);
            }
            Stmt::For { body, .. } => merge(body, preds),
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
        }
    }
    let is_branch = |s: &Stmt| match s {
        Stmt::If { cond, uniform: false, .. } => preds.contains(cond),
        _ => false,
    };
    let mut out: Vec<Stmt> = Vec::with_capacity(body.len());
    // Comments seen since the last statement, held back in case a branch
    // on the same predicate follows (they then go inside it).
    let mut held: Vec<Stmt> = Vec::new();
    for s in body.drain(..) {
        if matches!(s, Stmt::Comment(_)) {
            held.push(s);
            continue;
        }
        let joins = is_branch(&s)
            && out.last().is_some_and(|prev| {
                is_branch(prev)
                    && matches!((prev, &s), (
                        Stmt::If { cond: a, negate: na, .. },
                        Stmt::If { cond: b, negate: nb, .. },
                    ) if a == b && na == nb)
            });
        if joins {
            let (Some(Stmt::If { then: prev_then, otherwise: prev_else, .. }), Stmt::If { then, otherwise, .. }) =
                (out.last_mut(), s)
            else {
                unreachable!("both are branches")
            };
            prev_then.append(&mut held);
            prev_then.extend(then);
            prev_else.extend(otherwise);
        } else {
            out.append(&mut held);
            out.push(s);
        }
    }
    out.append(&mut held);
    *body = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_ir::{Inst, RegClass};

    fn inst() -> Stmt {
        Stmt::Inst { inst: Inst::BarSync, guard: None }
    }

    fn branch(cond: Reg, then: Vec<Stmt>) -> Stmt {
        Stmt::If { cond, negate: false, uniform: false, then, otherwise: vec![] }
    }

    #[test]
    fn consecutive_branches_of_one_warpgroup_join() {
        let mut f = Function::default();
        let p = f.new_reg(RegClass::Pred);
        let q = f.new_reg(RegClass::Pred);
        f.warpgroup_preds = vec![(p, 0), (q, 1)];
        f.body = vec![
            branch(p, vec![inst()]),
            Stmt::Comment("between".into()),
            branch(p, vec![inst(), inst()]),
            branch(q, vec![inst()]),
            inst(),
            branch(q, vec![inst()]),
            Stmt::For {
                var: p,
                start: crate::thread_ir::Operand::Imm(0),
                end: crate::thread_ir::Operand::Imm(1),
                exit: q,
                uniform: true,
                body: vec![branch(p, vec![inst()]), branch(p, vec![inst()])],
            },
        ];
        merge_warpgroup_branches(&mut f);
        let shape: Vec<String> = f
            .body
            .iter()
            .map(|s| match s {
                Stmt::If { cond, then, .. } => format!("if{}:{}", cond.0, then.len()),
                Stmt::For { body, .. } => format!("for:{}", body.len()),
                Stmt::Inst { .. } => "inst".into(),
                Stmt::Comment(_) => "comment".into(),
            })
            .collect();
        // p's two branches (the comment inside), then q's (an instruction
        // between q's two keeps them apart), and the loop's pair joined.
        assert_eq!(shape, ["if0:4", "if1:1", "inst", "if1:1", "for:1"]);
    }

    #[test]
    fn branches_with_elses_join_both_sides() {
        let mut f = Function::default();
        let p = f.new_reg(RegClass::Pred);
        f.warpgroup_preds = vec![(p, 0)];
        let with_else = |then: usize, otherwise: usize| Stmt::If {
            cond: p,
            negate: false,
            uniform: false,
            then: vec![inst(); then],
            otherwise: vec![inst(); otherwise],
        };
        f.body = vec![with_else(2, 1), branch(p, vec![inst()]), with_else(1, 3)];
        merge_warpgroup_branches(&mut f);
        let [Stmt::If { then, otherwise, .. }] = &f.body[..] else { panic!("one branch: {:?}", f.body.len()) };
        assert_eq!((then.len(), otherwise.len()), (4, 4));
    }

    #[test]
    fn other_branches_stay_apart() {
        let mut f = Function::default();
        let p = f.new_reg(RegClass::Pred);
        let other = f.new_reg(RegClass::Pred);
        f.warpgroup_preds = vec![(p, 0)];
        f.body = vec![branch(other, vec![inst()]), branch(other, vec![inst()])];
        merge_warpgroup_branches(&mut f);
        assert_eq!(f.body.len(), 2);
        // A negated test is another branch.
        f.body = vec![
            branch(p, vec![inst()]),
            Stmt::If { cond: p, negate: true, uniform: false, then: vec![inst()], otherwise: vec![] },
        ];
        merge_warpgroup_branches(&mut f);
        assert_eq!(f.body.len(), 2);
    }
}

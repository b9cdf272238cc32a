//! Pairs f32 → f16/bf16 conversions into one `cvt.rn.{f16,bf16}x2.f32`
//! (Thread IR → Thread IR, after the lowering).
//!
//! Why: `cvt.rn.f16.f32` is an F2F on the SM's XU pipe, the pipe `ex2`
//! also runs on, and the 16-bit result then needs a PRMT to be packed
//! next to its neighbour (a wgmma's register A, a vector store). The x2
//! form is one F2FP on the ALU that writes both halves of one 32-bit
//! register. An attention kernel converts every probability once per key
//! block: unpaired, the conversions were half of its XU work (ncu, d256:
//! 37 % of the XU pipe against cuDNN's 21 %).
//!
//! Expects: Thread IR as the lowering emits it (registers are not SSA: a
//! register may be written more than once).
//!
//! Guarantees: the same values in the same registers at every point where
//! the original program could read them. A conversion `a ← cvt(x)` is paired
//! with the next unguarded conversion of the same type `b ← cvt(y)` in the
//! same statement list, within `WINDOW` (8) statements, when every statement
//! between them is plain register arithmetic ([`Inst::Op`], [`Inst::Pack`],
//! [`Inst::Unpack`]) or a comment that neither reads nor writes `a` nor
//! writes `x`; the pair becomes, at the second one's place,
//! `t ← cvt.x2(y, x); {a, b} ← t` (`x` in the low half). So `a` is written
//! later than before, but nothing in between reads it, and `x` still holds
//! the value the first conversion read.

use crate::thread_ir::{Inst, Operand, Reg, RegClass, Stmt};

/// How many statements after a conversion its partner may be.
const WINDOW: usize = 8;

/// Pairs the conversions of `body` and of every nested statement list.
/// `new_reg` makes the 32-bit register each pair writes.
pub fn pack_conversions(body: &mut Vec<Stmt>, new_reg: &mut dyn FnMut(RegClass) -> Reg) {
    for s in body.iter_mut() {
        match s {
            Stmt::If { then, otherwise, .. } => {
                pack_conversions(then, new_reg);
                pack_conversions(otherwise, new_reg);
            }
            Stmt::For { body: inner, .. } => pack_conversions(inner, new_reg),
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
        }
    }
    let mut i = 0;
    while i < body.len() {
        let Some((x2, a, x)) = single_cvt(&body[i]) else {
            i += 1;
            continue;
        };
        let Some((j, b, y)) = partner(body, i, x2, a, &x) else {
            i += 1;
            continue;
        };
        let t = new_reg(RegClass::B32);
        body[j] = Stmt::Inst { inst: Inst::Op { op: x2.into(), dst: t, args: vec![y, x] }, guard: None };
        body.insert(j + 1, Stmt::Inst { inst: Inst::Unpack { lo: a, hi: b, src: t }, guard: None });
        body.remove(i);
        // The pair now sits at `j - 1` (the Op) and `j` (the Unpack).
    }
}

/// `(paired op, dst, src)` of an unguarded pairable conversion: the x2
/// form it takes when paired, its result and its source.
fn single_cvt(s: &Stmt) -> Option<(&'static str, Reg, Operand)> {
    match s {
        Stmt::Inst { inst: Inst::Op { op, dst, args }, guard: None } if args.len() == 1 => {
            let x2 = match op.as_str() {
                "cvt.rn.f16.f32" => "cvt.rn.f16x2.f32",
                "cvt.rn.bf16.f32" => "cvt.rn.bf16x2.f32",
                _ => return None,
            };
            Some((x2, *dst, args[0].clone()))
        }
        _ => None,
    }
}

/// The conversion that `body[i]` (`a ← cvt(x)`, paired as `x2`) pairs
/// with, if any: its index, result and source.
fn partner(body: &[Stmt], i: usize, x2: &str, a: Reg, x: &Operand) -> Option<(usize, Reg, Operand)> {
    let x_reg = match x {
        Operand::Reg(r) => Some(*r),
        _ => None,
    };
    for (j, s) in body.iter().enumerate().skip(i + 1).take(WINDOW) {
        if let Some((x2b, b, y)) = single_cvt(s) {
            if x2b == x2 && b != a && y != Operand::Reg(a) {
                return Some((j, b, y));
            }
        }
        // Whether `s` may stay between the two: it neither touches `a` nor writes `x`.
        let (writes, reads): (Vec<Reg>, Vec<Reg>) = match s {
            Stmt::Comment(_) => continue,
            Stmt::Inst { inst, guard } => {
                let guard_reads = guard.iter().map(|g| g.0);
                match inst {
                    Inst::Op { dst, args, .. } => (
                        vec![*dst],
                        args.iter()
                            .filter_map(|o| match o {
                                Operand::Reg(r) => Some(*r),
                                _ => None,
                            })
                            .chain(guard_reads)
                            .collect(),
                    ),
                    Inst::Pack { dst, lo, hi } => (vec![*dst], [*lo, *hi].into_iter().chain(guard_reads).collect()),
                    Inst::Unpack { lo, hi, src } => (vec![*lo, *hi], [*src].into_iter().chain(guard_reads).collect()),
                    _ => return None,
                }
            }
            Stmt::If { .. } | Stmt::For { .. } => return None,
        };
        if writes.contains(&a) || reads.contains(&a) || x_reg.is_some_and(|r| writes.contains(&r)) {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cvt(op: &str, dst: u32, src: u32) -> Stmt {
        Stmt::Inst { inst: Inst::Op { op: op.into(), dst: Reg(dst), args: vec![Operand::Reg(Reg(src))] }, guard: None }
    }

    fn run(body: &mut Vec<Stmt>) {
        let mut next = 100;
        pack_conversions(body, &mut |_| {
            next += 1;
            Reg(next)
        });
    }

    #[test]
    fn adjacent_conversions_pair() {
        let mut body = vec![cvt("cvt.rn.f16.f32", 1, 10), cvt("cvt.rn.f16.f32", 2, 11)];
        run(&mut body);
        assert_eq!(
            body,
            vec![
                Stmt::Inst {
                    inst: Inst::Op {
                        op: "cvt.rn.f16x2.f32".into(),
                        dst: Reg(101),
                        args: vec![Operand::Reg(Reg(11)), Operand::Reg(Reg(10))]
                    },
                    guard: None
                },
                Stmt::Inst { inst: Inst::Unpack { lo: Reg(1), hi: Reg(2), src: Reg(101) }, guard: None },
            ]
        );
    }

    #[test]
    fn types_do_not_mix_and_reads_between_block() {
        // f16 then bf16: no pair.
        let mut body = vec![cvt("cvt.rn.f16.f32", 1, 10), cvt("cvt.rn.bf16.f32", 2, 11)];
        let before = body.clone();
        run(&mut body);
        assert_eq!(body, before);
        // The first result read in between: no pair.
        let mut body = vec![
            cvt("cvt.rn.f16.f32", 1, 10),
            Stmt::Inst { inst: Inst::Pack { dst: Reg(5), lo: Reg(1), hi: Reg(1) }, guard: None },
            cvt("cvt.rn.f16.f32", 2, 11),
        ];
        let before = body.clone();
        run(&mut body);
        assert_eq!(body, before);
        // The first source overwritten in between: no pair.
        let mut body = vec![
            cvt("cvt.rn.bf16.f32", 1, 10),
            Stmt::Inst { inst: Inst::Op { op: "mul.f32".into(), dst: Reg(10), args: vec![] }, guard: None },
            cvt("cvt.rn.bf16.f32", 2, 11),
        ];
        let before = body.clone();
        run(&mut body);
        assert_eq!(body, before);
    }

    #[test]
    fn arithmetic_between_is_kept_and_pairs_chain() {
        let mul = Stmt::Inst {
            inst: Inst::Op { op: "mul.f32".into(), dst: Reg(11), args: vec![Operand::Reg(Reg(12))] },
            guard: None,
        };
        let mut body = vec![
            cvt("cvt.rn.bf16.f32", 1, 10),
            mul.clone(),
            cvt("cvt.rn.bf16.f32", 2, 11),
            cvt("cvt.rn.bf16.f32", 3, 13),
            cvt("cvt.rn.bf16.f32", 4, 14),
        ];
        run(&mut body);
        assert_eq!(body[0], mul);
        let ops: Vec<&str> = body
            .iter()
            .map(|s| match s {
                Stmt::Inst { inst: Inst::Op { op, .. }, .. } => op.as_str(),
                Stmt::Inst { inst: Inst::Unpack { .. }, .. } => "unpack",
                _ => "?",
            })
            .collect();
        assert_eq!(ops, ["mul.f32", "cvt.rn.bf16x2.f32", "unpack", "cvt.rn.bf16x2.f32", "unpack"]);
    }
}

//! Integer division without `div.s32`/`rem.s32`, which ptxas keeps as its
//! general sequence (a reciprocal on the XU pipe and ~20 dependent
//! instructions) even when the divisor is an immediate.
//!
//! By a constant ([`Lx::divide_by_constant`]): shifts for a power of two,
//! else a multiply-high by the round-up magic number, for `i32` and `u32`.
//!
//! By a divisor the launch evaluates (`abi::dims_divisors`: an `i32`
//! expression over dimensions and constants, GQA's `H / HKV`, the grid's
//! `cdiv(SQ, BM)` a persistent variant unfolds each tile by): every such
//! divisor takes four `.u32` parameters after the scalars, `[d, m, s1, s2]`
//! (`abi::divisor_params`), in every variant, so the launch ABI does not
//! depend on what the code uses; the kernel multiplies by them
//! ([`Lx::divide_by_param`]).
//!
//! Both where [`crate::CompileOptions::fast_divisors`] is on. Each division
//! is some ten instructions with no dependent chain through the XU pipe,
//! and the result is exactly `wrapping_div` and `wrapping_rem` (`abi`'s
//! tests check the method against division; `codegen_sim` checks the code
//! on the simulator).

use super::*;

/// The divisors of a lowering: `abi::dims_divisors` of the kernel as the
/// compiler was given it (a schedule may lower a rewritten copy of it, e.g.
/// with its epilogue staged, whose own list could differ: the parameters
/// must be the launch's), and whether to divide by them with a multiply.
#[derive(Clone, Debug, Default)]
pub(crate) struct Divisors {
    pub(crate) exprs: Vec<Expr>,
    pub(crate) fast: bool,
}

impl Divisors {
    pub(crate) fn of(kernel: &Kernel, options: &crate::CompileOptions) -> Divisors {
        Divisors { exprs: crate::abi::dims_divisors(kernel), fast: options.fast_divisors }
    }
}

impl<'a> Lx<'a> {
    /// Declares and loads the divisors' parameters (after the scalars).
    pub(crate) fn divisor_params(&mut self, pname: &mut dyn FnMut(&str) -> String) {
        for i in 0..self.divisors.exprs.len() {
            let regs = ["d", "m", "s1", "s2"].map(|part| {
                let name = pname(&format!("div{i}_{part}"));
                self.f.params.push((name.clone(), ".u32"));
                let r = self.new_reg(RegClass::B32);
                self.emit_pro(Inst::LdParam { ty: "u32", dst: r, name });
                r
            });
            self.divisor_regs.push(regs);
        }
    }

    /// `n / d` or `n % d` (`op`) where `d` is the launch's divisor `rhs`,
    /// when it is one and `n` is an `i32`; `None` otherwise.
    pub(crate) fn divide_by_param(&mut self, op: BinOp, n: &Val, rhs: &Expr) -> Option<Val> {
        if !self.divisors.fast || n.ty != DType::I32 || !matches!(op, BinOp::Div | BinOp::Rem) {
            return None;
        }
        let i = self.divisors.exprs.iter().position(|d| d == rhs)?;
        let [d, m, s1, s2] = *self.divisor_regs.get(i)?;
        let n = self.materialize(n);
        let (m, s1, s2, d) = (m.into(), s1.into(), s2.into(), Operand::Reg(d));
        Some(self.magic_divide(op, n, DType::I32, [m, s1, s2], d))
    }

    /// `n / c` or `n % c` for a constant `c` (not 0) and an `i32` or `u32`
    /// `n`: shifts for a power of two, else the multiply of
    /// `abi::divisor_params` with immediates. ptxas keeps `div.s32` by an
    /// immediate as the general sequence (a reciprocal on the XU pipe and
    /// some 20 dependent instructions): `cdiv(SQ, 64)` at every block's
    /// start. `None` for other types and for `op`s that are not divisions.
    pub(crate) fn divide_by_constant(&mut self, op: BinOp, n: &Val, c: i64) -> Option<Val> {
        if !self.divisors.fast || !matches!(op, BinOp::Div | BinOp::Rem) || !matches!(n.ty, DType::I32 | DType::U32) {
            return None;
        }
        let signed = n.ty == DType::I32;
        let c = if signed { c as i32 as i64 } else { c as u32 as i64 };
        // (A u32 divisor past i32::MAX would need a 33-bit magic number.)
        if c == 0 || c == i32::MIN as i64 || c > i32::MAX as i64 {
            return None;
        }
        let b = RegClass::B32;
        let x = self.materialize(n);
        if c > 0 && (c & (c - 1)) == 0 {
            let k = c.trailing_zeros() as i64;
            let q = if k == 0 {
                x
            } else if signed {
                // Round toward zero: add c − 1 to negative dividends.
                let sign = self.op("shr.s32", b, vec![x.into(), Operand::Imm(31)]);
                let bias = self.op("shr.u32", b, vec![sign.into(), Operand::Imm(32 - k)]);
                let biased = self.op("add.s32", b, vec![x.into(), bias.into()]);
                self.op("shr.s32", b, vec![biased.into(), Operand::Imm(k)])
            } else {
                self.op("shr.u32", b, vec![x.into(), Operand::Imm(k)])
            };
            let r = match op {
                BinOp::Div => q,
                _ => {
                    let qc = self.op("shl.b32", b, vec![q.into(), Operand::Imm(k)]);
                    self.op("sub.s32", b, vec![x.into(), qc.into()])
                }
            };
            return Some(Val { op: r.into(), ty: n.ty });
        }
        let [_, m, s1, s2] = crate::abi::divisor_params(c as i32);
        let params = [m, s1, s2].map(|v| Operand::Imm(i64::from(v)));
        Some(self.magic_divide(op, x, n.ty, params, Operand::Imm(c)))
    }

    /// `n / d` or `n % d` by the round-up multiply (`abi::divisor_params`'s
    /// `[m, s1, s2]` and `d` itself, registers or immediates): for an `i32`
    /// `n`, `|n| / |d|` given the sign of `n·d` (`i32::wrapping_div`), for a
    /// `u32` one `n / d`.
    fn magic_divide(&mut self, op: BinOp, n: Reg, ty: DType, [m, s1, s2]: [Operand; 3], d: Operand) -> Val {
        let b = RegClass::B32;
        let signed = ty == DType::I32;
        let a = if signed { self.op("abs.s32", b, vec![n.into()]) } else { n };
        let t = self.op("mul.hi.u32", b, vec![a.into(), m]);
        let a_t = self.op("sub.s32", b, vec![a.into(), t.into()]);
        let half = self.op("shr.u32", b, vec![a_t.into(), s1]);
        let sum = self.op("add.s32", b, vec![t.into(), half.into()]);
        let mut q = self.op("shr.u32", b, vec![sum.into(), s2]);
        if signed {
            // The sign of n·d: q ^ mask − mask negates q where mask is −1.
            let sn = match d {
                Operand::Imm(c) if c > 0 => n,
                Operand::Imm(c) => self.op("xor.b32", b, vec![n.into(), Operand::Imm(c as i32 as u32 as i64)]),
                _ => self.op("xor.b32", b, vec![n.into(), d.clone()]),
            };
            let mask = self.op("shr.s32", b, vec![sn.into(), Operand::Imm(31)]);
            let flipped = self.op("xor.b32", b, vec![q.into(), mask.into()]);
            q = self.op("sub.s32", b, vec![flipped.into(), mask.into()]);
        }
        let r = match op {
            BinOp::Div => q,
            // n − q·d, the sign of n (wrapping_rem).
            _ => {
                let qd = self.op("mul.lo.s32", b, vec![q.into(), d]);
                self.op("sub.s32", b, vec![n.into(), qd.into()])
            }
        };
        Val { op: r.into(), ty }
    }
}

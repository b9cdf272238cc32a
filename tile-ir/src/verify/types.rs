//! Expressions: every expression has one type.
//!
//! Checks: variables exist and are visible; binary operands agree (insert a
//! cast otherwise) and the operator is defined on their type
//! ([`super::rules::binop_defined`]); comparisons give `Bool`; math
//! intrinsics take floats, `abs` and `neg` also signed integers
//! ([`super::rules::unop_defined`]); `fma` operands agree; casts are between
//! numeric types or from `bool` to an integer
//! ([`super::rules::cast_allowed`]); `select` has a
//! `Bool` condition and arms of one type. Loads are checked by
//! [`super::access`].

use super::rules::{binop_defined, cast_allowed, unop_defined};
use super::Verifier;
use crate::ir::{BinOp, DType, Expr, UnOp};

impl Verifier<'_> {
    // ---- expressions ----

    /// The type of `e`, reporting problems. `None` if it has no type (an error
    /// was reported), so that callers do not cascade.
    pub(super) fn expr(&mut self, e: &Expr) -> Option<DType> {
        match e {
            Expr::Const(v) => Some(v.dtype()),
            Expr::Var(id) => {
                let Some(v) = self.var(*id) else {
                    self.err(format!("use of {id}, which does not exist"));
                    return None;
                };
                if !self.visible[id.0 as usize] {
                    self.err(format!("use of `{}` ({id}) before it is bound (or outside its scope)", v.name));
                }
                Some(v.dtype)
            }
            Expr::Load { buf, index } => {
                self.access(*buf, index, "load from");
                self.buffer(*buf).map(|b| b.dtype)
            }
            Expr::Unary { op, arg } => {
                let t = self.expr(arg)?;
                if !unop_defined(*op, t) {
                    self.err(format!("{} applied to {t}", unop_name(*op)));
                    return None;
                }
                Some(t)
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.expr(lhs), self.expr(rhs));
                let (a, b) = (a?, b?);
                if a != b {
                    self.err(format!("operands of {} have types {a} and {b}; insert a cast", binop_name(*op)));
                    return None;
                }
                if !binop_defined(*op, a) {
                    self.err(format!("{} applied to {a}", binop_name(*op)));
                    return None;
                }
                Some(if op.is_comparison() { DType::Bool } else { a })
            }
            Expr::Fma { a, b, c } => {
                let (ta, tb, tc) = (self.expr(a), self.expr(b), self.expr(c));
                let (ta, tb, tc) = (ta?, tb?, tc?);
                if ta != tb || tb != tc {
                    self.err(format!("operands of fma have types {ta}, {tb} and {tc}; insert casts"));
                    return None;
                }
                if ta == DType::Bool {
                    self.err("fma applied to bool");
                    return None;
                }
                Some(ta)
            }
            Expr::Cast { to, arg } => {
                let t = self.expr(arg)?;
                if !cast_allowed(t, *to) {
                    self.err(format!("cast from {t} to {to} is not allowed"));
                }
                Some(*to)
            }
            Expr::Select { cond, then, otherwise } => {
                let tc = self.expr(cond);
                let (tt, to) = (self.expr(then), self.expr(otherwise));
                if let Some(tc) = tc {
                    if tc != DType::Bool {
                        self.err(format!("select condition has type {tc}, expected bool"));
                    }
                }
                let (tt, to) = (tt?, to?);
                if tt != to {
                    self.err(format!("select arms have types {tt} and {to}"));
                    return None;
                }
                Some(tt)
            }
        }
    }
}

/// The name of a unary operator as printed (`neg`, `exp2`, ..).
pub fn unop_name(op: UnOp) -> &'static str {
    match op {
        UnOp::Neg => "neg",
        UnOp::Not => "not",
        UnOp::Exp2 => "exp2",
        UnOp::Exp => "exp",
        UnOp::Log2 => "log2",
        UnOp::Log => "log",
        UnOp::Abs => "abs",
        UnOp::Sqrt => "sqrt",
        UnOp::Rsqrt => "rsqrt",
    }
}

/// The name of a binary operator (`add`, `lt`, ..).
pub fn binop_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Rem => "rem",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Lt => "lt",
        BinOp::Le => "le",
        BinOp::Gt => "gt",
        BinOp::Ge => "ge",
        BinOp::Eq => "eq",
        BinOp::Ne => "ne",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::Xor => "xor",
        BinOp::Shl => "shl",
        BinOp::Shr => "shr",
    }
}

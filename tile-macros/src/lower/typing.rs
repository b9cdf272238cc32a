//! Literal typing and constant folding, the frontend's part of typing: an
//! untyped literal (or `consts(..)` name) adopts the other operand's type
//! (`x * 2` with `x: f16`), defaulting to `i32` / `f32`; two constants fold;
//! typed operands must agree (no implicit conversions, as in Rust), with a
//! message that names the `as` to insert. Which types an operator is
//! defined on is the IR's rule (`tile_ir::verify::rules::binop_defined`);
//! the language adds that bools are not ordered. Also the DSL's type names.

use super::{Lowerer, Val, DTYPES};
use crate::diag::Lowered;
use quote::ToTokens;
use syn::Expr as SynExpr;
use tile_ir::verify::rules;
use tile_ir::{BinOp, DType, Expr, Value};

impl Lowerer<'_> {
    pub(super) fn dtype_of_type(&mut self, ty: &syn::Type) -> Lowered<DType> {
        if let syn::Type::Path(p) = ty {
            if let Some(ident) = p.path.get_ident() {
                let name = ident.to_string();
                if DTYPES.contains(&name.as_str()) {
                    if let Some(d) = DType::from_name(&name) {
                        return Ok(d);
                    }
                }
                if name == "bool" {
                    return Ok(DType::Bool);
                }
                if let Some((_, d)) = self.type_params.iter().find(|(n, _)| *n == name) {
                    return Ok(*d);
                }
                if self.const_params.contains(&name) {
                    return Err(self.errors.spanned(
                        ty,
                        format!("`{name}` is a const parameter of the kernel (an integer), not a type; a kernel computes with `f16`, `bf16`, `f32`, `i32`, `u32` or a type parameter"),
                    ));
                }
            }
        }
        Err(self.errors.spanned(
            ty,
            "unsupported type: a kernel computes with `f16`, `bf16`, `f32`, `i32`, `u32` (and `bool` for conditions)",
        ))
    }

    /// An `i32` index-like value (loop bounds, tile origins, element indices).
    pub(super) fn index_value(&mut self, e: &SynExpr, what: &str) -> Lowered<Expr> {
        match self.expr(e)? {
            Val::Typed(x, DType::I32) => Ok(x),
            Val::Typed(x, DType::U32) => Ok(Expr::cast(DType::I32, x)),
            Val::Int(v) => self.literal(Val::Int(v), DType::I32, e),
            other => {
                Err(self.errors.spanned(e, format!("{what} must be an integer (`i32`), found {}", other.describe())))
            }
        }
    }

    /// A binary operator on two values of one type (untyped constants adopt
    /// the other side's type; two constants fold).
    pub(super) fn binary_op(&mut self, op: BinOp, symbol: &str, l: Val, r: Val, whole: &dyn ToTokens) -> Lowered<Val> {
        if let Some(v) = self.fold(op, symbol, &l, &r, whole)? {
            return Ok(v);
        }
        let (a, b, t) = match (&l, &r) {
            (Val::Typed(_, x), Val::Typed(_, y)) if x != y => {
                return Err(self.errors.spanned(
                    whole,
                    format!("mismatched types in `{symbol}`: the left side is `{x}` and the right side is `{y}`; convert one side with `as {x}` or `as {y}`"),
                ))
            }
            _ => self.unify(l, r, whole, &format!("the operands of `{symbol}`"))?,
        };
        // The IR's rule, plus one of the language: bools are not ordered.
        let ordering = matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge);
        let allowed = rules::binop_defined(op, t) && !(ordering && t == DType::Bool);
        if !allowed {
            return Err(self.errors.spanned(whole, format!("`{symbol}` is not defined on `{t}`")));
        }
        let result = if op.is_comparison() { DType::Bool } else { t };
        Ok(Val::Typed(Expr::binary(op, a, b), result))
    }

    /// Folds an operator on two untyped constants, or on two constant
    /// bools; `None` otherwise.
    pub(super) fn fold(
        &mut self,
        op: BinOp,
        symbol: &str,
        l: &Val,
        r: &Val,
        whole: &dyn ToTokens,
    ) -> Lowered<Option<Val>> {
        let cmp = |o: std::cmp::Ordering| -> bool {
            use std::cmp::Ordering::*;
            match op {
                BinOp::Lt => o == Less,
                BinOp::Le => o != Greater,
                BinOp::Gt => o == Greater,
                BinOp::Ge => o != Less,
                BinOp::Eq => o == Equal,
                _ => o != Equal,
            }
        };
        let boolean = |b: bool| Val::Typed(Expr::Const(Value::Bool(b)), DType::Bool);
        match (l, r) {
            (Val::Int(a), Val::Int(b)) => {
                let (a, b) = (*a, *b);
                if op.is_comparison() {
                    return Ok(Some(boolean(cmp(a.cmp(&b)))));
                }
                let v = match op {
                    BinOp::Add => a.checked_add(b),
                    BinOp::Sub => a.checked_sub(b),
                    BinOp::Mul => a.checked_mul(b),
                    BinOp::Div => a.checked_div(b),
                    BinOp::Rem => a.checked_rem(b),
                    BinOp::Min => Some(a.min(b)),
                    BinOp::Max => Some(a.max(b)),
                    BinOp::And => Some(a & b),
                    BinOp::Or => Some(a | b),
                    BinOp::Xor => Some(a ^ b),
                    BinOp::Shl => u32::try_from(b).ok().and_then(|s| a.checked_shl(s)),
                    BinOp::Shr => u32::try_from(b).ok().and_then(|s| a.checked_shr(s)),
                    _ => None,
                };
                match v {
                    Some(v) => Ok(Some(Val::Int(v))),
                    None if b == 0 && matches!(op, BinOp::Div | BinOp::Rem) => {
                        Err(self.errors.spanned(whole, format!("`{a} {symbol} {b}` divides by zero")))
                    }
                    None => Err(self.errors.spanned(whole, format!("`{a} {symbol} {b}` overflows"))),
                }
            }
            (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
                let f = |v: &Val| match v {
                    Val::Int(i) => *i as f64,
                    Val::Float(x) => *x,
                    Val::Typed(..) => 0.0,
                };
                let (a, b) = (f(l), f(r));
                if op.is_comparison() {
                    return Ok(Some(boolean(a.partial_cmp(&b).is_some_and(cmp))));
                }
                let v = match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Rem => a % b,
                    BinOp::Min => a.min(b),
                    BinOp::Max => a.max(b),
                    _ => return Err(self.errors.spanned(whole, format!("`{symbol}` is not defined on floats"))),
                };
                Ok(Some(Val::Float(v)))
            }
            // Bools that folded from constants (`D <= 64 && THREADS == 128`),
            // so that an `if` on them keeps only the branch taken.
            (Val::Typed(Expr::Const(Value::Bool(a)), _), Val::Typed(Expr::Const(Value::Bool(b)), _)) => {
                let v = match op {
                    BinOp::And => a & b,
                    BinOp::Or => a | b,
                    BinOp::Xor | BinOp::Ne => a ^ b,
                    BinOp::Eq => a == b,
                    _ => return Ok(None),
                };
                Ok(Some(boolean(v)))
            }
            _ => Ok(None),
        }
    }

    /// Two values of one type: typed ones must agree; an untyped one takes
    /// the other's type; two untyped ones default (`i32`, or `f32` if either
    /// is a float).
    pub(super) fn unify(&mut self, a: Val, b: Val, whole: &dyn ToTokens, what: &str) -> Lowered<(Expr, Expr, DType)> {
        match (a, b) {
            (Val::Typed(x, s), Val::Typed(y, t)) => {
                if s != t {
                    return Err(self.errors.spanned(
                        whole,
                        format!("mismatched types: {what} are `{s}` and `{t}`; convert one with `as {s}` or `as {t}`"),
                    ));
                }
                Ok((x, y, s))
            }
            (Val::Typed(x, s), other) => {
                let y = self.literal(other, s, whole)?;
                Ok((x, y, s))
            }
            (other, Val::Typed(y, t)) => {
                let x = self.literal(other, t, whole)?;
                Ok((x, y, t))
            }
            (a, b) => {
                let t = if matches!(a, Val::Float(_)) || matches!(b, Val::Float(_)) { DType::F32 } else { DType::I32 };
                let x = self.literal(a, t, whole)?;
                let y = self.literal(b, t, whole)?;
                Ok((x, y, t))
            }
        }
    }

    /// `v` as a value of type `to` (untyped constants convert; typed values
    /// must already have that type).
    pub(super) fn coerce(&mut self, v: Val, to: DType, tokens: &dyn ToTokens, what: &str) -> Lowered<Expr> {
        match v {
            Val::Typed(e, t) if t == to => Ok(e),
            Val::Typed(_, t) => Err(self
                .errors
                .spanned(tokens, format!("mismatched types: {what} is `{t}`; convert it with `as {to}`"))),
            other => self.literal(other, to, tokens),
        }
    }

    /// A typed value, giving untyped constants their default type.
    pub(super) fn materialize(&mut self, v: Val, tokens: &dyn ToTokens) -> Lowered<(Expr, DType)> {
        match v {
            Val::Typed(e, t) => Ok((e, t)),
            Val::Int(x) => Ok((self.literal(Val::Int(x), DType::I32, tokens)?, DType::I32)),
            Val::Float(x) => Ok((self.literal(Val::Float(x), DType::F32, tokens)?, DType::F32)),
        }
    }

    /// An untyped constant as a constant of type `to`.
    pub(super) fn literal(&mut self, v: Val, to: DType, tokens: &dyn ToTokens) -> Lowered<Expr> {
        let value = match (v, to) {
            (Val::Typed(e, t), _) if t == to => return Ok(e),
            (Val::Typed(_, t), _) => {
                return Err(self.errors.spanned(tokens, format!("mismatched types: expected `{to}`, found `{t}`")))
            }
            (Val::Int(x), DType::I32) => match i32::try_from(x) {
                Ok(x) => Value::I32(x),
                Err(_) => return Err(self.errors.spanned(tokens, format!("{x} does not fit in an `i32`"))),
            },
            (Val::Int(x), DType::U32) => match u32::try_from(x) {
                Ok(x) => Value::U32(x),
                Err(_) => return Err(self.errors.spanned(tokens, format!("{x} does not fit in a `u32`"))),
            },
            (Val::Int(x), DType::I64) => Value::I64(x),
            (Val::Int(x), DType::F32) => Value::F32(x as f32),
            (Val::Int(x), DType::F16) => Value::F16(half::f16::from_f64(x as f64)),
            (Val::Int(x), DType::BF16) => Value::BF16(half::bf16::from_f64(x as f64)),
            (Val::Float(x), DType::F32) => Value::F32(x as f32),
            (Val::Float(x), DType::F16) => Value::F16(half::f16::from_f64(x)),
            (Val::Float(x), DType::BF16) => Value::BF16(half::bf16::from_f64(x)),
            (Val::Float(_), t) => {
                return Err(self
                    .errors
                    .spanned(tokens, format!("mismatched types: expected `{t}`, found a float literal")))
            }
            (Val::Int(_), DType::Bool) => {
                return Err(self.errors.spanned(tokens, "mismatched types: expected `bool`, found an integer"))
            }
        };
        Ok(Expr::Const(value))
    }
}

/// A constant converted as Rust's `as` does (float → int truncates and
/// saturates, NaN → 0). `None` for conversions the frontend leaves to `Cast`.
pub(super) fn cast_value(v: Value, to: DType) -> Option<Value> {
    let as_f64 = match v {
        Value::F16(x) => x.to_f64(),
        Value::BF16(x) => x.to_f64(),
        Value::F32(x) => x as f64,
        Value::I32(x) => x as f64,
        Value::U32(x) => x as f64,
        Value::I64(_) | Value::Bool(_) => return None,
    };
    Some(match to {
        DType::F32 => Value::F32(as_f64 as f32),
        DType::F16 => Value::F16(half::f16::from_f64(as_f64)),
        DType::BF16 => Value::BF16(half::bf16::from_f64(as_f64)),
        DType::I32 => match v {
            Value::U32(x) => Value::I32(x as i32),
            _ => Value::I32(as_f64 as i32),
        },
        DType::U32 => match v {
            Value::I32(x) => Value::U32(x as u32),
            _ => Value::U32(as_f64 as u32),
        },
        DType::I64 | DType::Bool => return None,
    })
}

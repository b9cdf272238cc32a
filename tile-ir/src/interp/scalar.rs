//! Scalar semantics shared by every part of the interpreter: arithmetic on
//! [`Value`]s, casts, and the little-endian encoding of elements in memory.
//!
//! Expects operands of one type (the verifier guarantees it; a mismatch is an
//! error, not a panic). Guarantees: f16/bf16 arithmetic is computed in f32 and
//! rounded to the type (round to nearest even); f32 arithmetic is f32;
//! integer arithmetic wraps; casts follow Rust's `as`.

use super::InterpError;
use crate::ir::{BinOp, DType, UnOp, Value};
use half::{bf16, f16};

fn err<T>(msg: String) -> Result<T, InterpError> {
    Err(InterpError(msg))
}

/// The value of a float-typed [`Value`] as f32 (exact for f16/bf16).
fn as_f32(v: Value) -> Option<f32> {
    match v {
        Value::F32(x) => Some(x),
        Value::F16(x) => Some(x.to_f32()),
        Value::BF16(x) => Some(x.to_f32()),
        _ => None,
    }
}

/// The value of an integer or bool [`Value`] as i64 (u32 zero-extended).
fn as_i64(v: Value) -> Option<i64> {
    match v {
        Value::I32(x) => Some(x as i64),
        Value::U32(x) => Some(x as i64),
        Value::I64(x) => Some(x),
        Value::Bool(b) => Some(b as i64),
        _ => None,
    }
}

/// An f32 result rounded to the float type `t`.
fn float_of(t: DType, x: f32) -> Value {
    match t {
        DType::F16 => Value::F16(f16::from_f32(x)),
        DType::BF16 => Value::BF16(bf16::from_f32(x)),
        _ => Value::F32(x),
    }
}

/// An integer result wrapped to the integer type `t`.
fn int_of(t: DType, x: i64) -> Value {
    match t {
        DType::I32 => Value::I32(x as i32),
        DType::U32 => Value::U32(x as u32),
        DType::Bool => Value::Bool(x != 0),
        _ => Value::I64(x),
    }
}

/// Zero of a type.
pub fn zero(t: DType) -> Value {
    match t {
        DType::F16 => Value::F16(f16::ZERO),
        DType::BF16 => Value::BF16(bf16::ZERO),
        DType::F32 => Value::F32(0.0),
        DType::I32 => Value::I32(0),
        DType::U32 => Value::U32(0),
        DType::I64 => Value::I64(0),
        DType::Bool => Value::Bool(false),
    }
}

/// The most negative (`max == false`: most positive) value of a type:
/// the identity of `max` (`min`). Floats use ±inf.
pub fn extreme(t: DType, lowest: bool) -> Value {
    match (t, lowest) {
        (DType::F16 | DType::BF16 | DType::F32, true) => float_of(t, f32::NEG_INFINITY),
        (DType::F16 | DType::BF16 | DType::F32, false) => float_of(t, f32::INFINITY),
        (DType::I32, true) => Value::I32(i32::MIN),
        (DType::I32, false) => Value::I32(i32::MAX),
        (DType::U32, true) => Value::U32(0),
        (DType::U32, false) => Value::U32(u32::MAX),
        (DType::I64, true) => Value::I64(i64::MIN),
        (DType::I64, false) => Value::I64(i64::MAX),
        (DType::Bool, lowest) => Value::Bool(!lowest),
    }
}

/// Rust `as` between any two types: float→int truncates toward zero and
/// saturates (NaN → 0); int→int wraps; to f16/bf16 rounds to nearest even
/// (from integers through f64, so the rounding happens once); `bool` → 0/1;
/// anything → `bool` is `!= 0`.
pub fn cast(v: Value, to: DType) -> Value {
    if v.dtype() == to {
        return v;
    }
    if let Some(x) = as_f32(v) {
        return match to {
            DType::F16 => Value::F16(f16::from_f32(x)),
            DType::BF16 => Value::BF16(bf16::from_f32(x)),
            DType::F32 => Value::F32(x),
            DType::I32 => Value::I32(x as i32),
            DType::U32 => Value::U32(x as u32),
            DType::I64 => Value::I64(x as i64),
            DType::Bool => Value::Bool(x != 0.0),
        };
    }
    let x = as_i64(v).unwrap_or(0);
    match to {
        DType::F16 => Value::F16(f16::from_f64(x as f64)),
        DType::BF16 => Value::BF16(bf16::from_f64(x as f64)),
        DType::F32 => Value::F32(x as f32),
        DType::I32 => Value::I32(x as i32),
        DType::U32 => Value::U32(x as u32),
        DType::I64 => Value::I64(x),
        DType::Bool => Value::Bool(x != 0),
    }
}

/// The value as an index (`I32`, `U32` or `I64`), for addressing.
pub fn as_index(v: Value) -> Result<i64, InterpError> {
    match v {
        Value::I32(x) => Ok(x as i64),
        Value::U32(x) => Ok(x as i64),
        Value::I64(x) => Ok(x),
        other => err(format!("an index has type {}, expected i32", other.dtype())),
    }
}

pub fn as_bool(v: Value) -> Result<bool, InterpError> {
    match v {
        Value::Bool(b) => Ok(b),
        other => err(format!("a condition has type {}, expected bool", other.dtype())),
    }
}

pub fn unary(op: UnOp, v: Value) -> Result<Value, InterpError> {
    let t = v.dtype();
    if let Some(x) = as_f32(v) {
        let r = match op {
            // Negation flips the sign bit: exact in every float type.
            UnOp::Neg => {
                return Ok(match v {
                    Value::F16(h) => Value::F16(-h),
                    Value::BF16(h) => Value::BF16(-h),
                    _ => Value::F32(-x),
                })
            }
            UnOp::Not => return err(format!("`!` applied to {t}")),
            UnOp::Exp2 => x.exp2(),
            UnOp::Exp => x.exp(),
            UnOp::Log2 => x.log2(),
            UnOp::Log => x.ln(),
            UnOp::Abs => x.abs(),
            UnOp::Sqrt => x.sqrt(),
            UnOp::Rsqrt => 1.0 / x.sqrt(),
        };
        return Ok(float_of(t, r));
    }
    Ok(match (op, v) {
        (UnOp::Not, Value::Bool(b)) => Value::Bool(!b),
        (UnOp::Not, Value::I32(x)) => Value::I32(!x),
        (UnOp::Not, Value::U32(x)) => Value::U32(!x),
        (UnOp::Not, Value::I64(x)) => Value::I64(!x),
        (UnOp::Neg, Value::I32(x)) => Value::I32(x.wrapping_neg()),
        (UnOp::Neg, Value::U32(x)) => Value::U32(x.wrapping_neg()),
        (UnOp::Neg, Value::I64(x)) => Value::I64(x.wrapping_neg()),
        (UnOp::Abs, Value::I32(x)) => Value::I32(x.wrapping_abs()),
        (UnOp::Abs, Value::U32(x)) => Value::U32(x),
        (UnOp::Abs, Value::I64(x)) => Value::I64(x.wrapping_abs()),
        (op, _) => return err(format!("{} applied to {t}", crate::verify::unop_name(op))),
    })
}

pub fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, InterpError> {
    let t = a.dtype();
    if t != b.dtype() {
        return err(format!("operands of {} have types {t} and {}", crate::verify::binop_name(op), b.dtype()));
    }
    if let (Some(x), Some(y)) = (as_f32(a), as_f32(b)) {
        let r = match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            BinOp::Rem => x % y,
            BinOp::Min => x.min(y),
            BinOp::Max => x.max(y),
            BinOp::Lt => return Ok(Value::Bool(x < y)),
            BinOp::Le => return Ok(Value::Bool(x <= y)),
            BinOp::Gt => return Ok(Value::Bool(x > y)),
            BinOp::Ge => return Ok(Value::Bool(x >= y)),
            BinOp::Eq => return Ok(Value::Bool(x == y)),
            BinOp::Ne => return Ok(Value::Bool(x != y)),
            _ => return err(format!("{} applied to {t}", crate::verify::binop_name(op))),
        };
        return Ok(float_of(t, r));
    }
    if let (Value::Bool(x), Value::Bool(y)) = (a, b) {
        return Ok(Value::Bool(match op {
            BinOp::And => x & y,
            BinOp::Or => x | y,
            BinOp::Xor => x ^ y,
            BinOp::Eq => x == y,
            BinOp::Ne => x != y,
            BinOp::Lt => !x & y,
            BinOp::Le => x <= y,
            BinOp::Gt => x & !y,
            BinOp::Ge => x >= y,
            _ => return err(format!("{} applied to bool", crate::verify::binop_name(op))),
        }));
    }
    match (a, b) {
        (Value::I32(x), Value::I32(y)) => int_binop(op, x as i64, y as i64, true).map(|r| int_result(op, t, r)),
        (Value::U32(x), Value::U32(y)) => int_binop(op, x as i64, y as i64, false).map(|r| int_result(op, t, r)),
        (Value::I64(x), Value::I64(y)) => int_binop64(op, x, y),
        _ => err(format!("{} applied to {t}", crate::verify::binop_name(op))),
    }
}

fn int_result(op: BinOp, t: DType, r: i64) -> Value {
    if op.is_comparison() {
        Value::Bool(r != 0)
    } else {
        int_of(t, r)
    }
}

/// 32-bit integer operations, computed on the sign- (`signed`) or
/// zero-extended operands; the caller wraps the result to 32 bits (or reads
/// it as 0/1 for a comparison). Shifts follow PTX: the amount is read as
/// unsigned, and amounts of 32 or more give 0 (or the sign, for `>>` on i32).
fn int_binop(op: BinOp, x: i64, y: i64, signed: bool) -> Result<i64, InterpError> {
    let shift = (y as u64) & 0xffff_ffff;
    Ok(match op {
        BinOp::Lt => (x < y) as i64,
        BinOp::Le => (x <= y) as i64,
        BinOp::Gt => (x > y) as i64,
        BinOp::Ge => (x >= y) as i64,
        BinOp::Eq => (x == y) as i64,
        BinOp::Ne => (x != y) as i64,
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div | BinOp::Rem if y == 0 => return err("integer division by zero".into()),
        // i32::MIN / -1 = 2^31 wraps to i32::MIN once truncated, as on the GPU.
        BinOp::Div => x / y,
        BinOp::Rem => x % y,
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::Shl if shift >= 32 => 0,
        BinOp::Shl => x << shift,
        BinOp::Shr if signed => x >> shift.min(31),
        BinOp::Shr if shift >= 32 => 0,
        BinOp::Shr => x >> shift,
    })
}

fn int_binop64(op: BinOp, x: i64, y: i64) -> Result<Value, InterpError> {
    Ok(Value::I64(match op {
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div | BinOp::Rem if y == 0 => return err("integer division by zero".into()),
        BinOp::Div => x.wrapping_div(y),
        BinOp::Rem => x.wrapping_rem(y),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::Shl => {
            if y as u64 >= 64 {
                0
            } else {
                x << y
            }
        }
        BinOp::Shr => x >> (y as u64).min(63),
        BinOp::Lt => return Ok(Value::Bool(x < y)),
        BinOp::Le => return Ok(Value::Bool(x <= y)),
        BinOp::Gt => return Ok(Value::Bool(x > y)),
        BinOp::Ge => return Ok(Value::Bool(x >= y)),
        BinOp::Eq => return Ok(Value::Bool(x == y)),
        BinOp::Ne => return Ok(Value::Bool(x != y)),
    }))
}

/// `a * b + c`: one rounding in f32 for floats (then to f16/bf16), wrapping
/// for integers.
pub fn fma(a: Value, b: Value, c: Value) -> Result<Value, InterpError> {
    let t = a.dtype();
    if b.dtype() != t || c.dtype() != t {
        return err(format!("operands of fma have types {t}, {} and {}", b.dtype(), c.dtype()));
    }
    if let (Some(x), Some(y), Some(z)) = (as_f32(a), as_f32(b), as_f32(c)) {
        return Ok(float_of(t, x.mul_add(y, z)));
    }
    match (a, b, c) {
        (Value::I32(x), Value::I32(y), Value::I32(z)) => Ok(Value::I32(x.wrapping_mul(y).wrapping_add(z))),
        (Value::U32(x), Value::U32(y), Value::U32(z)) => Ok(Value::U32(x.wrapping_mul(y).wrapping_add(z))),
        (Value::I64(x), Value::I64(y), Value::I64(z)) => Ok(Value::I64(x.wrapping_mul(y).wrapping_add(z))),
        _ => err(format!("fma applied to {t}")),
    }
}

/// Reads element `i` of a little-endian array of `t`. The caller checks bounds.
#[inline]
pub fn read(bytes: &[u8], t: DType, i: usize) -> Value {
    match t {
        DType::F16 => Value::F16(f16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))),
        DType::BF16 => Value::BF16(bf16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))),
        DType::F32 => Value::F32(f32::from_le_bytes(word4(bytes, i))),
        DType::I32 => Value::I32(i32::from_le_bytes(word4(bytes, i))),
        DType::U32 => Value::U32(u32::from_le_bytes(word4(bytes, i))),
        DType::I64 => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
            Value::I64(i64::from_le_bytes(w))
        }
        DType::Bool => Value::Bool(bytes[i] != 0),
    }
}

#[inline]
fn word4(bytes: &[u8], i: usize) -> [u8; 4] {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[4 * i..4 * i + 4]);
    w
}

/// Reads element `i` of an f32 array.
#[inline]
pub fn read_f32(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(word4(bytes, i))
}

/// Writes `v`, converted to `t` (rounded for f16/bf16), as element `i`.
#[inline]
pub fn write(bytes: &mut [u8], t: DType, i: usize, v: Value) {
    let v = if v.dtype() == t { v } else { cast(v, t) };
    match v {
        Value::F16(x) => bytes[2 * i..2 * i + 2].copy_from_slice(&x.to_bits().to_le_bytes()),
        Value::BF16(x) => bytes[2 * i..2 * i + 2].copy_from_slice(&x.to_bits().to_le_bytes()),
        Value::F32(x) => bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
        Value::I32(x) => bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
        Value::U32(x) => bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
        Value::I64(x) => bytes[8 * i..8 * i + 8].copy_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => bytes[i] = x as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_rust_as() {
        assert_eq!(cast(Value::F32(f32::NAN), DType::I32), Value::I32(0));
        assert_eq!(cast(Value::F32(-1e20), DType::I32), Value::I32(i32::MIN));
        assert_eq!(cast(Value::F32(1e20), DType::U32), Value::U32(u32::MAX));
        assert_eq!(cast(Value::F32(-7.9), DType::U32), Value::U32(0));
        assert_eq!(cast(Value::F32(-7.9), DType::I32), Value::I32(-7));
        assert_eq!(cast(Value::I32(-1), DType::U32), Value::U32(u32::MAX));
        assert_eq!(cast(Value::U32(u32::MAX), DType::I32), Value::I32(-1));
        assert_eq!(cast(Value::I64(1 << 40), DType::I32), Value::I32(0));
        assert_eq!(cast(Value::Bool(true), DType::I32), Value::I32(1));
        assert_eq!(cast(Value::I32(3), DType::Bool), Value::Bool(true));
        // i32 → f16 rounds once: 2049 is a tie between 2048 and 2050 (even: 2048).
        assert_eq!(cast(Value::I32(2049), DType::F16), Value::F16(f16::from_f32(2048.0)));
        assert_eq!(cast(Value::I32(2051), DType::F16), Value::F16(f16::from_f32(2052.0)));
        assert_eq!(cast(Value::I32(70000), DType::F16), Value::F16(f16::INFINITY));
        assert_eq!(cast(Value::F16(f16::from_f32(-2.5)), DType::I32), Value::I32(-2));
        // 16777217 is not an f32: `as` rounds to even.
        assert_eq!(cast(Value::I32(16_777_217), DType::F32), Value::F32(16_777_216.0));
    }

    #[test]
    fn f16_arithmetic_rounds_to_the_type() {
        let h = |x: f32| Value::F16(f16::from_f32(x));
        // 2048 + 1 is not an f16: rounds to even.
        assert_eq!(binary(BinOp::Add, h(2048.0), h(1.0)).unwrap(), h(2048.0));
        assert_eq!(binary(BinOp::Add, h(2048.0), h(3.0)).unwrap(), h(2052.0));
        assert_eq!(binary(BinOp::Mul, h(300.0), h(300.0)).unwrap(), Value::F16(f16::INFINITY));
        assert_eq!(binary(BinOp::Lt, h(1.0), h(2.0)).unwrap(), Value::Bool(true));
        let b = |x: f32| Value::BF16(bf16::from_f32(x));
        assert_eq!(binary(BinOp::Add, b(256.0), b(1.0)).unwrap(), b(256.0));
    }

    #[test]
    fn integer_edge_cases() {
        let i = Value::I32;
        assert_eq!(binary(BinOp::Add, i(i32::MAX), i(1)).unwrap(), i(i32::MIN));
        assert_eq!(binary(BinOp::Div, i(i32::MIN), i(-1)).unwrap(), i(i32::MIN));
        assert_eq!(binary(BinOp::Rem, i(i32::MIN), i(-1)).unwrap(), i(0));
        assert_eq!(binary(BinOp::Div, i(-7), i(2)).unwrap(), i(-3));
        assert_eq!(binary(BinOp::Rem, i(-7), i(2)).unwrap(), i(-1));
        assert!(binary(BinOp::Div, i(1), i(0)).unwrap_err().0.contains("division by zero"));
        assert!(binary(BinOp::Rem, Value::U32(1), Value::U32(0)).is_err());
        assert_eq!(binary(BinOp::Shl, i(1), i(31)).unwrap(), i(i32::MIN));
        assert_eq!(binary(BinOp::Shl, i(1), i(32)).unwrap(), i(0));
        assert_eq!(binary(BinOp::Shr, i(-8), i(100)).unwrap(), i(-1));
        assert_eq!(binary(BinOp::Shr, i(-8), i(-1)).unwrap(), i(-1));
        assert_eq!(binary(BinOp::Shr, Value::U32(u32::MAX), Value::U32(31)).unwrap(), Value::U32(1));
        assert_eq!(binary(BinOp::Shr, Value::U32(u32::MAX), Value::U32(32)).unwrap(), Value::U32(0));
        assert_eq!(binary(BinOp::Sub, Value::U32(0), Value::U32(1)).unwrap(), Value::U32(u32::MAX));
        assert_eq!(binary(BinOp::Mul, Value::U32(u32::MAX), Value::U32(u32::MAX)).unwrap(), Value::U32(1));
        assert_eq!(binary(BinOp::Lt, Value::U32(u32::MAX), Value::U32(1)).unwrap(), Value::Bool(false));
        assert_eq!(binary(BinOp::Max, Value::I64(-1), Value::I64(i64::MIN)).unwrap(), Value::I64(-1));
        assert_eq!(unary(UnOp::Neg, i(i32::MIN)).unwrap(), i(i32::MIN));
        assert_eq!(unary(UnOp::Not, i(0)).unwrap(), i(-1));
        assert_eq!(unary(UnOp::Abs, i(-5)).unwrap(), i(5));
        assert_eq!(fma(i(3), i(4), i(5)).unwrap(), i(17));
    }

    #[test]
    fn mismatched_operands_are_errors() {
        assert!(binary(BinOp::Add, Value::I32(1), Value::F32(1.0)).is_err());
        assert!(binary(BinOp::Add, Value::Bool(true), Value::Bool(true)).is_err());
        assert!(binary(BinOp::Shl, Value::F32(1.0), Value::F32(1.0)).is_err());
        assert!(unary(UnOp::Exp2, Value::I32(1)).is_err());
        assert!(unary(UnOp::Not, Value::F32(1.0)).is_err());
        assert!(fma(Value::F32(1.0), Value::F32(1.0), Value::I32(1)).is_err());
    }

    #[test]
    fn float_min_max_ignore_nan() {
        let f = Value::F32;
        assert_eq!(binary(BinOp::Max, f(f32::NAN), f(1.0)).unwrap(), f(1.0));
        assert_eq!(binary(BinOp::Min, f(2.0), f(f32::NAN)).unwrap(), f(2.0));
    }

    #[test]
    fn memory_round_trips_every_type() {
        let values = [
            Value::F16(f16::from_f32(-1.5)),
            Value::BF16(bf16::from_f32(3.0)),
            Value::F32(-0.1),
            Value::I32(-5),
            Value::U32(7),
            Value::I64(-1 << 40),
            Value::Bool(true),
        ];
        for v in values {
            let t = v.dtype();
            let mut bytes = vec![0u8; 3 * t.size_bytes() as usize];
            write(&mut bytes, t, 2, v);
            assert_eq!(read(&bytes, t, 2), v);
            assert_eq!(read(&bytes, t, 0), zero(t));
        }
        // Writing converts: f32 into f16 memory rounds.
        let mut bytes = vec![0u8; 2];
        write(&mut bytes, DType::F16, 0, Value::F32(1.0 + 2f32.powi(-11)));
        assert_eq!(read(&bytes, DType::F16, 0), Value::F16(f16::ONE));
    }
}

//! Scalar semantics of the Thread IR's register operations (`Inst::Op` by
//! its PTX opcode, conversions), written from the PTX ISA.

use super::{bf, bh2f, f32b, h2f};

pub(super) fn ty_size(ty: &str) -> usize {
    match ty {
        "u8" | "s8" => 1,
        "b16" | "f16" | "bf16" | "u16" => 2,
        "u64" | "s64" | "b64" => 8,
        _ => 4,
    }
}

fn cmp<T: PartialOrd>(c: &str, a: T, b: T) -> bool {
    match c {
        "lt" => a < b,
        "le" => a <= b,
        "gt" => a > b,
        "ge" => a >= b,
        "eq" => a == b,
        "ne" => a != b,
        _ => panic!("cmp {c}"),
    }
}

/// Evaluates one `Inst::Op` by its PTX opcode.
pub fn eval_op(op: &str, a: &[u64]) -> u64 {
    let parts: Vec<&str> = op.split('.').collect();
    let name = parts[0];
    let ty = *parts.last().unwrap();
    let s32 = |x: u64| x as u32 as i32;
    let u32v = |x: u64| x as u32;
    let w = |x: i64| x as u32 as u64;
    match (name, ty) {
        ("mov", _) => match ty {
            "pred" => (a[0] != 0) as u64,
            "b16" => a[0] & 0xFFFF,
            "b64" | "u64" | "s64" => a[0],
            _ => a[0] & 0xFFFF_FFFF,
        },
        ("cvta", _) => a[0],
        // An L2 policy: opaque to the simulator (TMA loads only check that it is defined).
        ("createpolicy", _) => 0x1_0000_0000,
        ("setp", _) => {
            let c = parts[1];
            (match ty {
                "f32" => {
                    let (x, y) = (f32b(a[0]), f32b(a[1]));
                    match c {
                        "neu" => x != y || x.is_nan() || y.is_nan(),
                        _ => cmp(c, x, y),
                    }
                }
                "s32" => cmp(c, s32(a[0]), s32(a[1])),
                "u32" => cmp(c, u32v(a[0]), u32v(a[1])),
                "s64" => cmp(c, a[0] as i64, a[1] as i64),
                "u64" => cmp(c, a[0], a[1]),
                _ => panic!("setp {op}"),
            }) as u64
        }
        ("selp", _) => {
            if a[2] != 0 {
                a[0]
            } else {
                a[1]
            }
        }
        (_, "pred") => match name {
            "and" => a[0] & a[1] & 1,
            "or" => (a[0] | a[1]) & 1,
            "xor" => (a[0] ^ a[1]) & 1,
            "not" => (a[0] & 1) ^ 1,
            _ => panic!("{op}"),
        },
        // `cvt.rn.{f16,bf16}x2.f32 d, a, b`: `a` rounded into the upper half, `b` into the lower.
        ("cvt", _) if parts.len() >= 2 && parts[parts.len() - 2].ends_with("x2") => {
            let half = |x: u64| {
                let v = f32b(x);
                if parts[parts.len() - 2] == "bf16x2" {
                    half::bf16::from_f32(v).to_bits() as u64
                } else {
                    half::f16::from_f32(v).to_bits() as u64
                }
            };
            (half(a[0]) << 16) | half(a[1])
        }
        ("cvt", _) => cvt(&parts, a[0]),
        ("mul" | "mad", "s32") if parts.contains(&"wide") => {
            let p = (s32(a[0]) as i64).wrapping_mul(s32(a[1]) as i64);
            (if name == "mad" { p.wrapping_add(a[2] as i64) } else { p }) as u64
        }
        (_, "f32") => {
            let x = f32b(a[0]);
            let y = a.get(1).map(|v| f32b(*v)).unwrap_or(0.0);
            bf(match name {
                "add" => x + y,
                "sub" => x - y,
                "mul" => x * y,
                "div" => x / y,
                "min" => x.min(y),
                "max" => x.max(y),
                "neg" => -x,
                "abs" => x.abs(),
                "fma" => x.mul_add(y, f32b(a[2])),
                "sqrt" => x.sqrt(),
                "ex2" => x.exp2(),
                "lg2" => x.log2(),
                "rsqrt" => 1.0 / x.sqrt(),
                _ => panic!("{op}"),
            })
        }
        (_, "s32" | "u32" | "b32") => {
            let (x, y) = (a[0], a.get(1).copied().unwrap_or(0));
            let signed = ty == "s32";
            match name {
                "add" => w(s32(x).wrapping_add(s32(y)) as i64),
                "sub" => w(s32(x).wrapping_sub(s32(y)) as i64),
                "mul" if parts[1] == "hi" && signed => w((i64::from(s32(x)) * i64::from(s32(y))) >> 32),
                "mul" if parts[1] == "hi" => (u64::from(u32v(x)) * u64::from(u32v(y))) >> 32,
                "mul" => w(s32(x).wrapping_mul(s32(y)) as i64),
                "mad" => w(s32(x).wrapping_mul(s32(y)).wrapping_add(s32(a[2])) as i64),
                "div" if signed => w(s32(x).wrapping_div(s32(y)) as i64),
                "div" => (u32v(x) / u32v(y)) as u64,
                "rem" if signed => w(s32(x).wrapping_rem(s32(y)) as i64),
                "rem" => (u32v(x) % u32v(y)) as u64,
                "min" if signed => w(s32(x).min(s32(y)) as i64),
                "min" => u32v(x).min(u32v(y)) as u64,
                "max" if signed => w(s32(x).max(s32(y)) as i64),
                "max" => u32v(x).max(u32v(y)) as u64,
                "neg" => w(s32(x).wrapping_neg() as i64),
                "abs" => w(s32(x).wrapping_abs() as i64),
                "and" => (x & y) & 0xFFFF_FFFF,
                "or" => (x | y) & 0xFFFF_FFFF,
                "xor" => (x ^ y) & 0xFFFF_FFFF,
                "not" => !x & 0xFFFF_FFFF,
                "shl" => {
                    let s = u32v(y);
                    if s >= 32 {
                        0
                    } else {
                        (u32v(x) << s) as u64
                    }
                }
                "shr" if signed => w((s32(x) >> u32v(y).min(31)) as i64),
                "shr" => {
                    let s = u32v(y);
                    if s >= 32 {
                        0
                    } else {
                        (u32v(x) >> s) as u64
                    }
                }
                _ => panic!("{op}"),
            }
        }
        (_, "s64" | "u64" | "b64") => {
            let (x, y) = (a[0] as i64, a.get(1).copied().unwrap_or(0) as i64);
            (match name {
                "add" => x.wrapping_add(y),
                "sub" => x.wrapping_sub(y),
                "mul" => x.wrapping_mul(y),
                "mad" => x.wrapping_mul(y).wrapping_add(a[2] as i64),
                "div" => x.wrapping_div(y),
                "rem" => x.wrapping_rem(y),
                "min" => x.min(y),
                "max" => x.max(y),
                "neg" => x.wrapping_neg(),
                "abs" => x.wrapping_abs(),
                "and" => x & y,
                "or" => x | y,
                "xor" => x ^ y,
                "not" => !x,
                "shl" => x.wrapping_shl(y as u32),
                "shr" => x.wrapping_shr(y as u32),
                _ => panic!("{op}"),
            }) as u64
        }
        _ => panic!("unsupported op {op}"),
    }
}

fn cvt(parts: &[&str], x: u64) -> u64 {
    // cvt[.rnd][.sat].dst.src
    let n = parts.len();
    let (dst, src) = (parts[n - 2], parts[n - 1]);
    let fsrc = match src {
        "f32" => Some(f32b(x)),
        "f16" => Some(h2f(x)),
        "bf16" => Some(bh2f(x)),
        _ => None,
    };
    let isrc: Option<i64> = match src {
        "s32" => Some(x as u32 as i32 as i64),
        "u32" => Some(x as u32 as i64),
        "s64" | "u64" => Some(x as i64),
        "u16" => Some((x & 0xFFFF) as i64),
        _ => None,
    };
    match dst {
        "f16" => half::f16::from_f32(fsrc.expect("f16 from float")).to_bits() as u64,
        "bf16" => half::bf16::from_f32(fsrc.expect("bf16 from float")).to_bits() as u64,
        "f32" => match (fsrc, isrc) {
            (Some(f), _) => {
                if parts.contains(&"rzi") {
                    bf(f.trunc())
                } else {
                    bf(f)
                }
            }
            (_, Some(i)) => bf(i as f32),
            _ => panic!("cvt"),
        },
        "s32" => match (fsrc, isrc) {
            (Some(f), _) => (f as i32) as u32 as u64,
            (_, Some(i)) => i as i32 as u32 as u64,
            _ => panic!(),
        },
        "u32" => match (fsrc, isrc) {
            (Some(f), _) => (f as u32) as u64,
            (_, Some(i)) => i as u32 as u64,
            _ => panic!(),
        },
        "s64" => match (fsrc, isrc) {
            (Some(f), _) => (f as i64) as u64,
            (_, Some(i)) => i as u64,
            _ => panic!(),
        },
        "u64" => isrc.expect("u64 from int") as u64,
        _ => panic!("cvt to {dst}"),
    }
}

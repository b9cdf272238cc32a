//! Expressions: constants, conversions between element types, unary and
//! binary operators, fma, loads inside expressions.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn convert(&mut self, v: Val, to: DType) -> R<Val> {
        use DType::*;
        let from = v.ty;
        if from == to {
            return Ok(v);
        }
        // Fold constants.
        match (&v.op, to) {
            (Operand::Imm(x), I32) => return Ok(Val { op: Operand::Imm(*x as i32 as i64), ty: to }),
            (Operand::Imm(x), U32) => return Ok(Val { op: Operand::Imm(*x as u32 as i64), ty: to }),
            (Operand::Imm(x), I64) if from != U32 => return Ok(Val { op: Operand::Imm(*x), ty: to }),
            (Operand::Imm(x), F32) if from.is_int() => return Ok(Val { op: Operand::F32(*x as f32), ty: to }),
            (Operand::F32(x), F16) => return Ok(Val { op: Operand::B16(half::f16::from_f32(*x).to_bits()), ty: to }),
            (Operand::F32(x), BF16) => return Ok(Val { op: Operand::B16(half::bf16::from_f32(*x).to_bits()), ty: to }),
            _ => {}
        }
        let via_f32 = (matches!(from, F16 | BF16) && to != F32) || (matches!(to, F16 | BF16) && from != F32);
        if via_f32 {
            let mid = self.convert(v, F32)?;
            return self.convert(mid, to);
        }
        let src = self.materialize(&v);
        let c = class_of(to);
        let r = match (from, to) {
            (F32, F16) => self.op("cvt.rn.f16.f32", c, vec![src.into()]),
            (F32, BF16) => self.op("cvt.rn.bf16.f32", c, vec![src.into()]),
            (F16, F32) => self.op("cvt.f32.f16", c, vec![src.into()]),
            (BF16, F32) => {
                if self.target.has(Feature::Bf16Native) {
                    self.op("cvt.f32.bf16", c, vec![src.into()])
                } else {
                    // bf16 is the high half of an f32.
                    let w = self.op("cvt.u32.u16", RegClass::B32, vec![src.into()]);
                    let s = self.op("shl.b32", RegClass::B32, vec![w.into(), Operand::Imm(16)]);
                    self.op("mov.b32", c, vec![s.into()])
                }
            }
            (F32, I32) => self.op("cvt.rzi.s32.f32", c, vec![src.into()]),
            (F32, U32) => self.op("cvt.rzi.u32.f32", c, vec![src.into()]),
            (F32, I64) => self.op("cvt.rzi.s64.f32", c, vec![src.into()]),
            (I32, F32) => self.op("cvt.rn.f32.s32", c, vec![src.into()]),
            (U32, F32) => self.op("cvt.rn.f32.u32", c, vec![src.into()]),
            (I64, F32) => self.op("cvt.rn.f32.s64", c, vec![src.into()]),
            (I32, U32) | (U32, I32) => src,
            (I32, I64) => self.op("cvt.s64.s32", c, vec![src.into()]),
            (U32, I64) => self.op("cvt.u64.u32", c, vec![src.into()]),
            (I64, I32) | (I64, U32) => self.op("cvt.u32.u64", c, vec![src.into()]),
            (Bool, F32) => self.op("selp.f32", c, vec![Operand::F32(1.0), Operand::F32(0.0), src.into()]),
            (Bool, I32) | (Bool, U32) => self.op("selp.b32", c, vec![Operand::Imm(1), Operand::Imm(0), src.into()]),
            (Bool, I64) => self.op("selp.b64", c, vec![Operand::Imm(1), Operand::Imm(0), src.into()]),
            (I32 | U32 | I64, Bool) => {
                let t = int_ty(from).unwrap_or("s32");
                self.op(format!("setp.ne.{t}"), c, vec![src.into(), Operand::Imm(0)])
            }
            (F32, Bool) => self.op("setp.neu.f32", c, vec![src.into(), Operand::F32(0.0)]),
            _ => return Err(self.err(format!("cannot convert {from} to {to}"))),
        };
        Ok(Val { op: r.into(), ty: to })
    }

    pub(crate) fn expr(&mut self, e: &Expr) -> R<Val> {
        match e {
            Expr::Const(c) => Ok(self.constant(*c)),
            Expr::Var(v) => {
                let r = self.vars.get(v).ok_or_else(|| {
                    self.err(format!("variable `{}` is used before it is bound", self.k.var(*v).name))
                })?;
                Ok(Val { op: Operand::Reg(*r), ty: self.k.var(*v).dtype })
            }
            Expr::Load { buf, index } => self.load(*buf, index),
            Expr::Unary { op, arg } => {
                let a = self.expr(arg)?;
                self.unary(*op, a)
            }
            Expr::Binary { op, lhs, rhs } => {
                let a = self.expr(lhs)?;
                if let Some(q) = self.divide_by_param(*op, &a, rhs) {
                    return Ok(q);
                }
                let b = self.expr(rhs)?;
                self.binary(*op, a, b)
            }
            Expr::Fma { a, b, c } => {
                let (a, b, c) = (self.expr(a)?, self.expr(b)?, self.expr(c)?);
                let t = a.ty;
                if matches!(t, DType::F16 | DType::BF16) {
                    let a = self.convert(a, DType::F32)?;
                    let b = self.convert(b, DType::F32)?;
                    let c = self.convert(c, DType::F32)?;
                    let r = self.fma(a, b, c)?;
                    return self.convert(r, t);
                }
                self.fma(a, b, c)
            }
            Expr::Cast { to, arg } => {
                let a = self.expr(arg)?;
                self.convert(a, *to)
            }
            Expr::Select { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let c = self.materialize(&c);
                let a = self.expr(then)?;
                let b = self.expr(otherwise)?;
                let t = a.ty;
                if t == DType::Bool {
                    let (a, b) = (self.materialize(&a), self.materialize(&b));
                    let x = self.op("and.pred", RegClass::Pred, vec![c.into(), a.into()]);
                    let nc = self.op("not.pred", RegClass::Pred, vec![c.into()]);
                    let y = self.op("and.pred", RegClass::Pred, vec![nc.into(), b.into()]);
                    let r = self.op("or.pred", RegClass::Pred, vec![x.into(), y.into()]);
                    return Ok(Val { op: r.into(), ty: t });
                }
                let r = self.op(format!("selp.{}", mov_ty(t)), class_of(t), vec![a.op, b.op, c.into()]);
                Ok(Val { op: r.into(), ty: t })
            }
        }
    }

    pub(crate) fn constant(&mut self, c: Value) -> Val {
        let (op, ty) = match c {
            Value::I32(v) => (Operand::Imm(v as i64), DType::I32),
            Value::U32(v) => (Operand::Imm(v as i64), DType::U32),
            Value::I64(v) => (Operand::Imm(v), DType::I64),
            Value::F32(v) => (Operand::F32(v), DType::F32),
            Value::F16(v) => (Operand::B16(v.to_bits()), DType::F16),
            Value::BF16(v) => (Operand::B16(v.to_bits()), DType::BF16),
            Value::Bool(b) => (Operand::Reg(self.const_pred(b)), DType::Bool),
        };
        Val { op, ty }
    }

    pub(crate) fn fma(&mut self, a: Val, b: Val, c: Val) -> R<Val> {
        let t = a.ty;
        let ra = self.materialize(&a);
        let op = match t {
            DType::F32 => "fma.rn.f32".to_string(),
            DType::I32 | DType::U32 | DType::I64 => format!("mad.lo.{}", int_ty(t).unwrap_or("s32")),
            _ => return Err(self.err(format!("fma is not defined on {t}"))),
        };
        let r = self.op(op, class_of(t), vec![ra.into(), b.op, c.op]);
        Ok(Val { op: r.into(), ty: t })
    }

    pub(crate) fn unary(&mut self, op: UnOp, a: Val) -> R<Val> {
        let t = a.ty;
        let is_math = !matches!(op, UnOp::Not);
        if matches!(t, DType::F16 | DType::BF16) && is_math {
            let x = self.convert(a, DType::F32)?;
            let y = self.unary(op, x)?;
            return self.convert(y, t);
        }
        let x = self.materialize(&a);
        let c = class_of(t);
        let f32_only = |s: &Self| s.err(format!("`{op:?}` needs a float operand, found {t}"));
        let r = match (op, t) {
            (UnOp::Neg, DType::F32) => self.op("neg.f32", c, vec![x.into()]),
            (UnOp::Neg, DType::I32 | DType::U32) => self.op("neg.s32", c, vec![x.into()]),
            (UnOp::Neg, DType::I64) => self.op("neg.s64", c, vec![x.into()]),
            (UnOp::Not, DType::Bool) => self.op("not.pred", c, vec![x.into()]),
            (UnOp::Not, DType::I32 | DType::U32) => self.op("not.b32", c, vec![x.into()]),
            (UnOp::Not, DType::I64) => self.op("not.b64", c, vec![x.into()]),
            (UnOp::Abs, DType::F32) => self.op("abs.f32", c, vec![x.into()]),
            (UnOp::Abs, DType::I32) => self.op("abs.s32", c, vec![x.into()]),
            (UnOp::Abs, DType::I64) => self.op("abs.s64", c, vec![x.into()]),
            (UnOp::Abs, DType::U32) => x,
            (UnOp::Exp2, DType::F32) => self.op("ex2.approx.ftz.f32", c, vec![x.into()]),
            (UnOp::Exp, DType::F32) => {
                let y = self.op("mul.f32", c, vec![x.into(), Operand::F32(std::f32::consts::LOG2_E)]);
                self.op("ex2.approx.ftz.f32", c, vec![y.into()])
            }
            (UnOp::Log2, DType::F32) => self.op("lg2.approx.ftz.f32", c, vec![x.into()]),
            (UnOp::Log, DType::F32) => {
                let y = self.op("lg2.approx.ftz.f32", c, vec![x.into()]);
                self.op("mul.f32", c, vec![y.into(), Operand::F32(std::f32::consts::LN_2)])
            }
            (UnOp::Sqrt, DType::F32) => self.op("sqrt.rn.f32", c, vec![x.into()]),
            (UnOp::Rsqrt, DType::F32) => self.op("rsqrt.approx.ftz.f32", c, vec![x.into()]),
            _ => return Err(f32_only(self)),
        };
        Ok(Val { op: r.into(), ty: t })
    }

    pub(crate) fn binary(&mut self, op: BinOp, a: Val, b: Val) -> R<Val> {
        let t = a.ty;
        // Constant-fold 32-bit integer arithmetic (addresses, bounds).
        if let (Operand::Imm(x), Operand::Imm(y), DType::I32) = (&a.op, &b.op, t) {
            let (x, y) = (*x as i32, *y as i32);
            let v = match op {
                BinOp::Add => Some(x.wrapping_add(y)),
                BinOp::Sub => Some(x.wrapping_sub(y)),
                BinOp::Mul => Some(x.wrapping_mul(y)),
                BinOp::Div if y != 0 => Some(x.wrapping_div(y)),
                BinOp::Rem if y != 0 => Some(x.wrapping_rem(y)),
                BinOp::Min => Some(x.min(y)),
                BinOp::Max => Some(x.max(y)),
                _ => None,
            };
            if let Some(v) = v {
                return Ok(Val { op: Operand::Imm(v as i64), ty: t });
            }
        }
        if matches!(t, DType::F16 | DType::BF16) {
            let x = self.convert(a, DType::F32)?;
            let y = self.convert(b, DType::F32)?;
            let r = self.binary(op, x, y)?;
            return if op.is_comparison() { Ok(r) } else { self.convert(r, t) };
        }
        if let Operand::Imm(c) = b.op {
            if let Some(q) = self.divide_by_constant(op, &a, c) {
                return Ok(q);
            }
        }
        let x = self.materialize(&a);
        let y = b.op.clone();
        if t == DType::Bool {
            let y = self.materialize(&b);
            let r = match op {
                BinOp::And => self.op("and.pred", RegClass::Pred, vec![x.into(), y.into()]),
                BinOp::Or => self.op("or.pred", RegClass::Pred, vec![x.into(), y.into()]),
                BinOp::Xor | BinOp::Ne => self.op("xor.pred", RegClass::Pred, vec![x.into(), y.into()]),
                BinOp::Eq => {
                    let z = self.op("xor.pred", RegClass::Pred, vec![x.into(), y.into()]);
                    self.op("not.pred", RegClass::Pred, vec![z.into()])
                }
                _ => return Err(self.err(format!("`{op:?}` is not defined on bool"))),
            };
            return Ok(Val { op: r.into(), ty: t });
        }
        if op.is_comparison() {
            let (cmp, ty) = if t == DType::F32 {
                let cmp = match op {
                    BinOp::Lt => "lt",
                    BinOp::Le => "le",
                    BinOp::Gt => "gt",
                    BinOp::Ge => "ge",
                    BinOp::Eq => "eq",
                    _ => "neu",
                };
                (cmp, "f32")
            } else {
                let cmp = match op {
                    BinOp::Lt => "lt",
                    BinOp::Le => "le",
                    BinOp::Gt => "gt",
                    BinOp::Ge => "ge",
                    BinOp::Eq => "eq",
                    _ => "ne",
                };
                (cmp, int_ty(t).unwrap_or("s32"))
            };
            let r = self.op(format!("setp.{cmp}.{ty}"), RegClass::Pred, vec![x.into(), y]);
            return Ok(Val { op: r.into(), ty: DType::Bool });
        }
        let c = class_of(t);
        let r = if t == DType::F32 {
            match op {
                BinOp::Add => self.op("add.f32", c, vec![x.into(), y]),
                BinOp::Sub => self.op("sub.f32", c, vec![x.into(), y]),
                BinOp::Mul => self.op("mul.f32", c, vec![x.into(), y]),
                BinOp::Div => self.op("div.rn.f32", c, vec![x.into(), y]),
                BinOp::Min => self.op("min.f32", c, vec![x.into(), y]),
                BinOp::Max => self.op("max.f32", c, vec![x.into(), y]),
                BinOp::Rem => {
                    // fmod: a - trunc(a / b) · b.
                    let q = self.op("div.rn.f32", c, vec![x.into(), y.clone()]);
                    let qt = self.op("cvt.rzi.f32.f32", c, vec![q.into()]);
                    let nq = self.op("neg.f32", c, vec![qt.into()]);
                    self.op("fma.rn.f32", c, vec![nq.into(), y, x.into()])
                }
                _ => return Err(self.err(format!("`{op:?}` is not defined on f32"))),
            }
        } else {
            let it = int_ty(t).ok_or_else(|| self.err(format!("`{op:?}` is not defined on {t}")))?;
            let bt = bits_ty(t);
            let y = if matches!(op, BinOp::Shl | BinOp::Shr) && t == DType::I64 {
                let yr = self.materialize(&b);
                Operand::Reg(self.op("cvt.u32.u64", RegClass::B32, vec![yr.into()]))
            } else {
                y
            };
            let name = match op {
                BinOp::Add => format!("add.{it}"),
                BinOp::Sub => format!("sub.{it}"),
                BinOp::Mul => format!("mul.lo.{it}"),
                BinOp::Div => format!("div.{it}"),
                BinOp::Rem => format!("rem.{it}"),
                BinOp::Min => format!("min.{it}"),
                BinOp::Max => format!("max.{it}"),
                BinOp::And => format!("and.{bt}"),
                BinOp::Or => format!("or.{bt}"),
                BinOp::Xor => format!("xor.{bt}"),
                BinOp::Shl => format!("shl.{bt}"),
                BinOp::Shr => format!("shr.{it}"),
                _ => return Err(self.err(format!("`{op:?}` is not defined on {t}"))),
            };
            self.op(name, c, vec![x.into(), y])
        };
        Ok(Val { op: r.into(), ty: t })
    }
}

//! Strength reduction of the pipelined global → shared copies.
//!
//! Expects to be called by the pipelined-loop lowering
//! ([`Lx::lower_pipelined`]) before its prologue, with the loop variable
//! bound to the loop's start, for the copies that
//! [`super::super::pipeline::plan`] pipelined.
//!
//! A pipelined copy qualifies when its global origin is affine in the loop
//! variable `k` along exactly one tensor dim `kd` (`origin[kd] = inv + coef·k`
//! with a constant `coef > 0` and provably non-negative; every other
//! coordinate loop-invariant) and it takes the cp.async vector path with no
//! run-time test (static alignment, or a loop versioned on the test). Before
//! the loop, for iteration `start`, it gets:
//! - `base`: the thread's 64-bit global address of its first chunk; the
//!   other chunks are at thread-independent offsets from it (an immediate,
//!   or `extent · constant`: one `mad.wide.s32` per issue, which keeps only
//!   `base` live across the loop);
//! - per chunk, the loop-invariant part of its mask (every dim but `kd`);
//! - `rest = extent[kd] - origin[kd] - thread part of the tile coordinate
//!   along kd`, shared by the copies of the loop with the same extent,
//!   origin expression and thread part.
//!
//! Each issue (prologue and steady-state refill alike, always of the next
//! iteration to issue, which the state describes) then costs per chunk one
//! compare `rest > c` (`c`: the chunk's constant coordinate offset along
//! `kd`) combined with the invariant mask, a select of the byte count, and
//! at most one address computation; after the issue, `base` advances by a
//! uniform 64-bit byte delta and `rest` by one subtract.
//!
//! Guarantees the same data in shared memory as the general path
//! ([`Lx::cp_async_chunk`]) for every issued iteration: with
//! `g = origin[kd] + thread part + c ≥ 0`, `g <u extent` is `rest - c > 0`;
//! on the vector path a chunk is either whole or empty (the innermost extent
//! and the chunk's start are multiples of the chunk), so `src-size` is 16
//! (or 8, 4) or 0. An empty chunk keeps its (possibly out-of-tensor) address:
//! `src-size` 0 copies no bytes from the source (ptxas emits a predicated-off,
//! zero-filling LDGSTS), unlike the general path, which selects the tensor's
//! base for it. Copies that do not qualify keep the general path.

use crate::ir::{
    BinOp, BufferId, DType, Expr, Extent, Scope, Stmt as TStmt, StmtKind, TileRef, UnOp, Value, VarId, VarKind,
};
use crate::layout::{FragLayout, RootLayout};
use crate::passes::layout_infer::const_int;
use crate::passes::lower::{Lx, Side, Val, R};
use crate::passes::pipeline::PipelinedLoop;
use crate::thread_ir::{Address, Inst, Operand, Reg, RegClass};
use std::cell::RefCell;
use std::collections::HashMap;

/// The strength-reduced copies of the pipelined loops being lowered, by
/// destination shared buffer.
pub(crate) type ReducedCopies = RefCell<HashMap<BufferId, ReducedCopy>>;

/// The strength-reduced state of one pipelined copy.
#[derive(Clone, Debug)]
pub(crate) struct ReducedCopy {
    /// Elements advanced along `kd` per iteration.
    coef: i64,
    /// `dim[kd] - origin[kd] - thread part of the tile coordinate along kd`
    /// for the next iteration to issue (updated in place; shared by the
    /// copies of a loop that have the same extent, origin and thread part,
    /// e.g. A and B of a gemm reading along K).
    rest: Reg,
    /// Whether this copy advances `rest` (its first user).
    owns_rest: bool,
    /// The calling thread's global byte address of its first chunk for the
    /// next iteration to issue (updated in place); the other chunks are at
    /// thread-independent offsets from it.
    base: Reg,
    /// Bytes the addresses advance per iteration.
    delta: ChunkOffset,
    /// The copy's layout (that of `lower_copy` for a global → shared copy).
    layout: FragLayout,
    /// Elements per chunk and their size in bytes.
    elems: i64,
    size: i64,
    /// Per chunk, in the order [`Lx::copy_groups_any`] visits them.
    chunks: Vec<ReducedChunk>,
}

#[derive(Clone, Debug)]
struct ReducedChunk {
    /// Byte offset of the chunk from the first one (the same for every thread).
    from_base: ChunkOffset,
    /// The loop-invariant part of the mask (`None`: statically true).
    inside: Option<Reg>,
    /// The thread-independent part of the chunk's tile coordinate along `kd`.
    offset: i64,
}

/// What makes two copies' `rest` values equal: the extent along `kd`, the
/// origin expression, the thread part, the per-iteration step; and the register.
type RestKey = ((Operand, Expr, Operand, i64), Reg);

/// A chunk's byte offset from the calling thread's first chunk.
#[derive(Clone, Debug)]
enum ChunkOffset {
    /// A constant (static strides).
    Imm(i64),
    /// `dim · mult + imm` with one dynamic extent `dim` (an `s32`): one
    /// `mad.wide.s32` per issue, so that nothing but the thread's base
    /// address stays live across the loop.
    Wide { dim: Operand, mult: i64, imm: i64 },
    /// Computed before the loop (strides that are products of several
    /// dynamic extents).
    Reg(Reg),
}

/// `origin = inv + coef · var` (mod 2³²): the coefficient, or `None` when a
/// subexpression that mentions `var` is not a sum, difference, negation or
/// product with a constant.
fn linear_coef(e: &Expr, var: VarId) -> Option<i64> {
    if !mentions(e, var) {
        return Some(0);
    }
    match e {
        Expr::Var(v) if *v == var => Some(1),
        Expr::Unary { op: UnOp::Neg, arg } => linear_coef(arg, var)?.checked_neg(),
        Expr::Binary { op: BinOp::Add, lhs, rhs } => linear_coef(lhs, var)?.checked_add(linear_coef(rhs, var)?),
        Expr::Binary { op: BinOp::Sub, lhs, rhs } => linear_coef(lhs, var)?.checked_sub(linear_coef(rhs, var)?),
        Expr::Binary { op: BinOp::Mul, lhs, rhs } => match (const_int(lhs), const_int(rhs)) {
            (Some(c), _) => Some(c.checked_mul(linear_coef(rhs, var)?)?),
            (_, Some(c)) => Some(c.checked_mul(linear_coef(lhs, var)?)?),
            _ => None,
        },
        _ => None,
    }
}

fn mentions(e: &Expr, var: VarId) -> bool {
    match e {
        Expr::Const(_) => false,
        Expr::Var(v) => *v == var,
        Expr::Load { index, .. } => index.iter().any(|x| mentions(x, var)),
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => mentions(arg, var),
        Expr::Binary { lhs, rhs, .. } => mentions(lhs, var) || mentions(rhs, var),
        Expr::Fma { a, b, c } => [a, b, c].iter().any(|x| mentions(x, var)),
        Expr::Select { cond, then, otherwise } => [cond, then, otherwise].iter().any(|x| mentions(x, var)),
    }
}

impl Lx<'_> {
    /// Whether `e` is provably ≥ 0 (as an `i32`), with the loop variable
    /// `var` known ≥ 0 when `var_nonneg`.
    fn provably_nonneg(&self, e: &Expr, var: VarId, var_nonneg: bool) -> bool {
        match e {
            Expr::Const(Value::I32(c)) => *c >= 0,
            Expr::Const(Value::U32(c)) => *c <= i32::MAX as u32,
            Expr::Const(Value::I64(c)) => (0..=i32::MAX as i64).contains(c),
            Expr::Var(v) if *v == var => var_nonneg,
            Expr::Var(v) => matches!(self.k.var(*v).kind, VarKind::Dim | VarKind::BlockIdx(_)),
            Expr::Binary { op: BinOp::Add | BinOp::Mul | BinOp::Div | BinOp::Rem | BinOp::Min, lhs, rhs } => {
                self.provably_nonneg(lhs, var, var_nonneg) && self.provably_nonneg(rhs, var, var_nonneg)
            }
            Expr::Binary { op: BinOp::Max, lhs, rhs } => {
                self.provably_nonneg(lhs, var, var_nonneg) || self.provably_nonneg(rhs, var, var_nonneg)
            }
            _ => false,
        }
    }

    /// Prepares the strength-reduced state of the pipelined copies of the
    /// loop `var in start..` (bound to `start` in `self.vars` by the caller)
    /// that qualify (see the module doc). Emits the loop-invariant code at
    /// the current position (before the prologue).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prepare_reduced_copies(
        &mut self,
        reduced: &ReducedCopies,
        issued_elsewhere: &dyn Fn(BufferId) -> bool,
        var: VarId,
        start: &Expr,
        body: &[TStmt],
        pl: &PipelinedLoop,
        batches: &[usize],
    ) -> R<()> {
        let start_nonneg = self.provably_nonneg(start, var, false);
        // `rest` is shared only by copies of one wait batch: they are issued
        // (and advanced) together.
        let mut rests: HashMap<usize, Vec<RestKey>> = HashMap::new();
        for (j, &i) in pl.copies.iter().enumerate() {
            let StmtKind::Copy { src, dst, fill, .. } = &body[i].kind else { continue };
            if issued_elsewhere(dst.buf) {
                continue;
            }
            let rests = rests.entry(batches.get(j).copied().unwrap_or(0)).or_default();
            if let Some(rc) = self.reduced_copy(var, start_nonneg, src, dst, fill.as_ref(), rests)? {
                reduced.borrow_mut().insert(dst.buf, rc);
            }
        }
        Ok(())
    }

    /// Forgets the strength-reduced state of the loop's copies (after the loop).
    pub(super) fn drop_reduced_copies(&mut self, reduced: &ReducedCopies, body: &[TStmt], pl: &PipelinedLoop) {
        for &i in &pl.copies {
            if let StmtKind::Copy { dst, .. } = &body[i].kind {
                reduced.borrow_mut().remove(&dst.buf);
            }
        }
    }

    fn reduced_copy(
        &mut self,
        var: VarId,
        start_nonneg: bool,
        src: &TileRef,
        dst: &TileRef,
        fill: Option<&Expr>,
        rests: &mut Vec<RestKey>,
    ) -> R<Option<ReducedCopy>> {
        let (sb, db) = (self.k.buffer(src.buf), self.k.buffer(dst.buf));
        let (sdt, ddt) = (sb.dtype, db.dtype);
        let Some(shape) = db.const_shape() else { return Ok(None) };
        let rank = sb.rank();
        if sb.scope != Scope::Global || db.scope != Scope::Shared || src.origin.len() != rank {
            return Ok(None);
        }
        // Windows of the tensor's trailing dims only (squeezed dims, if any,
        // lead); the general path takes the others.
        if shape.is_empty() || !src.squeezes_leading_only() || shape.len() + src.squeezed.len() != rank {
            return Ok(None);
        }
        let probe = (Side::Global { buf: src.buf, origin: Vec::new(), dims: Vec::new() }, Side::Shared(dst.buf));
        if !self.async_copy_ok(&probe.0, &probe.1, sdt, ddt, fill) {
            return Ok(None);
        }
        // The layout and vector decision of `lower_copy` / `copy_dispatch`.
        let size = sdt.size_bytes() as i64;
        let lay = FragLayout::full(RootLayout::blocked(&shape, self.k.threads, (16 / size).max(1)));
        let v = lay.vec_width();
        let Some(origin_last) = src.origin.last() else { return Ok(None) };
        let vector = v > 1
            && self.known_multiple(origin_last) % v == 0
            && match sb.shape.last() {
                Some(Extent::Const(c)) => c % v == 0,
                // Only when the 16-byte path needs no run-time test (see
                // `Lx::lower_pipelined`, which versions loops on it).
                Some(Extent::Dyn(dv)) => self.var_mult.get(dv).copied().unwrap_or(1) % v == 0,
                None => false,
            };
        if !vector || !matches!(v * size, 4 | 8 | 16) {
            return Ok(None);
        }
        // Exactly one coordinate advances with `var`, forward, from ≥ 0.
        let mut kd = None;
        let mut coef = 0;
        for (d, e) in src.origin.iter().enumerate() {
            match linear_coef(e, var) {
                None => return Ok(None),
                Some(0) => {}
                Some(c) => {
                    if kd.is_some() || c <= 0 || c > i32::MAX as i64 || !self.provably_nonneg(e, var, start_nonneg) {
                        return Ok(None);
                    }
                    kd = Some(d);
                    coef = c;
                }
            }
        }
        let Some(kd) = kd else { return Ok(None) };
        let lead = rank - shape.len();
        let spanned: Vec<usize> = (lead..rank).collect();
        let info = self.tensors.get(&src.buf).ok_or_else(|| self.err("internal: tensor parameter not bound"))?;
        let (dims, dims64) = (info.dims.clone(), info.dims64.clone());
        // Origin at the loop's start (the caller bound `var` to it).
        let origin = self.index_ops(&src.origin)?;
        // Bytes per iteration: coef · size · Π dims[kd+1..]. (Byte
        // arithmetic wraps like the 64-bit address arithmetic.)
        let mut mult = coef.wrapping_mul(size);
        let mut dyn_dims = Vec::new();
        for (e, dim) in dims.iter().enumerate().skip(kd + 1) {
            match dim {
                Operand::Imm(x) => mult = mult.wrapping_mul(*x),
                _ => dyn_dims.push(e),
            }
        }
        let delta = match dyn_dims.as_slice() {
            [] => ChunkOffset::Imm(mult),
            [e] if i32::try_from(mult).is_ok() => ChunkOffset::Wide { dim: dims[*e].clone(), mult, imm: 0 },
            dd => {
                let mut t = Operand::Imm(mult);
                for &e in dd {
                    t = Operand::Reg(self.op("mul.lo.s64", RegClass::B64, vec![t, dims64[e].clone()]));
                }
                let r = self.materialize(&Val { op: t, ty: DType::I64 });
                ChunkOffset::Reg(r)
            }
        };
        let thread_part = if kd >= lead { self.tbase(&lay.root, lay.kept[kd - lead]) } else { Operand::Imm(0) };
        let key = (dims[kd].clone(), src.origin[kd].clone(), thread_part.clone(), coef);
        let (rest, owns_rest) = match rests.iter().find(|r| r.0 == key) {
            Some(r) => (r.1, false),
            None => {
                let rem = self.op("sub.s32", RegClass::B32, vec![dims[kd].clone(), origin[kd].clone()]);
                let rest = self.new_reg(RegClass::B32);
                self.op_into("sub.s32", rest, vec![rem.into(), thread_part.clone()]);
                rests.push((key, rest));
                (rest, true)
            }
        };
        let n = rank;
        let mut chunks = Vec::new();
        let l0 = lay.unflatten(0);
        let mut base = None;
        for r0 in (0..lay.num_regs()).step_by(v as usize) {
            let l = lay.unflatten(r0);
            let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(&lay, a, l[a])).collect();
            let g = self.global_coords(&origin, &spanned, &coords);
            let mut inside = None;
            for d in 0..n {
                if d == kd {
                    continue;
                }
                let q = match (&g[d], &dims[d]) {
                    (Operand::Imm(x), Operand::Imm(y)) if (*x as u32) < (*y as u32) => continue,
                    (Operand::Imm(_), Operand::Imm(_)) => self.const_pred(false),
                    (c, dim) => {
                        let r = self.materialize(&Val { op: c.clone(), ty: DType::I32 });
                        self.op("setp.lt.u32", RegClass::Pred, vec![r.into(), dim.clone()])
                    }
                };
                inside = self.and_pred(inside, Some(q));
            }
            if base.is_none() {
                let first = self.global_addr(src.buf, &g)?;
                let b = self.new_reg(RegClass::B64);
                self.op_into("mov.b64", b, vec![first.into()]);
                base = Some(b);
            }
            // Σ (register offset − first chunk's) · stride, in bytes; the
            // stride of tile dim `a` is `size · Π dims[lead+a+1..]`.
            let mut imm = 0i64;
            let mut dyn_terms: Vec<(i64, Vec<usize>)> = Vec::new();
            for a in 0..lay.rank() {
                let d = lay.kept[a];
                let step = lay.root.reg_offset(d, l[a]) - lay.root.reg_offset(d, l0[a]);
                if step == 0 {
                    continue;
                }
                let mut mult = step.wrapping_mul(size);
                let mut dyn_dims = Vec::new();
                for (e, dim) in dims.iter().enumerate().skip(lead + a + 1) {
                    match dim {
                        Operand::Imm(x) => mult = mult.wrapping_mul(*x),
                        _ => dyn_dims.push(e),
                    }
                }
                if dyn_dims.is_empty() {
                    imm = imm.wrapping_add(mult);
                } else {
                    dyn_terms.push((mult, dyn_dims));
                }
            }
            let from_base = match dyn_terms.as_slice() {
                [] => ChunkOffset::Imm(imm),
                [(mult, dd)] if dd.len() == 1 && i32::try_from(*mult).is_ok() => {
                    ChunkOffset::Wide { dim: dims[dd[0]].clone(), mult: *mult, imm }
                }
                terms => {
                    let mut acc = self.op("mov.b64", RegClass::B64, vec![Operand::Imm(imm)]);
                    for (mult, dd) in terms {
                        let mut t = Operand::Imm(*mult);
                        for &e in dd {
                            t = Operand::Reg(self.op("mul.lo.s64", RegClass::B64, vec![t, dims64[e].clone()]));
                        }
                        acc = self.op("add.s64", RegClass::B64, vec![acc.into(), t]);
                    }
                    ChunkOffset::Reg(acc)
                }
            };
            let offset = if kd >= lead { lay.root.reg_offset(lay.kept[kd - lead], l[kd - lead]) } else { 0 };
            chunks.push(ReducedChunk { from_base, inside, offset });
        }
        let Some(base) = base else { return Ok(None) };
        Ok(Some(ReducedCopy { coef, rest, owns_rest, base, delta, layout: lay, elems: v, size, chunks }))
    }

    /// Issues the cp.asyncs of a strength-reduced copy for the next
    /// iteration (the state's), into the stage selected for `db`.
    pub(super) fn issue_reduced(&mut self, rc: &ReducedCopy, db: BufferId) -> R<()> {
        let lay = &rc.layout;
        let region = self.region_of(db);
        let v = lay.vec_width() as usize;
        // The chunk with constant coordinate offset `o` along `kd` has
        // `rest - o` elements left along `kd`.
        let rest = rc.rest;
        // "Some of the chunk is left along kd", by constant offset.
        let mut some_left: Vec<(i64, Reg)> = Vec::new();
        for (j, r0) in (0..lay.num_regs()).step_by(v).enumerate() {
            let ch = rc.chunks.get(j).ok_or_else(|| self.err("internal: reduced copy chunk count"))?.clone();
            let l = lay.unflatten(r0);
            let coords: Vec<Operand> = (0..lay.rank()).map(|a| self.coord(lay, a, l[a])).collect();
            let valid = self.valid_pred(lay, &l);
            let dst = self.shared_addr(db, &coords)?;
            let some = match some_left.iter().find(|(o, _)| *o == ch.offset) {
                Some((_, p)) => *p,
                None => {
                    let p = self.op("setp.gt.s32", RegClass::Pred, vec![rest.into(), Operand::Imm(ch.offset)]);
                    some_left.push((ch.offset, p));
                    p
                }
            };
            let p = self.and_pred(Some(some), ch.inside).unwrap_or(some);
            // On the vector path the innermost extent and the chunk's start
            // are multiples of the chunk: a chunk is either whole or empty.
            let full = rc.elems * rc.size;
            let bytes = self.op("selp.b32", RegClass::B32, vec![Operand::Imm(full), Operand::Imm(0), p.into()]);
            let addr = match &ch.from_base {
                ChunkOffset::Imm(0) => rc.base,
                ChunkOffset::Imm(x) => self.op("add.s64", RegClass::B64, vec![rc.base.into(), Operand::Imm(*x)]),
                ChunkOffset::Reg(r) => self.op("add.s64", RegClass::B64, vec![rc.base.into(), (*r).into()]),
                ChunkOffset::Wide { dim, mult, imm } => {
                    let t =
                        self.op("mad.wide.s32", RegClass::B64, vec![dim.clone(), Operand::Imm(*mult), rc.base.into()]);
                    match imm {
                        0 => t,
                        x => self.op("add.s64", RegClass::B64, vec![t.into(), Operand::Imm(*x)]),
                    }
                }
            };
            // An empty chunk (src-size 0) copies no bytes from its source
            // (ptxas makes it a predicated-off, zero-filling LDGSTS), so its
            // address, possibly past the tensor, is never dereferenced.
            let src = addr;
            let inst = Inst::CpAsync {
                bytes: (rc.elems * rc.size) as u32,
                dst,
                src: Address { base: src.into(), offset: 0 },
                src_bytes: bytes.into(),
                region,
            };
            self.emit_guarded(inst, valid.map(|p| (p, false)));
        }
        Ok(())
    }

    /// Moves the state of the strength-reduced copies of the loop to the
    /// next iteration (after an issue).
    pub(super) fn advance_reduced_copies(&mut self, reduced: &ReducedCopies, body: &[TStmt], pl: &PipelinedLoop) {
        for &i in &pl.copies {
            let StmtKind::Copy { dst, .. } = &body[i].kind else { continue };
            let Some(rc) = reduced.borrow().get(&dst.buf).cloned() else { continue };
            match &rc.delta {
                ChunkOffset::Imm(x) => self.op_into("add.s64", rc.base, vec![rc.base.into(), Operand::Imm(*x)]),
                ChunkOffset::Reg(r) => self.op_into("add.s64", rc.base, vec![rc.base.into(), (*r).into()]),
                ChunkOffset::Wide { dim, mult, .. } => {
                    self.op_into("mad.wide.s32", rc.base, vec![dim.clone(), Operand::Imm(*mult), rc.base.into()])
                }
            }
            if rc.owns_rest {
                self.op_into("sub.s32", rc.rest, vec![rc.rest.into(), Operand::Imm(rc.coef)]);
            }
        }
    }
}

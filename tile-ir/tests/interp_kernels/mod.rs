//! Kernels built by hand with the `Kernel` builder, and helpers shared by the
//! interpreter, printer and verifier tests.
#![allow(dead_code)]

use tile_ir::interp::{self, Arg, TensorData};
use tile_ir::*;
#[allow(unused_imports)]
pub use tile_testkit::Rng;

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn bytes_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
pub fn bytes_u32(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
pub fn f16_bytes(v: &[half::f16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}
pub fn bytes_f16(b: &[u8]) -> Vec<half::f16> {
    b.chunks_exact(2).map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect()
}

pub fn ro<'a>(data: &'a [u8], shape: &[usize]) -> Arg<'a> {
    Arg::Tensor { data: TensorData::Ro(data), shape: shape.to_vec() }
}
pub fn rw<'a>(data: &'a mut [u8], shape: &[usize]) -> Arg<'a> {
    Arg::Tensor { data: TensorData::Rw(data), shape: shape.to_vec() }
}

/// The whole launch: dims from shapes, grid from dims, then every block.
pub fn launch(k: &Kernel, args: &mut [Arg<'_>]) -> Result<(), interp::InterpError> {
    interp::launch(k, args)
}

pub fn st(kind: StmtKind) -> Stmt {
    Stmt::new(kind)
}
pub fn v(id: VarId) -> Expr {
    Expr::var(id)
}
pub fn add(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Add, a, b)
}
pub fn sub(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Sub, a, b)
}
pub fn mul(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Mul, a, b)
}
pub fn lt(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Lt, a, b)
}
pub fn local(k: &mut Kernel, name: &str, scope: Scope, dtype: DType, shape: &[i64]) -> BufferId {
    k.add_buffer(Buffer {
        name: name.into(),
        scope,
        dtype,
        shape: shape.iter().map(|&c| Extent::Const(c)).collect(),
        mutable: false,
        span: SpanId::NONE,
        layout: None,
        view: None,
    })
}
pub fn tile(buf: BufferId, origin: Vec<Expr>) -> TileRef {
    TileRef::new(buf, origin)
}
pub fn copy(src: TileRef, dst: TileRef) -> Stmt {
    st(StmtKind::Copy { src, dst, fill: None, cache: CacheHint::Normal })
}
pub fn pfor(var: VarId, n: i32, body: Vec<Stmt>) -> Stmt {
    st(StmtKind::For { var, start: Expr::i32(0), end: Expr::i32(n), kind: LoopKind::Parallel, body })
}
pub fn sfor(var: VarId, start: Expr, end: Expr, body: Vec<Stmt>) -> Stmt {
    st(StmtKind::For { var, start, end, kind: LoopKind::Serial, body })
}
pub fn store(buf: BufferId, index: Vec<Expr>, value: Expr) -> Stmt {
    st(StmtKind::Store { buf, index, value })
}

/// `c = a + b` over `N`, one tile of `block` elements per block
/// (fragments, masked tail).
pub fn vector_add(block: i32) -> Kernel {
    let mut k = Kernel::new("vector_add", 128);
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F32, vec![Extent::Dyn(n)], false);
    let b = k.add_tensor_param("b", DType::F32, vec![Extent::Dyn(n)], false);
    let c = k.add_tensor_param("c", DType::F32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let x = local(&mut k, "x", Scope::Fragment, DType::F32, &[block as i64]);
    let y = local(&mut k, "y", Scope::Fragment, DType::F32, &[block as i64]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let base = mul(v(bx), Expr::i32(block));
    k.body = vec![
        copy(tile(a, vec![base.clone()]), tile(x, vec![])),
        copy(tile(b, vec![base.clone()]), tile(y, vec![])),
        pfor(i, block, vec![store(x, vec![v(i)], add(Expr::load(x, vec![v(i)]), Expr::load(y, vec![v(i)])))]),
        copy(tile(x, vec![]), tile(c, vec![base])),
    ];
    k
}

/// Row softmax, `rows` rows of at most `cols` columns per block:
/// f16 in and out, f32 math, masked columns read as -inf.
pub fn softmax(rows: i32, cols: i32) -> Kernel {
    let mut k = Kernel::new("softmax", 128);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let y = k.add_tensor_param("y", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(m), Expr::i32(rows));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let row = local(&mut k, "row", Scope::Fragment, DType::F32, &[rows as i64, cols as i64]);
    let mx = local(&mut k, "mx", Scope::Fragment, DType::F32, &[rows as i64]);
    let sum = local(&mut k, "sum", Scope::Fragment, DType::F32, &[rows as i64]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let j = k.add_var("j", DType::I32, VarKind::Loop);
    let i2 = k.add_var("i2", DType::I32, VarKind::Loop);
    let j2 = k.add_var("j2", DType::I32, VarKind::Loop);
    let origin = vec![mul(v(bx), Expr::i32(rows)), Expr::i32(0)];
    let log2e = Expr::f32(std::f32::consts::LOG2_E);
    let el = |a: VarId, b: VarId| Expr::load(row, vec![v(a), v(b)]);
    k.body = vec![
        st(StmtKind::Copy {
            src: tile(x, origin.clone()),
            dst: tile(row, vec![]),
            fill: Some(Expr::f32(f32::NEG_INFINITY)),
            cache: CacheHint::Normal,
        }),
        st(StmtKind::Reduce { op: ReduceOp::Max, src: row, dst: mx, dim: 1, keep: false }),
        pfor(
            i,
            rows,
            vec![pfor(
                j,
                cols,
                vec![store(
                    row,
                    vec![v(i), v(j)],
                    Expr::unary(UnOp::Exp2, mul(sub(el(i, j), Expr::load(mx, vec![v(i)])), log2e)),
                )],
            )],
        ),
        st(StmtKind::Reduce { op: ReduceOp::Sum, src: row, dst: sum, dim: 1, keep: false }),
        pfor(
            i2,
            rows,
            vec![pfor(
                j2,
                cols,
                vec![store(
                    row,
                    vec![v(i2), v(j2)],
                    Expr::binary(BinOp::Div, el(i2, j2), Expr::load(sum, vec![v(i2)])),
                )],
            )],
        ),
        copy(tile(row, vec![]), tile(y, origin)),
    ];
    k
}

/// The plain f64 softmax of each row.
pub fn softmax_ref(x: &[f32], m: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for r in 0..m {
        let row = &x[r * n..(r + 1) * n];
        let mx = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let s: f64 = row.iter().map(|&b| (b as f64 - mx).exp()).sum();
        for c in 0..n {
            out[r * n + c] = (row[c] as f64 - mx).exp() / s;
        }
    }
    out
}

/// A kernel with every statement and expression form,
/// duplicate names (printed by id) and every constant type.
pub fn every_construct() -> Kernel {
    let mut k = Kernel::new("all", 64);
    let n = k.add_dim("N");
    let t = k.add_tensor_param("t", DType::I32, vec![Extent::Dyn(n), Extent::Const(4)], true);
    let alpha = k.add_scalar_param("alpha", DType::F32);
    k.grid = [v(n), Expr::i32(2), Expr::cast(DType::I32, Expr::Const(Value::U32(3)))];
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let sh = local(&mut k, "sh", Scope::Shared, DType::BF16, &[8, 4]);
    let lo = local(&mut k, "lo", Scope::Local, DType::F16, &[2]);
    let d1 = local(&mut k, "dup", Scope::Fragment, DType::F32, &[8]);
    let d2 = local(&mut k, "dup", Scope::Fragment, DType::F32, &[]);
    let i1 = k.add_var("i", DType::I32, VarKind::Loop);
    let i2 = k.add_var("i", DType::I32, VarKind::Loop);
    let m = k.add_var("m", DType::F32, VarKind::Mut);
    let c = k.add_var("c", DType::Bool, VarKind::Let);
    let kk = k.add_var("k", DType::I32, VarKind::Loop);
    let bin = |op, a, b| Expr::binary(op, a, b);
    k.body = vec![
        st(StmtKind::Let { var: m, value: Expr::unary(UnOp::Neg, v(alpha)) }),
        st(StmtKind::Let {
            var: c,
            value: bin(
                BinOp::Or,
                bin(BinOp::Lt, v(by), Expr::i32(-1)),
                Expr::unary(UnOp::Not, bin(BinOp::Eq, Expr::Const(Value::I64(5)), Expr::Const(Value::I64(-6)))),
            ),
        }),
        st(StmtKind::If {
            cond: v(c),
            then: vec![st(StmtKind::Assign {
                var: m,
                value: Expr::Fma { a: Box::new(v(m)), b: Box::new(Expr::f32(2.5)), c: Box::new(Expr::f32(1e-7)) },
            })],
            otherwise: vec![st(StmtKind::Assign {
                var: m,
                value: Expr::Select {
                    cond: Box::new(Expr::Const(Value::Bool(false))),
                    then: Box::new(bin(BinOp::Max, v(m), Expr::f32(f32::NAN))),
                    otherwise: Box::new(Expr::unary(UnOp::Rsqrt, Expr::f32(f32::INFINITY))),
                },
            })],
        }),
        st(StmtKind::If { cond: Expr::Const(Value::Bool(true)), then: vec![st(StmtKind::Barrier)], otherwise: vec![] }),
        st(StmtKind::Fill { buf: lo, value: Expr::Const(Value::F16(half::f16::from_f32(-1.5))) }),
        st(StmtKind::Fill { buf: sh, value: Expr::Const(Value::BF16(half::bf16::from_f32(0.25))) }),
        st(StmtKind::Copy {
            src: tile(t, vec![mul(v(by), Expr::i32(8)), Expr::i32(0)]),
            dst: tile(sh, vec![]),
            fill: Some(Expr::Const(Value::BF16(half::bf16::ZERO))),
            cache: CacheHint::Normal,
        }),
        st(StmtKind::For {
            var: i1,
            start: Expr::i32(0),
            end: sub(v(n), Expr::i32(1)),
            kind: LoopKind::Pipelined { stages: 3 },
            body: vec![st(StmtKind::AtomicAdd {
                buf: t,
                index: vec![v(i1), bin(BinOp::Rem, bin(BinOp::Shl, v(i1), Expr::i32(2)), Expr::i32(4))],
                value: Expr::cast(DType::I32, bin(BinOp::Mul, add(v(m), Expr::f32(1.0)), Expr::f32(-2.0))),
            })],
        }),
        pfor(i2, 8, vec![store(d1, vec![v(i2)], Expr::cast(DType::F32, Expr::Const(Value::U32(7))))]),
        st(StmtKind::Reduce { op: ReduceOp::Sum, src: d1, dst: d2, dim: 0, keep: true }),
        st(StmtKind::Reduce { op: ReduceOp::Min, src: d1, dst: d2, dim: 0, keep: false }),
        st(StmtKind::Copy {
            src: tile(sh, vec![]),
            dst: tile(t, vec![Expr::i32(0), Expr::i32(0)]),
            fill: None,
            cache: CacheHint::Normal,
        }),
        st(StmtKind::For { var: kk, start: Expr::i32(0), end: Expr::i32(2), kind: LoopKind::Serial, body: vec![] }),
    ];
    k
}

/// How [`gemm_kernel`] is configured.
#[derive(Copy, Clone, Debug)]
pub struct GemmConfig {
    pub dtype: DType,
    /// A is stored `[K, M]` and read transposed.
    pub trans_a: bool,
    /// B is stored `[N, K]` and read transposed.
    pub trans_b: bool,
    /// A is staged in a fragment rather than shared memory.
    pub a_fragment: bool,
    /// The first K step overwrites the accumulator (`clear`); otherwise the
    /// accumulator starts from `c0`.
    pub clear_first: bool,
    pub tile: (i64, i64, i64),
    pub swizzle: Option<u32>,
}

/// `c = (clear_first ? 0 : c0) + op(a) · op(b)` over dynamic `M × N × K`,
/// one `BM × BN` tile per block on a `cdiv(N, BN) × cdiv(M, BM)` grid,
/// a serial loop over K steps of `BK`. The accumulator is loaded from `c0`
/// first, so that `clear` visibly discards it.
pub fn gemm_kernel(cfg: GemmConfig) -> Kernel {
    let (bm, bn, bk) = cfg.tile;
    let mut k = Kernel::new("gemm", 128);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let kd = k.add_dim("K");
    let (dm, dn, dk) = (Extent::Dyn(m), Extent::Dyn(n), Extent::Dyn(kd));
    let a_shape = if cfg.trans_a { vec![dk, dm] } else { vec![dm, dk] };
    let b_shape = if cfg.trans_b { vec![dn, dk] } else { vec![dk, dn] };
    let a = k.add_tensor_param("a", cfg.dtype, a_shape, false);
    let b = k.add_tensor_param("b", cfg.dtype, b_shape, false);
    let c0 = k.add_tensor_param("c0", DType::F32, vec![dm, dn], false);
    let c = k.add_tensor_param("c", DType::F32, vec![dm, dn], true);
    k.grid = [Expr::cdiv(v(n), Expr::i32(bn as i32)), Expr::cdiv(v(m), Expr::i32(bm as i32)), Expr::i32(1)];
    k.rasterize = cfg.swizzle;
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let a_scope = if cfg.a_fragment { Scope::Fragment } else { Scope::Shared };
    let a_s = local(&mut k, "a_s", a_scope, cfg.dtype, &if cfg.trans_a { [bk, bm] } else { [bm, bk] });
    let b_s = local(&mut k, "b_s", Scope::Shared, cfg.dtype, &if cfg.trans_b { [bn, bk] } else { [bk, bn] });
    let acc = local(&mut k, "acc", Scope::Fragment, DType::F32, &[bm, bn]);
    let kk = k.add_var("kk", DType::I32, VarKind::Loop);
    let row0 = mul(v(by), Expr::i32(bm as i32));
    let col0 = mul(v(bx), Expr::i32(bn as i32));
    let k0 = mul(v(kk), Expr::i32(bk as i32));
    let a_origin = if cfg.trans_a { vec![k0.clone(), row0.clone()] } else { vec![row0.clone(), k0.clone()] };
    let b_origin = if cfg.trans_b { vec![col0.clone(), k0.clone()] } else { vec![k0.clone(), col0.clone()] };
    let gemm = |clear: bool| {
        st(StmtKind::Gemm {
            a: a_s,
            b: b_s,
            c: acc,
            trans_a: cfg.trans_a,
            trans_b: cfg.trans_b,
            clear,
            policy: WarpPolicy::Square,
        })
    };
    let step = if cfg.clear_first {
        st(StmtKind::If {
            cond: Expr::binary(BinOp::Eq, v(kk), Expr::i32(0)),
            then: vec![gemm(true)],
            otherwise: vec![gemm(false)],
        })
    } else {
        gemm(false)
    };
    k.body = vec![
        copy(tile(c0, vec![row0.clone(), col0.clone()]), tile(acc, vec![])),
        sfor(
            kk,
            Expr::i32(0),
            Expr::cdiv(v(kd), Expr::i32(bk as i32)),
            vec![copy(tile(a, a_origin), tile(a_s, vec![])), copy(tile(b, b_origin), tile(b_s, vec![])), step],
        ),
        copy(tile(acc, vec![]), tile(c, vec![row0, col0])),
    ];
    k
}

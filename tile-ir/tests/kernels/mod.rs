//! Kernels built by hand with the `Kernel` builder, shared by the codegen tests.
#![allow(dead_code)]

use tile_ir::*;

pub fn frag(k: &mut Kernel, name: &str, dt: DType, shape: &[i64]) -> BufferId {
    buffer(k, name, Scope::Fragment, dt, shape)
}

pub fn buffer(k: &mut Kernel, name: &str, scope: Scope, dt: DType, shape: &[i64]) -> BufferId {
    k.add_buffer(Buffer {
        name: name.into(),
        scope,
        dtype: dt,
        shape: shape.iter().map(|&c| Extent::Const(c)).collect(),
        mutable: true,
        span: SpanId::NONE,
        layout: None,
        view: None,
    })
}

pub fn s(kind: StmtKind) -> Stmt {
    Stmt::new(kind)
}

pub fn v(x: VarId) -> Expr {
    Expr::var(x)
}

pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}

pub fn copy(src: BufferId, so: Vec<Expr>, dst: BufferId, dor: Vec<Expr>) -> Stmt {
    s(StmtKind::Copy { src: TileRef::new(src, so), dst: TileRef::new(dst, dor), fill: None, cache: CacheHint::Normal })
}

pub fn par(k: &mut Kernel, name: &str, n: i64, body: impl FnOnce(VarId) -> Vec<Stmt>) -> Stmt {
    let i = k.add_var(name, DType::I32, VarKind::Loop);
    s(StmtKind::For { var: i, start: Expr::i32(0), end: Expr::i32(n as i32), kind: LoopKind::Parallel, body: body(i) })
}

pub fn par2(k: &mut Kernel, n0: i64, n1: i64, body: impl FnOnce(VarId, VarId) -> Vec<Stmt>) -> Stmt {
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let j = k.add_var("j", DType::I32, VarKind::Loop);
    let inner = s(StmtKind::For {
        var: j,
        start: Expr::i32(0),
        end: Expr::i32(n1 as i32),
        kind: LoopKind::Parallel,
        body: body(i, j),
    });
    s(StmtKind::For {
        var: i,
        start: Expr::i32(0),
        end: Expr::i32(n0 as i32),
        kind: LoopKind::Parallel,
        body: vec![inner],
    })
}

pub fn vector_add(threads: u32, block: i64) -> Kernel {
    let mut k = Kernel::new("vector_add", threads);
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F32, vec![Extent::Dyn(n)], false);
    let b = k.add_tensor_param("b", DType::F32, vec![Extent::Dyn(n)], false);
    let c = k.add_tensor_param("c", DType::F32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let x = frag(&mut k, "x", DType::F32, &[block]);
    let y = frag(&mut k, "y", DType::F32, &[block]);
    let origin = || vec![bin(BinOp::Mul, v(bx), Expr::i32(block as i32))];
    let lp = par(&mut k, "i", block, |i| {
        vec![s(StmtKind::Store {
            buf: x,
            index: vec![v(i)],
            value: bin(BinOp::Add, Expr::load(x, vec![v(i)]), Expr::load(y, vec![v(i)])),
        })]
    });
    k.body = vec![copy(a, origin(), x, vec![]), copy(b, origin(), y, vec![]), lp, copy(x, vec![], c, origin())];
    k
}

/// Row softmax: one block per row of an f16 [M, N] tensor, N ≤ BN.
pub fn softmax(threads: u32, bn: i64) -> Kernel {
    let mut k = Kernel::new("softmax", threads);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let xin = k.add_tensor_param("x", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let yout = k.add_tensor_param("y", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k.grid[0] = v(m);
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let xs = frag(&mut k, "s", DType::F32, &[1, bn]);
    let mx = frag(&mut k, "mx", DType::F32, &[1]);
    let sum = frag(&mut k, "sum", DType::F32, &[1]);
    let scale = std::f32::consts::LOG2_E;
    let e1 = par2(&mut k, 1, bn, |i, j| {
        vec![s(StmtKind::Store {
            buf: xs,
            index: vec![v(i), v(j)],
            value: Expr::unary(
                UnOp::Exp2,
                bin(
                    BinOp::Mul,
                    bin(BinOp::Sub, Expr::load(xs, vec![v(i), v(j)]), Expr::load(mx, vec![v(i)])),
                    Expr::f32(scale),
                ),
            ),
        })]
    });
    let e2 = par2(&mut k, 1, bn, |i, j| {
        vec![s(StmtKind::Store {
            buf: xs,
            index: vec![v(i), v(j)],
            value: bin(BinOp::Div, Expr::load(xs, vec![v(i), v(j)]), Expr::load(sum, vec![v(i)])),
        })]
    });
    k.body = vec![
        s(StmtKind::Copy {
            src: TileRef::new(xin, vec![v(bx), Expr::i32(0)]),
            dst: TileRef::new(xs, vec![]),
            fill: Some(Expr::f32(f32::NEG_INFINITY)),
            cache: CacheHint::Normal,
        }),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: xs, dst: mx, dim: 1, keep: false }),
        e1,
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: xs, dst: sum, dim: 1, keep: false }),
        e2,
        copy(xs, vec![], yout, vec![v(bx), Expr::i32(0)]),
    ];
    k
}

pub fn store(buf: BufferId, index: Vec<Expr>, value: Expr) -> Stmt {
    s(StmtKind::Store { buf, index, value })
}

pub fn ld(buf: BufferId, index: Vec<Expr>) -> Expr {
    Expr::load(buf, index)
}

pub fn reduce_kernel(shape: &[i64], dim: usize, op: ReduceOp, dt: DType, threads: u32) -> Kernel {
    let mut k = Kernel::new(format!("reduce_{}d_dim{dim}_{:?}_{}", shape.len(), op, dt.name()), threads);
    let dims: Vec<VarId> = (0..shape.len()).map(|d| k.add_dim(format!("D{d}"))).collect();
    let x = k.add_tensor_param("x", dt, dims.iter().map(|&d| Extent::Dyn(d)).collect(), false);
    let mut out_shape: Vec<Extent> = dims.iter().map(|&d| Extent::Dyn(d)).collect();
    out_shape.remove(dim);
    let y = k.add_tensor_param("y", DType::F32, out_shape, true);
    let f = frag(&mut k, "f", DType::F32, shape);
    let mut rshape = shape.to_vec();
    rshape.remove(dim);
    let r = frag(&mut k, "r", DType::F32, &rshape);
    let zeros = |n: usize| (0..n).map(|_| Expr::i32(0)).collect::<Vec<_>>();
    k.body = vec![
        copy(x, zeros(shape.len()), f, vec![]),
        s(StmtKind::Fill { buf: r, value: Expr::f32(1.0) }),
        s(StmtKind::Reduce { op, src: f, dst: r, dim, keep: true }),
        copy(r, vec![], y, zeros(rshape.len())),
    ];
    k
}

pub fn shared_transpose(threads: u32, r: i64, c: i64) -> Kernel {
    let mut k = Kernel::new("transpose", threads);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let b = k.add_tensor_param("b", DType::F16, vec![Extent::Dyn(n), Extent::Dyn(m)], true);
    k.grid = [Expr::cdiv(v(n), Expr::i32(c as i32)), Expr::cdiv(v(m), Expr::i32(r as i32)), Expr::i32(1)];
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let sa = buffer(&mut k, "sa", Scope::Shared, DType::F16, &[r, c]);
    let t = frag(&mut k, "t", DType::F16, &[c, r]);
    let lp = par2(&mut k, c, r, |i, j| vec![store(t, vec![v(i), v(j)], ld(sa, vec![v(j), v(i)]))]);
    k.body = vec![
        copy(
            a,
            vec![bin(BinOp::Mul, v(by), Expr::i32(r as i32)), bin(BinOp::Mul, v(bx), Expr::i32(c as i32))],
            sa,
            vec![],
        ),
        lp,
        copy(
            t,
            vec![],
            b,
            vec![bin(BinOp::Mul, v(bx), Expr::i32(c as i32)), bin(BinOp::Mul, v(by), Expr::i32(r as i32))],
        ),
    ];
    k
}

pub fn loop_kernel(threads: u32) -> Kernel {
    let mut k = Kernel::new("looped", threads);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::BF16, vec![Extent::Dyn(n)], false);
    let total = k.add_tensor_param("total", DType::F32, vec![Extent::Const(4)], true);
    let counts = k.add_tensor_param("counts", DType::I32, vec![Extent::Const(4)], true);
    let alpha = k.add_scalar_param("alpha", DType::F32);
    let lim = k.add_scalar_param("lim", DType::U32);
    let h = k.add_scalar_param("h", DType::F16);
    let xs = buffer(&mut k, "xs", Scope::Shared, DType::F32, &[256]);
    let acc = frag(&mut k, "acc", DType::F32, &[1, 256]);
    let red = frag(&mut k, "red", DType::F32, &[1]);
    let loc = buffer(&mut k, "loc", Scope::Local, DType::I32, &[4]);
    let it = k.add_var("it", DType::I32, VarKind::Loop);
    let cnt = k.add_var("cnt", DType::I32, VarKind::Mut);
    let q = k.add_var("q", DType::F32, VarKind::Let);
    let lp = par2(&mut k, 1, 256, |i, j| {
        vec![store(
            acc,
            vec![v(i), v(j)],
            Expr::Fma {
                a: Box::new(ld(xs, vec![v(j)])),
                b: Box::new(v(alpha)),
                c: Box::new(ld(acc, vec![v(i), v(j)])),
            },
        )]
    });
    let body = vec![
        copy(x, vec![bin(BinOp::Mul, v(it), Expr::i32(256))], xs, vec![]),
        lp,
        s(StmtKind::If {
            cond: bin(BinOp::Lt, Expr::cast(DType::U32, v(it)), v(lim)),
            then: vec![s(StmtKind::Assign { var: cnt, value: bin(BinOp::Add, v(cnt), Expr::i32(1)) })],
            otherwise: vec![s(StmtKind::Assign { var: cnt, value: bin(BinOp::Sub, v(cnt), Expr::i32(1)) })],
        }),
        store(loc, vec![bin(BinOp::Rem, v(it), Expr::i32(4))], v(cnt)),
    ];
    k.body = vec![
        s(StmtKind::Fill { buf: acc, value: Expr::f32(0.0) }),
        s(StmtKind::Fill { buf: loc, value: Expr::i32(0) }),
        s(StmtKind::Let { var: cnt, value: Expr::i32(0) }),
        s(StmtKind::For {
            var: it,
            start: Expr::i32(0),
            end: Expr::cdiv(v(n), Expr::i32(256)),
            kind: LoopKind::Serial,
            body,
        }),
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: acc, dst: red, dim: 1, keep: false }),
        copy(red, vec![], total, vec![Expr::i32(1)]),
        s(StmtKind::Let {
            var: q,
            value: bin(BinOp::Mul, Expr::cast(DType::F32, v(h)), Expr::cast(DType::F32, ld(loc, vec![Expr::i32(1)]))),
        }),
        s(StmtKind::AtomicAdd {
            buf: total,
            index: vec![Expr::i32(0)],
            value: Expr::unary(UnOp::Sqrt, Expr::unary(UnOp::Abs, v(q))),
        }),
        s(StmtKind::AtomicAdd { buf: counts, index: vec![Expr::i32(1)], value: v(cnt) }),
        s(StmtKind::Store {
            buf: counts,
            index: vec![Expr::i32(2)],
            value: Expr::cast(DType::I32, Expr::unary(UnOp::Exp, v(alpha))),
        }),
    ];
    k
}

/// Element-wise casts and integer arithmetic in a parallel loop, with
/// global loads and stores inside the loop (bounds-checked per element).
pub fn casts_kernel(threads: u32, block: i64) -> Kernel {
    let mut k = Kernel::new("casts", threads);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(n)], false);
    let oi = k.add_tensor_param("oi", DType::I32, vec![Extent::Dyn(n)], true);
    let ou = k.add_tensor_param("ou", DType::U32, vec![Extent::Dyn(n)], true);
    let oh = k.add_tensor_param("oh", DType::F16, vec![Extent::Dyn(n)], true);
    let ob = k.add_tensor_param("ob", DType::BF16, vec![Extent::Dyn(n)], true);
    let od = k.add_tensor_param("od", DType::I32, vec![Extent::Dyn(n)], true);
    let of = k.add_tensor_param("of", DType::F32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let g = k.add_var("g", DType::I32, VarKind::Let);
    let xv = k.add_var("xv", DType::F32, VarKind::Let);
    let lp = par(&mut k, "i", block, |i| {
        let gi = bin(BinOp::Add, bin(BinOp::Mul, v(bx), Expr::i32(block as i32)), v(i));
        let c = bin(BinOp::Sub, v(g), Expr::i32(500));
        vec![
            s(StmtKind::Let { var: g, value: gi }),
            s(StmtKind::Let { var: xv, value: ld(x, vec![v(g)]) }),
            store(oi, vec![v(g)], Expr::cast(DType::I32, v(xv))),
            store(ou, vec![v(g)], Expr::cast(DType::U32, v(xv))),
            store(oh, vec![v(g)], Expr::cast(DType::F16, v(xv))),
            store(ob, vec![v(g)], Expr::cast(DType::BF16, bin(BinOp::Mul, v(xv), Expr::f32(3.0)))),
            store(
                od,
                vec![v(g)],
                bin(
                    BinOp::Add,
                    bin(BinOp::Div, c.clone(), Expr::i32(7)),
                    bin(BinOp::Mul, bin(BinOp::Rem, c.clone(), Expr::i32(7)), Expr::i32(1000)),
                ),
            ),
            store(
                of,
                vec![v(g)],
                Expr::Select {
                    cond: Box::new(bin(BinOp::Ge, v(xv), Expr::f32(0.0))),
                    then: Box::new(Expr::unary(UnOp::Sqrt, v(xv))),
                    otherwise: Box::new(bin(
                        BinOp::Add,
                        Expr::cast(DType::F32, Expr::cast(DType::BF16, v(xv))),
                        Expr::cast(
                            DType::F32,
                            bin(
                                BinOp::Max,
                                Expr::cast(DType::F16, v(xv)),
                                Expr::Const(Value::F16(half::f16::from_f32(-2.5))),
                            ),
                        ),
                    )),
                },
            ),
        ]
    });
    k.body = vec![lp];
    k
}

/// Divisions by expressions of dimensions only (`abi::dims_divisors`),
/// which the launch evaluates: `q[g] = c / (D - 5)`, `r[g] = c % (D - 5)`
/// and `e[g] = (3·c) / (N / D) + c % D` with `c = g - 500` (negative and
/// positive dividends, divisors of either sign). `w` only binds `D`. And
/// divisions by constants, which the code generator strength-reduces
/// (`divide.rs`): for `x = c·4194301 + 17` (wrapping, so dividends span the
/// whole `i32` range), `f[g] = x / 64 · 3 + x % 64`, `h[g] = x / -7 · 5 +
/// x % 1000003` and `u[g] = (x as u32) / 96 + (x as u32) % 7` (as u32).
pub fn dims_divisors_kernel(threads: u32, block: i64) -> Kernel {
    let mut k = Kernel::new("dims_divisors", threads);
    let n = k.add_dim("N");
    let d = k.add_dim("D");
    k.add_tensor_param("w", DType::I32, vec![Extent::Dyn(d)], false);
    let q = k.add_tensor_param("q", DType::I32, vec![Extent::Dyn(n)], true);
    let r = k.add_tensor_param("r", DType::I32, vec![Extent::Dyn(n)], true);
    let e = k.add_tensor_param("e", DType::I32, vec![Extent::Dyn(n)], true);
    let f = k.add_tensor_param("f", DType::I32, vec![Extent::Dyn(n)], true);
    let h = k.add_tensor_param("h", DType::I32, vec![Extent::Dyn(n)], true);
    let u = k.add_tensor_param("u", DType::U32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let g = k.add_var("g", DType::I32, VarKind::Let);
    let c = k.add_var("c", DType::I32, VarKind::Let);
    let x = k.add_var("x", DType::I32, VarKind::Let);
    let lp = par(&mut k, "i", block, |i| {
        let gi = bin(BinOp::Add, bin(BinOp::Mul, v(bx), Expr::i32(block as i32)), v(i));
        let dm5 = bin(BinOp::Sub, v(d), Expr::i32(5));
        let c3 = bin(BinOp::Mul, v(c), Expr::i32(3));
        vec![
            s(StmtKind::Let { var: g, value: gi }),
            s(StmtKind::Let { var: c, value: bin(BinOp::Sub, v(g), Expr::i32(500)) }),
            store(q, vec![v(g)], bin(BinOp::Div, v(c), dm5.clone())),
            store(r, vec![v(g)], bin(BinOp::Rem, v(c), dm5)),
            store(
                e,
                vec![v(g)],
                bin(BinOp::Add, bin(BinOp::Div, c3, bin(BinOp::Div, v(n), v(d))), bin(BinOp::Rem, v(c), v(d))),
            ),
            s(StmtKind::Let {
                var: x,
                value: bin(BinOp::Add, bin(BinOp::Mul, v(c), Expr::i32(4_194_301)), Expr::i32(17)),
            }),
            store(
                f,
                vec![v(g)],
                bin(
                    BinOp::Add,
                    bin(BinOp::Mul, bin(BinOp::Div, v(x), Expr::i32(64)), Expr::i32(3)),
                    bin(BinOp::Rem, v(x), Expr::i32(64)),
                ),
            ),
            store(
                h,
                vec![v(g)],
                bin(
                    BinOp::Add,
                    bin(BinOp::Mul, bin(BinOp::Div, v(x), Expr::i32(-7)), Expr::i32(5)),
                    bin(BinOp::Rem, v(x), Expr::i32(1_000_003)),
                ),
            ),
            store(u, vec![v(g)], {
                let xu = Expr::cast(DType::U32, v(x));
                bin(
                    BinOp::Add,
                    bin(BinOp::Div, xu.clone(), Expr::Const(Value::U32(96))),
                    bin(BinOp::Rem, xu, Expr::Const(Value::U32(7))),
                )
            }),
        ]
    });
    k.body = vec![lp];
    k
}

/// Copies in every direction: a 2-D tile of a 3-D tensor with an unaligned
/// origin and a fill value, fragment → shared → fragment (f32 → f16) →
/// global, global → local, local → global, shared fill and a thread-0 store.
pub fn copies_kernel(threads: u32) -> Kernel {
    let mut k = Kernel::new("copies", threads);
    let b = k.add_dim("B");
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(b), Extent::Dyn(m), Extent::Dyn(n)], false);
    let y = k.add_tensor_param("y", DType::F16, vec![Extent::Dyn(b), Extent::Dyn(m), Extent::Dyn(n)], true);
    let z = k.add_tensor_param("z", DType::I32, vec![Extent::Const(8)], true);
    let w = k.add_tensor_param("w", DType::F32, vec![Extent::Const(4)], false);
    let w2 = k.add_tensor_param("w2", DType::F32, vec![Extent::Const(4)], true);
    k.grid = [Expr::cdiv(v(n), Expr::i32(64)), Expr::cdiv(v(m), Expr::i32(16)), v(b)];
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let bz = k.add_var("bz", DType::I32, VarKind::BlockIdx(2));
    let f = frag(&mut k, "f", DType::F32, &[16, 64]);
    let sh = buffer(&mut k, "sh", Scope::Shared, DType::F32, &[16, 64]);
    let g = frag(&mut k, "g", DType::F16, &[16, 64]);
    let loc = buffer(&mut k, "loc", Scope::Local, DType::F32, &[4]);
    let sl = buffer(&mut k, "sl", Scope::Shared, DType::I32, &[8]);
    let row = bin(BinOp::Mul, v(by), Expr::i32(16));
    let col = bin(BinOp::Mul, v(bx), Expr::i32(64));
    k.body = vec![
        s(StmtKind::Copy {
            src: TileRef {
                buf: x,
                origin: vec![v(bz), row.clone(), bin(BinOp::Add, col.clone(), Expr::i32(1))],
                squeezed: vec![0],
            },
            dst: TileRef::new(f, vec![]),
            fill: Some(Expr::f32(7.0)),
            cache: CacheHint::Normal,
        }),
        copy(f, vec![], sh, vec![]),
        copy(sh, vec![], g, vec![]),
        s(StmtKind::Copy {
            src: TileRef::new(g, vec![]),
            dst: TileRef { buf: y, origin: vec![v(bz), row, col], squeezed: vec![0] },
            fill: None,
            cache: CacheHint::Normal,
        }),
        copy(w, vec![Expr::i32(0)], loc, vec![]),
        s(StmtKind::Fill { buf: sl, value: Expr::i32(0) }),
        store(sl, vec![Expr::i32(3)], Expr::cast(DType::I32, ld(loc, vec![Expr::i32(2)]))),
        copy(sl, vec![], z, vec![Expr::i32(0)]),
        copy(loc, vec![], w2, vec![Expr::i32(0)]),
    ];
    k
}

/// `out = z * rowmax(x)`: the rows of a reduction over `[BM, BN]` drive a
/// nest over `[BM, D]` (the FlashAttention rescale pattern).
pub fn row_scale_kernel(threads: u32, bm: i64, bn: i64, d: i64) -> Kernel {
    row_kernel("row_scale", threads, (bm, bn, d), |_, i, _, scale| vec![scale(i)])
}

/// [`row_scale_kernel`] with the scale behind a row test, `out[i, j] =
/// z[i, j] · mx[i]` where `mx[i] > 0` and `z[i, j]` elsewhere (`mx[i]` the
/// row maximum of `x`): the nest's body is `if mx[i] > 0 { .. }`, which the
/// lowering tests once per row (`row_guard`). `how` picks the body's
/// variant: 0 that one; 1 the same test also reading `j` (`&& j >= 0`,
/// true, but not a row-only test); 2 the row test with a body that also
/// writes the tested fragment (`mx[i] = mx[i]`, not grouped either).
pub fn row_guard_kernel(threads: u32, bm: i64, bn: i64, d: i64, how: u32) -> Kernel {
    row_kernel("row_guard", threads, (bm, bn, d), |mx, i, j, scale| {
        let positive = bin(BinOp::Gt, ld(mx, vec![v(i)]), Expr::f32(0.0));
        let cond = match how {
            1 => bin(BinOp::And, positive, bin(BinOp::Ge, v(j), Expr::i32(0))),
            _ => positive,
        };
        let mut then = vec![scale(i)];
        if how == 2 {
            then.push(store(mx, vec![v(i)], ld(mx, vec![v(i)])));
        }
        vec![s(StmtKind::If { cond, then, otherwise: vec![] })]
    })
}

/// The kernel of [`row_scale_kernel`] and [`row_guard_kernel`]: `mx` the
/// row maxima of the `[BM, BN]` tile of `x`, `o` the `[BM, D]` tile of `z`,
/// the nest over `o` running `body(mx, i, j, scale)` (`scale(i)` the store
/// `o[i, j] = o[i, j] · mx[i]`), then `o` stored to `out`.
fn row_kernel(
    name: &str,
    threads: u32,
    (bm, bn, d): (i64, i64, i64),
    body: impl FnOnce(BufferId, VarId, VarId, &dyn Fn(VarId) -> Stmt) -> Vec<Stmt>,
) -> Kernel {
    let mut k = Kernel::new(name, threads);
    let m = k.add_dim("M");
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(m), Extent::Const(bn)], false);
    let z = k.add_tensor_param("z", DType::F32, vec![Extent::Dyn(m), Extent::Const(d)], false);
    let out = k.add_tensor_param("out", DType::F32, vec![Extent::Dyn(m), Extent::Const(d)], true);
    k.grid[0] = Expr::cdiv(v(m), Expr::i32(bm as i32));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(0));
    let s_ = frag(&mut k, "s", DType::F32, &[bm, bn]);
    let mx = frag(&mut k, "mx", DType::F32, &[bm]);
    let o = frag(&mut k, "o", DType::F32, &[bm, d]);
    let row = || vec![bin(BinOp::Mul, v(by), Expr::i32(bm as i32)), Expr::i32(0)];
    let lp = par2(&mut k, bm, d, |i, j| {
        let scale = |i: VarId| store(o, vec![v(i), v(j)], bin(BinOp::Mul, ld(o, vec![v(i), v(j)]), ld(mx, vec![v(i)])));
        body(mx, i, j, &scale)
    });
    k.body = vec![
        copy(x, row(), s_, vec![]),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: s_, dst: mx, dim: 1, keep: false }),
        copy(z, row(), o, vec![]),
        lp,
        copy(o, vec![], out, row()),
    ];
    k
}

/// Divergent control flow inside a parallel loop: a serial loop whose bound
/// depends on the element, an if/else, a `let mut` updated in the loop,
/// math functions, a shared store per element, a fragment → fragment copy
/// (f32 → f16) and an explicit barrier.
pub fn divergent_kernel(threads: u32, block: i64) -> Kernel {
    let mut k = Kernel::new("divergent", threads);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(n)], false);
    let y = k.add_tensor_param("y", DType::F16, vec![Extent::Dyn(n)], true);
    let w = k.add_tensor_param("w", DType::F32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let f = frag(&mut k, "f", DType::F32, &[block]);
    let h = frag(&mut k, "h", DType::F16, &[block]);
    let sh = buffer(&mut k, "sh", Scope::Shared, DType::F32, &[block]);
    let acc = k.add_var("acc", DType::F32, VarKind::Mut);
    let t = k.add_var("t", DType::I32, VarKind::Loop);
    let origin = || vec![bin(BinOp::Mul, v(bx), Expr::i32(block as i32))];
    let lp = par(&mut k, "i", block, |i| {
        vec![
            s(StmtKind::Let { var: acc, value: Expr::f32(0.0) }),
            s(StmtKind::For {
                var: t,
                start: Expr::i32(0),
                end: bin(BinOp::Rem, v(i), Expr::i32(5)),
                kind: LoopKind::Serial,
                body: vec![s(StmtKind::Assign {
                    var: acc,
                    value: bin(BinOp::Add, v(acc), bin(BinOp::Mul, Expr::cast(DType::F32, v(t)), ld(f, vec![v(i)]))),
                })],
            }),
            s(StmtKind::If {
                cond: bin(BinOp::Eq, bin(BinOp::Rem, v(i), Expr::i32(2)), Expr::i32(0)),
                then: vec![store(f, vec![v(i)], bin(BinOp::Add, v(acc), Expr::unary(UnOp::Exp, Expr::f32(0.5))))],
                otherwise: vec![store(
                    f,
                    vec![v(i)],
                    bin(
                        BinOp::Sub,
                        Expr::unary(UnOp::Log, bin(BinOp::Add, Expr::unary(UnOp::Abs, v(acc)), Expr::f32(1.0))),
                        v(acc),
                    ),
                )],
            }),
            store(
                sh,
                vec![bin(BinOp::Sub, Expr::i32(block as i32 - 1), v(i))],
                Expr::unary(UnOp::Rsqrt, bin(BinOp::Add, Expr::unary(UnOp::Abs, ld(f, vec![v(i)])), Expr::f32(1.0))),
            ),
        ]
    });
    let lp2 = par(&mut k, "i2", block, |i| {
        vec![store(w, vec![bin(BinOp::Add, origin()[0].clone(), v(i))], ld(sh, vec![v(i)]))]
    });
    k.body = vec![
        copy(x, origin(), f, vec![]),
        lp,
        copy(f, vec![], h, vec![]),
        copy(h, vec![], y, origin()),
        s(StmtKind::Barrier),
        lp2,
    ];
    k
}

/// Atomics from a parallel loop: a histogram (u32), integer and f16 sums,
/// and an i64 counter; `hist` has 16 bins, indices out of range are skipped.
pub fn atomics_kernel(threads: u32, block: i64, with_bf16: bool) -> Kernel {
    let mut k = Kernel::new(if with_bf16 { "atomics_bf16" } else { "atomics" }, threads);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::I32, vec![Extent::Dyn(n)], false);
    let hist = k.add_tensor_param("hist", DType::U32, vec![Extent::Const(16)], true);
    let sums = k.add_tensor_param("sums", DType::F16, vec![Extent::Const(2)], true);
    let big = k.add_tensor_param("big", DType::I32, vec![Extent::Const(1)], true);
    let bsum = k.add_tensor_param("bsum", DType::BF16, vec![Extent::Const(1)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let lp = par(&mut k, "i", block, |i| {
        let g = bin(BinOp::Add, bin(BinOp::Mul, v(bx), Expr::i32(block as i32)), v(i));
        let xv = ld(x, vec![g.clone()]);
        let in_range = bin(BinOp::Lt, g.clone(), v(n));
        let mut body = vec![s(StmtKind::If {
            cond: in_range,
            then: vec![
                s(StmtKind::AtomicAdd { buf: hist, index: vec![xv.clone()], value: Expr::Const(Value::U32(1)) }),
                s(StmtKind::AtomicAdd {
                    buf: sums,
                    index: vec![Expr::i32(1)],
                    value: Expr::cast(DType::F16, Expr::cast(DType::F32, xv.clone())),
                }),
                s(StmtKind::AtomicAdd { buf: big, index: vec![Expr::i32(0)], value: xv.clone() }),
            ],
            otherwise: vec![],
        })];
        if with_bf16 {
            body.push(s(StmtKind::AtomicAdd {
                buf: bsum,
                index: vec![Expr::i32(0)],
                value: Expr::Const(Value::BF16(half::bf16::ONE)),
            }));
        }
        body
    });
    k.body = vec![lp];
    k
}

/// The softmax of `examples/kernels/softmax.rs`: one pass for rows of up to
/// BN columns, else an online max/sum pass over column tiles (reduce with
/// `keep`, fragment-to-fragment copy, a 1-iteration parallel loop over
/// reduced fragments) and a normalizing pass.
pub fn softmax_online(threads: u32, bn: i64) -> Kernel {
    let mut k = Kernel::new("softmax_online", threads);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let y = k.add_tensor_param("y", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k.grid[0] = v(m);
    let row = k.add_var("row", DType::I32, VarKind::BlockIdx(0));
    let t = frag(&mut k, "t", DType::F32, &[1, bn]);
    let row_max = frag(&mut k, "row_max", DType::F32, &[1]);
    let row_sum = frag(&mut k, "row_sum", DType::F32, &[1]);
    let prev_max = frag(&mut k, "prev_max", DType::F32, &[1]);
    let tile_sum = frag(&mut k, "tile_sum", DType::F32, &[1]);
    #[allow(clippy::approx_constant)] // the literal the kernel text has always had
    let l2e = 1.442_695_f32;
    let c1 = k.add_var("c", DType::I32, VarKind::Loop);
    let c2 = k.add_var("c2", DType::I32, VarKind::Loop);
    let tiles = || Expr::cdiv(v(n), Expr::i32(bn as i32));
    let ex = |a: Expr, b: Expr| Expr::unary(UnOp::Exp2, bin(BinOp::Mul, bin(BinOp::Sub, a, b), Expr::f32(l2e)));
    let fill_neg = |src: TileRef| {
        s(StmtKind::Copy {
            src,
            dst: TileRef::new(t, vec![]),
            fill: Some(Expr::f32(f32::NEG_INFINITY)),
            cache: CacheHint::Normal,
        })
    };
    let p1 = par2(&mut k, 1, bn, |i, j| {
        vec![store(t, vec![v(i), v(j)], ex(ld(t, vec![v(i), v(j)]), ld(row_max, vec![v(i)])))]
    });
    let p2 = par2(&mut k, 1, bn, |i, j| {
        vec![store(t, vec![v(i), v(j)], bin(BinOp::Div, ld(t, vec![v(i), v(j)]), ld(row_sum, vec![v(i)])))]
    });
    let p3 = par2(&mut k, 1, bn, |i, j| {
        vec![store(t, vec![v(i), v(j)], ex(ld(t, vec![v(i), v(j)]), ld(row_max, vec![v(i)])))]
    });
    let p4 = par(&mut k, "i4", 1, |i| {
        vec![store(
            row_sum,
            vec![v(i)],
            bin(
                BinOp::Add,
                bin(BinOp::Mul, ld(row_sum, vec![v(i)]), ex(ld(prev_max, vec![v(i)]), ld(row_max, vec![v(i)]))),
                ld(tile_sum, vec![v(i)]),
            ),
        )]
    });
    let p5 = par2(&mut k, 1, bn, |i, j| {
        vec![store(
            t,
            vec![v(i), v(j)],
            bin(BinOp::Div, ex(ld(t, vec![v(i), v(j)]), ld(row_max, vec![v(i)])), ld(row_sum, vec![v(i)])),
        )]
    });
    let col = |c: VarId| bin(BinOp::Mul, v(c), Expr::i32(bn as i32));
    let short = vec![
        fill_neg(TileRef::new(x, vec![v(row), Expr::i32(0)])),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: t, dst: row_max, dim: 1, keep: false }),
        p1,
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: t, dst: row_sum, dim: 1, keep: false }),
        p2,
        copy(t, vec![], y, vec![v(row), Expr::i32(0)]),
    ];
    let long = vec![
        s(StmtKind::Fill { buf: row_max, value: Expr::f32(f32::NEG_INFINITY) }),
        s(StmtKind::Fill { buf: row_sum, value: Expr::f32(0.0) }),
        s(StmtKind::For {
            var: c1,
            start: Expr::i32(0),
            end: tiles(),
            kind: LoopKind::Serial,
            body: vec![
                fill_neg(TileRef::new(x, vec![v(row), col(c1)])),
                copy(row_max, vec![], prev_max, vec![]),
                s(StmtKind::Reduce { op: ReduceOp::Max, src: t, dst: row_max, dim: 1, keep: true }),
                p3,
                s(StmtKind::Reduce { op: ReduceOp::Sum, src: t, dst: tile_sum, dim: 1, keep: false }),
                p4,
            ],
        }),
        s(StmtKind::For {
            var: c2,
            start: Expr::i32(0),
            end: tiles(),
            kind: LoopKind::Serial,
            body: vec![copy(x, vec![v(row), col(c2)], t, vec![]), p5, copy(t, vec![], y, vec![v(row), col(c2)])],
        }),
    ];
    k.body = vec![s(StmtKind::If { cond: bin(BinOp::Le, v(n), Expr::i32(bn as i32)), then: short, otherwise: long })];
    k
}

/// A row-wise kernel over `x: [B, R, C]` with `grid(cdiv(C, BC), R, B)`
/// (`batched`; else `x: [R, C]` and `grid(cdiv(C, BC), R)`): each block adds
/// `by + 1000·bz` to its `[1, BC]` tile (`out = x + by + 1000·bz`), so a
/// block that runs as the wrong index writes a wrong value, and one that
/// runs twice or never leaves a mark. `panel`: `use_swizzle(panel)`.
pub fn grid_rows_kernel(threads: u32, bc: i64, batched: bool, panel: Option<u32>) -> Kernel {
    let mut k = Kernel::new(if batched { "grid_rows3" } else { "grid_rows" }, threads);
    let b = batched.then(|| k.add_dim("B"));
    let r = k.add_dim("R");
    let c = k.add_dim("C");
    let shape: Vec<Extent> = b.iter().chain([&r, &c]).map(|&d| Extent::Dyn(d)).collect();
    let x = k.add_tensor_param("x", DType::F32, shape.clone(), false);
    let out = k.add_tensor_param("out", DType::F32, shape, true);
    k.grid[0] = Expr::cdiv(v(c), Expr::i32(bc as i32));
    k.grid[1] = v(r);
    if let Some(b) = b {
        k.grid[2] = v(b);
    }
    k.rasterize = panel;
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let bz = batched.then(|| k.add_var("bz", DType::I32, VarKind::BlockIdx(2)));
    let lead = if batched { 2 } else { 1 };
    let mut fshape = vec![1; lead];
    fshape.push(bc);
    let f = frag(&mut k, "f", DType::F32, &fshape);
    let mut origin: Vec<Expr> = bz.iter().map(|&z| v(z)).collect();
    origin.push(v(by));
    origin.push(bin(BinOp::Mul, v(bx), Expr::i32(bc as i32)));
    let mark = match bz {
        Some(z) => bin(BinOp::Add, v(by), bin(BinOp::Mul, v(z), Expr::i32(1000))),
        None => v(by),
    };
    // A parallel nest over every dim of `f` (the leading ones of extent 1).
    let loops: Vec<VarId> = (0..=lead).map(|d| k.add_var(format!("i{d}"), DType::I32, VarKind::Loop)).collect();
    let idx: Vec<Expr> = loops.iter().map(|&i| v(i)).collect();
    let mut lp = store(f, idx.clone(), bin(BinOp::Add, ld(f, idx), Expr::Cast { to: DType::F32, arg: Box::new(mark) }));
    for (d, &i) in loops.iter().enumerate().rev() {
        let end = Expr::i32(fshape[d] as i32);
        lp = s(StmtKind::For { var: i, start: Expr::i32(0), end, kind: LoopKind::Parallel, body: vec![lp] });
    }
    k.body = vec![copy(x, origin.clone(), f, vec![]), lp, copy(f, vec![], out, origin)];
    k
}

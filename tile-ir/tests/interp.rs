//! Interpreter tests: hand-built kernels on random inputs of awkward sizes,
//! against plain Rust references.

mod interp_kernels;

use half::{bf16, f16};
use interp_kernels::*;
use std::time::Instant;
use tile_ir::interp::{self, Arg};
use tile_ir::*;

fn close(got: f64, want: f64, atol: f64, rtol: f64) -> bool {
    (got - want).abs() <= atol + rtol * want.abs() || (got.is_nan() && want.is_nan())
}

fn run_vector_add(n: usize, block: i32) -> f64 {
    let k = vector_add(block);
    let mut rng = Rng(0x9e3779b97f4a7c15 ^ n as u64);
    let a: Vec<f32> = (0..n).map(|_| rng.f32(-10.0, 10.0)).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.f32(-10.0, 10.0)).collect();
    let (ab, bb) = (f32_bytes(&a), f32_bytes(&b));
    // Poison the output to see that every element is written.
    let mut cb = f32_bytes(&vec![f32::NAN; n]);
    let t = Instant::now();
    launch(&k, &mut [ro(&ab, &[n]), ro(&bb, &[n]), rw(&mut cb, &[n])]).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let c = bytes_f32(&cb);
    for i in 0..n {
        assert_eq!(c[i], a[i] + b[i], "element {i}");
    }
    secs
}

#[test]
fn vector_add_masks_the_tail() {
    run_vector_add(1000, 256);
    run_vector_add(1, 256);
    run_vector_add(257, 256);
}

#[test]
fn vector_add_64k_is_fast() {
    let secs = run_vector_add(1 << 16, 1024);
    eprintln!("vector_add 1<<16: {secs:.3} s");
    assert!(secs < 3.0, "vector_add of 1<<16 took {secs} s");
}

fn run_softmax(m: usize, n: usize, rows: i32, cols: i32) -> f64 {
    let k = softmax(rows, cols);
    let mut rng = Rng(42 + (m * n) as u64);
    let x: Vec<f16> = (0..m * n).map(|_| f16::from_f32(rng.f32(-8.0, 8.0))).collect();
    let xf: Vec<f32> = x.iter().map(|h| h.to_f32()).collect();
    let xb = f16_bytes(&x);
    let mut yb = f16_bytes(&vec![f16::NAN; m * n]);
    let t = Instant::now();
    launch(&k, &mut [ro(&xb, &[m, n]), rw(&mut yb, &[m, n])]).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let y = bytes_f16(&yb);
    let want = softmax_ref(&xf, m, n);
    for i in 0..m * n {
        let got = y[i].to_f64();
        assert!(close(got, want[i], 1e-4, 2e-3), "element ({}, {}): {got} vs {}", i / n, i % n, want[i]);
    }
    for r in 0..m {
        let s: f64 = y[r * n..(r + 1) * n].iter().map(|h| h.to_f64()).sum();
        assert!((s - 1.0).abs() < 0.02, "row {r} sums to {s}");
    }
    secs
}

#[test]
fn softmax_f16_dynamic_shapes() {
    run_softmax(37, 1000, 4, 1024);
    run_softmax(5, 3, 2, 8);
    run_softmax(1, 64, 4, 64);
}

#[test]
fn softmax_256x1000_is_fast() {
    let secs = run_softmax(256, 1000, 1, 1024);
    eprintln!("softmax 256x1000: {secs:.3} s");
    assert!(secs < 3.0, "softmax 256x1000 took {secs} s");
}

/// Copies `src` (shape `shape`) into a fragment, reduces it along `dim` into
/// a fragment initialised from `init`, and writes it to `out`.
fn reduce_kernel(shape: &[i64], dim: usize, op: ReduceOp, keep: bool, src_t: DType, dst_t: DType) -> Kernel {
    let mut k = Kernel::new("reduce", 128);
    let mut dshape = shape.to_vec();
    dshape.remove(dim);
    let c = |s: &[i64]| s.iter().map(|&x| Extent::Const(x)).collect::<Vec<_>>();
    let s = k.add_tensor_param("s", src_t, c(shape), false);
    let init = k.add_tensor_param("init", dst_t, c(&dshape), false);
    let out = k.add_tensor_param("out", dst_t, c(&dshape), true);
    let f = local(&mut k, "f", Scope::Fragment, src_t, shape);
    let g = local(&mut k, "g", Scope::Fragment, dst_t, &dshape);
    let zeros = |r: usize| (0..r).map(|_| Expr::i32(0)).collect::<Vec<_>>();
    k.body = vec![
        copy(tile(s, zeros(shape.len())), tile(f, vec![])),
        copy(tile(init, zeros(dshape.len())), tile(g, vec![])),
        st(StmtKind::Reduce { op, src: f, dst: g, dim, keep }),
        copy(tile(g, vec![]), tile(out, zeros(dshape.len()))),
    ];
    k
}

fn reduce_ref(x: &[f64], shape: &[usize], dim: usize, op: ReduceOp, init: &[f64], keep: bool) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..inner {
            let vals = (0..n).map(|j| x[(o * n + j) * inner + i]);
            let r = match op {
                ReduceOp::Sum => vals.sum::<f64>(),
                ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
                ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
            };
            let d = init[o * inner + i];
            out.push(match (keep, op) {
                (false, _) => r,
                (true, ReduceOp::Sum) => r + d,
                (true, ReduceOp::Max) => r.max(d),
                (true, ReduceOp::Min) => r.min(d),
            });
        }
    }
    out
}

#[test]
fn reduce_every_dim_of_2d_and_3d_fragments() {
    let mut rng = Rng(7);
    for shape in [vec![3usize, 5], vec![1, 7], vec![2, 3, 5], vec![4, 1, 3]] {
        for dim in 0..shape.len() {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                for keep in [false, true] {
                    let shape_i: Vec<i64> = shape.iter().map(|&x| x as i64).collect();
                    let k = reduce_kernel(&shape_i, dim, op, keep, DType::F32, DType::F32);
                    let total: usize = shape.iter().product();
                    let mut dshape = shape.clone();
                    dshape.remove(dim);
                    let dtotal: usize = dshape.iter().product();
                    let x: Vec<f32> = (0..total).map(|_| rng.f32(-4.0, 4.0)).collect();
                    let init: Vec<f32> = (0..dtotal).map(|_| rng.f32(-4.0, 4.0)).collect();
                    let (xb, ib) = (f32_bytes(&x), f32_bytes(&init));
                    let mut ob = vec![0u8; dtotal * 4];
                    launch(&k, &mut [ro(&xb, &shape), ro(&ib, &dshape), rw(&mut ob, &dshape)]).unwrap();
                    let got = bytes_f32(&ob);
                    let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                    let id: Vec<f64> = init.iter().map(|&v| v as f64).collect();
                    let want = reduce_ref(&xd, &shape, dim, op, &id, keep);
                    for i in 0..dtotal {
                        assert!(
                            close(got[i] as f64, want[i], 1e-5, 1e-5),
                            "shape {shape:?} dim {dim} {op:?} keep {keep}: [{i}] {} vs {}",
                            got[i],
                            want[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_f16_into_f32_accumulates_in_f32() {
    // 2048 ones plus one: in f16 the running sum would stick at 2048.
    let shape = [1i64, 2049];
    let k = reduce_kernel(&shape, 1, ReduceOp::Sum, false, DType::F16, DType::F32);
    let x = vec![f16::ONE; 2049];
    let xb = f16_bytes(&x);
    let ib = f32_bytes(&[0.0]);
    let mut ob = vec![0u8; 4];
    launch(&k, &mut [ro(&xb, &[1, 2049]), ro(&ib, &[1]), rw(&mut ob, &[1])]).unwrap();
    assert_eq!(bytes_f32(&ob), vec![2049.0]);
    // Into f16: the f32 total 2049 rounds (to even) to 2048 once, at the end.
    let k = reduce_kernel(&shape, 1, ReduceOp::Sum, false, DType::F16, DType::F16);
    let ib = f16_bytes(&[f16::ZERO]);
    let mut ob = vec![0u8; 2];
    launch(&k, &mut [ro(&xb, &[1, 2049]), ro(&ib, &[1]), rw(&mut ob, &[1])]).unwrap();
    assert_eq!(bytes_f16(&ob), vec![f16::from_f32(2048.0)]);
}

/// `out = in^T` through a 32×32 shared tile.
fn transpose_kernel() -> Kernel {
    const T: i32 = 32;
    let mut k = Kernel::new("transpose", 256);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let inp = k.add_tensor_param("inp", DType::F32, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let out = k.add_tensor_param("out", DType::F32, vec![Extent::Dyn(n), Extent::Dyn(m)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(T));
    k.grid[1] = Expr::cdiv(v(m), Expr::i32(T));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let sh = local(&mut k, "sh", Scope::Shared, DType::F32, &[T as i64, T as i64]);
    let fr = local(&mut k, "fr", Scope::Fragment, DType::F32, &[T as i64, T as i64]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let j = k.add_var("j", DType::I32, VarKind::Loop);
    k.body = vec![
        copy(tile(inp, vec![mul(v(by), Expr::i32(T)), mul(v(bx), Expr::i32(T))]), tile(sh, vec![])),
        st(StmtKind::Barrier),
        pfor(i, T, vec![pfor(j, T, vec![store(fr, vec![v(i), v(j)], Expr::load(sh, vec![v(j), v(i)]))])]),
        copy(tile(fr, vec![]), tile(out, vec![mul(v(bx), Expr::i32(T)), mul(v(by), Expr::i32(T))])),
    ];
    k
}

#[test]
fn shared_memory_transpose() {
    let k = transpose_kernel();
    for (m, n) in [(70usize, 45usize), (32, 32), (1, 33)] {
        let mut rng = Rng(99 + m as u64);
        let x: Vec<f32> = (0..m * n).map(|_| rng.f32(-1.0, 1.0)).collect();
        let xb = f32_bytes(&x);
        let mut ob = f32_bytes(&vec![f32::NAN; m * n]);
        launch(&k, &mut [ro(&xb, &[m, n]), rw(&mut ob, &[n, m])]).unwrap();
        let o = bytes_f32(&ob);
        for r in 0..m {
            for c in 0..n {
                assert_eq!(o[c * m + r], x[r * n + c], "({r}, {c}) of {m}x{n}");
            }
        }
    }
}

/// A histogram of `x` into 16 bins with `atomic_add` (values ≥ 16 fall out of
/// bounds and are skipped), and the sum of `w` into `total[0]`.
fn histogram_kernel() -> Kernel {
    const B: i32 = 128;
    let mut k = Kernel::new("histogram", 128);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::I32, vec![Extent::Dyn(n)], false);
    let w = k.add_tensor_param("w", DType::F32, vec![Extent::Dyn(n)], false);
    let hist = k.add_tensor_param("hist", DType::I32, vec![Extent::Const(16)], true);
    let total = k.add_tensor_param("total", DType::F32, vec![Extent::Const(1)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(B));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let g = k.add_var("g", DType::I32, VarKind::Let);
    k.body = vec![pfor(
        i,
        B,
        vec![
            st(StmtKind::Let { var: g, value: add(mul(v(bx), Expr::i32(B)), v(i)) }),
            st(StmtKind::If {
                cond: lt(v(g), v(n)),
                then: vec![
                    st(StmtKind::AtomicAdd { buf: hist, index: vec![Expr::load(x, vec![v(g)])], value: Expr::i32(1) }),
                    st(StmtKind::AtomicAdd { buf: total, index: vec![Expr::i32(0)], value: Expr::load(w, vec![v(g)]) }),
                ],
                otherwise: vec![],
            }),
        ],
    )];
    k
}

#[test]
fn atomics_histogram_and_sum() {
    let k = histogram_kernel();
    let n = 1001;
    let mut rng = Rng(1234);
    let x: Vec<i32> = (0..n).map(|_| rng.below(20) as i32).collect();
    let w: Vec<f32> = (0..n).map(|_| rng.f32(0.0, 1.0)).collect();
    let (xb, wb) = (i32_bytes(&x), f32_bytes(&w));
    let mut hb = vec![0u8; 16 * 4];
    let mut tb = f32_bytes(&[0.5]);
    launch(&k, &mut [ro(&xb, &[n]), ro(&wb, &[n]), rw(&mut hb, &[16]), rw(&mut tb, &[1])]).unwrap();
    let mut want = [0i32; 16];
    for &b in &x {
        if b < 16 {
            want[b as usize] += 1;
        }
    }
    assert_eq!(bytes_i32(&hb), want.to_vec());
    let sum: f64 = 0.5 + w.iter().map(|&v| v as f64).sum::<f64>();
    let got = bytes_f32(&tb)[0] as f64;
    assert!(close(got, sum, 1e-3, 1e-5), "{got} vs {sum}");
}

/// For each element: `oi = x as i32`, `ou = x as u32`, `oh = x as f16`,
/// `ob = x as bf16`, `ow = (x as i32) as u32 as f32`, in a serial loop with
/// direct global loads and stores.
fn cast_kernel() -> Kernel {
    let mut k = Kernel::new("casts", 32);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(n)], false);
    let oi = k.add_tensor_param("oi", DType::I32, vec![Extent::Dyn(n)], true);
    let ou = k.add_tensor_param("ou", DType::U32, vec![Extent::Dyn(n)], true);
    let oh = k.add_tensor_param("oh", DType::F16, vec![Extent::Dyn(n)], true);
    let ob = k.add_tensor_param("ob", DType::BF16, vec![Extent::Dyn(n)], true);
    let ow = k.add_tensor_param("ow", DType::F32, vec![Extent::Dyn(n)], true);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let xi = || Expr::load(x, vec![v(i)]);
    k.body = vec![sfor(
        i,
        Expr::i32(0),
        v(n),
        vec![
            store(oi, vec![v(i)], Expr::cast(DType::I32, xi())),
            store(ou, vec![v(i)], Expr::cast(DType::U32, xi())),
            store(oh, vec![v(i)], Expr::cast(DType::F16, xi())),
            store(ob, vec![v(i)], Expr::cast(DType::BF16, xi())),
            store(ow, vec![v(i)], Expr::cast(DType::F32, Expr::cast(DType::U32, Expr::cast(DType::I32, xi())))),
        ],
    )];
    k
}

#[test]
fn casts_saturate_and_round_like_rust() {
    let k = cast_kernel();
    let tie = 1.0 + 2f32.powi(-11); // halfway between two f16s: rounds to even (1.0)
    let tie_up = 1.0 + 3.0 * 2f32.powi(-11); // rounds to even (1 + 2^-9)
    let mut x = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        3e9,
        -3e9,
        -1.5,
        2.7,
        -0.0,
        65520.0,
        65519.0,
        tie,
        tie_up,
        1e-8,
        4294967296.0,
    ];
    let mut rng = Rng(5);
    x.extend((0..50).map(|_| rng.f32(-1e5, 1e5)));
    let n = x.len();
    let xb = f32_bytes(&x);
    let (mut bi, mut bu, mut bh, mut bb, mut bw) =
        (vec![0u8; 4 * n], vec![0u8; 4 * n], vec![0u8; 2 * n], vec![0u8; 2 * n], vec![0u8; 4 * n]);
    launch(
        &k,
        &mut [
            ro(&xb, &[n]),
            rw(&mut bi, &[n]),
            rw(&mut bu, &[n]),
            rw(&mut bh, &[n]),
            rw(&mut bb, &[n]),
            rw(&mut bw, &[n]),
        ],
    )
    .unwrap();
    let (gi, gu, gh, gw) = (bytes_i32(&bi), bytes_u32(&bu), bytes_f16(&bh), bytes_f32(&bw));
    let gb: Vec<bf16> = bb.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect();
    for (j, &xv) in x.iter().enumerate() {
        assert_eq!(gi[j], xv as i32, "{xv} as i32");
        assert_eq!(gu[j], xv as u32, "{xv} as u32");
        assert_eq!(gh[j].to_bits(), f16::from_f32(xv).to_bits(), "{xv} as f16");
        assert_eq!(gb[j].to_bits(), bf16::from_f32(xv).to_bits(), "{xv} as bf16");
        assert_eq!(gw[j], (xv as i32) as u32 as f32, "{xv} as i32 as u32 as f32");
    }
    // Spot checks independent of `half`.
    assert_eq!(gi[0], 0); // NaN
    assert_eq!(gi[3], i32::MAX);
    assert_eq!(gi[4], i32::MIN);
    assert_eq!(gu[5], 0); // -1.5 as u32
    assert_eq!(gi[5], -1);
    assert!(gh[8].is_infinite()); // 65520 rounds up past f16::MAX
    assert_eq!(gh[9].to_f32(), 65504.0);
    assert_eq!(gh[10].to_f32(), 1.0);
    assert_eq!(gh[11].to_f32(), 1.0 + 2f32.powi(-9));
    assert_eq!(gw[2], 2147483648.0); // i32::MIN as u32
}

/// f16 arithmetic rounds after every operation: `h = h * h + h` on an f16
/// fragment, then back to f32.
#[test]
fn f16_arithmetic_rounds_each_step() {
    let mut k = Kernel::new("f16_math", 64);
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Const(100)], false);
    let y = k.add_tensor_param("y", DType::F32, vec![Extent::Const(100)], true);
    let h = local(&mut k, "h", Scope::Fragment, DType::F16, &[128]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let hi = || Expr::load(h, vec![v(i)]);
    k.body = vec![
        copy(tile(x, vec![Expr::i32(0)]), tile(h, vec![])),
        pfor(i, 128, vec![store(h, vec![v(i)], add(mul(hi(), hi()), hi()))]),
        copy(tile(h, vec![]), tile(y, vec![Expr::i32(0)])),
    ];
    let mut rng = Rng(11);
    let xs: Vec<f32> = (0..100).map(|_| rng.f32(-3.0, 3.0)).collect();
    let xb = f32_bytes(&xs);
    let mut yb = vec![0u8; 400];
    launch(&k, &mut [ro(&xb, &[100]), rw(&mut yb, &[100])]).unwrap();
    let got = bytes_f32(&yb);
    let mut differs_from_f32 = 0;
    for j in 0..100 {
        let a = f16::from_f32(xs[j]);
        let sq = f16::from_f32(a.to_f32() * a.to_f32());
        let want = f16::from_f32(sq.to_f32() + a.to_f32());
        assert_eq!(got[j], want.to_f32(), "element {j}");
        let unrounded = f16::from_f32(a.to_f32() * a.to_f32() + a.to_f32());
        differs_from_f32 += (unrounded != want) as usize;
    }
    // The test sees intermediate rounding only if some inputs are sensitive to it.
    assert!(differs_from_f32 > 0);
}

/// Serial loops, `let mut`, `if`/`else`, `select`, pipelined loops, direct
/// global loads/stores (out of bounds: 0 and skipped).
#[test]
fn serial_scan_with_if_else() {
    let mut k = Kernel::new("scan", 32);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::I32, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let y = k.add_tensor_param("y", DType::I32, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k.grid[0] = v(m);
    let r = k.add_var("r", DType::I32, VarKind::BlockIdx(0));
    let acc = k.add_var("acc", DType::I32, VarKind::Mut);
    let j = k.add_var("j", DType::I32, VarKind::Loop);
    let e = k.add_var("e", DType::I32, VarKind::Let);
    let big = k.add_var("big", DType::I32, VarKind::Let);
    let xe = Expr::load(x, vec![v(r), v(j)]);
    k.body = vec![
        st(StmtKind::Let { var: acc, value: Expr::i32(0) }),
        st(StmtKind::For {
            var: j,
            // from -2 to N+2: the loads out of bounds give 0, the stores are skipped
            start: Expr::i32(-2),
            end: add(v(n), Expr::i32(2)),
            kind: LoopKind::Pipelined { stages: 2 },
            body: vec![
                st(StmtKind::Let { var: e, value: xe }),
                st(StmtKind::If {
                    cond: lt(v(e), Expr::i32(0)),
                    then: vec![st(StmtKind::Assign { var: acc, value: sub(v(acc), mul(v(e), Expr::i32(2))) })],
                    otherwise: vec![st(StmtKind::Assign {
                        var: acc,
                        value: add(v(acc), Expr::binary(BinOp::Div, v(e), Expr::i32(3))),
                    })],
                }),
                st(StmtKind::Let {
                    var: big,
                    value: Expr::Select {
                        cond: Box::new(Expr::binary(BinOp::Gt, v(acc), Expr::i32(100))),
                        then: Box::new(Expr::binary(BinOp::Rem, v(acc), Expr::i32(7))),
                        otherwise: Box::new(v(acc)),
                    },
                }),
                store(y, vec![v(r), v(j)], v(big)),
            ],
        }),
    ];
    let (mm, nn) = (6usize, 13usize);
    let mut rng = Rng(77);
    let xs: Vec<i32> = (0..mm * nn).map(|_| rng.below(200) as i32 - 100).collect();
    let xb = i32_bytes(&xs);
    let mut yb = i32_bytes(&vec![-999; mm * nn]);
    launch(&k, &mut [ro(&xb, &[mm, nn]), rw(&mut yb, &[mm, nn])]).unwrap();
    let got = bytes_i32(&yb);
    for row in 0..mm {
        let mut acc = 0i32;
        for c in 0..nn {
            let e = xs[row * nn + c];
            if e < 0 {
                acc -= e * 2;
            } else {
                acc += e / 3;
            }
            let want = if acc > 100 { acc % 7 } else { acc };
            assert_eq!(got[row * nn + c], want, "({row}, {c})");
        }
    }
}

/// Block indices along x, y and z, over a 3-D grid.
#[test]
fn three_dimensional_grid() {
    let mut k = Kernel::new("grid3", 32);
    let z = k.add_dim("Z");
    let y = k.add_dim("Y");
    let x = k.add_dim("X");
    let out = k.add_tensor_param("out", DType::I32, vec![Extent::Dyn(z), Extent::Dyn(y), Extent::Dyn(x)], true);
    k.grid = [v(x), v(y), v(z)];
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let bz = k.add_var("bz", DType::I32, VarKind::BlockIdx(2));
    k.body = vec![store(
        out,
        vec![v(bz), v(by), v(bx)],
        add(add(v(bx), mul(v(by), Expr::i32(10))), mul(v(bz), Expr::i32(100))),
    )];
    let mut ob = vec![0u8; 3 * 4 * 5 * 4];
    launch(&k, &mut [rw(&mut ob, &[3, 4, 5])]).unwrap();
    let got = bytes_i32(&ob);
    for a in 0..3 {
        for b in 0..4 {
            for c in 0..5 {
                assert_eq!(got[(a * 4 + b) * 5 + c], (c + 10 * b + 100 * a) as i32);
            }
        }
    }
}

/// Integer semantics: wrapping, truncating division, shifts as PTX.
#[test]
fn integer_semantics() {
    let mut k = Kernel::new("ints", 32);
    let a = k.add_scalar_param("a", DType::I32);
    let b = k.add_scalar_param("b", DType::I32);
    let out = k.add_tensor_param("out", DType::I32, vec![Extent::Const(8)], true);
    let ops = [BinOp::Add, BinOp::Mul, BinOp::Div, BinOp::Rem, BinOp::Shl, BinOp::Shr, BinOp::Xor, BinOp::Min];
    k.body = ops
        .iter()
        .enumerate()
        .map(|(i, &op)| store(out, vec![Expr::i32(i as i32)], Expr::binary(op, v(a), v(b))))
        .collect();
    let cases = [(i32::MAX, 1), (-7, 2), (i32::MIN, -1), (-1, 40), (5, -3), (-8, 31)];
    for (x, y) in cases {
        let mut ob = vec![0u8; 32];
        launch(&k, &mut [Arg::Scalar(Value::I32(x)), Arg::Scalar(Value::I32(y)), rw(&mut ob, &[8])]).unwrap();
        let s = y as u32;
        let want = [
            x.wrapping_add(y),
            x.wrapping_mul(y),
            x.wrapping_div(y),
            x.wrapping_rem(y),
            if s >= 32 { 0 } else { x << s },
            x >> s.min(31),
            x ^ y,
            x.min(y),
        ];
        assert_eq!(bytes_i32(&ob), want.to_vec(), "a = {x}, b = {y}");
    }
    // Division by zero is an error, not a panic.
    let mut ob = vec![0u8; 32];
    let e = launch(&k, &mut [Arg::Scalar(Value::I32(1)), Arg::Scalar(Value::I32(0)), rw(&mut ob, &[8])]).unwrap_err();
    assert!(e.0.contains("division by zero") && e.0.contains("block (0, 0, 0)"), "{e}");
}

#[test]
fn run_time_errors_are_reported() {
    let k = vector_add(256);
    let a = f32_bytes(&[1.0; 10]);
    let b = f32_bytes(&[1.0; 10]);
    // A mutable tensor passed read-only: error at the write.
    let c = f32_bytes(&[0.0; 10]);
    let e = launch(&k, &mut [ro(&a, &[10]), ro(&b, &[10]), ro(&c, &[10])]).unwrap_err();
    assert!(e.0.contains("`c`") && e.0.contains("read-only"), "{e}");
    // Wrong byte length.
    let mut c = vec![0u8; 39];
    let e = interp::run(&k, &mut [ro(&a, &[10]), ro(&b, &[10]), rw(&mut c, &[10])], &[10], [1, 1, 1]).unwrap_err();
    assert!(e.0.contains("needs 40 bytes, got 39"), "{e}");
    // Shape disagreeing with dims.
    let mut c = vec![0u8; 40];
    let e = interp::run(&k, &mut [ro(&a, &[10]), ro(&b, &[10]), rw(&mut c, &[10])], &[11], [1, 1, 1]).unwrap_err();
    assert!(e.0.contains("tensor `a` expects shape [11], got [10]"), "{e}");
    // Wrong arity, wrong kind.
    let e = interp::run(&k, &mut [ro(&a, &[10])], &[10], [1, 1, 1]).unwrap_err();
    assert!(e.0.contains("takes 3 arguments, got 1"), "{e}");
    let e = interp::run(&k, &mut [ro(&a, &[10]), Arg::Scalar(Value::F32(1.0)), rw(&mut c, &[10])], &[10], [1, 1, 1])
        .unwrap_err();
    assert!(e.0.contains("`b` must be a tensor"), "{e}");
    // A kernel that does not verify.
    let mut bad = vector_add(256);
    bad.threads = 100;
    let e = interp::run(&bad, &mut [ro(&a, &[10]), ro(&b, &[10]), rw(&mut c, &[10])], &[10], [1, 1, 1]).unwrap_err();
    assert!(e.0.contains("does not verify") && e.0.contains("multiple of 32"), "{e}");
}

#[test]
fn shared_out_of_bounds_is_an_error() {
    let mut k = Kernel::new("oob", 32);
    let out = k.add_tensor_param("out", DType::F32, vec![Extent::Const(4)], true);
    let sh = local(&mut k, "sh", Scope::Shared, DType::F32, &[4]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    k.body = vec![
        sfor(i, Expr::i32(0), Expr::i32(5), vec![store(sh, vec![v(i)], Expr::f32(1.0))]),
        copy(tile(sh, vec![]), tile(out, vec![Expr::i32(0)])),
    ];
    let mut ob = vec![0u8; 16];
    let e = launch(&k, &mut [rw(&mut ob, &[4])]).unwrap_err();
    assert!(e.0.contains("index [4] is out of bounds for shared buffer `sh` of shape [4]"), "{e}");
}

/// Copies with a rank-1 fragment into a 3-D tensor (a window of the last dim,
/// the leading two squeezed), negative origins, conversion f32 → i32, and
/// fills of f16 shared buffers.
#[test]
fn copy_windows_of_the_last_dim_are_masked() {
    let mut k = Kernel::new("window", 32);
    let t = k.add_tensor_param("t", DType::I32, vec![Extent::Const(2), Extent::Const(3), Extent::Const(5)], true);
    let f = local(&mut k, "f", Scope::Fragment, DType::F32, &[4]);
    let sh = local(&mut k, "sh", Scope::Shared, DType::F16, &[4]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    k.body = vec![
        st(StmtKind::Fill { buf: sh, value: Expr::Const(Value::F16(f16::from_f32(2.5))) }),
        copy(tile(sh, vec![]), tile(f, vec![])),
        pfor(i, 4, vec![store(f, vec![v(i)], add(Expr::load(f, vec![v(i)]), Expr::cast(DType::F32, v(i))))]),
        // f = [2.5, 3.5, 4.5, 5.5] → i32 [2, 3, 4, 5], written at t[1, 2, 3..7] (two masked)
        copy(
            tile(f, vec![]),
            TileRef { buf: t, origin: vec![Expr::i32(1), Expr::i32(2), Expr::i32(3)], squeezed: vec![0, 1] },
        ),
        // and at t[0, 0, -2..2] (two masked on the left)
        copy(
            tile(f, vec![]),
            TileRef { buf: t, origin: vec![Expr::i32(0), Expr::i32(0), Expr::i32(-2)], squeezed: vec![0, 1] },
        ),
        // and nowhere (row out of range)
        copy(
            tile(f, vec![]),
            TileRef { buf: t, origin: vec![Expr::i32(2), Expr::i32(0), Expr::i32(0)], squeezed: vec![0, 1] },
        ),
    ];
    let mut tb = vec![0u8; 30 * 4];
    launch(&k, &mut [rw(&mut tb, &[2, 3, 5])]).unwrap();
    let got = bytes_i32(&tb);
    let mut want = vec![0; 30];
    want[15 + 10 + 3] = 2;
    want[15 + 10 + 4] = 3;
    want[0] = 4;
    want[1] = 5;
    assert_eq!(got, want);
}

/// Windows with a squeezed middle dim and a squeezed innermost dim (a
/// strided column), against an element-by-element reference, with edges.
#[test]
fn copy_windows_with_squeezed_inner_dims() {
    let mut k = Kernel::new("squeeze", 32);
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Const(3), Extent::Const(4), Extent::Const(5)], false);
    let y = k.add_tensor_param("y", DType::F32, vec![Extent::Const(3), Extent::Const(4), Extent::Const(5)], true);
    let f = local(&mut k, "f", Scope::Fragment, DType::F32, &[2, 3]);
    let g = local(&mut k, "g", Scope::Fragment, DType::F32, &[4]);
    let o = |a: i32, b: i32, c: i32| vec![Expr::i32(a), Expr::i32(b), Expr::i32(c)];
    k.body = vec![
        // x[2.., 1, 3..] is [2, 3] at rows 2, 3 (3 masked) and columns 3, 4, 5 (5 masked)
        copy(TileRef { buf: x, origin: o(2, 1, 3), squeezed: vec![1] }, tile(f, vec![])),
        copy(tile(f, vec![]), TileRef { buf: y, origin: o(0, 2, 0), squeezed: vec![1] }),
        // x[1, 1.., 4] strided (rows 1..5 of column 4, row 4 masked) into y[2, 0.., 2]
        copy(TileRef { buf: x, origin: o(1, 1, 4), squeezed: vec![0, 2] }, tile(g, vec![])),
        copy(tile(g, vec![]), TileRef { buf: y, origin: o(2, 0, 2), squeezed: vec![0, 2] }),
        // a squeezed index out of range masks the whole window
        copy(tile(g, vec![]), TileRef { buf: y, origin: o(3, 0, 0), squeezed: vec![0, 2] }),
    ];
    tile_ir::verify::verify(&k).unwrap();
    let xs: Vec<f32> = (0..60).map(|i| i as f32 + 0.5).collect();
    let xb = f32_bytes(&xs);
    let mut yb = f32_bytes(&[-1.0; 60]);
    launch(&k, &mut [ro(&xb, &[3, 4, 5]), rw(&mut yb, &[3, 4, 5])]).unwrap();
    let got = bytes_f32(&yb);
    let at = |a: usize, b: usize, c: usize| (a * 4 + b) * 5 + c;
    let mut want = vec![-1.0f32; 60];
    for i in 0..2 {
        for j in 0..3 {
            // f[i, j] = x[2 + i, 1, 3 + j] or 0 when masked; written at y[i, 2, j].
            let v = if 2 + i < 3 && 3 + j < 5 { xs[at(2 + i, 1, 3 + j)] } else { 0.0 };
            want[at(i, 2, j)] = v;
        }
    }
    for r in 0..4 {
        let v = if 1 + r < 4 { xs[at(1, 1 + r, 4)] } else { 0.0 };
        want[at(2, r, 2)] = v;
    }
    assert_eq!(got, want);
}

/// A kernel written in the text form, parsed and run.
#[test]
fn kernel_from_text_runs() {
    let text = r#"
kernel scale_relu<%0 N>(@0 x: &f32[N], @1 y: &mut f32[N], %1 s: f32) threads=128 grid=((N + 127) / 128, 1, 1) {
  %2 bx = block_idx.x
  @2 t: fragment f32[128]
  copy x[bx * 128] -> t
  for %3 i in parallel 0..128 {
    t[i] = max(t[i] * s, 0.0)
  }
  copy t -> y[bx * 128]
}
"#;
    let k = tile_ir::print::parse_kernel(text).unwrap();
    tile_ir::verify::verify(&k).unwrap();
    let n = 300;
    let mut rng = Rng(3);
    let x: Vec<f32> = (0..n).map(|_| rng.f32(-1.0, 1.0)).collect();
    let xb = f32_bytes(&x);
    let mut yb = vec![0u8; 4 * n];
    launch(&k, &mut [ro(&xb, &[n]), rw(&mut yb, &[n]), Arg::Scalar(Value::F32(1.5))]).unwrap();
    let y = bytes_f32(&yb);
    for i in 0..n {
        assert_eq!(y[i], (x[i] * 1.5).max(0.0));
    }
}

/// Math intrinsics on f32 (as std) and f16 (computed in f32, rounded), and
/// `select` evaluating only the chosen operand.
#[test]
fn math_intrinsics_and_select() {
    let ops = [UnOp::Exp2, UnOp::Exp, UnOp::Log2, UnOp::Log, UnOp::Abs, UnOp::Sqrt, UnOp::Rsqrt, UnOp::Neg];
    let reference = |op: UnOp, x: f32| match op {
        UnOp::Exp2 => x.exp2(),
        UnOp::Exp => x.exp(),
        UnOp::Log2 => x.log2(),
        UnOp::Log => x.ln(),
        UnOp::Abs => x.abs(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        _ => -x,
    };
    for dtype in [DType::F32, DType::F16] {
        let mut k = Kernel::new("math", 32);
        let x = k.add_tensor_param("x", DType::F32, vec![Extent::Const(64)], false);
        let y = k.add_tensor_param("y", DType::F32, vec![Extent::Const(8), Extent::Const(64)], true);
        let i = k.add_var("i", DType::I32, VarKind::Loop);
        let xi = Expr::cast(dtype, Expr::load(x, vec![v(i)]));
        k.body = vec![sfor(
            i,
            Expr::i32(0),
            Expr::i32(64),
            ops.iter()
                .enumerate()
                .map(|(r, &op)| {
                    store(y, vec![Expr::i32(r as i32), v(i)], Expr::cast(DType::F32, Expr::unary(op, xi.clone())))
                })
                .collect(),
        )];
        let mut rng = Rng(8);
        let xs: Vec<f32> = (0..64).map(|_| rng.f32(-4.0, 4.0)).collect();
        let xb = f32_bytes(&xs);
        let mut yb = vec![0u8; 8 * 64 * 4];
        launch(&k, &mut [ro(&xb, &[64]), rw(&mut yb, &[8, 64])]).unwrap();
        let got = bytes_f32(&yb);
        for (r, &op) in ops.iter().enumerate() {
            for c in 0..64 {
                let want = match dtype {
                    DType::F32 => reference(op, xs[c]),
                    _ => f16::from_f32(reference(op, f16::from_f32(xs[c]).to_f32())).to_f32(),
                };
                let g = got[r * 64 + c];
                assert!(g == want || (g.is_nan() && want.is_nan()), "{dtype} {op:?}({}) = {g}, want {want}", xs[c]);
            }
        }
    }

    // select(d != 0, 10 / d, -1): the division is not evaluated when d == 0.
    let mut k = Kernel::new("sel", 32);
    let d = k.add_scalar_param("d", DType::I32);
    let out = k.add_tensor_param("out", DType::I32, vec![Extent::Const(1)], true);
    k.body = vec![store(
        out,
        vec![Expr::i32(0)],
        Expr::Select {
            cond: Box::new(Expr::binary(BinOp::Ne, v(d), Expr::i32(0))),
            then: Box::new(Expr::binary(BinOp::Div, Expr::i32(10), v(d))),
            otherwise: Box::new(Expr::i32(-1)),
        },
    )];
    for (dv, want) in [(0, -1), (3, 3), (-4, -2)] {
        let mut ob = vec![0u8; 4];
        launch(&k, &mut [Arg::Scalar(Value::I32(dv)), rw(&mut ob, &[1])]).unwrap();
        assert_eq!(bytes_i32(&ob), vec![want]);
    }
}

/// Local buffers, bf16 shared memory, copies between non-global buffers with
/// conversion, fills.
#[test]
fn local_and_bf16_buffers() {
    let mut k = Kernel::new("bufs", 32);
    let x = k.add_tensor_param("x", DType::F32, vec![Extent::Const(4), Extent::Const(3)], false);
    let y = k.add_tensor_param("y", DType::F32, vec![Extent::Const(4), Extent::Const(3)], true);
    let sh = local(&mut k, "sh", Scope::Shared, DType::BF16, &[4, 3]);
    let fr = local(&mut k, "fr", Scope::Fragment, DType::F32, &[4, 3]);
    let lo = local(&mut k, "lo", Scope::Local, DType::I32, &[3]);
    let (i, j, c) = (
        k.add_var("i", DType::I32, VarKind::Loop),
        k.add_var("j", DType::I32, VarKind::Loop),
        k.add_var("c", DType::I32, VarKind::Loop),
    );
    k.body = vec![
        st(StmtKind::Fill { buf: lo, value: Expr::i32(5) }),
        sfor(
            c,
            Expr::i32(1),
            Expr::i32(3),
            vec![store(lo, vec![v(c)], mul(Expr::load(lo, vec![sub(v(c), Expr::i32(1))]), Expr::i32(2)))],
        ),
        copy(tile(x, vec![Expr::i32(0), Expr::i32(0)]), tile(sh, vec![])),
        copy(tile(sh, vec![]), tile(fr, vec![])),
        pfor(
            i,
            4,
            vec![pfor(
                j,
                3,
                vec![store(
                    fr,
                    vec![v(i), v(j)],
                    add(Expr::load(fr, vec![v(i), v(j)]), Expr::cast(DType::F32, Expr::load(lo, vec![v(j)]))),
                )],
            )],
        ),
        copy(tile(fr, vec![]), tile(y, vec![Expr::i32(0), Expr::i32(0)])),
    ];
    let xs: Vec<f32> = (0..12).map(|q| 1.0 + q as f32 / 300.0).collect();
    let xb = f32_bytes(&xs);
    let mut yb = vec![0u8; 48];
    launch(&k, &mut [ro(&xb, &[4, 3]), rw(&mut yb, &[4, 3])]).unwrap();
    let got = bytes_f32(&yb);
    let lo_vals = [5.0f32, 10.0, 20.0];
    for q in 0..12 {
        assert_eq!(got[q], bf16::from_f32(xs[q]).to_f32() + lo_vals[q % 3], "element {q}");
    }
}

//! Semantic tests of the generated Thread IR: kernels run on a block-level
//! simulator (`sim`) with random inputs of awkward sizes and are compared
//! with references computed here. The simulator fails on any out-of-bounds
//! or misaligned global/shared access, on divergent barriers and shuffles.
// References index several arrays by one element number, as the kernels do.
#![allow(clippy::needless_range_loop)]

mod kernels;
mod sim;

use half::{bf16, f16};
use kernels::*;
use tile_ir::*;
use tile_testkit::Rng;

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
fn bytes_f16(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| f16::from_f32(*x).to_bits().to_le_bytes()).collect()
}
fn bytes_bf16(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| bf16::from_f32(*x).to_bits().to_le_bytes()).collect()
}
fn f16s(b: &[u8]) -> Vec<f32> {
    b.chunks(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
}
#[allow(dead_code)]
fn bf16s(b: &[u8]) -> Vec<f32> {
    b.chunks(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
}

/// Runs `k` on the simulator. `tensors` in tensor-parameter order, `dims` in
/// `kernel.dims` order, `scalars` (bit patterns) in scalar-parameter order.
fn run(k: &Kernel, target: Target, tensors: Vec<Vec<u8>>, dims: &[i64], scalars: &[u64]) -> Vec<Vec<u8>> {
    let c = compile(k, target).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    sim::launch(&c.function, k, tensors, dims, scalars).tensors
}

fn close(got: f32, want: f64, rel: f64, what: &str) {
    let err = (got as f64 - want).abs();
    assert!(err <= rel * want.abs().max(1e-3) + 1e-6, "{what}: got {got}, want {want}");
}

#[test]
fn vector_add_matches_reference_at_awkward_sizes() {
    let mut rng = Rng(0x1234_5678);
    for (threads, block) in [(256u32, 1024i64), (128, 256), (64, 96), (96, 256)] {
        let k = vector_add(threads, block);
        for n in [1usize, 3, 4, 1000, 1023, 1024, 1025, 3001] {
            let a: Vec<f32> = (0..n).map(|_| rng.f32(-10.0, 10.0)).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.f32(-10.0, 10.0)).collect();
            let out = run(&k, Target::Sm80, vec![bytes_f32(&a), bytes_f32(&b), vec![0u8; 4 * n]], &[n as i64], &[]);
            let c = f32s(&out[2]);
            for i in 0..n {
                assert_eq!(c[i], a[i] + b[i], "threads {threads} block {block} n {n} i {i}");
            }
        }
    }
}

#[test]
fn softmax_matches_reference() {
    let mut rng = Rng(42);
    for (threads, bn) in [(256u32, 4096i64), (128, 1024), (64, 100), (96, 512)] {
        let k = softmax(threads, bn);
        for (m, n) in [(3usize, bn as usize), (2, (bn as usize * 3) / 4), (2, bn as usize - 1), (1, 8), (2, 1)] {
            let x: Vec<f32> = (0..m * n).map(|_| rng.f32(-4.0, 4.0)).collect();
            let out = run(&k, Target::Sm80, vec![bytes_f16(&x), vec![0u8; 2 * m * n]], &[m as i64, n as i64], &[]);
            let y = f16s(&out[1]);
            for r in 0..m {
                let row: Vec<f64> = (0..n).map(|j| f16::from_f32(x[r * n + j]).to_f64()).collect();
                let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
                for j in 0..n {
                    close(
                        y[r * n + j],
                        (row[j] - mx).exp() / sum,
                        2e-3,
                        &format!("softmax t{threads} bn{bn} m{m} n{n} [{r},{j}]"),
                    );
                }
            }
        }
    }
}

#[test]
fn reductions_match_reference_along_every_dim() {
    let mut rng = Rng(7);
    let cases: &[&[i64]] =
        &[&[4, 64], &[16, 256], &[3, 100], &[64, 8], &[2, 4, 8], &[8, 3, 64], &[4, 32, 32], &[1, 1024], &[5, 7, 9]];
    for shape in cases {
        for dim in 0..shape.len() {
            for (op, dt, threads) in [
                (ReduceOp::Sum, DType::F32, 128u32),
                (ReduceOp::Max, DType::F16, 256),
                (ReduceOp::Min, DType::BF16, 64),
                (ReduceOp::Sum, DType::F32, 96),
            ] {
                let k = reduce_kernel(shape, dim, op, dt, threads);
                let total: usize = shape.iter().product::<i64>() as usize;
                let x: Vec<f32> = (0..total).map(|_| rng.f32(-3.0, 3.0)).collect();
                let (xb, xr): (Vec<u8>, Vec<f64>) = match dt {
                    DType::F32 => (bytes_f32(&x), x.iter().map(|v| *v as f64).collect()),
                    DType::F16 => (bytes_f16(&x), x.iter().map(|v| f16::from_f32(*v).to_f64()).collect()),
                    _ => (bytes_bf16(&x), x.iter().map(|v| bf16::from_f32(*v).to_f64()).collect()),
                };
                let mut rshape = shape.to_vec();
                rshape.remove(dim);
                let rn: usize = rshape.iter().product::<i64>() as usize;
                let dims: Vec<i64> = shape.to_vec();
                for target in [Target::Sm80, Target::Sm90a] {
                    let out = run(&k, target, vec![xb.clone(), vec![0u8; 4 * rn]], &dims, &[]);
                    let y = f32s(&out[1]);
                    // Reference: out[rest] = op(1.0, reduce over dim).
                    let strides: Vec<usize> =
                        (0..shape.len()).map(|d| shape[d + 1..].iter().product::<i64>() as usize).collect();
                    for o in 0..rn {
                        // Unflatten o over rshape, insert dim.
                        let mut idx = vec![0usize; shape.len()];
                        let mut rem = o;
                        for (a, d) in
                            (0..shape.len()).filter(|d| *d != dim).enumerate().collect::<Vec<_>>().into_iter().rev()
                        {
                            idx[d] = rem % rshape[a] as usize;
                            rem /= rshape[a] as usize;
                        }
                        let mut acc = 1.0f64;
                        for kk in 0..shape[dim] as usize {
                            idx[dim] = kk;
                            let f: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
                            let v = xr[f];
                            acc = match op {
                                ReduceOp::Sum => acc + v,
                                ReduceOp::Max => acc.max(v),
                                ReduceOp::Min => acc.min(v),
                            };
                        }
                        close(y[o], acc, 1e-5, &format!("{} shape {shape:?} dim {dim} out {o}", k.name));
                    }
                }
            }
        }
    }
}

#[test]
fn transpose_through_shared_matches_reference() {
    let k = shared_transpose(128, 32, 64);
    for (m, n) in [(50usize, 70usize), (32, 64), (1, 3), (65, 129)] {
        let a: Vec<f32> = (0..m * n).map(|i| (i % 2000) as f32).collect();
        let out = run(&k, Target::Sm80, vec![bytes_f16(&a), vec![0u8; 2 * m * n]], &[m as i64, n as i64], &[]);
        let b = f16s(&out[1]);
        for i in 0..m {
            for j in 0..n {
                assert_eq!(b[j * m + i], f16::from_f32(a[i * n + j]).to_f32(), "m {m} n {n} at ({i},{j})");
            }
        }
    }
}

#[test]
fn serial_loop_if_locals_atomics_match_reference() {
    let k = loop_kernel(256);
    let mut rng = Rng(99);
    for (n, lim, alpha, h) in
        [(1000usize, 2u32, 0.5f32, 1.5f32), (256, 0, -1.25, 2.0), (1, 5, 2.0, -3.0), (2000, 3, 1.0, 0.25)]
    {
        for target in [Target::Sm80, Target::Sm90a] {
            let x: Vec<f32> = (0..n).map(|_| rng.f32(-2.0, 2.0)).collect();
            let total0 = [10.0f32, 0.0, 0.0, 0.0];
            let counts0 = [0i32, 100, 0, 0];
            let scalars = [alpha.to_bits() as u64, lim as u64, f16::from_f32(h).to_bits() as u64];
            let counts_b: Vec<u8> = counts0.iter().flat_map(|c| c.to_le_bytes()).collect();
            let out = run(&k, target, vec![bytes_bf16(&x), bytes_f32(&total0), counts_b], &[n as i64], &scalars);
            let total = f32s(&out[1]);
            let counts = i32s(&out[2]);
            // Reference.
            let xr: Vec<f32> = x.iter().map(|v| bf16::from_f32(*v).to_f32()).collect();
            let tiles = n.div_ceil(256);
            let mut acc = [0f32; 256];
            let mut cnt = 0i32;
            let mut loc = [0i32; 4];
            for it in 0..tiles {
                for j in 0..256 {
                    let xv = xr.get(it * 256 + j).copied().unwrap_or(0.0);
                    acc[j] = xv.mul_add(alpha, acc[j]);
                }
                if (it as u32) < lim {
                    cnt += 1
                } else {
                    cnt -= 1
                }
                loc[it % 4] = cnt;
            }
            let red: f64 = acc.iter().map(|v| *v as f64).sum();
            let q = f16::from_f32(h).to_f32() * loc[1] as f32;
            close(total[1], red, 1e-4, "red");
            close(total[0], 10.0 + q.abs().sqrt() as f64, 1e-6, "atomic f32");
            assert_eq!(counts[1], 100 + cnt);
            assert_eq!(counts[2], alpha.exp() as i32);
            assert_eq!(counts[0], 0);
            assert_eq!(counts[3], 0);
        }
    }
}

#[test]
fn casts_and_integer_ops_match_rust_semantics() {
    let k = casts_kernel(128, 512);
    let mut rng = Rng(5);
    for n in [700usize, 512, 3] {
        let mut x: Vec<f32> = (0..n).map(|_| rng.f32(-70000.0, 70000.0)).collect();
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9, -3e9, -0.7, 0.7, 65519.0, 1e-8, -2.6];
        for (i, s) in specials.iter().enumerate() {
            if i < n {
                x[i] = *s;
            }
        }
        for target in [Target::Sm80, Target::Sm90a] {
            let z = |b: usize| vec![0u8; b * n];
            let out = run(&k, target, vec![bytes_f32(&x), z(4), z(4), z(2), z(2), z(4), z(4)], &[n as i64], &[]);
            let oi = i32s(&out[1]);
            let ou: Vec<u32> = i32s(&out[2]).iter().map(|v| *v as u32).collect();
            let oh = &out[3];
            let ob = &out[4];
            let od = i32s(&out[5]);
            let of = f32s(&out[6]);
            for g in 0..n {
                let xv = x[g];
                assert_eq!(oi[g], xv as i32, "f32→i32 of {xv}");
                assert_eq!(ou[g], xv as u32, "f32→u32 of {xv}");
                let hb = u16::from_le_bytes([oh[2 * g], oh[2 * g + 1]]);
                assert_eq!(hb, f16::from_f32(xv).to_bits(), "f32→f16 of {xv}");
                let bb = u16::from_le_bytes([ob[2 * g], ob[2 * g + 1]]);
                assert_eq!(bb, bf16::from_f32(xv * 3.0).to_bits(), "f32→bf16 of {}", xv * 3.0);
                let c = g as i32 - 500;
                assert_eq!(od[g], c / 7 + (c % 7) * 1000, "int div/rem at {g}");
                let want = if xv >= 0.0 {
                    xv.sqrt()
                } else {
                    bf16::from_f32(xv).to_f32() + f16::from_f32(xv).to_f32().max(-2.5)
                };
                if want.is_nan() {
                    assert!(of[g].is_nan(), "select at {g}: {}", of[g]);
                } else {
                    assert_eq!(of[g], want, "select/cast chain of {xv}");
                }
            }
        }
    }
}

/// Divisions by expressions of dimensions only are multiplies by the magic
/// numbers the launch passes (`abi::divisor_args`): the same results as
/// `i32::wrapping_div`/`wrapping_rem` for divisors of either sign and
/// dividends of either sign, with `fast_divisors` on (no `div.s32` left) and
/// off (the parameters still there, unused); divisions by constants (a power
/// of two, a negative one, u32) are shifts and multiplies.
#[test]
fn divisions_by_dims_match_rust_semantics() {
    let k = dims_divisors_kernel(128, 256);
    let divisors: Vec<String> = abi::dims_divisors(&k).iter().map(|e| tile_ir::print::print_expr(&k, e)).collect();
    // The grid's x extent first (a persistent variant unfolds its tiles by it).
    assert_eq!(divisors, ["(N + (256 - 1)) / 256", "D - 5", "D", "N / D"]);
    let off = tile_ir::CompileOptions { fast_divisors: false, ..Default::default() };
    for target in [Target::Sm80, Target::Sm90a] {
        let fast = compile(&k, target).unwrap();
        let slow = tile_ir::compile_with(&k, target, off).unwrap();
        assert!(!fast.ptx.contains("div.s32") && !fast.ptx.contains("rem.s32"), "{}", fast.ptx);
        assert!(fast.ptx.contains("mul.hi.u32"));
        assert!(slow.ptx.contains("div.s32") && slow.ptx.contains("rem.s32"));
        assert_eq!(fast.function.params, slow.function.params, "the parameters do not depend on the option");
        for c in [&fast, &slow] {
            for (n, d) in [(700usize, 1usize), (700, 4), (1000, 6), (9, 7), (700, 12), (1500, 1000), (700, 3), (900, 2)]
            {
                let z = vec![0xAAu8; 4 * n];
                let dims = [n as i64, d as i64];
                let mut tensors = vec![vec![0u8; 4 * d]];
                tensors.extend(std::iter::repeat_n(z, 6));
                let out = sim::launch(&c.function, &k, tensors, &dims, &[]).tensors;
                let (q, r, e) = (i32s(&out[1]), i32s(&out[2]), i32s(&out[3]));
                let (f, h, u) = (i32s(&out[4]), i32s(&out[5]), i32s(&out[6]));
                let (dm5, nd) = (d as i32 - 5, n as i32 / d as i32);
                for g in 0..n {
                    let cv = g as i32 - 500;
                    assert_eq!(q[g], cv.wrapping_div(dm5), "{target:?} {cv} / {dm5}");
                    assert_eq!(r[g], cv.wrapping_rem(dm5), "{target:?} {cv} % {dm5}");
                    assert_eq!(
                        e[g],
                        (3 * cv).wrapping_div(nd) + cv.wrapping_rem(d as i32),
                        "{target:?} n {n} d {d} at {g}"
                    );
                    let x = cv.wrapping_mul(4_194_301).wrapping_add(17);
                    assert_eq!(f[g], (x / 64).wrapping_mul(3).wrapping_add(x % 64), "{target:?} {x} by 64");
                    assert_eq!(h[g], (x / -7).wrapping_mul(5).wrapping_add(x % 1_000_003), "{target:?} {x} by -7");
                    let xu = x as u32;
                    assert_eq!(u[g] as u32, xu / 96 + xu % 7, "{target:?} {xu} by 96 and 7");
                }
            }
        }
    }
}

#[test]
fn copies_in_every_direction_match_reference() {
    let k = copies_kernel(128);
    let mut rng = Rng(11);
    for (b, m, n) in [(2usize, 20usize, 70usize), (1, 16, 64), (3, 5, 9), (1, 33, 128)] {
        let x: Vec<f32> = (0..b * m * n).map(|_| rng.f32(-100.0, 100.0)).collect();
        let w = [1.5f32, -2.0, 42.9, 3.25];
        let out = run(
            &k,
            Target::Sm80,
            vec![bytes_f32(&x), vec![0u8; 2 * b * m * n], vec![0u8; 32], bytes_f32(&w), vec![0u8; 16]],
            &[b as i64, m as i64, n as i64],
            &[],
        );
        let y = f16s(&out[1]);
        for bb in 0..b {
            for i in 0..m {
                for j in 0..n {
                    let src = if j + 1 < n { x[(bb * m + i) * n + j + 1] } else { 7.0 };
                    assert_eq!(
                        y[(bb * m + i) * n + j],
                        f16::from_f32(src).to_f32(),
                        "y[{bb},{i},{j}] (b {b} m {m} n {n})"
                    );
                }
            }
        }
        assert_eq!(i32s(&out[2]), vec![0, 0, 0, 42, 0, 0, 0, 0]);
        assert_eq!(f32s(&out[4]), w.to_vec());
    }
}

#[test]
fn unsupported_constructs_are_errors_not_panics() {
    // Layout conflict: `m` is the reduction of `s` ([8, 64], 128 threads
    // active) and also of `t` ([8, 32], 64 threads active).
    let mut k = Kernel::new("conflict", 128);
    let s_ = frag(&mut k, "s", DType::F32, &[8, 64]);
    let t_ = frag(&mut k, "t", DType::F32, &[8, 32]);
    let mm = frag(&mut k, "m", DType::F32, &[8]);
    k.body = vec![
        s(StmtKind::Fill { buf: s_, value: Expr::f32(0.0) }),
        s(StmtKind::Fill { buf: t_, value: Expr::f32(0.0) }),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: s_, dst: mm, dim: 1, keep: false }),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: t_, dst: mm, dim: 1, keep: true }),
    ];
    let e = compile(&k, Target::Sm80).unwrap_err();
    assert!(
        e[0].message.contains("`m`")
            && e[0].message.contains("reduction of `s`")
            && e[0].message.contains("reduction of `t`"),
        "{e:?}"
    );

    // Fragment element access outside a parallel loop.
    let mut k = Kernel::new("outside", 128);
    let f = frag(&mut k, "f", DType::F32, &[128]);
    let t = k.add_tensor_param("t", DType::F32, vec![Extent::Const(4)], true);
    k.body = vec![store(t, vec![Expr::i32(0)], ld(f, vec![Expr::i32(0)]))];
    // (The verifier may report this one first, in its own words.)
    assert!(compile(&k, Target::Sm80).is_err());

    // bf16 atomics need sm_90.
    let mut k = Kernel::new("atom", 32);
    let t = k.add_tensor_param("t", DType::BF16, vec![Extent::Const(4)], true);
    k.body =
        vec![s(StmtKind::AtomicAdd { buf: t, index: vec![Expr::i32(0)], value: Expr::Const(Value::BF16(bf16::ONE)) })];
    assert!(compile(&k, Target::Sm80).unwrap_err()[0].message.contains("bf16"));
    assert!(compile(&k, Target::Sm90a).is_ok());

    // Collective ops inside a parallel loop; global → global copies; bad thread counts.
    let mut k = Kernel::new("coll", 64);
    let a = k.add_tensor_param("a", DType::F32, vec![Extent::Const(64)], false);
    let b = k.add_tensor_param("b", DType::F32, vec![Extent::Const(64)], true);
    let f = frag(&mut k, "f", DType::F32, &[64]);
    let lp = par(&mut k, "i", 64, |_| vec![s(StmtKind::Fill { buf: f, value: Expr::f32(0.0) })]);
    k.body = vec![lp, copy(a, vec![Expr::i32(0)], b, vec![Expr::i32(0)])];
    let e = compile(&k, Target::Sm80).unwrap_err();
    assert!(!e.is_empty());
    if tile_ir::verify::verify(&k).is_ok() {
        // Without a verifier in front, the backend reports both, in order.
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].message.contains("block-wide"));
        assert!(e[1].message.contains("needs a shared, fragment or local side"));
    }
    k.threads = 48;
    assert!(compile(&k, Target::Sm80).is_err());
}

/// The `if` statements of a Thread IR body, nested ones included.
fn count_ifs(body: &[thread_ir::Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            thread_ir::Stmt::If { then, otherwise, .. } => 1 + count_ifs(then) + count_ifs(otherwise),
            thread_ir::Stmt::For { body, .. } => count_ifs(body),
            _ => 0,
        })
        .sum()
}

/// `row_guard` (passes/lower/nest.rs): a nest whose body is a row-only
/// `if` tests it once per row a thread holds, one branch around that row's
/// registers, and computes what the per-register test computes (rows
/// skipped and taken, partial blocks); a test that also reads the column,
/// or a body writing what the test reads, keeps one test per register.
#[test]
fn a_row_test_is_one_branch_per_row() {
    // Layouts without partial registers (a nest with some is not grouped).
    for (threads, bm, bn, d) in [(128u32, 8i64, 64i64, 64i64), (128, 64, 64, 128), (256, 16, 100, 64)] {
        let mut ifs = Vec::new();
        for how in 0..3 {
            let k = row_guard_kernel(threads, bm, bn, d, how);
            let c = compile(&k, Target::Sm80).unwrap_or_else(|e| panic!("compile: {e:?}"));
            ifs.push(count_ifs(&c.function.body));
            let mut rng = Rng(11 + how as u64);
            for m in [bm as usize, bm as usize * 2 + 3, 1] {
                // Every third row all negative (skipped), the others not.
                let x: Vec<f32> = (0..m * bn as usize)
                    .map(|e| rng.f32(-1.0, 1.0) - if e / bn as usize % 3 == 0 { 2.0 } else { 0.0 })
                    .collect();
                let z: Vec<f32> = (0..m * d as usize).map(|_| rng.f32(-5.0, 5.0)).collect();
                let poison = vec![0xffu8; 4 * m * d as usize];
                let out = run(&k, Target::Sm80, vec![bytes_f32(&x), bytes_f32(&z), poison], &[m as i64], &[]);
                let o = f32s(&out[2]);
                let mut skipped = 0;
                for i in 0..m {
                    let mx =
                        x[i * bn as usize..(i + 1) * bn as usize].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    skipped += usize::from(mx <= 0.0);
                    for j in 0..d as usize {
                        let z = z[i * d as usize + j];
                        let want = if mx > 0.0 { z * mx } else { z };
                        assert_eq!(o[i * d as usize + j], want, "t{threads} bm{bm} d{d} how{how} m{m} [{i},{j}]");
                    }
                }
                if m > bm as usize {
                    assert!(skipped > 0 && skipped < m, "the inputs should skip some rows and not others");
                }
            }
        }
        // The layout gives each thread fewer rows than registers: grouping
        // leaves fewer branches than one per register.
        assert!(ifs[0] < ifs[1], "t{threads} bm{bm} d{d}: row test {} ifs, per-register {}", ifs[0], ifs[1]);
        assert_eq!(ifs[1], ifs[2], "t{threads} bm{bm} d{d}: a body writing the tested row is not grouped");
    }
}

#[test]
fn reduced_rows_drive_a_nest_of_another_width() {
    for (threads, bm, bn, d) in [(128u32, 8i64, 64i64, 32i64), (256, 16, 256, 64), (128, 64, 64, 128), (64, 4, 100, 12)]
    {
        let k = row_scale_kernel(threads, bm, bn, d);
        let mut rng = Rng(3);
        for m in [bm as usize, bm as usize * 2 + 3, 1] {
            let x: Vec<f32> = (0..m * bn as usize).map(|_| rng.f32(-5.0, 5.0)).collect();
            let z: Vec<f32> = (0..m * d as usize).map(|_| rng.f32(-5.0, 5.0)).collect();
            let out = run(
                &k,
                Target::Sm80,
                vec![bytes_f32(&x), bytes_f32(&z), vec![0u8; 4 * m * d as usize]],
                &[m as i64],
                &[],
            );
            let o = f32s(&out[2]);
            for i in 0..m {
                let mx = x[i * bn as usize..(i + 1) * bn as usize].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                for j in 0..d as usize {
                    assert_eq!(
                        o[i * d as usize + j],
                        z[i * d as usize + j] * mx,
                        "t{threads} bm{bm} bn{bn} d{d} m{m} [{i},{j}]"
                    );
                }
            }
        }
    }
}

#[test]
fn divergent_control_flow_inside_parallel_loops() {
    let k = divergent_kernel(128, 256);
    let mut rng = Rng(17);
    for n in [256usize, 700, 5] {
        let x: Vec<f32> = (0..n).map(|_| rng.f32(-3.0, 3.0)).collect();
        let out = run(&k, Target::Sm90a, vec![bytes_f32(&x), vec![0u8; 2 * n], vec![0u8; 4 * n]], &[n as i64], &[]);
        let y = f16s(&out[1]);
        let w = f32s(&out[2]);
        // Elements past the end are loaded as 0 and go through the loop body too.
        let padded = n.div_ceil(256) * 256;
        let mut fv = vec![0f32; padded];
        for g in 0..padded {
            let i = g % 256;
            let xg = x.get(g).copied().unwrap_or(0.0);
            let mut acc = 0f32;
            for t in 0..(i % 5) {
                acc += t as f32 * xg;
            }
            fv[g] = if i % 2 == 0 { acc + 0.5f32.exp() } else { (acc.abs() + 1.0).ln() - acc };
            if g < n {
                close(y[g], f16::from_f32(fv[g]).to_f32() as f64, 1e-3, &format!("y[{g}]"));
            }
        }
        for g in 0..n {
            // w[bx*B + i] = sh[i] = rsqrt(|f[B-1-i]| + 1) (for elements of the block).
            let b0 = g / 256 * 256;
            let src = b0 + 255 - (g - b0);
            let fsrc = fv[src];
            close(w[g], 1.0 / (fsrc.abs() as f64 + 1.0).sqrt(), 1e-5, &format!("w[{g}]"));
        }
    }
}

#[test]
fn atomics_from_parallel_loops_match_reference() {
    for (k, target) in [(atomics_kernel(64, 128, false), Target::Sm80), (atomics_kernel(64, 128, true), Target::Sm90a)]
    {
        let mut rng = Rng(23);
        for n in [300usize, 128, 7] {
            let x: Vec<i32> = (0..n).map(|_| (rng.next() % 20) as i32 - 2).collect();
            let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let out =
                run(&k, target, vec![xb, vec![0u8; 64], vec![0u8; 4], vec![0u8; 4], vec![0u8; 2]], &[n as i64], &[]);
            let hist = i32s(&out[1]);
            for b in 0..16 {
                assert_eq!(hist[b], x.iter().filter(|v| **v == b as i32).count() as i32, "bin {b}");
            }
            let sums = f16s(&out[2]);
            assert_eq!(sums[0], 0.0);
            assert_eq!(sums[1], x.iter().sum::<i32>() as f32);
            assert_eq!(i32s(&out[3])[0], x.iter().sum::<i32>());
            if k.name == "atomics_bf16" {
                let padded = n.div_ceil(128) * 128;
                let b = bf16::from_bits(u16::from_le_bytes([out[4][0], out[4][1]])).to_f32();
                assert_eq!(
                    b,
                    (padded as f32).min(256.0),
                    "one bf16 add per iteration (bf16 saturates its integer range at 256)"
                );
            }
        }
    }
}

#[test]
fn resource_limits_are_errors() {
    // 256×256 f32 fragment with 64 threads: 1024 registers per thread.
    let mut k = Kernel::new("huge", 64);
    let f = frag(&mut k, "f", DType::F32, &[256, 256]);
    k.body = vec![s(StmtKind::Fill { buf: f, value: Expr::f32(0.0) })];
    let e = compile(&k, Target::Sm80).unwrap_err();
    assert!(e[0].message.contains("registers per thread"), "{e:?}");
    // 200 KB of shared memory: fine on sm_90a, too much on sm_80.
    let mut k = Kernel::new("smem", 128);
    let sh = buffer(&mut k, "sh", Scope::Shared, DType::F32, &[50 * 1024]);
    k.body = vec![s(StmtKind::Fill { buf: sh, value: Expr::f32(0.0) })];
    assert!(compile(&k, Target::Sm90a).is_ok());
    assert!(compile(&k, Target::Sm80).unwrap_err()[0].message.contains("shared memory"));
    // Without the verifier (which rejects it first), the lowering stops at
    // the buffer it cannot place: no follow-up "internal" errors from the
    // statements using it (the fuzz test's `col_sum` with `BN = 2^31 - 1`).
    let mut k = Kernel::new("huge_reduce", 64);
    let f = frag(&mut k, "f", DType::F32, &[256, 256]);
    let r = frag(&mut k, "r", DType::F32, &[256]);
    k.body = vec![
        s(StmtKind::Fill { buf: f, value: Expr::f32(0.0) }),
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: f, dst: r, dim: 0, keep: false }),
    ];
    let e = compile_verified(&k, Target::Sm80).unwrap_err();
    assert!(e.iter().any(|e| e.message.contains("registers per thread")), "{e:?}");
    assert!(e.iter().all(|e| !e.message.starts_with("internal")), "{e:?}");
    // Wrong index count on a shared buffer.
    let mut k = Kernel::new("rank", 32);
    let sh = buffer(&mut k, "sh", Scope::Shared, DType::F32, &[4, 4]);
    k.body = vec![store(sh, vec![Expr::i32(0)], Expr::f32(1.0))];
    assert!(compile(&k, Target::Sm80).is_err());
}

#[test]
fn online_softmax_matches_reference() {
    let mut rng = Rng(77);
    for (threads, bn) in [(256u32, 1024i64), (128, 256)] {
        let k = softmax_online(threads, bn);
        for (m, n) in [(2usize, bn as usize), (2, bn as usize * 3 - 5), (1, bn as usize + 1), (2, 7)] {
            let x: Vec<f32> = (0..m * n).map(|_| rng.f32(-8.0, 8.0)).collect();
            let out = run(&k, Target::Sm90a, vec![bytes_f16(&x), vec![0u8; 2 * m * n]], &[m as i64, n as i64], &[]);
            let y = f16s(&out[1]);
            for r in 0..m {
                let row: Vec<f64> = (0..n).map(|j| f16::from_f32(x[r * n + j]).to_f64()).collect();
                let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
                for j in 0..n {
                    close(
                        y[r * n + j],
                        (row[j] - mx).exp() / sum,
                        3e-3,
                        &format!("online softmax t{threads} bn{bn} {m}x{n} [{r},{j}]"),
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tiles with squeezed dims (issue 9, item 1): windows of 4-D tensors that skip
// a middle dim, strided columns (a squeezed innermost dim), on both targets.

const ND_PERMUTE: &str = "kernel nd_permute<%0 B, %1 S, %2 H, %3 HD>(@0 x: &f16[B, S, H, HD], @1 y: &mut f16[B, H, S, HD]) threads=128 grid=((S + 31) / 32, H, B) {
  %4 bs = block_idx.x
  %5 bh = block_idx.y
  %6 bb = block_idx.z
  @2 t: shared f16[32, 64]
  @3 f: fragment f32[32, 64]
  copy x[bb, bs * 32.., bh, 0..] -> t
  copy t -> f
  copy f -> y[bb, bh, bs * 32.., 0..]
}";

const ND_COLUMNS: &str = "kernel nd_columns<%0 M, %1 N>(@0 x: &f32[M, N], @1 xt: &mut f32[N, M], @2 y: &mut f32[M, N]) threads=64 grid=((M + 127) / 128, N, 1) {
  %2 bm = block_idx.x
  %3 c = block_idx.y
  @3 col: fragment f32[128]
  @4 sh: shared f32[128]
  copy x[bm * 128.., c] -> col
  copy col -> xt[c, bm * 128..]
  copy x[bm * 128.., c] -> sh
  copy sh -> y[bm * 128.., c]
}";

#[test]
fn squeezed_middle_dims_permute_bshd_to_bhsd() {
    let k = tile_ir::print::parse_kernel(ND_PERMUTE).unwrap();
    let mut rng = Rng(99);
    for target in [Target::Sm80, Target::Sm90a] {
        for (b, s, h, hd) in [(2usize, 45usize, 3usize, 64usize), (1, 1, 1, 1), (2, 70, 2, 40), (1, 33, 2, 100)] {
            let x: Vec<f32> = (0..b * s * h * hd).map(|_| rng.f32(-4.0, 4.0)).collect();
            let poison = vec![0xFFu8; 2 * b * s * h * hd];
            let out = run(&k, target, vec![bytes_f16(&x), poison], &[b as i64, s as i64, h as i64, hd as i64], &[]);
            let y = f16s(&out[1]);
            for bi in 0..b {
                for hi in 0..h {
                    for si in 0..s {
                        for di in 0..hd {
                            let (src, dst) = (((bi * s + si) * h + hi) * hd + di, ((bi * h + hi) * s + si) * hd + di);
                            let want = if di < 64 { f16::from_f32(x[src]).to_f32() } else { f32::NAN };
                            let got = y[dst];
                            assert!(
                                got == want || (want.is_nan() && got.is_nan()),
                                "{target:?} {b}x{s}x{h}x{hd}: y[{bi},{hi},{si},{di}] = {got}, want {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn squeezed_innermost_dim_reads_and_writes_strided_columns() {
    let k = tile_ir::print::parse_kernel(ND_COLUMNS).unwrap();
    let mut rng = Rng(7);
    for target in [Target::Sm80, Target::Sm90a] {
        for (m, n) in [(200usize, 7usize), (1, 1), (128, 3), (129, 2), (5, 33)] {
            let x: Vec<f32> = (0..m * n).map(|_| rng.f32(-1.0, 1.0)).collect();
            let poison = vec![0xFFu8; 4 * m * n];
            let out = run(&k, target, vec![bytes_f32(&x), poison.clone(), poison], &[m as i64, n as i64], &[]);
            let (xt, y) = (f32s(&out[1]), f32s(&out[2]));
            for i in 0..m {
                for j in 0..n {
                    assert_eq!(xt[j * m + i], x[i * n + j], "{target:?} {m}x{n}: xt[{j},{i}]");
                    assert_eq!(y[i * n + j], x[i * n + j], "{target:?} {m}x{n}: y[{i},{j}]");
                }
            }
        }
    }
}

/// A grid whose y (and z) extents are dynamic folds: the kernel unfolds the
/// linear block id by the grid's own extents, so the plain launch
/// `(gx, gy, gz)` and the folded one `(gx·gy·gz, 1, 1)` that the runtime
/// uses past 65,535 (`abi::launch_shape`) give the same, right answer, with
/// and without rasterization, on both targets; and every block runs once.
#[test]
fn folded_and_plain_launches_of_a_grid_agree() {
    let mut rng = Rng(0xf01d);
    for (batched, panel) in [(false, None), (false, Some(3)), (true, None), (true, Some(2))] {
        let (bc, threads) = (16i64, 32u32);
        let k = grid_rows_kernel(threads, bc, batched, panel);
        assert!(abi::folds_grid(&k));
        for target in [Target::Sm80, Target::Sm90a] {
            let c = compile(&k, target).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
            for (b, r, cols) in [(1usize, 1usize, 1usize), (3, 37, 50), (2, 5, 16), (1, 9, 33)] {
                let b = if batched { b } else { 1 };
                let n = b * r * cols;
                let x: Vec<f32> = (0..n).map(|_| rng.f32(-4.0, 4.0)).collect();
                let want: Vec<f32> = (0..n).map(|i| x[i] + ((i / cols) % r + 1000 * (i / (cols * r))) as f32).collect();
                let dims: Vec<i64> =
                    if batched { vec![b as i64, r as i64, cols as i64] } else { vec![r as i64, cols as i64] };
                let grid = abi::eval_grid(&k, &dims).unwrap();
                let total = grid.iter().product::<u32>();
                for shape in [grid, [total, 1, 1]] {
                    let sim =
                        sim::launch_shaped(&c.function, &k, vec![bytes_f32(&x), vec![0u8; 4 * n]], &dims, &[], shape);
                    let got = f32s(&sim.tensors[1]);
                    let bad = (0..n).find(|&i| got[i] != want[i]);
                    assert!(
                        bad.is_none(),
                        "{} {target:?} panel {panel:?} dims {dims:?} launched as {shape:?}: element {bad:?} is {:?}, want {:?}",
                        k.name,
                        bad.map(|i| got[i]),
                        bad.map(|i| want[i])
                    );
                }
            }
        }
    }
}

/// A 1-D grid, or constant y and z extents within the limit, read `ctaid`
/// directly: no linear id, no division (the code they had before folding).
#[test]
fn grids_within_the_limits_at_compile_time_do_not_unfold() {
    let k = vector_add(128, 256);
    assert!(!abi::folds_grid(&k));
    let ptx = compile(&k, Target::Sm80).unwrap().ptx;
    let divides = |ptx: &str| ptx.contains("div.s32") || ptx.contains("mul.hi.u32");
    assert!(!ptx.contains("%nctaid") && !divides(&ptx), "{ptx}");
    let mut k = grid_rows_kernel(32, 16, false, None);
    let ptx = compile(&k, Target::Sm80).unwrap().ptx;
    // (By the grid's x extent, with the magic number the launch passes.)
    assert!(ptx.contains("%nctaid.x") && divides(&ptx), "a dynamic y extent unfolds:\n{ptx}");
    k.grid[1] = Expr::i32(65535);
    assert!(!abi::folds_grid(&k));
    let ptx = compile(&k, Target::Sm80).unwrap().ptx;
    assert!(!ptx.contains("%nctaid") && ptx.contains("%ctaid.y"), "{ptx}");
}

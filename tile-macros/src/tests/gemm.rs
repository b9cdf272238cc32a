//! Frontend tests of `gemm`, `use_swizzle` and `annotate_layout`: what they lower to, every
//! error they can give, and kernels written with them run in the interpreter
//! against f64 references (a tiled GEMM over every transpose and dtype, and
//! a FlashAttention inner loop).

use super::{all_stmts, lower_err, lower_ok, verified_err};
use half::{bf16, f16};
use tile_ir::interp::{Arg, TensorData};
use tile_ir::*;

fn gemms(k: &Kernel) -> Vec<StmtKind> {
    all_stmts(k).into_iter().filter(|s| matches!(s.kind, StmtKind::Gemm { .. })).map(|s| s.kind.clone()).collect()
}

const HEAD: &str = "threads = 128, consts(BM = 32, BN = 16, BK = 24)";

/// A body with `a_s: shared [BM, BK]`, `at_s: shared [BK, BM]`,
/// `b_s: shared [BK, BN]`, `bt_s: shared [BN, BK]`, `acc: fragment f32 [BM, BN]`
/// (all f16) around `stmt`.
fn body(stmt: &str) -> String {
    format!(
        r#"fn k(a: &Tensor<f16, M, K>, c: &mut Tensor<f32, M, N>) {{
            let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
            let mut a_s = shared::<f16, BM, BK>();
            let mut at_s = shared::<f16, BK, BM>();
            let mut b_s = shared::<f16, BK, BN>();
            let mut bt_s = shared::<f16, BN, BK>();
            let mut bb_s = shared::<bf16, BK, BN>();
            let mut a_f = fragment::<f16, BM, BK>();
            let mut acc = fragment::<f32, BM, BN>();
            let mut acc_h = fragment::<f16, BM, BN>();
            let mut l = local::<f16, BM, BK>();
            {stmt}
        }}"#
    )
}

#[test]
fn gemm_forms_lower() {
    let cases: &[(&str, bool, bool, bool, WarpPolicy)] = &[
        ("gemm(&a_s, &b_s, &mut acc);", false, false, false, WarpPolicy::Square),
        ("gemm(&a_s, &bt_s.t(), &mut acc).clear();", false, true, true, WarpPolicy::Square),
        ("gemm(&at_s.t(), &b_s, &mut acc).policy(FullCol);", true, false, false, WarpPolicy::FullCol),
        (
            "gemm(&at_s.t(), &bt_s.t(), &mut acc).policy(WarpPolicy::FullRow).clear();",
            true,
            true,
            true,
            WarpPolicy::FullRow,
        ),
        ("gemm(&a_f, &b_s, &mut acc).clear().policy(Square);", false, false, true, WarpPolicy::Square),
        ("gemm(&(at_s.t()), &b_s, &mut acc);", true, false, false, WarpPolicy::Square),
    ];
    for &(stmt, ta, tb, cl, pol) in cases {
        let k = lower_ok(HEAD, &body(stmt));
        let g = gemms(&k);
        assert_eq!(g.len(), 1, "{stmt}");
        let StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy } = &g[0] else { unreachable!() };
        assert_eq!((*trans_a, *trans_b, *clear, *policy), (ta, tb, cl, pol), "{stmt}");
        assert_eq!(k.buffer(*c).name, "acc");
        let want_a = if stmt.contains("a_f") {
            "a_f"
        } else if ta {
            "at_s"
        } else {
            "a_s"
        };
        assert_eq!(k.buffer(*a).name, want_a, "{stmt}");
        assert_eq!(k.buffer(*b).name, if tb { "bt_s" } else { "b_s" }, "{stmt}");
        verify::verify(&k).unwrap_or_else(|e| panic!("{stmt}: {e:#?}"));
    }
}

#[test]
fn gemm_operand_errors() {
    lower_err(
        HEAD,
        &body("gemm(&a_s, &acc, &mut acc);"),
        &["operand B of `gemm` is a shared buffer, but `acc` is a fragment"],
    );
    lower_err(
        HEAD,
        &body("gemm(&l, &b_s, &mut acc);"),
        &["operand A of `gemm` is a shared buffer or a fragment, but `l` is a local buffer"],
    );
    lower_err(
        HEAD,
        &body("gemm(&a, &b_s, &mut acc);"),
        &["`a` is a tensor parameter; copy a tile of the tensor into a `shared::<..>()` buffer first"],
    );
    lower_err(HEAD, &body("gemm(a_s, &b_s, &mut acc);"), &["pass the operand of `gemm` by reference: `&a_s`"]);
    lower_err(
        HEAD,
        &body("gemm(&a_s, bt_s.t(), &mut acc);"),
        &["pass the operand of `gemm` by reference: `&bt_s.t()`"],
    );
    lower_err(HEAD, &body("gemm(&a_s, &b_s, &acc);"), &["`gemm` writes this buffer: pass it as `&mut acc`"]);
    lower_err(HEAD, &body("gemm(&a_s, &b_s);"), &["`gemm` takes 3 arguments, but 2 were given"]);
    lower_err(HEAD, &body("gemm(&a_s, &nope, &mut acc);"), &["cannot find `nope` in this kernel"]);
    lower_err(HEAD, &body("let x = 1; gemm(&x, &b_s, &mut acc);"), &["`x` is a scalar; `gemm` multiplies buffers"]);
    lower_err(HEAD, &body("gemm(&a_s, &b_s.t().t(), &mut acc);"), &["`.t()` twice"]);
}

#[test]
fn gemm_type_errors() {
    lower_err(
        HEAD,
        &body("gemm(&a_s, &bb_s, &mut acc);"),
        &["`gemm` operands must hold the same element type, but `a_s` holds `f16` and `bb_s` holds `bf16`"],
    );
    lower_err(HEAD, &body("gemm(&a_s, &b_s, &mut acc_h);"), &["the accumulator of `gemm` is an `f32` fragment of shape [M, N] (`fragment::<f32, M, N>()`), but `acc_h` is a fragment of `f16`"]);
    lower_err(HEAD, &body("gemm(&a_s, &b_s, &mut b_s);"), &["but `b_s` is a shared buffer"]);
    lower_err(
        "threads = 128",
        "fn k(c: &mut Tensor<f32, 4>) { let mut x = shared::<f32, 16, 16>(); let mut acc = fragment::<f32, 16, 16>(); gemm(&x, &x, &mut acc); }",
        &["`gemm` multiplies `f16` or `bf16` operands (on tensor cores), but `x` holds `f32`"],
    );
    lower_err(
        "threads = 128",
        "fn k(c: &mut Tensor<f32, 4>) { let mut x = shared::<f16, 16>(); let mut acc = fragment::<f32, 16, 16>(); gemm(&x, &x, &mut acc); }",
        &["operand A of `gemm` is a matrix, but `x` has rank 1 ([16])"],
    );
}

#[test]
fn gemm_shape_errors_name_the_three_shapes() {
    // The shape agreement is the verifier's rule, reported at the statement.
    let errs = verified_err(HEAD, &body("gemm(&at_s, &b_s, &mut acc);"), &["gemm shape mismatch"]);
    assert_eq!(
        errs,
        ["gemm shape mismatch: `at_s` [24, 32] is M×K = 24×32, `b_s` [24, 16] is K×N = 24×16, `acc` [32, 16] is M×N = 32×16: M disagrees (24 from A, 32 from the accumulator); K disagrees (32 from A, 24 from B); `gemm(&at_s.t(), &b_s, ..)` would fit"]
    );
    // `.t()` on B: [BN, BK] read as [BK, BN] is fine, [BK, BN] read transposed is not.
    let k = lower_ok(HEAD, &body("gemm(&a_s, &bt_s.t(), &mut acc);"));
    tile_ir::verify::verify(&k).expect("the shapes agree");
    verified_err(
        HEAD,
        &body("gemm(&a_s, &b_s.t(), &mut acc);"),
        &[
            "`b_s.t()` [24, 16] is K×N = 16×24",
            "N disagrees (24 from B, 16 from the accumulator); K disagrees (24 from A, 16 from B)",
        ],
    );
}

/// `policy(Warpgroup(w))` lowers to the IR's policy; the verifier wants
/// the warpgroup in the block and M = 64.
#[test]
fn warpgroup_policy_lowers_and_verifies() {
    let head = "threads = 256, consts(BM = 64, BN = 16, BK = 24)";
    for (stmt, w) in [
        ("gemm(&a_s, &b_s, &mut acc).policy(Warpgroup(1));", 1),
        ("gemm(&a_s, &b_s, &mut acc).policy(WarpPolicy::Warpgroup(0));", 0),
    ] {
        let k = lower_ok(head, &body(stmt));
        let StmtKind::Gemm { policy, .. } = &gemms(&k)[0] else { unreachable!() };
        assert_eq!(*policy, WarpPolicy::Warpgroup(w));
        verify::verify(&k).unwrap_or_else(|e| panic!("{stmt}: {e:#?}"));
    }
    verified_err(
        head,
        &body("gemm(&a_s, &b_s, &mut acc).policy(Warpgroup(2));"),
        &["the block's 256 threads have 2 whole warpgroups (128 threads each), so warpgroup 2 does not exist"],
    );
    verified_err(
        HEAD,
        &body("gemm(&a_s, &b_s, &mut acc).policy(Warpgroup(0));"),
        &["the accumulator `acc` has 32 rows; one warpgroup computes 64 (M = 64)"],
    );
}

#[test]
fn gemm_modifier_errors() {
    lower_err(
        HEAD,
        &body("gemm(&a_s, &b_s, &mut acc).policy(Diagonal);"),
        &["`.policy(..)` takes one warp policy: `FullRow` (warps split M), `FullCol` (warps split N), `Square` or `Warpgroup(w)` (warpgroup `w` alone, `w` an integer literal)"],
    );
    // The warpgroup is an integer literal.
    for w in ["Warpgroup(W)", "Warpgroup(-1)", "Warpgroup(0, 1)", "Other(0)"] {
        lower_err(
            HEAD,
            &body(&format!("gemm(&a_s, &b_s, &mut acc).policy({w});")),
            &["`.policy(..)` takes one warp policy"],
        );
    }
    lower_err(HEAD, &body("gemm(&a_s, &b_s, &mut acc).clear().clear();"), &["`.clear()` is given twice"]);
    lower_err(
        HEAD,
        &body("gemm(&a_s, &b_s, &mut acc).policy(FullRow).policy(FullCol);"),
        &["`.policy(..)` is given twice"],
    );
    lower_err(HEAD, &body("gemm(&a_s, &b_s, &mut acc).clear(1);"), &["`.clear()` takes no arguments"]);
    lower_err(
        HEAD,
        &body("gemm(&a_s, &b_s, &mut acc).fast();"),
        &["unknown method `.fast()` on `gemm(..)`; it supports `.clear()` and `.policy(FullRow | FullCol | Square | Warpgroup(w))`"],
    );
    lower_err(
        HEAD,
        &body("gemm(&a_s, &b_s, &mut acc).t();"),
        &["`.t()` transposes an operand of `gemm`, not its result"],
    );
    lower_err(HEAD, &body("gemm(&a_s, &b_s, &mut acc.t());"), &["the accumulator of `gemm` cannot be transposed"]);
    let v =
        lower_err(HEAD, &body("let x = gemm(&a_s, &b_s, &mut acc);"), &["`gemm(..)` is a statement and has no value"]);
    assert_eq!(v.len(), 1, "{v:#?}");
}

#[test]
fn gemm_in_a_parallel_loop() {
    lower_err(
        HEAD,
        &body("for i in parallel(4) { gemm(&a_s, &b_s, &mut acc); }"),
        &["`gemm` is a block-wide operation and cannot be used inside a `parallel` loop"],
    );
}

#[test]
fn transpose_outside_gemm() {
    let msg = "`.t()` (transpose) is only valid on an operand of `gemm`";
    lower_err(HEAD, &body("copy(&at_s.t(), &mut a_f);"), &[msg]);
    lower_err(HEAD, &body("copy(&a_s, &mut at_s.t());"), &[msg]);
    lower_err(HEAD, &body("reduce_max(&acc.t(), &mut acc, 1);"), &[msg]);
    lower_err(HEAD, &body("for (i, j) in parallel((BM, BN)) { acc[(i, j)] = acc.t()[(j, i)]; }"), &[msg]);
    lower_err(HEAD, &body("a_s.t();"), &[msg]);
    lower_err(HEAD, &body("let x = c.t();"), &[msg]);
}

const SWIZZLE_HEAD: &str = "threads = 128, consts(PANEL = 8)";

#[test]
fn use_swizzle_sets_rasterize() {
    let k = lower_ok(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); use_swizzle(PANEL); c[(by, bx)] = 1.0; }",
    );
    assert_eq!(k.rasterize, Some(8));
    let k =
        lower_ok(SWIZZLE_HEAD, "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by, bz) = grid(N, M, 2); use_swizzle(3); }");
    assert_eq!(k.rasterize, Some(3));
    let k = lower_ok(SWIZZLE_HEAD, "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); }");
    assert_eq!(k.rasterize, None);
}

#[test]
fn use_swizzle_errors() {
    let placed = "`use_swizzle(..)` must be the statement right after `let (bx, by) = grid(..);`";
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); let x = 1; use_swizzle(4); }",
        &[placed],
    );
    lower_err(SWIZZLE_HEAD, "fn k(c: &mut Tensor<f32, M, N>) { use_swizzle(4); }", &[placed]);
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); for i in 0..2 { use_swizzle(4); } }",
        &[placed],
    );
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); use_swizzle(4); use_swizzle(4); }",
        &["`use_swizzle(..)` is called twice"],
    );
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); use_swizzle(0); }",
        &["the panel width of `use_swizzle` is 0; it must be at least 1"],
    );
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); use_swizzle(M); }",
        &["the panel width of `use_swizzle` must be a compile-time constant"],
    );
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); use_swizzle(); }",
        &["`use_swizzle` takes 1 argument, the panel width in blocks"],
    );
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let bx = grid(N); use_swizzle(2); }",
        &["`use_swizzle` reorders the blocks of a 2-D grid, but `grid(..)` has one axis"],
    );
    lower_err(
        SWIZZLE_HEAD,
        "fn k(c: &mut Tensor<f32, M, N>) { let (bx, by) = grid(N, M); let p = use_swizzle(2); }",
        &["`use_swizzle(..)` is a statement and has no value"],
    );
}

// ------------------------------------------------------------ running kernels written with gemm

/// A 64-bit xorshift: deterministic inputs.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * ((self.0 >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// Random values of `dtype` in [lo, hi): their bytes and their exact values.
fn random_half(rng: &mut Rng, dtype: DType, len: usize, lo: f32, hi: f32) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::with_capacity(2 * len);
    let mut values = Vec::with_capacity(len);
    for _ in 0..len {
        let x = rng.uniform(lo, hi);
        let (bits, exact) = match dtype {
            DType::BF16 => (bf16::from_f32(x).to_bits(), bf16::from_f32(x).to_f64()),
            _ => (f16::from_f32(x).to_bits(), f16::from_f32(x).to_f64()),
        };
        bytes.extend_from_slice(&bits.to_le_bytes());
        values.push(exact);
    }
    (bytes, values)
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn ro<'a>(data: &'a [u8], shape: &[usize]) -> Arg<'a> {
    Arg::Tensor { data: TensorData::Ro(data), shape: shape.to_vec() }
}

/// A tiled GEMM in the DSL: `c = a · b` with optional stored transposes,
/// `clear` on the first K step (the accumulator is first filled with junk),
/// a rasterized grid, tiles and sizes that are not multiples of 16.
fn tiled_gemm_source(dtype: &str, trans_a: bool, trans_b: bool) -> String {
    let (a_ty, a_tile, a_origin, a_op) = if trans_a {
        ("K, M", "BK, BM", "kk * BK, by * BM", "&a_s.t()")
    } else {
        ("M, K", "BM, BK", "by * BM, kk * BK", "&a_s")
    };
    let (b_ty, b_tile, b_origin, b_op) = if trans_b {
        ("N, K", "BN, BK", "bx * BN, kk * BK", "&b_s.t()")
    } else {
        ("K, N", "BK, BN", "kk * BK, bx * BN", "&b_s")
    };
    format!(
        r#"pub fn mm(a: &Tensor<{dtype}, {a_ty}>, b: &Tensor<{dtype}, {b_ty}>, c: &mut Tensor<f32, M, N>) {{
            let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
            use_swizzle(2);
            let mut a_s = shared::<{dtype}, {a_tile}>();
            let mut b_s = shared::<{dtype}, {b_tile}>();
            let mut acc = fragment::<f32, BM, BN>();
            fill(&mut acc, 1000.0);
            for kk in 0..cdiv(K, BK) {{
                copy(a.tile([{a_origin}]), &mut a_s);
                copy(b.tile([{b_origin}]), &mut b_s);
                if kk == 0 {{
                    gemm({a_op}, {b_op}, &mut acc).clear().policy(FullCol);
                }} else {{
                    gemm({a_op}, {b_op}, &mut acc);
                }}
            }}
            copy(&acc, c.tile([by * BM, bx * BN]));
        }}"#
    )
}

#[test]
fn tiled_gemm_from_the_dsl_runs() {
    let (m, n, kd) = (77usize, 50usize, 45usize);
    let mut seed = 5;
    for (dtype, dt) in [("f16", DType::F16), ("bf16", DType::BF16)] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let k = lower_ok("threads = 128, consts(BM = 24, BN = 40, BK = 20)", &tiled_gemm_source(dtype, ta, tb));
            assert_eq!(k.rasterize, Some(2));
            seed += 1;
            let mut rng = Rng(seed);
            let (ab, a) = random_half(&mut rng, dt, m * kd, -1.0, 1.0);
            let (bb, b) = random_half(&mut rng, dt, kd * n, -1.0, 1.0);
            let mut cb: Vec<u8> = f32::NAN.to_le_bytes().repeat(m * n);
            let a_shape = if ta { [kd, m] } else { [m, kd] };
            let b_shape = if tb { [n, kd] } else { [kd, n] };
            interp::launch(
                &k,
                &mut [
                    ro(&ab, &a_shape),
                    ro(&bb, &b_shape),
                    Arg::Tensor { data: TensorData::Rw(&mut cb), shape: vec![m, n] },
                ],
            )
            .unwrap();
            let c = f32s(&cb);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..kd)
                        .map(|p| {
                            let x = if ta { a[p * m + i] } else { a[i * kd + p] };
                            let y = if tb { b[j * kd + p] } else { b[p * n + j] };
                            x * y
                        })
                        .sum();
                    let got = c[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{dtype} ta={ta} tb={tb} ({i}, {j}): {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// FlashAttention's inner loop: S = Q·Kᵀ (clear) → row max → exp2 in a
/// parallel nest → row sum → f32 fragment to f16 fragment P → O += P·V,
/// with online-softmax rescaling, against an f64 softmax(Q·Kᵀ·scale)·V.
const FLASH: &str = r#"
pub fn attn(
    q: &Tensor<f16, S, D>,
    key: &Tensor<f16, SK, D>,
    value: &Tensor<f16, SK, D>,
    o: &mut Tensor<f32, S, D>,
    scale_log2: f32,
) {
    let bx = grid(cdiv(S, BM));
    let mut q_s = shared::<f16, BM, D>();
    let mut k_s = shared::<f16, BN, D>();
    let mut v_s = shared::<f16, BN, D>();
    let mut s = fragment::<f32, BM, BN>();
    let mut p = fragment::<f16, BM, BN>();
    let mut acc = fragment::<f32, BM, D>();
    let mut m = fragment::<f32, BM>();
    let mut m_prev = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut r = fragment::<f32, BM>();
    let mut row_sum = fragment::<f32, BM>();
    copy(q.tile([bx * BM, 0]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in 0..cdiv(SK, BN) {
        copy(key.tile([kb * BN, 0]), &mut k_s);
        copy(value.tile([kb * BN, 0]), &mut v_s);
        gemm(&q_s, &k_s.t(), &mut s).clear();
        for (i, j) in parallel((BM, BN)) {
            s[(i, j)] = if kb * BN + j < SK { s[(i, j)] * scale_log2 } else { f32::NEG_INFINITY };
        }
        copy(&m, &mut m_prev);
        reduce_max(&s, &mut m, 1).keep();
        for i in parallel(BM) {
            r[i] = exp2(m_prev[i] - m[i]);
        }
        for (i, j) in parallel((BM, BN)) {
            s[(i, j)] = exp2(s[(i, j)] - m[i]);
        }
        reduce_sum(&s, &mut row_sum, 1);
        for i in parallel(BM) {
            l[i] = l[i] * r[i] + row_sum[i];
        }
        for (i, d) in parallel((BM, D)) {
            acc[(i, d)] = acc[(i, d)] * r[i];
        }
        copy(&s, &mut p);
        gemm(&p, &v_s, &mut acc).policy(FullRow);
    }
    for (i, d) in parallel((BM, D)) {
        acc[(i, d)] = acc[(i, d)] / l[i];
    }
    copy(&acc, o.tile([bx * BM, 0]));
}
"#;

#[test]
fn flash_attention_inner_loop_with_gemm_runs() {
    let (s_len, sk, d) = (45usize, 83usize, 40usize);
    let k = lower_ok("threads = 128, consts(BM = 24, BN = 40, D = 40)", FLASH);
    assert_eq!(gemms(&k).len(), 2);
    let mut rng = Rng(2718);
    let (qb, q) = random_half(&mut rng, DType::F16, s_len * d, -1.0, 1.0);
    let (kb, kv) = random_half(&mut rng, DType::F16, sk * d, -1.0, 1.0);
    let (vb, v) = random_half(&mut rng, DType::F16, sk * d, -1.0, 1.0);
    let scale = 1.0 / (d as f64).sqrt();
    let scale_log2 = (scale * std::f64::consts::LOG2_E) as f32;
    let mut ob: Vec<u8> = f32::NAN.to_le_bytes().repeat(s_len * d);
    interp::launch(
        &k,
        &mut [
            ro(&qb, &[s_len, d]),
            ro(&kb, &[sk, d]),
            ro(&vb, &[sk, d]),
            Arg::Tensor { data: TensorData::Rw(&mut ob), shape: vec![s_len, d] },
            Arg::Scalar(Value::F32(scale_log2)),
        ],
    )
    .unwrap();
    let o = f32s(&ob);
    let mut worst = 0.0f64;
    for i in 0..s_len {
        let logits: Vec<f64> =
            (0..sk).map(|j| (0..d).map(|x| q[i * d + x] * kv[j * d + x]).sum::<f64>() * scale).collect();
        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = logits.iter().map(|x| (x - mx).exp()).collect();
        let total: f64 = w.iter().sum();
        for x in 0..d {
            let want = (0..sk).map(|j| w[j] * v[j * d + x]).sum::<f64>() / total;
            let got = o[i * d + x] as f64;
            worst = worst.max((got - want).abs());
            // P is rounded to f16 (relative 2^-11) before P·V.
            assert!((got - want).abs() <= 2e-3, "o[{i}, {x}] = {got}, want {want}");
        }
    }
    assert!(worst > 0.0, "suspiciously exact: the f16 rounding of P should show");
}

const LAYOUT_HEAD: &str = "threads = 128, consts(BM = 64, BK = 64, PAD = 16)";

/// A kernel with `a_s: shared f16 [BM, BK]` (128-byte rows), `s_s: shared
/// f32 [4, 3]` (12-byte rows) and `acc: fragment`, `stmts` right after the
/// declarations, then a copy into `a_s`.
fn layout_body(stmts: &str) -> String {
    format!(
        r#"fn k(a: &Tensor<f16, M, K>) {{
            let bx = grid(cdiv(M, BM));
            let mut a_s = shared::<f16, BM, BK>();
            let mut s_s = shared::<f32, 4, 3>();
            let mut acc = fragment::<f32, BM, BK>();
            {stmts}
            copy(a.tile([bx * BM, 0]), &mut a_s);
        }}"#
    )
}

#[test]
fn annotate_layout_sets_the_buffer_layout() {
    let cases = [
        ("annotate_layout(&a_s, row_major());", SharedLayoutSpec::RowMajor),
        ("annotate_layout(&a_s, padded(PAD));", SharedLayoutSpec::Padded { bytes: 16 }),
        ("annotate_layout(&a_s, padded(48));", SharedLayoutSpec::Padded { bytes: 48 }),
        ("annotate_layout(&a_s, swizzle(3));", SharedLayoutSpec::Swizzle { bits: 3 }),
        (
            "annotate_layout(&a_s, swizzle(1)); annotate_layout(&s_s, row_major());",
            SharedLayoutSpec::Swizzle { bits: 1 },
        ),
    ];
    for (stmt, want) in cases {
        let k = lower_ok(LAYOUT_HEAD, &layout_body(stmt));
        let a_s = k.buffers.iter().find(|b| b.name == "a_s").unwrap();
        assert_eq!(a_s.layout, Some(want), "{stmt}");
        verify::verify(&k).unwrap_or_else(|e| panic!("{stmt}: {e:#?}"));
    }
    let k = lower_ok(LAYOUT_HEAD, &layout_body(""));
    assert!(k.buffers.iter().all(|b| b.layout.is_none()));
}

#[test]
fn annotate_layout_errors() {
    let cases: &[(&str, &str)] = &[
        ("annotate_layout(&a_s, diagonal(2));", "unknown shared layout `diagonal`"),
        ("annotate_layout(&a_s, swizle(2));", "did you mean `swizzle`?"),
        (
            "annotate_layout(&acc, row_major());",
            "`acc` is a fragment (its layout over threads is inferred); only shared buffers have a layout to annotate",
        ),
        ("annotate_layout(&a, row_major());", "`a` is a global tensor"),
        (
            "annotate_layout(&a_s, swizzle(3)); annotate_layout(&a_s, padded(16));",
            "the layout of `a_s` is annotated twice",
        ),
        (
            "copy(a.tile([bx * BM, 0]), &mut a_s); annotate_layout(&a_s, swizzle(3));",
            "comes after a statement that uses `a_s`",
        ),
        ("annotate_layout(&a_s, swizzle(4));", "the swizzle width must be 1, 2 or 3 bits"),
        ("annotate_layout(&s_s, swizzle(1));", "`swizzle(1)` needs rows of a power of two of at least 32 bytes"),
        ("annotate_layout(&a_s, padded(8));", "positive multiple of 16"),
        ("annotate_layout(&a_s, padded(bx));", "the padding of `padded` must be a compile-time constant"),
        ("annotate_layout(&a_s, padded());", "`padded(bytes)` takes 1 argument"),
        ("annotate_layout(&a_s);", "`annotate_layout` takes 2 arguments"),
        ("annotate_layout(a_s, row_major());", "the first argument of `annotate_layout` is `&buf`"),
        ("annotate_layout(&b_s, row_major());", "cannot find buffer `b_s`"),
        ("let x = annotate_layout(&a_s, row_major());", "is a statement and has no value"),
    ];
    for (stmt, want) in cases {
        let errs = lower_err(LAYOUT_HEAD, &layout_body(stmt), &[want]);
        // One mistake, one error (the "twice" error carries a note at the first call).
        assert_eq!(errs.iter().filter(|e| *e != "first annotated here").count(), 1, "{stmt}: {errs:#?}");
    }
}

/// `kv_s.view([.., 512..])` lowers to a view buffer (a view of a view to a
/// window of the same buffer); a view off the 64-column panels that the
/// buffer's gemms give it is a compile error naming the view and why.
#[test]
fn views_lower_and_a_view_off_the_panels_is_an_error() {
    let k = super::lower_ok(
        "threads = 128",
        "fn k(kv: &Tensor<f16, S, 576>) { let bx = grid(1); let mut kv_s = shared::<f16, 64, 576>(); \
         let v = kv_s.view([.., ..512]); let k_pe = kv_s.view([.., 512..]); let tail = k_pe.view([32.., 32..64]); \
         copy(kv.tile([0, 0]), &mut kv_s); }",
    );
    let by_name = |n: &str| k.buffers.iter().find(|b| b.name == n).unwrap();
    let kv_s = BufferId(k.buffers.iter().position(|b| b.name == "kv_s").unwrap() as u32);
    assert_eq!(by_name("v").view, Some(View { of: kv_s, origin: vec![0, 0] }));
    assert_eq!(by_name("v").shape, vec![Extent::Const(64), Extent::Const(512)]);
    assert_eq!(by_name("k_pe").view, Some(View { of: kv_s, origin: vec![0, 512] }));
    assert_eq!(by_name("tail").view, Some(View { of: kv_s, origin: vec![32, 544] }));
    assert_eq!(by_name("tail").shape, vec![Extent::Const(32), Extent::Const(32)]);
    tile_ir::verify::verify(&k).unwrap();
    // Read by a gemm, `kv_s` is stored as nine 64-column panels: columns
    // 32..96 are not whole panels.
    let k = super::lower_ok(
        "threads = 128",
        "fn k(kv: &Tensor<f16, S, 576>, o: &mut Tensor<f32, S, 64>) { let bx = grid(1); \
         let mut kv_s = shared::<f16, 64, 576>(); let mid = kv_s.view([.., 32..96]); \
         let mut acc = fragment::<f32, 64, 64>(); copy(kv.tile([0, 0]), &mut kv_s); \
         gemm(&mid, &mid.t(), &mut acc).clear(); copy(&acc, o.tile([0, 0])); }",
    );
    let mid = k.buffers.iter().find(|b| b.name == "mid").unwrap().span;
    for target in [Target::Sm80, Target::Sm90a] {
        let errs = tile_ir::compile(&k, target).expect_err("the view is off the panels");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].span, mid);
        assert!(
            errs[0].message.contains("view `mid` of `kv_s` at [0, 32] is not expressible in the layout of `kv_s`")
                && errs[0].message.contains("columns 32..96 are not whole panels of 64 columns"),
            "{}",
            errs[0].message
        );
    }
}

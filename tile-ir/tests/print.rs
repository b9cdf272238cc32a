//! Snapshot tests of the text form: the expected text is inline.

mod interp_kernels;

use interp_kernels::*;
use tile_ir::print::{parse_kernel, print_expr, print_kernel};
use tile_ir::*;

#[track_caller]
fn snapshot(k: &Kernel, want: &str) {
    let got = print_kernel(k);
    assert_eq!(got.trim_end(), want.trim(), "\n--- got ---\n{got}");
}

#[test]
fn vector_add_text() {
    snapshot(
        &vector_add(256),
        r#"
kernel vector_add<%0 N>(@0 a: &f32[N], @1 b: &f32[N], @2 c: &mut f32[N]) threads=128 grid=((N + (256 - 1)) / 256, 1, 1) {
  %1 bx = block_idx.x
  @3 x: fragment f32[256]
  @4 y: fragment f32[256]
  copy a[bx * 256] -> x
  copy b[bx * 256] -> y
  for %2 i in parallel 0..256 {
    x[i] = x[i] + y[i]
  }
  copy x -> c[bx * 256]
}
"#,
    );
}

#[test]
fn softmax_text() {
    snapshot(
        &softmax(4, 1024),
        r#"
kernel softmax<%0 M, %1 N>(@0 x: &f16[M, N], @1 y: &mut f16[M, N]) threads=128 grid=((M + (4 - 1)) / 4, 1, 1) {
  %2 bx = block_idx.x
  @2 row: fragment f32[4, 1024]
  @3 mx: fragment f32[4]
  @4 sum: fragment f32[4]
  copy x[bx * 4, 0] -> row fill(-inf)
  reduce.max row -> mx, dim=1
  for %3 i in parallel 0..4 {
    for %4 j in parallel 0..1024 {
      row[i, j] = exp2((row[i, j] - mx[i]) * 1.442695)
    }
  }
  reduce.sum row -> sum, dim=1
  for %5 i2 in parallel 0..4 {
    for %6 j2 in parallel 0..1024 {
      row[i2, j2] = row[i2, j2] / sum[i2]
    }
  }
  copy row -> y[bx * 4, 0]
}
"#,
    );
}

#[test]
fn every_construct_text() {
    snapshot(
        &every_construct(),
        r#"
kernel all<%0 N>(@0 t: &mut i32[N, 4], %1 alpha: f32) threads=64 grid=(N, 2, 3u32 as i32) {
  %2 by = block_idx.y
  @1 sh: shared bf16[8, 4]
  @2 lo: local f16[2]
  @3 dup: fragment f32[8]
  @4 dup: fragment f32[]
  let mut %5 m: f32 = -alpha
  let %6 c: bool = (by < -1) | !(5i64 == -6i64)
  if c {
    m = fma(m, 2.5, 1e-7)
  } else {
    m = select(false, max(m, NaN), rsqrt(inf))
  }
  if true {
    barrier
  }
  fill lo, -1.5f16
  fill sh, 0.25bf16
  copy t[by * 8, 0] -> sh fill(0.0bf16)
  for %3 i in pipelined(3) 0..N - 1 {
    atomic_add t[%3, (%3 << 2) % 4], ((m + 1.0) * -2.0) as i32
  }
  for %4 i in parallel 0..8 {
    @3[%4] = 7u32 as f32
  }
  reduce.sum @3 -> @4, dim=0, keep
  reduce.min @3 -> @4, dim=0
  copy sh -> t[0, 0]
  for %7 k in 0..2 {
  }
}
"#,
    );
}

#[test]
fn expression_precedence_is_kept() {
    let k = Kernel::new("e", 32);
    let (a, b, c) = (Expr::i32(1), Expr::i32(2), Expr::i32(3));
    // (1 - 2) - 3 vs 1 - (2 - 3)
    assert_eq!(print_expr(&k, &sub(sub(a.clone(), b.clone()), c.clone())), "1 - 2 - 3");
    assert_eq!(print_expr(&k, &sub(a.clone(), sub(b.clone(), c.clone()))), "1 - (2 - 3)");
    assert_eq!(print_expr(&k, &mul(add(a.clone(), b.clone()), c.clone())), "(1 + 2) * 3");
    assert_eq!(print_expr(&k, &add(a.clone(), mul(b.clone(), c.clone()))), "1 + 2 * 3");
    assert_eq!(print_expr(&k, &Expr::cast(DType::F32, add(a.clone(), b.clone()))), "(1 + 2) as f32");
    assert_eq!(print_expr(&k, &Expr::unary(UnOp::Neg, Expr::i32(-4))), "-(-4)");
    assert_eq!(print_expr(&k, &Expr::unary(UnOp::Neg, add(a.clone(), b))), "-(1 + 2)");
    assert_eq!(print_expr(&k, &lt(lt(a.clone(), c.clone()), Expr::Const(Value::Bool(true)))), "(1 < 3) < true");
}

#[test]
fn dangling_handles_do_not_panic() {
    let mut k = Kernel::new("bad", 32);
    k.body = vec![store(BufferId(9), vec![Expr::Var(VarId(4))], Expr::f32(0.0))];
    k.params.push(Param { name: "ghost".into(), kind: ParamKind::Tensor(BufferId(3)) });
    let text = print_kernel(&k);
    assert!(text.contains("@9?[%4?] = 0.0"), "{text}");
    assert!(text.contains("@3? ghost"), "{text}");
}

#[test]
fn text_form_round_trips() {
    for k in [vector_add(256), softmax(4, 1024), every_construct()] {
        let text = print_kernel(&k);
        let back = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        // Through JSON: NaN constants are not `==` to themselves.
        assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&k).unwrap(), "\n{text}");
        assert_eq!(print_kernel(&back), text);
    }
}

/// `cluster` and `warp_specialize` print only when not the default, after
/// `swizzle`, and parse back.
/// `dependent_launch=true` prints last in the header and parses back.
#[test]
fn dependent_launch_round_trips() {
    let mut k = vector_add(256);
    assert!(!print_kernel(&k).contains("dependent_launch"));
    k.dependent_launch = true;
    k.warp_specialize = false;
    let text = print_kernel(&k);
    assert!(text.lines().next().unwrap().ends_with(" warp_specialize=false dependent_launch=true {"), "{text}");
    let back = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(back.dependent_launch);
    assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&k).unwrap());
    let bad = parse_kernel("kernel k() threads=32 grid=(1, 1, 1) dependent_launch=soon {\n}\n").unwrap_err().message;
    assert!(bad.contains("expected `true` or `false`"), "{bad}");
}

#[test]
fn cluster_and_warp_specialize_round_trip() {
    let plain = print_kernel(&vector_add(256));
    assert!(!plain.contains("cluster") && !plain.contains("warp_specialize"), "{plain}");
    let header = |k: &Kernel| print_kernel(k).lines().next().unwrap().to_string();
    for (cluster, ws, rasterize, tail) in [
        ([2, 1, 1], true, None, " cluster=(2, 1, 1) {"),
        ([1, 1, 1], false, None, " warp_specialize=false {"),
        ([1, 2, 4], false, Some(3), " swizzle=3 cluster=(1, 2, 4) warp_specialize=false {"),
    ] {
        let mut k = vector_add(256);
        k.cluster = cluster;
        k.warp_specialize = ws;
        k.rasterize = rasterize;
        assert!(header(&k).ends_with(&format!("grid=((N + (256 - 1)) / 256, 1, 1){tail}")), "{}", header(&k));
        let text = print_kernel(&k);
        let back = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!((back.cluster, back.warp_specialize, back.rasterize), (cluster, ws, rasterize));
        assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&k).unwrap());
        assert_eq!(print_kernel(&back), text);
    }
    let bad = |header: &str| {
        parse_kernel(&format!("kernel k() threads=32 grid=(1, 1, 1) {header} {{\n}}\n")).unwrap_err().message
    };
    assert!(bad("warp_specialize=maybe").contains("expected `true` or `false`"));
    assert!(bad("cluster=(2, 1)").contains("expected `,`"), "{}", bad("cluster=(2, 1)"));
    assert!(bad("cluster=(2, 99999999999, 1)").contains("out of range"), "{}", bad("cluster=(2, 99999999999, 1)"));
    // Order is fixed: `warp_specialize` before `cluster` is not the text form.
    assert!(
        parse_kernel("kernel k() threads=32 grid=(1, 1, 1) warp_specialize=false cluster=(2, 1, 1) {\n}\n").is_err()
    );
}

#[test]
fn expressions_round_trip() {
    // Negative constants vs negations, casts of negatives, nested comparisons.
    let mut k = Kernel::new("e", 32);
    let x = k.add_scalar_param("x", DType::I32);
    let y = k.add_var("y", DType::I32, VarKind::Let);
    let exprs = [
        Expr::unary(UnOp::Neg, Expr::i32(1)),
        Expr::unary(UnOp::Neg, Expr::i32(-1)),
        Expr::unary(UnOp::Neg, Expr::unary(UnOp::Neg, v(x))),
        sub(v(x), Expr::i32(-1)),
        Expr::cast(DType::I32, Expr::cast(DType::F32, Expr::i32(-3))),
        Expr::cast(DType::I32, Expr::unary(UnOp::Neg, Expr::cast(DType::F32, v(x)))),
        lt(lt(v(x), Expr::i32(2)), Expr::Const(Value::Bool(true))),
        Expr::cast(DType::I32, Expr::Const(Value::F32(f32::NEG_INFINITY))),
        Expr::cast(DType::I32, Expr::Const(Value::F16(half::f16::NEG_INFINITY))),
        Expr::binary(BinOp::Shr, Expr::binary(BinOp::Xor, v(x), Expr::i32(i32::MIN)), Expr::i32(3)),
        Expr::cast(DType::I32, Expr::Const(Value::I64(i64::MIN))),
    ];
    for e in exprs {
        k.body = vec![st(StmtKind::Let { var: y, value: e.clone() })];
        let text = print_kernel(&k);
        let back = parse_kernel(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
        assert_eq!(back.body, k.body, "\n{text}");
    }
}

#[test]
fn parse_errors_name_the_line() {
    let text = "kernel k() threads=32 grid=(1, 1, 1) {\n  fill nothing, 0.0\n}\n";
    let e = parse_kernel(text).unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (2, "unknown buffer `nothing`"));
    let e = parse_kernel("kernel k() threads=32 grid=(1, 1, 1) {\n  barrier\n  let %0 a: f32 = 1.0 +\n}").unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (4, "expected an expression, found `}`"));
    let e = parse_kernel("kernel k() threads=32 grid=(1, 1, 1) {\n  let %1 a: f32 = 1.0\n}").unwrap_err();
    assert!(e.message.contains("variable %0 is never declared"), "{e}");
}

#[test]
fn every_construct_verifies() {
    if let Err(e) = tile_ir::verify::verify(&every_construct()) {
        panic!("{e:#?}");
    }
}

/// Garbled text gives errors, never panics (a panic fails the test).
#[test]
fn parser_survives_garbled_text() {
    let text = print_kernel(&every_construct()) + &print_kernel(&softmax(4, 1024));
    let chars: Vec<char> = text.chars().collect();
    let alphabet: Vec<char> = "%@[](){}<>=-+*/.,:&|^!0123456789aefinxNamut_ \n".chars().collect();
    let mut rng = Rng(2024);
    let mut parsed = 0;
    for _ in 0..3000 {
        let mut c = chars.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(c.len() as u64) as usize;
            match rng.below(3) {
                0 => {
                    c.remove(at);
                }
                1 => c.insert(at, alphabet[rng.below(alphabet.len() as u64) as usize]),
                _ => c[at] = alphabet[rng.below(alphabet.len() as u64) as usize],
            }
        }
        let garbled: String = c.into_iter().collect();
        parsed += parse_kernel(&garbled).is_ok() as usize;
    }
    // Two kernels back to back never parse; the point is that nothing panics.
    assert_eq!(parsed, 0);
    // One kernel, garbled inside an expression, sometimes still parses.
    let one: Vec<char> = print_kernel(&every_construct()).chars().collect();
    let mut ok = 0;
    for _ in 0..2000 {
        let mut c = one.clone();
        let at = rng.below(c.len() as u64) as usize;
        c[at] = alphabet[rng.below(alphabet.len() as u64) as usize];
        let s: String = c.into_iter().collect();
        if let Ok(k) = parse_kernel(&s) {
            ok += 1;
            // What parses prints back to a fixed point.
            let again = print_kernel(&k);
            assert_eq!(print_kernel(&parse_kernel(&again).unwrap()), again);
        }
    }
    assert!(ok > 0);
}

fn gemm_config(trans_a: bool, trans_b: bool, a_fragment: bool, swizzle: Option<u32>) -> GemmConfig {
    GemmConfig { dtype: DType::BF16, trans_a, trans_b, a_fragment, clear_first: true, tile: (40, 24, 20), swizzle }
}

#[test]
fn gemm_text() {
    snapshot(
        &gemm_kernel(gemm_config(true, false, false, Some(4))),
        r#"
kernel gemm<%0 M, %1 N, %2 K>(@0 a: &bf16[K, M], @1 b: &bf16[K, N], @2 c0: &f32[M, N], @3 c: &mut f32[M, N]) threads=128 grid=((N + (24 - 1)) / 24, (M + (40 - 1)) / 40, 1) swizzle=4 {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @4 a_s: shared bf16[20, 40]
  @5 b_s: shared bf16[20, 24]
  @6 acc: fragment f32[40, 24]
  copy c0[by * 40, bx * 24] -> acc
  for %5 kk in 0..(K + (20 - 1)) / 20 {
    copy a[kk * 20, by * 40] -> a_s
    copy b[kk * 20, bx * 24] -> b_s
    if kk == 0 {
      gemm a_s.t, b_s -> acc, clear
    } else {
      gemm a_s.t, b_s -> acc
    }
  }
  copy acc -> c[by * 40, bx * 24]
}
"#,
    );
}

/// Every combination of transposes, clear and policy prints and parses back
/// to the same kernel; buffers referred to by id (`@5.t`) too.
#[test]
fn gemm_text_round_trips() {
    let policies = [WarpPolicy::Square, WarpPolicy::FullRow, WarpPolicy::FullCol];
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        for a_fragment in [false, true] {
            for (pi, policy) in policies.into_iter().enumerate() {
                let mut k = gemm_kernel(gemm_config(ta, tb, a_fragment, if pi == 0 { None } else { Some(pi as u32) }));
                // Give A a name shared with another buffer: printed by id.
                if pi == 2 {
                    k.buffers[5].name = "a_s".into();
                }
                set_policy(&mut k.body, policy);
                let text = print_kernel(&k);
                if pi == 2 {
                    assert!(
                        text.contains(&format!(
                            "gemm @4{}, @5{}",
                            if ta { ".t" } else { "" },
                            if tb { ".t" } else { "" }
                        )),
                        "{text}"
                    );
                }
                let back = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
                assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&k).unwrap(), "\n{text}");
                assert_eq!(print_kernel(&back), text);
            }
        }
    }
}

fn set_policy(body: &mut [Stmt], p: WarpPolicy) {
    for s in body {
        match &mut s.kind {
            StmtKind::Gemm { policy, .. } => *policy = p,
            StmtKind::For { body, .. } => set_policy(body, p),
            StmtKind::If { then, otherwise, .. } => {
                set_policy(then, p);
                set_policy(otherwise, p);
            }
            _ => {}
        }
    }
}

#[test]
fn gemm_text_errors() {
    let head = "kernel k(@0 a: &f16[4, 4]) threads=32 grid=(1, 1, 1) {\n  @1 s: shared f16[4, 4]\n  @2 acc: fragment f32[4, 4]\n";
    for (stmt, msg) in [
        ("gemm s, s -> acc, policy=diagonal", "unknown warp policy `diagonal`"),
        ("gemm s, s -> acc, fast", "unknown gemm modifier `fast`"),
        ("gemm s s -> acc", "expected `,`"),
    ] {
        let err = parse_kernel(&format!("{head}  {stmt}\n}}\n")).expect_err(stmt);
        assert!(err.message.contains(msg), "{stmt}: {err}");
        assert_eq!(err.line, 4, "{stmt}: {err}");
    }
    let ok = parse_kernel(&format!("{head}  gemm s.t, s -> acc, policy=full_col, clear\n}}\n")).unwrap();
    assert!(matches!(
        ok.body[0].kind,
        StmtKind::Gemm { trans_a: true, trans_b: false, clear: true, policy: WarpPolicy::FullCol, .. }
    ));
}

/// Garbled gemm text gives errors, never panics; what still parses and
/// verifies also runs in the interpreter without panicking.
#[test]
fn garbled_gemm_text_never_panics() {
    let text = print_kernel(&gemm_kernel(gemm_config(false, true, true, Some(2))));
    let chars: Vec<char> = text.chars().collect();
    let alphabet: Vec<char> = "%@[](){}<>=-+*/.,:&|^!0123456789aefinxNamut_ \n".chars().collect();
    let mut rng = Rng(77);
    let (mut parsed, mut verified) = (0, 0);
    for _ in 0..1500 {
        let mut c = chars.clone();
        let at = rng.below(c.len() as u64) as usize;
        c[at] = alphabet[rng.below(alphabet.len() as u64) as usize];
        let garbled: String = c.into_iter().collect();
        let Ok(k) = parse_kernel(&garbled) else { continue };
        parsed += 1;
        if tile_ir::verify::verify(&k).is_err() {
            continue;
        }
        verified += 1;
        let (m, n, kd) = (9usize, 7usize, 5usize);
        let a = vec![0u8; 2 * m * kd];
        let b = vec![0u8; 2 * n * kd];
        let c0 = vec![0u8; 4 * m * n];
        let mut out = vec![0u8; 4 * m * n];
        // Any result (often a shape error) is fine; a panic is not.
        let _ = launch(&k, &mut [ro(&a, &[m, kd]), ro(&b, &[n, kd]), ro(&c0, &[m, n]), rw(&mut out, &[m, n])]);
    }
    assert!(parsed > 0 && verified > 0, "parsed {parsed}, verified {verified}");
}

/// A kernel with squeezed tiles: `q.tile([b, s0.., h, ..])`-style windows of
/// a 4-D tensor, a strided column of a 2-D one.
fn squeezed_tiles() -> Kernel {
    let mut k = Kernel::new("nd", 64);
    let n = k.add_dim("N");
    let d = |n| vec![Extent::Dyn(n); 4];
    let q = k.add_tensor_param("q", DType::F16, d(n), false);
    let o = k.add_tensor_param("o", DType::F32, vec![Extent::Dyn(n), Extent::Const(8)], true);
    k.grid[0] = v(n);
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let s = local(&mut k, "s", Scope::Shared, DType::F16, &[16, 8]);
    let f = local(&mut k, "f", Scope::Fragment, DType::F32, &[16]);
    let row = Expr::binary(BinOp::Mul, v(bx), Expr::i32(16));
    k.body = vec![
        Stmt::spanned(
            StmtKind::Copy {
                src: TileRef {
                    buf: q,
                    origin: vec![v(bx), row.clone(), Expr::i32(2), Expr::i32(0)],
                    squeezed: vec![0, 2],
                },
                dst: TileRef::new(s, vec![]),
                fill: None,
                cache: CacheHint::Normal,
            },
            SpanId(1),
        ),
        Stmt::spanned(StmtKind::Fill { buf: f, value: Expr::f32(1.0) }, SpanId(2)),
        Stmt::spanned(
            StmtKind::Copy {
                src: TileRef::new(f, vec![]),
                dst: TileRef { buf: o, origin: vec![row, v(bx)], squeezed: vec![1] },
                fill: None,
                cache: CacheHint::Normal,
            },
            SpanId(3),
        ),
    ];
    k
}

#[test]
fn squeezed_tiles_text_and_round_trip() {
    let k = squeezed_tiles();
    tile_ir::verify::verify(&k).unwrap();
    let text = print_kernel(&k);
    assert!(text.contains("copy q[bx, bx * 16.., 2, 0..] -> s\n"), "{text}");
    assert!(text.contains("copy f -> o[bx * 16.., bx]\n"), "{text}");
    let back = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let kinds = |k: &Kernel| k.body.iter().map(|s| s.kind.clone()).collect::<Vec<_>>();
    assert_eq!(kinds(&back), kinds(&k), "\n{text}");
    assert_eq!(print_kernel(&back), text);
    // Full-rank tiles print as before: no `..`, no `squeezed` in the JSON.
    let plain = print_kernel(&softmax(4, 1024));
    assert!(plain.lines().filter(|l| l.contains("copy")).all(|l| !l.contains("..")), "{plain}");
    assert!(!serde_json::to_string(&softmax(4, 1024)).unwrap().contains("squeezed"));
}

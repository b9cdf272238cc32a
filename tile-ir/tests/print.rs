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
    let mut rng = XorShift(2024);
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

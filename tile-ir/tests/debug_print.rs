//! The debug print (`StmtKind::Print`): its text form, the verifier's
//! checks, the interpreter's lines (captured), and the PTX `vprintf` calls
//! assembled by ptxas for sm_80 and sm_90a.

mod ptxas;
use ptxas::assemble;
use tile_ir::interp::{capture_prints, launch, Arg, TensorData};
use tile_ir::print::{parse_kernel, print_kernel};
use tile_ir::*;

/// Prints per block (block 1 only, f32/i32/u32/bool/i64), and inside a
/// parallel loop an f16 element and its index (column 2 only).
const KERNEL: &str = r#"
kernel print_demo<%0 N>(@0 x: &f16[N], @1 y: &mut f32[N], %2 s: f32) threads=64 grid=((N + (64 - 1)) / 64, 1, 1) {
  %1 bx = block_idx.x
  @2 t: fragment f16[64]
  copy x[bx * 64] -> t
  if bx == 1 {
    print "block {} s = {} {:e} u={} b={} w={} {{%}}", bx, s, s * 1000.0f32, 7u32, bx == 1, 123456789012i64
  }
  for %3 i in parallel 0..64 {
    if i % 32 == 2 {
      print "t[{}] = {}", bx * 64 + i, t[i]
    }
    y[bx * 64 + i] = t[i] as f32 * s
  }
}
"#;

fn kernel() -> Kernel {
    parse_kernel(KERNEL).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn text_form_round_trips() {
    let k = kernel();
    let text = print_kernel(&k);
    assert!(text.contains(r#"print "t[{}] = {}", bx * 64 + i, t[i]"#), "{text}");
    let back = parse_kernel(&text).unwrap();
    assert_eq!(print_kernel(&back), text);
    // Escapes survive: quotes, backslashes, newlines, non-ASCII.
    let mut k2 = k.clone();
    k2.body
        .push(Stmt::new(StmtKind::Print { format: "q\"\\\n\té {}".into(), args: vec![Expr::Const(Value::I32(1))] }));
    let text = print_kernel(&k2);
    assert_eq!(print_kernel(&parse_kernel(&text).unwrap()), text);
}

#[test]
fn verifier_counts_placeholders_and_parses_formats() {
    for (format, args, want) in [
        ("{} {}", 1, "the format has 2 placeholders but 1 argument is given"),
        ("{}", 0, "the format has 1 placeholder but 0 arguments are given"),
        ("{:x}", 1, "unsupported placeholder `{:x}`"),
        ("{", 0, "unclosed `{`"),
    ] {
        let mut k = kernel();
        let args = (0..args).map(|i| Expr::Const(Value::I32(i))).collect();
        k.body.push(Stmt::new(StmtKind::Print { format: format.into(), args }));
        let errs = verify::verify(&k).unwrap_err();
        assert!(errs.iter().any(|e| e.message.contains(want)), "{format}: {errs:?}");
    }
}

fn run(n: usize, s: f32) -> (Vec<f32>, String) {
    let k = kernel();
    let x: Vec<u8> = (0..n).flat_map(|i| half::f16::from_f32(i as f32 * 0.5).to_le_bytes()).collect();
    let mut y = vec![0u8; n * 4];
    let (r, out) = capture_prints(|| {
        let mut args = vec![
            Arg::Tensor { data: TensorData::Ro(&x), shape: vec![n] },
            Arg::Tensor { data: TensorData::Rw(&mut y), shape: vec![n] },
            Arg::Scalar(Value::F32(s)),
        ];
        launch(&k, &mut args)
    });
    r.unwrap();
    (y.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(), out)
}

#[test]
fn interpreter_prints_each_line_once() {
    let (y, out) = run(150, 0.25);
    // Blocks run in order; inside the parallel loop iterations run in order;
    // out-of-range elements (past 150) print too: the print does not guard.
    let want = "t[2] = 1.000000\nt[34] = 17.000000\n\
                block 1 s = 0.250000 2.500000e+02 u=7 b=1 w=123456789012 {%}\n\
                t[66] = 33.000000\nt[98] = 49.000000\n\
                t[130] = 65.000000\nt[162] = 0.000000\n";
    assert_eq!(out, want);
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, i as f32 * 0.5 * 0.25);
    }
    // Without a capture the lines go to stderr, not into an outer capture's
    // string after it ended.
    let ((), outer) = capture_prints(|| {
        let (_, inner) = run(64, 1.0);
        assert_eq!(inner, "t[2] = 1.000000\nt[34] = 17.000000\n");
    });
    assert_eq!(outer, "");
}

#[test]
fn ptx_calls_vprintf_and_assembles() {
    let k = kernel();
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile(&k, target).unwrap_or_else(|e| panic!("{e:?}"));
        let ptx = &c.ptx;
        assert!(ptx.contains(".extern .func (.param .b32 tile_vprintf_ret) vprintf"), "{ptx}");
        assert!(
            ptx.matches(".global .align 1 .b8 tile_fmt").count() >= 2,
            "one string per print (and unrolled copy):\n{ptx}"
        );
        assert!(ptx.contains("call (tile_pr), vprintf, (tile_pp0, tile_pp1);"));
        assert!(ptx.contains("cvt.f64.f32"), "floats are passed as f64");
        assert!(ptx.contains("st.local.s64"), "i64 is passed as 8 bytes");
        // The C format: %f, %e, %u, %d (bool), %lld, %% and the newline.
        let fmt: Vec<u8> = "block %d s = %f %e u=%u b=%d w=%lld {%%}\n\0".bytes().collect();
        let bytes: Vec<String> = fmt.iter().map(|b| b.to_string()).collect();
        assert!(ptx.contains(&bytes.join(", ")), "{ptx}");
        assemble("print_demo", ptx, target.name());
    }
}

/// The example GEMM with a print after its output copy, and with one inside
/// its pipelined loop: every variant of sm_90a compiles and assembles; the
/// warp-specialized GEMM keeps the first (its consumers print) and leaves
/// the second (no longer only copies and gemms) to the warp-specialized
/// loop, whose consumers run the print.
#[test]
fn prints_in_the_hopper_schedules() {
    let text = tile_testkit::MATMUL_128X256.text();
    let after = text.replacen(
        "  copy acc -> c[by * 128, bx * 256]\n",
        "  copy acc -> c[by * 128, bx * 256]\n  print \"block ({}, {}) done\", bx, by\n",
        1,
    );
    let inside = text.replacen("    gemm a_s, b_s -> acc\n", "    gemm a_s, b_s -> acc\n    print \"k = {}\", k\n", 1);
    assert!(after != text && inside != text);
    for (text, first) in [(after, "warp_specialized_gemm"), (inside, "warp_specialized_loop_persistent")] {
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        // The persistent loop on (the default), so that its consumers print too.
        let v = compile_variants(
            &k,
            Target::Sm90a,
            CompileOptions { wsloop_persistent: true, ..CompileOptions::default() },
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(v[0].schedule, first, "{text}");
        for c in &v {
            assert!(c.ptx.contains("call (tile_pr), vprintf"), "{}: {}", c.schedule, c.ptx);
            assemble(&format!("matmul_print_{}", c.schedule), &c.ptx, "sm_90a");
        }
        let c = compile(&k, Target::Sm80).unwrap();
        assemble("matmul_print_sm80", &c.ptx, "sm_80");
    }
}

/// A parallel loop whose only fragment read is a print's argument: layout
/// inference sees it (the loop takes the fragment's layout), so it compiles
/// and the interpreter prints every element.
#[test]
fn print_is_a_fragment_read_for_layout_inference() {
    let text = r#"
kernel only_print<%0 N>(@0 x: &f32[N], @1 y: &mut f32[N]) threads=32 grid=((N + (4 - 1)) / 4, 1, 1) {
  %1 bx = block_idx.x
  @2 t: fragment f32[4]
  copy x[bx * 4] -> t
  for %2 i in parallel 0..4 {
    print "{}", t[i]
  }
}
"#;
    let k = parse_kernel(text).unwrap();
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile(&k, target).unwrap_or_else(|e| panic!("{e:?}"));
        assemble("only_print", &c.ptx, target.name());
    }
    let x: Vec<u8> = (0..4).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut y = vec![0u8; 16];
    let (r, out) = capture_prints(|| {
        let mut args = vec![
            Arg::Tensor { data: TensorData::Ro(&x), shape: vec![4] },
            Arg::Tensor { data: TensorData::Rw(&mut y), shape: vec![4] },
        ];
        launch(&k, &mut args)
    });
    r.unwrap();
    assert_eq!(out, "0.000000\n1.000000\n2.000000\n3.000000\n");
}

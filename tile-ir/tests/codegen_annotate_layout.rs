//! `annotate_layout`: a shared buffer's user-chosen layout (row-major,
//! padded rows, XOR swizzle) replaces the one layout inference picks, in a
//! 3-stage pipelined tensor-core gemm (and a transposed-A bf16 one) run on
//! the Thread IR simulator against an f64 reference at sizes that are not
//! multiples of the tiles; and the annotation visibly changes the code
//! (shared size, XOR instructions) without changing the result.

mod ptxas;
mod sim;

use half::{bf16, f16};
use std::collections::HashMap;
use tile_ir::print::parse_kernel;
use tile_ir::*;

/// The pipelined matmul of `codegen_gemm_pipelined.rs` with `{A}` / `{B}`
/// in place of the operands' layout annotations.
const MATMUL: &str = "kernel matmul<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[K, N], @2 c: &mut f16[M, N]) threads=256 grid=((N + 127) / 128, (M + 127) / 128, 1) swizzle=8 {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared{A} f16[128, 32]
  @4 b_s: shared{B} f16[32, 128]
  @5 acc: fragment f32[128, 128]
  fill acc, 0.0
  for %5 k in pipelined(3) 0..(K + 31) / 32 {
    copy a[by * 128, k * 32] -> a_s
    copy b[k * 32, bx * 128] -> b_s
    gemm a_s, b_s -> acc
  }
  copy acc -> c[by * 128, bx * 128]
}";

const GEMM_TN_BF16: &str = "kernel gemm_tn_bf16<%0 K, %1 M, %2 N>(@0 a: &bf16[K, M], @1 b: &bf16[K, N], @2 c: &mut bf16[M, N]) threads=128 grid=((N + 63) / 64, (M + 63) / 64, 1) {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared{A} bf16[32, 64]
  @4 b_s: shared{B} bf16[32, 64]
  @5 acc: fragment f32[64, 64]
  fill acc, 0.0
  for %5 k in pipelined(2) 0..(K + 31) / 32 {
    copy a[k * 32, by * 64] -> a_s
    copy b[k * 32, bx * 64] -> b_s
    gemm a_s.t, b_s -> acc
  }
  copy acc -> c[by * 64, bx * 64]
}";

fn with_layouts(text: &str, a: &str, b: &str) -> String {
    let wrap = |l: &str| if l.is_empty() { String::new() } else { format!("({l})") };
    text.replace("{A}", &wrap(a)).replace("{B}", &wrap(b))
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// Random values rounded to `dt` (f16 or bf16): (bytes, rounded values).
fn random(rng: &mut Rng, dt: DType, n: usize, lo: f32, hi: f32) -> (Vec<u8>, Vec<f64>) {
    let x: Vec<f32> = (0..n).map(|_| rng.f32(lo, hi)).collect();
    match dt {
        DType::F16 => (
            x.iter().flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes()).collect(),
            x.iter().map(|v| f16::from_f32(*v).to_f64()).collect(),
        ),
        DType::BF16 => (
            x.iter().flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes()).collect(),
            x.iter().map(|v| bf16::from_f32(*v).to_f64()).collect(),
        ),
        _ => panic!("inputs are f16 or bf16"),
    }
}

fn decode(dt: DType, b: &[u8]) -> Vec<f64> {
    b.chunks(2)
        .map(|c| {
            let bits = u16::from_le_bytes([c[0], c[1]]);
            match dt {
                DType::F16 => f16::from_bits(bits).to_f64(),
                _ => bf16::from_bits(bits).to_f64(),
            }
        })
        .collect()
}

/// Compiles `text` for sm_80 and runs it on the simulator: tensors in
/// parameter order, then `dims` (in `k.dims` order), then scalar bits.
fn run(text: &str, tensors: Vec<Vec<u8>>, dims: &[i64], scalars: &[u64]) -> Vec<Vec<u8>> {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    let c = compile(&k, Target::Sm80).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    let f = &c.function;
    let nt = tensors.len();
    let mut params = HashMap::new();
    for (i, (name, _)) in f.params.iter().enumerate() {
        let val = if i < nt {
            sim::GBASE + ((i as u64) << 32)
        } else if i < nt + dims.len() {
            dims[i - nt] as u32 as u64
        } else {
            scalars[i - nt - dims.len()]
        };
        params.insert(name.clone(), val);
    }
    let grid = tile_ir::abi::eval_grid(&k, dims).unwrap();
    let mut sm = sim::Sim::new(f, tensors, params);
    sm.run_grid(grid);
    sm.tensors
}

/// Relative L2 error of `got` against `want`.
fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// `op(a) · op(b)` in f64; `a` stored `[m, k]` (`[k, m]` if `ta`), `b` `[k, n]` (`[n, k]` if `tb`).
#[allow(clippy::too_many_arguments)]
fn reference(m: usize, n: usize, kk: usize, a: &[f64], b: &[f64], ta: bool, tb: bool) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..kk)
                .map(|p| {
                    let x = if ta { a[p * m + i] } else { a[i * kk + p] };
                    let y = if tb { b[j * kk + p] } else { b[p * n + j] };
                    x * y
                })
                .sum();
        }
    }
    c
}

#[allow(clippy::too_many_arguments)]
fn check_gemm(text: &str, dt: DType, m: usize, n: usize, kk: usize, ta: bool, tb: bool, dims: &[i64], tol: f64) {
    let mut rng = Rng(0x9E37_79B9 ^ (m * 1000 + n * 10 + kk) as u64);
    let (ab, av) = random(&mut rng, dt, m * kk, -1.0, 1.0);
    let (bb, bv) = random(&mut rng, dt, kk * n, -1.0, 1.0);
    // NaN bit patterns in the output: an element never written fails.
    let out = run(text, vec![ab, bb, vec![0xFF; 2 * m * n]], dims, &[]);
    let got = decode(dt, &out[2]);
    let want = reference(m, n, kk, &av, &bv, ta, tb);
    let err = rel_l2(&got, &want);
    assert!(err <= tol, "{m}x{n}x{kk}: relative L2 error {err:.3e} > {tol:.1e}");
}

#[test]
fn pipelined_matmul_with_each_annotation_matches_the_reference() {
    // a_s rows are 64 bytes (swizzle up to 2 bits), b_s rows 256 bytes.
    let cases = [
        ("row_major()", "row_major()"),
        ("padded(16)", "padded(32)"),
        ("swizzle(1)", "swizzle(3)"),
        ("swizzle(2)", "swizzle(1)"),
        ("padded(48)", "swizzle(2)"),
    ];
    for (a, b) in cases {
        let text = with_layouts(MATMUL, a, b);
        for (m, n, kk) in [(130, 129, 70), (70, 130, 33)] {
            check_gemm(&text, DType::F16, m, n, kk, false, false, &[m as i64, kk as i64, n as i64], 2e-3);
        }
    }
}

#[test]
fn transposed_a_bf16_with_annotations_matches_the_reference() {
    // 128-byte rows: swizzle(3) is CuTe's Swizzle<3,4,3>.
    for (a, b) in [("swizzle(3)", "padded(16)"), ("row_major()", "swizzle(2)"), ("padded(32)", "row_major()")] {
        let text = with_layouts(GEMM_TN_BF16, a, b);
        for (m, n, kk) in [(100, 70, 150), (65, 64, 31)] {
            check_gemm(&text, DType::BF16, m, n, kk, true, false, &[kk as i64, m as i64, n as i64], 1e-2);
        }
    }
}

/// Compiled for sm_80 without epilogue staging, so that the shared memory is
/// the pipelined operands' alone (the scratch tile would add to it).
fn compiled(text: &str) -> Compiled {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    compile_with(&k, Target::Sm80, CompileOptions { stage_epilogues: false }).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name))
}

#[test]
fn annotation_changes_the_code() {
    let chosen = compiled(&with_layouts(MATMUL, "", ""));
    let plain = compiled(&with_layouts(MATMUL, "row_major()", "row_major()"));
    let padded = compiled(&with_layouts(MATMUL, "padded(16)", "padded(16)"));
    let xors = |c: &Compiled| c.ptx.matches("xor.b32").count();
    // Inference swizzles both operands; row-major has no XOR at all.
    assert!(xors(&chosen) > 0, "inferred layouts should be swizzled");
    assert_eq!(xors(&plain), 0, "row_major() operands must not be swizzled:\n{}", plain.ptx);
    assert_ne!(chosen.ptx, plain.ptx);
    // Shared size: 3 stages × (a_s + b_s), each stage 128-byte aligned.
    let stage = |bytes: i64| (bytes + 127) / 128 * 128;
    assert_eq!(plain.shared_bytes as i64, 3 * (stage(128 * 64) + stage(32 * 256)));
    assert_eq!(padded.shared_bytes as i64, 3 * (stage(128 * 80) + stage(32 * 272)));
    // The plan reports the user's layout.
    let desc = |c: &Compiled, name: &str| c.layouts.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone()).unwrap_or_default();
    assert!(desc(&padded, "a_s").contains("row_bytes=80"), "{:?}", padded.layouts);
    let swz = compiled(&with_layouts(MATMUL, "swizzle(1)", "swizzle(3)"));
    assert!(desc(&swz, "a_s").starts_with("shared swizzle<1,4,2>"), "{:?}", swz.layouts);
    assert!(desc(&swz, "b_s").starts_with("shared swizzle<3,4,4>"), "{:?}", swz.layouts);
    assert_ne!(swz.ptx, chosen.ptx);
}

#[test]
fn bad_annotations_are_compile_errors() {
    let err = |text: String| -> String {
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("parse: {e:?}"));
        match compile(&k, Target::Sm80) {
            Ok(_) => panic!("compiled:\n{text}"),
            Err(es) => es.iter().map(|e| e.message.clone()).collect::<Vec<_>>().join("\n"),
        }
    };
    let e = err(with_layouts(MATMUL, "swizzle(3)", ""));
    assert!(e.contains("`swizzle(3)` needs rows of a power of two of at least 128 bytes") && e.contains("64 bytes"), "{e}");
    let e = err(with_layouts(MATMUL, "padded(8)", ""));
    assert!(e.contains("positive multiple of 16"), "{e}");
    let e = err(with_layouts(MATMUL, "", "swizzle(4)"));
    assert!(e.contains("must be 1, 2 or 3"), "{e}");
    let e = err(MATMUL.replace("{A}", "").replace("{B}", "").replace("@5 acc: fragment f32", "@5 acc: fragment(row_major()) f32"));
    assert!(e.contains("only shared buffers have a layout"), "{e}");
}

#[test]
fn annotation_prints_and_parses_back() {
    let k = parse_kernel(&with_layouts(MATMUL, "padded(16)", "swizzle(3)")).unwrap();
    assert_eq!(k.buffers[3].layout, Some(SharedLayoutSpec::Padded { bytes: 16 }));
    assert_eq!(k.buffers[4].layout, Some(SharedLayoutSpec::Swizzle { bits: 3 }));
    let text = tile_ir::print::print_kernel(&k);
    assert!(text.contains("a_s: shared(padded(16)) f16[128, 32]"), "{text}");
    assert_eq!(parse_kernel(&text).unwrap(), k);
    let json = serde_json::to_string(&k).unwrap();
    let back: Kernel = serde_json::from_str(&json).unwrap();
    assert_eq!(back, k);
    assert!(parse_kernel(&with_layouts(MATMUL, "diagonal(2)", "")).is_err());
}

#[test]
fn annotated_kernels_assemble_on_both_targets() {
    for (a, b) in [("row_major()", "padded(16)"), ("swizzle(2)", "swizzle(3)")] {
        let k = parse_kernel(&with_layouts(MATMUL, a, b)).unwrap();
        for (target, arch) in [(Target::Sm80, "sm_80"), (Target::Sm90a, "sm_90a")] {
            let c = compile(&k, target).unwrap_or_else(|e| panic!("compile ({a}, {b}) {arch}: {e:?}"));
            // None when ptxas is absent (the `ptxas` module says so; `CI` makes that a failure).
            if let Some(report) = ptxas::assemble(&k.name, &c.ptx, arch) {
                assert!(report.contains("0 bytes spill stores"), "({a}, {b}) {arch} spills:\n{report}");
            }
        }
    }
}

//! Interpreter tests of `gemm`: hand-built tiled GEMMs on random inputs of
//! awkward sizes (M, N, K and the tiles not multiples of 16), every
//! transpose, f16 and bf16, A in shared memory or a fragment, `clear` versus
//! accumulation across a serial K loop, and rasterized grids; checked exactly
//! against the documented f32 summation order and closely against f64.

mod interp_kernels;

use half::{bf16, f16};
use interp_kernels::*;
use std::time::Instant;
use tile_ir::interp::Arg;
use tile_ir::*;

/// Random values of `dtype` in [-1, 1): their bytes and their exact values.
fn random_matrix(rng: &mut Rng, dtype: DType, len: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::with_capacity(2 * len);
    let mut values = Vec::with_capacity(len);
    for _ in 0..len {
        let x = rng.f32(-1.0, 1.0);
        let (bits, exact) = match dtype {
            DType::F16 => (f16::from_f32(x).to_bits(), f16::from_f32(x).to_f32()),
            DType::BF16 => (bf16::from_f32(x).to_bits(), bf16::from_f32(x).to_f32()),
            other => panic!("not a gemm operand type: {other}"),
        };
        bytes.extend_from_slice(&bits.to_le_bytes());
        values.push(exact);
    }
    (bytes, values)
}

struct GemmRun {
    got: Vec<f32>,
    /// `c0 + Σ_k` in f32, k ascending: the interpreter's documented order.
    want_f32: Vec<f32>,
    want_f64: Vec<f64>,
    secs: f64,
}

fn run_gemm(cfg: GemmConfig, m: usize, n: usize, kd: usize, seed: u64) -> GemmRun {
    let k = gemm_kernel(cfg);
    verify::verify(&k).unwrap();
    let mut rng = Rng(seed);
    let (ab, a) = random_matrix(&mut rng, cfg.dtype, m * kd);
    let (bb, b) = random_matrix(&mut rng, cfg.dtype, kd * n);
    let c0: Vec<f32> = (0..m * n).map(|_| rng.f32(-4.0, 4.0)).collect();
    let c0b = f32_bytes(&c0);
    let mut cb = f32_bytes(&vec![f32::NAN; m * n]);
    // op(a)[i, p] and op(b)[p, j] from the stored layouts.
    let a_at = |i: usize, p: usize| if cfg.trans_a { a[p * m + i] } else { a[i * kd + p] };
    let b_at = |p: usize, j: usize| if cfg.trans_b { b[j * kd + p] } else { b[p * n + j] };
    let a_shape = if cfg.trans_a { [kd, m] } else { [m, kd] };
    let b_shape = if cfg.trans_b { [n, kd] } else { [kd, n] };
    let t = Instant::now();
    launch(&k, &mut [ro(&ab, &a_shape), ro(&bb, &b_shape), ro(&c0b, &[m, n]), rw(&mut cb, &[m, n])]).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let mut want_f32 = vec![0.0f32; m * n];
    let mut want_f64 = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc32 = if cfg.clear_first { 0.0 } else { c0[i * n + j] };
            let mut acc64 = acc32 as f64;
            for p in 0..kd {
                acc32 += a_at(i, p) * b_at(p, j);
                acc64 += a_at(i, p) as f64 * b_at(p, j) as f64;
            }
            want_f32[i * n + j] = acc32;
            want_f64[i * n + j] = acc64;
        }
    }
    GemmRun { got: bytes_f32(&cb), want_f32, want_f64, secs }
}

fn check(run: &GemmRun, what: &str) {
    for (i, ((&g, &w32), &w64)) in run.got.iter().zip(&run.want_f32).zip(&run.want_f64).enumerate() {
        assert_eq!(g.to_bits(), w32.to_bits(), "{what}: element {i}: got {g}, f32 reference {w32}");
        assert!((g as f64 - w64).abs() <= 1e-4 * (1.0 + w64.abs()), "{what}: element {i}: got {g}, f64 {w64}");
    }
}

fn config(dtype: DType, trans_a: bool, trans_b: bool) -> GemmConfig {
    GemmConfig { dtype, trans_a, trans_b, a_fragment: false, clear_first: true, tile: (40, 24, 20), swizzle: None }
}

#[test]
fn gemm_every_transpose_and_dtype_on_awkward_shapes() {
    let mut seed = 1;
    for dtype in [DType::F16, DType::BF16] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            for (m, n, kd) in [(97, 61, 53), (40, 24, 20), (1, 1, 1), (7, 50, 41)] {
                seed += 1;
                let run = run_gemm(config(dtype, ta, tb), m, n, kd, seed);
                check(&run, &format!("{dtype} trans_a={ta} trans_b={tb} {m}x{n}x{kd}"));
            }
        }
    }
}

/// Without `clear` the product is added to what the accumulator held (`c0`);
/// with `clear` on the first K step, `c0` is discarded.
#[test]
fn gemm_clear_versus_accumulate_across_the_k_loop() {
    for clear_first in [true, false] {
        let cfg = GemmConfig { clear_first, ..config(DType::F16, false, true) };
        let run = run_gemm(cfg, 53, 45, 67, 99);
        check(&run, &format!("clear_first={clear_first}"));
    }
    // The two differ by c0: the test above can tell them apart.
    let a = run_gemm(GemmConfig { clear_first: true, ..config(DType::F16, false, true) }, 5, 5, 5, 7);
    let b = run_gemm(GemmConfig { clear_first: false, ..config(DType::F16, false, true) }, 5, 5, 5, 7);
    assert!(a.got.iter().zip(&b.got).any(|(x, y)| x != y));
}

#[test]
fn gemm_with_a_in_a_fragment() {
    for (ta, tb) in [(false, false), (true, true)] {
        let cfg = GemmConfig { a_fragment: true, ..config(DType::BF16, ta, tb) };
        let run = run_gemm(cfg, 45, 30, 33, 5);
        check(&run, &format!("A fragment, trans_a={ta} trans_b={tb}"));
    }
}

/// A rasterized grid still runs every block once (the output is poisoned
/// with NaN before the launch).
#[test]
fn gemm_on_a_rasterized_grid() {
    for panel in [1, 2, 3, 16] {
        let cfg = GemmConfig { swizzle: Some(panel), tile: (16, 8, 16), ..config(DType::F16, false, false) };
        let run = run_gemm(cfg, 75, 43, 20, u64::from(panel));
        check(&run, &format!("panel {panel}"));
    }
}

/// One 128×128×64 gemm per block: well under a second even in debug builds.
#[test]
fn gemm_128x128x64_is_fast() {
    let cfg = GemmConfig { tile: (128, 128, 64), ..config(DType::F16, false, true) };
    let run = run_gemm(cfg, 128, 128, 64, 11);
    check(&run, "128x128x64");
    eprintln!("gemm 128x128x64: {:.3} s", run.secs);
    assert!(run.secs < 1.0, "a 128x128x64 gemm took {} s", run.secs);
}

/// The text form of a gemm kernel parses, verifies and runs like the built one.
#[test]
fn gemm_kernel_from_text_runs() {
    let text = r#"
kernel mm<%0 M, %1 N>(@0 a: &bf16[M, 24], @1 b: &bf16[N, 24], @2 c: &mut f32[M, N]) threads=64 grid=((N + 15) / 16, (M + 31) / 32, 1) swizzle=2 {
  %2 bx = block_idx.x
  %3 by = block_idx.y
  @3 a_s: shared bf16[32, 24]
  @4 b_s: shared bf16[16, 24]
  @5 acc: fragment f32[32, 16]
  copy a[by * 32, 0] -> a_s
  copy b[bx * 16, 0] -> b_s
  gemm a_s, b_s.t -> acc, clear, policy=full_row
  copy acc -> c[by * 32, bx * 16]
}
"#;
    let k = print::parse_kernel(text).unwrap();
    verify::verify(&k).unwrap();
    assert_eq!(k.rasterize, Some(2));
    let (m, n, kd) = (70, 37, 24);
    let mut rng = Rng(21);
    let (ab, a) = random_matrix(&mut rng, DType::BF16, m * kd);
    let (bb, b) = random_matrix(&mut rng, DType::BF16, n * kd);
    let mut cb = f32_bytes(&vec![f32::NAN; m * n]);
    launch(&k, &mut [ro(&ab, &[m, kd]), ro(&bb, &[n, kd]), rw(&mut cb, &[m, n])]).unwrap();
    let c = bytes_f32(&cb);
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..kd {
                acc += a[i * kd + p] * b[j * kd + p];
            }
            assert_eq!(c[i * n + j], acc, "({i}, {j})");
        }
    }
    let _ = Arg::Scalar(Value::I32(0));
}

/// Kernels travel to the interpreter as JSON (`META.ir`): gemm and the
/// rasterization survive it, and JSON without `rasterize` (older kernels)
/// still reads, as `None`.
#[test]
fn gemm_kernel_json_round_trips() {
    let k = gemm_kernel(GemmConfig { swizzle: Some(5), ..config(DType::BF16, true, false) });
    let json = serde_json::to_string(&k).unwrap();
    assert!(json.contains("\"rasterize\":5"), "{json}");
    let back: Kernel = serde_json::from_str(&json).unwrap();
    assert_eq!(back, k);
    let plain = gemm_kernel(config(DType::F16, false, false));
    let json = serde_json::to_string(&plain).unwrap();
    assert!(!json.contains("rasterize"), "{json}");
    let back: Kernel = serde_json::from_str(&json).unwrap();
    assert_eq!(back.rasterize, None);
}

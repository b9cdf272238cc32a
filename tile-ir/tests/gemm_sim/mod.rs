//! The simulator harness shared by the gemm codegen tests: random f16/bf16
//! inputs, a kernel in text form compiled for sm_80 and run on the Thread IR
//! simulator (`crate::sim`), and an f64 reference to compare with.
#![allow(dead_code)]

use crate::sim;
use half::{bf16, f16};
use std::collections::HashMap;
use tile_ir::print::parse_kernel;
use tile_ir::*;

/// The example GEMM at 128×128×32, 3 stages, f16 (its shape before it moved
/// to 128×256×64), as the macro lowers it.
pub const MATMUL: &str = "kernel matmul<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[K, N], @2 c: &mut f16[M, N]) threads=256 grid=((N + 127) / 128, (M + 127) / 128, 1) swizzle=8 {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[128, 32]
  @4 b_s: shared f16[32, 128]
  @5 acc: fragment f32[128, 128]
  fill acc, 0.0
  for %5 k in pipelined(3) 0..(K + 31) / 32 {
    copy a[by * 128, k * 32] -> a_s
    copy b[k * 32, bx * 128] -> b_s
    gemm a_s, b_s -> acc
  }
  copy acc -> c[by * 128, bx * 128]
}";

/// The FlashAttention inner loop (head dim 64, 64 query rows per block,
/// 128 threads, 2 stages, P·V with A from registers), as the macro lowers it.
pub const ATTENTION: &str = "kernel attention<%0 SQ, %1 SK>(@0 q: &f16[SQ, 64], @1 k: &f16[SK, 64], @2 v: &f16[SK, 64], @3 o: &mut f16[SQ, 64], %2 scale: f32) threads=128 grid=((SQ + 63) / 64, 1, 1) {
  %3 bx = block_idx.x
  @4 q_s: shared f16[64, 64]
  @5 k_s: shared f16[64, 64]
  @6 v_s: shared f16[64, 64]
  @7 s: fragment f32[64, 64]
  @8 p: fragment f16[64, 64]
  @9 acc: fragment f32[64, 64]
  @10 m: fragment f32[64]
  @11 m_prev: fragment f32[64]
  @12 r: fragment f32[64]
  @13 l: fragment f32[64]
  @14 row_sum: fragment f32[64]
  copy q[bx * 64, 0] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %4 kb in pipelined(2) 0..(SK + 63) / 64 {
    copy k[kb * 64, 0] -> k_s
    copy v[kb * 64, 0] -> v_s
    gemm q_s, k_s.t -> s, clear, policy=full_row
    for %5 i in parallel 0..64 {
      for %6 j in parallel 0..64 {
        if kb * 64 + %6 >= SK {
          s[%5, %6] = -inf
        }
      }
    }
    copy m -> m_prev
    reduce.max s -> m, dim=1, keep
    for %7 i in parallel 0..64 {
      r[%7] = exp2((m_prev[%7] - m[%7]) * scale)
    }
    for %8 i in parallel 0..64 {
      for %9 j in parallel 0..64 {
        s[%8, %9] = exp2(s[%8, %9] * scale - m[%8] * scale)
      }
    }
    reduce.sum s -> row_sum, dim=1
    for %10 i in parallel 0..64 {
      l[%10] = l[%10] * r[%10] + row_sum[%10]
    }
    for %11 i in parallel 0..64 {
      for %12 j in parallel 0..64 {
        acc[%11, %12] = acc[%11, %12] * r[%11]
      }
    }
    copy s -> p
    gemm p, v_s -> acc, policy=full_row
  }
  for %13 i in parallel 0..64 {
    for %14 j in parallel 0..64 {
      acc[%13, %14] = acc[%13, %14] / l[%13]
    }
  }
  copy acc -> o[bx * 64, 0]
}";

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// Random values rounded to `dt` (f16 or bf16): (bytes, rounded values).
pub fn random(rng: &mut Rng, dt: DType, n: usize, lo: f32, hi: f32) -> (Vec<u8>, Vec<f64>) {
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

pub fn decode(dt: DType, b: &[u8]) -> Vec<f64> {
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
pub fn run(text: &str, tensors: Vec<Vec<u8>>, dims: &[i64], scalars: &[u64]) -> Vec<Vec<u8>> {
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
pub fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// `op(a) · op(b)` in f64; `a` stored `[m, k]` (`[k, m]` if `ta`), `b` `[k, n]` (`[n, k]` if `tb`).
#[allow(clippy::too_many_arguments)]
pub fn reference(m: usize, n: usize, kk: usize, a: &[f64], b: &[f64], ta: bool, tb: bool) -> Vec<f64> {
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
pub fn check_gemm(text: &str, dt: DType, m: usize, n: usize, kk: usize, ta: bool, tb: bool, dims: &[i64], tol: f64) {
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

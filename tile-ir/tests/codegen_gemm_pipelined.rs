//! The gemm examples' kernels as the `tile` macro lowers them (text form of
//! `examples/kernels/gemm.rs` and `tests/kernels/gemm.rs`): tensor-core gemm
//! (gemm-cg) inside software-pipelined loops (gemm-pipe), with rasterization
//! (`swizzle=`), both operand transposes and the FlashAttention inner loop
//! (A from registers), run on the Thread IR simulator (which models cp.async
//! as asynchronous and checks shared-memory races) against f64 references at
//! sizes that are not multiples of the tiles.
//!
//! This is where the two branches meet: ldmatrix must read the stage that the
//! pipelined copies filled, and the schedule's waits must cover it.

mod gemm_sim;
mod sim;

use gemm_sim::*;
use tile_ir::print::parse_kernel;
use tile_ir::*;

const MATMUL_BT: &str = "kernel matmul_bt<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[N, K], @2 c: &mut f16[M, N]) threads=256 grid=((N + 127) / 128, (M + 127) / 128, 1) swizzle=8 {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[128, 32]
  @4 b_s: shared f16[128, 32]
  @5 acc: fragment f32[128, 128]
  fill acc, 0.0
  for %5 k in pipelined(3) 0..(K + 31) / 32 {
    copy a[by * 128, k * 32] -> a_s
    copy b[bx * 128, k * 32] -> b_s
    gemm a_s, b_s.t -> acc
  }
  copy acc -> c[by * 128, bx * 128]
}";

const GEMM_TN_BF16: &str = "kernel gemm_tn_bf16<%0 K, %1 M, %2 N>(@0 a: &bf16[K, M], @1 b: &bf16[K, N], @2 c: &mut bf16[M, N]) threads=128 grid=((N + 63) / 64, (M + 63) / 64, 1) {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared bf16[32, 64]
  @4 b_s: shared bf16[32, 64]
  @5 acc: fragment f32[64, 64]
  fill acc, 0.0
  for %5 k in pipelined(2) 0..(K + 31) / 32 {
    copy a[k * 32, by * 64] -> a_s
    copy b[k * 32, bx * 64] -> b_s
    gemm a_s.t, b_s -> acc
  }
  copy acc -> c[by * 64, bx * 64]
}";

#[test]
fn matmul_three_stages_with_rasterization() {
    // K = 70: three k-steps (the last partial), as many as stages; K = 33: fewer; K = 161: more.
    for (m, n, kk) in [(130, 129, 70), (129, 257, 161), (1, 1, 1), (70, 130, 33)] {
        check_gemm(MATMUL, DType::F16, m, n, kk, false, false, &[m as i64, kk as i64, n as i64], 2e-3);
    }
}

#[test]
fn matmul_b_transposed() {
    for (m, n, kk) in [(130, 129, 100), (5, 200, 64)] {
        check_gemm(MATMUL_BT, DType::F16, m, n, kk, false, true, &[m as i64, kk as i64, n as i64], 2e-3);
    }
}

#[test]
fn a_transposed_bf16_two_stages() {
    for (m, n, kk) in [(100, 70, 150), (65, 64, 31)] {
        check_gemm(GEMM_TN_BF16, DType::BF16, m, n, kk, true, false, &[kk as i64, m as i64, n as i64], 1e-2);
    }
}

#[test]
fn attention_pipelined_over_key_tiles() {
    for (sq, sk) in [(70, 129), (64, 64), (1, 200)] {
        let d = 64;
        let mut rng = Rng(0xA77E ^ (sq * 1000 + sk) as u64);
        let (qb, qv) = random(&mut rng, DType::F16, sq * d, -2.0, 2.0);
        let (kb, kv) = random(&mut rng, DType::F16, sk * d, -2.0, 2.0);
        let (vb, vv) = random(&mut rng, DType::F16, sk * d, -1.0, 1.0);
        let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
        let out = run(
            ATTENTION,
            vec![qb, kb, vb, vec![0xFF; 2 * sq * d]],
            &[sq as i64, sk as i64],
            &[scale.to_bits() as u64],
        );
        let got = decode(DType::F16, &out[3]);
        let mut want = vec![0.0; sq * d];
        for i in 0..sq {
            let s: Vec<f64> = (0..sk)
                .map(|j| (0..d).map(|c| qv[i * d + c] * kv[j * d + c]).sum::<f64>() / (d as f64).sqrt())
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = p.iter().sum();
            for c in 0..d {
                want[i * d + c] = (0..sk).map(|j| p[j] * vv[j * d + c]).sum::<f64>() / sum;
            }
        }
        let err = rel_l2(&got, &want);
        assert!(err <= 5e-3, "attention sq={sq} sk={sk}: relative L2 error {err:.3e}");
    }
}

/// `use_swizzle(2)` on a 5 × 7 grid: the prologue remaps the block indices
/// (the remap code is there, and only with `swizzle=`), every block still
/// writes its own coordinates exactly once (the remap is a bijection).
#[test]
fn rasterized_blocks_cover_the_grid_once() {
    let text = |swizzle: &str| {
        format!(
            "kernel blocks<%0 H, %1 W>(@0 out: &mut i32[H, W]) threads=32 grid=(W, H, 1){swizzle} {{
  %2 bx = block_idx.x
  %3 by = block_idx.y
  out[by, bx] = by * 1000 + bx
}}"
        )
    };
    let (h, w) = (7usize, 5usize);
    let out = run(&text(" swizzle=2"), vec![vec![0xFF; 4 * h * w]], &[h as i64, w as i64], &[]);
    let got: Vec<i32> = out[0].chunks(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let want: Vec<i32> = (0..h * w).map(|i| (i / w * 1000 + i % w) as i32).collect();
    assert_eq!(got, want);
    let ptx = |t: &str| compile(&parse_kernel(t).unwrap(), Target::Sm80).unwrap().ptx;
    assert!(ptx(&text(" swizzle=2")).contains("min.s32"), "no rasterization code");
    assert!(!ptx(&text("")).contains("min.s32"), "rasterization code without swizzle");
}

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
use tile_testkit::{Matmul, ATTENTION, GEMM_TN_BF16, MATMUL};

/// The example matmul with B stored `[N, K]`.
const MATMUL_BT: Matmul = Matmul { name: "matmul_bt", trans_b: true, ..MATMUL };

#[test]
fn matmul_three_stages_with_rasterization() {
    // K = 70: three k-steps (the last partial), as many as stages; K = 33: fewer; K = 161: more.
    for (m, n, kk) in [(130, 129, 70), (129, 257, 161), (1, 1, 1), (70, 130, 33)] {
        check_gemm(&MATMUL.text(), DType::F16, m, n, kk, false, false, &[m as i64, kk as i64, n as i64], 2e-3);
    }
}

#[test]
fn matmul_b_transposed() {
    for (m, n, kk) in [(130, 129, 100), (5, 200, 64)] {
        check_gemm(&MATMUL_BT.text(), DType::F16, m, n, kk, false, true, &[m as i64, kk as i64, n as i64], 2e-3);
    }
}

#[test]
fn a_transposed_bf16_two_stages() {
    for (m, n, kk) in [(100, 70, 150), (65, 64, 31)] {
        check_gemm(&GEMM_TN_BF16.text(), DType::BF16, m, n, kk, true, false, &[kk as i64, m as i64, n as i64], 1e-2);
    }
}

#[test]
fn attention_pipelined_over_key_tiles() {
    for (sq, sk) in [(70, 129), (64, 64), (1, 200)] {
        check_attention(Target::Sm80, ATTENTION, DType::F16, 64, sq, sk, 0xA77E ^ (sq * 1000 + sk) as u64, 5e-3);
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

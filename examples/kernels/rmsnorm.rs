//! RMSNorm: `y = x / sqrt(mean(x²) + eps) · w` over each row of an f32
//! `[M, N]` matrix, one block per row: a pass over column tiles for the sum
//! of squares, then a pass that normalizes and scales (rows of any length).
//! Used by `examples/candle_rmsnorm.rs` as a candle `CustomOp2`.
#![allow(dead_code)]
use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BN = 1024))]
pub fn rmsnorm(x: &Tensor<f32, M, N>, w: &Tensor<f32, N>, y: &mut Tensor<f32, M, N>, eps: f32) {
    let row = grid(M);
    let mut t = fragment::<f32, 1, BN>();
    let mut sq = fragment::<f32, 1>();
    let mut tile_sq = fragment::<f32, 1>();
    clear(&mut sq);
    for c in 0..cdiv(N, BN) {
        copy(x.tile([row, c * BN]), &mut t);
        for (i, j) in parallel((1, BN)) {
            t[(i, j)] = t[(i, j)] * t[(i, j)];
        }
        reduce_sum(&t, &mut tile_sq, 1);
        for i in parallel(1) {
            sq[i] = sq[i] + tile_sq[i];
        }
    }
    for c in 0..cdiv(N, BN) {
        copy(x.tile([row, c * BN]), &mut t);
        for (i, j) in parallel((1, BN)) {
            t[(i, j)] = t[(i, j)] * rsqrt(sq[i] / (N as f32) + eps) * w[c * BN + j];
        }
        copy(&t, y.tile([row, c * BN]));
    }
}

/// The CPU reference, in f64.
pub fn reference(x: &[f32], w: &[f32], n: usize, eps: f32) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
        let r = 1.0 / (ms + eps as f64).sqrt();
        out.extend(row.iter().zip(w).map(|(&v, &g)| v as f64 * r * g as f64));
    }
    out
}

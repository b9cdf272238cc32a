//! Matrix multiply on tensor cores, the DESIGN north star: one block computes
//! a `BM × BN` tile of `C = A · B` from `BK`-wide slices of A and B staged in
//! shared memory over a software pipeline of `STAGES` buffers, accumulating
//! in an f32 fragment; the epilogue rounds it to the output type. Edges (M,
//! N, K not multiples of the tile) are masked: reads past the end give zeros,
//! which add nothing to the sums, and writes past the end are skipped.
//!
//! Tile 128 × 256 × 64, 3 stages, 256 threads: the fastest of the shapes that
//! `examples/gemm_tune.rs` sweeps on the H200 (0.56 of cuBLAS at 8192³ against
//! 0.47 for 128 × 128 × 32; BENCHMARKS.md).
//!
//! One generic kernel per orientation: `matmul` (`c = a · b`) and
//! `matmul_bt` (`c = a · bᵀ`, B given as `[N, K]`, multiplied as Bᵀ without a
//! copy), over the input type `T` (f16 or bf16), the output type `O`, the
//! block tile `BM × BN`, the K slice `BK`, the pipeline depth `STAGES`, the
//! threads per block (and, for `matmul`, the rasterization panel `PANEL`).
//! Each instance listed is compiled at build time; `tune(..)` makes the
//! tile parameters the autotuner's: [`example_tuned`] (what the example
//! launches on a GPU) runs the fastest instance of the caller's types for
//! each shape bucket, [`example`] the fixed configuration the tests check.
//! Plus the f64 CPU reference.
#![allow(dead_code)]
use tile::prelude::*;

/// `c = a · b`: `T` in, f32 accumulation, `O` out; blocks rasterized in
/// panels of `PANEL` columns (`use_swizzle`) for L2 reuse.
#[tile_kernel(
    threads = THREADS,
    instances(
        // The example's configuration (`EXAMPLE`), in both input types, and
        // the unrounded f32 accumulator (the tests' tight check of the
        // tensor cores' accumulation).
        (f16, f16, 128, 256, 64, 3, 256, 8),
        (bf16, bf16, 128, 256, 64, 3, 256, 8),
        (bf16, f32, 128, 256, 64, 3, 256, 8),
        // 2, 3 and 4 stages of 128 × 128 × 64 (4 stages of 128 × 256 × 64
        // exceed sm_80's shared memory): outputs must not depend on them.
        (f16, f16, 128, 128, 64, 2, 256, 8),
        (f16, f16, 128, 128, 64, 3, 256, 8),
        (f16, f16, 128, 128, 64, 4, 256, 8),
        // One consumer warpgroup owning a whole 64-row tile.
        (f16, f16, 64, 256, 64, 4, 128, 8),
        // The rest of `examples/gemm_tune.rs`'s sweep.
        (f16, f16, 128, 128, 32, 3, 256, 8),
        (f16, f16, 128, 128, 32, 4, 256, 8),
        (f16, f16, 128, 256, 32, 3, 256, 8),
        (f16, f16, 256, 128, 32, 3, 256, 8),
        (f16, f16, 128, 256, 32, 3, 512, 8),
        (f16, f16, 128, 128, 64, 4, 128, 8),
        // Small tiles with narrower rasterization panels (the tests'
        // interpreter-sized bf16 → f32 check).
        (bf16, f32, 64, 64, 32, 3, 128, 4),
        // 4 stages of 128 × 256 × 64: 192 KiB of shared memory, more than
        // sm_80 has, so a candidate on sm_90a only (dropped from sm_80's
        // candidates with a note in `TILE_DUMP`).
        (f16, f16, 128, 256, 64, 4, 256, 8),
    ),
    // `launch_tuned::<T, O>` times the instances of the caller's `T, O` and
    // keeps the fastest per device and shape bucket.
    tune(BM, BN, BK, STAGES, THREADS, PANEL)
)]
pub fn matmul<
    T: Float16,
    O: Float,
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const THREADS: usize,
    const PANEL: usize,
>(
    a: &Tensor<T, M, K>,
    b: &Tensor<T, K, N>,
    c: &mut Tensor<O, M, N>,
) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    use_swizzle(PANEL);
    let mut a_s = shared::<T, BM, BK>();
    let mut b_s = shared::<T, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = a · bᵀ` with `b` stored `[N, K]` (the layout of K in attention, and
/// of a linear layer's weight): the shared tile is `[BN, BK]` and `gemm`
/// reads it transposed.
#[tile_kernel(
    threads = THREADS,
    instances(
        (f16, f16, 128, 256, 64, 3, 256),
        (bf16, bf16, 128, 256, 64, 3, 256),
        // One consumer warpgroup, 64 × 128.
        (bf16, bf16, 64, 128, 64, 4, 128),
    ),
    tune(BM, BN, BK, STAGES, THREADS)
)]
pub fn matmul_bt<
    T: Float16,
    O: Float,
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const THREADS: usize,
>(
    a: &Tensor<T, M, K>,
    b: &Tensor<T, N, K>,
    c: &mut Tensor<O, M, N>,
) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    use_swizzle(8);
    let mut a_s = shared::<T, BM, BK>();
    let mut b_s = shared::<T, BN, BK>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([bx * BN, k * BK]), &mut b_s);
        gemm(&a_s, &b_s.t(), &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// The example's configuration: `matmul::launch::<T, T, 128, 256, 64, 3, 256, 8>`.
pub fn example<T: Element>(
    s: &Stream,
    a: &DeviceTensor<T>,
    b: &DeviceTensor<T>,
    c: &mut DeviceTensor<T>,
) -> tile::Result<()>
where
    matmul::Instances: matmul::Instance<T, T, 128, 256, 64, 3, 256, 8>,
{
    matmul::launch::<T, T, 128, 256, 64, 3, 256, 8>(s, a, b, c)
}

/// `c = a · b` through the autotuner: the fastest of `matmul`'s instances
/// for `T` in and out, per device and shape bucket (`tile::tune`).
pub fn example_tuned<T: Element>(
    s: &Stream,
    a: &DeviceTensor<T>,
    b: &DeviceTensor<T>,
    c: &mut DeviceTensor<T>,
) -> tile::Result<()>
where
    matmul::Instances: matmul::Tuned<T, T>,
{
    matmul::launch_tuned::<T, T>(s, a, b, c)
}

/// The same for `matmul_bt`.
pub fn example_bt<T: Element>(
    s: &Stream,
    a: &DeviceTensor<T>,
    b: &DeviceTensor<T>,
    c: &mut DeviceTensor<T>,
) -> tile::Result<()>
where
    matmul_bt::Instances: matmul_bt::Instance<T, T, 128, 256, 64, 3, 256>,
{
    matmul_bt::launch::<T, T, 128, 256, 64, 3, 256>(s, a, b, c)
}

/// The f64 reference of row-major `op(a) · op(b)` for rows `rows` of the
/// `m × n` result: `a` is `[m, k]` (`[k, m]` if `trans_a`), `b` is `[k, n]`
/// (`[n, k]` if `trans_b`). Returns `rows.len() × n` values.
#[allow(clippy::too_many_arguments)]
pub fn reference_rows<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    trans_a: bool,
    trans_b: bool,
    rows: std::ops::Range<usize>,
) -> Vec<f64> {
    assert_eq!(a.len(), m * k, "reference: a has {} elements, not m * k = {}", a.len(), m * k);
    assert_eq!(b.len(), k * n, "reference: b has {} elements, not k * n = {}", b.len(), k * n);
    // B as [n, k] rows of f64, so that each output is a contiguous dot product.
    let mut bt = vec![0.0f64; n * k];
    for j in 0..n {
        for p in 0..k {
            bt[j * k + p] = if trans_b { b[j * k + p] } else { b[p * n + j] }.to_f64();
        }
    }
    let mut out = Vec::with_capacity(rows.len() * n);
    let mut a_row = vec![0.0f64; k];
    for i in rows {
        for (p, x) in a_row.iter_mut().enumerate() {
            *x = if trans_a { a[p * m + i] } else { a[i * k + p] }.to_f64();
        }
        for j in 0..n {
            let col = &bt[j * k..(j + 1) * k];
            out.push(a_row.iter().zip(col).map(|(x, y)| x * y).sum());
        }
    }
    out
}

/// The f64 reference of `a · b` (`b` transposed if `trans_b`), all rows.
pub fn reference<T: Element>(m: usize, n: usize, k: usize, a: &[T], b: &[T], trans_b: bool) -> Vec<f64> {
    reference_rows(m, n, k, a, b, false, trans_b, 0..m)
}

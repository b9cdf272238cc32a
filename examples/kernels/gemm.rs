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
//!
//! GEMM for every shape (issue 10; `examples/gemm_sweep.rs` measures it):
//! [`matmul_splitk`] / [`matmul_bt_splitk`] split K over a third grid axis
//! (f32 partial sums into a workspace that [`splitk_reduce_pipelined`]
//! sums in a fixed order: deterministic, no atomics; [`splitk_reduce`] is
//! its unpipelined first form), [`pad`] copies operands whose rows are not
//! 16-byte multiples into zero-padded ones (and crops a padded output), and
//! [`ShapedGemm`] puts them together for one shape with the configuration
//! of the host rule [`choose`] (64-row tiles at two blocks per SM at
//! decode-size M, split-K so that the blocks fill the GPU) or the tuner's
//! pick among [`candidates`] (the decode-size tiles of two and three blocks
//! per SM, `blocks_per_sm`, and on sm_90a narrow tiles 8 to 16 stages deep
//! that fill the GPU without a split, among them).
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
        // The shape rule's tiles for small M (`Tiles::Small`, `Tiles::Mid`;
        // `Tiles::Wide` is the example's configuration).
        (f16, f16, 64, 128, 64, 4, 128, 8),
        (bf16, bf16, 64, 128, 64, 4, 128, 8),
        (bf16, bf16, 128, 128, 64, 4, 256, 8),
    ),
    // `launch_tuned::<T, O>` times the instances of the caller's `T, O` and
    // keeps the fastest per device and shape bucket.
    tune(BM, BN, BK, STAGES, THREADS, PANEL),
    // Launched as a programmatic dependent of the kernel before it on the
    // stream (its launch overlaps that kernel's tail): +2-6 % on the
    // sweep's shapes of several launches (padding, split-K), H200.
    dependent_launch = true
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
        // One consumer warpgroup, 64 × 128 (also the shape rule's
        // `Tiles::Small`), and `Tiles::Mid`.
        (bf16, bf16, 64, 128, 64, 4, 128),
        (f16, f16, 64, 128, 64, 4, 128),
        (f16, f16, 128, 128, 64, 4, 256),
        (bf16, bf16, 128, 128, 64, 4, 256),
    ),
    tune(BM, BN, BK, STAGES, THREADS),
    dependent_launch = true
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

/// Declares a split-K kernel ([`matmul_splitk`], [`matmul_bt_splitk`]) under
/// the one attribute both take: the same instances (the tuning space of
/// [`ShapedGemm`]), `tune(..)`, clusters, dependent launches.
macro_rules! splitk_kernel {
    ($(#[$meta:meta])* pub fn $($item:tt)*) => {
        $(#[$meta])*
        #[tile_kernel(
            threads = THREADS,
            blocks_per_sm = BLOCKS,
            cluster = (CL, 1, 1),
            instances(
                (f16, f32, 64, 128, 64, 4, 128, 1, 1),
                (bf16, f32, 64, 128, 64, 4, 128, 1, 1),
                (f16, f32, 128, 128, 64, 4, 256, 1, 1),
                (bf16, f32, 128, 128, 64, 4, 256, 1, 1),
                (f16, f16, 64, 128, 64, 4, 128, 1, 1),
                (bf16, bf16, 64, 128, 64, 4, 128, 1, 1),
                (f16, f16, 128, 128, 64, 4, 256, 1, 1),
                (bf16, bf16, 128, 128, 64, 4, 256, 1, 1),
                // Decode-size M (`Tiles::Narrow`, `Tiles::SmallTwo`): several blocks
                // per SM (`blocks_per_sm = BLOCKS`), so that each SM keeps 72-96 KB
                // of `b` in flight; 3 stages so that the blocks' shared memory fits
                // sm_80's SM too.
                (f16, f32, 64, 64, 64, 3, 128, 3, 1),
                (bf16, f32, 64, 64, 64, 3, 128, 3, 1),
                (f16, f16, 64, 64, 64, 3, 128, 3, 1),
                (bf16, bf16, 64, 64, 64, 3, 128, 3, 1),
                (f16, f32, 64, 128, 64, 3, 128, 2, 1),
                (bf16, f32, 64, 128, 64, 3, 128, 2, 1),
                (f16, f16, 64, 128, 64, 3, 128, 2, 1),
                (bf16, bf16, 64, 128, 64, 3, 128, 2, 1),
                // M ≤ 16 (`Tiles::Gemv`): 16 rows (mma.sync; no 64-row wgmma
                // warpgroup), 4 stages of 2 + 16 KiB, two blocks per SM.
                (f16, f32, 16, 128, 64, 4, 128, 2, 1),
                (bf16, f32, 16, 128, 64, 4, 128, 2, 1),
                (f16, f16, 16, 128, 64, 4, 128, 2, 1),
                (bf16, bf16, 16, 128, 64, 4, 128, 2, 1),
                // Narrow tiles with deep pipelines (`Tiles::Thin`, `Tiles::Deep`,
                // `Tiles::Tall`): 192 KiB of stages, one block per SM, so enough
                // blocks without splitting K (no reduction). More shared memory
                // than sm_80 has: sm_90a only (dropped from sm_80 as tuning
                // candidates, with a note in `TILE_DUMP`).
                (f16, f32, 64, 32, 64, 16, 128, 1, 1),
                (bf16, f32, 64, 32, 64, 16, 128, 1, 1),
                (f16, f16, 64, 32, 64, 16, 128, 1, 1),
                (bf16, bf16, 64, 32, 64, 16, 128, 1, 1),
                (f16, f32, 64, 64, 64, 12, 128, 1, 1),
                (bf16, f32, 64, 64, 64, 12, 128, 1, 1),
                (f16, f16, 64, 64, 64, 12, 128, 1, 1),
                (bf16, bf16, 64, 64, 64, 12, 128, 1, 1),
                (f16, f32, 128, 64, 64, 8, 256, 1, 1),
                (bf16, f32, 128, 64, 64, 8, 256, 1, 1),
                (f16, f16, 128, 64, 64, 8, 256, 1, 1),
                (bf16, bf16, 128, 64, 64, 8, 256, 1, 1),
                // The narrow deep tiles in thread block clusters along x
                // (`Tiles::ThinPair`, `Tiles::ThinQuad`, `Tiles::DeepPair`): the
                // blocks of a cluster share `a`'s tile, which the warp-specialized
                // variant loads once per cluster (TMA multicast, each block a
                // share of its rows) instead of once per block.
                (f16, f32, 64, 32, 64, 16, 128, 1, 2),
                (bf16, f32, 64, 32, 64, 16, 128, 1, 2),
                (f16, f16, 64, 32, 64, 16, 128, 1, 2),
                (bf16, bf16, 64, 32, 64, 16, 128, 1, 2),
                (f16, f32, 64, 32, 64, 16, 128, 1, 4),
                (bf16, f32, 64, 32, 64, 16, 128, 1, 4),
                (f16, f16, 64, 32, 64, 16, 128, 1, 4),
                (bf16, bf16, 64, 32, 64, 16, 128, 1, 4),
                (f16, f32, 64, 64, 64, 12, 128, 1, 2),
                (bf16, f32, 64, 64, 64, 12, 128, 1, 2),
                (f16, f16, 64, 64, 64, 12, 128, 1, 2),
                (bf16, bf16, 64, 64, 64, 12, 128, 1, 2),
            ),
            // The tiles are [`ShapedGemm`]'s tuning space (`tune(..)` also lets an
            // instance that does not fit a target be dropped there).
            tune(BM, BN, BK, STAGES, THREADS, BLOCKS, CL),
            dependent_launch = true
        )]
        pub fn $($item)*
    };
}

splitk_kernel! {
    /// Split-K partial products of `a · b`: the grid's z axis cuts the K loop
    /// into `SPLIT` (`c`'s first extent, a launch-time dim) ranges of
    /// `cdiv(cdiv(K, BK), SPLIT)` k-steps; block `(bx, by, z)` multiplies its
    /// `BM × BN` tile over range `z` and writes the partial sum to
    /// `c[z, .., ..]` (every element of `c` is written: no zeroing). k-steps
    /// past `K` (the last range when `SPLIT` does not divide the steps) read
    /// zeros and add nothing. With `O = f32` `c` is the workspace that
    /// [`splitk_reduce`] sums in a fixed order (the result does not depend on
    /// how blocks were scheduled); with `SPLIT = 1` and `O = T` it is the
    /// product itself. `b` may be wider than `c` (`NB ≥ N`: a `b` padded to
    /// 16-byte rows; its extra columns are not written) and shorter than `a`
    /// is wide (`KB ≤ K`: `a` padded in K, `b`'s rows whole; rows past `KB`
    /// read zeros, which `a`'s zero padding multiplies anyway).
    ///
    /// `BLOCKS` blocks run side by side on an SM (`blocks_per_sm`): the
    /// decode-size tiles' way to keep more of `b` in flight. `CL` blocks along
    /// N form a thread block cluster (`cluster = (CL, 1, 1)`): they share the
    /// tile of `a`, which the compiler then loads once per cluster (TMA
    /// multicast) in the warp-specialized variant; the grid's N extent must be
    /// a multiple of `CL` (else the launch is an error).
    ///
    /// Instances ([`splitk_kernel!`]): the shape rule's `Tiles::Small` and
    /// `Tiles::Mid` (128 × 256 spills in the warp-specialized variant: 128
    /// accumulators per thread and a store that is not TMA's), `Tiles::Narrow`,
    /// `Tiles::SmallTwo`, `Tiles::Gemv`, and the deep narrow tiles, alone and
    /// in clusters.
    pub fn matmul_splitk<
        T: Float16,
        O: Float,
        const BM: usize,
        const BN: usize,
        const BK: usize,
        const STAGES: usize,
        const THREADS: usize,
        const BLOCKS: usize,
        const CL: usize,
    >(
        a: &Tensor<T, M, K>,
        b: &Tensor<T, KB, NB>,
        c: &mut Tensor<O, SPLIT, M, N>,
    ) {
        let (bx, by, bz) = grid(cdiv(N, BN), cdiv(M, BM), SPLIT);
        use_swizzle(8);
        let steps = cdiv(cdiv(K, BK), SPLIT);
        let k0 = bz * steps;
        let mut a_s = shared::<T, BM, BK>();
        let mut b_s = shared::<T, BK, BN>();
        let mut acc = fragment::<f32, BM, BN>();
        clear(&mut acc);
        for k in pipelined(steps, STAGES) {
            copy(a.tile([by * BM, (k0 + k) * BK]), &mut a_s);
            copy(b.tile([(k0 + k) * BK, bx * BN]), &mut b_s);
            gemm(&a_s, &b_s, &mut acc);
        }
        copy(&acc, c.tile([bz, by * BM.., bx * BN..]));
    }
}

splitk_kernel! {
    /// [`matmul_splitk`] for `a · bᵀ` with `b` stored `[NB, K]` (a linear
    /// layer's weight; `NB ≥ N`), the same instances ([`splitk_kernel!`]).
    pub fn matmul_bt_splitk<
        T: Float16,
        O: Float,
        const BM: usize,
        const BN: usize,
        const BK: usize,
        const STAGES: usize,
        const THREADS: usize,
        const BLOCKS: usize,
        const CL: usize,
    >(
        a: &Tensor<T, M, K>,
        b: &Tensor<T, NB, K>,
        c: &mut Tensor<O, SPLIT, M, N>,
    ) {
        let (bx, by, bz) = grid(cdiv(N, BN), cdiv(M, BM), SPLIT);
        use_swizzle(8);
        let steps = cdiv(cdiv(K, BK), SPLIT);
        let k0 = bz * steps;
        let mut a_s = shared::<T, BM, BK>();
        let mut b_s = shared::<T, BN, BK>();
        let mut acc = fragment::<f32, BM, BN>();
        clear(&mut acc);
        for k in pipelined(steps, STAGES) {
            copy(a.tile([by * BM, (k0 + k) * BK]), &mut a_s);
            copy(b.tile([bx * BN, (k0 + k) * BK]), &mut b_s);
            gemm(&a_s, &b_s.t(), &mut acc);
        }
        copy(&acc, c.tile([bz, by * BM.., bx * BN..]));
    }
}

/// The split-K reduction: `c = Σ_z ws[z, .., ..]` (z ascending, in f32),
/// rounded once to `O`.
#[tile_kernel(threads = 256, consts(RM = 16, RN = 256), instances(f16, bf16))]
pub fn splitk_reduce<O: Float>(ws: &Tensor<f32, SPLIT, M, N>, c: &mut Tensor<O, M, N>) {
    let (bx, by) = grid(cdiv(N, RN), cdiv(M, RM));
    let mut acc = fragment::<f32, RM, RN>();
    let mut part = fragment::<f32, RM, RN>();
    clear(&mut acc);
    for z in 0..SPLIT {
        copy(ws.tile([z, by * RM.., bx * RN..]), &mut part);
        for (i, j) in parallel((RM, RN)) {
            acc[(i, j)] = acc[(i, j)] + part[(i, j)];
        }
    }
    copy(&acc, c.tile([by * RM, bx * RN]));
}

/// [`splitk_reduce`] with the ranges' partial sums streamed through a
/// software pipeline (`pipelined`: cp.async or TMA into `STAGES` shared
/// buffers): `STAGES − 1` ranges' loads in flight while one is summed,
/// where the plain loop waits for each range's load before adding it (its
/// SASS: one range's loads, then the adds, per iteration; `SPLIT` L2
/// latencies per block, ~4 µs at 8 ranges, of a 10 µs GEMV). The same sums
/// in the same order (z ascending, f32), rounded once to `O`.
/// [`ShapedGemm`] runs this one.
#[tile_kernel(
    threads = 256,
    consts(RM = 16, RN = 256, STAGES = 4),
    warp_specialize = false,
    dependent_launch = true,
    instances(f16, bf16)
)]
pub fn splitk_reduce_pipelined<O: Float>(ws: &Tensor<f32, SPLIT, M, N>, c: &mut Tensor<O, M, N>) {
    let (bx, by) = grid(cdiv(N, RN), cdiv(M, RM));
    let mut part_s = shared::<f32, RM, RN>();
    let mut part = fragment::<f32, RM, RN>();
    let mut acc = fragment::<f32, RM, RN>();
    clear(&mut acc);
    for z in pipelined(SPLIT, STAGES) {
        copy(ws.tile([z, by * RM.., bx * RN..]), &mut part_s);
        copy(&part_s, &mut part);
        for (i, j) in parallel((RM, RN)) {
            acc[(i, j)] = acc[(i, j)] + part[(i, j)];
        }
    }
    copy(&acc, c.tile([by * RM, bx * RN]));
}

/// `y [RP, CP]` = the top-left window of `x [R, C]`, zeros past `x`'s
/// edges. Larger than `x`, it pads: a matrix whose rows are not a multiple
/// of 16 bytes becomes one that TMA and 16-byte copies can read (the zeros
/// add nothing to a product over K); smaller, it crops (a product computed
/// into a padded output, copied out).
#[tile_kernel(threads = 256, consts(PR = 32, PC = 256), dependent_launch = true, instances(f16, bf16))]
pub fn pad<T: Float16>(x: &Tensor<T, R, C>, y: &mut Tensor<T, RP, CP>) {
    let (bx, by) = grid(cdiv(CP, PC), cdiv(RP, PR));
    let mut t = fragment::<T, PR, PC>();
    copy(x.tile([by * PR, bx * PC]), &mut t);
    copy(&t, y.tile([by * PR, bx * PC]));
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

/// The operand layout of a GEMM: `Ab` is `c = a · b` with `b` `[K, N]`;
/// `Abt` is `c = a · bᵀ` with `b` `[N, K]` (`y = x · wᵀ`, a linear layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Ab,
    Abt,
}

/// The block tiles the shape rule picks among (each an instance of
/// `matmul`, `matmul_bt` and both split-K kernels, f16 and bf16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiles {
    /// 64 × 128 × 64, 4 stages, 128 threads: one consumer warpgroup
    /// (M ≤ 64: decode).
    Small,
    /// 128 × 128 × 64, 4 stages, 256 threads.
    Mid,
    /// 128 × 256 × 64, 3 stages, 256 threads: the example's configuration.
    Wide,
    /// 64 × 128 × 64, 3 stages, 128 threads, two blocks per SM
    /// (`blocks_per_sm`): decode-size M, where the GEMM streams `b`. Per
    /// SM 2 × 3 stages × 16 KiB = 96 KiB of `b` in flight (`Small`: 64 KiB),
    /// and 264 block slots on 132 SMs. Split-K only (no plain kernel).
    SmallTwo,
    /// 64 × 64 × 64, 3 stages, 128 threads, three blocks per SM: twice the
    /// output tiles of `SmallTwo` (grids that fill 396 slots with fewer K
    /// ranges), 3 × 3 × 8 KiB = 72 KiB of `b` in flight per SM. Split-K only.
    Narrow,
    /// 16 × 128 × 64, 4 stages, 128 threads, two blocks per SM: M ≤ 16
    /// (a GEMV-shaped GEMM). 16 rows of `a` per stage (2 KiB, where the
    /// 64-row tiles stage 8 KiB of mostly zero rows), so that 4 stages of
    /// `b` fit twice per SM: 2 × 4 × 16 KiB = 128 KiB in flight, on mma.sync
    /// (the TMA-copy pipeline on sm_90a; no warp-specialized variant, whose
    /// warpgroups own 64 rows). Split-K only.
    Gemv,
    /// 64 × 32 × 64, 16 stages, 128 threads, one block per SM: M ≤ 64.
    /// 192 KiB of stages (`b`'s 64 KiB of them), and N / 32 blocks without
    /// a split (128 at N = 4096: no reduction to launch). cuBLAS's choice on
    /// the H200 at M = 64 × 4096 × 4096 (`64x32_64x16`, 12.5-12.9 µs under
    /// ncu, where 64 × 128 split 4 took 12.9 µs and its reduction 4.3
    /// more; ours 13.1 against its 12.6 in session 15). Poor where K is
    /// long: at 1 × 4096 × 14336 a block streams 32 rows of `w` 28 KiB
    /// apart, 68.8 µs at 36 % of the DRAM peak (16 × 128 split 8: 32.7 µs).
    /// sm_90a only ([`Tiles::sm90_only`]). Split-K only.
    Thin,
    /// 64 × 64 × 64, 12 stages, 128 threads, one block per SM: M ≤ 128
    /// (at M = 128 × N = 4096, 128 blocks without a split; cuBLAS's
    /// `64x64_64x13`). sm_90a only. Split-K only.
    Deep,
    /// 128 × 64 × 64, 8 stages, 256 threads, one block per SM: M 128–256
    /// (128 blocks at M = 256 × N = 4096 or M = 128 × N = 8192, no split;
    /// cuBLAS's `128x64_64x8`). sm_90a only. Split-K only.
    Tall,
    /// `Thin` in clusters of 2 blocks along N: the pair loads each stage
    /// of `a` once (TMA multicast, 32 rows each) where `Thin` loads it per
    /// block. At M = 64 × 4096 × 4096 every one of `Thin`'s 128 blocks reads
    /// all of `a` (512 KiB) beside its 256 KiB of `b`: 96 MiB from L2 for
    /// 32 MiB of `b`; in pairs 64 MiB. Needs N / 32 even. sm_90a only.
    ThinPair,
    /// `Thin` in clusters of 4 (48 MiB from L2 at that shape). Needs N / 32
    /// a multiple of 4. sm_90a only.
    ThinQuad,
    /// `Deep` in clusters of 2. Needs N / 64 even. sm_90a only.
    DeepPair,
}

impl Tiles {
    /// The block tile `(BM, BN)`.
    pub fn dims(self) -> (usize, usize) {
        match self {
            Tiles::Small => (64, 128),
            Tiles::Mid => (128, 128),
            Tiles::Wide => (128, 256),
            Tiles::SmallTwo => (64, 128),
            Tiles::Narrow => (64, 64),
            Tiles::Gemv => (16, 128),
            Tiles::Thin => (64, 32),
            Tiles::Deep => (64, 64),
            Tiles::Tall => (128, 64),
            Tiles::ThinPair | Tiles::ThinQuad => (64, 32),
            Tiles::DeepPair => (64, 64),
        }
    }

    /// The blocks of its thread block cluster along N (1: none).
    pub fn cluster(self) -> usize {
        match self {
            Tiles::ThinPair | Tiles::DeepPair => 2,
            Tiles::ThinQuad => 4,
            _ => 1,
        }
    }

    /// The blocks its kernels ask to share an SM (`blocks_per_sm`).
    pub fn blocks_per_sm(self) -> usize {
        match self {
            Tiles::Small
            | Tiles::Mid
            | Tiles::Wide
            | Tiles::Thin
            | Tiles::Deep
            | Tiles::Tall
            | Tiles::ThinPair
            | Tiles::ThinQuad
            | Tiles::DeepPair => 1,
            Tiles::SmallTwo | Tiles::Gemv => 2,
            Tiles::Narrow => 3,
        }
    }

    /// Whether `matmul` / `matmul_bt` have an instance of this tile (else
    /// only the split-K kernels, which with one K range write `c` directly).
    pub fn has_plain(self) -> bool {
        matches!(self, Tiles::Small | Tiles::Mid | Tiles::Wide)
    }

    /// Whether its kernels exist only on sm_90a (their stages take more
    /// shared memory than sm_80's SM has): the rule ([`choose`]) never
    /// picks them; as [`candidates`] they fail to launch elsewhere, and
    /// the tuner skips them there.
    pub fn sm90_only(self) -> bool {
        matches!(self, Tiles::Thin | Tiles::Deep | Tiles::Tall | Tiles::ThinPair | Tiles::ThinQuad | Tiles::DeepPair)
    }

    /// The largest M it is a candidate for (its rows against the rows it
    /// would compute for nothing, and whether its blocks are enough).
    fn most_rows(self) -> usize {
        match self {
            Tiles::Gemv => 32,
            Tiles::Thin | Tiles::ThinPair | Tiles::ThinQuad => 64,
            Tiles::Deep | Tiles::DeepPair => 128,
            Tiles::SmallTwo | Tiles::Narrow | Tiles::Tall => 256,
            Tiles::Small | Tiles::Mid | Tiles::Wide => usize::MAX,
        }
    }

    /// Every tile, in the order [`candidates`] lists them.
    pub const ALL: [Tiles; 12] = [
        Tiles::Gemv,
        Tiles::Small,
        Tiles::SmallTwo,
        Tiles::Narrow,
        Tiles::Mid,
        Tiles::Wide,
        Tiles::Thin,
        Tiles::Deep,
        Tiles::Tall,
        Tiles::ThinPair,
        Tiles::ThinQuad,
        Tiles::DeepPair,
    ];

    /// The tile of the split-K kernel for this one (`Wide` has no split-K
    /// instance: `Mid`).
    pub fn split_tiles(self) -> Tiles {
        match self {
            Tiles::Wide => Tiles::Mid,
            t => t,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tiles::Small => "64x128",
            Tiles::Mid => "128x128",
            Tiles::Wide => "128x256",
            Tiles::SmallTwo => "64x128/2sm",
            Tiles::Narrow => "64x64/3sm",
            Tiles::Gemv => "16x128/2sm",
            Tiles::Thin => "64x32/16st",
            Tiles::Deep => "64x64/12st",
            Tiles::Tall => "128x64/8st",
            Tiles::ThinPair => "64x32/16st/x2",
            Tiles::ThinQuad => "64x32/16st/x4",
            Tiles::DeepPair => "64x64/12st/x2",
        }
    }
}

/// A configuration: the block tile and the number of K ranges (1: no
/// split-K).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub tiles: Tiles,
    pub split: usize,
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} split {}", self.tiles.name(), self.split)
    }
}

/// The SMs of the GPU the shape rule assumes (an H200's 132).
pub const SMS: usize = 132;

/// The host rule that picks a configuration for `m × n × k` (until the
/// autotuner replaces it): the tile by M (`Gemv`, 16 × 128 at two blocks
/// per SM, up to M = 16; `SmallTwo`, 64 × 128 at two blocks per SM, up to
/// M = 256; 128 × 128 up to 512, one block per SM; else the example's 128
/// × 256), then the number of K ranges. For the tiles of several blocks
/// per SM the fewest ranges (1 included) whose blocks fill the last of
/// their waves over the 264 block slots at least 85 % ([`fill_split`]),
/// at most as many as keep the partial sums' traffic under a quarter of
/// `b`'s ([`split_cap`]);
/// for the others, when the output has at most half as many tiles as the
/// GPU has SMs, ranges so that tiles × ranges fills the SMs once. Each
/// range at least 4 k-steps of 64, at most 16 ranges.
///
/// Why (counts; the H200's 132 SMs, 4.8 TB/s): at M ≤ 64 the GEMM moves
/// `b` (32 MiB at 4096 × 4096: 7 µs at HBM speed) and HBM needs ~40+ KiB
/// in flight per SM; `Small` keeps 64 KiB with one block per SM on 128 or
/// 112 blocks (SMs idle), `SmallTwo` 96 KiB and `Gemv` 128 KiB (its `a`
/// stages are 16 rows, not 64) on 256 of 264 slots (4096 × 4096: 32 tiles
/// × 8 ranges). At M 128–256
/// (0.70–0.79 of cuBLAS with 128 × 128 on 128 blocks, under one wave)
/// two 64-row warpgroups per SM share the tensor cores over 256 blocks.
pub fn choose(m: usize, n: usize, k: usize) -> Config {
    let tiles = if m <= 16 {
        Tiles::Gemv
    } else if m <= 256 {
        Tiles::SmallTwo
    } else if m <= 512 {
        Tiles::Mid
    } else {
        Tiles::Wide
    };
    let (bm, bn) = tiles.dims();
    let blocks = m.div_ceil(bm) * n.div_ceil(bn);
    let steps = k.div_ceil(64);
    let split = if tiles.blocks_per_sm() > 1 {
        fill_split(blocks, k, SMS * tiles.blocks_per_sm(), split_cap(m, k))
    } else if blocks * 2 <= SMS {
        (SMS / blocks.max(1)).min(steps / 4).clamp(1, 16)
    } else {
        1
    };
    Config { tiles, split }
}

/// The most K ranges of `k` (each at least 4 k-steps of 64, at most 16,
/// at least 1).
fn most_splits(k: usize) -> usize {
    (k.div_ceil(64) / 4).clamp(1, 16)
}

/// Whether `blocks` fill the last of at most 8 waves over `slots` block
/// slots at least 85 %.
fn fills(blocks: usize, slots: usize) -> bool {
    let waves = blocks.div_ceil(slots);
    waves <= 8 && blocks * 100 >= waves * slots * 85
}

/// The most K ranges whose f32 partial sums cost at most a quarter of the
/// bytes of `b`: each range writes `M × N` f32 that the reduction reads
/// back (8 · M · N bytes a range, the reduction a second pass after the
/// GEMM) against `2 · N · K` bytes of `b`, so at most `K / (16 · M)`
/// ranges (any at M = 1; 16 at M = 16, K = 4096; 1 at M = 256, K = 4096).
pub fn split_cap(m: usize, k: usize) -> usize {
    (k / (16 * m.max(1))).max(1)
}

/// The fewest K ranges (1 to [`most_splits`], at most `cap`) that make
/// `tiles` × ranges blocks fill their last wave over `slots` at least 85 %
/// ([`fills`]); where none does, the one that fills it most (the fewest
/// of those).
pub fn fill_split(tiles: usize, k: usize, slots: usize, cap: usize) -> usize {
    let most = most_splits(k).min(cap.max(1));
    if let Some(s) = (1..=most).find(|&s| fills(tiles * s, slots)) {
        return s;
    }
    let fill = |s: usize| {
        let blocks = tiles * s;
        blocks * 1000 / (blocks.div_ceil(slots) * slots)
    };
    (1..=most).max_by_key(|&s| (fill(s), std::cmp::Reverse(s))).unwrap_or(1)
}

/// Whether the shape rule's choice stands without timing: M of 2048 and
/// more, where the example's 128 × 256 tiles give every SM several tiles
/// (the configuration `examples/gemm_tune.rs` measured fastest at 4096³
/// and 8192³). Below (decode-size and mid M: the tile and the number of K
/// ranges trade waves of blocks against work per block; rows that are not
/// 16-byte multiples) [`ShapedGemm::tuned`] times [`candidates`].
pub fn rule_is_sure(m: usize, _n: usize, _k: usize) -> bool {
    m >= 2048
}

/// The configurations [`ShapedGemm::tuned`] times for `m × n × k`: the
/// rule's ([`choose`]) first, then every tile with one K range (for the
/// split-K-only tiles too: their kernel writes `c` directly) and (but
/// `Wide`, whose split-K kernel is `Mid`'s) with the numbers of K ranges
/// [`wave_splits`] gives over the tile's block slots (132 SMs × its blocks
/// per SM); each tile only up to the M it suits (`Gemv` 32, `Thin` 64,
/// `Deep` 128, the several-blocks-per-SM tiles and `Tall` 256; the deep
/// tiles, sm_90a only, fail to launch elsewhere and the tuner skips them);
/// only the rule's where it is sure ([`rule_is_sure`]).
/// Configurations that [`ShapedGemm::new`] makes the same (odd N of `b [N,
/// K]` runs the split-K kernel, whose tiles are `Mid`'s for `Wide`) may
/// repeat here; `tuned` times each once.
///
/// Why these: on the H200 the rule's 0.65–0.9 of cuBLAS at decode-size M
/// came from grids that leave SMs idle or end in a ragged wave (112, 128 or
/// 224 blocks on 132 SMs), from split-K reductions where a smaller tile
/// fills the GPU without one (`/work/feedback/gemm.md`), and from one
/// block per SM keeping too little of `b` in flight (the tiles of two and
/// three blocks per SM). Under ncu (session 15) cuBLAS ran M = 64–256 on
/// narrow tiles 8 to 16 stages deep, 128 blocks and no split, where our
/// split-K kernel matched its time and the reduction added 4–6 µs: the
/// deep tiles.
pub fn candidates(m: usize, n: usize, k: usize) -> Vec<Config> {
    let rule = choose(m, n, k);
    let mut v = vec![rule];
    if rule_is_sure(m, n, k) {
        return v;
    }
    let mut push = |c: Config| {
        if !v.contains(&c) {
            v.push(c);
        }
    };
    for tiles in Tiles::ALL {
        let slots = SMS * tiles.blocks_per_sm();
        // A cluster's grid must be a multiple of it (else the launch fails).
        if m > tiles.most_rows() || n.div_ceil(tiles.dims().1) % tiles.cluster() != 0 {
            continue;
        }
        push(Config { tiles, split: 1 });
        if tiles == Tiles::Wide {
            continue;
        }
        let (bm, bn) = tiles.dims();
        for split in wave_splits(m.div_ceil(bm) * n.div_ceil(bn), k, slots) {
            push(Config { tiles, split });
        }
    }
    v
}

/// Up to three numbers of K ranges (2 to 16, each range at least 4
/// k-steps of 64), smallest first, that make `tiles` × ranges blocks fill
/// the last of at most 8 waves over `slots` block slots (SMs × blocks per
/// SM) at least 85 %.
pub fn wave_splits(tiles: usize, k: usize, slots: usize) -> Vec<usize> {
    let most = (k.div_ceil(64) / 4).min(16);
    (2..=most).filter(|&s| fills(tiles * s, slots)).take(3).collect()
}

/// Whether a row of `cols` 2-byte elements is a multiple of 16 bytes (what
/// TMA and 16-byte copies need).
fn aligned(cols: usize) -> bool {
    cols % 8 == 0
}

fn round8(x: usize) -> usize {
    x.div_ceil(8) * 8
}

type Plain<T> = fn(&Stream, &DeviceTensor<T>, &DeviceTensor<T>, &mut DeviceTensor<T>) -> tile::Result<()>;
type Split<T, O> = fn(&Stream, &DeviceTensor<T>, &DeviceTensor<T>, &mut DeviceTensor<O>) -> tile::Result<()>;

/// The kernels [`ShapedGemm`] launches for an element type: f16 and bf16
/// (every instance the shape rule needs exists for both).
pub trait GemmElement: Element {
    /// The plain kernel of a layout and tile; `None` for the split-K-only
    /// tiles ([`Tiles::has_plain`]).
    fn plain(layout: Layout, tiles: Tiles) -> Option<Plain<Self>>;
    /// The split-K kernel of a layout and tile ([`Tiles::split_tiles`]),
    /// writing f32 partial sums.
    fn split(layout: Layout, tiles: Tiles) -> Split<Self, f32>;
    /// The same writing `Self`: with one range, the product itself.
    fn direct(layout: Layout, tiles: Tiles) -> Split<Self, Self>;
    fn reduce(s: &Stream, ws: &DeviceTensor<f32>, c: &mut DeviceTensor<Self>) -> tile::Result<()>;
    fn pad(s: &Stream, x: &DeviceTensor<Self>, y: &mut DeviceTensor<Self>) -> tile::Result<()>;
}

impl<T: Element> GemmElement for T
where
    matmul::Instances: matmul::Instance<T, T, 64, 128, 64, 4, 128, 8>
        + matmul::Instance<T, T, 128, 128, 64, 4, 256, 8>
        + matmul::Instance<T, T, 128, 256, 64, 3, 256, 8>,
    matmul_bt::Instances: matmul_bt::Instance<T, T, 64, 128, 64, 4, 128>
        + matmul_bt::Instance<T, T, 128, 128, 64, 4, 256>
        + matmul_bt::Instance<T, T, 128, 256, 64, 3, 256>,
    matmul_splitk::Instances: matmul_splitk::Instance<T, f32, 64, 128, 64, 4, 128, 1, 1>
        + matmul_splitk::Instance<T, f32, 128, 128, 64, 4, 256, 1, 1>
        + matmul_splitk::Instance<T, f32, 64, 128, 64, 3, 128, 2, 1>
        + matmul_splitk::Instance<T, f32, 64, 64, 64, 3, 128, 3, 1>
        + matmul_splitk::Instance<T, f32, 16, 128, 64, 4, 128, 2, 1>
        + matmul_splitk::Instance<T, T, 64, 128, 64, 4, 128, 1, 1>
        + matmul_splitk::Instance<T, T, 128, 128, 64, 4, 256, 1, 1>
        + matmul_splitk::Instance<T, T, 64, 128, 64, 3, 128, 2, 1>
        + matmul_splitk::Instance<T, T, 64, 64, 64, 3, 128, 3, 1>
        + matmul_splitk::Instance<T, T, 16, 128, 64, 4, 128, 2, 1>
        + matmul_splitk::Instance<T, f32, 64, 32, 64, 16, 128, 1, 1>
        + matmul_splitk::Instance<T, f32, 64, 64, 64, 12, 128, 1, 1>
        + matmul_splitk::Instance<T, f32, 128, 64, 64, 8, 256, 1, 1>
        + matmul_splitk::Instance<T, T, 64, 32, 64, 16, 128, 1, 1>
        + matmul_splitk::Instance<T, T, 64, 64, 64, 12, 128, 1, 1>
        + matmul_splitk::Instance<T, T, 128, 64, 64, 8, 256, 1, 1>
        + matmul_splitk::Instance<T, f32, 64, 32, 64, 16, 128, 1, 2>
        + matmul_splitk::Instance<T, f32, 64, 32, 64, 16, 128, 1, 4>
        + matmul_splitk::Instance<T, f32, 64, 64, 64, 12, 128, 1, 2>
        + matmul_splitk::Instance<T, T, 64, 32, 64, 16, 128, 1, 2>
        + matmul_splitk::Instance<T, T, 64, 32, 64, 16, 128, 1, 4>
        + matmul_splitk::Instance<T, T, 64, 64, 64, 12, 128, 1, 2>,
    matmul_bt_splitk::Instances: matmul_bt_splitk::Instance<T, f32, 64, 128, 64, 4, 128, 1, 1>
        + matmul_bt_splitk::Instance<T, f32, 128, 128, 64, 4, 256, 1, 1>
        + matmul_bt_splitk::Instance<T, f32, 64, 128, 64, 3, 128, 2, 1>
        + matmul_bt_splitk::Instance<T, f32, 64, 64, 64, 3, 128, 3, 1>
        + matmul_bt_splitk::Instance<T, f32, 16, 128, 64, 4, 128, 2, 1>
        + matmul_bt_splitk::Instance<T, T, 64, 128, 64, 4, 128, 1, 1>
        + matmul_bt_splitk::Instance<T, T, 128, 128, 64, 4, 256, 1, 1>
        + matmul_bt_splitk::Instance<T, T, 64, 128, 64, 3, 128, 2, 1>
        + matmul_bt_splitk::Instance<T, T, 64, 64, 64, 3, 128, 3, 1>
        + matmul_bt_splitk::Instance<T, T, 16, 128, 64, 4, 128, 2, 1>
        + matmul_bt_splitk::Instance<T, f32, 64, 32, 64, 16, 128, 1, 1>
        + matmul_bt_splitk::Instance<T, f32, 64, 64, 64, 12, 128, 1, 1>
        + matmul_bt_splitk::Instance<T, f32, 128, 64, 64, 8, 256, 1, 1>
        + matmul_bt_splitk::Instance<T, T, 64, 32, 64, 16, 128, 1, 1>
        + matmul_bt_splitk::Instance<T, T, 64, 64, 64, 12, 128, 1, 1>
        + matmul_bt_splitk::Instance<T, T, 128, 64, 64, 8, 256, 1, 1>
        + matmul_bt_splitk::Instance<T, f32, 64, 32, 64, 16, 128, 1, 2>
        + matmul_bt_splitk::Instance<T, f32, 64, 32, 64, 16, 128, 1, 4>
        + matmul_bt_splitk::Instance<T, f32, 64, 64, 64, 12, 128, 1, 2>
        + matmul_bt_splitk::Instance<T, T, 64, 32, 64, 16, 128, 1, 2>
        + matmul_bt_splitk::Instance<T, T, 64, 32, 64, 16, 128, 1, 4>
        + matmul_bt_splitk::Instance<T, T, 64, 64, 64, 12, 128, 1, 2>,
    splitk_reduce_pipelined::Instances: splitk_reduce_pipelined::Instance<T>,
    pad::Instances: pad::Instance<T>,
{
    fn plain(layout: Layout, tiles: Tiles) -> Option<Plain<T>> {
        Some(match (layout, tiles) {
            (Layout::Ab, Tiles::Small) => matmul::launch::<T, T, 64, 128, 64, 4, 128, 8>,
            (Layout::Ab, Tiles::Mid) => matmul::launch::<T, T, 128, 128, 64, 4, 256, 8>,
            (Layout::Ab, Tiles::Wide) => matmul::launch::<T, T, 128, 256, 64, 3, 256, 8>,
            (Layout::Abt, Tiles::Small) => matmul_bt::launch::<T, T, 64, 128, 64, 4, 128>,
            (Layout::Abt, Tiles::Mid) => matmul_bt::launch::<T, T, 128, 128, 64, 4, 256>,
            (Layout::Abt, Tiles::Wide) => matmul_bt::launch::<T, T, 128, 256, 64, 3, 256>,
            (
                _,
                Tiles::SmallTwo
                | Tiles::Narrow
                | Tiles::Gemv
                | Tiles::Thin
                | Tiles::Deep
                | Tiles::Tall
                | Tiles::ThinPair
                | Tiles::ThinQuad
                | Tiles::DeepPair,
            ) => return None,
        })
    }
    fn split(layout: Layout, tiles: Tiles) -> Split<T, f32> {
        match (layout, tiles.split_tiles()) {
            (Layout::Ab, Tiles::Small) => matmul_splitk::launch::<T, f32, 64, 128, 64, 4, 128, 1, 1>,
            (Layout::Ab, Tiles::SmallTwo) => matmul_splitk::launch::<T, f32, 64, 128, 64, 3, 128, 2, 1>,
            (Layout::Ab, Tiles::Narrow) => matmul_splitk::launch::<T, f32, 64, 64, 64, 3, 128, 3, 1>,
            (Layout::Ab, Tiles::Gemv) => matmul_splitk::launch::<T, f32, 16, 128, 64, 4, 128, 2, 1>,
            (Layout::Ab, Tiles::Thin) => matmul_splitk::launch::<T, f32, 64, 32, 64, 16, 128, 1, 1>,
            (Layout::Ab, Tiles::Deep) => matmul_splitk::launch::<T, f32, 64, 64, 64, 12, 128, 1, 1>,
            (Layout::Ab, Tiles::Tall) => matmul_splitk::launch::<T, f32, 128, 64, 64, 8, 256, 1, 1>,
            (Layout::Ab, Tiles::ThinPair) => matmul_splitk::launch::<T, f32, 64, 32, 64, 16, 128, 1, 2>,
            (Layout::Ab, Tiles::ThinQuad) => matmul_splitk::launch::<T, f32, 64, 32, 64, 16, 128, 1, 4>,
            (Layout::Ab, Tiles::DeepPair) => matmul_splitk::launch::<T, f32, 64, 64, 64, 12, 128, 1, 2>,
            (Layout::Ab, Tiles::Mid | Tiles::Wide) => matmul_splitk::launch::<T, f32, 128, 128, 64, 4, 256, 1, 1>,
            (Layout::Abt, Tiles::Small) => matmul_bt_splitk::launch::<T, f32, 64, 128, 64, 4, 128, 1, 1>,
            (Layout::Abt, Tiles::SmallTwo) => matmul_bt_splitk::launch::<T, f32, 64, 128, 64, 3, 128, 2, 1>,
            (Layout::Abt, Tiles::Narrow) => matmul_bt_splitk::launch::<T, f32, 64, 64, 64, 3, 128, 3, 1>,
            (Layout::Abt, Tiles::Gemv) => matmul_bt_splitk::launch::<T, f32, 16, 128, 64, 4, 128, 2, 1>,
            (Layout::Abt, Tiles::Thin) => matmul_bt_splitk::launch::<T, f32, 64, 32, 64, 16, 128, 1, 1>,
            (Layout::Abt, Tiles::Deep) => matmul_bt_splitk::launch::<T, f32, 64, 64, 64, 12, 128, 1, 1>,
            (Layout::Abt, Tiles::Tall) => matmul_bt_splitk::launch::<T, f32, 128, 64, 64, 8, 256, 1, 1>,
            (Layout::Abt, Tiles::ThinPair) => matmul_bt_splitk::launch::<T, f32, 64, 32, 64, 16, 128, 1, 2>,
            (Layout::Abt, Tiles::ThinQuad) => matmul_bt_splitk::launch::<T, f32, 64, 32, 64, 16, 128, 1, 4>,
            (Layout::Abt, Tiles::DeepPair) => matmul_bt_splitk::launch::<T, f32, 64, 64, 64, 12, 128, 1, 2>,
            (Layout::Abt, Tiles::Mid | Tiles::Wide) => matmul_bt_splitk::launch::<T, f32, 128, 128, 64, 4, 256, 1, 1>,
        }
    }
    fn direct(layout: Layout, tiles: Tiles) -> Split<T, T> {
        match (layout, tiles.split_tiles()) {
            (Layout::Ab, Tiles::Small) => matmul_splitk::launch::<T, T, 64, 128, 64, 4, 128, 1, 1>,
            (Layout::Ab, Tiles::SmallTwo) => matmul_splitk::launch::<T, T, 64, 128, 64, 3, 128, 2, 1>,
            (Layout::Ab, Tiles::Narrow) => matmul_splitk::launch::<T, T, 64, 64, 64, 3, 128, 3, 1>,
            (Layout::Ab, Tiles::Gemv) => matmul_splitk::launch::<T, T, 16, 128, 64, 4, 128, 2, 1>,
            (Layout::Ab, Tiles::Thin) => matmul_splitk::launch::<T, T, 64, 32, 64, 16, 128, 1, 1>,
            (Layout::Ab, Tiles::Deep) => matmul_splitk::launch::<T, T, 64, 64, 64, 12, 128, 1, 1>,
            (Layout::Ab, Tiles::Tall) => matmul_splitk::launch::<T, T, 128, 64, 64, 8, 256, 1, 1>,
            (Layout::Ab, Tiles::ThinPair) => matmul_splitk::launch::<T, T, 64, 32, 64, 16, 128, 1, 2>,
            (Layout::Ab, Tiles::ThinQuad) => matmul_splitk::launch::<T, T, 64, 32, 64, 16, 128, 1, 4>,
            (Layout::Ab, Tiles::DeepPair) => matmul_splitk::launch::<T, T, 64, 64, 64, 12, 128, 1, 2>,
            (Layout::Ab, Tiles::Mid | Tiles::Wide) => matmul_splitk::launch::<T, T, 128, 128, 64, 4, 256, 1, 1>,
            (Layout::Abt, Tiles::Small) => matmul_bt_splitk::launch::<T, T, 64, 128, 64, 4, 128, 1, 1>,
            (Layout::Abt, Tiles::SmallTwo) => matmul_bt_splitk::launch::<T, T, 64, 128, 64, 3, 128, 2, 1>,
            (Layout::Abt, Tiles::Narrow) => matmul_bt_splitk::launch::<T, T, 64, 64, 64, 3, 128, 3, 1>,
            (Layout::Abt, Tiles::Gemv) => matmul_bt_splitk::launch::<T, T, 16, 128, 64, 4, 128, 2, 1>,
            (Layout::Abt, Tiles::Thin) => matmul_bt_splitk::launch::<T, T, 64, 32, 64, 16, 128, 1, 1>,
            (Layout::Abt, Tiles::Deep) => matmul_bt_splitk::launch::<T, T, 64, 64, 64, 12, 128, 1, 1>,
            (Layout::Abt, Tiles::Tall) => matmul_bt_splitk::launch::<T, T, 128, 64, 64, 8, 256, 1, 1>,
            (Layout::Abt, Tiles::ThinPair) => matmul_bt_splitk::launch::<T, T, 64, 32, 64, 16, 128, 1, 2>,
            (Layout::Abt, Tiles::ThinQuad) => matmul_bt_splitk::launch::<T, T, 64, 32, 64, 16, 128, 1, 4>,
            (Layout::Abt, Tiles::DeepPair) => matmul_bt_splitk::launch::<T, T, 64, 64, 64, 12, 128, 1, 2>,
            (Layout::Abt, Tiles::Mid | Tiles::Wide) => matmul_bt_splitk::launch::<T, T, 128, 128, 64, 4, 256, 1, 1>,
        }
    }
    fn reduce(s: &Stream, ws: &DeviceTensor<f32>, c: &mut DeviceTensor<T>) -> tile::Result<()> {
        splitk_reduce_pipelined::launch::<T>(s, ws, c)
    }
    fn pad(s: &Stream, x: &DeviceTensor<T>, y: &mut DeviceTensor<T>) -> tile::Result<()> {
        pad::launch::<T>(s, x, y)
    }
}

/// How [`ShapedGemm`] writes `c`.
enum Output<T: Element> {
    /// The plain kernel writes `c` (16-byte rows, one K range).
    Plain,
    /// The plain kernel writes a copy padded to 16-byte rows, [`pad`]
    /// crops it into `c` (odd N, `b [K, N]` padded too).
    Cropped(DeviceTensor<T>),
    /// The split-K kernel with one range writes `c` (seen as `[1, M, N]`)
    /// directly (odd N of `b [N, K]`, whose rows are whole; odd K of `b
    /// [K, N]`, read unpadded; the split-K-only tiles).
    Direct,
    /// The split-K kernel writes the f32 workspace `[split, M, N]`,
    /// [`splitk_reduce_pipelined`] sums it into `c`.
    Split(DeviceTensor<f32>),
}

/// A GEMM prepared for one shape and layout: its configuration ([`choose`]
/// or given) and its scratch (the split-K workspace, padded operands), made
/// once so that [`ShapedGemm::run`] allocates nothing.
///
/// What runs: operands whose rows are not a multiple of 16 bytes (odd K:
/// `a` and `b [N, K]`, padded in K to a multiple of 8; odd N: `b [K, N]`,
/// padded in both) are first copied by [`pad`] into zero-padded tensors
/// (`b [K, N]` with odd K alone is read as it is); then one of
/// [`Output`]'s ways: the plain kernel, the plain kernel into a padded `c`
/// and a crop (odd N, `Layout::Ab`), the split-K kernel writing `c` (odd
/// N of `Layout::Abt`, odd K alone of `Layout::Ab`, the split-K-only
/// tiles), or split-K into the workspace and the reduction (more than one
/// K range).
pub struct ShapedGemm<T: GemmElement> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub layout: Layout,
    pub config: Config,
    /// Whether operands whose rows are not 16-byte multiples are copied
    /// into padded ones first ([`ShapedGemm::new`]) or read as they are
    /// ([`ShapedGemm::unpadded`]).
    pub padded: bool,
    a_pad: Option<DeviceTensor<T>>,
    b_pad: Option<DeviceTensor<T>>,
    out: Output<T>,
}

impl<T: GemmElement> ShapedGemm<T> {
    /// Prepares `c [m, n] = a [m, k] · b` (`b` `[k, n]` for `Layout::Ab`,
    /// `[n, k]` for `Layout::Abt`) with `config`, or the shape rule's.
    pub fn new(
        s: &Stream,
        m: usize,
        n: usize,
        k: usize,
        layout: Layout,
        config: Option<Config>,
    ) -> tile::Result<ShapedGemm<T>> {
        let mut config = config.unwrap_or_else(|| choose(m, n, k));
        config.split = config.split.max(1);
        let kp = round8(k);
        let a_pad = if aligned(k) { None } else { Some(DeviceTensor::zeros(s, &[m, kp])?) };
        // `b` as the kernels read it: padded only where K or N is its row
        // (`[N, K]`, `[K, N]`): K padded as `a`'s, and N. An odd K of `b
        // [K, N]` leaves its rows whole: the split-K kernels read its K
        // rows (`KB`) against `a`'s padded K, zeros past the end.
        let b_pad = match layout {
            Layout::Ab if !aligned(n) => Some(DeviceTensor::zeros(s, &[kp, round8(n)])?),
            Layout::Abt if !aligned(k) => Some(DeviceTensor::zeros(s, &[n, kp])?),
            _ => None,
        };
        let short_b = layout == Layout::Ab && !aligned(k) && aligned(n);
        let out = if config.split > 1 {
            Output::Split(DeviceTensor::zeros(s, &[config.split, m, n])?)
        } else if !config.tiles.has_plain() || short_b {
            // The split-K kernel with one range writes `c` (a `b [K, N]`
            // padded in N is read as `[K, NB]`, its extra columns unwritten).
            Output::Direct
        } else if aligned(n) {
            Output::Plain
        } else if layout == Layout::Ab {
            Output::Cropped(DeviceTensor::zeros(s, &[m, round8(n)])?)
        } else {
            Output::Direct
        };
        if matches!(out, Output::Split(_) | Output::Direct) {
            config.tiles = config.tiles.split_tiles();
        }
        Ok(ShapedGemm { m, n, k, layout, config, padded: true, a_pad, b_pad, out })
    }

    /// [`ShapedGemm::new`] without padding: the split-K kernel (and the
    /// reduction, for more than one K range) reads `a` and `b` and writes
    /// `c` as they are, rows that are not 16-byte multiples included. Such
    /// rows are not TMA-addressable, so the runtime launches the kernels'
    /// variant without tensor maps, whose copies load them element by
    /// element: one GEMM in place of the copies of `a` and `b` before it
    /// (at 16 × 4097 × 4095 on the H200 the copy of `b` alone took 17.6 µs
    /// of ~39). A tuning candidate ([`ShapedGemm::tuned`]) where a row is
    /// odd; where every row is whole it runs as `new` with the split-K
    /// kernel would.
    pub fn unpadded(
        s: &Stream,
        m: usize,
        n: usize,
        k: usize,
        layout: Layout,
        config: Config,
    ) -> tile::Result<ShapedGemm<T>> {
        let split = config.split.max(1);
        let config = Config { tiles: config.tiles.split_tiles(), split };
        let out = if split > 1 { Output::Split(DeviceTensor::zeros(s, &[split, m, n])?) } else { Output::Direct };
        Ok(ShapedGemm { m, n, k, layout, config, padded: false, a_pad: None, b_pad: None, out })
    }

    /// The configuration as the tuner and the sweep name it: [`Config`]'s
    /// text, with ` unpadded` for [`ShapedGemm::unpadded`] where a row
    /// is odd.
    pub fn describe(&self) -> String {
        let odd = !aligned(self.k) || !aligned(self.n);
        if !self.padded && odd {
            format!("{} unpadded", self.config)
        } else {
            self.config.to_string()
        }
    }

    /// The fastest of [`candidates`] for the shape of `a [m, k]`, `b`
    /// (`[k, n]` for `Layout::Ab`, `[n, k]` for `Layout::Abt`) and `c [m,
    /// n]`, through `tuner` ([`tile::tune::Tuner::pick`]: timed on these
    /// tensors the first time for the device and shape bucket, then kept
    /// and cached; the rule's choice, untimed, where it is sure or with
    /// `TILE_TUNE=off`). Where a row is not a 16-byte multiple (and the
    /// rule is not sure) each candidate is also timed unpadded
    /// ([`ShapedGemm::unpadded`]). Tuning writes `c` (with some candidate's
    /// product); `a` and `b` are only read. Returns the prepared GEMM and
    /// the tuner's record of the choice.
    pub fn tuned(
        s: &Stream,
        tuner: &tile::tune::Tuner,
        layout: Layout,
        a: &DeviceTensor<T>,
        b: &DeviceTensor<T>,
        c: &mut DeviceTensor<T>,
    ) -> tile::Result<(ShapedGemm<T>, tile::tune::Record)> {
        let (m, n, k) = match (a.shape(), c.shape()) {
            (&[m, k], &[m2, n]) if m == m2 => (m, n, k),
            _ => {
                return Err(tile::Error::Shape {
                    kernel: "ShapedGemm".into(),
                    param: "a".into(),
                    dim: None,
                    message: format!("`a` {:?} and `c` {:?} are not [m, k] and [m, n] of one m", a.shape(), c.shape()),
                })
            }
        };
        // One prepared GEMM per distinct configuration (as `new` makes it),
        // and where a row is odd each also unpadded.
        let odd_rows = (!aligned(k) || !aligned(n)) && !rule_is_sure(m, n, k);
        let mut gemms: Vec<ShapedGemm<T>> = Vec::new();
        for config in candidates(m, n, k) {
            let mut both = vec![ShapedGemm::new(s, m, n, k, layout, Some(config))?];
            if odd_rows {
                both.push(ShapedGemm::unpadded(s, m, n, k, layout, config)?);
            }
            for g in both {
                if !gemms.iter().any(|x| (x.config, x.padded) == (g.config, g.padded)) {
                    gemms.push(g);
                }
            }
        }
        let configs: Vec<String> = gemms.iter().map(ShapedGemm::describe).collect();
        let odd = |x: usize| if aligned(x) { "" } else { "*" };
        let bucket = tile::tune::bucket_dim;
        let name = format!("ShapedGemm<{:?}> {layout:?}", T::DTYPE);
        let kernels: Vec<&'static tile::KernelMeta> = matmul::INSTANCES
            .iter()
            .chain(&matmul_bt::INSTANCES)
            .chain(&matmul_splitk::INSTANCES)
            .chain(&matmul_bt_splitk::INSTANCES)
            .chain(&splitk_reduce::INSTANCES)
            .chain(&splitk_reduce_pipelined::INSTANCES)
            .chain(&pad::INSTANCES)
            .copied()
            .collect();
        let space = tile::tune::HostCandidates {
            name: &name,
            configs: &configs,
            kernels: &kernels,
            bucket: format!("{}x{}{}x{}{}", bucket(m), bucket(n), odd(n), bucket(k), odd(k)),
        };
        let record = if gemms.len() == 1 {
            // Nothing to choose: no timing, nothing cached.
            tile::tune::Record {
                device: tile::tune::DeviceId::of(s.device()),
                kernel: name.clone(),
                hash: String::new(),
                bucket: space.bucket.clone(),
                config: configs[0].clone(),
                index: 0,
                candidates: Vec::new(),
                tuning_ms: 0.0,
                source: tile::tune::Source::Default,
            }
        } else {
            tuner.pick(s, &space, |i| gemms[i].run(s, a, b, c))?
        };
        let chosen = gemms.swap_remove(record.index.min(gemms.len() - 1));
        Ok((chosen, record))
    }

    /// `c = a · b` (or `a · bᵀ`) for the prepared shape.
    pub fn run(
        &mut self,
        s: &Stream,
        a: &DeviceTensor<T>,
        b: &DeviceTensor<T>,
        c: &mut DeviceTensor<T>,
    ) -> tile::Result<()> {
        // The padding and cropping kernels take any shapes: a tensor of
        // another shape than the prepared one must be an error here, not a
        // silently padded or cropped product.
        let b_shape = match self.layout {
            Layout::Ab => [self.k, self.n],
            Layout::Abt => [self.n, self.k],
        };
        for (param, got, want) in
            [("a", a.shape(), [self.m, self.k]), ("b", b.shape(), b_shape), ("c", c.shape(), [self.m, self.n])]
        {
            if got != want {
                return Err(tile::Error::Shape {
                    kernel: "ShapedGemm".into(),
                    param: param.into(),
                    dim: None,
                    message: format!(
                        "`{param}` has shape {got:?}, but this GEMM was prepared for {}x{}x{} ({:?}): {want:?}",
                        self.m, self.n, self.k, self.layout
                    ),
                });
            }
        }
        if let Some(p) = &mut self.a_pad {
            T::pad(s, a, p)?;
        }
        if let Some(p) = &mut self.b_pad {
            T::pad(s, b, p)?;
        }
        let a = self.a_pad.as_ref().unwrap_or(a);
        let b = self.b_pad.as_ref().unwrap_or(b);
        let (layout, tiles) = (self.layout, self.config.tiles);
        match &mut self.out {
            // `new` makes `Plain` and `Cropped` only for tiles with a plain kernel.
            Output::Plain => match T::plain(layout, tiles) {
                Some(plain) => plain(s, a, b, c),
                None => direct_into(layout, tiles, s, a, b, c),
            },
            Output::Cropped(padded) => match T::plain(layout, tiles) {
                Some(plain) => {
                    plain(s, a, b, padded)?;
                    T::pad(s, padded, c)
                }
                None => direct_into(layout, tiles, s, a, b, c),
            },
            Output::Direct => direct_into(layout, tiles, s, a, b, c),
            Output::Split(ws) => {
                T::split(layout, tiles)(s, a, b, ws)?;
                T::reduce(s, ws, c)
            }
        }
    }
}

/// The split-K kernel of `layout` and `tiles` with one K range, writing
/// `c [M, N]` (seen as `[1, M, N]` for the launch, then back; an empty
/// placeholder holds its place meanwhile, allocating nothing).
fn direct_into<T: GemmElement>(
    layout: Layout,
    tiles: Tiles,
    s: &Stream,
    a: &DeviceTensor<T>,
    b: &DeviceTensor<T>,
    c: &mut DeviceTensor<T>,
) -> tile::Result<()> {
    let shape = c.shape().to_vec();
    let whole = std::mem::replace(c, DeviceTensor::zeros(s, &[0])?);
    let mut whole = whole.reshape(&[1, shape[0], shape[1]])?;
    let launched = T::direct(layout, tiles)(s, a, b, &mut whole);
    *c = whole.reshape(&shape)?;
    launched
}

//! Kernels exercised by both the interpreter tests and the GPU tests, each
//! with an independent CPU reference (f64).
#![allow(dead_code)]
use tile::prelude::*;

pub mod checks;

/// `y = bf16(alpha * x + beta)` over a 2-D tile: casts and scalar params.
#[tile_kernel(threads = 128, consts(BM = 16, BN = 64))]
pub fn scale_shift(x: &Tensor<f32, M, N>, y: &mut Tensor<bf16, M, N>, alpha: f32, beta: f32) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    let mut out = fragment::<bf16, BM, BN>();
    copy(x.tile([by * BM, bx * BN]), &mut t);
    for (i, j) in parallel((BM, BN)) {
        out[(i, j)] = (alpha * t[(i, j)] + beta) as bf16;
    }
    copy(&out, y.tile([by * BM, bx * BN]));
}

pub fn scale_shift_ref(x: &[f32], alpha: f32, beta: f32) -> Vec<f64> {
    x.iter().map(|&v| (alpha as f64) * v as f64 + beta as f64).collect()
}

/// `y = alpha · x + y` in the element type `T`, generic over `T`, the
/// block and the threads: each instance is checked against one reference
/// (`checks::axpy`).
#[tile_kernel(threads = THREADS, instances((f32, 1024, 256), (f16, 512, 128), (bf16, 2048, 256)))]
pub fn axpy<T: Float, const BLOCK: usize, const THREADS: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>, alpha: T) {
    let bx = grid(cdiv(N, BLOCK));
    let mut a = fragment::<T, BLOCK>();
    let mut b = fragment::<T, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut a);
    copy(y.tile([bx * BLOCK]), &mut b);
    for i in parallel(BLOCK) {
        b[i] = alpha * a[i] + b[i];
    }
    copy(&b, y.tile([bx * BLOCK]));
}

/// Column sums: reduce over dim 0 of a tile, then atomics across row blocks.
#[tile_kernel(threads = 256, consts(BM = 32, BN = 128))]
pub fn col_sum(x: &Tensor<f32, M, N>, out: &mut Tensor<f32, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    let mut s = fragment::<f32, BN>();
    copy(x.tile([by * BM, bx * BN]), &mut t);
    reduce_sum(&t, &mut s, 0);
    for j in parallel(BN) {
        atomic_add(&mut out[bx * BN + j], s[j]);
    }
}

pub fn col_sum_ref(x: &[f32], m: usize, n: usize) -> Vec<f64> {
    (0..n).map(|j| (0..m).map(|i| x[i * n + j] as f64).sum()).collect()
}

/// Transpose through shared memory (shared indexed with swapped loop vars).
#[tile_kernel(threads = 256, consts(T = 32))]
pub fn transpose(x: &Tensor<f16, M, N>, y: &mut Tensor<f16, N, M>) {
    let (bx, by) = grid(cdiv(N, T), cdiv(M, T));
    let mut s = shared::<f16, T, T>();
    let mut t = fragment::<f16, T, T>();
    copy(x.tile([by * T, bx * T]), &mut s);
    for (i, j) in parallel((T, T)) {
        t[(i, j)] = s[(j, i)];
    }
    copy(&t, y.tile([bx * T, by * T]));
}

/// Row max and min over a dynamic number of column tiles (serial loop with
/// `keep`), for 4 rows per block.
#[tile_kernel(threads = 128, consts(BM = 4, BN = 256))]
pub fn row_range(x: &Tensor<f32, M, N>, hi: &mut Tensor<f32, M>, lo: &mut Tensor<f32, M>) {
    let bx = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    let mut mx = fragment::<f32, BM>();
    let mut mn = fragment::<f32, BM>();
    fill(&mut mx, f32::NEG_INFINITY);
    fill(&mut mn, f32::INFINITY);
    for c in 0..cdiv(N, BN) {
        copy(x.tile([bx * BM, c * BN]), &mut t).fill(f32::NEG_INFINITY);
        reduce_max(&t, &mut mx, 1).keep();
        for (i, j) in parallel((BM, BN)) {
            if t[(i, j)] == f32::NEG_INFINITY {
                t[(i, j)] = f32::INFINITY;
            }
        }
        reduce_min(&t, &mut mn, 1).keep();
    }
    copy(&mx, hi.tile([bx * BM]));
    copy(&mn, lo.tile([bx * BM]));
}

/// Histogram with u32 atomics indexed by data.
#[tile_kernel(threads = 256, consts(BLOCK = 1024))]
pub fn histogram(x: &Tensor<i32, N>, h: &mut Tensor<u32, B>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut v = fragment::<i32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut v).fill(-1);
    for i in parallel(BLOCK) {
        if v[i] >= 0 {
            atomic_add(&mut h[v[i]], 1);
        }
    }
}

/// Uniform scalar code: serial loops with dynamic bounds, if/else, `let mut`,
/// integer ops, and a uniform global store (done once per block).
#[tile_kernel(threads = 64)]
pub fn scalar_walk(out: &mut Tensor<i32, K>, n: i32) {
    let bx = grid(K);
    let mut acc = 0;
    for i in 0..n + bx {
        if i % 3 == 0 {
            acc += i * 2;
        } else if i % 3 == 1 {
            acc -= 1;
        } else {
            acc = acc ^ i;
        }
    }
    out[bx] = acc;
}

pub fn scalar_walk_ref(k: usize, n: i32) -> Vec<i32> {
    (0..k as i32)
        .map(|bx| {
            let mut acc: i32 = 0;
            for i in 0..n + bx {
                if i % 3 == 0 {
                    acc += i * 2;
                } else if i % 3 == 1 {
                    acc -= 1;
                } else {
                    acc ^= i;
                }
            }
            acc
        })
        .collect()
}

/// `y[r, c] = x[r, c] + r`: one row per block on y, column tiles on x,
/// `grid(cdiv(C, BC), R)`. With R past 65,535 (CUDA's limit on y) the
/// runtime launches the grid folded onto x and the kernel unfolds it
/// (issue 12); a block that ran as the wrong row writes a wrong value.
#[tile_kernel(threads = 32, consts(BC = 32))]
pub fn row_tiles(x: &Tensor<f32, R, C>, y: &mut Tensor<f32, R, C>) {
    let (bx, by) = grid(cdiv(C, BC), R);
    let mut t = fragment::<f32, 1, BC>();
    copy(x.tile([by, bx * BC]), &mut t);
    for (i, j) in parallel((1, BC)) {
        t[(i, j)] = t[(i, j)] + (by as f32);
    }
    copy(&t, y.tile([by, bx * BC]));
}

/// [`row_tiles`] with threadblock rasterization: folding and `use_swizzle`
/// share the linear block id.
#[tile_kernel(threads = 32, consts(BC = 32))]
pub fn row_tiles_swizzled(x: &Tensor<f32, R, C>, y: &mut Tensor<f32, R, C>) {
    let (bx, by) = grid(cdiv(C, BC), R);
    use_swizzle(3);
    let mut t = fragment::<f32, 1, BC>();
    copy(x.tile([by, bx * BC]), &mut t);
    for (i, j) in parallel((1, BC)) {
        t[(i, j)] = t[(i, j)] + (by as f32);
    }
    copy(&t, y.tile([by, bx * BC]));
}

/// `y[b, r, c] = x[b, r, c] + (8·b + r)` over `grid(cdiv(C, BC), R, B)`:
/// a batch on z, which folds onto x past 65,535 (exact marks for R ≤ 8).
#[tile_kernel(threads = 32, consts(BC = 32))]
pub fn batch_rows(x: &Tensor<f32, B, R, C>, y: &mut Tensor<f32, B, R, C>) {
    let (bx, by, bz) = grid(cdiv(C, BC), R, B);
    let mut t = fragment::<f32, 1, 1, BC>();
    copy(x.tile([bz, by, bx * BC]), &mut t);
    for (i, k, j) in parallel((1, 1, BC)) {
        t[(i, k, j)] = t[(i, k, j)] + ((bz * 8 + by) as f32);
    }
    copy(&t, y.tile([bz, by, bx * BC]));
}

/// A grid of `65,536·C × R` blocks: past 2^31 − 1 in all for large tensors,
/// which no launch (folded or not) runs, an error on every device.
#[tile_kernel(threads = 32, consts(BC = 32))]
pub fn huge_grid(x: &Tensor<f32, R, C>, y: &mut Tensor<f32, R, C>) {
    let (bx, by) = grid(C * 65536, R);
    let mut t = fragment::<f32, 1, BC>();
    copy(x.tile([by, bx * BC]), &mut t);
    copy(&t, y.tile([by, bx * BC]));
}

//! GEMM test kernels, shared by `tests/gemm_interp.rs` (interpreter) and
//! `tests/gpu_gemm.rs` (GPU), each with a check against an independent f64
//! CPU reference: every operand orientation in f16 and bf16, both warp
//! policies' extremes, serial and pipelined K loops, and a FlashAttention
//! inner loop (S = Q·Kᵀ → online softmax → O += P·V) over K/V tiles.
//!
//! Tiles are smaller than the example's (64 × 64 with 128 threads) so that
//! the interpreter runs them quickly; the example kernels are checked too.
//!
//! The Hopper-shaped kernels (issue 4: instances of the example's generic
//! `matmul` and `matmul_bt`, and `hopper_tn`, `hopper_tt` below) have the tiles
//! the sm_90a warp-specialized variant takes; [`check_hopper`] checks them at
//! any size (a sampled f64 reference above [`FULL_REFERENCE_LIMIT`], every
//! element bounded by a scale of sqrt(K)·|a|·|b|, exact row and column sums).
#![allow(dead_code)]
use tile::prelude::*;

use crate::common::Rng;
use crate::examples;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `c = a · b`, f16, pipelined over K.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32, STAGES = 2))]
pub fn gemm_nn_f16(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = a · bᵀ` (`b` stored `[N, K]`), f16.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32, STAGES = 2))]
pub fn gemm_nt_f16(a: &Tensor<f16, M, K>, b: &Tensor<f16, N, K>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BN, BK>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([bx * BN, k * BK]), &mut b_s);
        gemm(&a_s, &b_s.t(), &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = aᵀ · b` (`a` stored `[K, M]`), bf16.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32, STAGES = 2))]
pub fn gemm_tn_bf16(a: &Tensor<bf16, K, M>, b: &Tensor<bf16, K, N>, c: &mut Tensor<bf16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<bf16, BK, BM>();
    let mut b_s = shared::<bf16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([k * BK, by * BM]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s.t(), &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = aᵀ · bᵀ`, f16, a serial K loop, and the first product clearing the
/// accumulator instead of `clear` (so K must be at least 1).
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32))]
pub fn gemm_tt_f16(a: &Tensor<f16, K, M>, b: &Tensor<f16, N, K>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BK, BM>();
    let mut b_s = shared::<f16, BN, BK>();
    let mut acc = fragment::<f32, BM, BN>();
    copy(a.tile([0, by * BM]), &mut a_s);
    copy(b.tile([bx * BN, 0]), &mut b_s);
    gemm(&a_s.t(), &b_s.t(), &mut acc).clear();
    for k in 1..cdiv(K, BK) {
        copy(a.tile([k * BK, by * BM]), &mut a_s);
        copy(b.tile([bx * BN, k * BK]), &mut b_s);
        gemm(&a_s.t(), &b_s.t(), &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = a · b`, f16, a wide tile whose warps each own whole columns
/// (`FullCol`), BK = 16 (one mma k-step per slice).
#[tile_kernel(threads = 128, consts(BM = 32, BN = 128, BK = 16, STAGES = 3))]
pub fn gemm_fullcol_f16(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc).policy(FullCol);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = a · b`, bf16, a tall tile whose warps each own whole rows (`FullRow`).
#[tile_kernel(threads = 128, consts(BM = 128, BN = 32, BK = 32, STAGES = 2))]
pub fn gemm_fullrow_bf16(a: &Tensor<bf16, M, K>, b: &Tensor<bf16, K, N>, c: &mut Tensor<bf16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<bf16, BM, BK>();
    let mut b_s = shared::<bf16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc).policy(FullRow);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// One attention head, the FlashAttention inner loop: each block owns `BM`
/// query rows and walks the keys in tiles of `BN` with an online softmax.
/// `scale` is log2(e)/sqrt(D) (the kernel uses exp2). Keys past `SK` in the
/// last tile are masked to -inf before the row max. Both gemms split the
/// warps along M only (`FullRow`): each warp then owns whole rows of S, so the
/// row max and sum stay inside a warp and P feeds P·V from registers.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, D = 64))]
pub fn attention(
    q: &Tensor<f16, SQ, D>,
    k: &Tensor<f16, SK, D>,
    v: &Tensor<f16, SK, D>,
    o: &mut Tensor<f16, SQ, D>,
    scale: f32,
) {
    let bx = grid(cdiv(SQ, BM));
    let mut q_s = shared::<f16, BM, D>();
    let mut k_s = shared::<f16, BN, D>();
    let mut v_s = shared::<f16, BN, D>();
    let mut s = fragment::<f32, BM, BN>();
    let mut p = fragment::<f16, BM, BN>();
    let mut acc = fragment::<f32, BM, D>();
    let mut m = fragment::<f32, BM>();
    let mut m_prev = fragment::<f32, BM>();
    let mut r = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut row_sum = fragment::<f32, BM>();
    copy(q.tile([bx * BM, 0]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in pipelined(cdiv(SK, BN), 2) {
        copy(k.tile([kb * BN, 0]), &mut k_s);
        copy(v.tile([kb * BN, 0]), &mut v_s);
        gemm(&q_s, &k_s.t(), &mut s).clear().policy(FullRow);
        for (i, j) in parallel((BM, BN)) {
            if kb * BN + j >= SK {
                s[(i, j)] = f32::NEG_INFINITY;
            }
        }
        copy(&m, &mut m_prev);
        reduce_max(&s, &mut m, 1).keep();
        for i in parallel(BM) {
            r[i] = exp2((m_prev[i] - m[i]) * scale);
        }
        for (i, j) in parallel((BM, BN)) {
            s[(i, j)] = exp2(s[(i, j)] * scale - m[i] * scale);
        }
        reduce_sum(&s, &mut row_sum, 1);
        for i in parallel(BM) {
            l[i] = l[i] * r[i] + row_sum[i];
        }
        for (i, j) in parallel((BM, D)) {
            acc[(i, j)] *= r[i];
        }
        copy(&s, &mut p);
        gemm(&p, &v_s, &mut acc).policy(FullRow);
    }
    for (i, j) in parallel((BM, D)) {
        acc[(i, j)] = acc[(i, j)] / l[i];
    }
    copy(&acc, o.tile([bx * BM, 0]));
}

/// The same inner loop with a serial key loop, narrower key tiles, a smaller
/// head dimension and bf16 inputs; the row rescale folds into the update.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 32, D = 32))]
pub fn attention_serial_bf16(
    q: &Tensor<bf16, SQ, D>,
    k: &Tensor<bf16, SK, D>,
    v: &Tensor<bf16, SK, D>,
    o: &mut Tensor<bf16, SQ, D>,
    scale: f32,
) {
    let bx = grid(cdiv(SQ, BM));
    let mut q_s = shared::<bf16, BM, D>();
    let mut k_s = shared::<bf16, BN, D>();
    let mut v_s = shared::<bf16, BN, D>();
    let mut s = fragment::<f32, BM, BN>();
    let mut p = fragment::<bf16, BM, BN>();
    let mut acc = fragment::<f32, BM, D>();
    let mut m = fragment::<f32, BM>();
    let mut m_prev = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut row_sum = fragment::<f32, BM>();
    copy(q.tile([bx * BM, 0]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in 0..cdiv(SK, BN) {
        copy(k.tile([kb * BN, 0]), &mut k_s);
        copy(v.tile([kb * BN, 0]), &mut v_s);
        gemm(&q_s, &k_s.t(), &mut s).clear().policy(FullRow);
        for (i, j) in parallel((BM, BN)) {
            if kb * BN + j >= SK {
                s[(i, j)] = f32::NEG_INFINITY;
            }
        }
        copy(&m, &mut m_prev);
        reduce_max(&s, &mut m, 1).keep();
        for (i, j) in parallel((BM, BN)) {
            s[(i, j)] = exp2((s[(i, j)] - m[i]) * scale);
        }
        reduce_sum(&s, &mut row_sum, 1);
        for i in parallel(BM) {
            l[i] = l[i] * exp2((m_prev[i] - m[i]) * scale) + row_sum[i];
        }
        for (i, j) in parallel((BM, D)) {
            acc[(i, j)] = acc[(i, j)] * exp2((m_prev[i] - m[i]) * scale);
        }
        copy(&s, &mut p);
        gemm(&p, &v_s, &mut acc).policy(FullRow);
    }
    for (i, j) in parallel((BM, D)) {
        acc[(i, j)] = acc[(i, j)] / l[i];
    }
    copy(&acc, o.tile([bx * BM, 0]));
}

/// Random `[rows, cols]` values in [lo, hi), rounded to `T`, on the device.
fn random<T: Element>(
    s: &Stream,
    rng: &mut Rng,
    rows: usize,
    cols: usize,
    lo: f32,
    hi: f32,
) -> Res<(Vec<T>, DeviceTensor<T>)> {
    let host: Vec<T> = rng.vec(rows * cols, lo, hi).into_iter().map(|v| T::from_f64(v as f64)).collect();
    let dev = DeviceTensor::from_slice(s, &host, &[rows, cols])?;
    Ok((host, dev))
}

/// The orientation of a GEMM's operands in memory.
#[derive(Copy, Clone, Debug)]
pub struct Trans {
    pub a: bool,
    pub b: bool,
}

pub const NN: Trans = Trans { a: false, b: false };
pub const NT: Trans = Trans { a: false, b: true };
pub const TN: Trans = Trans { a: true, b: false };
pub const TT: Trans = Trans { a: true, b: true };

/// Runs one GEMM kernel (`launch`) at `m × n × k` with operands stored as
/// `trans` says, on random inputs, and checks `c` against the f64 reference
/// within `tol` (relative L2). The output starts as NaN so that an element the
/// kernel never writes fails the check. Returns `c`.
#[allow(clippy::too_many_arguments)]
pub fn check_gemm<T: Element, O: Element>(
    dev: &Device,
    m: usize,
    n: usize,
    k: usize,
    trans: Trans,
    tol: f64,
    seed: u64,
    launch: impl FnOnce(&Stream, &DeviceTensor<T>, &DeviceTensor<T>, &mut DeviceTensor<O>) -> tile::Result<()>,
) -> Res<Vec<O>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let (a_rows, a_cols) = if trans.a { (k, m) } else { (m, k) };
    let (b_rows, b_cols) = if trans.b { (n, k) } else { (k, n) };
    let (a_host, a) = random::<T>(&s, &mut rng, a_rows, a_cols, -1.0, 1.0)?;
    let (b_host, b) = random::<T>(&s, &mut rng, b_rows, b_cols, -1.0, 1.0)?;
    let mut c = DeviceTensor::from_slice(&s, &vec![O::from_f64(f64::NAN); m * n], &[m, n])?;
    launch(&s, &a, &b, &mut c)?;
    let got = c.to_vec(&s)?;
    let want = examples::gemm::reference_rows(m, n, k, &a_host, &b_host, trans.a, trans.b, 0..m);
    assert_close(&got, &want, tol).map_err(|e| format!("{m}x{n}x{k} {trans:?}: {e}"))?;
    Ok(got)
}

/// Tolerances (relative L2 against f64) for an output rounded once to the type.
pub const TOL_F16: f64 = 2e-3;
pub const TOL_BF16: f64 = 1e-2;
pub const TOL_F32: f64 = 5e-5;

pub fn nn_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NN, TOL_F16, seed, gemm_nn_f16::launch)
}

pub fn nn_bf16_f32_out(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f32>> {
    // The example's `matmul` at 64 × 64 × 32, 3 stages, 128 threads, panels of 4.
    check_gemm::<bf16, f32>(
        dev,
        m,
        n,
        k,
        NN,
        TOL_F32,
        seed,
        examples::gemm::matmul::launch::<bf16, f32, 64, 64, 32, 3, 128, 4>,
    )
}

pub fn nt_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NT, TOL_F16, seed, gemm_nt_f16::launch)
}

pub fn tn_bf16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<bf16>> {
    check_gemm(dev, m, n, k, TN, TOL_BF16, seed, gemm_tn_bf16::launch)
}

pub fn tt_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, TT, TOL_F16, seed, gemm_tt_f16::launch)
}

pub fn fullcol_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NN, TOL_F16, seed, gemm_fullcol_f16::launch)
}

pub fn fullrow_bf16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<bf16>> {
    check_gemm(dev, m, n, k, NN, TOL_BF16, seed, gemm_fullrow_bf16::launch)
}

/// The example's kernels (128 × 256 × 64 tiles, 256 threads, 3 stages).
pub fn example_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NN, TOL_F16, seed, HOPPER_NN_F16)
}

pub fn example_bf16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<bf16>> {
    check_gemm(dev, m, n, k, NN, TOL_BF16, seed, HOPPER_NN_BF16)
}

pub fn example_bt_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NT, TOL_F16, seed, HOPPER_NT_F16)
}

/// f64 attention of one head: `softmax(q·kᵀ / sqrt(d)) · v`, `[sq, d]`.
pub fn attention_ref<T: Element>(q: &[T], k: &[T], v: &[T], sq: usize, sk: usize, d: usize) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; sq * d];
    let mut p = vec![0.0; sk];
    for i in 0..sq {
        for (j, pj) in p.iter_mut().enumerate() {
            *pj = (0..d).map(|c| q[i * d + c].to_f64() * k[j * d + c].to_f64()).sum::<f64>() * scale;
        }
        let max = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for pj in p.iter_mut() {
            *pj = (*pj - max).exp();
            sum += *pj;
        }
        for c in 0..d {
            out[i * d + c] = (0..sk).map(|j| p[j] * v[j * d + c].to_f64()).sum::<f64>() / sum;
        }
    }
    out
}

type AttentionLaunch<T> =
    fn(&Stream, &DeviceTensor<T>, &DeviceTensor<T>, &DeviceTensor<T>, &mut DeviceTensor<T>, f32) -> tile::Result<()>;

/// Runs an attention kernel with head dimension `d` on random q, k, v (wide
/// enough that the softmax is far from uniform) against [`attention_ref`].
#[allow(clippy::too_many_arguments)]
fn check_attention<T: Element>(
    dev: &Device,
    sq: usize,
    sk: usize,
    d: usize,
    tol: f64,
    seed: u64,
    launch: AttentionLaunch<T>,
) -> Res<Vec<T>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let (q_host, q) = random::<T>(&s, &mut rng, sq, d, -2.0, 2.0)?;
    let (k_host, k) = random::<T>(&s, &mut rng, sk, d, -2.0, 2.0)?;
    let (v_host, v) = random::<T>(&s, &mut rng, sk, d, -1.0, 1.0)?;
    let mut o = DeviceTensor::from_slice(&s, &vec![T::from_f64(f64::NAN); sq * d], &[sq, d])?;
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    launch(&s, &q, &k, &v, &mut o, scale)?;
    let got = o.to_vec(&s)?;
    let want = attention_ref(&q_host, &k_host, &v_host, sq, sk, d);
    assert_close(&got, &want, tol).map_err(|e| format!("attention sq={sq} sk={sk} d={d}: {e}"))?;
    Ok(got)
}

/// The pipelined f16 attention kernel (head dimension 64).
pub fn attention_f16(dev: &Device, sq: usize, sk: usize, seed: u64) -> Res<Vec<f16>> {
    // P is rounded to f16 before P·V: a few 1e-4 relative on top of the output's rounding.
    check_attention(dev, sq, sk, 64, 5e-3, seed, attention::launch)
}

/// The serial bf16 attention kernel (head dimension 32).
pub fn attention_bf16(dev: &Device, sq: usize, sk: usize, seed: u64) -> Res<Vec<bf16>> {
    check_attention(dev, sq, sk, 32, 2e-2, seed, attention_serial_bf16::launch)
}

// ---------------------------------------------------------------------------
// Hopper-shaped GEMMs (issue 4). On sm_90a, `compile_variants` turns each of
// these pipelined loops into a warp-specialized TMA + mbarrier + wgmma
// kernel when every operand is TMA-addressable (16-byte aligned rows: K·2
// bytes for a row-major `a`, and so on) and falls back to the general
// cp.async + mma.sync variant otherwise; the kernel source is the same.
// One generic kernel per orientation, over the input and output types and
// the configuration (`<T, O, BM, BN, BK, STAGES, THREADS>`, and the
// rasterization panel last for `matmul`): `a · b` and `a · bᵀ` are the
// example's `matmul` and `matmul_bt` (whose instances include the ones
// below), `aᵀ · b` and `aᵀ · bᵀ` are here.
// ---------------------------------------------------------------------------

/// `c = aᵀ · b`: `a` stored `[K, M]`, staged `[BK, BM]`, read as `a_s.t()`.
#[tile_kernel(
    threads = THREADS,
    instances(
        (f16, f16, 128, 256, 64, 3, 256),
        (bf16, bf16, 128, 256, 64, 3, 256),
        // 2, 3 and 4 stages: outputs bitwise identical.
        (bf16, bf16, 128, 128, 64, 2, 256),
        (bf16, bf16, 128, 128, 64, 3, 256),
        (bf16, bf16, 128, 128, 64, 4, 256),
    )
)]
pub fn hopper_tn<
    T: Float16,
    O: Float,
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const THREADS: usize,
>(
    a: &Tensor<T, K, M>,
    b: &Tensor<T, K, N>,
    c: &mut Tensor<O, M, N>,
) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    use_swizzle(8);
    let mut a_s = shared::<T, BK, BM>();
    let mut b_s = shared::<T, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([k * BK, by * BM]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s.t(), &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = aᵀ · bᵀ`: `a` stored `[K, M]`, `b` stored `[N, K]`.
#[tile_kernel(threads = THREADS, instances((f16, f16, 128, 256, 64, 3, 256), (bf16, bf16, 128, 256, 64, 3, 256)))]
pub fn hopper_tt<
    T: Float16,
    O: Float,
    const BM: usize,
    const BN: usize,
    const BK: usize,
    const STAGES: usize,
    const THREADS: usize,
>(
    a: &Tensor<T, K, M>,
    b: &Tensor<T, N, K>,
    c: &mut Tensor<O, M, N>,
) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    use_swizzle(8);
    let mut a_s = shared::<T, BK, BM>();
    let mut b_s = shared::<T, BN, BK>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([k * BK, by * BM]), &mut a_s);
        copy(b.tile([bx * BN, k * BK]), &mut b_s);
        gemm(&a_s.t(), &b_s.t(), &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

use examples::gemm::{matmul, matmul_bt};

// The example's configuration (128 × 256 × 64, 256 threads: two consumer
// warpgroups of 64 × 256 each, 3 stages of 48 KB), every orientation, f16
// and bf16.
pub const HOPPER_NN_F16: GemmLaunch<f16, f16> = matmul::launch::<f16, f16, 128, 256, 64, 3, 256, 8>;
pub const HOPPER_NN_BF16: GemmLaunch<bf16, bf16> = matmul::launch::<bf16, bf16, 128, 256, 64, 3, 256, 8>;
pub const HOPPER_TN_F16: GemmLaunch<f16, f16> = hopper_tn::launch::<f16, f16, 128, 256, 64, 3, 256>;
pub const HOPPER_TN_BF16: GemmLaunch<bf16, bf16> = hopper_tn::launch::<bf16, bf16, 128, 256, 64, 3, 256>;
pub const HOPPER_NT_F16: GemmLaunch<f16, f16> = matmul_bt::launch::<f16, f16, 128, 256, 64, 3, 256>;
pub const HOPPER_NT_BF16: GemmLaunch<bf16, bf16> = matmul_bt::launch::<bf16, bf16, 128, 256, 64, 3, 256>;
pub const HOPPER_TT_F16: GemmLaunch<f16, f16> = hopper_tt::launch::<f16, f16, 128, 256, 64, 3, 256>;
pub const HOPPER_TT_BF16: GemmLaunch<bf16, bf16> = hopper_tt::launch::<bf16, bf16, 128, 256, 64, 3, 256>;
/// The accumulator stored unrounded (f32 out): the tight check of the
/// tensor-core accumulation itself.
pub const HOPPER_NN_BF16_F32_OUT: GemmLaunch<bf16, f32> = matmul::launch::<bf16, f32, 128, 256, 64, 3, 256, 8>;

// One kernel at 2, 3 and 4 stages: the outputs must be bitwise identical
// (the K order of the accumulation does not depend on the pipeline depth).
// 128 × 128 × 64 rather than the example's 128 × 256 × 64, whose 4 stages
// (192 KB) exceed sm_80's 163 KB of shared memory: every kernel is also
// built for sm_80 (the default TILE_ARCHS), and that would fail the build.
pub const STAGES2_F16: GemmLaunch<f16, f16> = matmul::launch::<f16, f16, 128, 128, 64, 2, 256, 8>;
pub const STAGES3_F16: GemmLaunch<f16, f16> = matmul::launch::<f16, f16, 128, 128, 64, 3, 256, 8>;
pub const STAGES4_F16: GemmLaunch<f16, f16> = matmul::launch::<f16, f16, 128, 128, 64, 4, 256, 8>;
pub const STAGES2_TN_BF16: GemmLaunch<bf16, bf16> = hopper_tn::launch::<bf16, bf16, 128, 128, 64, 2, 256>;
pub const STAGES3_TN_BF16: GemmLaunch<bf16, bf16> = hopper_tn::launch::<bf16, bf16, 128, 128, 64, 3, 256>;
pub const STAGES4_TN_BF16: GemmLaunch<bf16, bf16> = hopper_tn::launch::<bf16, bf16, 128, 128, 64, 4, 256>;

// One consumer warpgroup (128 threads) owning a whole 64-row tile (the
// warp-specialized variant gives each warpgroup 64 rows: m64nNk16).
pub const ONE_WARPGROUP_F16: GemmLaunch<f16, f16> = matmul::launch::<f16, f16, 64, 256, 64, 4, 128, 8>;
pub const ONE_WARPGROUP_NT_BF16: GemmLaunch<bf16, bf16> = matmul_bt::launch::<bf16, bf16, 64, 128, 64, 4, 128>;

/// The compiled instances behind the constants above (the example's
/// configuration among them), named: every one has the shape of the sm_90a
/// warp-specialized variant.
pub fn hopper_metas() -> [(&'static str, &'static tile::KernelMeta); 17] {
    [
        ("hopper_nn_f16", matmul::meta::<f16, f16, 128, 256, 64, 3, 256, 8>()),
        ("hopper_nn_bf16", matmul::meta::<bf16, bf16, 128, 256, 64, 3, 256, 8>()),
        ("hopper_tn_f16", hopper_tn::meta::<f16, f16, 128, 256, 64, 3, 256>()),
        ("hopper_tn_bf16", hopper_tn::meta::<bf16, bf16, 128, 256, 64, 3, 256>()),
        ("hopper_nt_f16", matmul_bt::meta::<f16, f16, 128, 256, 64, 3, 256>()),
        ("hopper_nt_bf16", matmul_bt::meta::<bf16, bf16, 128, 256, 64, 3, 256>()),
        ("hopper_tt_f16", hopper_tt::meta::<f16, f16, 128, 256, 64, 3, 256>()),
        ("hopper_tt_bf16", hopper_tt::meta::<bf16, bf16, 128, 256, 64, 3, 256>()),
        ("hopper_nn_bf16_f32_out", matmul::meta::<bf16, f32, 128, 256, 64, 3, 256, 8>()),
        ("stages2_f16", matmul::meta::<f16, f16, 128, 128, 64, 2, 256, 8>()),
        ("stages3_f16", matmul::meta::<f16, f16, 128, 128, 64, 3, 256, 8>()),
        ("stages4_f16", matmul::meta::<f16, f16, 128, 128, 64, 4, 256, 8>()),
        ("stages2_tn_bf16", hopper_tn::meta::<bf16, bf16, 128, 128, 64, 2, 256>()),
        ("stages3_tn_bf16", hopper_tn::meta::<bf16, bf16, 128, 128, 64, 3, 256>()),
        ("stages4_tn_bf16", hopper_tn::meta::<bf16, bf16, 128, 128, 64, 4, 256>()),
        ("one_warpgroup_f16", matmul::meta::<f16, f16, 64, 256, 64, 4, 128, 8>()),
        ("one_warpgroup_nt_bf16", matmul_bt::meta::<bf16, bf16, 64, 128, 64, 4, 128>()),
    ]
}

// The example configuration with the warp-specialized variant turned off:
// on sm_90a the TMA-copy variant (thread 0's TMA boxes on per-stage
// mbarriers, all threads running wgmma) serves TMA-addressable operands and
// the general cp.async one the rest.

/// `c = a · b` (f16), `warp_specialize = false`.
#[tile_kernel(threads = 256, warp_specialize = false, consts(BM = 128, BN = 256, BK = 64, STAGES = 3))]
pub fn general_only_nn_f16(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    use_swizzle(8);
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// `c = aᵀ · bᵀ` (bf16, `a` stored `[K, M]`, `b` `[N, K]`), `warp_specialize = false`.
#[tile_kernel(threads = 128, warp_specialize = false, consts(BM = 64, BN = 128, BK = 64, STAGES = 2))]
pub fn general_only_tt_bf16(a: &Tensor<bf16, K, M>, b: &Tensor<bf16, N, K>, c: &mut Tensor<bf16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<bf16, BK, BM>();
    let mut b_s = shared::<bf16, BN, BK>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([k * BK, by * BM]), &mut a_s);
        copy(b.tile([bx * BN, k * BK]), &mut b_s);
        gemm(&a_s.t(), &b_s.t(), &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

/// A GEMM kernel's launch wrapper: `c = op(a) · op(b)`.
pub type GemmLaunch<T, O> = fn(&Stream, &DeviceTensor<T>, &DeviceTensor<T>, &mut DeviceTensor<O>) -> tile::Result<()>;

/// The unit roundoff of an output type (half its epsilon): the relative
/// error of rounding the f32 accumulator to it.
pub fn unit_roundoff<O: Element>() -> f64 {
    match O::DTYPE {
        tile::ir::DType::F16 => f64::powi(2.0, -11),
        tile::ir::DType::BF16 => f64::powi(2.0, -8),
        _ => f64::powi(2.0, -24),
    }
}

/// The relative L2 tolerance of an output type (the constants above).
pub fn l2_tolerance<O: Element>() -> f64 {
    match O::DTYPE {
        tile::ir::DType::F16 => TOL_F16,
        tile::ir::DType::BF16 => TOL_BF16,
        _ => TOL_F32,
    }
}

/// The shapes of `a` and `b` in memory for `trans`.
pub fn operand_shapes(m: usize, n: usize, k: usize, trans: Trans) -> ([usize; 2], [usize; 2]) {
    let a = if trans.a { [k, m] } else { [m, k] };
    let b = if trans.b { [n, k] } else { [k, n] };
    (a, b)
}

/// Whether both operands of an `m × n × k` GEMM stored as `trans` says are
/// TMA-addressable (device allocations are 256-byte aligned, so only the row
/// strides matter): then sm_90a runs the warp-specialized TMA + wgmma
/// variant, otherwise the general cp.async + mma.sync one.
pub fn tma_operands(m: usize, n: usize, k: usize, trans: Trans, elem_bytes: usize) -> bool {
    let (a, b) = operand_shapes(m, n, k, trans);
    tile::ir::abi::tma_addressable(0, &a, elem_bytes) && tile::ir::abi::tma_addressable(0, &b, elem_bytes)
}

/// Above this many multiply-adds the reference covers only [`sample_rows`]
/// (the full f64 product of a 4096³ GEMM takes minutes on a CPU).
pub const FULL_REFERENCE_LIMIT: usize = 1 << 28;

/// The rows of an `m`-row output that a check compares element by element:
/// all of them up to [`FULL_REFERENCE_LIMIT`] multiply-adds, otherwise the
/// first and last rows, the rows around every warpgroup and tile boundary
/// of the first two 128-row tiles and of the last tile (64-row warpgroups,
/// 128-row tiles) and a dozen random rows. Sorted, without repeats.
pub fn sample_rows(m: usize, n: usize, k: usize, seed: u64) -> Vec<usize> {
    if m * n * k <= FULL_REFERENCE_LIMIT {
        return (0..m).collect();
    }
    let last_tile = (m - 1) / 128 * 128;
    let mut rows = vec![0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 255, 256, m.saturating_sub(2), m - 1];
    rows.extend([last_tile.saturating_sub(1), last_tile, last_tile + 1, last_tile + 63, last_tile + 64]);
    let mut rng = Rng::new(seed ^ 0x5eed);
    rows.extend((0..12).map(|_| (rng.next_u64() % m as u64) as usize));
    rows.retain(|&r| r < m);
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// The f64 reference of `op(a) · op(b)` at `rows`, `rows.len() × n` values
/// in that order: `examples::gemm::reference_rows`' arithmetic with `op(b)`
/// transposed once and the rows spread over the CPU's cores (a 4096³ check
/// samples ~30 rows: one transpose and 30·n·k multiply-adds).
pub fn reference_at<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    trans: Trans,
    rows: &[usize],
) -> Vec<f64> {
    assert_eq!(a.len(), m * k, "reference: a has {} elements, not m * k = {}", a.len(), m * k);
    assert_eq!(b.len(), k * n, "reference: b has {} elements, not k * n = {}", b.len(), k * n);
    // op(b) as [n, k] rows of f64: each output is a contiguous dot product.
    let mut bt = vec![0.0f64; n * k];
    for p in 0..k {
        for j in 0..n {
            bt[j * k + p] = if trans.b { b[j * k + p] } else { b[p * n + j] }.to_f64();
        }
    }
    let bt = &bt;
    let one_row = move |i: usize, out: &mut Vec<f64>| {
        let a_row: Vec<f64> = (0..k).map(|p| if trans.a { a[p * m + i] } else { a[i * k + p] }.to_f64()).collect();
        out.extend((0..n).map(|j| a_row.iter().zip(&bt[j * k..(j + 1) * k]).map(|(x, y)| x * y).sum::<f64>()));
    };
    let threads = std::thread::available_parallelism().map_or(4, |p| p.get()).min(rows.len().max(1));
    let chunk = rows.len().div_ceil(threads).max(1);
    let parts: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut out = Vec::with_capacity(part.len() * n);
                    for &i in part {
                        one_row(i, &mut out);
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("reference thread")).collect()
    });
    parts.concat()
}

/// Row sums and column sums of the f64 product `op(a) · op(b)`, in
/// O(mk + kn): `C·1 = op(a)·(op(b)·1)` and `1ᵀ·C = (1ᵀ·op(a))·op(b)`.
pub fn reference_sums<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    trans: Trans,
) -> (Vec<f64>, Vec<f64>) {
    let a_at = |i: usize, p: usize| if trans.a { a[p * m + i] } else { a[i * k + p] }.to_f64();
    let b_at = |p: usize, j: usize| if trans.b { b[j * k + p] } else { b[p * n + j] }.to_f64();
    let b_row_sums: Vec<f64> = (0..k).map(|p| (0..n).map(|j| b_at(p, j)).sum()).collect();
    let a_col_sums: Vec<f64> = (0..k).map(|p| (0..m).map(|i| a_at(i, p)).sum()).collect();
    let row_sums = (0..m).map(|i| (0..k).map(|p| a_at(i, p) * b_row_sums[p]).sum()).collect();
    let col_sums = (0..n).map(|j| (0..k).map(|p| a_col_sums[p] * b_at(p, j)).sum()).collect();
    (row_sums, col_sums)
}

/// Checks a GEMM result `got` (`m × n`, row-major) of inputs in [-1, 1):
///
/// 1. every element finite (the output starts as NaN: an element no block
///    writes fails here, in any row);
/// 2. at [`sample_rows`]: relative L2 error within the type's tolerance, and
///    each element within `u·|ref| + 2⁻¹²·sqrt(k)·max|a|·max|b|` of the f64
///    reference: `u` the output's rounding, the second term the f32
///    accumulation error at the scale of a k-term dot product of random
///    signs (far below the contribution of one missing k-slice);
/// 3. every row sum and column sum of the whole output against the exact
///    one (within six standard deviations of independent per-element errors
///    of the bound above): a wrong element in a row that step 2 did not
///    sample still moves its row's sum.
#[allow(clippy::too_many_arguments)]
pub fn check_scaled<T: Element, O: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    trans: Trans,
    got: &[O],
    seed: u64,
) -> Result<(), String> {
    if let Some(i) = got.iter().position(|v| !v.to_f64().is_finite()) {
        return Err(format!("element ({}, {}) is {:?}: never written, or overflowed", i / n, i % n, got[i]));
    }
    let rows = sample_rows(m, n, k, seed);
    let want = reference_at(m, n, k, a, b, trans, &rows);
    let got_rows: Vec<O> = rows.iter().flat_map(|&i| got[i * n..(i + 1) * n].iter().copied()).collect();
    let tol = l2_tolerance::<O>();
    assert_close(&got_rows, &want, tol).map_err(|e| format!("rows {}..: {e}", rows.len()))?;
    let max_abs = |v: &[T]| v.iter().fold(0.0f64, |acc, x| acc.max(x.to_f64().abs()));
    let scale = (k as f64).sqrt() * max_abs(a) * max_abs(b);
    let u = unit_roundoff::<O>();
    for (idx, (g, w)) in got_rows.iter().zip(&want).enumerate() {
        let bound = u * w.abs() + scale * f64::powi(2.0, -12);
        let g = g.to_f64();
        if (g - w).abs() > bound {
            let (i, j) = (rows[idx / n.max(1)], idx % n.max(1));
            return Err(format!(
                "element ({i}, {j}): got {g}, reference {w}, off by {:.3e} > {bound:.3e}",
                (g - w).abs()
            ));
        }
    }
    // Sums: rounding errors of random data have random signs, so the error
    // of a sum of `len` outputs is about sqrt(len) times one output's, not
    // `len` times; six standard deviations of that model bound it (bound²
    // = 36 · Σ (u·|c| + atol)² over the summed outputs).
    let atol = scale * f64::powi(2.0, -12);
    let (row_ref, col_ref) = reference_sums(m, n, k, a, b, trans);
    let mut row_got = vec![(0.0f64, 0.0f64); m];
    let mut col_got = vec![(0.0f64, 0.0f64); n];
    for i in 0..m {
        for j in 0..n {
            let v = got[i * n + j].to_f64();
            let var = (u * v.abs() + atol).powi(2);
            row_got[i].0 += v;
            row_got[i].1 += var;
            col_got[j].0 += v;
            col_got[j].1 += var;
        }
    }
    for (what, sums, refs) in [("row", &row_got, &row_ref), ("column", &col_got, &col_ref)] {
        for (idx, (&(sum, var), &want)) in sums.iter().zip(refs.iter()).enumerate() {
            let bound = 6.0 * var.sqrt();
            if (sum - want).abs() > bound {
                return Err(format!(
                    "the sum of {what} {idx} is {sum}, the reference {want}: off by {:.3e} > {bound:.3e}",
                    (sum - want).abs()
                ));
            }
        }
    }
    Ok(())
}

/// Runs `launch` at `m × n × k` on random inputs in [-1, 1) stored as
/// `trans` says, and checks the result with [`check_scaled`]. Returns it.
#[allow(clippy::too_many_arguments)]
pub fn check_hopper<T: Element, O: Element>(
    dev: &Device,
    m: usize,
    n: usize,
    k: usize,
    trans: Trans,
    seed: u64,
    launch: GemmLaunch<T, O>,
) -> Res<Vec<O>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let ([ar, ac], [br, bc]) = operand_shapes(m, n, k, trans);
    let (a_host, a) = random::<T>(&s, &mut rng, ar, ac, -1.0, 1.0)?;
    let (b_host, b) = random::<T>(&s, &mut rng, br, bc, -1.0, 1.0)?;
    let mut c = DeviceTensor::from_slice(&s, &vec![O::from_f64(f64::NAN); m * n], &[m, n])?;
    launch(&s, &a, &b, &mut c)?;
    let got = c.to_vec(&s)?;
    check_scaled(m, n, k, &a_host, &b_host, trans, &got, seed).map_err(|e| {
        let path = if tma_operands(m, n, k, trans, std::mem::size_of::<T>()) { "TMA-addressable" } else { "general" };
        format!("{m}x{n}x{k} {trans:?} ({path} operands): {e}")
    })?;
    Ok(got)
}

/// A Hopper-shaped kernel by name, with its orientation.
pub struct HopperCase<T: Element, O: Element> {
    pub name: &'static str,
    pub trans: Trans,
    pub launch: GemmLaunch<T, O>,
}

/// The example-configuration kernels (128 × 256 × 64, 256 threads), f16.
pub fn hopper_f16() -> [HopperCase<f16, f16>; 4] {
    [
        HopperCase { name: "hopper_nn_f16", trans: NN, launch: HOPPER_NN_F16 },
        HopperCase { name: "hopper_tn_f16", trans: TN, launch: HOPPER_TN_F16 },
        HopperCase { name: "hopper_nt_f16", trans: NT, launch: HOPPER_NT_F16 },
        HopperCase { name: "hopper_tt_f16", trans: TT, launch: HOPPER_TT_F16 },
    ]
}

/// The example-configuration kernels (128 × 256 × 64, 256 threads), bf16.
pub fn hopper_bf16() -> [HopperCase<bf16, bf16>; 4] {
    [
        HopperCase { name: "hopper_nn_bf16", trans: NN, launch: HOPPER_NN_BF16 },
        HopperCase { name: "hopper_tn_bf16", trans: TN, launch: HOPPER_TN_BF16 },
        HopperCase { name: "hopper_nt_bf16", trans: NT, launch: HOPPER_NT_BF16 },
        HopperCase { name: "hopper_tt_bf16", trans: TT, launch: HOPPER_TT_BF16 },
    ]
}

/// One kernel at 2, 3 and 4 stages (128 × 128 × 64, 256 threads), f16, `a · b`.
pub fn stages_f16() -> [HopperCase<f16, f16>; 3] {
    [
        HopperCase { name: "stages2_f16", trans: NN, launch: STAGES2_F16 },
        HopperCase { name: "stages3_f16", trans: NN, launch: STAGES3_F16 },
        HopperCase { name: "stages4_f16", trans: NN, launch: STAGES4_F16 },
    ]
}

/// The same at bf16, `aᵀ · b`.
pub fn stages_tn_bf16() -> [HopperCase<bf16, bf16>; 3] {
    [
        HopperCase { name: "stages2_tn_bf16", trans: TN, launch: STAGES2_TN_BF16 },
        HopperCase { name: "stages3_tn_bf16", trans: TN, launch: STAGES3_TN_BF16 },
        HopperCase { name: "stages4_tn_bf16", trans: TN, launch: STAGES4_TN_BF16 },
    ]
}

/// Runs every kernel of `cases` (the same GEMM at different stage counts)
/// on the same random inputs at `m × n × k`, checks the first against the
/// reference, and requires every other output bitwise identical to it.
pub fn check_stage_independence<T: Element, O: Element>(
    dev: &Device,
    m: usize,
    n: usize,
    k: usize,
    seed: u64,
    cases: &[HopperCase<T, O>],
) -> Res<()> {
    let first = &cases[0];
    let want = check_hopper(dev, m, n, k, first.trans, seed, first.launch)?;
    for case in &cases[1..] {
        // Same seed, same orientation: the same inputs as the first kernel's.
        let s = dev.stream()?;
        let mut rng = Rng::new(seed);
        let ([ar, ac], [br, bc]) = operand_shapes(m, n, k, case.trans);
        let (_, a) = random::<T>(&s, &mut rng, ar, ac, -1.0, 1.0)?;
        let (_, b) = random::<T>(&s, &mut rng, br, bc, -1.0, 1.0)?;
        let mut c = DeviceTensor::from_slice(&s, &vec![O::from_f64(f64::NAN); m * n], &[m, n])?;
        (case.launch)(&s, &a, &b, &mut c)?;
        let got = c.to_vec(&s)?;
        if let Some(i) = got.iter().zip(&want).position(|(x, y)| x.to_f64().to_bits() != y.to_f64().to_bits()) {
            return Err(format!(
                "{m}x{n}x{k}: {} and {} differ at ({}, {}): {:?} vs {:?} (outputs must not depend on the stage count)",
                first.name,
                case.name,
                i / n,
                i % n,
                want[i],
                got[i]
            )
            .into());
        }
    }
    Ok(())
}

/// The orientation [`check_gemm`] checks for a `ShapedGemm` layout.
fn trans_of(layout: examples::gemm::Layout) -> Trans {
    match layout {
        examples::gemm::Layout::Ab => NN,
        examples::gemm::Layout::Abt => NT,
    }
}

/// The shape dispatch (`examples::gemm::ShapedGemm`: small-M tiles,
/// split-K over an f32 workspace, padding of rows that are not 16-byte
/// multiples) at `m × n × k` in `layout` with `config` (the shape rule's
/// when `None`), against the f64 reference; `c` starts as NaN.
#[allow(clippy::too_many_arguments)]
pub fn check_shaped<T: examples::gemm::GemmElement>(
    dev: &Device,
    m: usize,
    n: usize,
    k: usize,
    layout: examples::gemm::Layout,
    config: Option<examples::gemm::Config>,
    tol: f64,
    seed: u64,
) -> Res<Vec<T>> {
    let trans = trans_of(layout);
    check_gemm::<T, T>(dev, m, n, k, trans, tol, seed, |s, a, b, c| {
        examples::gemm::ShapedGemm::<T>::new(s, m, n, k, layout, config)?.run(s, a, b, c)
    })
    .map_err(|e| format!("{layout:?} {config:?}: {e}").into())
}

/// [`check_shaped`] with `examples::gemm::ShapedGemm::unpadded`: rows that
/// are not 16-byte multiples read and written as they are.
#[allow(clippy::too_many_arguments)]
pub fn check_unpadded<T: examples::gemm::GemmElement>(
    dev: &Device,
    m: usize,
    n: usize,
    k: usize,
    layout: examples::gemm::Layout,
    config: examples::gemm::Config,
    tol: f64,
    seed: u64,
) -> Res<Vec<T>> {
    let trans = trans_of(layout);
    check_gemm::<T, T>(dev, m, n, k, trans, tol, seed, |s, a, b, c| {
        examples::gemm::ShapedGemm::<T>::unpadded(s, m, n, k, layout, config)?.run(s, a, b, c)
    })
    .map_err(|e| format!("{layout:?} {config:?} unpadded: {e}").into())
}

/// [`check_shaped`] through the autotuner: `ShapedGemm::tuned` with
/// `tuner` (which times the candidates the first time for this shape
/// bucket), then the chosen GEMM run again, against the f64 reference.
/// Returns the tuner's record of the choice.
#[allow(clippy::too_many_arguments)]
pub fn check_shaped_tuned<T: examples::gemm::GemmElement>(
    dev: &Device,
    tuner: &tile::tune::Tuner,
    m: usize,
    n: usize,
    k: usize,
    layout: examples::gemm::Layout,
    tol: f64,
    seed: u64,
) -> Res<tile::tune::Record> {
    let trans = trans_of(layout);
    let mut record = None;
    check_gemm::<T, T>(dev, m, n, k, trans, tol, seed, |s, a, b, c| {
        let (mut g, r) = examples::gemm::ShapedGemm::<T>::tuned(s, tuner, layout, a, b, c)?;
        // NaNs again: the check sees the chosen GEMM's product, not a candidate's.
        *c = DeviceTensor::from_slice(s, &vec![T::from_f64(f64::NAN); m * n], &[m, n])?;
        record = Some(r);
        g.run(s, a, b, c)
    })
    .map_err(|e| format!("{layout:?} tuned: {e}"))?;
    Ok(record.expect("the launch ran"))
}

//! GEMM test kernels, shared by `tests/gemm_interp.rs` (interpreter) and
//! `tests/gpu_gemm.rs` (GPU), each with a check against an independent f64
//! CPU reference: every operand orientation in f16 and bf16, both warp
//! policies' extremes, serial and pipelined K loops, and a FlashAttention
//! inner loop (S = Q·Kᵀ → online softmax → O += P·V) over K/V tiles.
//!
//! Tiles are smaller than the example's (64 × 64 with 128 threads) so that
//! the interpreter runs them quickly; the example kernels are checked too.
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

/// `c = a · b`, bf16, with an f32 output (the accumulator unrounded).
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32, STAGES = 3))]
pub fn gemm_nn_bf16(a: &Tensor<bf16, M, K>, b: &Tensor<bf16, K, N>, c: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    use_swizzle(4);
    let mut a_s = shared::<bf16, BM, BK>();
    let mut b_s = shared::<bf16, BK, BN>();
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
    check_gemm::<bf16, f32>(dev, m, n, k, NN, TOL_F32, seed, gemm_nn_bf16::launch)
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

/// The example's kernels (128 × 128 tiles, 256 threads, 3 stages).
pub fn example_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NN, TOL_F16, seed, examples::gemm::matmul::launch)
}

pub fn example_bf16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<bf16>> {
    check_gemm(dev, m, n, k, NN, TOL_BF16, seed, examples::gemm::matmul_bf16::launch)
}

pub fn example_bt_f16(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f16>> {
    check_gemm(dev, m, n, k, NT, TOL_F16, seed, examples::gemm::matmul_bt::launch)
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

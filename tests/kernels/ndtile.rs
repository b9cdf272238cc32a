//! Tiles of N-dimensional tensors that say which dims they span (issue 9,
//! item 1), shared by `tests/ndtile_interp.rs` (interpreter) and
//! `tests/gpu_ndtile.rs` (GPU), each with a check against an independent
//! CPU reference on awkward sizes, outputs poisoned (NaN) first:
//! `[b, s, h, d]` ⇄ `[b, h, s, d]` permutes (squeezed leading and middle
//! dims), strided column reads and writes (a squeezed innermost dim),
//! per-row results written into `[b, h, s]`, and FlashAttention forward
//! over 4-D tensors in both layouts, with its LSE.
#![allow(dead_code)]
use tile::prelude::*;

use crate::common::Rng;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `y[b, h, s, d] = 2·x[b, s, h, d] + 1`: a squeezed middle dim on the
/// read (`h`), a squeezed leading pair on the write; head dims `HD` off the
/// tile's 64 are masked.
#[tile_kernel(threads = 128, consts(BS = 32, D = 64))]
pub fn bshd_to_bhsd(x: &Tensor<f16, B, S, H, HD>, y: &mut Tensor<f16, B, H, S, HD>) {
    let (bs, bh, bb) = grid(cdiv(S, BS), H, B);
    let mut t = shared::<f16, BS, D>();
    let mut f = fragment::<f32, BS, D>();
    let mut g = fragment::<f16, BS, D>();
    copy(x.tile([bb, bs * BS.., bh, ..]), &mut t);
    copy(&t, &mut f);
    for (i, j) in parallel((BS, D)) {
        g[(i, j)] = (f[(i, j)] * 2.0 + 1.0) as f16;
    }
    copy(&g, y.tile([bb, bh, bs * BS.., ..]));
}

pub fn bshd_to_bhsd_check(dev: &Device, b: usize, s: usize, h: usize, hd: usize, seed: u64) -> Res<Vec<f16>> {
    let st = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x: Vec<f16> = rng.vec(b * s * h * hd, -4.0, 4.0).into_iter().map(f16::from_f32).collect();
    let dx = DeviceTensor::from_slice(&st, &x, &[b, s, h, hd])?;
    let mut dy = DeviceTensor::from_slice(&st, &vec![f16::NAN; b * h * s * hd], &[b, h, s, hd])?;
    bshd_to_bhsd::launch(&st, &dx, &mut dy)?;
    let y = dy.to_vec(&st)?;
    let mut reference = vec![0f64; y.len()];
    for (bi, si, hi, di) in itertools(b, s, h, hd) {
        let v = x[((bi * s + si) * h + hi) * hd + di].to_f64();
        // Head dims past the tile's 64 are never written (still NaN).
        reference[((bi * h + hi) * s + si) * hd + di] = if di < 64 { 2.0 * v + 1.0 } else { f64::NAN };
    }
    assert_close(&y, &reference, 1e-3)?;
    Ok(y)
}

fn itertools(a: usize, b: usize, c: usize, d: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    (0..a).flat_map(move |i| (0..b).flat_map(move |j| (0..c).flat_map(move |k| (0..d).map(move |l| (i, j, k, l)))))
}

/// Column `c` of `x: [M, N]`, `BM` rows at a time, as a strided tile
/// (`x.tile([r0.., c])`, a squeezed innermost dim): written contiguously
/// into row `c` of `xt: [N, M]` and strided back into column `c` of
/// `y: [M, N]`, and the column's sums into `sums[c]`.
#[tile_kernel(threads = 64, consts(BM = 128))]
pub fn columns(x: &Tensor<f32, M, N>, xt: &mut Tensor<f32, N, M>, y: &mut Tensor<f32, M, N>) {
    let (bm, c) = grid(cdiv(M, BM), N);
    let mut col = fragment::<f32, BM>();
    let mut sh = shared::<f32, BM>();
    copy(x.tile([bm * BM.., c]), &mut col);
    copy(&col, xt.tile([c, bm * BM..]));
    copy(x.tile([bm * BM.., c]), &mut sh);
    copy(&sh, y.tile([bm * BM.., c]));
}

pub fn columns_check(dev: &Device, m: usize, n: usize, seed: u64) -> Res<(Vec<f32>, Vec<f32>)> {
    let st = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * n, -1.0, 1.0);
    let dx = DeviceTensor::from_slice(&st, &x, &[m, n])?;
    let mut dxt = DeviceTensor::from_slice(&st, &vec![f32::NAN; m * n], &[n, m])?;
    let mut dy = DeviceTensor::from_slice(&st, &vec![f32::NAN; m * n], &[m, n])?;
    columns::launch(&st, &dx, &mut dxt, &mut dy)?;
    let (xt, y) = (dxt.to_vec(&st)?, dy.to_vec(&st)?);
    let xt_ref: Vec<f64> = (0..n * m).map(|k| x[(k % m) * n + k / m] as f64).collect();
    assert_close(&xt, &xt_ref, 0.0)?;
    let y_ref: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    assert_close(&y, &y_ref, 0.0)?;
    Ok((xt, y))
}

/// Row sums of `x: [b, h, s, d]` over `d`, written as `[BS]` tiles of
/// `out: [b, h, s]` (`out.tile([b, h, s0..])`); reads `x` through a 3-D
/// view `[b·h, s, d]` squeezed on its first dim.
#[tile_kernel(threads = 128, consts(BS = 64, D = 32))]
pub fn row_sums(x: &Tensor<f32, BH, S, D>, out: &mut Tensor<f32, B, H, S>) {
    let (bs, bh) = grid(cdiv(S, BS), BH);
    let mut t = fragment::<f32, BS, D>();
    let mut r = fragment::<f32, BS>();
    copy(x.tile([bh, bs * BS.., ..]), &mut t);
    reduce_sum(&t, &mut r, 1);
    copy(&r, out.tile([bh / H, bh % H, bs * BS..]));
}

pub fn row_sums_check(dev: &Device, b: usize, h: usize, s: usize, seed: u64) -> Res<Vec<f32>> {
    let d = 32;
    let st = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(b * h * s * d, -1.0, 1.0);
    let dx = DeviceTensor::from_slice(&st, &x, &[b * h, s, d])?;
    let mut dout = DeviceTensor::from_slice(&st, &vec![f32::NAN; b * h * s], &[b, h, s])?;
    row_sums::launch(&st, &dx, &mut dout)?;
    let out = dout.to_vec(&st)?;
    let reference: Vec<f64> = (0..b * h * s).map(|r| x[r * d..(r + 1) * d].iter().map(|&v| v as f64).sum()).collect();
    assert_close(&out, &reference, 1e-5)?;
    Ok(out)
}

/// FlashAttention forward (MHA, non-causal) over `[b, h, s, d]` tensors:
/// `BM` query rows and `BN` keys per block over `THREADS` threads, head
/// dim `D`; `lse[b, h, i]` = ln Σ_j exp(q_i·k_j / sqrt(d)). `scale` is
/// log2(e)/sqrt(D). Instances: `attention_bhsd` (head dim 64, 64 query
/// rows, 128 threads) and `attention_bhsd_d128` (head dim 128: 128 query
/// rows per block over two warpgroups, key blocks of 64: FA3's d128
/// shape, the one the warp-specialized loop's consumers split into two
/// 64-row halves).
#[tile_kernel(
    threads = THREADS,
    instances(attention_bhsd = (64, 64, 64, 128), attention_bhsd_d128 = (128, 64, 128, 256))
)]
pub fn attention_bhsd<const BM: usize, const BN: usize, const D: usize, const THREADS: usize>(
    q: &Tensor<f16, B, H, SQ, D>,
    k: &Tensor<f16, B, H, SK, D>,
    v: &Tensor<f16, B, H, SK, D>,
    o: &mut Tensor<f16, B, H, SQ, D>,
    lse: &mut Tensor<f32, B, H, SQ>,
    scale: f32,
) {
    let (bx, hy, bz) = grid(cdiv(SQ, BM), H, B);
    let mut q_s = shared::<f16, BM, D>();
    let mut k_s = shared::<f16, BN, D>();
    let mut v_s = shared::<f16, BN, D>();
    let mut s = fragment::<f32, BM, BN>();
    let mut p = fragment::<f16, BM, BN>();
    let mut acc = fragment::<f32, BM, D>();
    let mut m = fragment::<f32, BM>();
    let mut m_prev = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut row_sum = fragment::<f32, BM>();
    copy(q.tile([bz, hy, bx * BM.., ..]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in pipelined(cdiv(SK, BN), 2) {
        copy(k.tile([bz, hy, kb * BN.., ..]), &mut k_s);
        copy(v.tile([bz, hy, kb * BN.., ..]), &mut v_s);
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
    for i in parallel(BM) {
        m_prev[i] = (m[i] * scale + log2(l[i])) * 0.6931472;
    }
    copy(&acc, o.tile([bz, hy, bx * BM.., ..]));
    copy(&m_prev, lse.tile([bz, hy, bx * BM..]));
}

/// The same over `[b, s, h, d]` tensors: every tile squeezes `b` and `h`
/// around the sequence range (rows `h·d` elements apart). Instances:
/// `attention_bshd` (head dim 64, as [`attention_bhsd`]'s) and
/// `attention_bshd_d128` (head dim 128: 128 query rows and 128 keys per
/// block, 256 threads).
#[tile_kernel(
    threads = THREADS,
    instances(attention_bshd = (64, 64, 64, 128), attention_bshd_d128 = (128, 128, 128, 256))
)]
pub fn attention_bshd<const BM: usize, const BN: usize, const D: usize, const THREADS: usize>(
    q: &Tensor<f16, B, SQ, H, D>,
    k: &Tensor<f16, B, SK, H, D>,
    v: &Tensor<f16, B, SK, H, D>,
    o: &mut Tensor<f16, B, SQ, H, D>,
    lse: &mut Tensor<f32, B, H, SQ>,
    scale: f32,
) {
    let (bx, hy, bz) = grid(cdiv(SQ, BM), H, B);
    let mut q_s = shared::<f16, BM, D>();
    let mut k_s = shared::<f16, BN, D>();
    let mut v_s = shared::<f16, BN, D>();
    let mut s = fragment::<f32, BM, BN>();
    let mut p = fragment::<f16, BM, BN>();
    let mut acc = fragment::<f32, BM, D>();
    let mut m = fragment::<f32, BM>();
    let mut m_prev = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut row_sum = fragment::<f32, BM>();
    copy(q.tile([bz, bx * BM.., hy, ..]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in pipelined(cdiv(SK, BN), 2) {
        copy(k.tile([bz, kb * BN.., hy, ..]), &mut k_s);
        copy(v.tile([bz, kb * BN.., hy, ..]), &mut v_s);
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
    for i in parallel(BM) {
        m_prev[i] = (m[i] * scale + log2(l[i])) * 0.6931472;
    }
    copy(&acc, o.tile([bz, bx * BM.., hy, ..]));
    copy(&m_prev, lse.tile([bz, hy, bx * BM..]));
}

/// Which layout an attention check runs.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Layout {
    /// `[b, h, s, d]`
    Bhsd,
    /// `[b, s, h, d]`
    Bshd,
}

/// Element `(b, h, i, c)` of a `[b, h, s, d]` or `[b, s, h, d]` tensor.
#[allow(clippy::too_many_arguments)]
fn at(layout: Layout, h: usize, s: usize, d: usize, bi: usize, hi: usize, i: usize, c: usize) -> usize {
    match layout {
        Layout::Bhsd => ((bi * h + hi) * s + i) * d + c,
        Layout::Bshd => ((bi * s + i) * h + hi) * d + c,
    }
}

/// Attention in f64 per (batch, head): the output (in `layout`) and the
/// LSE (`[b, h, sq]`).
#[allow(clippy::too_many_arguments)]
pub fn attention_ref(
    layout: Layout,
    q: &[f16],
    k: &[f16],
    v: &[f16],
    b: usize,
    h: usize,
    sq: usize,
    sk: usize,
    d: usize,
) -> (Vec<f64>, Vec<f64>) {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; b * h * sq * d];
    let mut lse = vec![0.0; b * h * sq];
    let mut p = vec![0.0; sk];
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..sq {
                for (j, pj) in p.iter_mut().enumerate() {
                    *pj = (0..d)
                        .map(|c| {
                            q[at(layout, h, sq, d, bi, hi, i, c)].to_f64()
                                * k[at(layout, h, sk, d, bi, hi, j, c)].to_f64()
                        })
                        .sum::<f64>()
                        * scale;
                }
                let max = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for pj in p.iter_mut() {
                    *pj = (*pj - max).exp();
                    sum += *pj;
                }
                lse[(bi * h + hi) * sq + i] = max + sum.ln();
                for c in 0..d {
                    out[at(layout, h, sq, d, bi, hi, i, c)] =
                        (0..sk).map(|j| p[j] * v[at(layout, h, sk, d, bi, hi, j, c)].to_f64()).sum::<f64>() / sum;
                }
            }
        }
    }
    (out, lse)
}

pub type Attention4d = fn(
    &Stream,
    &DeviceTensor<f16>,
    &DeviceTensor<f16>,
    &DeviceTensor<f16>,
    &mut DeviceTensor<f16>,
    &mut DeviceTensor<f32>,
    f32,
) -> tile::Result<()>;

/// Runs the 4-D attention kernel of `layout` on random q, k, v against
/// [`attention_ref`]; returns the output and the LSE.
pub fn attention_check(
    dev: &Device,
    layout: Layout,
    b: usize,
    h: usize,
    sq: usize,
    sk: usize,
    seed: u64,
) -> Res<(Vec<f16>, Vec<f32>)> {
    let launch: Attention4d = match layout {
        Layout::Bhsd => attention_bhsd::launch::<64, 64, 64, 128>,
        Layout::Bshd => attention_bshd::launch::<64, 64, 64, 128>,
    };
    attention_check_with(dev, layout, launch, 64, b, h, sq, sk, seed)
}

/// The head-dim-128 instance of `layout` (`attention_bhsd_d128`,
/// `attention_bshd_d128`) checked as [`attention_check`] does.
pub fn attention_check_d128(
    dev: &Device,
    layout: Layout,
    b: usize,
    h: usize,
    sq: usize,
    sk: usize,
    seed: u64,
) -> Res<(Vec<f16>, Vec<f32>)> {
    let launch: Attention4d = match layout {
        Layout::Bhsd => attention_bhsd::launch::<128, 64, 128, 256>,
        Layout::Bshd => attention_bshd::launch::<128, 128, 128, 256>,
    };
    attention_check_with(dev, layout, launch, 128, b, h, sq, sk, seed)
}

/// [`attention_check`] of the kernel `launch` over head dim `d`.
#[allow(clippy::too_many_arguments)]
pub fn attention_check_with(
    dev: &Device,
    layout: Layout,
    launch: Attention4d,
    d: usize,
    b: usize,
    h: usize,
    sq: usize,
    sk: usize,
    seed: u64,
) -> Res<(Vec<f16>, Vec<f32>)> {
    let st = dev.stream()?;
    let mut rng = Rng::new(seed);
    let mut random = |s: usize, lo: f32, hi: f32| -> Vec<f16> {
        rng.vec(b * h * s * d, lo, hi).into_iter().map(f16::from_f32).collect()
    };
    let (q, k, v) = (random(sq, -2.0, 2.0), random(sk, -2.0, 2.0), random(sk, -1.0, 1.0));
    let shape = |s: usize| match layout {
        Layout::Bhsd => [b, h, s, d],
        Layout::Bshd => [b, s, h, d],
    };
    let dq = DeviceTensor::from_slice(&st, &q, &shape(sq))?;
    let dk = DeviceTensor::from_slice(&st, &k, &shape(sk))?;
    let dv = DeviceTensor::from_slice(&st, &v, &shape(sk))?;
    let mut dout = DeviceTensor::from_slice(&st, &vec![f16::NAN; b * h * sq * d], &shape(sq))?;
    let mut dlse = DeviceTensor::from_slice(&st, &vec![f32::NAN; b * h * sq], &[b, h, sq])?;
    let scale = std::f32::consts::LOG2_E / (d as f32).sqrt();
    launch(&st, &dq, &dk, &dv, &mut dout, &mut dlse, scale)?;
    let (out, lse) = (dout.to_vec(&st)?, dlse.to_vec(&st)?);
    let (out_ref, lse_ref) = attention_ref(layout, &q, &k, &v, b, h, sq, sk, d);
    assert_close(&out, &out_ref, 5e-3)?;
    assert_close(&lse, &lse_ref, 1e-4)?;
    Ok((out, lse))
}

/// `y[r, c] = Σ_{k < n} x[r, 64·k + c]` for `c < 64`: `n` (a scalar, so 0,
/// 1, 2 and any other trip count) pipelined 64-column tiles of `x` summed
/// from shared memory by plain loads (no gemm), `BM` rows per block.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64))]
pub fn pipelined_sum(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, BN>, n: i32) {
    let bm = grid(cdiv(M, BM));
    let mut x_s = shared::<f32, BM, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    let mut t = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for kb in pipelined(n, 2) {
        copy(x.tile([bm * BM.., kb * BN..]), &mut x_s);
        copy(&x_s, &mut t);
        for (i, j) in parallel((BM, BN)) {
            acc[(i, j)] = acc[(i, j)] + t[(i, j)];
        }
    }
    copy(&acc, y.tile([bm * BM.., 0..]));
}

/// Runs [`pipelined_sum`] over `n` tiles of a random `[m, 64·n + extra]`
/// matrix (columns past `64·n` are never read) against a CPU sum.
pub fn pipelined_sum_check(dev: &Device, m: usize, n: usize, extra: usize, seed: u64) -> Res<Vec<f32>> {
    let cols = 64 * n + extra;
    let st = dev.stream()?;
    let mut rng = Rng::new(seed);
    let x = rng.vec(m * cols, -1.0, 1.0);
    let dx = DeviceTensor::from_slice(&st, &x, &[m, cols])?;
    let mut dy = DeviceTensor::from_slice(&st, &vec![f32::NAN; m * 64], &[m, 64])?;
    pipelined_sum::launch(&st, &dx, &mut dy, n as i32)?;
    let y = dy.to_vec(&st)?;
    let reference: Vec<f64> =
        (0..m * 64).map(|i| (0..n).map(|k| x[(i / 64) * cols + 64 * k + i % 64] as f64).sum()).collect();
    assert_close(&y, &reference, 1e-5)?;
    Ok(y)
}

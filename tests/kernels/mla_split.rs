//! Kernels with MLA decode's gemm shapes (issue 13): 64 query rows shared
//! by two warpgroups (256 threads), both gemms `FullCol`, so that on sm_90a
//! each warpgroup computes its half of the columns with wgmma (the scores'
//! 32 columns, the output's 64 or 256), the row max and sum combine the two
//! halves through shared memory, and P goes through shared memory (register
//! A cannot feed a column split: each warpgroup needs all of P's rows).
//! Each with an f64 reference, run by the interpreter tests and the GPU
//! tests alike.
#![allow(dead_code)]
use tile::prelude::*;

use crate::common::Rng;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `o = softmax(q·kvᵀ / √DK) · v`, one block per 64 query rows, keys in
/// blocks of 64: MLA's decode loop with a stand-in head (`DK = 192` for
/// 576, `DV = 128` for 512) and V loaded apart from the keys.
#[tile_kernel(threads = 256, consts(DK = 192, DV = 128))]
pub fn mla_split(
    q: &Tensor<f16, SQ, DK>,
    kv: &Tensor<f16, SK, DK>,
    v: &Tensor<f16, SK, DV>,
    o: &mut Tensor<f16, SQ, DV>,
    scale: f32,
) {
    let bx = grid(cdiv(SQ, 64));
    let mut q_s = shared::<f16, 64, DK>();
    let mut kv_s = shared::<f16, 64, DK>();
    let mut v_s = shared::<f16, 64, DV>();
    let mut p_s = shared::<f16, 64, 64>();
    let mut s = fragment::<f32, 64, 64>();
    let mut p = fragment::<f16, 64, 64>();
    let mut acc = fragment::<f32, 64, DV>();
    let mut m = fragment::<f32, 64>();
    let mut m_prev = fragment::<f32, 64>();
    let mut l = fragment::<f32, 64>();
    let mut row_sum = fragment::<f32, 64>();
    copy(q.tile([bx * 64, 0]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in pipelined(cdiv(SK, 64), 2) {
        copy(kv.tile([kb * 64, 0]), &mut kv_s);
        copy(v.tile([kb * 64, 0]), &mut v_s);
        gemm(&q_s, &kv_s.t(), &mut s).clear().policy(FullCol);
        for (i, j) in parallel((64, 64)) {
            if kb * 64 + j >= SK {
                s[(i, j)] = f32::NEG_INFINITY;
            }
        }
        copy(&m, &mut m_prev);
        reduce_max(&s, &mut m, 1).keep();
        for (i, j) in parallel((64, 64)) {
            s[(i, j)] = exp2((s[(i, j)] - m[i]) * scale);
        }
        reduce_sum(&s, &mut row_sum, 1);
        for i in parallel(64) {
            l[i] = l[i] * exp2((m_prev[i] - m[i]) * scale) + row_sum[i];
        }
        for (i, j) in parallel((64, DV)) {
            acc[(i, j)] *= exp2((m_prev[i] - m[i]) * scale);
        }
        copy(&s, &mut p);
        copy(&p, &mut p_s);
        gemm(&p_s, &v_s, &mut acc).policy(FullCol);
    }
    for (i, j) in parallel((64, DV)) {
        acc[(i, j)] = acc[(i, j)] / l[i];
    }
    copy(&acc, o.tile([bx * 64, 0]));
}

/// `c = a · b` over tiles of 64 × 512 on 256 threads, `FullCol`: on sm_90a
/// each warpgroup owns a 64 × 256 half (one m64n256k16 per k16 step).
#[tile_kernel(threads = 256, consts(BN = 512, BK = 32))]
pub fn gemm_split_cols(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, 64));
    let mut a_s = shared::<f16, 64, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    let mut acc = fragment::<f32, 64, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), 2) {
        copy(a.tile([by * 64, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc).policy(FullCol);
    }
    copy(&acc, c.tile([by * 64, bx * BN]));
}

fn random(s: &Stream, rng: &mut Rng, rows: usize, cols: usize, lo: f32) -> Res<(Vec<f64>, DeviceTensor<f16>)> {
    let host: Vec<f16> = rng.vec(rows * cols, lo, -lo).into_iter().map(f16::from_f32).collect();
    let t = DeviceTensor::from_slice(s, &host, &[rows, cols])?;
    Ok((host.iter().map(|x| x.to_f64()).collect(), t))
}

/// f64 `softmax(q·kvᵀ / √dk) · v`: q `[sq, dk]`, kv `[sk, dk]`, v `[sk, dv]`.
pub fn mla_ref(q: &[f64], kv: &[f64], v: &[f64], sq: usize, sk: usize, dk: usize, dv: usize) -> Vec<f64> {
    let mut out = vec![0.0; sq * dv];
    for i in 0..sq {
        let s: Vec<f64> = (0..sk)
            .map(|j| (0..dk).map(|c| q[i * dk + c] * kv[j * dk + c]).sum::<f64>() / (dk as f64).sqrt())
            .collect();
        let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = p.iter().sum();
        for c in 0..dv {
            out[i * dv + c] = (0..sk).map(|j| p[j] * v[j * dv + c]).sum::<f64>() / sum;
        }
    }
    out
}

/// Runs [`mla_split`] on random inputs against [`mla_ref`]; its output.
pub fn check_mla_split(dev: &Device, sq: usize, sk: usize, seed: u64) -> Res<Vec<f16>> {
    let (dk, dv) = (192, 128);
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let (qh, q) = random(&s, &mut rng, sq, dk, -1.0)?;
    let (kh, kv) = random(&s, &mut rng, sk, dk, -1.0)?;
    let (vh, v) = random(&s, &mut rng, sk, dv, -1.0)?;
    let mut o = DeviceTensor::from_slice(&s, &vec![f16::from_f32(f32::NAN); sq * dv], &[sq, dv])?;
    let scale = (std::f64::consts::LOG2_E / (dk as f64).sqrt()) as f32;
    mla_split::launch(&s, &q, &kv, &v, &mut o, scale)?;
    let got = o.to_vec(&s)?;
    assert_close(&got, &mla_ref(&qh, &kh, &vh, sq, sk, dk, dv), 5e-3)
        .map_err(|e| format!("mla_split sq={sq} sk={sk}: {e}"))?;
    Ok(got)
}

/// Runs [`gemm_split_cols`] on random `[m, k] · [k, n]` against the f64 product; its output.
pub fn check_gemm_split_cols(dev: &Device, m: usize, n: usize, k: usize, seed: u64) -> Res<Vec<f32>> {
    let s = dev.stream()?;
    let mut rng = Rng::new(seed);
    let (ah, a) = random(&s, &mut rng, m, k, -1.0)?;
    let (bh, b) = random(&s, &mut rng, k, n, -1.0)?;
    let mut c = DeviceTensor::from_slice(&s, &vec![f32::NAN; m * n], &[m, n])?;
    gemm_split_cols::launch(&s, &a, &b, &mut c)?;
    let got = c.to_vec(&s)?;
    let want: Vec<f64> =
        (0..m * n).map(|i| (0..k).map(|p| ah[(i / n) * k + p] * bh[p * n + i % n]).sum::<f64>()).collect();
    assert_close(&got, &want, 1e-3).map_err(|e| format!("gemm_split_cols {m}x{n}x{k}: {e}"))?;
    Ok(got)
}

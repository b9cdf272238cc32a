//! Kernels with sub-views of shared buffers (`s.view([..])`), shared by
//! `tests/views_interp.rs` (interpreter) and `tests/gpu_views.rs` (GPU), each
//! checked against an f64 CPU reference: TileLang's MLA decode step with one
//! `[64, D + 64]` KV buffer per stage read as K (`k_nope` and `k_pe`) and as
//! V (`k_nope`), Q one buffer with the same two views; `FullCol` gemms over
//! 256 threads (the warps split the key columns: cross-warp reductions).
#![allow(dead_code)]
use tile::prelude::*;

use crate::common::Rng;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `out[b, h] = softmax(q[b, h] · kv[b]ᵀ) · kv[b, :, ..D]` (base-2 softmax of
/// `scores · scale`), 64 heads per block, key blocks of 64 in 2 stages.
#[tile_kernel(threads = 256, consts(BH = 64, BN = 64, D = 128, DK = 192))]
pub fn mla_views(q: &Tensor<f16, B, H, DK>, kv: &Tensor<f16, B, S, DK>, out: &mut Tensor<f32, B, H, D>, scale: f32) {
    let (hx, bz) = grid(cdiv(H, BH), B);
    let mut q_s = shared::<f16, BH, DK>();
    let q_nope = q_s.view([.., ..D]);
    let q_pe = q_s.view([.., D..]);
    let mut kv_s = shared::<f16, BN, DK>();
    let k_nope = kv_s.view([.., ..D]);
    let k_pe = kv_s.view([.., D..]);
    let mut p_s = shared::<f16, BH, BN>();
    let mut s = fragment::<f32, BH, BN>();
    let mut o = fragment::<f32, BH, D>();
    let mut m = fragment::<f32, BH>();
    let mut m_prev = fragment::<f32, BH>();
    let mut l = fragment::<f32, BH>();
    let mut row_sum = fragment::<f32, BH>();
    copy(q.tile([bz, hx * BH.., 0..]), &mut q_s);
    clear(&mut o);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in pipelined(cdiv(S, BN), 2) {
        copy(kv.tile([bz, kb * BN.., 0..]), &mut kv_s);
        gemm(&q_nope, &k_nope.t(), &mut s).clear().policy(FullCol);
        gemm(&q_pe, &k_pe.t(), &mut s).policy(FullCol);
        for (i, j) in parallel((BH, BN)) {
            if kb * BN + j >= S {
                s[(i, j)] = f32::NEG_INFINITY;
            }
        }
        copy(&m, &mut m_prev);
        reduce_max(&s, &mut m, 1).keep();
        for (i, j) in parallel((BH, BN)) {
            s[(i, j)] = exp2(s[(i, j)] * scale - m[i] * scale);
        }
        reduce_sum(&s, &mut row_sum, 1);
        for i in parallel(BH) {
            l[i] = l[i] * exp2((m_prev[i] - m[i]) * scale) + row_sum[i];
        }
        for (i, j) in parallel((BH, D)) {
            o[(i, j)] *= exp2((m_prev[i] - m[i]) * scale);
        }
        copy(&s, &mut p_s);
        gemm(&p_s, &k_nope, &mut o).policy(FullCol);
    }
    for (i, j) in parallel((BH, D)) {
        o[(i, j)] = o[(i, j)] / l[i];
    }
    copy(&o, out.tile([bz, hx * BH.., 0..]));
}

/// Runs [`mla_views`] on random q, kv of `b` batches, `h` heads, `s` keys
/// against the f64 reference (relative L2 within `5e-3`: P is rounded to
/// f16 before P·V). The output starts as NaN.
pub fn check_mla_views(dev: &Device, b: usize, h: usize, s: usize, seed: u64) -> Res<()> {
    let (d, dk) = (128usize, 192usize);
    let st = dev.stream()?;
    let mut rng = Rng::new(seed);
    let qh: Vec<f16> = rng.vec(b * h * dk, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let kvh: Vec<f16> = rng.vec(b * s * dk, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let q = DeviceTensor::from_slice(&st, &qh, &[b, h, dk])?;
    let kv = DeviceTensor::from_slice(&st, &kvh, &[b, s, dk])?;
    let mut out = DeviceTensor::from_slice(&st, &vec![f32::NAN; b * h * d], &[b, h, d])?;
    let scale = (std::f64::consts::LOG2_E / (dk as f64).sqrt()) as f32;
    mla_views::launch(&st, &q, &kv, &mut out, scale)?;
    let got = out.to_vec(&st)?;
    let mut want = vec![0.0f64; b * h * d];
    for bi in 0..b {
        for hi in 0..h {
            let qr = &qh[(bi * h + hi) * dk..][..dk];
            let sc: Vec<f64> = (0..s)
                .map(|j| (0..dk).map(|c| qr[c].to_f64() * kvh[(bi * s + j) * dk + c].to_f64()).sum::<f64>())
                .collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|x| ((x - mx) * scale as f64).exp2()).collect();
            let l: f64 = w.iter().sum();
            for c in 0..d {
                want[(bi * h + hi) * d + c] =
                    (0..s).map(|j| w[j] * kvh[(bi * s + j) * dk + c].to_f64()).sum::<f64>() / l;
            }
        }
    }
    assert_close(&got, &want, 5e-3).map_err(|e| format!("mla_views b={b} h={h} s={s}: {e}"))?;
    Ok(())
}

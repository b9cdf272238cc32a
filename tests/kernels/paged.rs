//! Paged attention (issue 13, item 4): the keys and values of each batch
//! live in 64-row pages of a cache `[pages, 64, d]`, in the order a block
//! table `i32 [b, max_blocks]` gives, with a per-batch length `i32 [b]`.
//! The tile origin of the K and V copies is read from the table
//! (`let page = block_table[(bz, kb)]`), so the pipelined loop prefetches
//! each page by reading the table `stages − 1` iterations ahead. Shared by
//! `tests/paged_interp.rs` (interpreter) and `tests/gpu_paged.rs` (GPU),
//! each against an independent f64 CPU reference, outputs poisoned (NaN)
//! first; the Tile IR of [`paged_attention`] is `tile_testkit::PAGED_ATTENTION`
//! and that of its instance `paged_attention_2wg` (two consumer warpgroups, 128 query
//! rows per block: the warp-specialized loop's default case on sm_90a)
//! `tile_testkit::paged_attention_text(128, 256)` (the compiler's simulator
//! and ptxas tests).
#![allow(dead_code)]
use tile::prelude::*;

use crate::common::Rng;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Attention of `q [b, sq, 64]` over the first `seqlens[b]` keys of batch
/// `b`, key `t` at row `t % 64` of page `block_table[(b, t / 64)]` of
/// `k_cache`/`v_cache`; an empty sequence gives zeros. `scale` is
/// log2(e)/sqrt(D). K is read at the top of the body and V just before the
/// P·V gemm (each waited for where it is first used). `BM` query rows per
/// block over `THREADS` threads; instances: `paged_attention` (64 rows, one
/// warpgroup) and `paged_attention_2wg` (128 rows, two warpgroups).
#[tile_kernel(
    threads = THREADS,
    consts(BN = 64, D = 64),
    instances(paged_attention = (64, 128), paged_attention_2wg = (128, 256))
)]
pub fn paged_attention<const BM: usize, const THREADS: usize>(
    q: &Tensor<f16, B, SQ, D>,
    k_cache: &Tensor<f16, P, BN, D>,
    v_cache: &Tensor<f16, P, BN, D>,
    block_table: &Tensor<i32, B, MAXB>,
    seqlens: &Tensor<i32, B>,
    o: &mut Tensor<f16, B, SQ, D>,
    scale: f32,
) {
    let (bx, bz) = grid(cdiv(SQ, BM), B);
    let seqlen = seqlens[bz];
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
    copy(q.tile([bz, bx * BM.., ..]), &mut q_s);
    clear(&mut acc);
    clear(&mut l);
    fill(&mut m, f32::NEG_INFINITY);
    for kb in pipelined(cdiv(seqlen, BN), 2) {
        let page = block_table[(bz, kb)];
        copy(k_cache.tile([page, .., ..]), &mut k_s);
        gemm(&q_s, &k_s.t(), &mut s).clear().policy(FullRow);
        for (i, j) in parallel((BM, BN)) {
            if kb * BN + j >= seqlen {
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
        copy(v_cache.tile([page, .., ..]), &mut v_s);
        gemm(&p, &v_s, &mut acc).policy(FullRow);
    }
    for (i, j) in parallel((BM, D)) {
        acc[(i, j)] = if l[i] > 0.0 { acc[(i, j)] / l[i] } else { 0.0 };
    }
    copy(&acc, o.tile([bz, bx * BM.., ..]));
}

/// A paged-attention problem: `b` batches of `sq` query rows, batch `i`
/// with `seqlens[i]` keys spread over pages of a shared cache in a shuffled
/// order (every page a batch uses is its own; the table's unused entries
/// point past the cache, which is never read).
pub struct Paged {
    pub b: usize,
    pub sq: usize,
    pub seqlens: Vec<usize>,
    pub pages: usize,
    pub max_blocks: usize,
    pub q: Vec<f16>,
    pub k: Vec<f16>,
    pub v: Vec<f16>,
    pub table: Vec<i32>,
}

const D: usize = 64;
const PAGE: usize = 64;

impl Paged {
    pub fn new(sq: usize, seqlens: &[usize], seed: u64) -> Paged {
        let b = seqlens.len();
        let mut rng = Rng::new(seed);
        let blocks: Vec<usize> = seqlens.iter().map(|s| s.div_ceil(PAGE)).collect();
        let max_blocks = blocks.iter().copied().max().unwrap_or(0).max(1) + 1;
        // One more page than needed, never referenced: a read through a wrong
        // table entry would show.
        let pages = blocks.iter().sum::<usize>() + 1;
        let mut order: Vec<usize> = (0..pages).collect();
        for i in (1..pages).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        let mut table = vec![pages as i32 + 7; b * max_blocks];
        let mut next = 0;
        for (bi, &n) in blocks.iter().enumerate() {
            for kb in 0..n {
                table[bi * max_blocks + kb] = order[next] as i32;
                next += 1;
            }
        }
        let mut random =
            |n: usize, lo: f32, hi: f32| -> Vec<f16> { rng.vec(n, lo, hi).into_iter().map(f16::from_f32).collect() };
        let q = random(b * sq * D, -2.0, 2.0);
        let k = random(pages * PAGE * D, -2.0, 2.0);
        let v = random(pages * PAGE * D, -1.0, 1.0);
        Paged { b, sq, seqlens: seqlens.to_vec(), pages, max_blocks, q, k, v, table }
    }

    /// The f64 reference of the output `[b, sq, 64]`.
    pub fn reference(&self) -> Vec<f64> {
        let scale = 1.0 / (D as f64).sqrt();
        let mut out = vec![0.0; self.b * self.sq * D];
        for bi in 0..self.b {
            let n = self.seqlens[bi];
            let row = |t: usize| (self.table[bi * self.max_blocks + t / PAGE] as usize * PAGE + t % PAGE) * D;
            for i in 0..self.sq {
                let qi = &self.q[(bi * self.sq + i) * D..][..D];
                let mut p: Vec<f64> = (0..n)
                    .map(|t| (0..D).map(|c| qi[c].to_f64() * self.k[row(t) + c].to_f64()).sum::<f64>() * scale)
                    .collect();
                let max = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for x in p.iter_mut() {
                    *x = (*x - max).exp();
                    sum += *x;
                }
                for c in 0..D {
                    let o = if n == 0 {
                        0.0
                    } else {
                        (0..n).map(|t| p[t] * self.v[row(t) + c].to_f64()).sum::<f64>() / sum
                    };
                    out[(bi * self.sq + i) * D + c] = o;
                }
            }
        }
        out
    }

    /// Runs [`paged_attention`] (`two_warpgroups`: its instance `paged_attention_2wg`,
    /// 128 query rows per block) on `dev`; the output `[b, sq, 64]`.
    pub fn run(&self, dev: &Device, two_warpgroups: bool) -> Res<Vec<f16>> {
        let st = dev.stream()?;
        let dq = DeviceTensor::from_slice(&st, &self.q, &[self.b, self.sq, D])?;
        let dk = DeviceTensor::from_slice(&st, &self.k, &[self.pages, PAGE, D])?;
        let dv = DeviceTensor::from_slice(&st, &self.v, &[self.pages, PAGE, D])?;
        let dt = DeviceTensor::from_slice(&st, &self.table, &[self.b, self.max_blocks])?;
        let lens: Vec<i32> = self.seqlens.iter().map(|&s| s as i32).collect();
        let dl = DeviceTensor::from_slice(&st, &lens, &[self.b])?;
        let mut dout = DeviceTensor::from_slice(&st, &vec![f16::NAN; self.b * self.sq * D], &[self.b, self.sq, D])?;
        let scale = std::f32::consts::LOG2_E / (D as f32).sqrt();
        if two_warpgroups {
            paged_attention::launch::<128, 256>(&st, &dq, &dk, &dv, &dt, &dl, &mut dout, scale)?;
        } else {
            paged_attention::launch::<64, 128>(&st, &dq, &dk, &dv, &dt, &dl, &mut dout, scale)?;
        }
        Ok(dout.to_vec(&st)?)
    }
}

/// Runs [`paged_attention`] (either instance) on `dev` for `sq`
/// query rows per batch and the batches' lengths `seqlens`, against
/// [`Paged::reference`]; the output.
pub fn paged_attention_check(
    dev: &Device,
    two_warpgroups: bool,
    sq: usize,
    seqlens: &[usize],
    seed: u64,
) -> Res<Vec<f16>> {
    let pb = Paged::new(sq, seqlens, seed);
    let out = pb.run(dev, two_warpgroups)?;
    assert_close(&out, &pb.reference(), 5e-3)?;
    Ok(out)
}

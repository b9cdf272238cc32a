//! MLA decode's paged split kernel written in FlashMLA's order (issue 13),
//! for the compiler's tests: the warp-specialized loop then leaves each
//! warpgroup's P·V from registers (a `Warpgroup(w)` gemm whose A is a
//! fragment) in flight across the warpgroups' hand-overs, and issues
//! warpgroup 1's second P·V into the same accumulator behind its first
//! (`warp_specialized_loop/lower.rs`, deferred waits). Checked on the
//! simulator against the f64 reference (`tests/mla_decode_sim.rs`). Not
//! the seesaw `examples/kernels/mla_decode.rs` launches: timed on an H100
//! (BENCHMARKS.md, session 39) at 0.78x of it, its rings' stages refilled
//! only after the iteration's last P·V (both blocks' K read to the end).
#![allow(dead_code)]
use tile::prelude::*;

/// MLA's paged split kernel in FlashMLA's order (same parameters and
/// results as `mla_split_seesaw`): each warpgroup holds its own half of O
/// (`o0`, columns 0..256, on warpgroup 0; `o1`, 256..512, on warpgroup 1),
/// multiplies its own block's P from registers with its half of V (a view
/// of the block's K stage), then the other block's P from shared memory:
/// warpgroup 0 `O_L = (O_L·α₀ + P₀·V₀L)·α₁ + P₁·V₁L`, warpgroup 1
/// `O_R = O_R·α₀α₁ + P₁·V₁R + (P₀α₁)·V₀R`, the two P·V of warpgroup 1
/// issued back to back into `o1`. P₀α₁ goes into block 0's rope box, P₁
/// into block 1's (the scores are done with them).
#[tile_kernel(threads = THREADS, archs = "sm_90a", instances((f16, 256), (bf16, 256)))]
pub fn mla_split_halves<T: Float16, const THREADS: usize>(
    q: &Tensor<T, B, RQ, 576>,
    cache: &Tensor<T, NBLK, 64, 1, 576>,
    block_table: &Tensor<i32, B, MAXB>,
    seqlens: &Tensor<i32, B>,
    chunks: &Tensor<i32, NC, 4>,
    order: &Tensor<i32, NC>,
    chunk_begin: &Tensor<i32, B1>,
    o_part: &mut Tensor<f32, PROWS, 512>,
    lse_part: &mut Tensor<f32, PROWS>,
    out: &mut Tensor<f32, B, RQ, 512>,
    lse: &mut Tensor<f32, B, H, SQ>,
    scale: f32,
) {
    let (rb, cy) = grid(cdiv(SQ * H, 64), NC);
    let c = order[cy];
    let bi = chunks[(c, 0)];
    let kb0 = chunks[(c, 1)];
    let kb1 = chunks[(c, 2)];
    let seqlen = seqlens[bi];
    let row0 = if bi >= 0 { c * (cdiv(SQ * H, 64) * 64) + rb * 64 } else { PROWS };
    let mut q_s = shared::<T, 64, 512>();
    let mut qpe_s = shared::<T, 64, 64>();
    let mut k0 = shared::<T, 64, 512>();
    let mut kpe0 = shared::<T, 64, 64>();
    let mut k1 = shared::<T, 64, 512>();
    let mut kpe1 = shared::<T, 64, 64>();
    let v0l = k0.view([.., ..256]);
    let v0r = k0.view([.., 256..]);
    let v1l = k1.view([.., ..256]);
    let v1r = k1.view([.., 256..]);
    let mut m0_s = shared::<f32, 64>();
    let mut m1_s = shared::<f32, 64>();
    let mut alpha0_s = shared::<f32, 64>();
    let mut alpha1_s = shared::<f32, 64>();
    let mut s0 = fragment::<f32, 64, 64>();
    let mut p0 = fragment::<T, 64, 64>();
    let mut l0 = fragment::<f32, 64>();
    let mut mb0 = fragment::<f32, 64>();
    let mut s1 = fragment::<f32, 64, 64>();
    let mut p1 = fragment::<T, 64, 64>();
    let mut l1 = fragment::<f32, 64>();
    let mut mb1 = fragment::<f32, 64>();
    let mut ms1 = fragment::<f32, 64>();
    let mut o0 = fragment::<f32, 64, 256>();
    let mut o1 = fragment::<f32, 64, 256>();
    copy(q.tile([bi, rb * 64.., 0..]), &mut q_s);
    copy(q.tile([bi, rb * 64.., 512..]), &mut qpe_s);
    clear(&mut o0);
    clear(&mut o1);
    clear(&mut l0);
    clear(&mut l1);
    for i in parallel(64) {
        m1_s[i] = f32::NEG_INFINITY;
        alpha1_s[i] = 1.0;
    }
    for kp in pipelined(cdiv(kb1 - kb0, 2), 1) {
        let blk0 = kb0 + 2 * kp;
        let blk1 = (blk0 + 1).min(kb1 - 1);
        let page0 = block_table[(bi, blk0)];
        let page1 = block_table[(bi, blk1)];
        copy(cache.tile([page0, 0.., 0, 0..]), &mut k0).evict_first();
        copy(cache.tile([page0, 0.., 0, 512..]), &mut kpe0).evict_first();
        copy(cache.tile([page1, 0.., 0, 0..]), &mut k1).evict_first();
        copy(cache.tile([page1, 0.., 0, 512..]), &mut kpe1).evict_first();
        gemm(&q_s, &k0.t(), &mut s0).clear().policy(Warpgroup(0));
        gemm(&qpe_s, &kpe0.t(), &mut s0).policy(Warpgroup(0));
        barrier();
        if (blk0 + 1) * 64 > seqlen - SQ + 1 {
            for (i, j) in parallel((64, 64)) {
                if blk0 * 64 + j > seqlen - SQ + (rb * 64 + i) / H {
                    s0[(i, j)] = f32::NEG_INFINITY;
                }
            }
        }
        reduce_max(&s0, &mut mb0, 1);
        gemm(&q_s, &k1.t(), &mut s1).clear().policy(Warpgroup(1));
        gemm(&qpe_s, &kpe1.t(), &mut s1).policy(Warpgroup(1));
        if (blk1 + 1) * 64 > seqlen - SQ + 1 || blk0 + 1 >= kb1 {
            for (i, j) in parallel((64, 64)) {
                if blk0 + 1 >= kb1 || blk1 * 64 + j > seqlen - SQ + (rb * 64 + i) / H {
                    s1[(i, j)] = f32::NEG_INFINITY;
                }
            }
        }
        reduce_max(&s1, &mut mb1, 1);
        // Block 0's softmax on warpgroup 0 (from block 1's maximum of the last iteration),
        // O's left half rescaled, P0·V0L from registers.
        let mut m = fragment::<f32, 64>();
        let mut a = fragment::<f32, 64>();
        let mut f = fragment::<f32, 64>();
        let mut ms = fragment::<f32, 64>();
        let mut r = fragment::<f32, 64>();
        for i in parallel(64) {
            m[i] = m1_s[i];
            a[i] = 1.0;
            if (mb0[i] - m[i]) * scale > 8.0 {
                a[i] = exp2((m[i] - mb0[i]) * scale);
                m[i] = mb0[i];
            }
            f[i] = a[i] * alpha1_s[i];
            ms[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] * scale };
            alpha0_s[i] = a[i];
            m0_s[i] = m[i];
        }
        for (i, j) in parallel((64, 64)) {
            s0[(i, j)] = exp2(s0[(i, j)] * scale - ms[i]);
        }
        reduce_sum(&s0, &mut r, 1);
        for i in parallel(64) {
            l0[i] = l0[i] * f[i] + r[i];
        }
        copy(&s0, &mut p0);
        if (blk0 + 1) * 64 > seqlen {
            for (j, k) in parallel((64, 512)) {
                if blk0 * 64 + j >= seqlen {
                    k0[(j, k)] = 0.0 as T;
                }
            }
        }
        for (i, j) in parallel((64, 256)) {
            if a[i] != 1.0 {
                o0[(i, j)] = o0[(i, j)] * a[i];
            }
        }
        gemm(&p0, &v0l, &mut o0).policy(Warpgroup(0));
        // Block 1's softmax on warpgroup 1, O's right half rescaled by both moves, P1·V1R from
        // registers; P1 into block 1's rope box for warpgroup 0.
        let mut m = fragment::<f32, 64>();
        let mut a = fragment::<f32, 64>();
        let mut f = fragment::<f32, 64>();
        let mut ms = fragment::<f32, 64>();
        let mut r = fragment::<f32, 64>();
        for i in parallel(64) {
            m[i] = m0_s[i];
            a[i] = 1.0;
            if (mb1[i] - m[i]) * scale > 8.0 {
                a[i] = exp2((m[i] - mb1[i]) * scale);
                m[i] = mb1[i];
            }
            f[i] = a[i] * alpha0_s[i];
            ms[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] * scale };
            alpha1_s[i] = a[i];
            m1_s[i] = m[i];
        }
        // Warpgroup 0: P0 rescaled by block 1's move into block 0's rope box, for warpgroup 1.
        for (i, j) in parallel((64, 64)) {
            kpe0[(i, j)] = (s0[(i, j)] * alpha1_s[i]) as T;
        }
        for (i, j) in parallel((64, 64)) {
            s1[(i, j)] = exp2(s1[(i, j)] * scale - ms[i]);
        }
        reduce_sum(&s1, &mut r, 1);
        for i in parallel(64) {
            l1[i] = l1[i] * f[i] + r[i];
        }
        copy(&s1, &mut p1);
        copy(&s1, &mut kpe1);
        if (blk1 + 1) * 64 > seqlen || blk0 + 1 >= kb1 {
            for (j, k) in parallel((64, 512)) {
                if blk0 + 1 >= kb1 || blk1 * 64 + j >= seqlen {
                    k1[(j, k)] = 0.0 as T;
                }
            }
        }
        for (i, j) in parallel((64, 256)) {
            if f[i] != 1.0 {
                o1[(i, j)] = o1[(i, j)] * f[i];
            }
        }
        gemm(&p1, &v1r, &mut o1).policy(Warpgroup(1));
        gemm(&kpe0, &v0r, &mut o1).policy(Warpgroup(1));
        // Warpgroup 0: O's left half rescaled by block 1's move, P1·V1L.
        for (i, j) in parallel((64, 256)) {
            if alpha1_s[i] != 1.0 {
                o0[(i, j)] = o0[(i, j)] * alpha1_s[i];
            }
        }
        gemm(&kpe1, &v1l, &mut o0).policy(Warpgroup(0));
    }
    for i in parallel(64) {
        alpha0_s[i] = l0[i] * alpha1_s[i];
    }
    for i in parallel(64) {
        mb1[i] = l1[i] + alpha0_s[i];
        ms1[i] = if mb1[i] == 0.0 { f32::NEG_INFINITY } else { (m1_s[i] * scale + log2(mb1[i])) * 0.6931472 };
        alpha1_s[i] = if mb1[i] == 0.0 { 0.0 } else { 1.0 / mb1[i] };
    }
    for (i, j) in parallel((64, 256)) {
        o0[(i, j)] = o0[(i, j)] * alpha1_s[i];
    }
    for (i, j) in parallel((64, 256)) {
        o1[(i, j)] = o1[(i, j)] * alpha1_s[i];
    }
    let whole = bi >= 0 && chunk_begin[bi.max(0) + 1] - chunk_begin[bi.max(0)] == 1;
    if whole {
        copy(&o0, out.tile([bi, rb * 64.., 0..]));
        copy(&o1, out.tile([bi, rb * 64.., 256..]));
        for i in parallel(64) {
            lse[(bi, (rb * 64 + i) % H, (rb * 64 + i) / H)] = ms1[i];
        }
    } else {
        copy(&o0, o_part.tile([row0.., 0..]));
        copy(&o1, o_part.tile([row0.., 256..]));
        copy(&ms1, lse_part.tile([row0..]));
    }
}

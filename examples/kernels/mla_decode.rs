//! DeepSeek MLA decode (issue 13, items 5–7): the split-KV kernel (paged and
//! contiguous KV), the device scheduler and the combine kernel, with the host
//! API a serving engine calls, shared by `examples/mla_decode.rs` (check,
//! benchmark, dumps) and the tests (`tests/mla_decode_interp.rs`,
//! `tests/gpu_mla_decode.rs`).
//!
//! Shapes (FlashMLA's): q `[b, s_q, h_q, 576]` (512 "nope" columns, then
//! 64 rope columns), one KV head whose rows are 576 wide: K is the whole row,
//! V its first 512 columns; paged cache `[num_blocks, 64, 1, 576]` with
//! `block_table i32 [b, max_blocks]` (page `block_table[b, j]` holds keys
//! `64·j ..  64·j + 63` of batch `b`, pages in any order) or contiguous
//! `kv [b, s_k, 1, 576]`; `cache_seqlens i32 [b]` (0 allowed). For each
//! batch `b`, new token `t < s_q` and head `h`:
//!
//! `out[b, t, h] = Σ_j softmax_j(scale · q[b, t, h]·k_j) v_j` over the keys
//! `j ≤ seqlen_b − s_q + t` (causal within the new tokens), and
//! `lse[b, h, t] = ln Σ_j exp(scale · q·k_j)`, f32 both; a row that sees no
//! key (seqlen 0, or seqlen < s_q for the first tokens) gets `out = 0` and
//! `lse = −∞`.
//!
//! The work: the query rows of a batch are its `s_q·h_q` (token, head)
//! pairs, row `r = t·h_q + h`, in blocks of 64 rows (as FlashMLA packs
//! them, so that h_q 16 with s_q 2 reads the KV once); the keys are in
//! blocks of 64 (one page). [`Metadata`] cuts the (batch, key block) work
//! into chunks (the split-KV scheduler, FlashMLA's `get_mla_metadata`); the
//! split kernel runs one thread block per (row block, chunk) and writes each
//! chunk's normalized partial O and its LSE into the [`Workspace`]; the
//! combine kernel merges the chunks of each batch by their LSE into `out` and
//! `lse`. A batch in one chunk (no split) gets `out` and `lse` from the split
//! kernel directly (as FlashMLA's), which the combine then leaves alone: no
//! partial written and read back. Three launches on one stream, no host
//! synchronization.
#![allow(dead_code)]
use tile::prelude::*;
use tile::Reshaped;

/// Query rows per block, keys per block (= the page size), the row width
/// of q and the KV rows, and V's width.
pub const BLOCK_H: usize = 64;
pub const PAGE: usize = 64;
pub const D: usize = 576;
pub const DV: usize = 512;
/// The scheduler's fixed cost of a chunk, in key blocks (FlashMLA's).
pub const CHUNK_OVERHEAD: i32 = 5;

/// Declares a split kernel `$name` whose KV parameters are `$kv` and whose
/// loads of key block `blk` of batch `bi` into `kv_s` (columns 0..512) and
/// `kpe_s` (512..576) are `$load`: one source for the paged and the
/// contiguous cache. The KV is read once: `.evict_first()`. On sm_90a the
/// warp-specialized loop's producer loads both as TMA into rings of
/// `STAGES`, `kv_s` included although the body zeroes its rows past the
/// sequence (in the stage, before P·V reads it).
macro_rules! mla_split {
    ($name:ident, ($($kv:tt)*), ($($load:tt)*), $($attr:tt)*) => {
        /// The MLA split kernel (see the module docs): block `(rb, cy)` runs
        /// chunk `c = order[cy]`: for row block `rb`
        /// of batch `chunks[c, 0]`, key blocks `chunks[c, 1] .. chunks[c, 2]`,
        /// writes the normalized partial O to rows `c·RP + r` of `o_part`
        /// and the partial LSE (natural log, −∞ for a row that saw no key)
        /// to `lse_part`, `RP` the rows of a batch rounded up to 64; or,
        /// when `c` is its batch's only chunk (`chunk_begin`), the batch's
        /// rows of `out` (`[b, s_q·h_q, 512]`: the caller's `out` with its
        /// (token, head) dims merged, row `r` = `t·H + h`) and `lse`
        /// themselves (the combine leaves them).
        /// `scale` is the softmax scale times log2(e).
        #[tile_kernel($($attr)*)]
        pub fn $name<T: Float16, const THREADS: usize, const STAGES: usize, const CL: usize>(
            q: &Tensor<T, B, RQ, 576>,
            $($kv)*
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
            // Grid row `cy` runs chunk `order[cy]`: the longest first, so that the blocks that
            // free up early take the short ones and all end together.
            let (rb, cy) = grid(cdiv(SQ * H, 64), NC);
            let c = order[cy];
            let bi = chunks[(c, 0)];
            let kb0 = chunks[(c, 1)];
            let seqlen = seqlens[bi];
            // An unused chunk (batch −1) reads nothing (its q and KV tiles are out of bounds) and
            // writes nothing (its window starts past the partials).
            let row0 = if bi >= 0 { c * (cdiv(SQ * H, 64) * 64) + rb * 64 } else { PROWS };
            // Sub-views of one [64, 576] buffer would replace each pair (q_s, qpe_s), (kv_s, kpe_s).
            let mut q_s = shared::<T, 64, 512>();
            let mut qpe_s = shared::<T, 64, 64>();
            let mut kv_s = shared::<T, 64, 512>();
            let mut kpe_s = shared::<T, 64, 64>();
            let mut p_s = shared::<T, 64, 64>();
            // The rows' rescale of O, from warpgroup 0 (which computes it) to both.
            let mut alpha_s = shared::<f32, 64>();
            // Warpgroup 0's alone (the scores' gemms are its own): the scores and the rows'
            // softmax state. Both warpgroups hold half of O.
            let mut s = fragment::<f32, 64, 64>();
            let mut acc = fragment::<f32, 64, 512>();
            let mut m = fragment::<f32, 64>();
            let mut m_blk = fragment::<f32, 64>();
            let mut m_s = fragment::<f32, 64>();
            let mut alpha = fragment::<f32, 64>();
            let mut l = fragment::<f32, 64>();
            // Running sums per element of the scores, summed over the row once after the loop.
            let mut l_acc = fragment::<f32, 64, 64>();
            // Row i is q's row rb·64 + i, (token, head) = ((rb·64 + i) / H, (rb·64 + i) % H);
            // rows past SQ·H read zeros.
            copy(q.tile([bi, rb * 64.., 0..]), &mut q_s);
            copy(q.tile([bi, rb * 64.., 512..]), &mut qpe_s);
            clear(&mut acc);
            clear(&mut l_acc);
            fill(&mut m, f32::NEG_INFINITY);
            for kb in pipelined(chunks[(c, 2)] - kb0, STAGES) {
                let blk = kb0 + kb;
                $($load)*
                // The scores on warpgroup 0 alone (N = 64: not bound by shared memory as two
                // halves of N = 32 are), while warpgroup 1 waits for P.
                gemm(&q_s, &kv_s.t(), &mut s).clear().policy(Warpgroup(0));
                gemm(&qpe_s, &kpe_s.t(), &mut s).policy(Warpgroup(0));
                // Token t sees keys j <= seqlen - SQ + t: only the last blocks mask.
                if (blk + 1) * 64 > seqlen - SQ + 1 {
                    for (i, j) in parallel((64, 64)) {
                        if blk * 64 + j > seqlen - SQ + (rb * 64 + i) / H {
                            s[(i, j)] = f32::NEG_INFINITY;
                        }
                    }
                }
                // The rows' reference maximum m moves (O is rescaled) only where a block's passes it by
                // more than 8 (log2 units): exponentials stay below 2⁸ (exact: the final 1/l cancels m).
                reduce_max(&s, &mut m_blk, 1);
                for i in parallel(64) {
                    alpha[i] = 1.0;
                    if (m_blk[i] - m[i]) * scale > 8.0 {
                        alpha[i] = exp2((m[i] - m_blk[i]) * scale);
                        m[i] = m_blk[i];
                    }
                    m_s[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] * scale };
                    alpha_s[i] = alpha[i];
                }
                for (i, j) in parallel((64, 64)) {
                    s[(i, j)] = exp2(s[(i, j)] * scale - m_s[i]);
                    l_acc[(i, j)] = l_acc[(i, j)] * alpha[i] + s[(i, j)];
                }
                copy(&s, &mut p_s);
                // Rows past the sequence (a page's unused tail) may hold anything, NaN too: V is 0 there.
                if (blk + 1) * 64 > seqlen {
                    for (j, k) in parallel((64, 512)) {
                        if blk * 64 + j >= seqlen {
                            kv_s[(j, k)] = 0.0 as T;
                        }
                    }
                }
                for (i, j) in parallel((64, 512)) {
                    if alpha_s[i] != 1.0 {
                        acc[(i, j)] = acc[(i, j)] * alpha_s[i];
                    }
                }
                gemm(&p_s, &kv_s, &mut acc).policy(FullCol);
            }
            // (Through `s`, whose layout the scores' gemm fixes: `l_acc` takes it in the loop.)
            for (i, j) in parallel((64, 64)) {
                s[(i, j)] = l_acc[(i, j)];
            }
            reduce_sum(&s, &mut l, 1);
            for i in parallel(64) {
                alpha[i] = if l[i] == 0.0 { 0.0 } else { 1.0 / l[i] };
                m_s[i] = if l[i] == 0.0 { f32::NEG_INFINITY } else { (m[i] * scale + log2(l[i])) * 0.6931472 };
                alpha_s[i] = alpha[i];
            }
            for (i, j) in parallel((64, 512)) {
                acc[(i, j)] = acc[(i, j)] * alpha_s[i];
            }
            // A batch in one chunk is final here: no partial to write and read back.
            let whole = bi >= 0 && chunk_begin[bi.max(0) + 1] - chunk_begin[bi.max(0)] == 1;
            if whole {
                copy(&acc, out.tile([bi, rb * 64.., ..]));
                for i in parallel(64) {
                    lse[(bi, (rb * 64 + i) % H, (rb * 64 + i) / H)] = m_s[i];
                }
            } else {
                copy(&acc, o_part.tile([row0.., ..]));
                copy(&m_s, lse_part.tile([row0..]));
            }
        }
    };
}

mla_split!(
    mla_split_paged,
    (cache: &Tensor<T, NBLK, 64, 1, 576>, block_table: &Tensor<i32, B, MAXB>,),
    (
        let page = block_table[(bi, blk)];
        copy(cache.tile([page, 0.., 0, 0..]), &mut kv_s).evict_first();
        copy(cache.tile([page, 0.., 0, 512..]), &mut kpe_s).evict_first();
    ),
    threads = THREADS,
    cluster = (CL, 1, 1),
    instances((f16, 256, 1, 1), (bf16, 256, 1, 1))
);
mla_split!(
    mla_split_paged_sm90,
    (cache: &Tensor<T, NBLK, 64, 1, 576>, block_table: &Tensor<i32, B, MAXB>,),
    (
        let page = block_table[(bi, blk)];
        copy(cache.tile([page, 0.., 0, 0..]), &mut kv_s).evict_first();
        copy(cache.tile([page, 0.., 0, 512..]), &mut kpe_s).evict_first();
    ),
    threads = THREADS,
    cluster = (CL, 1, 1),
    archs = "sm_90a",
    instances((f16, 256, 2, 1), (bf16, 256, 2, 1), (f16, 256, 2, 2), (bf16, 256, 2, 2))
);
mla_split!(
    mla_split_contiguous,
    (kv: &Tensor<T, B, SK, 1, 576>,),
    (
        copy(kv.tile([bi, blk * 64.., 0, 0..]), &mut kv_s).evict_first();
        copy(kv.tile([bi, blk * 64.., 0, 512..]), &mut kpe_s).evict_first();
    ),
    threads = THREADS,
    cluster = (CL, 1, 1),
    instances((f16, 256, 1, 1), (bf16, 256, 1, 1))
);
mla_split!(
    mla_split_contiguous_sm90,
    (kv: &Tensor<T, B, SK, 1, 576>,),
    (
        copy(kv.tile([bi, blk * 64.., 0, 0..]), &mut kv_s).evict_first();
        copy(kv.tile([bi, blk * 64.., 0, 512..]), &mut kpe_s).evict_first();
    ),
    threads = THREADS,
    cluster = (CL, 1, 1),
    archs = "sm_90a",
    instances((f16, 256, 2, 1), (bf16, 256, 2, 1), (f16, 256, 2, 2), (bf16, 256, 2, 2))
);

/// The paged split kernel on sm_90a with FlashMLA's "seesaw": two key
/// blocks per iteration, each in a ring of its own (one stage each, so the
/// producer refills block 0's while block 1's is read), block 0's scores
/// and softmax on warpgroup 0 and block 1's on warpgroup 1, so that block
/// 1's scores run on the tensor cores under block 0's softmax, and block
/// 1's softmax under block 0's P·V (`wsloop_deferred_waits`; ptxas
/// accepts its writes of the registers the scores' gemms share with
/// warpgroup 0's because each warpgroup runs a copy of the loop of its own,
/// `wsloop_split_warpgroups`); both P·V split by columns. The rows'
/// reference maximum travels between the two warpgroups in shared memory (`m0_s` after block 0, `m1_s` after block
/// 1: a warpgroup never rewrites what it reads in one statement), with
/// each block's rescale of O (`alpha0_s`, `alpha1_s`); each warpgroup keeps
/// the running row sums of its own blocks. P goes into its block's rope box,
/// which the scores are done with. A chunk of an odd number of blocks loads
/// its last block twice and masks the second copy. A block's softmax and
/// P·V is written once, the helper `softmax_pv`, called on each
/// warpgroup's buffers. Same parameters and results as
/// `mla_split_paged_sm90`.
#[tile_kernel(threads = THREADS, archs = "sm_90a", instances((f16, 256), (bf16, 256)))]
pub fn mla_split_seesaw<T: Float16, const THREADS: usize>(
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
    // The rows' reference maximum after block 0 and after block 1, and the
    // two blocks' rescales of O.
    let mut m0_s = shared::<f32, 64>();
    let mut m1_s = shared::<f32, 64>();
    let mut alpha0_s = shared::<f32, 64>();
    let mut alpha1_s = shared::<f32, 64>();
    // Warpgroup 0's: block 0's scores, their row maxima and its running sums.
    let mut s0 = fragment::<f32, 64, 64>();
    let mut l0 = fragment::<f32, 64>();
    let mut mb0 = fragment::<f32, 64>();
    // Warpgroup 1's: the same for block 1 (and the rows' LSE at the end).
    let mut s1 = fragment::<f32, 64, 64>();
    let mut l1 = fragment::<f32, 64>();
    let mut mb1 = fragment::<f32, 64>();
    let mut ms1 = fragment::<f32, 64>();
    let mut acc = fragment::<f32, 64, 512>();
    copy(q.tile([bi, rb * 64.., 0..]), &mut q_s);
    copy(q.tile([bi, rb * 64.., 512..]), &mut qpe_s);
    clear(&mut acc);
    clear(&mut l0);
    clear(&mut l1);
    for i in parallel(64) {
        m1_s[i] = f32::NEG_INFINITY;
        alpha1_s[i] = 1.0;
    }
    // One block's softmax, from the other block's reference maximum `m_in` (moved only by more
    // than 8, in log2 units); its row sums `l`, which last saw this warpgroup's previous block,
    // rescaled by both moves since; and its P·V, P in the block's rope box `p` (its scores are
    // done with it).
    let softmax_pv = |s, l, mb: &_, m_in: &_, alpha_in: &_, m_out, alpha_out, p, kv, blk| {
        let mut m = fragment::<f32, 64>();
        let mut a = fragment::<f32, 64>();
        let mut f = fragment::<f32, 64>();
        let mut ms = fragment::<f32, 64>();
        let mut r = fragment::<f32, 64>();
        for i in parallel(64) {
            m[i] = m_in[i];
            a[i] = 1.0;
            if (mb[i] - m[i]) * scale > 8.0 {
                a[i] = exp2((m[i] - mb[i]) * scale);
                m[i] = mb[i];
            }
            f[i] = a[i] * alpha_in[i];
            ms[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] * scale };
            alpha_out[i] = a[i];
            m_out[i] = m[i];
        }
        for (i, j) in parallel((64, 64)) {
            s[(i, j)] = exp2(s[(i, j)] * scale - ms[i]);
        }
        reduce_sum(&s, &mut r, 1);
        for i in parallel(64) {
            l[i] = l[i] * f[i] + r[i];
        }
        copy(&s, &mut p);
        if (blk + 1) * 64 > seqlen {
            for (j, k) in parallel((64, 512)) {
                if blk * 64 + j >= seqlen {
                    kv[(j, k)] = 0.0 as T;
                }
            }
        }
        for (i, j) in parallel((64, 512)) {
            if alpha_out[i] != 1.0 {
                acc[(i, j)] = acc[(i, j)] * alpha_out[i];
            }
        }
        gemm(&p, &kv, &mut acc).policy(FullCol);
    };
    for kp in pipelined(cdiv(kb1 - kb0, 2), 1) {
        let blk0 = kb0 + 2 * kp;
        // Past the chunk (an odd count): block 0 again, masked whole.
        let blk1 = (blk0 + 1).min(kb1 - 1);
        let page0 = block_table[(bi, blk0)];
        let page1 = block_table[(bi, blk1)];
        copy(cache.tile([page0, 0.., 0, 0..]), &mut k0).evict_first();
        copy(cache.tile([page0, 0.., 0, 512..]), &mut kpe0).evict_first();
        copy(cache.tile([page1, 0.., 0, 0..]), &mut k1).evict_first();
        copy(cache.tile([page1, 0.., 0, 512..]), &mut kpe1).evict_first();
        gemm(&q_s, &k0.t(), &mut s0).clear().policy(Warpgroup(0));
        gemm(&qpe_s, &kpe0.t(), &mut s0).policy(Warpgroup(0));
        // Block 1's scores are issued right behind block 0's (the tensor cores run them in
        // order), not after block 0's maximum: they run under its mask, maximum and softmax.
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
        // Block 1's mask and maximum while warpgroup 0 does block 0's softmax.
        if (blk1 + 1) * 64 > seqlen - SQ + 1 || blk0 + 1 >= kb1 {
            for (i, j) in parallel((64, 64)) {
                if blk0 + 1 >= kb1 || blk1 * 64 + j > seqlen - SQ + (rb * 64 + i) / H {
                    s1[(i, j)] = f32::NEG_INFINITY;
                }
            }
        }
        reduce_max(&s1, &mut mb1, 1);
        // Block 0's softmax on warpgroup 0, then block 1's on warpgroup 1 under P·V of block 0.
        softmax_pv(&mut s0, &mut l0, &mb0, &m1_s, &alpha1_s, &mut m0_s, &mut alpha0_s, &mut kpe0, &mut k0, blk0);
        softmax_pv(&mut s1, &mut l1, &mb1, &m0_s, &alpha0_s, &mut m1_s, &mut alpha1_s, &mut kpe1, &mut k1, blk1);
    }
    // The row sums: warpgroup 0's (which missed the last block 1's rescale) handed to warpgroup 1.
    for i in parallel(64) {
        alpha0_s[i] = l0[i] * alpha1_s[i];
    }
    for i in parallel(64) {
        mb1[i] = l1[i] + alpha0_s[i];
        ms1[i] = if mb1[i] == 0.0 { f32::NEG_INFINITY } else { (m1_s[i] * scale + log2(mb1[i])) * 0.6931472 };
        alpha1_s[i] = if mb1[i] == 0.0 { 0.0 } else { 1.0 / mb1[i] };
    }
    for (i, j) in parallel((64, 512)) {
        acc[(i, j)] = acc[(i, j)] * alpha1_s[i];
    }
    let whole = bi >= 0 && chunk_begin[bi.max(0) + 1] - chunk_begin[bi.max(0)] == 1;
    if whole {
        copy(&acc, out.tile([bi, rb * 64.., ..]));
        for i in parallel(64) {
            lse[(bi, (rb * 64 + i) % H, (rb * 64 + i) / H)] = ms1[i];
        }
    } else {
        copy(&acc, o_part.tile([row0.., ..]));
        copy(&ms1, lse_part.tile([row0..]));
    }
}

/// The chunks of each batch merged by their LSE (see the module docs):
/// for batch `bi`, token `t` and heads `hb·16 ..`, the chunks
/// `chunk_begin[bi] .. chunk_begin[bi + 1]` of rows `c·RP + t·H + h` of
/// `o_part` and `lse_part` give `out[bi, t, h]` and `lse[bi, h, t]`. A chunk
/// whose LSE is −∞ (it saw no key of the row, or had no work) weighs 0; a
/// row no chunk saw gets 0 and −∞. A batch in one chunk is left as the
/// split kernel wrote it. Launched as a programmatic dependent of the split
/// kernel (sm_90): its launch overlaps the split kernel's last blocks, and
/// it waits for the split kernel's writes before anything else.
#[tile_kernel(threads = 128, consts(CR = 16), dependent_launch = true)]
pub fn mla_combine(
    o_part: &Tensor<f32, PROWS, 512>,
    lse_part: &Tensor<f32, PROWS>,
    chunk_begin: &Tensor<i32, B1>,
    out: &mut Tensor<f32, B, SQ, H, 512>,
    lse: &mut Tensor<f32, B, H, SQ>,
) {
    let (hb, t, bi) = grid(cdiv(H, CR), SQ, B);
    let rp = cdiv(SQ * H, 64) * 64;
    let row = t * H + hb * CR;
    let c0 = chunk_begin[bi];
    // A batch in one chunk was written by the split kernel: nothing to merge.
    let c1 = if chunk_begin[bi + 1] - c0 == 1 { c0 } else { chunk_begin[bi + 1] };
    let mut m = fragment::<f32, CR>();
    let mut sum = fragment::<f32, CR>();
    let mut w = fragment::<f32, CR>();
    let mut acc = fragment::<f32, CR, 512>();
    let mut o_c = fragment::<f32, CR, 512>();
    // The row vectors take the row layout of the [CR, 512] tiles (a reduction of one fixes
    // it), so the loops over rows and over (row, column) below agree.
    clear(&mut o_c);
    reduce_max(&o_c, &mut m, 1);
    reduce_max(&o_c, &mut sum, 1);
    reduce_max(&o_c, &mut w, 1);
    fill(&mut m, f32::NEG_INFINITY);
    clear(&mut sum);
    clear(&mut acc);
    for c in c0..c1 {
        copy(lse_part.tile([c * rp + row..]), &mut w);
        for i in parallel(CR) {
            m[i] = max(m[i], w[i]);
        }
    }
    for c in c0..c1 {
        copy(lse_part.tile([c * rp + row..]), &mut w);
        for i in parallel(CR) {
            sum[i] += if w[i] == f32::NEG_INFINITY { 0.0 } else { exp(w[i] - m[i]) };
        }
    }
    for i in parallel(CR) {
        m[i] = if sum[i] == 0.0 { f32::NEG_INFINITY } else { m[i] + log(sum[i]) };
    }
    for c in c0..c1 {
        copy(lse_part.tile([c * rp + row..]), &mut w);
        copy(o_part.tile([c * rp + row.., ..]), &mut o_c);
        for i in parallel(CR) {
            w[i] = if w[i] == f32::NEG_INFINITY { 0.0 } else { exp(w[i] - m[i]) };
        }
        for (i, j) in parallel((CR, 512)) {
            acc[(i, j)] += w[i] * o_c[(i, j)];
        }
    }
    if c1 > c0 {
        copy(&acc, out.tile([bi, t, hb * CR.., ..]));
        copy(&m, lse.tile([bi, hb * CR.., t]));
    }
}

/// The split-KV scheduler on the device (the same walk as [`schedule`] on
/// the host, and the same order as [`tile_order`]; see [`Metadata`] for the
/// format): from `seqlens`, the chunks `[NC, 4]` (`NC − B` SM parts),
/// `chunk_begin [B + 1]` and `order [NC]` (the chunks longest first when
/// `longest_first ≠ 0`, else in their own order). The block's
/// threads stage each batch's key blocks in shared memory, 1,024 batches at
/// a time (one coalesced read of `seqlens`), and sum the work with a
/// reduction; only the walk over the batches is serial, on shared memory
/// (it once read `seqlens` from global memory at every step: 65–85 µs at
/// b128 on the H200); the rows after the last chunk are set in parallel.
#[tile_kernel(threads = 128)]
pub fn mla_metadata(
    seqlens: &Tensor<i32, B>,
    chunks: &mut Tensor<i32, NC, 4>,
    chunk_begin: &mut Tensor<i32, B1>,
    order: &mut Tensor<i32, NC>,
    longest_first: i32,
) {
    let _x = grid(1);
    let parts = NC - B;
    let segments = cdiv(B, 1024);
    let mut nb_s = shared::<i32, 1024>();
    let mut total_s = shared::<i32, 1>();
    let mut work = fragment::<i32, 1, 1024>();
    let mut total_f = fragment::<i32, 1>();
    clear(&mut total_f);
    for seg in 0..segments {
        barrier();
        for (r, i) in parallel((1, 1024)) {
            let nb = cdiv(max(seqlens[seg * 1024 + i], 0), 64);
            nb_s[i] = nb;
            work[(r, i)] = if seg * 1024 + i < B { nb + 5 } else { 0 };
        }
        reduce_sum(&work, &mut total_f, 1).keep();
    }
    for i in parallel(1) {
        total_s[i] = total_f[i];
    }
    barrier();
    let payload = cdiv(total_s[0], parts) + 5;
    let mut part: i32 = 0;
    let mut remain: i32 = payload;
    let mut idx: i32 = 0;
    let mut blk: i32 = 0;
    let mut c: i32 = 0;
    for seg in 0..segments {
        // One segment is still staged from the sum.
        if segments > 1 {
            barrier();
            for i in parallel(1024) {
                nb_s[i] = cdiv(max(seqlens[seg * 1024 + i], 0), 64);
            }
            barrier();
        }
        let end = min(B, seg * 1024 + 1024);
        // Each step ends a batch or an SM part: the segment's batches plus
        // `parts` steps end them all.
        for _step in 0..end - seg * 1024 + parts {
            if idx < end {
                let nb = nb_s[idx - seg * 1024];
                // The last part takes whatever is left.
                let take = if part == parts - 1 || remain >= nb - blk + 5 { nb - blk } else { remain - 5 };
                if take > 0 || take == nb - blk {
                    if blk == 0 {
                        chunk_begin[idx] = c;
                    }
                    chunks[(c, 0)] = idx;
                    chunks[(c, 1)] = blk;
                    chunks[(c, 2)] = blk + take;
                    chunks[(c, 3)] = part;
                    c += 1;
                }
                if take == nb - blk {
                    remain = remain - take - 5;
                    idx += 1;
                    blk = 0;
                    if remain <= 0 && part < parts - 1 {
                        part += 1;
                        remain = payload;
                    }
                } else {
                    blk += max(take, 0);
                    part += 1;
                    remain = payload;
                }
            }
        }
    }
    chunk_begin[B] = c;
    // The unused rows, `(−1, 0, 0, −1)`: none the walk wrote.
    for r0 in 0..cdiv(NC, 128) {
        for (i, j) in parallel((128, 4)) {
            let r = r0 * 128 + i;
            if r >= c {
                chunks[(r, j)] = if j == 0 || j == 3 { -1 } else { 0 };
            }
        }
    }
    // The order: chunk r goes to row `rank(r)` of `order`, its rank among
    // the used chunks by key blocks, longest first, ties in chunk order (the
    // unused rows, of size −1, last). Each thread ranks its chunks against
    // the sizes staged in shared memory, 2,048 at a time.
    let mut size_s = shared::<i32, 2048>();
    let mut rank = fragment::<i32, 128>();
    for r0 in 0..cdiv(NC, 128) {
        for i in parallel(128) {
            rank[i] = 0;
        }
        if longest_first != 0 {
            for seg in 0..cdiv(NC, 2048) {
                barrier();
                for j in parallel(2048) {
                    let r = seg * 2048 + j;
                    size_s[j] = if r < c { chunks[(r, 2)] - chunks[(r, 1)] } else { -1 };
                }
                barrier();
                for i in parallel(128) {
                    let r = r0 * 128 + i;
                    let size = if r < c { chunks[(r, 2)] - chunks[(r, 1)] } else { -1 };
                    for j in 0..min(2048, NC - seg * 2048) {
                        if size_s[j] > size || (size_s[j] == size && seg * 2048 + j < r) {
                            rank[i] += 1;
                        }
                    }
                }
            }
        }
        for i in parallel(128) {
            let r = r0 * 128 + i;
            if r < NC {
                order[if longest_first != 0 { rank[i] } else { r }] = r;
            }
        }
    }
}

/// Fills `x` (rows of 576) with pseudo-random values in [−1, 1) from a
/// hash of (row, column, `seed`): the benchmark's large caches, made on the
/// device; [`hashed`] gives the same values on the host.
#[tile_kernel(threads = 256, instances(f16, bf16))]
pub fn mla_fill<T: Float16>(x: &mut Tensor<T, ROWS, 576>, seed: u32) {
    let bx = grid(cdiv(ROWS, 16));
    for (i, j) in parallel((16, 576)) {
        let mut h: u32 = ((bx * 16 + i) as u32) * 2654435761 + (j as u32) * 2246822519 + seed;
        h = (h ^ (h >> 15)) * 2246822519;
        h = (h ^ (h >> 13)) * 3266489917;
        h = h ^ (h >> 16);
        x[(bx * 16 + i, j)] = (((h >> 8) as f32) * (2.0 / 16777216.0) - 1.0) as T;
    }
}

/// The value `mla_fill` writes at (`row`, `col`) with `seed`.
pub fn hashed(row: u32, col: u32, seed: u32) -> f32 {
    let mut h = row.wrapping_mul(2654435761).wrapping_add(col.wrapping_mul(2246822519)).wrapping_add(seed);
    h = (h ^ (h >> 15)).wrapping_mul(2246822519);
    h = (h ^ (h >> 13)).wrapping_mul(3266489917);
    h ^= h >> 16;
    ((h >> 8) as f32) * (2.0 / 16777216.0) - 1.0
}

/// SM parts for `s_q·h_q` query rows on `num_sms` SMs (FlashMLA's
/// `num_sm_parts`, one KV head): each part is one row block's share of the
/// SMs, so that all row blocks of all parts fill the GPU once.
pub fn num_sm_parts(num_sms: usize, s_q: usize, h_q: usize) -> usize {
    (num_sms / (s_q * h_q).div_ceil(BLOCK_H).max(1)).max(1)
}

/// The split-KV scheduler on the host: the same walk as the `mla_metadata`
/// kernel (the tests compare them), returning `(chunks, chunk_begin)` in the
/// format of [`Metadata`] for `num_parts` SM parts.
///
/// FlashMLA's `get_mla_metadata`: the work of batch `b` is its
/// `cdiv(seqlen_b, 64)` key blocks plus a fixed cost of
/// [`CHUNK_OVERHEAD`] blocks; each SM part gets a payload of
/// `cdiv(Σ work, parts) + 5` and takes, in order, whole batches while they
/// fit and then the part of the next one that fits (at least one block, each
/// piece charged the fixed cost again); the last part takes what is left.
pub fn schedule(seqlens: &[i32], num_parts: usize) -> (Vec<[i32; 4]>, Vec<i32>) {
    let b = seqlens.len();
    let parts = num_parts.max(1) as i32;
    let blocks = |s: i32| (s.max(0) + PAGE as i32 - 1) / PAGE as i32;
    let total: i32 = seqlens.iter().map(|&s| blocks(s) + CHUNK_OVERHEAD).sum();
    let payload = (total + parts - 1) / parts + CHUNK_OVERHEAD;
    let mut chunks = vec![[-1, 0, 0, -1]; b + parts as usize];
    let mut begin = vec![0; b + 1];
    let (mut part, mut remain, mut idx, mut blk, mut c) = (0, payload, 0usize, 0, 0usize);
    for _ in 0..b + parts as usize {
        if idx >= b {
            break;
        }
        let nb = blocks(seqlens[idx]);
        let take =
            if part == parts - 1 || remain >= nb - blk + CHUNK_OVERHEAD { nb - blk } else { remain - CHUNK_OVERHEAD };
        if take > 0 || take == nb - blk {
            if blk == 0 {
                begin[idx] = c as i32;
            }
            chunks[c] = [idx as i32, blk, blk + take, part];
            c += 1;
        }
        if take == nb - blk {
            remain -= take + CHUNK_OVERHEAD;
            idx += 1;
            blk = 0;
            if remain <= 0 && part < parts - 1 {
                part += 1;
                remain = payload;
            }
        } else {
            blk += take.max(0);
            part += 1;
            remain = payload;
        }
    }
    begin[b] = c as i32;
    (chunks, begin)
}

/// The order the split kernel runs `chunks` in (`order [NC]`, as
/// `mla_metadata` computes it with `longest_first`): the used chunks by key
/// blocks, longest first, ties in chunk order, then the unused rows.
///
/// Why: the persistent split kernel hands its tiles to the SMs as they free
/// up, in this order; longest first (LPT) ends them all within about one
/// short chunk of each other, where the batch order leaves a whole batch's
/// chunk to run alone at the end (b128 h_q 128: 66 parts over 190 chunks of
/// 2 to 128 key blocks; measured in BENCHMARKS.md, session 12).
pub fn tile_order(chunks: &[[i32; 4]]) -> Vec<i32> {
    let size = |c: &[i32; 4]| if c[0] >= 0 { c[2] - c[1] } else { -1 };
    let mut order: Vec<i32> = (0..chunks.len() as i32).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(size(&chunks[r as usize])));
    order
}

/// The order of the chunks the split kernel runs (see [`tile_order`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ChunkOrder {
    /// The longest chunks first (the default).
    #[default]
    LongestFirst,
    /// The chunks in their own (batch) order: to compare.
    Batch,
}

/// The split-KV schedule of one decode step, on the device (computed by
/// [`Metadata::compute`] from the device `cache_seqlens`, no host
/// synchronization; a serving engine computes it once per step and passes it
/// to every layer's [`forward`]).
///
/// Format (both i32):
/// - `chunks [b + num_parts, 4]`: row `c` is one chunk of work,
///   `(batch, first key block, end key block (exclusive), SM part)`; the
///   chunks of a batch are consecutive rows, in key order, and cover its
///   `cdiv(seqlen, 64)` blocks exactly (a batch of seqlen 0 has one empty
///   chunk `(batch, 0, 0, part)`); the rows after the last chunk are unused,
///   `(−1, 0, 0, −1)`. The split kernel runs one thread block per (query
///   row block, row of `chunks`); an unused row does nothing anyone reads.
/// - `chunk_begin [b + 1]`: batch `b`'s chunks are rows
///   `chunk_begin[b] .. chunk_begin[b + 1]` (`chunk_begin[b]` = the chunks used).
/// - `order [b + num_parts]`: a permutation of the rows of `chunks`, the
///   order the split kernel runs them in ([`tile_order`]: longest first).
pub struct Metadata {
    pub chunks: DeviceTensor<i32>,
    pub chunk_begin: DeviceTensor<i32>,
    pub order: DeviceTensor<i32>,
    /// How `order` is computed.
    pub chunk_order: ChunkOrder,
    /// The batch it was computed for.
    pub batch: usize,
    /// The SM parts ([`num_sm_parts`]).
    pub num_parts: usize,
}

impl Metadata {
    /// Allocates the metadata for `seqlens` (`[b]` i32, on the device) split
    /// over `num_parts` SM parts ([`num_sm_parts`]) and computes it.
    pub fn compute(stream: &Stream, seqlens: &DeviceTensor<i32>, num_parts: usize) -> tile::Result<Metadata> {
        Metadata::compute_in(stream, seqlens, num_parts, ChunkOrder::LongestFirst)
    }

    /// [`Metadata::compute`] with the chunks run in `chunk_order`.
    pub fn compute_in(
        stream: &Stream,
        seqlens: &DeviceTensor<i32>,
        num_parts: usize,
        chunk_order: ChunkOrder,
    ) -> tile::Result<Metadata> {
        let b = seqlens_batch(seqlens)?;
        let num_parts = num_parts.max(1);
        let mut m = Metadata {
            chunks: DeviceTensor::zeros(stream, &[b + num_parts, 4])?,
            chunk_begin: DeviceTensor::zeros(stream, &[b + 1])?,
            order: DeviceTensor::zeros(stream, &[b + num_parts])?,
            chunk_order,
            batch: b,
            num_parts,
        };
        m.update(stream, seqlens)?;
        Ok(m)
    }

    /// Computes the schedule again for new `seqlens` of the same batch (one
    /// launch, no allocation: once per decode step).
    pub fn update(&mut self, stream: &Stream, seqlens: &DeviceTensor<i32>) -> tile::Result<()> {
        let b = seqlens_batch(seqlens)?;
        if b != self.batch {
            return Err(shape_error(
                "seqlens",
                format!("cache_seqlens has batch {b}, the metadata was made for {}: compute it anew", self.batch),
            ));
        }
        let longest_first = (self.chunk_order == ChunkOrder::LongestFirst) as i32;
        mla_metadata::launch(stream, seqlens, &mut self.chunks, &mut self.chunk_begin, &mut self.order, longest_first)
    }
}

fn seqlens_batch(seqlens: &DeviceTensor<i32>) -> tile::Result<usize> {
    match seqlens.shape() {
        [b] => Ok(*b),
        s => Err(shape_error("seqlens", format!("cache_seqlens must be 1-D [b] i32, got shape {s:?}"))),
    }
}

fn shape_error(param: &str, message: String) -> Error {
    Error::Shape { kernel: "mla_decode::forward".into(), param: param.into(), dim: None, message }
}

/// The partial outputs of the split kernel, reused across calls: grown to
/// the largest step seen, never shrunk (no allocation once warm).
#[derive(Default)]
pub struct Workspace {
    o_part: Option<DeviceTensor<f32>>,
    lse_part: Option<DeviceTensor<f32>>,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace::default()
    }

    /// Rows of partial results held now.
    pub fn rows(&self) -> usize {
        self.lse_part.as_ref().map_or(0, |t| t.len())
    }

    fn ensure(
        &mut self,
        stream: &Stream,
        rows: usize,
    ) -> tile::Result<(&mut DeviceTensor<f32>, &mut DeviceTensor<f32>)> {
        if self.rows() < rows {
            // The old buffers go first, so that the device holds one set at a time.
            self.o_part = None;
            self.lse_part = None;
            self.o_part = Some(DeviceTensor::zeros(stream, &[rows, DV])?);
            self.lse_part = Some(DeviceTensor::zeros(stream, &[rows])?);
        }
        match (self.o_part.as_mut(), self.lse_part.as_mut()) {
            (Some(o), Some(l)) => Ok((o, l)),
            _ => Err(shape_error("workspace", "the workspace holds no partial buffers".into())),
        }
    }
}

/// The KV cache [`forward`] reads.
#[derive(Copy, Clone)]
pub enum Kv<'a, T: Element> {
    /// `cache [num_blocks, 64, 1, 576]` and `block_table i32 [b, max_blocks]`:
    /// key `j` of batch `b` is row `j % 64` of page `block_table[b, j / 64]`
    /// (pages in any order; the table must cover `cdiv(seqlen, 64)` pages,
    /// a page index outside the cache reads zeros).
    Paged { cache: &'a DeviceTensor<T>, block_table: &'a DeviceTensor<i32> },
    /// `kv [b, s_k, 1, 576]`: key `j` of batch `b` is `kv[b, j]` (the
    /// seqlens at most `s_k`; keys past it read zeros).
    Contiguous(&'a DeviceTensor<T>),
}

/// What [`forward`] computes besides the inputs.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Options {
    /// The softmax scale (FlashMLA's `softmax_scale`), finite and positive.
    pub scale: f32,
    /// The tile configuration: [`Tiles::Auto`] picks by the device.
    pub tiles: Tiles,
}

impl Options {
    pub fn new(scale: f32) -> Options {
        Options { scale, tiles: Tiles::Auto }
    }
}

/// Which split kernel instances [`forward`] uses.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Tiles {
    /// Hopper's on compute capability 9.x and in the interpreter, else the
    /// portable ones; on Hopper, for a paged cache with at least
    /// [`SEESAW_ROWS`] query rows (`s_q·h_q`), the seesaw instance.
    #[default]
    Auto,
    /// Two KV stages (sm_90a only).
    Hopper,
    /// Hopper's, in thread block clusters of two blocks where the query
    /// rows' 64-row blocks pair up (⌈s_q·h_q / 64⌉ even; elsewhere
    /// Hopper's): the two row blocks of a chunk read the same key blocks,
    /// which the warp-specialized loop then loads once per pair, each block
    /// half of every box multicast to both, so the KV crosses L2 to the SMs
    /// once per pair instead of once per row block. Measured on the H100
    /// (BENCHMARKS, session 26): level with [`Tiles::Hopper`] at the
    /// acceptance shapes (the plain loop with the L2 traffic halved against
    /// the persistent loop), so not the default.
    HopperPairs,
    /// The seesaw instance (`mla_split_seesaw`, sm_90a only) for the paged
    /// cache, Hopper's for the contiguous one: two key blocks per
    /// iteration, block 1's scores under block 0's softmax.
    Seesaw,
    /// One KV stage (fits sm_80's shared memory).
    Portable,
}

/// Whether [`forward`] on `stream` with `tiles` takes Hopper's instances.
pub fn hopper_tiles(stream: &Stream, tiles: Tiles) -> bool {
    match tiles {
        Tiles::Auto => stream.device().compute_capability().is_none_or(|cc| cc.0 == 9),
        Tiles::Hopper | Tiles::HopperPairs | Tiles::Seesaw => true,
        Tiles::Portable => false,
    }
}

/// The query rows (`s_q·h_q`, the rows every key block is multiplied with)
/// from which [`Tiles::Auto`] takes the seesaw instance for a paged cache.
/// Measured on the H100 (BENCHMARKS.md, session 30, same runs): at 256
/// rows (s_q 2, h_q 128) the seesaw is 4 % faster than the plain kernel
/// (the tensor cores are the limit; uniform and ragged lengths, b 32 to
/// 128); at 128 rows (s_q 1 h_q 128, s_q 2 h_q 64) 2–5 % slower (near the
/// memory bound, where the plain kernel's two stages hide the loads that
/// the seesaw's one-stage rings expose).
pub const SEESAW_ROWS: usize = 256;

/// Whether [`forward`] with `tiles` on `stream` launches the seesaw
/// instance: [`Tiles::Seesaw`] for a paged cache, or [`Tiles::Auto`] on
/// Hopper for a paged cache with `s_q·h_q ≥` [`SEESAW_ROWS`].
pub fn split_seesaw(stream: &Stream, tiles: Tiles, paged: bool, s_q: usize, h_q: usize) -> bool {
    paged
        && match tiles {
            Tiles::Seesaw => true,
            Tiles::Auto => hopper_tiles(stream, tiles) && s_q * h_q >= SEESAW_ROWS,
            Tiles::Hopper | Tiles::HopperPairs | Tiles::Portable => false,
        }
}

/// The launch of a paged split instance (`q` seen as `[b, s_q·h_q, 576]`).
pub type PagedLaunch<'q, T> = fn(
    &Stream,
    &Reshaped<'q, T>,
    &DeviceTensor<T>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &mut DeviceTensor<f32>,
    &mut DeviceTensor<f32>,
    &mut DeviceTensor<f32>,
    &mut DeviceTensor<f32>,
    f32,
) -> tile::Result<()>;
/// The launch of a contiguous split instance (`q` seen as `[b, s_q·h_q, 576]`).
pub type ContiguousLaunch<'q, T> = fn(
    &Stream,
    &Reshaped<'q, T>,
    &DeviceTensor<T>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &DeviceTensor<i32>,
    &mut DeviceTensor<f32>,
    &mut DeviceTensor<f32>,
    &mut DeviceTensor<f32>,
    &mut DeviceTensor<f32>,
    f32,
) -> tile::Result<()>;

/// Whether [`forward`] with `tiles` on `stream` launches Hopper's split
/// instance in clusters of two blocks ([`Tiles::HopperPairs`] where the
/// row blocks, the grid's x = ⌈s_q·h_q / 64⌉, pair up).
pub fn split_cluster(stream: &Stream, tiles: Tiles, s_q: usize, h_q: usize) -> bool {
    tiles == Tiles::HopperPairs && hopper_tiles(stream, tiles) && (s_q * h_q).div_ceil(BLOCK_H) % 2 == 0
}

/// The element types there are split instances for (f16, bf16).
pub trait MlaElement: Element {
    /// The paged instance (Hopper's, in clusters of two or not, or the
    /// portable one) and its metadata.
    fn paged<'q>(hopper: bool, cluster: bool) -> (PagedLaunch<'q, Self>, &'static tile::KernelMeta);
    /// The paged seesaw instance ([`Tiles::Seesaw`]) and its metadata.
    fn seesaw<'q>() -> (PagedLaunch<'q, Self>, &'static tile::KernelMeta);
    /// The contiguous instance and its metadata.
    fn contiguous<'q>(hopper: bool, cluster: bool) -> (ContiguousLaunch<'q, Self>, &'static tile::KernelMeta);
    /// `mla_fill` of `x` (`[rows, 576]`).
    fn fill(stream: &Stream, x: &mut DeviceTensor<Self>, seed: u32) -> tile::Result<()>;
}

macro_rules! mla_instances {
    ($t:ty) => {
        impl MlaElement for $t {
            fn paged<'q>(hopper: bool, cluster: bool) -> (PagedLaunch<'q, Self>, &'static tile::KernelMeta) {
                match (hopper, cluster) {
                    (true, true) => {
                        (mla_split_paged_sm90::launch::<$t, 256, 2, 2>, mla_split_paged_sm90::meta::<$t, 256, 2, 2>())
                    }
                    (true, false) => {
                        (mla_split_paged_sm90::launch::<$t, 256, 2, 1>, mla_split_paged_sm90::meta::<$t, 256, 2, 1>())
                    }
                    _ => (mla_split_paged::launch::<$t, 256, 1, 1>, mla_split_paged::meta::<$t, 256, 1, 1>()),
                }
            }
            fn seesaw<'q>() -> (PagedLaunch<'q, Self>, &'static tile::KernelMeta) {
                (mla_split_seesaw::launch::<$t, 256>, mla_split_seesaw::meta::<$t, 256>())
            }
            fn contiguous<'q>(hopper: bool, cluster: bool) -> (ContiguousLaunch<'q, Self>, &'static tile::KernelMeta) {
                match (hopper, cluster) {
                    (true, true) => (
                        mla_split_contiguous_sm90::launch::<$t, 256, 2, 2>,
                        mla_split_contiguous_sm90::meta::<$t, 256, 2, 2>(),
                    ),
                    (true, false) => (
                        mla_split_contiguous_sm90::launch::<$t, 256, 2, 1>,
                        mla_split_contiguous_sm90::meta::<$t, 256, 2, 1>(),
                    ),
                    _ => (mla_split_contiguous::launch::<$t, 256, 1, 1>, mla_split_contiguous::meta::<$t, 256, 1, 1>()),
                }
            }
            fn fill(stream: &Stream, x: &mut DeviceTensor<Self>, seed: u32) -> tile::Result<()> {
                mla_fill::launch::<$t>(stream, x, seed)
            }
        }
    };
}
mla_instances!(f16);
mla_instances!(bf16);

/// MLA decode attention (see the module docs): `out [b, s_q, h_q, 512]` and
/// `lse [b, h_q, s_q]` (f32) from `q [b, s_q, h_q, 576]`, the KV cache `kv`
/// and `seqlens` (`cache_seqlens`, i32 `[b]`), with the split-KV schedule
/// `metadata` ([`Metadata::compute`] of the same seqlens) and the partials in
/// `workspace`. Two launches on `stream` (split, combine), no host
/// synchronization. Errors: shapes that do not fit these rules, a scale that
/// is not finite and positive (`Error::Shape`), and what the launch refuses.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: MlaElement>(
    stream: &Stream,
    q: &DeviceTensor<T>,
    kv: Kv<'_, T>,
    seqlens: &DeviceTensor<i32>,
    metadata: &Metadata,
    workspace: &mut Workspace,
    out: &mut DeviceTensor<f32>,
    lse: &mut DeviceTensor<f32>,
    options: Options,
) -> tile::Result<()> {
    let &[b, s_q, h_q, d] = q.shape() else {
        return Err(shape_error("q", format!("q must be 4-D [b, s_q, h_q, {D}], got shape {:?}", q.shape())));
    };
    if d != D {
        return Err(shape_error("q", format!("q has {d} columns, MLA's are {D} (512 + 64 rope)")));
    }
    match kv {
        Kv::Paged { cache, block_table } => {
            if !matches!(cache.shape(), &[_, PAGE, 1, D]) {
                return Err(shape_error(
                    "cache",
                    format!("the paged cache must be [num_blocks, {PAGE}, 1, {D}], got shape {:?}", cache.shape()),
                ));
            }
            if !matches!(block_table.shape(), &[bt, _] if bt == b) {
                return Err(shape_error(
                    "block_table",
                    format!("block_table must be [b = {b}, max_blocks] i32, got shape {:?}", block_table.shape()),
                ));
            }
        }
        Kv::Contiguous(kv) => {
            if !matches!(kv.shape(), &[bk, _, 1, dk] if bk == b && dk == D) {
                return Err(shape_error(
                    "kv",
                    format!("the contiguous cache must be [b = {b}, s_k, 1, {D}], got shape {:?}", kv.shape()),
                ));
            }
        }
    }
    if seqlens_batch(seqlens)? != b {
        return Err(shape_error("seqlens", format!("cache_seqlens has shape {:?}, expected [{b}]", seqlens.shape())));
    }
    if metadata.batch != b
        || metadata.chunks.shape() != [b + metadata.num_parts, 4]
        || metadata.order.shape() != [b + metadata.num_parts]
    {
        return Err(shape_error(
            "metadata",
            format!(
                "the metadata was computed for batch {}, q has batch {b}: compute it from these seqlens",
                metadata.batch
            ),
        ));
    }
    if out.shape() != [b, s_q, h_q, DV] {
        return Err(shape_error("out", format!("out has shape {:?}, expected {:?}", out.shape(), [b, s_q, h_q, DV])));
    }
    if lse.shape() != [b, h_q, s_q] {
        return Err(shape_error("lse", format!("lse has shape {:?}, expected {:?}", lse.shape(), [b, h_q, s_q])));
    }
    if !(options.scale.is_finite() && options.scale > 0.0) {
        return Err(shape_error(
            "scale",
            format!("the softmax scale must be finite and positive, got {}", options.scale),
        ));
    }
    if b == 0 || s_q * h_q == 0 {
        return Ok(());
    }
    let rows = metadata.chunks.shape()[0] * (s_q * h_q).div_ceil(BLOCK_H) * BLOCK_H;
    let (o_part, lse_part) = workspace.ensure(stream, rows)?;
    let hopper = hopper_tiles(stream, options.tiles);
    let scale = options.scale * std::f32::consts::LOG2_E;
    // The split kernel sees out's (token, head) dims merged: its rows.
    out.reshape_in_place(&[b, s_q * h_q, DV])?;
    let cluster = split_cluster(stream, options.tiles, s_q, h_q);
    let seesaw = split_seesaw(stream, options.tiles, matches!(kv, Kv::Paged { .. }), s_q, h_q);
    let kind = (hopper, cluster, seesaw);
    let split = split_launch(stream, q, kv, seqlens, metadata, o_part, lse_part, out, lse, kind, scale);
    out.reshape_in_place(&[b, s_q, h_q, DV])?;
    split?;
    mla_combine::launch(stream, o_part, lse_part, &metadata.chunk_begin, out, lse)
}

/// The split kernel's launch of [`forward`] (`out` as `[b, s_q·h_q, 512]`).
#[allow(clippy::too_many_arguments)]
fn split_launch<T: MlaElement>(
    stream: &Stream,
    q: &DeviceTensor<T>,
    kv: Kv<'_, T>,
    seqlens: &DeviceTensor<i32>,
    metadata: &Metadata,
    o_part: &mut DeviceTensor<f32>,
    lse_part: &mut DeviceTensor<f32>,
    out: &mut DeviceTensor<f32>,
    lse: &mut DeviceTensor<f32>,
    (hopper, cluster, seesaw): (bool, bool, bool),
    scale: f32,
) -> tile::Result<()> {
    // Its rows are q's (token, head) rows too.
    let q = q.view_as(&[q.shape()[0], q.shape()[1] * q.shape()[2], D])?;
    let q = &q;
    match kv {
        Kv::Paged { cache, block_table } => {
            let (launch, _) = if seesaw { T::seesaw() } else { T::paged(hopper, cluster) };
            let (chunks, order, begin) = (&metadata.chunks, &metadata.order, &metadata.chunk_begin);
            launch(stream, q, cache, block_table, seqlens, chunks, order, begin, o_part, lse_part, out, lse, scale)
        }
        Kv::Contiguous(kv) => {
            let (launch, _) = T::contiguous(hopper, cluster);
            let (chunks, order, begin) = (&metadata.chunks, &metadata.order, &metadata.chunk_begin);
            launch(stream, q, kv, seqlens, chunks, order, begin, o_part, lse_part, out, lse, scale)
        }
    }
}

/// MLA decode in f64 on the host: the reference of the tests and the
/// example. `key(b, j)` is the 576 values of key `j` of batch `b`.
/// Returns `out [b, s_q, h_q, 512]` and `lse [b, h_q, s_q]` (0 and −∞ for a
/// row that sees no key), for the `(b, t, h)` in `rows` only (others 0).
/// A row listed more than once is computed once (the sampled rows of the
/// GPU tests repeat).
#[allow(clippy::too_many_arguments)]
pub fn reference<T: Element>(
    q: &[T],
    key: &dyn Fn(usize, usize) -> Vec<f64>,
    seqlens: &[i32],
    s_q: usize,
    h_q: usize,
    scale: f64,
    rows: &[(usize, usize, usize)],
) -> (Vec<f64>, Vec<f64>) {
    let b = seqlens.len();
    let mut out = vec![0.0; b * s_q * h_q * DV];
    let mut lse = vec![0.0; b * h_q * s_q];
    let mut done = vec![false; b * s_q * h_q];
    for &(bi, t, h) in rows {
        let row = (bi * s_q + t) * h_q + h;
        if std::mem::replace(&mut done[row], true) {
            continue;
        }
        let seen = (seqlens[bi] as i64 - s_q as i64 + t as i64 + 1).clamp(0, seqlens[bi].max(0) as i64) as usize;
        let qr: Vec<f64> = q[row * D..][..D].iter().map(|x| x.to_f64()).collect();
        let keys: Vec<Vec<f64>> = (0..seen).map(|j| key(bi, j)).collect();
        let p: Vec<f64> = keys.iter().map(|k| scale * k.iter().zip(&qr).map(|(a, b)| a * b).sum::<f64>()).collect();
        let max = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = p.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        lse[(bi * h_q + h) * s_q + t] = if seen == 0 { f64::NEG_INFINITY } else { max + sum.ln() };
        let o = &mut out[row * DV..][..DV];
        for (j, k) in keys.iter().enumerate() {
            for (c, oc) in o.iter_mut().enumerate() {
                *oc += e[j] / sum * k[c];
            }
        }
    }
    (out, lse)
}

/// One decode problem: batch (its seqlens), new tokens, heads, the cache
/// kind, the SM parts of the schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub seqlens: Vec<i32>,
    pub s_q: usize,
    pub h_q: usize,
    pub paged: bool,
    pub num_parts: usize,
}

impl Case {
    pub fn b(&self) -> usize {
        self.seqlens.len()
    }
    /// Σseqlen, the keys of all batches.
    pub fn keys(&self) -> f64 {
        self.seqlens.iter().map(|&s| s.max(0) as f64).sum()
    }
    /// The FLOPs, `2·s_q·Σseqlen·h_q·(576 + 512)`.
    pub fn flops(&self) -> f64 {
        self.flops_for(self.keys())
    }
    /// The FLOPs of this shape with `keys` keys in all (a peer that drew its
    /// own ragged lengths).
    pub fn flops_for(&self, keys: f64) -> f64 {
        2.0 * self.s_q as f64 * keys * self.h_q as f64 * (D + DV) as f64
    }
    /// The bytes, `(Σseqlen·576 + b·s_q·h_q·(576 + 512))·2`.
    pub fn bytes(&self) -> f64 {
        self.bytes_for(self.keys())
    }
    /// The bytes of this shape with `keys` keys in all.
    pub fn bytes_for(&self, keys: f64) -> f64 {
        (keys * D as f64 + (self.b() * self.s_q * self.h_q * (D + DV)) as f64) * 2.0
    }
    /// The softmax scale of the tests (DeepSeek's head dim 192).
    pub fn scale(&self) -> f32 {
        1.0 / 192f32.sqrt()
    }
}

/// The key scale of the tests' `scores_that_jump`, for [`Inputs::scale_keys`]:
/// key block `k` times `1 + 8·(k mod 4)` (each block's largest score some 17
/// units of log2 past the previous one's, so O is rescaled at every block),
/// or `19` over that (`grow` false: the first block's maximum stays the row's).
pub fn jumping_keys(grow: bool) -> impl Fn(usize, usize) -> f64 {
    move |_, j| {
        let k = 1.0 + 8.0 * (j / PAGE % 4) as f64;
        if grow {
            k
        } else {
            19.0 / k
        }
    }
}

/// Random inputs of a case: q, the keys, the cache on the device, the
/// metadata computed on the device, out and lse poisoned with NaN.
/// [`Inputs::new`] makes the keys on the host (paged: pages shuffled, the
/// unused pages and the tail of each batch's last page NaN; contiguous: the
/// rows past each seqlen NaN); [`Inputs::hashed`] fills the cache on the
/// device (`mla_fill`, for the benchmark's sizes) and keeps no host copy.
pub struct Inputs<T: Element> {
    pub q: Vec<T>,
    /// `[b, cap, 576]`: key `j` of batch `b` at `(b·cap + j)·576` (empty when hashed).
    pub keys: Vec<T>,
    /// Keys per batch the cache holds (`max_blocks · 64`).
    pub cap: usize,
    /// The block table on the host (paged).
    pub table: Vec<i32>,
    /// The seed of a hashed cache.
    pub hash: Option<u32>,
    pub dq: DeviceTensor<T>,
    pub cache: DeviceTensor<T>,
    pub block_table: DeviceTensor<i32>,
    pub seqlens: DeviceTensor<i32>,
    pub metadata: Metadata,
    pub workspace: Workspace,
    pub out: DeviceTensor<f32>,
    pub lse: DeviceTensor<f32>,
}

impl<T: MlaElement> Inputs<T> {
    pub fn new(stream: &Stream, c: &Case, seed: u64) -> tile::Result<Self> {
        Self::make(stream, c, seed, false)
    }

    pub fn hashed(stream: &Stream, c: &Case, seed: u64) -> tile::Result<Self> {
        Self::make(stream, c, seed, true)
    }

    fn make(stream: &Stream, c: &Case, seed: u64, hashed: bool) -> tile::Result<Self> {
        let mut rng = crate::common::Rng::new(seed);
        let b = c.b();
        let max_blocks = c.seqlens.iter().map(|&s| (s.max(0) as usize).div_ceil(PAGE)).max().unwrap_or(0).max(1);
        let cap = max_blocks * PAGE;
        let nan = T::from_f64(f64::NAN);
        let q: Vec<T> = rng.vec(b * c.s_q * c.h_q * D, -1.0, 1.0).into_iter().map(|x| T::from_f64(x as f64)).collect();
        let mut keys = vec![];
        if !hashed {
            keys = rng.vec(b * cap * D, -1.0, 1.0).into_iter().map(|x| T::from_f64(x as f64)).collect();
            for (bi, &s) in c.seqlens.iter().enumerate() {
                keys[(bi * cap + s.max(0) as usize) * D..(bi + 1) * cap * D].fill(nan);
            }
        }
        let hash = hashed.then_some(seed as u32);
        let (cache, table) = if c.paged {
            // Pages 0..num_blocks in a random order, two more than needed (NaN or unread).
            let num_blocks = b * max_blocks + 2;
            let mut perm: Vec<usize> = (0..num_blocks).collect();
            for i in (1..num_blocks).rev() {
                perm.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            let table: Vec<i32> = perm[..b * max_blocks].iter().map(|&p| p as i32).collect();
            let cache = if hashed {
                DeviceTensor::zeros(stream, &[num_blocks, PAGE, 1, D])?
            } else {
                let mut cache = vec![nan; num_blocks * PAGE * D];
                for (n, &page) in table.iter().enumerate() {
                    let (bi, j) = (n / max_blocks, n % max_blocks);
                    let src = &keys[(bi * cap + j * PAGE) * D..][..PAGE * D];
                    cache[page as usize * PAGE * D..][..PAGE * D].copy_from_slice(src);
                }
                DeviceTensor::from_slice(stream, &cache, &[num_blocks, PAGE, 1, D])?
            };
            (cache, table)
        } else if hashed {
            (DeviceTensor::zeros(stream, &[b, cap, 1, D])?, vec![])
        } else {
            (DeviceTensor::from_slice(stream, &keys, &[b, cap, 1, D])?, vec![])
        };
        let mut cache = cache;
        if let Some(seed) = hash {
            let shape = cache.shape().to_vec();
            let rows = shape[0] * shape[1];
            let mut flat = cache.reshape(&[rows, D])?;
            T::fill(stream, &mut flat, seed)?;
            cache = flat.reshape(&shape)?;
        }
        let block_table = if c.paged {
            DeviceTensor::from_slice(stream, &table, &[b, max_blocks])?
        } else {
            DeviceTensor::zeros(stream, &[b, 1])?
        };
        let seqlens = DeviceTensor::from_slice(stream, &c.seqlens, &[b])?;
        let metadata = Metadata::compute(stream, &seqlens, c.num_parts)?;
        Ok(Inputs {
            dq: DeviceTensor::from_slice(stream, &q, &[b, c.s_q, c.h_q, D])?,
            q,
            keys,
            cap,
            table,
            hash,
            cache,
            block_table,
            seqlens,
            metadata,
            workspace: Workspace::new(),
            out: DeviceTensor::from_slice(stream, &vec![f32::NAN; b * c.s_q * c.h_q * DV], &[b, c.s_q, c.h_q, DV])?,
            lse: DeviceTensor::from_slice(stream, &vec![f32::NAN; b * c.h_q * c.s_q], &[b, c.h_q, c.s_q])?,
        })
    }

    /// Multiplies key `j` of batch `b` by `factor(b, j)`, in the host keys
    /// and the device cache alike (not for hashed inputs, which have no host
    /// keys): scores that grow or shrink along a sequence, for the online
    /// softmax's rescales. The unused rows stay NaN.
    pub fn scale_keys(&mut self, stream: &Stream, factor: impl Fn(usize, usize) -> f64) -> tile::Result<()> {
        assert!(self.hash.is_none(), "hashed inputs have no host keys to scale");
        let b = self.keys.len() / (self.cap * D);
        for bi in 0..b {
            for j in 0..self.cap {
                let f = factor(bi, j);
                for v in &mut self.keys[(bi * self.cap + j) * D..][..D] {
                    *v = T::from_f64(v.to_f64() * f);
                }
            }
        }
        let shape = self.cache.shape().to_vec();
        let mut cache = self.cache.to_vec(stream)?;
        if self.table.is_empty() {
            cache.copy_from_slice(&self.keys);
        } else {
            let max_blocks = self.cap / PAGE;
            for (n, &page) in self.table.iter().enumerate() {
                let (bi, j) = (n / max_blocks, n % max_blocks);
                let src = &self.keys[(bi * self.cap + j * PAGE) * D..][..PAGE * D];
                cache[page as usize * PAGE * D..][..PAGE * D].copy_from_slice(src);
            }
        }
        self.cache = DeviceTensor::from_slice(stream, &cache, &shape)?;
        Ok(())
    }

    /// The 576 values of key `j` of batch `b`.
    pub fn key(&self, b: usize, j: usize) -> Vec<f64> {
        match self.hash {
            None => self.keys[(b * self.cap + j) * D..][..D].iter().map(|x| x.to_f64()).collect(),
            Some(seed) => {
                let row = if self.table.is_empty() {
                    b * self.cap + j
                } else {
                    self.table[b * (self.cap / PAGE) + j / PAGE] as usize * PAGE + j % PAGE
                };
                (0..D).map(|c| T::from_f64(hashed(row as u32, c as u32, seed) as f64).to_f64()).collect()
            }
        }
    }

    /// Runs [`forward`] on these inputs.
    pub fn run(&mut self, stream: &Stream, c: &Case, tiles: Tiles) -> tile::Result<()> {
        let kv = if c.paged {
            Kv::Paged { cache: &self.cache, block_table: &self.block_table }
        } else {
            Kv::Contiguous(&self.cache)
        };
        let options = Options { scale: c.scale(), tiles };
        forward(
            stream,
            &self.dq,
            kv,
            &self.seqlens,
            &self.metadata,
            &mut self.workspace,
            &mut self.out,
            &mut self.lse,
            options,
        )
    }

    /// Checks the device metadata against [`schedule`] and [`tile_order`]
    /// on the host.
    pub fn check_metadata(&self, stream: &Stream, c: &Case) -> Result<(), String> {
        let (chunks, begin) = schedule(&c.seqlens, c.num_parts);
        let got = self.metadata.chunks.to_vec(stream).map_err(|e| e.to_string())?;
        let got_begin = self.metadata.chunk_begin.to_vec(stream).map_err(|e| e.to_string())?;
        let got_order = self.metadata.order.to_vec(stream).map_err(|e| e.to_string())?;
        let want: Vec<i32> = chunks.iter().flatten().copied().collect();
        let order = match self.metadata.chunk_order {
            ChunkOrder::LongestFirst => tile_order(&chunks),
            ChunkOrder::Batch => (0..chunks.len() as i32).collect(),
        };
        if got != want || got_begin != begin || got_order != order {
            return Err(format!(
                "{c:?}: device metadata {got:?} / {got_begin:?} / {got_order:?}, host {want:?} / {begin:?} / {order:?}"
            ));
        }
        Ok(())
    }

    /// Checks out and lse against [`reference`] on `rows` ((b, t, h); every
    /// row when `None`): relative L2 error at most `tol`, no element off by
    /// more than `8·tol` (times its magnitude where that is above 1: scaled
    /// keys give outputs up to 25, whose f16 P alone is off by 25·2⁻¹¹),
    /// −∞ LSE and zero output exactly where no key is seen. Returns the two
    /// errors.
    pub fn check(
        &self,
        stream: &Stream,
        c: &Case,
        rows: Option<&[(usize, usize, usize)]>,
        tol: f64,
    ) -> Result<(f64, f64), String> {
        let all: Vec<(usize, usize, usize)>;
        let rows = match rows {
            Some(r) => r,
            None => {
                all =
                    (0..c.b()).flat_map(|b| (0..c.s_q).flat_map(move |t| (0..c.h_q).map(move |h| (b, t, h)))).collect();
                &all
            }
        };
        let key = |b: usize, j: usize| self.key(b, j);
        let (o_ref, lse_ref) = reference(&self.q, &key, &c.seqlens, c.s_q, c.h_q, c.scale() as f64, rows);
        let o = self.out.to_vec(stream).map_err(|e| e.to_string())?;
        let lse = self.lse.to_vec(stream).map_err(|e| e.to_string())?;
        let (mut got_o, mut want_o, mut got_l, mut want_l) = (vec![], vec![], vec![], vec![]);
        for &(b, t, h) in rows {
            let at = ((b * c.s_q + t) * c.h_q + h) * DV;
            got_o.extend_from_slice(&o[at..at + DV]);
            want_o.extend_from_slice(&o_ref[at..at + DV]);
            got_l.push(lse[(b * c.h_q + h) * c.s_q + t]);
            want_l.push(lse_ref[(b * c.h_q + h) * c.s_q + t]);
        }
        let ctx = |what: &str, e: String| format!("{c:?}: {what}: {e}");
        let e_o = assert_close(&got_o, &want_o, tol).map_err(|e| ctx("out", e))?;
        let e_l = assert_close(&got_l, &want_l, tol / 10.0).map_err(|e| ctx("lse", e))?;
        for (n, (&g, &w)) in got_o.iter().zip(&want_o).enumerate() {
            let off = (g as f64 - w).abs();
            if off.is_nan() || off > 8.0 * tol * w.abs().max(1.0) {
                let (b, t, h) = rows[n / DV];
                return Err(ctx("out", format!("row (b {b}, t {t}, h {h}) col {}: got {g}, reference {w}", n % DV)));
            }
        }
        for (n, (&g, &w)) in got_l.iter().zip(&want_l).enumerate() {
            if (w == f64::NEG_INFINITY) != (g == f32::NEG_INFINITY) {
                let (b, t, h) = rows[n];
                return Err(ctx("lse", format!("row (b {b}, t {t}, h {h}): got {g}, reference {w}")));
            }
        }
        Ok((e_o, e_l))
    }
}

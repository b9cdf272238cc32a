//! Paged attention in Tile IR text form, as the `tile` macro lowers
//! `tests/kernels/paged.rs::paged_attention` (`tests/paged_interp.rs` checks
//! that the two agree): the K and V tiles of each key block come from the
//! cache page `block_table[bz, kb]` (`let page = ..` in the loop body), the
//! loop's trip count from `seqlens[bz]`.

/// Paged attention (head dim 64, 64 query rows per block, key pages of 64,
/// 128 threads, 2 stages): K copied at the top of the body, V just before
/// the P·V gemm.
pub const PAGED_ATTENTION: &str = "kernel paged_attention<%0 B, %1 SQ, %2 P, %3 MAXB>(@0 q: &f16[B, SQ, 64], @1 k_cache: &f16[P, 64, 64], @2 v_cache: &f16[P, 64, 64], @3 block_table: &i32[B, MAXB], @4 seqlens: &i32[B], @5 o: &mut f16[B, SQ, 64], %4 scale: f32) threads=128 grid=((SQ + 63) / 64, B, 1) {
  %5 bx = block_idx.x
  %6 bz = block_idx.y
  @6 q_s: shared f16[64, 64]
  @7 k_s: shared f16[64, 64]
  @8 v_s: shared f16[64, 64]
  @9 s: fragment f32[64, 64]
  @10 p: fragment f16[64, 64]
  @11 acc: fragment f32[64, 64]
  @12 m: fragment f32[64]
  @13 m_prev: fragment f32[64]
  @14 l: fragment f32[64]
  @15 row_sum: fragment f32[64]
  let %7 seqlen: i32 = seqlens[bz]
  copy q[bz, bx * 64.., 0..] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %8 kb in pipelined(2) 0..(seqlen + 63) / 64 {
    let %9 page: i32 = block_table[bz, kb]
    copy k_cache[page, 0.., 0..] -> k_s
    gemm q_s, k_s.t -> s, clear, policy=full_row
    for %10 i in parallel 0..64 {
      for %11 j in parallel 0..64 {
        if kb * 64 + %11 >= seqlen {
          s[%10, %11] = -inf
        }
      }
    }
    copy m -> m_prev
    reduce.max s -> m, dim=1, keep
    for %12 i in parallel 0..64 {
      for %13 j in parallel 0..64 {
        s[%12, %13] = exp2((s[%12, %13] - m[%12]) * scale)
      }
    }
    reduce.sum s -> row_sum, dim=1
    for %14 i in parallel 0..64 {
      l[%14] = l[%14] * exp2((m_prev[%14] - m[%14]) * scale) + row_sum[%14]
    }
    for %15 i in parallel 0..64 {
      for %16 j in parallel 0..64 {
        acc[%15, %16] = acc[%15, %16] * exp2((m_prev[%15] - m[%15]) * scale)
      }
    }
    copy s -> p
    copy v_cache[page, 0.., 0..] -> v_s
    gemm p, v_s -> acc, policy=full_row
  }
  for %17 i in parallel 0..64 {
    for %18 j in parallel 0..64 {
      acc[%17, %18] = select(l[%17] > 0.0, acc[%17, %18] / l[%17], 0.0)
    }
  }
  copy acc -> o[bz, bx * 64.., 0..]
}";

/// [`PAGED_ATTENTION`] with `bm` query rows per block over `threads`
/// threads (`paged_attention_text(64, 128)` is [`PAGED_ATTENTION`];
/// `(128, 256)` is `tests/kernels/paged.rs::paged_attention_2wg`; other
/// shapes are named `paged_attention_{bm}_{threads}`).
pub fn paged_attention_text(bm: i64, threads: u32) -> String {
    if (bm, threads) == (64, 128) {
        return PAGED_ATTENTION.to_string();
    }
    let name = if (bm, threads) == (128, 256) {
        "paged_attention_2wg".to_string()
    } else {
        format!("paged_attention_{bm}_{threads}")
    };
    let mut s = PAGED_ATTENTION
        .replace("kernel paged_attention<", &format!("kernel {name}<"))
        .replace("threads=128 grid=((SQ + 63) / 64,", &format!("threads={threads} grid=((SQ + {}) / {bm},", bm - 1))
        .replace("q_s: shared f16[64, 64]", &format!("q_s: shared f16[{bm}, 64]"))
        .replace("s: fragment f32[64, 64]", &format!("s: fragment f32[{bm}, 64]"))
        .replace("p: fragment f16[64, 64]", &format!("p: fragment f16[{bm}, 64]"))
        .replace("acc: fragment f32[64, 64]", &format!("acc: fragment f32[{bm}, 64]"))
        .replace("fragment f32[64]", &format!("fragment f32[{bm}]"))
        .replace("bx * 64..", &format!("bx * {bm}.."));
    for v in [10, 12, 14, 15, 17] {
        s = s.replace(&format!("%{v} i in parallel 0..64"), &format!("%{v} i in parallel 0..{bm}"));
    }
    s
}

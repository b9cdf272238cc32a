//! The FlashAttention inner loop in Tile IR text form, as the `tile` macro
//! lowers `tests/kernels/gemm.rs::attention` (`tests/gemm_interp.rs` checks
//! that the two agree): one block per 64 query rows walks the keys in
//! tiles of 64 with an online softmax, `S = Q·Kᵀ` from shared memory and
//! `O += P·V` with P from registers.
//!
//! [`ATTENTION`] is the kernel at head dimension 64, 64 query rows per
//! block, 128 threads, f16; [`attention_text`] derives the other shapes from
//! it, so the loop body exists once.

/// The FlashAttention inner loop (head dim 64, 64 query rows per block,
/// 128 threads, 2 stages, P·V with A from registers), as the macro lowers it.
pub const ATTENTION: &str = "kernel attention<%0 SQ, %1 SK>(@0 q: &f16[SQ, 64], @1 k: &f16[SK, 64], @2 v: &f16[SK, 64], @3 o: &mut f16[SQ, 64], %2 scale: f32) threads=128 grid=((SQ + 63) / 64, 1, 1) {
  %3 bx = block_idx.x
  @4 q_s: shared f16[64, 64]
  @5 k_s: shared f16[64, 64]
  @6 v_s: shared f16[64, 64]
  @7 s: fragment f32[64, 64]
  @8 p: fragment f16[64, 64]
  @9 acc: fragment f32[64, 64]
  @10 m: fragment f32[64]
  @11 m_prev: fragment f32[64]
  @12 r: fragment f32[64]
  @13 l: fragment f32[64]
  @14 row_sum: fragment f32[64]
  copy q[bx * 64, 0] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %4 kb in pipelined(2) 0..(SK + 63) / 64 {
    copy k[kb * 64, 0] -> k_s
    copy v[kb * 64, 0] -> v_s
    gemm q_s, k_s.t -> s, clear, policy=full_row
    for %5 i in parallel 0..64 {
      for %6 j in parallel 0..64 {
        if kb * 64 + %6 >= SK {
          s[%5, %6] = -inf
        }
      }
    }
    copy m -> m_prev
    reduce.max s -> m, dim=1, keep
    for %7 i in parallel 0..64 {
      r[%7] = exp2((m_prev[%7] - m[%7]) * scale)
    }
    for %8 i in parallel 0..64 {
      for %9 j in parallel 0..64 {
        s[%8, %9] = exp2(s[%8, %9] * scale - m[%8] * scale)
      }
    }
    reduce.sum s -> row_sum, dim=1
    for %10 i in parallel 0..64 {
      l[%10] = l[%10] * r[%10] + row_sum[%10]
    }
    for %11 i in parallel 0..64 {
      for %12 j in parallel 0..64 {
        acc[%11, %12] = acc[%11, %12] * r[%11]
      }
    }
    copy s -> p
    gemm p, v_s -> acc, policy=full_row
  }
  for %13 i in parallel 0..64 {
    for %14 j in parallel 0..64 {
      acc[%13, %14] = acc[%13, %14] / l[%13]
    }
  }
  copy acc -> o[bx * 64, 0]
}";

/// [`ATTENTION`] with head dimension `d`, `bm` query rows per block over
/// `threads` threads, and element type `dt` (`"f16"` or `"bf16"`). Key tiles
/// stay 64 wide. `attention_text(64, 64, 128, "f16")` is [`ATTENTION`].
pub fn attention_text(d: i64, bm: i64, threads: u32, dt: &str) -> String {
    ATTENTION
        .replace("threads=128 grid=((SQ + 63) / 64", &format!("threads={threads} grid=((SQ + {}) / {bm}", bm - 1))
        .replace("f16[SQ, 64]", &format!("{dt}[SQ, {d}]"))
        .replace("f16[SK, 64]", &format!("{dt}[SK, {d}]"))
        .replace("q_s: shared f16[64, 64]", &format!("q_s: shared {dt}[{bm}, {d}]"))
        .replace("k_s: shared f16[64, 64]", &format!("k_s: shared {dt}[64, {d}]"))
        .replace("v_s: shared f16[64, 64]", &format!("v_s: shared {dt}[64, {d}]"))
        .replace("s: fragment f32[64, 64]", &format!("s: fragment f32[{bm}, 64]"))
        .replace("p: fragment f16[64, 64]", &format!("p: fragment {dt}[{bm}, 64]"))
        .replace("acc: fragment f32[64, 64]", &format!("acc: fragment f32[{bm}, {d}]"))
        .replace("fragment f32[64]", &format!("fragment f32[{bm}]"))
        .replace("copy q[bx * 64, 0]", &format!("copy q[bx * {bm}, 0]"))
        .replace("copy acc -> o[bx * 64, 0]", &format!("copy acc -> o[bx * {bm}, 0]"))
        .replace("i in parallel 0..64 {\n      for %6", &format!("i in parallel 0..{bm} {{\n      for %6"))
        .replace("%7 i in parallel 0..64", &format!("%7 i in parallel 0..{bm}"))
        .replace("%8 i in parallel 0..64", &format!("%8 i in parallel 0..{bm}"))
        .replace("%10 i in parallel 0..64", &format!("%10 i in parallel 0..{bm}"))
        .replace(
            "%11 i in parallel 0..64 {\n      for %12 j in parallel 0..64",
            &format!("%11 i in parallel 0..{bm} {{\n      for %12 j in parallel 0..{d}"),
        )
        .replace(
            "%13 i in parallel 0..64 {\n    for %14 j in parallel 0..64",
            &format!("%13 i in parallel 0..{bm} {{\n    for %14 j in parallel 0..{d}"),
        )
}

/// The layout of the 4-D tensors of [`attention_4d_text`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Layout4d {
    /// `[b, h, s, d]`: tiles with the batch and head squeezed.
    Bhsd,
    /// `[b, s, h, d]`: the head squeezed between the sequence and head-dim ranges.
    Bshd,
}

/// FlashAttention forward over 4-D tensors (head dim 64, 64 query rows per
/// block, 128 threads, f16), with its LSE `[b, h, s]`, as the macro lowers
/// `tests/kernels/ndtile.rs::attention_bhsd` / `attention_bshd`: the two
/// kernels differ only in the layout of q, k, v and o.
/// `attention_4d_sized(layout, 64, 64, 64, 128)`.
pub fn attention_4d_text(layout: Layout4d) -> String {
    attention_4d_sized(layout, 64, 64, 64, 128)
}

/// [`attention_4d_text`] with head dim `d`, `bm` query rows and `bn` keys
/// per block over `threads` threads, as the macro lowers the kernel with
/// `consts(BM = bm, BN = bn, D = d)` (`attention_bhsd_d128` /
/// `attention_bshd_d128` of `tests/kernels/ndtile.rs` are `(128, 128, 64,
/// 256)` and `(128, 128, 128, 256)`).
pub fn attention_4d_sized(layout: Layout4d, d: i64, bm: i64, bn: i64, threads: u32) -> String {
    let (name, dims, q_shape, k_shape, q_tile, k_tile) = match layout {
        Layout4d::Bhsd => (
            "bhsd",
            "%0 B, %1 H, %2 SQ, %3 SK",
            format!("B, H, SQ, {d}"),
            format!("B, H, SK, {d}"),
            format!("bz, hy, bx * {bm}.., 0.."),
            format!("bz, hy, kb * {bn}.., 0.."),
        ),
        Layout4d::Bshd => (
            "bshd",
            "%0 B, %1 SQ, %2 H, %3 SK",
            format!("B, SQ, H, {d}"),
            format!("B, SK, H, {d}"),
            format!("bz, bx * {bm}.., hy, 0.."),
            format!("bz, kb * {bn}.., hy, 0.."),
        ),
    };
    let suffix = if (d, bm, bn, threads) == (64, 64, 64, 128) { String::new() } else { format!("_d{d}") };
    let (bm1, bn1) = (bm - 1, bn - 1);
    format!(
        "kernel attention_{name}{suffix}<{dims}>(@0 q: &f16[{q_shape}], @1 k: &f16[{k_shape}], @2 v: &f16[{k_shape}], @3 o: &mut f16[{q_shape}], @4 lse: &mut f32[B, H, SQ], %4 scale: f32) threads={threads} grid=((SQ + {bm1}) / {bm}, H, B) {{
  %5 bx = block_idx.x
  %6 hy = block_idx.y
  %7 bz = block_idx.z
  @5 q_s: shared f16[{bm}, {d}]
  @6 k_s: shared f16[{bn}, {d}]
  @7 v_s: shared f16[{bn}, {d}]
  @8 s: fragment f32[{bm}, {bn}]
  @9 p: fragment f16[{bm}, {bn}]
  @10 acc: fragment f32[{bm}, {d}]
  @11 m: fragment f32[{bm}]
  @12 m_prev: fragment f32[{bm}]
  @13 l: fragment f32[{bm}]
  @14 row_sum: fragment f32[{bm}]
  copy q[{q_tile}] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %8 kb in pipelined(2) 0..(SK + {bn1}) / {bn} {{
    copy k[{k_tile}] -> k_s
    copy v[{k_tile}] -> v_s
    gemm q_s, k_s.t -> s, clear, policy=full_row
    for %9 i in parallel 0..{bm} {{
      for %10 j in parallel 0..{bn} {{
        if kb * {bn} + %10 >= SK {{
          s[%9, %10] = -inf
        }}
      }}
    }}
    copy m -> m_prev
    reduce.max s -> m, dim=1, keep
    for %11 i in parallel 0..{bm} {{
      for %12 j in parallel 0..{bn} {{
        s[%11, %12] = exp2((s[%11, %12] - m[%11]) * scale)
      }}
    }}
    reduce.sum s -> row_sum, dim=1
    for %13 i in parallel 0..{bm} {{
      l[%13] = l[%13] * exp2((m_prev[%13] - m[%13]) * scale) + row_sum[%13]
    }}
    for %14 i in parallel 0..{bm} {{
      for %15 j in parallel 0..{d} {{
        acc[%14, %15] = acc[%14, %15] * exp2((m_prev[%14] - m[%14]) * scale)
      }}
    }}
    copy s -> p
    gemm p, v_s -> acc, policy=full_row
  }}
  for %16 i in parallel 0..{bm} {{
    for %17 j in parallel 0..{d} {{
      acc[%16, %17] = acc[%16, %17] / l[%16]
    }}
  }}
  for %18 i in parallel 0..{bm} {{
    m_prev[%18] = (m[%18] * scale + log2(l[%18])) * 0.6931472
  }}
  copy acc -> o[{q_tile}]
  copy m_prev -> lse[bz, hy, bx * {bm}..]
}}"
    )
}

/// FlashAttention forward as `examples/kernels/flash_attention.rs` lowers
/// it, in `layout` (f16, head dim `d`, `bm` query rows and `bn` keys per
/// block over `threads` threads, `causal` a scalar): the last query blocks
/// first, the key loop cut at the diagonal aligned to the bottom-right
/// corner (`kv_blocks`), the mask only on the blocks that cross it or the
/// end of the keys, rows that see no key giving o = 0 and lse = −∞. Its
/// `[b, h, s, d]` text is the one `tile-ir/tests/hopper_wsloop_persistent_sim.rs`
/// writes out.
pub fn attention_causal_text(layout: Layout4d, d: i64, bm: i64, bn: i64, threads: u32) -> String {
    let (bm1, bn1) = (bm - 1, bn - 1);
    let (name, dims, q_shape, k_shape, q_tile, k_tile) = match layout {
        Layout4d::Bhsd => (
            "",
            "%0 B, %1 H, %2 SQ, %3 SK",
            format!("B, H, SQ, {d}"),
            format!("B, H, SK, {d}"),
            format!("bz, hy, bx * {bm}.., 0.."),
            format!("bz, hy, kb * {bn}.., 0.."),
        ),
        Layout4d::Bshd => (
            "bshd_",
            "%0 B, %1 SQ, %2 H, %3 SK",
            format!("B, SQ, H, {d}"),
            format!("B, SK, H, {d}"),
            format!("bz, bx * {bm}.., hy, 0.."),
            format!("bz, kb * {bn}.., hy, 0.."),
        ),
    };
    format!(
        "kernel attention_causal_{name}d{d}_{bm}x{bn}_t{threads}<{dims}>(@0 q: &f16[{q_shape}], @1 k: &f16[{k_shape}], @2 v: &f16[{k_shape}], @3 o: &mut f16[{q_shape}], @4 lse: &mut f32[B, H, SQ], %4 scale: f32, %5 causal: i32) threads={threads} grid=((SQ + {bm1}) / {bm}, H, B) {{
  %6 bxl = block_idx.x
  %7 hy = block_idx.y
  %8 bz = block_idx.z
  @5 q_s: shared f16[{bm}, {d}]
  @6 k_s: shared f16[{bn}, {d}]
  @7 v_s: shared f16[{bn}, {d}]
  @8 s: fragment f32[{bm}, {bn}]
  @9 p: fragment f16[{bm}, {bn}]
  @10 acc: fragment f32[{bm}, {d}]
  @11 o_r: fragment f16[{bm}, {d}]
  @12 m: fragment f32[{bm}]
  @13 m_s: fragment f32[{bm}]
  @14 alpha: fragment f32[{bm}]
  @15 l: fragment f32[{bm}]
  @16 row_sum: fragment f32[{bm}]
  let %9 bx: i32 = (SQ + {bm1}) / {bm} - 1 - bxl
  let %10 diag: i32 = SK - SQ
  let %11 last: i32 = (bx + 1) * {bm} + diag
  let %12 kv_blocks: i32 = select(causal != 0, max(0, min((SK + {bn1}) / {bn}, (last + {bn1}) / {bn})), (SK + {bn1}) / {bn})
  copy q[{q_tile}] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %13 kb in pipelined(2) 0..kv_blocks {{
    copy k[{k_tile}] -> k_s
    copy v[{k_tile}] -> v_s
    gemm q_s, k_s.t -> s, clear, policy=full_row
    if ((kb + 1) * {bn} > SK) | ((causal != 0) & ((kb + 1) * {bn} > bx * {bm} + diag + 1)) {{
      for %14 i in parallel 0..{bm} {{
        for %15 j in parallel 0..{bn} {{
          if (kb * {bn} + %15 >= SK) | ((causal != 0) & (kb * {bn} + %15 > bx * {bm} + %14 + diag)) {{
            s[%14, %15] = -inf
          }}
        }}
      }}
    }}
    copy m -> alpha
    reduce.max s -> m, dim=1, keep
    for %16 i in parallel 0..{bm} {{
      m_s[%16] = select(m[%16] == -inf, 0.0, m[%16] * scale)
      alpha[%16] = exp2(alpha[%16] * scale - m_s[%16])
    }}
    for %17 i in parallel 0..{bm} {{
      for %18 j in parallel 0..{bn} {{
        s[%17, %18] = exp2(s[%17, %18] * scale - m_s[%17])
      }}
    }}
    reduce.sum s -> row_sum, dim=1
    for %19 i in parallel 0..{bm} {{
      l[%19] = l[%19] * alpha[%19] + row_sum[%19]
    }}
    for %20 i in parallel 0..{bm} {{
      for %21 j in parallel 0..{d} {{
        acc[%20, %21] = acc[%20, %21] * alpha[%20]
      }}
    }}
    copy s -> p
    gemm p, v_s -> acc, policy=full_row
  }}
  for %22 i in parallel 0..{bm} {{
    alpha[%22] = select(l[%22] == 0.0, 0.0, 1.0 / l[%22])
    m_s[%22] = select(l[%22] == 0.0, -inf, (m[%22] * scale + log2(l[%22])) * 0.6931472)
  }}
  for %23 i in parallel 0..{bm} {{
    for %24 j in parallel 0..{d} {{
      o_r[%23, %24] = (acc[%23, %24] * alpha[%23]) as f16
    }}
  }}
  copy o_r -> o[{q_tile}]
  copy m_s -> lse[bz, hy, bx * {bm}..]
}}"
    )
}

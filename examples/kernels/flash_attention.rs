//! FlashAttention forward kernels (issue 9, items 4 and 5), shared by
//! `examples/flash_attention.rs` (host API, check, benchmark) and the tests
//! (`tests/flash_attention_interp.rs`, `tests/gpu_flash_attention.rs`).
//!
//! One generic kernel source per layout (`[b, h, s, d]` and `[b, s, h, d]`),
//! `<T, D, THREADS, BM, BN, STAGES>`: element type, head dim, threads, query
//! and key blocks, stages. A `macro_rules!` around each source declares it
//! under several attributes (the instances that fit every target, those
//! that are sm_90a only, the tune example's sweep). Every instance
//! computes, for each (batch, head, query row `i`),
//!
//! `o[i] = Σ_j softmax_j(scale · q_i·k_j) v_j` over the keys `j` it sees, and
//! `lse[i] = ln Σ_j exp(scale · q_i·k_j)` (natural log, f32),
//!
//! with grouped-query attention (`H` query heads over `HKV` key/value heads,
//! `HKV` dividing `H`: query head `h` reads key/value head `h / (H / HKV)`),
//! any `SQ` and `SK`. Causal (`causal ≠ 0`): row `i` sees the keys
//! `j ≤ i + SK − SQ` (the diagonal aligned to the bottom-right corner, as
//! FlashAttention 2 and PyTorch's `causal_lower_right` do). A row that sees
//! no key (causal with `SQ > SK`) gets `o = 0` and `lse = −∞`, never NaN.
//!
//! The schedule of the work (what makes causal fast, item 4): the key loop
//! of query block `bx` stops at the last key block that its last row sees
//! (`kv_blocks`: blocks entirely above the diagonal are never loaded or
//! computed), and only the blocks that cross the diagonal or the end of the
//! keys run the mask (a block-uniform `if` around it); the others go
//! straight from Q·Kᵀ to the softmax. Query blocks run last first (the
//! longest causal rows start first, the short ones fill the tail). The loop
//! is one top-level `pipelined` loop whose copies are the K and V tiles, so
//! a warp-specialized schedule can take it. Masked scores are −∞ and the
//! running max `m` stays −∞ only for rows that have seen no key; `m_s` (the
//! max times the scale, 0 for such rows) keeps `exp2(−∞ − (−∞))` out of the
//! sums.
//!
//! `scale` is the softmax scale times log2(e) (the kernel works in base 2).
#![allow(dead_code)]
use tile::prelude::*;

/// Declares one generic attention kernel `$name` (the module docs say what
/// it computes): `$q_dims` the dims of q and o, `$kv_dims` those of k and v,
/// `$q_tile` the tile of q and o a block takes, `$kv_tile` the tile of k and
/// v at key block `kb`, in the layout's order; `$attr` the `tile_kernel`
/// attribute. The body is written once for both layouts
/// (`attention_bhsd!`, `attention_bshd!`).
macro_rules! attention_kernel {
    (
        $(#[$doc:meta])*
        $name:ident,
        q: [$($q_dims:tt)*],
        kv: [$($kv_dims:tt)*],
        q_tile: [$($q_tile:tt)*],
        kv_tile: [$($kv_tile:tt)*],
        attr: ($($attr:tt)*)
    ) => {
        $(#[$doc])*
        #[tile_kernel($($attr)*)]
        pub fn $name<T: Float16, const D: usize, const THREADS: usize, const BM: usize, const BN: usize, const STAGES: usize>(
            q: &Tensor<T, $($q_dims)*>,
            k: &Tensor<T, $($kv_dims)*>,
            v: &Tensor<T, $($kv_dims)*>,
            o: &mut Tensor<T, $($q_dims)*>,
            lse: &mut Tensor<f32, B, H, SQ>,
            scale: f32,
            causal: i32,
        ) {
            let (bx_launch, hy, bz) = grid(cdiv(SQ, BM), H, B);
            // The last query blocks first: with causal masking they have the most keys.
            let bx = cdiv(SQ, BM) - 1 - bx_launch;
            let hk = hy / (H / HKV);
            let mut q_s = shared::<T, BM, D>();
            let mut k_s = shared::<T, BN, D>();
            let mut v_s = shared::<T, BN, D>();
            let mut s = fragment::<f32, BM, BN>();
            let mut p = fragment::<T, BM, BN>();
            let mut acc = fragment::<f32, BM, D>();
            let mut o_r = fragment::<T, BM, D>();
            let mut m = fragment::<f32, BM>();
            let mut m_s = fragment::<f32, BM>();
            let mut alpha = fragment::<f32, BM>();
            let mut l = fragment::<f32, BM>();
            let mut row_sum = fragment::<f32, BM>();
            let mut seen = fragment::<i32, BM>();
            let mut m_blk = fragment::<f32, BM>();
            // The diagonal: row i sees keys j <= i + diag.
            let diag = SK - SQ;
            let last = (bx + 1) * BM + diag;
            let kv_blocks = if causal != 0 { max(0, min(cdiv(SK, BN), cdiv(last, BN))) } else { cdiv(SK, BN) };
            copy(q.tile([$($q_tile)*]), &mut q_s);
            clear(&mut acc);
            clear(&mut l);
            fill(&mut m, f32::NEG_INFINITY);
            for kb in pipelined(kv_blocks, STAGES) {
                copy(k.tile([$($kv_tile)*]), &mut k_s);
                copy(v.tile([$($kv_tile)*]), &mut v_s);
                gemm(&q_s, &k_s.t(), &mut s).clear().policy(FullRow);
                if (kb + 1) * BN > SK || (causal != 0 && (kb + 1) * BN > bx * BM + diag + 1) {
                    // Row i sees this block's keys j < seen[i]: one compare per score.
                    for i in parallel(BM) {
                        seen[i] = if causal != 0 { min(SK, bx * BM + i + diag + 1) - kb * BN } else { SK - kb * BN };
                    }
                    for (i, j) in parallel((BM, BN)) {
                        if j >= seen[i] {
                            s[(i, j)] = f32::NEG_INFINITY;
                        }
                    }
                }
                if D > 128 {
                    // m is the rows' reference maximum: it moves (and O is rescaled)
                    // only where a block's scaled maximum passes it by more than 8
                    // (log2 units), so the exponentials stay below 2⁸ and most
                    // blocks leave O as it is (exact: the final 1/l cancels m).
                    reduce_max(&s, &mut m_blk, 1);
                    for i in parallel(BM) {
                        alpha[i] = 1.0;
                        if (m_blk[i] - m[i]) * scale > 8.0 {
                            alpha[i] = exp2((m[i] - m_blk[i]) * scale);
                            m[i] = m_blk[i];
                        }
                        m_s[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] * scale };
                    }
                } else {
                    copy(&m, &mut alpha);
                    reduce_max(&s, &mut m, 1).keep();
                    for i in parallel(BM) {
                        m_s[i] = if m[i] == f32::NEG_INFINITY { 0.0 } else { m[i] * scale };
                        alpha[i] = exp2(alpha[i] * scale - m_s[i]);
                    }
                }
                for (i, j) in parallel((BM, BN)) {
                    s[(i, j)] = exp2(s[(i, j)] * scale - m_s[i]);
                }
                reduce_sum(&s, &mut row_sum, 1);
                for i in parallel(BM) {
                    l[i] = l[i] * alpha[i] + row_sum[i];
                }
                // Past head dim 128 (64 multiplications a row) the lazy maximum
                // and a row's branch around its rescale pay; at 64 and 128 the
                // branch costs more than it saves (H200, BENCHMARKS.md).
                if D > 128 {
                    for (i, j) in parallel((BM, D)) {
                        if alpha[i] != 1.0 {
                            acc[(i, j)] = acc[(i, j)] * alpha[i];
                        }
                    }
                } else {
                    for (i, j) in parallel((BM, D)) {
                        acc[(i, j)] = acc[(i, j)] * alpha[i];
                    }
                }
                copy(&s, &mut p);
                gemm(&p, &v_s, &mut acc).policy(FullRow);
            }
            for i in parallel(BM) {
                alpha[i] = if l[i] == 0.0 { 0.0 } else { 1.0 / l[i] };
                m_s[i] = if l[i] == 0.0 { f32::NEG_INFINITY } else { (m[i] * scale + log2(l[i])) * 0.6931472 };
            }
            for (i, j) in parallel((BM, D)) {
                o_r[(i, j)] = (acc[(i, j)] * alpha[i]) as T;
            }
            copy(&o_r, o.tile([$($q_tile)*]));
            copy(&m_s, lse.tile([bz, hy, bx * BM..]));
        }
    };
}

/// Declares the generic `[b, h, s, d]` kernel `$name` with the attribute
/// `$attr` (its `instances(..)`, and `archs` for instances past sm_80's
/// shared memory): one source for every instance, here and in
/// `examples/flash_attention_tune.rs`.
macro_rules! attention_bhsd {
    ($name:ident, $($attr:tt)*) => {
        attention_kernel!(
            /// FlashAttention forward over `[b, h, s, d]` tensors (see the module docs):
            /// q `[B, H, SQ, D]`, k and v `[B, HKV, SK, D]`, o `[B, H, SQ, D]`,
            /// lse `[B, H, SQ]`; element type `T`, head dim `D`, `THREADS` threads,
            /// query blocks of `BM` rows, key blocks of `BN`, `STAGES` stages of K and V.
            $name,
            q: [B, H, SQ, D],
            kv: [B, HKV, SK, D],
            q_tile: [bz, hy, bx * BM.., ..],
            kv_tile: [bz, hk, kb * BN.., ..],
            attr: ($($attr)*)
        );
    };
}

/// Declares the generic `[b, s, h, d]` kernel `$name` with the attribute
/// `$attr` (its `instances(..)`, and `archs` for instances past sm_80's
/// shared memory): the `[b, h, s, d]` source with every tile squeezing `b`
/// and `h` around the sequence range (rows `h·d` elements apart).
macro_rules! attention_bshd {
    ($name:ident, $($attr:tt)*) => {
        attention_kernel!(
            /// FlashAttention forward over `[b, s, h, d]` tensors (see the module docs):
            /// q `[B, SQ, H, D]`, k and v `[B, SK, HKV, D]`, o `[B, SQ, H, D]`,
            /// lse `[B, H, SQ]`; element type `T`, head dim `D`, `THREADS` threads,
            /// query blocks of `BM` rows, key blocks of `BN`, `STAGES` stages of K and V.
            $name,
            q: [B, SQ, H, D],
            kv: [B, SK, HKV, D],
            q_tile: [bz, bx * BM.., hy, ..],
            kv_tile: [bz, kb * BN.., hk, ..],
            attr: ($($attr)*)
        );
    };
}

// The instances, `<T, D, THREADS, BM, BN, STAGES>` per head dim, the same
// for both layouts (the fastest of `examples/flash_attention_tune.rs` on the
// H200, BENCHMARKS.md): d64 128 threads, 64 x 64, and 64 x 128 (causal d64
// on sm_90a); d128 256 threads (two warpgroups of 64 rows), 128 x 128; d256
// 256 threads, 128 x 80 on sm_90a only (FA3's: 224 KiB of shared memory; 5 %
// faster than 128 x 64 on the H200, session 16), and 128 threads, 64 x 32
// where that does not fit (sm_80). d64 on sm_90a: FA3's schedule, 384 threads (three
// consumer warpgroups of 64 rows under the warp-specialized loop), 192 x
// 128 (no overlap inside a warpgroup: the twin S or the deferred P·V
// spill in 160 registers), and 192 x 64 (P·V deferred) beside it
// (`Tiles::Blocks`); sm_80's mma.sync layouts take no 12 warps.
attention_bhsd!(
    fa_bhsd,
    threads = THREADS,
    instances(
        (f16, 64, 128, 64, 64, 2),
        (f16, 64, 128, 64, 128, 2),
        (bf16, 64, 128, 64, 64, 2),
        (bf16, 64, 128, 64, 128, 2),
        (f16, 128, 256, 128, 128, 2),
        (bf16, 128, 256, 128, 128, 2),
        (f16, 256, 128, 64, 32, 2),
        (bf16, 256, 128, 64, 32, 2),
    )
);
attention_bhsd!(
    fa_bhsd_sm90,
    threads = THREADS,
    archs = "sm_90a",
    instances(
        (f16, 256, 256, 128, 80, 2),
        (bf16, 256, 256, 128, 80, 2),
        (f16, 64, 384, 192, 128, 2),
        (bf16, 64, 384, 192, 128, 2),
        (f16, 64, 384, 192, 64, 2),
        (bf16, 64, 384, 192, 64, 2),
    )
);
attention_bshd!(
    fa_bshd,
    threads = THREADS,
    instances(
        (f16, 64, 128, 64, 64, 2),
        (f16, 64, 128, 64, 128, 2),
        (bf16, 64, 128, 64, 64, 2),
        (bf16, 64, 128, 64, 128, 2),
        (f16, 128, 256, 128, 128, 2),
        (bf16, 128, 256, 128, 128, 2),
        (f16, 256, 128, 64, 32, 2),
        (bf16, 256, 128, 64, 32, 2),
    )
);
attention_bshd!(
    fa_bshd_sm90,
    threads = THREADS,
    archs = "sm_90a",
    instances(
        (f16, 256, 256, 128, 80, 2),
        (bf16, 256, 256, 128, 80, 2),
        (f16, 64, 384, 192, 128, 2),
        (bf16, 64, 384, 192, 128, 2),
        (f16, 64, 384, 192, 64, 2),
        (bf16, 64, 384, 192, 64, 2),
    )
);

/// The head dims there are instances for.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The memory layout of q, k, v and o.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `[batch, heads, seq, head_dim]` (PyTorch SDPA's).
    Bhsd,
    /// `[batch, seq, heads, head_dim]` (FlashAttention's).
    Bshd,
}

impl Layout {
    /// The shape of a tensor of this layout.
    pub fn shape(self, b: usize, h: usize, s: usize, d: usize) -> [usize; 4] {
        match self {
            Layout::Bhsd => [b, h, s, d],
            Layout::Bshd => [b, s, h, d],
        }
    }
    /// The flat index of element `(b, h, s, c)` in a tensor of `shape`.
    pub fn index(self, shape: &[usize], b: usize, h: usize, s: usize, c: usize) -> usize {
        match self {
            Layout::Bhsd => ((b * shape[1] + h) * shape[2] + s) * shape[3] + c,
            Layout::Bshd => ((b * shape[1] + s) * shape[2] + h) * shape[3] + c,
        }
    }
    /// `(b, h, s, d)` of a tensor's shape in this layout.
    pub fn dims(self, shape: &[usize]) -> (usize, usize, usize, usize) {
        match self {
            Layout::Bhsd => (shape[0], shape[1], shape[2], shape[3]),
            Layout::Bshd => (shape[0], shape[2], shape[1], shape[3]),
        }
    }
}

/// What [`forward`] computes besides `o`.
#[derive(Debug)]
pub struct Options<'a> {
    /// The layout of q, k, v and o.
    pub layout: Layout,
    /// Causal masking, aligned to the bottom-right corner: query row `i`
    /// sees keys `j <= i + s_k - s_q` (FlashAttention 2's convention and
    /// PyTorch's `causal_lower_right`; PyTorch SDPA's `is_causal=True` is
    /// the same when `s_q == s_k`).
    pub causal: bool,
    /// The softmax scale; `None` is `1/sqrt(head_dim)`.
    pub scale: Option<f32>,
    /// Where to write the log-sum-exp of each row, `[b, h, s_q]` f32
    /// (natural log; −∞ for a row that sees no key). `None`: not returned
    /// (a scratch tensor is allocated for the kernel).
    pub lse: Option<&'a mut DeviceTensor<f32>>,
    /// The tile shapes: [`Tiles::Auto`] picks by the device.
    pub tiles: Tiles,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options { layout: Layout::Bhsd, causal: false, scale: None, lse: None, tiles: Tiles::Auto }
    }
}

/// The launch function of one instance.
pub type Launch<T> = fn(
    &Stream,
    &DeviceTensor<T>,
    &DeviceTensor<T>,
    &DeviceTensor<T>,
    &mut DeviceTensor<T>,
    &mut DeviceTensor<f32>,
    f32,
    i32,
) -> tile::Result<()>;

/// Which tile shapes [`forward`] uses.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Tiles {
    /// Hopper's on a GPU of compute capability 9.x and in the interpreter,
    /// else the portable ones.
    #[default]
    Auto,
    /// The fastest on the H200 (some instances are sm_90a only).
    Hopper,
    /// Tiles that fit every target's shared memory (sm_80's).
    Portable,
    /// The instance of the head dim with query blocks of `.0` rows and key
    /// blocks of `.1` (to compare instances: [`AttentionElement::blocks`]
    /// lists them); an `Error::Shape` when there is none.
    Blocks(usize, usize),
}

/// The element types there are instances for (f16, bf16).
pub trait AttentionElement: Element {
    /// The instance for `layout`, head dim `d` and Hopper's tiles (else the
    /// portable ones), with its kernel's metadata, or `None`.
    fn instance(layout: Layout, d: usize, hopper: bool) -> Option<(Launch<Self>, &'static tile::KernelMeta)> {
        // Query and key blocks: FA3's 192 x 128 at d64 and 128 x 80 at d256
        // (sm_90a only), 128 x 128 at d128; sm_80's shared memory takes
        // 64 x 64 and 64 x 32.
        let chosen = match (d, hopper) {
            (64, true) => (192, 128),
            (64, false) => (64, 64),
            (128, _) => (128, 128),
            (256, true) => (128, 80),
            (256, false) => (64, 32),
            _ => return None,
        };
        Self::blocks(layout, d).into_iter().find(|x| x.0 == chosen).map(|(_, l, m)| (l, m))
    }
    /// Every instance for `layout` and head dim `d`: its query and key
    /// blocks, its launch and metadata.
    fn blocks(layout: Layout, d: usize) -> Vec<((usize, usize), Launch<Self>, &'static tile::KernelMeta)>;
    /// The instance for [`Options::tiles`] on `stream`, for causal
    /// attention or not.
    fn instance_for(
        stream: &Stream,
        layout: Layout,
        d: usize,
        tiles: Tiles,
        causal: bool,
    ) -> Option<(Launch<Self>, &'static tile::KernelMeta)> {
        let blocks = |bm, bn| Self::blocks(layout, d).into_iter().find(|x| x.0 == (bm, bn)).map(|(_, l, m)| (l, m));
        match tiles {
            Tiles::Blocks(bm, bn) => blocks(bm, bn),
            // Causal d64 on Hopper: the 64 x 128 blocks (the TMA-copy pipeline,
            // several blocks per SM) beat FA3's 192 x 128 (329 against 305
            // TFLOPS on the H200, BENCHMARKS.md session 11: a 192-row block
            // masks more of its keys on the diagonal and ends the tail later)
            // and 64 x 64 (356 against 340, session 16).
            _ if d == 64 && causal && hopper_tiles(stream, tiles) => blocks(64, 128),
            _ => Self::instance(layout, d, hopper_tiles(stream, tiles)),
        }
    }
}

/// The launch and metadata of instance `<$g>` of the portable (`fa_bhsd`,
/// `fa_bshd`) or the sm_90a-only (`fa_*_sm90`) kernel of `$layout`.
macro_rules! layout_instance {
    ($layout:expr, portable, $($g:tt)*) => {
        match $layout {
            Layout::Bhsd => (fa_bhsd::launch::<$($g)*> as Launch<Self>, fa_bhsd::meta::<$($g)*>()),
            Layout::Bshd => (fa_bshd::launch::<$($g)*> as Launch<Self>, fa_bshd::meta::<$($g)*>()),
        }
    };
    ($layout:expr, sm90, $($g:tt)*) => {
        match $layout {
            Layout::Bhsd => (fa_bhsd_sm90::launch::<$($g)*> as Launch<Self>, fa_bhsd_sm90::meta::<$($g)*>()),
            Layout::Bshd => (fa_bshd_sm90::launch::<$($g)*> as Launch<Self>, fa_bshd_sm90::meta::<$($g)*>()),
        }
    };
}

macro_rules! instances {
    ($t:ty) => {
        impl AttentionElement for $t {
            fn blocks(layout: Layout, d: usize) -> Vec<((usize, usize), Launch<Self>, &'static tile::KernelMeta)> {
                let all = match d {
                    64 => vec![
                        ((64, 64), layout_instance!(layout, portable, $t, 64, 128, 64, 64, 2)),
                        ((64, 128), layout_instance!(layout, portable, $t, 64, 128, 64, 128, 2)),
                        ((192, 128), layout_instance!(layout, sm90, $t, 64, 384, 192, 128, 2)),
                        ((192, 64), layout_instance!(layout, sm90, $t, 64, 384, 192, 64, 2)),
                    ],
                    128 => vec![((128, 128), layout_instance!(layout, portable, $t, 128, 256, 128, 128, 2))],
                    256 => vec![
                        ((64, 32), layout_instance!(layout, portable, $t, 256, 128, 64, 32, 2)),
                        ((128, 80), layout_instance!(layout, sm90, $t, 256, 256, 128, 80, 2)),
                    ],
                    _ => vec![],
                };
                all.into_iter().map(|(b, (l, m))| (b, l, m)).collect()
            }
        }
    };
}
instances!(f16);
instances!(bf16);

/// Whether [`forward`] on `stream` with `tiles` takes Hopper's tiles.
pub fn hopper_tiles(stream: &Stream, tiles: Tiles) -> bool {
    match tiles {
        Tiles::Auto | Tiles::Blocks(..) => stream.device().compute_capability().is_none_or(|cc| cc.0 == 9),
        Tiles::Hopper => true,
        Tiles::Portable => false,
    }
}

fn shape_error(param: &str, message: String) -> Error {
    Error::Shape { kernel: "flash_attention::forward".into(), param: param.into(), dim: None, message }
}

/// FlashAttention forward: `o = softmax(scale · q kᵀ [+ causal mask]) v`
/// per batch and head, for q `[b, h, s_q, d]`, k and v `[b, h_kv, s_k, d]`
/// (or `[b, s, h, d]` with [`Layout::Bshd`]), o shaped as q; `h_kv` divides
/// `h` (grouped-query attention: query head `i` reads key/value head
/// `i / (h / h_kv)`; `h_kv == h` is multi-head attention). Picks the kernel
/// instance for the element type, the layout and the head dim (64, 128 or
/// 256). Errors: a shape that does not fit these rules or a head dim without
/// an instance (`Error::Shape`), and anything the launch refuses.
pub fn forward<T: AttentionElement>(
    stream: &Stream,
    q: &DeviceTensor<T>,
    k: &DeviceTensor<T>,
    v: &DeviceTensor<T>,
    o: &mut DeviceTensor<T>,
    options: Options<'_>,
) -> tile::Result<()> {
    let layout = options.layout;
    for (name, t) in [("q", q.shape()), ("k", k.shape()), ("v", v.shape()), ("o", o.shape())] {
        if t.len() != 4 {
            return Err(shape_error(name, format!("expected a 4-D tensor ({layout:?}), got shape {t:?}")));
        }
    }
    let (b, h, sq, d) = layout.dims(q.shape());
    let (bk, hkv, _, dk) = layout.dims(k.shape());
    if k.shape() != v.shape() {
        return Err(shape_error("v", format!("v has shape {:?}, k has {:?}: they must agree", v.shape(), k.shape())));
    }
    if o.shape() != q.shape() {
        return Err(shape_error("o", format!("o has shape {:?}, q has {:?}: they must agree", o.shape(), q.shape())));
    }
    if bk != b || dk != d {
        return Err(shape_error(
            "k",
            format!("k has batch {bk} and head dim {dk}, q has batch {b} and head dim {d}: they must agree"),
        ));
    }
    if hkv == 0 || h % hkv != 0 {
        return Err(shape_error(
            "k",
            format!("k and v have {hkv} heads, q has {h}: the key/value heads must divide the query heads"),
        ));
    }
    let Some((launch, _)) = T::instance_for(stream, layout, d, options.tiles, options.causal) else {
        let blocks = match options.tiles {
            Tiles::Blocks(bm, bn) => format!(" with {bm} x {bn} blocks"),
            _ => String::new(),
        };
        return Err(shape_error(
            "q",
            format!("no {:?} instance for head dim {d}{blocks}; there are head dims {HEAD_DIMS:?}", T::DTYPE),
        ));
    };
    let scale = options.scale.unwrap_or(1.0 / (d as f32).sqrt()) * std::f32::consts::LOG2_E;
    let causal = i32::from(options.causal);
    match options.lse {
        Some(lse) => {
            if lse.shape() != [b, h, sq] {
                return Err(shape_error("lse", format!("lse has shape {:?}, expected {:?}", lse.shape(), [b, h, sq])));
            }
            launch(stream, q, k, v, o, lse, scale, causal)
        }
        None => {
            let mut lse = DeviceTensor::<f32>::zeros(stream, &[b, h, sq])?;
            launch(stream, q, k, v, o, &mut lse, scale, causal)
        }
    }
}

/// Attention in f64 for one (batch, head) row block: the reference of the
/// tests and the example. Returns `o` (in `layout`, shaped as q) and the LSE
/// `[b, h, s_q]` (natural log, −∞ and `o = 0` for rows that see no key), for
/// the query rows `rows` of every (batch, head) only (others are 0), so that
/// large shapes can be checked on a sample.
#[allow(clippy::too_many_arguments)]
pub fn reference<T: Element>(
    layout: Layout,
    q: &[T],
    k: &[T],
    v: &[T],
    q_shape: &[usize],
    k_shape: &[usize],
    causal: bool,
    scale: f64,
    rows: &[(usize, usize, usize)],
) -> (Vec<f64>, Vec<f64>) {
    let (b, h, sq, d) = layout.dims(q_shape);
    let (_, hkv, sk, _) = layout.dims(k_shape);
    let mut out = vec![0.0; b * h * sq * d];
    let mut lse = vec![0.0; b * h * sq];
    let mut p = vec![0.0; sk];
    for &(bi, hi, i) in rows {
        let hk = hi / (h / hkv);
        // Causal: row i sees keys j <= i + sk - sq.
        let seen = if causal { (i + sk + 1).saturating_sub(sq).min(sk) } else { sk };
        let mut max = f64::NEG_INFINITY;
        for (j, pj) in p.iter_mut().enumerate().take(seen) {
            *pj = (0..d)
                .map(|c| {
                    q[layout.index(q_shape, bi, hi, i, c)].to_f64() * k[layout.index(k_shape, bi, hk, j, c)].to_f64()
                })
                .sum::<f64>()
                * scale;
            max = max.max(*pj);
        }
        let mut sum = 0.0;
        for pj in p.iter_mut().take(seen) {
            *pj = (*pj - max).exp();
            sum += *pj;
        }
        lse[(bi * h + hi) * sq + i] = if seen == 0 { f64::NEG_INFINITY } else { max + sum.ln() };
        for c in 0..d {
            let o = if seen == 0 {
                0.0
            } else {
                (0..seen).map(|j| p[j] * v[layout.index(k_shape, bi, hk, j, c)].to_f64()).sum::<f64>() / sum
            };
            out[layout.index(q_shape, bi, hi, i, c)] = o;
        }
    }
    (out, lse)
}

/// One attention problem: shapes, layout, masking.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Case {
    pub layout: Layout,
    pub b: usize,
    pub h: usize,
    pub h_kv: usize,
    pub s_q: usize,
    pub s_k: usize,
    pub d: usize,
    pub causal: bool,
}

impl Case {
    /// FLOPs of the two matrix products, `4·b·h·s_q·s_k·d`, halved when
    /// causal (the convention of FlashAttention's benchmarks).
    pub fn flops(&self) -> f64 {
        let f = 4.0 * (self.b * self.h) as f64 * self.s_q as f64 * self.s_k as f64 * self.d as f64;
        if self.causal {
            f / 2.0
        } else {
            f
        }
    }
}

/// Random inputs of a case on `stream`: q, k, v (host copies and device
/// tensors), and o poisoned with NaN and lse with NaN.
pub struct Inputs<T: Element> {
    pub q: Vec<T>,
    pub k: Vec<T>,
    pub v: Vec<T>,
    pub dq: DeviceTensor<T>,
    pub dk: DeviceTensor<T>,
    pub dv: DeviceTensor<T>,
    pub o: DeviceTensor<T>,
    pub lse: DeviceTensor<f32>,
}

impl<T: AttentionElement> Inputs<T> {
    pub fn new(stream: &Stream, c: &Case, seed: u64) -> tile::Result<Self> {
        let mut rng = crate::common::Rng::new(seed);
        let mut random = |n: usize, lo: f32, hi: f32| -> Vec<T> {
            rng.vec(n, lo, hi).into_iter().map(|x| T::from_f64(x as f64)).collect()
        };
        let (q_shape, k_shape) = (c.layout.shape(c.b, c.h, c.s_q, c.d), c.layout.shape(c.b, c.h_kv, c.s_k, c.d));
        let q = random(c.b * c.h * c.s_q * c.d, -2.0, 2.0);
        let k = random(c.b * c.h_kv * c.s_k * c.d, -2.0, 2.0);
        let v = random(c.b * c.h_kv * c.s_k * c.d, -1.0, 1.0);
        let dq = DeviceTensor::from_slice(stream, &q, &q_shape)?;
        let dk = DeviceTensor::from_slice(stream, &k, &k_shape)?;
        let dv = DeviceTensor::from_slice(stream, &v, &k_shape)?;
        let o = DeviceTensor::from_slice(stream, &vec![T::from_f64(f64::NAN); q.len()], &q_shape)?;
        let lse = DeviceTensor::from_slice(stream, &vec![f32::NAN; c.b * c.h * c.s_q], &[c.b, c.h, c.s_q])?;
        Ok(Inputs { q, k, v, dq, dk, dv, o, lse })
    }

    /// Sets the values of keys `from..` to NaN (in the host copy and on the
    /// device): a query row that never sees those keys must not read them,
    /// or its output is NaN (`0 · NaN`).
    pub fn poison_v(&mut self, stream: &Stream, c: &Case, from: usize) -> tile::Result<()> {
        let k_shape = c.layout.shape(c.b, c.h_kv, c.s_k, c.d);
        for (b, h, j, ch) in (0..c.b).flat_map(|b| {
            (0..c.h_kv).flat_map(move |h| (from..c.s_k).flat_map(move |j| (0..c.d).map(move |ch| (b, h, j, ch))))
        }) {
            self.v[c.layout.index(&k_shape, b, h, j, ch)] = T::from_f64(f64::NAN);
        }
        self.dv = DeviceTensor::from_slice(stream, &self.v, &k_shape)?;
        Ok(())
    }

    /// Runs [`forward`] on these inputs (LSE written).
    pub fn run(&mut self, stream: &Stream, c: &Case) -> tile::Result<()> {
        self.run_with(stream, c, Tiles::Auto)
    }

    /// Runs [`forward`] with `tiles`.
    pub fn run_with(&mut self, stream: &Stream, c: &Case, tiles: Tiles) -> tile::Result<()> {
        let options = Options { layout: c.layout, causal: c.causal, scale: None, lse: Some(&mut self.lse), tiles };
        forward(stream, &self.dq, &self.dk, &self.dv, &mut self.o, options)
    }

    /// Checks o and lse against [`reference`] on `rows` (every row when
    /// `None`): relative L2 error at most `tol` and no element off by more
    /// than `8·tol` (o is at most 1 in magnitude), with −∞ LSE and zero
    /// output exactly where no key is seen. Returns the two errors.
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
                all = (0..c.b).flat_map(|b| (0..c.h).flat_map(move |h| (0..c.s_q).map(move |i| (b, h, i)))).collect();
                &all
            }
        };
        let (q_shape, k_shape) = (c.layout.shape(c.b, c.h, c.s_q, c.d), c.layout.shape(c.b, c.h_kv, c.s_k, c.d));
        let scale = 1.0 / (c.d as f64).sqrt();
        let (o_ref, lse_ref) =
            reference(c.layout, &self.q, &self.k, &self.v, &q_shape, &k_shape, c.causal, scale, rows);
        let o = self.o.to_vec(stream).map_err(|e| e.to_string())?;
        let lse = self.lse.to_vec(stream).map_err(|e| e.to_string())?;
        let (mut got_o, mut want_o, mut got_l, mut want_l) = (vec![], vec![], vec![], vec![]);
        for &(b, h, i) in rows {
            for ch in 0..c.d {
                let at = c.layout.index(&q_shape, b, h, i, ch);
                got_o.push(o[at]);
                want_o.push(o_ref[at]);
            }
            got_l.push(lse[(b * c.h + h) * c.s_q + i]);
            want_l.push(lse_ref[(b * c.h + h) * c.s_q + i]);
        }
        let ctx = |what: &str, e: String| format!("{c:?}: {what}: {e}");
        let e_o = assert_close(&got_o, &want_o, tol).map_err(|e| ctx("o", e))?;
        let e_l = assert_close(&got_l, &want_l, tol / 10.0).map_err(|e| ctx("lse", e))?;
        for (n, (g, w)) in got_o.iter().zip(&want_o).enumerate() {
            let g = g.to_f64();
            if (g - w).abs() > 8.0 * tol {
                let (b, h, i) = rows[n / c.d];
                return Err(ctx("o", format!("row (b {b}, h {h}, i {i}) col {}: got {g}, reference {w}", n % c.d)));
            }
        }
        Ok((e_o, e_l))
    }
}

/// Empty shapes on `stream`'s device: no query rows is nothing to do; no
/// keys gives o = 0 and lse = −∞ (every row sees no key). Panics when not.
pub fn check_empty_shapes(st: &Stream) {
    let t = |shape: &[usize], v: f32| {
        DeviceTensor::from_slice(st, &vec![f16::from_f32(v); shape.iter().product()], shape).unwrap()
    };
    let (q, k) = (t(&[1, 2, 0, 64], 1.0), t(&[1, 2, 5, 64], 1.0));
    let mut o = t(&[1, 2, 0, 64], 1.0);
    forward(st, &q, &k, &k, &mut o, Options::default()).unwrap();
    let (q, k) = (t(&[1, 2, 3, 64], 1.0), t(&[1, 2, 0, 64], 1.0));
    let mut o = t(&[1, 2, 3, 64], f32::NAN);
    let mut lse = DeviceTensor::from_slice(st, &[f32::NAN; 6], &[1, 2, 3]).unwrap();
    forward(st, &q, &k, &k, &mut o, Options { lse: Some(&mut lse), ..Default::default() }).unwrap();
    assert!(o.to_vec(st).unwrap().iter().all(|v| v.to_f32() == 0.0));
    assert!(lse.to_vec(st).unwrap().iter().all(|&v| v == f32::NEG_INFINITY));
}

/// Causal skips the key blocks above the diagonal, on `stream`'s device,
/// for every instance of every head dim ([`AttentionElement::blocks`]):
/// with the values of the keys past the first query block's reach (its
/// last row's key block: `⌈BM / BN⌉ · BN`, `s_q = s_k`) poisoned with NaN,
/// that block's rows are still right (against the reference of the values
/// before the poison), which they would not be if a block past their reach
/// were loaded and masked (`0 · NaN`); the rows from `reach` on see
/// those keys and are not (the check can fail). Panics when not.
pub fn check_causal_never_reads_above_the_diagonal(st: &Stream) {
    let hopper = hopper_tiles(st, Tiles::Auto);
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for d in HEAD_DIMS {
            for ((bm, bn), _, meta) in <f16 as AttentionElement>::blocks(layout, d) {
                // Only what runs here: sm_90a instances need Hopper (or the interpreter).
                if !hopper && meta.targets.iter().all(|t| t.arch == "sm_90a") {
                    continue;
                }
                let reach = bm.div_ceil(bn) * bn;
                let s = 2 * reach.max(bm) + 8;
                let c = Case { layout, b: 1, h: 2, h_kv: 1, s_q: s, s_k: s, d, causal: true };
                let mut x = Inputs::<f16>::new(st, &c, 4).unwrap();
                let clean = x.v.clone();
                x.poison_v(st, &c, reach).unwrap();
                x.run_with(st, &c, Tiles::Blocks(bm, bn)).unwrap();
                // The reference of the values before the poison.
                x.v = clean;
                let rows = |r: std::ops::Range<usize>| -> Vec<(usize, usize, usize)> {
                    (0..2).flat_map(|h| r.clone().map(move |i| (0, h, i))).collect()
                };
                // Query block 0 (rows 0..bm), and rows that see the poisoned
                // keys (from `reach` on: the next block's, where BN ≤ BM).
                let ok = x.check(st, &c, Some(&rows(0..bm)), 5e-3);
                ok.unwrap_or_else(|e| panic!("{bm} x {bn}: {e}"));
                let next = x.check(st, &c, Some(&rows(reach..reach + bm)), 5e-3);
                assert!(next.is_err(), "{bm} x {bn}: the poisoned keys reach no block");
            }
        }
    }
}

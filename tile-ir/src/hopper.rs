//! Hopper (sm_90a) encodings the wgmma/TMA lowering uses: pure functions, no IR.
//!
//! - [`MatrixDescriptor`]: the 64-bit shared-memory matrix descriptor of a
//!   wgmma operand, and [`operand_descriptor`], which derives one from a
//!   [`SharedLayout`] built by [`crate::layout`].
//! - The wgmma accumulator and register-A fragment layouts, as
//!   [`RootLayout`]s (so layout inference treats them like mma.sync's), with
//!   the map from a fragment register to the wgmma operand position.
//!
//! Expects byte offsets relative to the dynamic `smem` symbol. The hardware
//! wants absolute shared addresses and swizzles on absolute address bits:
//! the kernel adds `smem`'s address `>> 4` to a descriptor at run time (the
//! start field is the low 14 bits; no carry below 256 KB: in a thread block
//! cluster a block's own shared addresses carry its rank above that, and
//! the lowering masks the start, `Lx::descriptor_start`), and tiles must sit
//! at offsets that keep the swizzle atoms aligned. Measured on the H200:
//! `smem` is at shared address 0x400 (1024-aligned) when the kernel has no
//! static shared memory, so offsets that are multiples of 1024 are atom-aligned.
//! Guarantees that every encoder either returns a value the hardware reads
//! as described here, or an error saying which constraint failed.
//!
//! # How a shared tile maps to a descriptor
//!
//! wgmma sees an operand of 16-bit elements as "core matrices" of 8 rows ×
//! 16 bytes, and applies the swizzle to the *address* it computes: for a
//! swizzle span of `W` = 32/64/128 bytes, address bits `[4, 4 + b)` are XORed
//! with bits `[7, 7 + b)`, `b = log2(W / 16)` (CuTe's `Swizzle<b, 4, 3>`).
//! [`SharedLayout::for_ldmatrix`] builds exactly that pattern when a row is
//! 32, 64 or 128 bytes (`swizzle = Some((b, 3))`, `row_stride = W`), so:
//!
//! - **K-major** (`[rows = M or N, cols = K]`, trans = 0), span `W` =
//!   row bytes: row `r` of the slice is at `start + (r / 8)·SBO + (r % 8)·W`,
//!   element `k` at `+ 2k` (then swizzled). So **SBO = 8·W** (1024 bytes for
//!   a 128B-swizzled tile of 64 f16 columns), LBO is unused (encoded as 1),
//!   and the k16 slice `s` starts at `tile + row0·W + 32·s` (32·s < W, so
//!   the XOR source bits are untouched and the hardware's swizzle matches the
//!   stored one).
//! - **MN-major** (`[rows = K, cols = M or N]`, trans = 1): a K row holds
//!   `W / 2` MN elements, 8 K rows at stride `W` form an atom; **SBO** = the
//!   distance between 8-row K groups (`8·W`), **LBO** = the distance between
//!   `W`-byte MN panels (only needed when the operand's MN extent is wider
//!   than one row of the layout: never for a layout from `for_ldmatrix`,
//!   whose rows are the whole MN extent, so describable only if MN·2 = W;
//!   for a panelled layout, the panel size).
//! - Rows wider than 128 bytes (`for_ldmatrix` then uses `Swizzle<3, 4, S>`
//!   with `S > 3`) and unswizzled row-major tiles are not describable. On
//!   sm_90a layout inference stores such operands of wgmma gemms as
//!   `[rows, 64]` panels ([`SharedLayout::panelled`], each a
//!   `for_ldmatrix(rows, 64, 2)` layout): MN-major, LBO = the panel size;
//!   K-major, a k16 slice lies in one panel and starts in it.
//!
//! # Which gemms lower to wgmma
//!
//! [`wgmma_gemm`] decides, for layout inference and the lowering alike
//! (its warpgroup grid: rows per warpgroup, or columns split over
//! warpgroups sharing 64 rows, [`wgmma_col_groups`]; its instructions,
//! [`wgmma_instructions`]); [`gemm_operand_layout`] gives the shared
//! operand layouts it assumes.
//!
//! # The accumulator
//!
//! `m64nNk16` gives each of the 128 threads of a warpgroup `N/2` f32
//! registers: register `i` of thread `t` (`w = t / 32`, `g = (t % 32) / 4`,
//! `q = t % 4`) holds `(16w + g + 8·((i >> 1) & 1), 8·(i >> 2) + 2q + (i & 1))`:
//! mma.sync's C pattern repeated along N. That is
//! [`RootLayout::mma_accumulator`] with a warp grid of `(M/16, 1)`. With
//! the columns split over `C` warpgroups ([`wgmma_split_accumulator`]), the
//! warpgroup's own bits (thread bits 7..) pick its columns (and, above
//! them, its 64-row band), so a row's values sit in `C` warpgroups and a
//! row reduction combines them through shared memory (`lower/reduce.rs`).

use crate::ir::{BufferId, DType, Kernel, Scope, Stmt, StmtKind, WarpPolicy};
use crate::layout::{RootLayout, SharedLayout};
use crate::target::Feature;
use crate::Target;

/// The swizzle mode of a wgmma operand (and of a TMA box).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Swizzle {
    /// No swizzle: 16-byte chunks where the layout puts them.
    None,
    /// 32-byte rows of 2 chunks, swizzled as CuTe's `Swizzle<1, 4, 3>` on byte offsets.
    B32,
    /// 64-byte rows of 4 chunks, swizzled as CuTe's `Swizzle<2, 4, 3>`.
    B64,
    /// 128-byte rows of 8 chunks, swizzled as CuTe's `Swizzle<3, 4, 3>`.
    B128,
}

impl Swizzle {
    /// The span in bytes (0 for none).
    pub fn bytes(self) -> u32 {
        match self {
            Swizzle::None => 0,
            Swizzle::B32 => 32,
            Swizzle::B64 => 64,
            Swizzle::B128 => 128,
        }
    }
    /// The 2-bit code in descriptor bits 62–63.
    pub fn descriptor_code(self) -> u64 {
        match self {
            Swizzle::None => 0,
            Swizzle::B128 => 1,
            Swizzle::B64 => 2,
            Swizzle::B32 => 3,
        }
    }
    /// The swizzle of a descriptor's 2-bit code (the inverse of
    /// [`Swizzle::descriptor_code`]; only the low 2 bits of `code` are read).
    pub fn from_descriptor_code(code: u64) -> Swizzle {
        match code & 3 {
            0 => Swizzle::None,
            1 => Swizzle::B128,
            2 => Swizzle::B64,
            _ => Swizzle::B32,
        }
    }
    /// The swizzle of a [`SharedLayout`], when it is one wgmma and TMA
    /// apply (`Swizzle<b, 4, 3>` with rows of exactly the span).
    pub fn of_layout(l: &SharedLayout) -> Option<Swizzle> {
        match l.swizzle {
            Some((bits, 3)) if l.row_stride == 16 << bits => match bits {
                1 => Some(Swizzle::B32),
                2 => Some(Swizzle::B64),
                3 => Some(Swizzle::B128),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A wgmma shared-memory matrix descriptor, field by field (byte values;
/// the encoding stores them `>> 4`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MatrixDescriptor {
    /// Shared-memory byte address of the operand slice (a multiple of 16, < 2^18).
    pub start: u32,
    /// Leading dimension byte offset (a multiple of 16, < 2^18).
    pub lbo: u32,
    /// Stride dimension byte offset (a multiple of 16, < 2^18).
    pub sbo: u32,
    /// Bits 49–51: 0 when the swizzle pattern starts on its
    /// (8·span)-byte boundary, which [`operand_descriptor`] requires.
    pub base_offset: u8,
    /// Bits 62–63: the operand's swizzle mode.
    pub swizzle: Swizzle,
}

impl MatrixDescriptor {
    /// The 64-bit value: bits 0–13 start >> 4, 16–29 LBO >> 4, 32–45 SBO >> 4,
    /// 49–51 base offset, 62–63 swizzle (0 none, 1 128B, 2 64B, 3 32B).
    pub fn encode(&self) -> Result<u64, String> {
        for (name, v) in
            [("start address", self.start), ("leading byte offset", self.lbo), ("stride byte offset", self.sbo)]
        {
            if v % 16 != 0 || v >= 1 << 18 {
                return Err(format!("wgmma descriptor {name} {v} must be a multiple of 16 below 262144"));
            }
        }
        if self.base_offset > 7 {
            return Err(format!("wgmma descriptor base offset {} must be below 8", self.base_offset));
        }
        Ok(((self.start as u64 >> 4) & 0x3FFF)
            | (((self.lbo as u64 >> 4) & 0x3FFF) << 16)
            | (((self.sbo as u64 >> 4) & 0x3FFF) << 32)
            | ((self.base_offset as u64 & 7) << 49)
            | (self.swizzle.descriptor_code() << 62))
    }
    /// The fields of a 64-bit descriptor.
    pub fn decode(d: u64) -> MatrixDescriptor {
        MatrixDescriptor {
            start: ((d & 0x3FFF) << 4) as u32,
            lbo: (((d >> 16) & 0x3FFF) << 4) as u32,
            sbo: (((d >> 32) & 0x3FFF) << 4) as u32,
            base_offset: ((d >> 49) & 7) as u8,
            swizzle: Swizzle::from_descriptor_code(d >> 62),
        }
    }
}

/// Which dim of a wgmma operand is contiguous in shared memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Major {
    /// The layout's rows are M (or N), its columns K: `imm-trans` 0.
    K,
    /// The layout's rows are K, its columns M (or N): `imm-trans` 1.
    MN,
}

/// The descriptor of the 16-bit wgmma operand slice that starts at row
/// `row0` (an M/N row for K-major, a K row for MN-major) and column `col0`
/// of a shared tile at byte `tile_base` with layout `layout`; the slice
/// covers 16 K values and the instruction's M (64) or N rows/columns.
///
/// K-major: `col0` is the K offset (a multiple of 16), `row0` a multiple of 8.
/// MN-major: `row0` is the K offset (a multiple of 16), `col0` the first
/// M/N column: 0, or a panel's first column for a panelled layout
/// ([`SharedLayout::panelled`], whose panels are then `LBO` apart).
pub fn operand_descriptor(
    layout: &SharedLayout,
    major: Major,
    tile_base: u32,
    row0: i64,
    col0: i64,
) -> Result<MatrixDescriptor, String> {
    if layout.elem != 2 {
        return Err(format!("wgmma operands here are 16-bit (f16/bf16); this tile has {}-byte elements", layout.elem));
    }
    let sw = Swizzle::of_layout(layout).ok_or_else(|| {
        format!(
            "shared layout {} is not a wgmma operand layout: rows must be 32, 64 or 128 bytes with the Swizzle<b,4,3> pattern \
             (store wider tiles as panels of at most 64 f16 columns)",
            layout.describe()
        )
    })?;
    let w = sw.bytes() as i64;
    let atom = 8 * w;
    if tile_base as i64 % atom != 0 {
        return Err(format!(
            "tile at shared byte {tile_base} must be aligned to {atom} bytes (8 rows of the {w}-byte swizzle) so that the base offset is 0"
        ));
    }
    // Columns per panel (the whole tile when it has no panels).
    let pc = layout.panel_cols.unwrap_or(layout.cols);
    let pb = layout.panel_bytes();
    let start = match major {
        Major::K => {
            if row0 % 8 != 0 || col0 % 16 != 0 || col0 % pc + 16 > pc || col0 + 16 > layout.cols || row0 >= layout.rows
            {
                return Err(format!(
                    "K-major slice at row {row0}, k {col0} of a [{}, {}] tile: row must be a multiple of 8 and k a multiple of 16 inside the tile",
                    layout.rows, layout.cols
                ));
            }
            tile_base as i64 + (col0 / pc) * pb + row0 * w + (col0 % pc) * 2
        }
        Major::MN => {
            if row0 % 16 != 0 || row0 + 16 > layout.rows || col0 % pc != 0 || col0 >= layout.cols {
                return Err(format!(
                    "MN-major slice at k {row0}, column {col0} of a [{}, {}] tile: k must be a multiple of 16 inside the tile and the column a panel's first",
                    layout.rows, layout.cols
                ));
            }
            tile_base as i64 + (col0 / pc) * pb + row0 * w
        }
    };
    // K-major swizzled: LBO unused (the convention is 1, i.e. 16 bytes).
    // MN-major: LBO is the distance between W-byte MN panels: the panel
    // size when the tile has panels; without, one panel holds the whole
    // row, so any value: use the atom size.
    let lbo = match (major, layout.panel_cols) {
        (Major::K, _) => 16,
        (Major::MN, Some(_)) => pb,
        (Major::MN, None) => atom,
    };
    MatrixDescriptor { start: start as u32, lbo: lbo as u32, sbo: atom as u32, base_offset: 0, swizzle: sw }
        .encode()
        .map(MatrixDescriptor::decode)
}

/// The wgmma accumulator layout of an `[m, n]` f32 tile computed by
/// `m / 64` warpgroups (warpgroup `j` = threads `128j..128j+128` owns rows
/// `64j..64j+64`) with `m64nNk16`, `N = n`.
pub fn wgmma_accumulator(m: i64, n: i64, threads: u32) -> Result<RootLayout, String> {
    if m <= 0 || m % 64 != 0 || !(8..=256).contains(&n) || n % 8 != 0 {
        return Err(format!(
            "wgmma accumulator [{m}, {n}]: m must be a multiple of 64 and n in 8..=256, a multiple of 8"
        ));
    }
    // Warpgroups that are not a power of two (three: FA3's head-dim-64
    // schedule) take all the block's threads: their warps' run is the
    // layout's highest ([`crate::layout::ThreadField`]).
    if (m / 64).count_ones() != 1 && (m / 64) * 128 != threads as i64 {
        return Err(format!(
            "wgmma accumulator [{m}, {n}]: {} warpgroups; a layout needs a power-of-two number of warpgroups, or one per 64 rows over all the block's threads",
            m / 64
        ));
    }
    if (m / 64) * 128 > threads as i64 {
        return Err(format!(
            "wgmma accumulator [{m}, {n}] needs {} threads (a warpgroup per 64 rows); the block has {threads}",
            (m / 64) * 128
        ));
    }
    Ok(RootLayout::mma_accumulator(m, n, threads, (m / 16, 1)))
}

/// The wgmma accumulator layout of an `[m, n]` f32 tile whose warpgroups
/// form a `(m / 64) × col_groups` grid: warpgroup `j = t / 128` owns the 64
/// rows from `64 · (j / col_groups)` and the `n / col_groups` columns from
/// `(j % col_groups) · n / col_groups`, computed by one or more `m64nNk16`
/// instructions side by side ([`wgmma_instructions`]). Within a warpgroup's
/// block, register `(l_row, l_col)` holds what [`wgmma_accumulator`] of a
/// `[64, n / col_groups]` tile holds (the PTX placement, repeated along N),
/// so an instruction covering the block's columns `[c, c + N)` has the
/// registers `l_col ∈ [c / 4, (c + N) / 4)` in its `d` list, at
/// [`wgmma_d_index`]`(l_row, l_col − c / 4)`. With `col_groups = 1` this is
/// [`RootLayout::mma_accumulator`] with warps `(m / 16, 1)` (and N may pass
/// 256: several instructions).
pub fn wgmma_split_accumulator(m: i64, n: i64, threads: u32, col_groups: i64) -> Result<RootLayout, String> {
    let groups = threads as i64 / 128;
    let row_groups = m / 64;
    if m <= 0
        || m % 64 != 0
        || col_groups < 1
        || threads % 128 != 0
        || (groups.count_ones() != 1 && col_groups != 1)
        || row_groups * col_groups != groups
        || n <= 0
        || n % (8 * col_groups) != 0
    {
        return Err(format!(
            "wgmma accumulator [{m}, {n}] over {threads} threads with the columns split {col_groups} ways: \
             needs (m / 64) · {col_groups} = threads / 128 warpgroups (a power of two) and n a multiple of {}",
            8 * col_groups
        ));
    }
    if col_groups == 1 {
        return Ok(RootLayout::mma_accumulator(m, n, threads, (m / 16, 1)));
    }
    use crate::layout::{DimDist, ThreadField};
    let nw = n / col_groups;
    let cg_bits = col_groups.trailing_zeros();
    let mut rows = vec![ThreadField { shift: 2, count: 8, mult: 1 }, ThreadField { shift: 5, count: 4, mult: 16 }];
    if row_groups > 1 {
        rows.push(ThreadField { shift: 7 + cg_bits, count: row_groups, mult: 64 });
    }
    let cols = vec![ThreadField { shift: 0, count: 4, mult: 2 }, ThreadField { shift: 7, count: col_groups, mult: nw }];
    Ok(RootLayout {
        shape: vec![m, n],
        dims: vec![
            DimDist { fields: rows, regs: vec![0, 8], vec: 1 },
            DimDist { fields: cols, regs: (0..nw / 4).map(|l| (l / 2) * 8 + l % 2).collect(), vec: 2 },
        ],
        threads,
        owner: None,
    })
}

/// How a warpgroup computes its `nw` columns of the accumulator: the
/// `(first column, N)` of each `m64nNk16` instruction, side by side, all
/// sharing A. Few, large instructions: as many of N = 256 as fit, then the
/// rest (a multiple of 8). `nw` a multiple of 8.
pub fn wgmma_instructions(nw: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut c = 0;
    while c < nw {
        let n = (nw - c).min(256);
        out.push((c, n));
        c += n;
    }
    out
}

/// The accumulator layout of the warp-specialized GEMM variant: an `[m, n]`
/// f32 tile over `threads / 128` warpgroups, warpgroup `j` owning the
/// `r = m / (64 · threads/128)` consecutive 64-row slices from `64·r·j`,
/// each computed by its own `m64nNk16` chain. Register `(l_row, l_col)`
/// of a thread holds row `64·r·j + 64·(l_row / 2) + 16·w + g + 8·(l_row % 2)`
/// (`w` its warp in the warpgroup) and column as in [`wgmma_accumulator`];
/// `l_row / 2` is the slice, and within a slice the registers are
/// [`wgmma_d_index`]`(l_row % 2, l_col)` of its `d` list. For `r = 1` this
/// is exactly [`wgmma_accumulator`].
pub fn ws_accumulator(m: i64, n: i64, threads: u32) -> Result<RootLayout, String> {
    let groups = (threads / 128) as i64;
    if threads % 128 != 0 || groups == 0 || groups.count_ones() != 1 || m % (64 * groups) != 0 || m == 0 {
        return Err(format!(
            "warp-specialized accumulator [{m}, {n}] over {threads} threads: m must be a multiple of 64 per warpgroup"
        ));
    }
    let r = m / (64 * groups);
    if r == 1 {
        return wgmma_accumulator(m, n, threads);
    }
    if !(8..=256).contains(&n) || n % 8 != 0 {
        return Err(format!("warp-specialized accumulator [{m}, {n}]: n must be in 8..=256, a multiple of 8"));
    }
    use crate::layout::{DimDist, ThreadField};
    let mut rows = vec![ThreadField { shift: 2, count: 8, mult: 1 }, ThreadField { shift: 5, count: 4, mult: 16 }];
    if groups > 1 {
        rows.push(ThreadField { shift: 7, count: groups, mult: 64 * r });
    }
    let row_regs = (0..2 * r).map(|l| 64 * (l / 2) + 8 * (l % 2)).collect();
    let col_regs = (0..n / 4).map(|l| (l / 2) * 8 + l % 2).collect();
    Ok(RootLayout {
        shape: vec![m, n],
        dims: vec![
            DimDist { fields: rows, regs: row_regs, vec: 1 },
            DimDist { fields: vec![ThreadField { shift: 0, count: 4, mult: 2 }], regs: col_regs, vec: 2 },
        ],
        threads,
        owner: None,
    })
}

/// The register-A fragment layout of an `[m, k]` f16/bf16 tile (`k` a
/// multiple of 16): the same placement as the accumulator, so a converted
/// accumulator feeds the next wgmma's A directly.
pub fn wgmma_a_fragment(m: i64, k: i64, threads: u32) -> Result<RootLayout, String> {
    if k % 16 != 0 {
        return Err(format!("wgmma register-A tile [{m}, {k}]: k must be a multiple of 16"));
    }
    wgmma_accumulator(m, k, threads)
}

/// Thread `t`'s accumulator register `i` (0..N/2) of one `m64nNk16`, as the
/// PTX ISA places it: (row within the warpgroup's 64 rows, column).
pub fn wgmma_d_coord(t: i64, i: i64) -> (i64, i64) {
    let (w, lane) = ((t % 128) / 32, t % 32);
    let (g, q) = (lane / 4, lane % 4);
    (16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * q + (i & 1))
}

/// Position in the wgmma `d` register list of the accumulator register with
/// per-dim indices `(l_row, l_col)` of [`wgmma_accumulator`] (`l_row` in
/// 0..2 within one warpgroup's rows).
pub fn wgmma_d_index(l_row: i64, l_col: i64) -> usize {
    (4 * (l_col / 2) + 2 * l_row + l_col % 2) as usize
}

/// Thread `t`'s register-A operand: 32-bit register `j` (0..4), half `h`
/// (0 = low): (row, k) within the 64×16 slice.
pub fn wgmma_a_regs_coord(t: i64, j: i64, h: i64) -> (i64, i64) {
    let i = 2 * j + h;
    let (w, lane) = ((t % 128) / 32, t % 32);
    let (g, q) = (lane / 4, lane % 4);
    (16 * w + g + 8 * ((i >> 1) & 1), 2 * q + (i & 1) + 8 * (i >> 2))
}

/// The per-dim register indices `(l_row, l_col)` of [`wgmma_a_fragment`]
/// that hold half `h` of A register `j` for the k16 slice `s`.
pub fn wgmma_a_frag_index(s: i64, j: i64, h: i64) -> (i64, i64) {
    let i = 2 * j + h;
    ((i >> 1) & 1, 2 * (2 * s + (i >> 2)) + (i & 1))
}

/// A gemm of the general (not warp-specialized) sm_90a path that lowers to
/// wgmma: what [`wgmma_gemm`] found out about it.
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaGemm {
    /// The accumulator is `[m, n]`, `K = k`; `m = 64 · warpgroups / col_groups`.
    pub m: i64,
    /// The accumulator's columns (N).
    pub n: i64,
    /// The reduction length (K), a multiple of 16.
    pub k: i64,
    /// `"f16"` or `"bf16"`.
    pub ab: &'static str,
    /// The warpgroups that run the gemm (the block's threads / 128).
    pub warpgroups: i64,
    /// The warpgroups along N: 1 when each owns whole 64-row slices of all
    /// N columns; `c > 1` when `c` warpgroups share 64 rows, warpgroup `j`
    /// owning columns `[(j % c) · n / c, (j % c + 1) · n / c)`
    /// ([`wgmma_split_accumulator`]).
    pub col_groups: i64,
    /// Per warpgroup, its instructions: `(first column within the
    /// warpgroup's columns, N)` ([`wgmma_instructions`]).
    pub insts: Vec<(i64, i64)>,
    /// A's shared layout and major-ness; `None`: A comes from a fragment
    /// (registers, [`wgmma_a_fragment`]).
    pub a: Option<(SharedLayout, Major)>,
    /// B's shared layout and major-ness (B is always in shared memory).
    pub b: (SharedLayout, Major),
    /// `Some(w)`: warpgroup `w` alone runs it (`policy(Warpgroup(w))`,
    /// `warpgroups` = `col_groups` = 1) and holds the accumulator
    /// ([`crate::layout::RootLayout::owner`]).
    pub owner: Option<u32>,
}

impl WgmmaGemm {
    /// The accumulator's layout over a block of `threads`: the warpgroup
    /// grid's ([`wgmma_split_accumulator`]), or the owner's alone (the
    /// layout of one warpgroup's `[64, n]` tile, on its threads).
    pub fn accumulator(&self, threads: u32) -> Result<RootLayout, String> {
        match self.owner {
            Some(w) => owned_accumulator(self.n, threads, w),
            None => wgmma_split_accumulator(self.m, self.n, threads, self.col_groups),
        }
    }

    /// The layout a fragment A (`[m, k]`) must have ([`wgmma_a_fragment`],
    /// or the owner's alone).
    pub fn a_fragment(&self, threads: u32) -> Result<RootLayout, String> {
        match self.owner {
            Some(w) => owned_accumulator(self.k, threads, w),
            None => wgmma_a_fragment(self.m, self.k, threads),
        }
    }
}

/// The `[64, n]` tile of warpgroup `w` of a block of `threads` threads, as
/// one warpgroup's wgmma accumulator (or register-A operand) holds it
/// ([`RootLayout::warpgroup_tile`]).
fn owned_accumulator(n: i64, threads: u32, w: u32) -> Result<RootLayout, String> {
    if n <= 0 || n % 8 != 0 {
        return Err(format!("a warpgroup's wgmma tile [64, {n}] needs a multiple of 8 columns"));
    }
    RootLayout::warpgroup_tile(n, threads, w).ok_or_else(|| {
        format!("warpgroup {w} of a block of {threads} threads cannot hold a tile (whole warpgroups of 128 threads)")
    })
}

/// The gemms of a body (recursively): `(a, b, c, trans_a, trans_b, policy)`.
fn gemms(body: &[Stmt], out: &mut Vec<(BufferId, BufferId, BufferId, bool, bool, WarpPolicy)>) {
    for s in body {
        match &s.kind {
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                out.push((*a, *b, *c, *trans_a, *trans_b, *policy))
            }
            StmtKind::For { body, .. } => gemms(body, out),
            StmtKind::If { then, otherwise, .. } => {
                gemms(then, out);
                gemms(otherwise, out);
            }
            _ => {}
        }
    }
}

/// `[rows, cols]` and element bytes of a buffer with a constant 2-D shape.
fn shape2(buf: &crate::ir::Buffer) -> Option<(i64, i64, i64)> {
    match buf.const_shape().as_deref() {
        Some(&[r, c]) => Some((r, c, buf.dtype.size_bytes() as i64)),
        _ => None,
    }
}

/// The layout `buf` would have if every gemm operand that can be
/// panelled were ([`SharedLayout::panelled`]).
fn layout_if_panelled(kernel: &Kernel, buf: BufferId) -> Option<SharedLayout> {
    if kernel.buffer(buf).view.is_some() {
        return view_layout(kernel, buf, &|root| layout_if_panelled(kernel, root));
    }
    let b = kernel.buffer(buf);
    let (rows, cols, elem) = shape2(b)?;
    match b.layout {
        Some(spec) => SharedLayout::from_spec(spec, rows, cols, elem).ok(),
        None => Some(
            panelled_of(kernel, buf, rows, cols, elem).unwrap_or_else(|| SharedLayout::for_ldmatrix(rows, cols, elem)),
        ),
    }
}

/// [`SharedLayout::panelled`], or for a buffer with sub-views
/// [`SharedLayout::panelled_for_views`] (rows of any multiple of 64 columns).
fn panelled_of(kernel: &Kernel, buf: BufferId, rows: i64, cols: i64, elem: i64) -> Option<SharedLayout> {
    match kernel.views_of(buf).is_empty() {
        true => SharedLayout::panelled(rows, cols, elem),
        false => SharedLayout::panelled_for_views(rows, cols, elem),
    }
}

/// The layout of view `buf` ([`crate::ir::View`]) inside its parent laid
/// out by `root_layout` ([`SharedLayout::window`]); `None` when the window is
/// not expressible there (layout inference reports why).
fn view_layout(
    kernel: &Kernel,
    buf: BufferId,
    root_layout: &dyn Fn(BufferId) -> Option<SharedLayout>,
) -> Option<SharedLayout> {
    let (root, origin) = kernel.view_root(buf);
    let parent = kernel.buffer(root).const_shape()?;
    let shape = kernel.buffer(buf).const_shape()?;
    root_layout(root)?.window(&parent, origin, &shape).ok().map(|(_, l)| l)
}

/// The shared layout layout inference gives a gemm operand `buf` for
/// `target`: for a view ([`crate::ir::View`]), its window of its parent's;
/// the user's `annotate_layout`; else for a buffer with views whose rows are
/// a multiple of 64 16-bit columns, panels of 64 columns
/// ([`SharedLayout::panelled_for_views`]) on every target; else, on sm_90a, panels of 64
/// columns ([`SharedLayout::panelled`]) when its rows are wider than 128
/// bytes and some gemm reading it lowers to wgmma with them; else
/// [`SharedLayout::for_ldmatrix`] (ldmatrix reads any of these). `None`
/// when the buffer has no constant 2-D shape or its annotation does not fit.
///
/// Consistent with [`wgmma_gemm`]: a gemm that is eligible with every
/// panel-able operand panelled has all of them panelled here (each is read
/// by that gemm), and a gemm with a panel-able operand left unpanelled is
/// not eligible (rows over 128 bytes have no descriptor).
pub fn gemm_operand_layout(kernel: &Kernel, buf: BufferId, target: Target) -> Option<SharedLayout> {
    if kernel.buffer(buf).view.is_some() {
        return view_layout(kernel, buf, &|root| gemm_operand_layout(kernel, root, target));
    }
    let b = kernel.buffer(buf);
    let (rows, cols, elem) = shape2(b)?;
    if let Some(spec) = b.layout {
        return SharedLayout::from_spec(spec, rows, cols, elem).ok();
    }
    // A buffer with views: whole panels on every target (unpadded; a view of
    // whole panels is expressible alike for ldmatrix, wgmma and TMA).
    if !kernel.views_of(buf).is_empty() {
        if let Some(p) = SharedLayout::panelled_for_views(rows, cols, elem) {
            return Some(p);
        }
    }
    if target.has(Feature::Wgmma) && b.scope == Scope::Shared {
        if let Some(p) = panelled_of(kernel, buf, rows, cols, elem) {
            let mut all = Vec::new();
            gemms(&kernel.body, &mut all);
            let eligible = all.iter().any(|&(a, bb, c, ta, tb, policy)| {
                (kernel.same_memory(a, buf) || kernel.same_memory(bb, buf))
                    && wgmma_shape_with(kernel, a, bb, c, ta, tb, policy, &|x| layout_if_panelled(kernel, x)).is_some()
            });
            if eligible {
                return Some(p);
            }
        }
    }
    Some(SharedLayout::for_ldmatrix(rows, cols, elem))
}

/// Whether `gemm a, b -> c` (with the transposes) lowers to wgmma in the
/// general sm_90a path, and how, for a gemm of the default policy
/// (`Square`): [`wgmma_gemm`] with [`WarpPolicy::Square`].
pub fn wgmma_shape(
    kernel: &Kernel,
    a: BufferId,
    b: BufferId,
    c: BufferId,
    trans_a: bool,
    trans_b: bool,
    target: Target,
) -> Option<WgmmaGemm> {
    wgmma_gemm(kernel, a, b, c, trans_a, trans_b, WarpPolicy::Square, target)
}

/// Whether `gemm a, b -> c` (with the transposes and its warp `policy`)
/// lowers to wgmma in the general sm_90a path, and how. The one
/// eligibility test: layout inference gives the accumulator of such a gemm
/// the wgmma layout ([`wgmma_split_accumulator`]), and the lowering emits
/// wgmma for it; anything else takes the mma.sync path.
///
/// Eligible: target sm_90a; a block of `128·W` threads (`W` a power of
/// two, or any `W` when each warpgroup owns 64 whole rows, `r = W`: FA3's
/// three at head dim 64); `c` an `[M, N]` f32 fragment with `M = 64·r`, `r` dividing `W`;
/// `K` a multiple of 16; A and B both f16 or both bf16; B in shared memory;
/// A in shared memory, or an untransposed fragment when each warpgroup owns
/// whole rows (`r = W`); every shared operand's layout
/// ([`gemm_operand_layout`]) a wgmma operand layout ([`Swizzle::of_layout`])
/// for which [`operand_descriptor`] describes every k16 slice of every
/// instruction of every warpgroup.
///
/// The warpgroups form an `r × W/r` grid (`col_groups = W / r`):
/// - `r = W` (any policy): warpgroup `j` owns rows `64j..64j+64` and all N
///   columns;
/// - `r < W`: the columns are split, warpgroup `j` owning `N·r/W` of them
///   (a multiple of 8) next to its neighbours in its 64-row band: with
///   `FullCol` when `r = 1` (every warpgroup over all M = 64 rows, e.g.
///   MLA's `[64, 512]` output as two 64×256 halves), with `Square` for any
///   `r` (M = 128 over 4 warpgroups: 2×2); never with `FullRow`.
///
/// A warpgroup's N columns are [`wgmma_instructions`] (several when N >
/// 256), sharing A. K-major operands: rows of 32, 64 or 128 bytes, or
/// panels of 64 columns (a k16 slice never straddles panels). MN-major:
/// each swizzle row (or panel) holds `W / 2` M/N columns: the whole extent
/// (`M`, `N` ≤ 64 with rows of `2·extent` = 32/64/128 bytes), or 64-column
/// panels, and every instruction starts at a panel's first column.
#[allow(clippy::too_many_arguments)]
pub fn wgmma_gemm(
    kernel: &Kernel,
    a: BufferId,
    b: BufferId,
    c: BufferId,
    trans_a: bool,
    trans_b: bool,
    policy: WarpPolicy,
    target: Target,
) -> Option<WgmmaGemm> {
    if !target.has(Feature::Wgmma) {
        return None;
    }
    wgmma_shape_with(kernel, a, b, c, trans_a, trans_b, policy, &|x| gemm_operand_layout(kernel, x, target))
}

/// The number of warpgroups along N ([`WgmmaGemm::col_groups`]) a wgmma
/// gemm with an `[m, _]` accumulator over `threads` threads and `policy`
/// gets, when it gets one (see [`wgmma_gemm`]).
pub fn wgmma_col_groups(m: i64, threads: u32, policy: WarpPolicy) -> Option<i64> {
    let warpgroups = threads as i64 / 128;
    if threads % 128 != 0 || warpgroups == 0 || m <= 0 || m % 64 != 0 {
        return None;
    }
    let r = m / 64;
    // Each warpgroup its 64 rows: any number of them (three: FA3's
    // head-dim-64 schedule); a split of the columns needs a power of two.
    if r == warpgroups {
        return Some(1);
    }
    if warpgroups.count_ones() != 1 {
        return None;
    }
    let ok = r < warpgroups
        && warpgroups % r == 0
        && match policy {
            WarpPolicy::FullRow | WarpPolicy::Warpgroup(_) => false,
            WarpPolicy::FullCol => r == 1,
            WarpPolicy::Square => true,
        };
    ok.then_some(warpgroups / r)
}

/// [`wgmma_gemm`] with the shared operands laid out by `layout_of`.
#[allow(clippy::manual_is_multiple_of, clippy::too_many_arguments)] // MSRV 1.85 lacks `is_multiple_of`
fn wgmma_shape_with(
    kernel: &Kernel,
    a: BufferId,
    b: BufferId,
    c: BufferId,
    trans_a: bool,
    trans_b: bool,
    policy: WarpPolicy,
    layout_of: &dyn Fn(BufferId) -> Option<SharedLayout>,
) -> Option<WgmmaGemm> {
    if kernel.threads % 128 != 0 {
        return None;
    }
    let (ab, bb, cb) = (kernel.buffer(a), kernel.buffer(b), kernel.buffer(c));
    let (m, n, _) = shape2(cb)?;
    let (ar, ac, _) = shape2(ab)?;
    let (br, bc, _) = shape2(bb)?;
    let (am, ak) = if trans_a { (ac, ar) } else { (ar, ac) };
    let (bk, bn) = if trans_b { (bc, br) } else { (br, bc) };
    let warpgroups = kernel.threads as i64 / 128;
    let ty = match ab.dtype {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => return None,
    };
    if cb.scope != Scope::Fragment
        || cb.dtype != DType::F32
        || bb.scope != Scope::Shared
        || bb.dtype != ab.dtype
        || am != m
        || bn != n
        || ak != bk
        || ak <= 0
        || ak % 16 != 0
    {
        return None;
    }
    // A warpgroup alone: one warpgroup's 64 rows, the others idle.
    let (warpgroups, col_groups) = match policy.owner() {
        Some(w) if m == 64 && (w as i64) < warpgroups => (1, 1),
        Some(_) => return None,
        None => {
            let col_groups = wgmma_col_groups(m, kernel.threads, policy)?;
            wgmma_split_accumulator(m, n, kernel.threads, col_groups).ok()?;
            (warpgroups, col_groups)
        }
    };
    let row_groups = warpgroups / col_groups;
    let nw = n / col_groups;
    let insts = wgmma_instructions(nw);
    // Every k16 slice every warpgroup reads must have a descriptor: A at
    // the `row_groups` 64-row bands, B at the first column of every
    // instruction of every column group.
    let describable = |layout: &SharedLayout, major: Major, starts: &[i64]| -> bool {
        let Some(sw) = Swizzle::of_layout(layout) else { return false };
        // An MN-major swizzle row (or panel) holds W / 2 M/N columns.
        let rows_fit = match major {
            Major::K => true,
            Major::MN => layout.panel_cols.unwrap_or(layout.cols) * layout.elem == sw.bytes() as i64,
        };
        rows_fit
            && starts.iter().all(|&start| {
                (0..ak / 16).all(|s| {
                    let (row0, col0) = match major {
                        Major::K => (start, 16 * s),
                        Major::MN => (16 * s, start),
                    };
                    operand_descriptor(layout, major, 0, row0, col0).is_ok()
                })
            })
    };
    let a_op = match ab.scope {
        // Register A: each warpgroup holds the rows it multiplies only when
        // it owns whole rows (layout inference refuses the rest).
        Scope::Fragment if !trans_a && col_groups == 1 => None,
        Scope::Shared => {
            let l = layout_of(a)?;
            let major = if trans_a { Major::MN } else { Major::K };
            let starts: Vec<i64> = (0..row_groups).map(|g| 64 * g).collect();
            if !describable(&l, major, &starts) {
                return None;
            }
            Some((l, major))
        }
        _ => return None,
    };
    let bl = layout_of(b)?;
    // B is `[K, N]` (N contiguous: MN-major) unless transposed to `[N, K]`.
    let b_major = if trans_b { Major::K } else { Major::MN };
    let starts: Vec<i64> = (0..col_groups).flat_map(|j| insts.iter().map(move |&(c, _)| j * nw + c)).collect();
    if !describable(&bl, b_major, &starts) {
        return None;
    }
    Some(WgmmaGemm {
        m,
        n,
        k: ak,
        ab: ty,
        warpgroups,
        col_groups,
        insts,
        a: a_op,
        b: (bl, b_major),
        owner: policy.owner(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn descriptor_round_trips_and_places_fields() {
        let d = MatrixDescriptor { start: 0x3FFF0, lbo: 16, sbo: 1024, base_offset: 0, swizzle: Swizzle::B128 };
        let v = d.encode().unwrap();
        assert_eq!(v & 0x3FFF, 0x3FFF);
        assert_eq!((v >> 16) & 0x3FFF, 1);
        assert_eq!((v >> 32) & 0x3FFF, 64);
        assert_eq!(v >> 62, 1);
        assert_eq!(MatrixDescriptor::decode(v), d);
        for sw in [Swizzle::None, Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            let d = MatrixDescriptor { start: 4096 + 32, lbo: 256, sbo: 512, base_offset: 3, swizzle: sw };
            assert_eq!(MatrixDescriptor::decode(d.encode().unwrap()), d);
        }
        assert!(MatrixDescriptor { start: 8, lbo: 16, sbo: 16, base_offset: 0, swizzle: Swizzle::None }
            .encode()
            .is_err());
        assert!(MatrixDescriptor { start: 1 << 18, lbo: 16, sbo: 16, base_offset: 0, swizzle: Swizzle::None }
            .encode()
            .is_err());
        assert!(MatrixDescriptor { start: 0, lbo: 16, sbo: 16, base_offset: 8, swizzle: Swizzle::None }
            .encode()
            .is_err());
    }

    #[test]
    fn kmajor_128b_tile_maps_to_sbo_1024() {
        let l = SharedLayout::for_ldmatrix(128, 64, 2);
        assert_eq!(Swizzle::of_layout(&l), Some(Swizzle::B128));
        let d = operand_descriptor(&l, Major::K, 2048, 64, 32).unwrap();
        assert_eq!(
            d,
            MatrixDescriptor {
                start: 2048 + 64 * 128 + 64,
                lbo: 16,
                sbo: 1024,
                base_offset: 0,
                swizzle: Swizzle::B128
            }
        );
        let l64 = SharedLayout::for_ldmatrix(64, 32, 2);
        assert_eq!(operand_descriptor(&l64, Major::K, 0, 0, 16).unwrap().sbo, 512);
        assert_eq!(Swizzle::of_layout(&SharedLayout::for_ldmatrix(64, 16, 2)), Some(Swizzle::B32));
        // 256-byte rows use Swizzle<3,4,4>: not a wgmma pattern.
        let wide = SharedLayout::for_ldmatrix(64, 128, 2);
        assert!(operand_descriptor(&wide, Major::K, 0, 0, 0).unwrap_err().contains("panels"));
        assert!(operand_descriptor(&l, Major::K, 512, 0, 0).unwrap_err().contains("aligned"));
        assert!(operand_descriptor(&l, Major::K, 0, 4, 0).is_err());
        assert!(operand_descriptor(&l, Major::K, 0, 0, 56).is_err());
        assert!(operand_descriptor(&l, Major::MN, 0, 16, 0).is_ok());
        assert!(operand_descriptor(&SharedLayout::for_ldmatrix(64, 64, 4), Major::K, 0, 0, 0).is_err());
    }

    #[test]
    fn accumulator_layout_is_the_ptx_placement_and_a_bijection() {
        // Three warpgroups too (192 rows over 384 threads: their warps'
        // run, 12, the layout's highest, not a power of two).
        for n in [8, 24, 64, 136, 256] {
            for m in [64, 128, 192, 256] {
                let threads = (m / 64 * 128) as u32;
                let l = wgmma_accumulator(m, n, threads).unwrap();
                assert_eq!(l.active_threads(), threads as i64);
                assert_eq!(l.regs_along(0) * l.regs_along(1), n / 2, "N/2 accumulator registers per thread");
                let mut seen = HashSet::new();
                for t in 0..threads as i64 {
                    for lr in 0..l.regs_along(0) {
                        for lc in 0..l.regs_along(1) {
                            let (r, c) = (l.coord(t, 0, lr), l.coord(t, 1, lc));
                            assert!(r < m && c < n);
                            assert!(seen.insert((r, c)));
                            // The same element through the PTX formula.
                            let i = wgmma_d_index(lr, lc) as i64;
                            assert!(i < n / 2);
                            let (pr, pc) = wgmma_d_coord(t, i);
                            assert_eq!((pr + 64 * (t / 128), pc), (r, c), "t {t} lr {lr} lc {lc}");
                        }
                    }
                }
                assert_eq!(seen.len() as i64, m * n);
            }
        }
        assert!(wgmma_accumulator(64, 12, 128).is_err());
        assert!(wgmma_accumulator(128, 64, 128).is_err());
        assert!(wgmma_accumulator(32, 64, 128).is_err());
        // Three warpgroups in a block of four: the fourth's warps would
        // wrap onto the first's rows.
        assert!(wgmma_accumulator(192, 64, 512).is_err());
        assert_eq!(wgmma_col_groups(192, 384, WarpPolicy::FullRow), Some(1));
        assert_eq!(wgmma_col_groups(64, 384, WarpPolicy::FullCol), None);
        assert!(wgmma_split_accumulator(64, 96, 384, 3).is_err());
    }

    /// Several 64-row slices per warpgroup: a bijection whose slice `s`,
    /// register `wgmma_d_index(h, c)`, is the PTX placement shifted by the
    /// slice's 64·(r·j + s) rows.
    #[test]
    fn warp_specialized_accumulator_slices() {
        for (m, n, threads) in [(128, 128, 128), (256, 128, 256), (128, 64, 128), (64, 256, 128), (128, 256, 256)] {
            let l = ws_accumulator(m, n, threads).unwrap();
            let r = m / (64 * (threads as i64 / 128));
            assert_eq!(l.regs_along(0), 2 * r);
            let mut seen = HashSet::new();
            for t in 0..threads as i64 {
                for lr in 0..l.regs_along(0) {
                    for lc in 0..l.regs_along(1) {
                        let (row, col) = (l.coord(t, 0, lr), l.coord(t, 1, lc));
                        assert!(row < m && col < n && seen.insert((row, col)));
                        let (s, h) = (lr / 2, lr % 2);
                        let (pr, pc) = wgmma_d_coord(t, wgmma_d_index(h, lc) as i64);
                        assert_eq!(
                            (pr + 64 * (r * (t / 128) + s), pc),
                            (row, col),
                            "m {m} n {n} t {t} lr {lr} lc {lc}"
                        );
                    }
                }
            }
            assert_eq!(seen.len() as i64, m * n);
        }
        assert!(ws_accumulator(96, 64, 128).is_err());
    }

    #[test]
    fn register_a_layout_matches_the_fragment() {
        let k = 48;
        let l = wgmma_a_fragment(64, k, 128).unwrap();
        let mut seen = HashSet::new();
        for t in 0..128 {
            for s in 0..k / 16 {
                for j in 0..4 {
                    for h in 0..2 {
                        let (r, c) = wgmma_a_regs_coord(t, j, h);
                        let (lr, lc) = wgmma_a_frag_index(s, j, h);
                        assert_eq!((l.coord(t, 0, lr), l.coord(t, 1, lc)), (r, c + 16 * s));
                        assert!(seen.insert((r, c + 16 * s)));
                    }
                }
            }
        }
        assert_eq!(seen.len() as i64, 64 * k);
        assert!(wgmma_a_fragment(64, 24, 128).is_err());
    }

    #[test]
    fn panelled_descriptors_step_over_panels() {
        // [N = 64, K = 128] K-major: k16 slice 5 is slice 1 of panel 1.
        let k = SharedLayout::panelled(64, 128, 2).unwrap();
        let d = operand_descriptor(&k, Major::K, 1024, 8, 80).unwrap();
        assert_eq!(
            d,
            MatrixDescriptor {
                start: 1024 + 64 * 128 + 8 * 128 + 32,
                lbo: 16,
                sbo: 1024,
                base_offset: 0,
                swizzle: Swizzle::B128
            }
        );
        assert!(operand_descriptor(&k, Major::K, 0, 0, 56).is_err(), "a slice may not straddle panels");
        // [K = 32, N = 128] MN-major: panels of 32·128 bytes are LBO apart.
        let mn = SharedLayout::panelled(32, 128, 2).unwrap();
        let d = operand_descriptor(&mn, Major::MN, 0, 16, 64).unwrap();
        assert_eq!(
            d,
            MatrixDescriptor { start: 4096 + 16 * 128, lbo: 4096, sbo: 1024, base_offset: 0, swizzle: Swizzle::B128 }
        );
        assert!(operand_descriptor(&mn, Major::MN, 0, 0, 32).is_err());
        assert!(operand_descriptor(&mn, Major::MN, 0, 0, 128).is_err());
    }

    #[test]
    fn wgmma_eligibility() {
        use crate::ir::{Buffer, Extent, SpanId};
        let mk = |threads: u32, a: (Scope, [i64; 2]), b: [i64; 2], c: [i64; 2], dt: DType| {
            let mut k = Kernel::new("g", threads);
            let mut add = |name: &str, scope: Scope, dtype: DType, shape: [i64; 2]| {
                k.add_buffer(Buffer {
                    name: name.into(),
                    scope,
                    dtype,
                    shape: shape.iter().map(|&x| Extent::Const(x)).collect(),
                    mutable: true,
                    span: SpanId::NONE,
                    layout: None,
                    view: None,
                })
            };
            let (ab, bb, cb) =
                (add("a", a.0, dt, a.1), add("b", Scope::Shared, dt, b), add("c", Scope::Fragment, DType::F32, c));
            k.body = vec![Stmt::new(StmtKind::Gemm {
                a: ab,
                b: bb,
                c: cb,
                trans_a: false,
                trans_b: false,
                clear: false,
                policy: crate::ir::WarpPolicy::Square,
            })];
            (k, ab, bb, cb)
        };
        let shape =
            |k: &(Kernel, BufferId, BufferId, BufferId), t: Target| wgmma_shape(&k.0, k.1, k.2, k.3, false, false, t);
        let g = mk(128, (Scope::Shared, [64, 32]), [32, 64], [64, 64], DType::F16);
        let w = shape(&g, Target::Sm90a).expect("eligible");
        assert_eq!((w.m, w.n, w.k, w.ab, w.warpgroups), (64, 64, 32, "f16", 1));
        assert_eq!(w.a.map(|x| x.1), Some(Major::K));
        assert_eq!(w.b.1, Major::MN);
        assert!(shape(&g, Target::Sm80).is_none());
        // Fragment A, bf16, two warpgroups, panelled B.
        let g = mk(256, (Scope::Fragment, [128, 64]), [64, 128], [128, 128], DType::BF16);
        let w = shape(&g, Target::Sm90a).expect("eligible");
        assert!(w.a.is_none() && w.b.0.panel_cols == Some(64));
        assert_eq!(gemm_operand_layout(&g.0, g.2, Target::Sm90a), Some(w.b.0));
        assert_eq!(gemm_operand_layout(&g.0, g.2, Target::Sm80), Some(SharedLayout::for_ldmatrix(64, 128, 2)));
        // f32 operands never.
        assert!(shape(&mk(128, (Scope::Shared, [64, 32]), [32, 64], [64, 64], DType::F32), Target::Sm90a).is_none());
        // MN-major B of 96 columns (192-byte rows, padded): no descriptor.
        assert!(shape(&mk(128, (Scope::Shared, [64, 32]), [32, 96], [64, 96], DType::F16), Target::Sm90a).is_none());
        // M = 64 over two warpgroups (Square, the default): the columns split
        // in two halves of 32, both warpgroups reading A's 64 rows.
        let w = shape(&mk(256, (Scope::Shared, [64, 32]), [32, 128], [64, 128], DType::F16), Target::Sm90a).unwrap();
        assert_eq!((w.warpgroups, w.col_groups, w.insts.clone()), (2, 2, vec![(0, 64)]));
        // N = 512 over one warpgroup: two instructions of 256 sharing A.
        let w = shape(&mk(128, (Scope::Shared, [64, 32]), [32, 512], [64, 512], DType::F16), Target::Sm90a).unwrap();
        assert_eq!((w.col_groups, w.insts.clone()), (1, vec![(0, 256), (256, 256)]));
        // Register A with the columns split: every warpgroup would need all of A.
        assert!(shape(&mk(256, (Scope::Fragment, [64, 64]), [64, 64], [64, 64], DType::F16), Target::Sm90a).is_none());
    }

    /// Which gemms split N over warpgroups, per policy, and how each
    /// warpgroup's columns become instructions.
    #[test]
    fn column_split_decisions() {
        use crate::ir::{Buffer, Extent, SpanId};
        // (threads, policy, A, B, C, trans_b) -> (col_groups, insts) or None.
        let decide = |threads: u32, policy: WarpPolicy, a: [i64; 2], b: [i64; 2], c: [i64; 2], tb: bool| {
            let mut k = Kernel::new("g", threads);
            let mut add = |name: &str, scope: Scope, dtype: DType, shape: [i64; 2]| {
                k.add_buffer(Buffer {
                    name: name.into(),
                    scope,
                    dtype,
                    shape: shape.iter().map(|&x| Extent::Const(x)).collect(),
                    mutable: true,
                    span: SpanId::NONE,
                    layout: None,
                    view: None,
                })
            };
            let (ab, bb, cb) = (
                add("a", Scope::Shared, DType::F16, a),
                add("b", Scope::Shared, DType::F16, b),
                add("c", Scope::Fragment, DType::F32, c),
            );
            k.body = vec![Stmt::new(StmtKind::Gemm {
                a: ab,
                b: bb,
                c: cb,
                trans_a: false,
                trans_b: tb,
                clear: false,
                policy,
            })];
            wgmma_gemm(&k, ab, bb, cb, false, tb, policy, Target::Sm90a).map(|g| (g.col_groups, g.insts))
        };
        use WarpPolicy::*;
        // MLA: scores [64, 64] = Q·KVᵀ (K-major B, K = 576), O [64, 512] += P·V.
        assert_eq!(decide(256, FullCol, [64, 576], [64, 576], [64, 64], true), Some((2, vec![(0, 32)])));
        assert_eq!(decide(256, FullCol, [64, 64], [64, 512], [64, 512], false), Some((2, vec![(0, 256)])));
        assert_eq!(decide(256, Square, [64, 64], [64, 512], [64, 512], false), Some((2, vec![(0, 256)])));
        // N = 320 over two warpgroups: 160 each (K-major B: any multiple of 8),
        // and over one: 256 + 64.
        assert_eq!(decide(256, FullCol, [64, 32], [320, 32], [64, 320], true), Some((2, vec![(0, 160)])));
        assert_eq!(decide(128, FullCol, [64, 32], [32, 320], [64, 320], false), Some((1, vec![(0, 256), (256, 64)])));
        // MN-major B split at column 160: not a panel's first column.
        assert_eq!(decide(256, FullCol, [64, 32], [32, 320], [64, 320], false), None);
        // MN-major B of 64 columns (one 128-byte row, no panels) split at 32: no descriptor.
        assert_eq!(decide(256, FullCol, [64, 32], [32, 64], [64, 64], false), None);
        // 2 × 2 warpgroups (Square only: FullCol means one 64-row band).
        assert_eq!(decide(512, Square, [128, 32], [32, 256], [128, 256], false), Some((2, vec![(0, 128)])));
        assert_eq!(decide(512, FullCol, [128, 32], [32, 256], [128, 256], false), None);
        // FullRow never splits N; M = 64 per warpgroup ignores the policy (as before).
        assert_eq!(decide(256, FullRow, [64, 32], [32, 128], [64, 128], false), None);
        assert_eq!(decide(256, FullCol, [128, 32], [32, 128], [128, 128], false), Some((1, vec![(0, 128)])));
        // Four warpgroups over 64 rows: quarters.
        assert_eq!(decide(512, FullCol, [64, 32], [32, 512], [64, 512], false), Some((4, vec![(0, 128)])));
        assert_eq!(wgmma_instructions(512), vec![(0, 256), (256, 256)]);
        assert_eq!(wgmma_instructions(264), vec![(0, 256), (256, 8)]);
        assert_eq!(wgmma_instructions(40), vec![(0, 40)]);
    }

    /// The column-split accumulator: a bijection onto `[m, n]` whose
    /// warpgroup `j` holds exactly its band's rows and its columns, and
    /// whose instruction `(c0, N)` registers are the PTX placement of an
    /// `m64nNk16` shifted to the warpgroup's columns `+ c0`.
    #[test]
    fn column_split_accumulator_is_a_bijection_with_the_ptx_placement() {
        for (m, n, threads, cg) in [
            (64, 64, 256, 2),
            (64, 512, 256, 2),
            (64, 320, 256, 2),
            (128, 256, 512, 2),
            (64, 512, 512, 4),
            (64, 320, 128, 1),
        ] {
            let l = wgmma_split_accumulator(m, n, threads, cg).unwrap();
            let nw = n / cg;
            assert_eq!(l.active_threads(), threads as i64);
            assert_eq!(l.regs_along(0) * l.regs_along(1), nw / 2);
            let mut seen = HashSet::new();
            for t in 0..threads as i64 {
                let (wg, band, part) = (t / 128, (t / 128) / cg, (t / 128) % cg);
                for lr in 0..2 {
                    for &(c0, ni) in &wgmma_instructions(nw) {
                        for lc in 0..ni / 4 {
                            let (r, c) = (l.coord(t, 0, lr), l.coord(t, 1, c0 / 4 + lc));
                            assert!(r < m && c < n && seen.insert((r, c)), "m {m} n {n} t {t}");
                            let (pr, pc) = wgmma_d_coord(t, wgmma_d_index(lr, lc) as i64);
                            assert_eq!((pr + 64 * band, pc + part * nw + c0), (r, c), "m {m} n {n} wg {wg}");
                        }
                    }
                }
            }
            assert_eq!(seen.len() as i64, m * n);
        }
        // One column group is the old layout.
        assert_eq!(wgmma_split_accumulator(128, 64, 256, 1).unwrap(), wgmma_accumulator(128, 64, 256).unwrap());
        assert!(wgmma_split_accumulator(64, 64, 384, 3).is_err());
        assert!(wgmma_split_accumulator(64, 60, 256, 2).is_err());
        assert!(wgmma_split_accumulator(128, 64, 256, 2).is_err());
    }
}

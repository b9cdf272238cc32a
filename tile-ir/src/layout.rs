//! Layouts: how a tile's elements are distributed over a block's threads and
//! their registers (fragment layouts), and how a shared buffer's elements are
//! placed in shared memory (shared layouts).
//!
//! A [`RootLayout`] covers a full N-D tile (a "root"). Along each dim `d` the
//! coordinate of thread `t`'s per-dim register `l_d` is
//!
//! ```text
//! coord_d(t, l_d) = Σ_fields ((t >> shift) & (count − 1)) · mult  +  regs_d[l_d]
//! ```
//!
//! (a [`DimDist`]: runs of thread-index bits, each a power of two wide, plus a
//! thread-independent register offset). Two families are built:
//! - blocked ([`RootLayout::blocked`]): along each dim a thread holds `spt`
//!   contiguous elements, `thr` threads sit side by side, the pattern
//!   repeats; one bit run per dim, innermost dim on the lowest bits;
//! - the mma.sync m16n8k16 accumulator ([`RootLayout::mma_accumulator`]):
//!   rows on lane bits 2..4 and the warp-row bits, columns on lane bits 0..1
//!   (two contiguous columns per thread) and the warp-column bits.
//!
//! Threads `t ≥ active_threads` hold nothing (idle); elements with a
//! coordinate past the shape are padding (masked). Threads that share all
//! coordinates but one differ in that dim's bits only, so they form
//! butterfly groups for `shfl.bfly` (within a warp) and shared-memory
//! exchanges (across warps).
//!
//! A [`FragLayout`] is a root plus the root dims it keeps: the result of a
//! reduction along a dim drops that dim, and the threads that differed only
//! along it become replicas holding the same values. Registers of a
//! `FragLayout` are numbered row-major over the kept dims' `l_d`, so the
//! register that a nest iteration touches is a function of the register
//! index alone (register-constant access), never of the thread.
//!
//! A [`SharedLayout`] maps the coordinates of a 2-D shared tile to a byte
//! offset: row-major, with the 16-byte chunks of each row XOR-swizzled by
//! the row (CuTe's `Swizzle<B, 4, S>`) so that ldmatrix reads of 8 rows at
//! one column hit 8 different bank groups; or row-major with padded rows.
//!
//! Guarantees (tested as bijections): on a root, `(t < active, r)` ↔ padded
//! coordinates is one-to-one, and the valid ones cover the shape exactly
//! once; a shared layout is one-to-one from coordinates to element slots.

/// A run of thread-index bits that moves one coordinate: it adds
/// `((t >> shift) % count) · mult` (`& (count - 1)` for a power of two).
/// A count that is not a power of two is only ever the highest run of a
/// layout (the warps of three warpgroups: `t >> 5` in `0..12`), whose
/// `t >> shift` the block's threads keep below `count`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadField {
    /// The lowest thread-index bit of the run.
    pub shift: u32,
    /// Threads along this run (≥ 2; a power of two, or the highest run).
    pub count: i64,
    /// The coordinate step per thread along the run.
    pub mult: i64,
}

/// How one dim of a root layout is distributed: the coordinate of thread
/// `t`'s per-dim register `l` is `Σ fields(t) + regs[l]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DimDist {
    /// The thread-index runs that move this coordinate (disjoint bits).
    pub fields: Vec<ThreadField>,
    /// The thread-independent part of the coordinate of each per-dim register.
    pub regs: Vec<i64>,
    /// Registers `vec·i .. vec·i + vec` hold consecutive coordinates
    /// (the vector width along this dim).
    pub vec: i64,
}

impl DimDist {
    /// The blocked distribution `(rep · thr + t_d) · spt + e`, `t_d = (t / stride) % thr`.
    pub fn blocked(spt: i64, thr: i64, reps: i64, stride: i64) -> DimDist {
        let fields =
            if thr > 1 { vec![ThreadField { shift: log2(stride) as u32, count: thr, mult: spt }] } else { vec![] };
        let regs = (0..reps * spt).map(|l| (l / spt) * thr * spt + l % spt).collect();
        DimDist { fields, regs, vec: spt }
    }
    /// The thread part of the coordinate.
    pub fn thread_part(&self, t: i64) -> i64 {
        self.fields.iter().map(|f| ((t >> f.shift) % f.count) * f.mult).sum()
    }
    /// The largest thread part any thread has.
    pub fn max_thread_part(&self) -> i64 {
        self.fields.iter().map(|f| (f.count - 1) * f.mult).sum()
    }
    /// Threads that hold distinct coordinates along this dim.
    pub fn threads_along(&self) -> i64 {
        self.fields.iter().map(|f| f.count).product()
    }
    /// The thread-index bits this dim uses (a run of a count that is not a
    /// power of two: the bits of the next one).
    pub fn thread_mask(&self) -> u64 {
        self.fields.iter().fold(0u64, |m, f| m | (((f.count as u64).next_power_of_two() - 1) << f.shift))
    }
}

fn log2(x: i64) -> i64 {
    63 - (x.max(1) as u64).leading_zeros() as i64
}

/// A distribution of a full N-D tile over `threads` threads (a "root"):
/// per dim a [`DimDist`]. The fields of all dims together use thread-index
/// bits `0 .. log2(active_threads)`, each once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RootLayout {
    /// The tile's extents.
    pub shape: Vec<i64>,
    /// One distribution per dim of `shape`.
    pub dims: Vec<DimDist>,
    /// Threads in the block.
    pub threads: u32,
    /// `Some(w)`: the tile is warpgroup `w`'s alone (a gemm with
    /// `policy(Warpgroup(w))` and what derives from it): its active threads
    /// are `128·w .. 128·w + active_threads()` (at most 128; the fields use
    /// thread bits below 7, so thread `t` holds what `t − 128·w` would),
    /// and the statements on it run inside a branch that only warpgroup
    /// `w` takes. `None`: threads `0 .. active_threads()`.
    pub owner: Option<u32>,
}

/// The name this type had when every root layout was blocked (kept so that
/// code written against it still builds; new code says `RootLayout`).
pub type Blocked = RootLayout;

impl RootLayout {
    /// The blocked layout ([`RootLayout::blocked`]), under its former name.
    pub fn new(shape: &[i64], threads: u32, max_vec: i64) -> RootLayout {
        RootLayout::blocked(shape, threads, max_vec)
    }
}

fn prev_pow2(x: i64) -> i64 {
    let mut p = 1;
    while p * 2 <= x {
        p *= 2;
    }
    p
}

/// The largest power of two ≤ `max_vec` that divides `extent`.
fn vec_for(extent: i64, max_vec: i64) -> i64 {
    let mut v = prev_pow2(max_vec.max(1));
    while v > 1 && extent.max(1) % v != 0 {
        v /= 2;
    }
    v
}

impl RootLayout {
    /// The blocked layout of `shape` for `threads` threads, with at most
    /// `max_vec` contiguous elements per thread along the innermost dim (the
    /// largest power of two ≤ `max_vec` that divides the innermost extent):
    /// along dim `d` a thread holds `spt` contiguous elements, `thr`
    /// threads (a power of two) sit side by side, innermost dim fastest in
    /// the thread index, and the pattern repeats.
    pub fn blocked(shape: &[i64], threads: u32, max_vec: i64) -> RootLayout {
        let n = shape.len();
        let mut spt = vec![1i64; n];
        if n > 0 {
            spt[n - 1] = vec_for(shape[n - 1], max_vec);
        }
        let mut thr = vec![1i64; n];
        let mut avail = prev_pow2(threads.max(1) as i64);
        for d in (0..n).rev() {
            let need = (shape[d].max(1) + spt[d] - 1) / spt[d];
            let t = prev_pow2(need).min(avail);
            thr[d] = t;
            avail /= t;
        }
        let mut stride = 1;
        let mut dims = vec![DimDist { fields: vec![], regs: vec![], vec: 1 }; n];
        for d in (0..n).rev() {
            let reps = (shape[d].max(1) + thr[d] * spt[d] - 1) / (thr[d] * spt[d]);
            dims[d] = DimDist::blocked(spt[d], thr[d], reps, stride);
            stride *= thr[d];
        }
        RootLayout { shape: shape.to_vec(), dims, threads, owner: None }
    }

    /// A layout of `shape` whose outer dims `0..fixed.len()` are distributed
    /// exactly as given (e.g. the rows of a reduction's result), with the
    /// innermost dim spread over the thread bits the fixed dims leave free
    /// (vector width up to `max_vec`) and the dims in between held whole by
    /// every thread. `active` is the number of active threads of the layout
    /// the fixed dims come from: the result uses at least those threads (so
    /// that it agrees with that layout), and `owner` its
    /// [`RootLayout::owner`], which the result keeps. `None` when that is
    /// impossible.
    pub fn with_outer_fixed(
        shape: &[i64],
        threads: u32,
        max_vec: i64,
        fixed: &[DimDist],
        (active, owner): (i64, Option<u32>),
    ) -> Option<RootLayout> {
        let n = shape.len();
        let p = fixed.len();
        if p == 0 || p > n {
            return None;
        }
        let used: u64 = fixed.iter().fold(0, |m, d| m | d.thread_mask());
        if fixed.iter().map(|d| d.thread_mask().count_ones()).sum::<u32>() != used.count_ones() {
            return None;
        }
        let mut dims: Vec<DimDist> = fixed.to_vec();
        // Every thread bit below the block's (power-of-two) thread count that
        // the fixed dims leave free goes to the innermost dim. A fixed run
        // of a count that is not a power of two (the warps of three
        // warpgroups) is the highest: the bits up to it are the layout's.
        let top = (64 - used.leading_zeros()).max(log2(active.max(1)) as u32);
        let odd = fixed.iter().any(|d| d.fields.iter().any(|f| f.count.count_ones() != 1));
        let bits = if odd { top } else { log2(prev_pow2(threads.max(1) as i64)) as u32 };
        // A warpgroup's own layout stays on its 128 threads.
        let bits = if owner.is_some() { bits.min(7) } else { bits };
        if top > bits {
            return None;
        }
        if p < n {
            for _ in p..n - 1 {
                dims.push(DimDist { fields: vec![], regs: vec![], vec: 1 });
            }
            for d in p..n - 1 {
                dims[d] = DimDist::blocked(1, 1, shape[d].max(1), 1);
            }
            let last = shape[n - 1].max(1);
            let spt = vec_for(last, max_vec);
            let need = prev_pow2((last + spt - 1) / spt);
            let mut fields = Vec::new();
            let mut have = 1i64;
            let mut b = 0u32;
            while b < bits && (have < need || b < top) {
                if used & (1 << b) == 0 {
                    // Extend the previous run when the bit continues it.
                    match fields.last_mut() {
                        Some(ThreadField { shift, count, .. }) if *shift + log2(*count) as u32 == b => *count *= 2,
                        _ => fields.push(ThreadField { shift: b, count: 2, mult: have * spt }),
                    }
                    have *= 2;
                }
                b += 1;
            }
            let reps = (last + have * spt - 1) / (have * spt);
            let regs = (0..reps * spt).map(|l| (l / spt) * have * spt + l % spt).collect();
            dims.push(DimDist { fields, regs, vec: spt });
        }
        let r = RootLayout { shape: shape.to_vec(), dims, threads, owner: None };
        let mask = r.dims.iter().fold(0u64, |m, d| m | d.thread_mask());
        let contiguous = mask & (mask + 1) == 0;
        let r = (contiguous && r.active_threads() <= threads as i64).then_some(r)?;
        match owner {
            Some(w) => r.owned_by(w),
            None => Some(r),
        }
    }

    /// The mma.sync m16n8k16 accumulator layout of an `[m, n]` f32 tile:
    /// warp `w = t / 32` sits at `(w / wn, w % wn)` of the warp grid
    /// `warps`, owns rows `[wm_i · m/wm, …)` and columns `[wn_i · n/wn, …)`,
    /// and tiles them with 16×8 atoms in which lane `4g + q` holds
    /// `(g + 8·h, 2q + e)` for `h, e ∈ {0, 1}`. Per-dim registers: along rows
    /// `l = 2·atom + h`, along columns `l = 2·atom + e`.
    pub fn mma_accumulator(m: i64, n: i64, threads: u32, warps: (i64, i64)) -> RootLayout {
        let (wm, wn) = warps;
        let (tm, tn) = (m / wm, n / wn);
        let mut rows = vec![ThreadField { shift: 2, count: 8, mult: 1 }];
        if wm > 1 {
            rows.push(ThreadField { shift: 5 + log2(wn) as u32, count: wm, mult: tm });
        }
        let mut cols = vec![ThreadField { shift: 0, count: 4, mult: 2 }];
        if wn > 1 {
            cols.push(ThreadField { shift: 5, count: wn, mult: tn });
        }
        let row_regs = (0..tm / 8).map(|l| (l / 2) * 16 + (l % 2) * 8).collect();
        let col_regs = (0..tn / 4).map(|l| (l / 2) * 8 + l % 2).collect();
        RootLayout {
            shape: vec![m, n],
            dims: vec![
                DimDist { fields: rows, regs: row_regs, vec: 1 },
                DimDist { fields: cols, regs: col_regs, vec: 2 },
            ],
            threads,
            owner: None,
        }
    }

    /// This layout held by warpgroup `w` alone ([`RootLayout::owner`]);
    /// `None` when it takes more than one warpgroup's threads or `w` is
    /// not a warpgroup of the block.
    pub fn owned_by(mut self, w: u32) -> Option<RootLayout> {
        let fits = self.active_threads() <= 128 && self.threads % 128 == 0 && w < self.threads / 128;
        fits.then(|| {
            self.owner = Some(w);
            self
        })
    }

    /// The `[64, n]` tile of warpgroup `w` alone (`policy(Warpgroup(w))`):
    /// one warpgroup's mma.sync / wgmma accumulator (its four warps over
    /// the 64 rows) on its threads; `None` when the block has no warpgroup
    /// `w`.
    pub fn warpgroup_tile(n: i64, threads: u32, w: u32) -> Option<RootLayout> {
        RootLayout::mma_accumulator(64, n, threads, (4, 1)).owned_by(w)
    }

    /// The threads that hold data: `[first, end)`.
    pub fn thread_range(&self) -> (i64, i64) {
        let first = self.owner.map_or(0, |w| 128 * w as i64);
        (first, first + self.active_threads())
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Threads that hold data. Threads at or above it are idle.
    pub fn active_threads(&self) -> i64 {
        self.dims.iter().map(|d| d.threads_along()).product()
    }
    /// Registers per thread along dim `d`.
    pub fn regs_along(&self, d: usize) -> i64 {
        self.dims[d].regs.len() as i64
    }
    /// Coordinate along dim `d` of thread `t`'s register `l` (per-dim index).
    pub fn coord(&self, t: i64, d: usize, l: i64) -> i64 {
        self.dims[d].thread_part(t) + self.dims[d].regs[l as usize]
    }
    /// The part of `coord` that does not depend on the thread.
    pub fn reg_offset(&self, d: usize, l: i64) -> i64 {
        self.dims[d].regs[l as usize]
    }
    /// Whether dim `d` needs a bounds test (some coordinate reaches past the shape).
    pub fn dim_padded(&self, d: usize) -> bool {
        let dd = &self.dims[d];
        dd.max_thread_part() + dd.regs.iter().copied().max().unwrap_or(0) >= self.shape[d]
    }
}

/// A fragment's layout: a root and the root dims it keeps, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragLayout {
    /// The distribution of the full tile the fragment derives from (itself,
    /// or the tile a reduction reduced).
    pub root: RootLayout,
    /// The root dims the fragment has, in order (all of them for
    /// [`FragLayout::full`]; fewer after a reduction).
    pub kept: Vec<usize>,
}

impl FragLayout {
    /// The layout of the root tile itself (every dim kept).
    pub fn full(root: RootLayout) -> FragLayout {
        let kept = (0..root.rank()).collect();
        FragLayout { root, kept }
    }
    /// The fragment's number of dims.
    pub fn rank(&self) -> usize {
        self.kept.len()
    }
    /// The fragment's extents (the kept dims' of the root).
    pub fn shape(&self) -> Vec<i64> {
        self.kept.iter().map(|&d| self.root.shape[d]).collect()
    }
    /// Registers per thread along each kept dim.
    pub fn reg_extents(&self) -> Vec<i64> {
        self.kept.iter().map(|&d| self.root.regs_along(d)).collect()
    }
    /// Registers per thread.
    pub fn num_regs(&self) -> usize {
        self.reg_extents().iter().product::<i64>() as usize
    }
    /// The per-dim register indices of register `r`.
    pub fn unflatten(&self, r: usize) -> Vec<i64> {
        let ext = self.reg_extents();
        let mut out = vec![0; ext.len()];
        let mut r = r as i64;
        for a in (0..ext.len()).rev() {
            out[a] = r % ext[a];
            r /= ext[a];
        }
        out
    }
    /// The register of per-dim register indices `l` (the inverse of
    /// [`FragLayout::unflatten`]; row-major over [`FragLayout::reg_extents`]).
    pub fn flatten(&self, l: &[i64]) -> usize {
        let ext = self.reg_extents();
        let mut r = 0;
        for a in 0..ext.len() {
            r = r * ext[a] + l[a];
        }
        r as usize
    }
    /// The layout after reducing along (kept) dim `k`.
    pub fn reduced(&self, k: usize) -> FragLayout {
        let mut kept = self.kept.clone();
        kept.remove(k);
        FragLayout { root: self.root.clone(), kept }
    }
    /// Coordinates of thread `t`'s register `r`, and whether it is valid
    /// (inside the shape and held by an active thread).
    pub fn coords(&self, t: i64, r: usize) -> (Vec<i64>, bool) {
        let l = self.unflatten(r);
        let (first, end) = self.root.thread_range();
        let mut valid = first <= t && t < end;
        let c: Vec<i64> = self
            .kept
            .iter()
            .zip(&l)
            .map(|(&d, &ld)| {
                let c = self.root.coord(t, d, ld);
                valid &= c < self.root.shape[d];
                c
            })
            .collect();
        (c, valid)
    }
    /// Whether dim `a` of `self` and dim `b` of `other` distribute their
    /// coordinates identically (same threads, same registers).
    pub fn dim_agrees(&self, a: usize, other: &FragLayout, b: usize) -> bool {
        let (x, da) = (&self.root, self.kept[a]);
        let (y, db) = (&other.root, other.kept[b]);
        x.shape[da] == y.shape[db] && x.dims[da] == y.dims[db]
    }
    /// Whether `self` and `other` place every element on the same threads
    /// and registers (so one may be read where the other is iterated).
    pub fn agrees(&self, other: &FragLayout) -> bool {
        self.rank() == other.rank()
            && self.root.thread_range() == other.root.thread_range()
            && (0..self.rank()).all(|a| self.dim_agrees(a, other, a))
    }
    /// Elements per vector group: the contiguous run along the last kept dim.
    pub fn vec_width(&self) -> i64 {
        self.kept.last().map(|&d| self.root.dims[d].vec).unwrap_or(1)
    }
    /// Describes the layout for dumps: `blocked[shape; spt; thr; reps]`.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self
            .root
            .dims
            .iter()
            .map(|d| {
                let f: Vec<String> =
                    d.fields.iter().map(|f| format!("t[{}+:{}]*{}", f.shift, log2(f.count), f.mult)).collect();
                let regs = if d.regs.len() > 6 {
                    format!("{:?}..{} regs", &d.regs[..4], d.regs.len())
                } else {
                    format!("{:?}", d.regs)
                };
                format!("{{{} + {regs}, vec {}}}", f.join(" + "), d.vec)
            })
            .collect();
        let owner = self.root.owner.map_or_else(String::new, |w| format!(", warpgroup {w}'s"));
        format!("layout(shape={:?}, dims=[{}], kept={:?}{owner})", self.root.shape, dims.join(", "), self.kept)
    }
}

/// The warp grid `(wm, wn)` (warps along M, along N) for an `[m, n]`
/// mma.sync accumulator with `threads` threads: the largest power-of-two
/// number of warps, split by `policy` (`Square`: per-warp tiles as square as
/// possible, ties to fewer warps along N; `FullRow`: along M only;
/// `FullCol`: along N only). Each warp's tile must be a whole number of
/// 16×8 atoms; an error says why not.
pub fn mma_warp_grid(m: i64, n: i64, threads: u32, policy: crate::ir::WarpPolicy) -> Result<(i64, i64), String> {
    use crate::ir::WarpPolicy;
    let warps = prev_pow2((threads / 32).max(1) as i64);
    let fits = |wm: i64, wn: i64| m % (16 * wm) == 0 && n % (8 * wn) == 0;
    let pick = match policy {
        // One warpgroup's four warps, over its 64 rows.
        WarpPolicy::Warpgroup(_) => (m == 64 && fits(4, 1)).then_some((4, 1)),
        WarpPolicy::FullRow => fits(warps, 1).then_some((warps, 1)),
        WarpPolicy::FullCol => fits(1, warps).then_some((1, warps)),
        WarpPolicy::Square => {
            let mut best: Option<((i64, i64), i64)> = None;
            let mut wm = warps;
            while wm >= 1 {
                let wn = warps / wm;
                if fits(wm, wn) {
                    let skew = (log2(m / wm) - log2(n / wn)).abs();
                    if best.is_none_or(|(_, s)| skew < s) {
                        best = Some(((wm, wn), skew));
                    }
                }
                wm /= 2;
            }
            best.map(|b| b.0)
        }
    };
    pick.ok_or_else(|| {
        format!(
            "gemm output [{m}, {n}] cannot be split over {warps} warps with policy {policy:?}: each warp needs a multiple of 16 rows and 8 columns"
        )
    })
}

/// How a shared buffer's elements are placed: `offset(r, c)` in bytes for a
/// 2-D `[rows, cols]` buffer of `elem`-byte elements (higher-rank buffers are
/// row-major and unswizzled, `rows` = the product of the outer extents).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedLayout {
    /// Rows (the product of the outer extents for rank > 2).
    pub rows: i64,
    /// Elements per row (the innermost extent).
    pub cols: i64,
    /// Bytes per element.
    pub elem: i64,
    /// Bytes from one row to the next (`cols · elem`, or more when padded).
    pub row_stride: i64,
    /// `Some((bits, shift))`: byte offset bits `[shift + 4, shift + 4 + bits)`
    /// are XORed into bits `[4, 4 + bits)` (the 16-byte chunk index).
    pub swizzle: Option<(u32, u32)>,
    /// `Some(pc)`: the tile is stored as `cols / pc` panels of `[rows, pc]`
    /// one after the other (`panel_bytes()` apart), each laid out by the
    /// fields above with `row_stride = pc · elem` ([`SharedLayout::panelled`]:
    /// wgmma operands wider than one 128-byte swizzle row).
    pub panel_cols: Option<i64>,
}

impl SharedLayout {
    /// Plain row-major.
    pub fn row_major(rows: i64, cols: i64, elem: i64) -> SharedLayout {
        SharedLayout { rows, cols, elem, row_stride: cols * elem, swizzle: None, panel_cols: None }
    }

    /// The layout for a tensor-core operand read by ldmatrix (8 rows of 16
    /// bytes at a time): a row of 32, 64, 128 bytes or more (a power of two)
    /// is swizzled with `Swizzle<1|2|3, 4, S>` (the XOR source is the row
    /// index within an 8-row group); other rows that are a multiple of 16
    /// bytes are padded by 16 bytes when that makes the row stride an odd
    /// number of 16-byte chunks; anything else stays row-major.
    pub fn for_ldmatrix(rows: i64, cols: i64, elem: i64) -> SharedLayout {
        let rb = cols * elem;
        if rb >= 32 && rb.count_ones() == 1 {
            let bits = (log2(rb / 16) as u32).min(3);
            // Rows of ≥ 128 bytes: XOR with row & 7 (bits at log2(rb));
            // shorter rows: the byte-offset bits 7.. (several rows share a
            // 128-byte line).
            let shift = if rb >= 128 { log2(rb) as u32 - 4 } else { 3 };
            return SharedLayout { rows, cols, elem, row_stride: rb, swizzle: Some((bits, shift)), panel_cols: None };
        }
        if rb % 16 == 0 && (rb / 16) % 2 == 0 {
            return SharedLayout { rows, cols, elem, row_stride: rb + 16, swizzle: None, panel_cols: None };
        }
        SharedLayout::row_major(rows, cols, elem)
    }

    /// The layout a user asked for with `annotate_layout(..)` (see
    /// [`crate::ir::SharedLayoutSpec`]), or why it does not fit a
    /// `[rows, cols]` buffer of `elem`-byte elements.
    pub fn from_spec(
        spec: crate::ir::SharedLayoutSpec,
        rows: i64,
        cols: i64,
        elem: i64,
    ) -> Result<SharedLayout, String> {
        use crate::ir::SharedLayoutSpec as S;
        let rb = cols * elem;
        match spec {
            S::RowMajor => Ok(SharedLayout::row_major(rows, cols, elem)),
            S::Padded { bytes } => {
                if bytes <= 0 || bytes % 16 != 0 {
                    return Err(format!("`padded({bytes})`: the padding must be a positive multiple of 16 bytes (16-byte chunks stay aligned for cp.async and ldmatrix)"));
                }
                Ok(SharedLayout { rows, cols, elem, row_stride: rb + bytes, swizzle: None, panel_cols: None })
            }
            S::Swizzle { bits } => {
                if !(1..=3).contains(&bits) {
                    return Err(format!("`swizzle({bits})`: the swizzle width must be 1, 2 or 3 bits"));
                }
                let need = 16i64 << bits;
                if rb < need || rb.count_ones() != 1 {
                    return Err(format!(
                        "`swizzle({bits})` needs rows of a power of two of at least {need} bytes ({} 16-byte chunks to permute); this buffer's rows are {rb} bytes",
                        1 << bits
                    ));
                }
                // XOR source = byte-offset bits [log2(rb), +bits) = the row index's low bits.
                Ok(SharedLayout {
                    rows,
                    cols,
                    elem,
                    row_stride: rb,
                    swizzle: Some((bits, log2(rb) as u32 - 4)),
                    panel_cols: None,
                })
            }
        }
    }

    /// A tile of 16-bit elements whose rows are a multiple of 128 bytes
    /// wider than 128 (MLA's 576 columns: 9 panels), stored as panels of 64 columns, each `Swizzle<3, 4, 3>`
    /// with 128-byte rows: the layout wgmma and TMA read with the 128B
    /// swizzle (panels `LBO` apart for an MN-major operand; a K-major k16
    /// slice lies in one panel). `None` for other shapes.
    pub fn panelled(rows: i64, cols: i64, elem: i64) -> Option<SharedLayout> {
        let rb = cols * elem;
        (elem == 2 && rb > 128 && rb % 128 == 0).then_some(SharedLayout {
            rows,
            cols,
            elem,
            row_stride: 128,
            swizzle: Some((3, 3)),
            panel_cols: Some(64),
        })
    }

    /// Bytes of one panel (of the whole tile when it has no panels).
    pub fn panel_bytes(&self) -> i64 {
        self.rows * self.row_stride
    }

    /// Bytes the buffer occupies.
    pub fn bytes(&self) -> i64 {
        match self.panel_cols {
            Some(pc) => self.panel_bytes() * ((self.cols + pc - 1) / pc),
            None => self.rows * self.row_stride,
        }
    }

    /// The XOR applied to the byte offset of an element in row `r`.
    pub fn xor_of_row(&self, r: i64) -> i64 {
        match self.swizzle {
            Some((bits, shift)) => (((r * self.row_stride) >> (shift + 4)) & ((1 << bits) - 1)) << 4,
            None => 0,
        }
    }

    /// The byte offset of element `(r, c)`.
    pub fn offset(&self, r: i64, c: i64) -> i64 {
        let (panel, c) = match self.panel_cols {
            Some(pc) => (c / pc, c % pc),
            None => (0, c),
        };
        panel * self.panel_bytes() + ((r * self.row_stride + c * self.elem) ^ self.xor_of_row(r))
    }

    /// Rows after which the swizzle pattern repeats (adding a multiple of it
    /// to the row leaves the XOR unchanged).
    pub fn row_period(&self) -> i64 {
        match self.swizzle {
            Some((bits, shift)) => ((1i64 << (shift + 4 + bits)) / self.row_stride).max(1),
            None => 1,
        }
    }

    /// Panels of 64 columns ([`SharedLayout::panelled`]) for a buffer with
    /// sub-views: any 16-bit tile whose rows are a multiple of 64 columns
    /// wider than 128 bytes (`[64, 576]`: nine panels), so that views of
    /// whole panels (`[.., 512..]`, `[.., ..512]`) are wgmma and TMA operands.
    pub fn panelled_for_views(rows: i64, cols: i64, elem: i64) -> Option<SharedLayout> {
        (elem == 2 && cols * elem > 128 && cols % 64 == 0).then_some(SharedLayout {
            rows,
            cols,
            elem,
            row_stride: 128,
            swizzle: Some((3, 3)),
            panel_cols: Some(64),
        })
    }

    /// The layout of the window `shape` at `origin` of a buffer of shape
    /// `parent` laid out by `self` (shapes folded to `[rows, cols]` as
    /// everywhere: outer dims into rows), and the window's byte offset in the
    /// buffer: `Ok((base, l))` with `base + l.offset(r, c)` the parent's
    /// offset of every element of the window (checked element by element),
    /// `base` a multiple of 16 bytes (cp.async and ldmatrix chunks) and of
    /// the swizzle pattern's span (wgmma and TMA swizzle absolute address
    /// bits), a swizzled window whole rows or whole panels of the buffer
    /// (what wgmma descriptors and TMA boxes describe). `Err(why)` otherwise.
    pub fn window(&self, parent: &[i64], origin: &[i64], shape: &[i64]) -> Result<(i64, SharedLayout), String> {
        let n = parent.len();
        if n == 0 || origin.len() != n || shape.len() != n {
            return Err("the window's rank differs from the buffer's".into());
        }
        let cols = shape[n - 1];
        let rows: i64 = shape[..n - 1].iter().product();
        let outer_parent = &parent[..n - 1];
        // The parent's folded row of the window's folded row `r`.
        let parent_row = |r: i64| {
            let mut f = r;
            let mut idx = vec![0i64; n - 1];
            for d in (0..n - 1).rev() {
                idx[d] = f % shape[d] + origin[d];
                f /= shape[d];
            }
            idx.iter().zip(outer_parent).fold(0, |acc, (i, e)| acc * e + i)
        };
        let c0 = origin[n - 1];
        let base = self.offset(parent_row(0), c0);
        let l = SharedLayout { rows, cols, ..*self };
        let span = match self.swizzle {
            Some((bits, shift)) => 1i64 << (shift + 4 + bits),
            None => 16,
        };
        if self.swizzle.is_some() {
            match self.panel_cols {
                Some(pc) if c0 % pc != 0 || cols % pc != 0 => {
                    return Err(format!(
                        "its columns {c0}..{} are not whole panels of {pc} columns (the column offset and width must be multiples of {pc})",
                        c0 + cols
                    ))
                }
                None if cols * self.elem != self.row_stride => {
                    return Err(format!(
                        "its columns {c0}..{} are not whole rows of the swizzled buffer ({} columns)",
                        c0 + cols,
                        self.row_stride / self.elem
                    ))
                }
                _ => {}
            }
        }
        if base % span != 0 {
            return Err(format!(
                "it starts {base} bytes into the buffer, not a multiple of {span} bytes{}",
                if self.swizzle.is_some() { " (the swizzle pattern's span)" } else { "" }
            ));
        }
        for r in 0..rows {
            let pr = parent_row(r);
            for c in 0..cols {
                if self.offset(pr, c0 + c) != base + l.offset(r, c) {
                    return Err(format!(
                        "its element ({r}, {c}) does not sit where a {} window would put it",
                        l.describe()
                    ));
                }
            }
        }
        Ok((base, l))
    }

    /// A one-line description (padding, swizzle, panels) for dumps and messages.
    pub fn describe(&self) -> String {
        let panels = match self.panel_cols {
            Some(pc) => format!(", panels of {pc} columns"),
            None => String::new(),
        };
        match self.swizzle {
            Some((b, s)) => format!("swizzle<{b},4,{s}>(rows={}, row_bytes={}{panels})", self.rows, self.row_stride),
            None => format!("row_major(rows={}, row_bytes={}{panels})", self.rows, self.row_stride),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check_root(shape: &[i64], threads: u32, vec: i64) {
        check_layout(&RootLayout::blocked(shape, threads, vec), vec);
    }

    /// Bijection: valid (thread, register) pairs ↔ the elements of the shape.
    fn check_layout(b: &RootLayout, vec: i64) {
        let (shape, threads) = (&b.shape[..], b.threads);
        let f = FragLayout::full(b.clone());
        assert!(b.active_threads() <= threads as i64);
        assert!(b.dims.iter().all(|d| d.fields.iter().all(|f| f.count.count_ones() == 1)));
        // The thread bits the dims use are disjoint and contiguous from bit 0.
        let mask = b.dims.iter().fold(0u64, |m, d| {
            assert_eq!(m & d.thread_mask(), 0);
            m | d.thread_mask()
        });
        assert_eq!(mask + 1, b.active_threads() as u64);
        let total: i64 = shape.iter().product();
        let mut seen = HashMap::new();
        for t in 0..threads as i64 {
            for r in 0..f.num_regs() {
                let (c, valid) = f.coords(t, r);
                if t >= b.active_threads() {
                    assert!(!valid);
                    continue;
                }
                if valid {
                    assert!(c.iter().zip(shape).all(|(x, s)| *x >= 0 && x < s));
                    assert!(seen.insert(c.clone(), (t, r)).is_none(), "{shape:?} {threads} {vec}: {c:?} twice");
                }
            }
        }
        assert_eq!(seen.len() as i64, total, "{shape:?} {threads} {vec}: not every element covered");
        // Inverse direction: every element maps back to a unique (t, r).
        for (c, (t, r)) in &seen {
            assert_eq!(&f.coords(*t, *r).0, c);
        }
        // Vector groups are contiguous along the innermost dim.
        let v = f.vec_width();
        assert_eq!(shape[shape.len() - 1] % v, 0);
        for t in 0..b.active_threads() {
            for r in (0..f.num_regs()).step_by(v as usize) {
                let (c0, _) = f.coords(t, r);
                for e in 1..v as usize {
                    let (c, _) = f.coords(t, r + e);
                    assert_eq!(c[c.len() - 1], c0[c0.len() - 1] + e as i64);
                }
            }
        }
    }

    #[test]
    fn blocked_layouts_are_bijections() {
        let shapes: &[&[i64]] = &[
            &[1],
            &[7],
            &[64],
            &[100],
            &[1024],
            &[4096],
            &[1, 4096],
            &[3, 5],
            &[16, 16],
            &[128, 64],
            &[96, 96],
            &[8, 130],
            &[2, 3, 4],
            &[4, 16, 32],
            &[5, 7, 9],
            &[1, 1, 1],
        ];
        for shape in shapes {
            for threads in [32u32, 64, 96, 128, 256, 1024] {
                for vec in [1i64, 2, 4, 8] {
                    check_root(shape, threads, vec);
                }
            }
        }
    }

    /// A warpgroup's own layout (`policy(Warpgroup(w))`): valid exactly on
    /// its 128 threads, which hold what threads `0..128` of the plain
    /// layout hold; every element once; rows derived from it keep the owner.
    #[test]
    fn owned_layouts_live_on_their_warpgroup() {
        let plain = RootLayout::mma_accumulator(64, 64, 256, (4, 1));
        assert_eq!(plain.active_threads(), 128);
        for w in 0..2u32 {
            let owned = FragLayout::full(plain.clone().owned_by(w).expect("a warpgroup of 256 threads"));
            assert_eq!(owned.root.thread_range(), (128 * w as i64, 128 * w as i64 + 128));
            let mut seen = std::collections::HashSet::new();
            for t in 0..256i64 {
                for r in 0..owned.num_regs() {
                    let (c, valid) = owned.coords(t, r);
                    assert_eq!(valid, t / 128 == w as i64, "thread {t}");
                    if valid {
                        assert_eq!(c, FragLayout::full(plain.clone()).coords(t - 128 * w as i64, r).0);
                        assert!(seen.insert(c));
                    }
                }
            }
            assert_eq!(seen.len(), 64 * 64);
            let rows = owned.reduced(1);
            let fixed = [rows.root.dims[0].clone()];
            let o = RootLayout::with_outer_fixed(&[64, 512], 256, 2, &fixed, (128, Some(w))).expect("layout");
            assert_eq!(o.owner, Some(w));
            assert!(FragLayout { root: o, kept: vec![0] }.agrees(&rows));
            // Not the plain layout's, although the threads hold the same
            // coordinates: another warpgroup's registers.
            assert_eq!(owned.agrees(&FragLayout::full(plain.clone())), w == 0);
        }
        assert!(plain.clone().owned_by(2).is_none());
        assert!(RootLayout::mma_accumulator(128, 64, 256, (8, 1)).owned_by(0).is_none());
    }

    #[test]
    fn outer_fixed_layouts_agree_with_reduced_rows() {
        // The rows of a reduction over [BM, BN] can drive a nest over [BM, D].
        for (bm, bn, d, threads) in
            [(8i64, 64i64, 32i64, 128u32), (16, 256, 64, 256), (64, 64, 128, 128), (4, 1024, 100, 256)]
        {
            let s = FragLayout::full(RootLayout::blocked(&[bm, bn], threads, 4));
            let m = s.reduced(1);
            let fixed = [m.root.dims[0].clone()];
            let o = RootLayout::with_outer_fixed(&[bm, d], threads, 4, &fixed, (m.root.active_threads(), None))
                .expect("layout");
            let of = FragLayout::full(o.clone());
            check_root(&[bm, d], threads, 4);
            let view = FragLayout { root: o, kept: vec![0] };
            assert!(view.agrees(&m), "{bm} {bn} {d} {threads}: {} vs {}", view.describe(), m.describe());
            // And it is a bijection over [bm, d].
            let mut seen = std::collections::HashSet::new();
            for t in 0..threads as i64 {
                for reg in 0..of.num_regs() {
                    let (c, valid) = of.coords(t, reg);
                    if valid {
                        assert!(seen.insert(c));
                    }
                }
            }
            assert_eq!(seen.len() as i64, bm * d);
        }
    }

    #[test]
    fn reduced_layouts_replicate_rows() {
        for shape in [vec![4i64, 64], vec![16, 256], vec![3, 100], vec![2, 4, 8], vec![8, 3, 64]] {
            for threads in [32u32, 128, 256] {
                let root = FragLayout::full(RootLayout::blocked(&shape, threads, 4));
                for k in 0..shape.len() {
                    let red = root.reduced(k);
                    // Every valid source element's reduced coordinate lives in the same thread,
                    // in the register given by dropping dim k from the register index.
                    let mut covered = std::collections::HashSet::new();
                    for t in 0..threads as i64 {
                        for r in 0..root.num_regs() {
                            let (c, valid) = root.coords(t, r);
                            if !valid {
                                continue;
                            }
                            let mut l = root.unflatten(r);
                            l.remove(k);
                            let rr = red.flatten(&l);
                            let (rc, rvalid) = red.coords(t, rr);
                            let mut expect = c.clone();
                            expect.remove(k);
                            assert!(rvalid);
                            assert_eq!(rc, expect);
                            covered.insert(rc);
                        }
                    }
                    let n: i64 = red.shape().iter().product();
                    assert_eq!(covered.len() as i64, n);
                }
            }
        }
    }

    #[test]
    fn mma_accumulator_layouts_are_bijections_with_the_ptx_atom() {
        for (m, n) in [(16i64, 8i64), (64, 64), (128, 128), (64, 128), (128, 64), (32, 16)] {
            for (wm, wn) in [(1i64, 1i64), (2, 2), (4, 2), (2, 4), (1, 4), (4, 1), (8, 1), (1, 8)] {
                if m % (16 * wm) != 0 || n % (8 * wn) != 0 {
                    continue;
                }
                let threads = (wm * wn * 32) as u32;
                let l = RootLayout::mma_accumulator(m, n, threads, (wm, wn));
                check_layout(&l, 2);
                // Each 16×8 atom matches the PTX C fragment: register i of an
                // atom at lane 4g + q holds (g + 8·(i ≥ 2), 2q + (i & 1)).
                let f = FragLayout::full(l.clone());
                let ext = f.reg_extents();
                for t in 0..threads as i64 {
                    let (lane, w) = (t % 32, t / 32);
                    let (g, q) = (lane / 4, lane % 4);
                    for am in 0..ext[0] / 2 {
                        for an in 0..ext[1] / 2 {
                            for i in 0..4 {
                                let r = f.flatten(&[2 * am + i / 2, 2 * an + i % 2]);
                                let (c, valid) = f.coords(t, r);
                                assert!(valid);
                                let row = (w / wn) * (m / wm) + 16 * am + g + 8 * (i / 2);
                                let col = (w % wn) * (n / wn) + 8 * an + 2 * q + i % 2;
                                assert_eq!(c, vec![row, col]);
                            }
                        }
                    }
                }
                // Rows reduce to a replicated layout that covers every row.
                let red = f.reduced(1);
                let mut rows = std::collections::HashSet::new();
                for t in 0..threads as i64 {
                    for r in 0..red.num_regs() {
                        rows.insert(red.coords(t, r).0[0]);
                    }
                }
                assert_eq!(rows.len() as i64, m);
            }
        }
    }

    #[test]
    fn outer_fixed_layouts_follow_mma_rows() {
        // A nest over [BM, D] whose rows come from an accumulator's row reduction.
        for (m, n, d, warps) in [(64i64, 64i64, 32i64, (4i64, 1i64)), (128, 128, 64, (2, 4)), (64, 64, 64, (2, 2))] {
            let threads = (warps.0 * warps.1 * 32) as u32;
            let acc = FragLayout::full(RootLayout::mma_accumulator(m, n, threads, warps));
            let rows = acc.reduced(1);
            let o =
                RootLayout::with_outer_fixed(&[m, d], threads, 4, &[rows.root.dims[0].clone()], (threads as i64, None))
                    .expect("layout");
            check_layout(&o, 4);
            let view = FragLayout { root: o, kept: vec![0] };
            assert!(view.agrees(&rows));
        }
    }

    #[test]
    fn shared_layouts_are_bijections_and_ldmatrix_is_conflict_free() {
        for (rows, cols, elem) in [
            (64i64, 32i64, 2i64),
            (128, 64, 2),
            (32, 128, 2),
            (64, 16, 2),
            (16, 256, 2),
            (32, 24, 2),
            (8, 8, 4),
            (64, 48, 2),
        ] {
            let l = SharedLayout::for_ldmatrix(rows, cols, elem);
            let mut seen = std::collections::HashSet::new();
            for r in 0..rows {
                for c in 0..cols {
                    let o = l.offset(r, c);
                    assert!(o >= 0 && o + elem <= l.bytes(), "{}: ({r},{c}) at {o}", l.describe());
                    assert_eq!(o % elem, 0);
                    assert!(seen.insert(o / elem), "{}: ({r},{c}) collides", l.describe());
                    // The XOR does not depend on a whole-period row offset.
                    assert_eq!(l.xor_of_row(r), l.xor_of_row(r % l.row_period()));
                }
            }
            // ldmatrix: 8 rows at one 16-byte-aligned column form one phase;
            // their 16-byte chunks must fall in 8 different 16-byte bank groups.
            if (cols * elem) % 16 == 0 && rows >= 8 {
                for r0 in (0..rows - 7).step_by(8) {
                    for c in (0..cols).step_by((16 / elem) as usize) {
                        let groups: std::collections::HashSet<i64> =
                            (0..8).map(|i| (l.offset(r0 + i, c) % 128) / 16).collect();
                        assert_eq!(groups.len(), 8, "{}: bank conflict at rows {r0}.., col {c}", l.describe());
                    }
                }
            }
        }
    }

    #[test]
    fn panelled_layouts_are_for_ldmatrix_panels() {
        use std::collections::HashSet;
        for (rows, cols) in [(32i64, 128i64), (16, 256), (64, 128), (64, 576), (16, 192)] {
            let l = SharedLayout::panelled(rows, cols, 2).unwrap();
            let panel = SharedLayout::for_ldmatrix(rows, 64, 2);
            assert_eq!(l.panel_bytes(), panel.bytes());
            assert_eq!(l.bytes(), rows * cols * 2);
            let mut seen = HashSet::new();
            for r in 0..rows {
                for c in 0..cols {
                    let off = l.offset(r, c);
                    assert_eq!(off, (c / 64) * panel.bytes() + panel.offset(r, c % 64), "({r}, {c})");
                    assert!(off >= 0 && off + 2 <= l.bytes() && seen.insert(off));
                }
            }
        }
        // Only 16-bit rows wider than 128 bytes, a multiple of 128.
        assert!(SharedLayout::panelled(32, 64, 2).is_none());
        assert!(SharedLayout::panelled(32, 96, 2).is_none());
        assert!(SharedLayout::panelled(32, 160, 2).is_none());
        assert!(SharedLayout::panelled(32, 128, 4).is_none());
        assert!(SharedLayout::panelled(32, 128, 2).unwrap().describe().contains("panels of 64 columns"));
    }

    /// Windows of a layout: whole panels of a panelled `[64, 576]` (K_pe at
    /// 512.., V at ..512) and a row band of a row-major buffer are exact
    /// (`window` checks every element); a window off the panels, a swizzled
    /// window narrower than the rows and a misaligned row-major window are not.
    #[test]
    fn windows_of_layouts() {
        let p = SharedLayout::panelled_for_views(64, 576, 2).unwrap();
        assert_eq!(p.bytes(), 9 * 8192);
        let (base, l) = p.window(&[64, 576], &[0, 512], &[64, 64]).unwrap();
        assert_eq!((base, l.bytes()), (8 * 8192, 8192));
        let (base, l) = p.window(&[64, 576], &[0, 0], &[64, 512]).unwrap();
        assert_eq!((base, l.bytes()), (0, 8 * 8192));
        assert!(p.window(&[64, 576], &[0, 32], &[64, 64]).unwrap_err().contains("not whole panels of 64 columns"));
        assert!(p.window(&[64, 576], &[8, 0], &[56, 64]).is_ok(), "one panel, whole swizzle periods down");
        assert!(
            p.window(&[64, 576], &[8, 0], &[56, 128]).unwrap_err().contains("does not sit"),
            "panels 56 rows apart"
        );
        let s = SharedLayout::for_ldmatrix(64, 64, 2);
        assert!(s.window(&[64, 64], &[0, 32], &[64, 32]).unwrap_err().contains("not whole rows"));
        let (base, _) = s.window(&[64, 64], &[8, 0], &[8, 64]).unwrap();
        assert_eq!(base, 8 * 128);
        let r = SharedLayout::row_major(16, 40, 4);
        let (base, l) = r.window(&[16, 40], &[2, 4], &[3, 8]).unwrap();
        assert_eq!((base, l.row_stride), (2 * 160 + 16, 160));
        assert!(r.window(&[16, 40], &[0, 1], &[3, 8]).unwrap_err().contains("not a multiple of 16 bytes"));
        // 3-D: a band of whole inner planes is a window, a partial middle dim is not.
        let r3 = SharedLayout::row_major(4 * 8, 16, 4);
        assert!(r3.window(&[4, 8, 16], &[1, 0, 0], &[2, 8, 16]).is_ok());
        assert!(r3.window(&[4, 8, 16], &[0, 0, 0], &[2, 4, 16]).unwrap_err().contains("does not sit"));
    }
}

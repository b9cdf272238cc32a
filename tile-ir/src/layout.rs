//! Layouts: how a tile's elements are distributed over a block's threads and
//! their registers.
//!
//! A [`Blocked`] layout covers a full N-D tile (a "root"): along each dim `d`
//! a thread holds `spt[d]` contiguous elements (only the innermost dim has
//! `spt > 1`, the vector width), `thr[d]` threads sit side by side, and the
//! pattern repeats `reps[d]` times. With `t_d = (t / stride[d]) % thr[d]`
//! (innermost dim fastest, `stride` = product of the `thr` of inner dims),
//! and a per-dim register index `l_d = rep·spt[d] + e`:
//!
//! ```text
//! coord_d(t, l_d) = (rep · thr[d] + t_d) · spt[d] + e
//! ```
//!
//! Threads `t ≥ Π thr` hold nothing (idle); elements with a coordinate past
//! the shape are padding (masked). Every `thr[d]` is a power of two, so the
//! threads sharing all coordinates but one form butterfly groups for
//! `shfl.bfly`.
//!
//! A [`FragLayout`] is a root plus the root dims it keeps: the result of a
//! reduction along a dim drops that dim, and the threads that differed only
//! along it become replicas holding the same values. Registers of a
//! `FragLayout` are numbered row-major over the kept dims' `l_d`, so the
//! register that a nest iteration touches is a function of the register
//! index alone (register-constant access), never of the thread.
//!
//! Guarantees (tested as bijections): on a root, `(t < Π thr, r)` ↔ padded
//! coordinates is one-to-one, and the valid ones cover the shape exactly once.

/// A distribution of a full N-D tile over `threads` threads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Blocked {
    pub shape: Vec<i64>,
    /// Contiguous elements per thread along each dim.
    pub spt: Vec<i64>,
    /// Threads along each dim (powers of two).
    pub thr: Vec<i64>,
    /// Repetitions along each dim: `ceil(shape / (thr · spt))`.
    pub reps: Vec<i64>,
    /// Thread-index stride of each dim (innermost 1).
    pub stride: Vec<i64>,
    /// Threads in the block.
    pub threads: u32,
}

fn prev_pow2(x: i64) -> i64 {
    let mut p = 1;
    while p * 2 <= x {
        p *= 2;
    }
    p
}

impl Blocked {
    /// The blocked layout of `shape` for `threads` threads, with at most
    /// `max_vec` contiguous elements per thread along the innermost dim (the
    /// largest power of two ≤ `max_vec` that divides the innermost extent).
    pub fn new(shape: &[i64], threads: u32, max_vec: i64) -> Blocked {
        let n = shape.len();
        let mut spt = vec![1i64; n];
        if n > 0 {
            let last = shape[n - 1].max(1);
            let mut v = prev_pow2(max_vec.max(1));
            while v > 1 && last % v != 0 {
                v /= 2;
            }
            spt[n - 1] = v;
        }
        let mut thr = vec![1i64; n];
        let mut avail = prev_pow2(threads.max(1) as i64);
        for d in (0..n).rev() {
            let need = (shape[d].max(1) + spt[d] - 1) / spt[d];
            let t = prev_pow2(need).min(avail);
            thr[d] = t;
            avail /= t;
        }
        let reps = (0..n).map(|d| (shape[d].max(1) + thr[d] * spt[d] - 1) / (thr[d] * spt[d])).collect();
        let mut stride = vec![1i64; n];
        for d in (0..n.saturating_sub(1)).rev() {
            stride[d] = stride[d + 1] * thr[d + 1];
        }
        Blocked { shape: shape.to_vec(), spt, thr, reps, stride, threads }
    }

    /// A blocked layout of `shape` whose outer dims `0..fixed.len()` are
    /// distributed exactly as given (`(thr, spt, reps, stride)` per dim, e.g.
    /// the rows of a reduction's result), with the inner dims sharing the
    /// threads that the outer dims' stride leaves (vector width up to
    /// `max_vec` on the innermost). `None` when that is impossible.
    pub fn with_outer_fixed(shape: &[i64], threads: u32, max_vec: i64, fixed: &[(i64, i64, i64, i64)]) -> Option<Blocked> {
        let n = shape.len();
        let p = fixed.len();
        if p == 0 || p > n {
            return None;
        }
        let mut spt = vec![1i64; n];
        let mut thr = vec![1i64; n];
        let mut reps = vec![1i64; n];
        let mut stride = vec![1i64; n];
        for (d, &(t, s, r, st)) in fixed.iter().enumerate() {
            if t < 1 || t.count_ones() != 1 || s < 1 || (d + 1 < n && d + 1 != p && s != 1) {
                return None;
            }
            thr[d] = t;
            spt[d] = s;
            reps[d] = r;
            stride[d] = st;
        }
        // Inner (free) dims share `stride[p-1]` threads.
        let mut avail = stride[p - 1];
        if p < n {
            let last = shape[n - 1].max(1);
            let mut v = prev_pow2(max_vec.max(1));
            while v > 1 && last % v != 0 {
                v /= 2;
            }
            spt[n - 1] = v;
            for d in (p..n).rev() {
                let need = (shape[d].max(1) + spt[d] - 1) / spt[d];
                thr[d] = if d == p { avail } else { prev_pow2(need).min(avail) };
                avail /= thr[d];
                reps[d] = (shape[d].max(1) + thr[d] * spt[d] - 1) / (thr[d] * spt[d]);
            }
        } else if avail != 1 {
            return None;
        }
        for d in (0..n.saturating_sub(1)).rev() {
            let want = stride[d + 1] * thr[d + 1];
            if d >= p || stride[d] != want {
                if d < p {
                    return None;
                }
                stride[d] = want;
            }
        }
        for d in 0..p {
            if (shape[d].max(1) + thr[d] * spt[d] - 1) / (thr[d] * spt[d]) != reps[d] {
                return None;
            }
        }
        let b = Blocked { shape: shape.to_vec(), spt, thr, reps, stride, threads };
        (b.active_threads() <= threads as i64).then_some(b)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Threads that hold data: `Π thr`. Threads at or above it are idle.
    pub fn active_threads(&self) -> i64 {
        self.thr.iter().product()
    }
    /// Registers per thread along dim `d`: `reps · spt`.
    pub fn regs_along(&self, d: usize) -> i64 {
        self.reps[d] * self.spt[d]
    }
    /// Thread coordinate along dim `d`.
    pub fn thread_coord(&self, t: i64, d: usize) -> i64 {
        (t / self.stride[d]) % self.thr[d]
    }
    /// Coordinate along dim `d` of thread `t`'s register `l` (per-dim index).
    pub fn coord(&self, t: i64, d: usize, l: i64) -> i64 {
        let (rep, e) = (l / self.spt[d], l % self.spt[d]);
        (rep * self.thr[d] + self.thread_coord(t, d)) * self.spt[d] + e
    }
    /// The part of `coord` that does not depend on the thread.
    pub fn reg_offset(&self, d: usize, l: i64) -> i64 {
        let (rep, e) = (l / self.spt[d], l % self.spt[d]);
        rep * self.thr[d] * self.spt[d] + e
    }
    /// Whether dim `d` needs a bounds test (its padded extent exceeds the shape).
    pub fn dim_padded(&self, d: usize) -> bool {
        self.reps[d] * self.thr[d] * self.spt[d] != self.shape[d]
    }
}

/// A fragment's layout: a root and the root dims it keeps, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragLayout {
    pub root: Blocked,
    pub kept: Vec<usize>,
}

impl FragLayout {
    pub fn full(root: Blocked) -> FragLayout {
        let kept = (0..root.rank()).collect();
        FragLayout { root, kept }
    }
    pub fn rank(&self) -> usize {
        self.kept.len()
    }
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
        let mut valid = t < self.root.active_threads();
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
        x.shape[da] == y.shape[db]
            && x.spt[da] == y.spt[db]
            && x.thr[da] == y.thr[db]
            && x.reps[da] == y.reps[db]
            && x.stride[da] == y.stride[db]
    }
    /// Whether `self` and `other` place every element on the same threads
    /// and registers (so one may be read where the other is iterated).
    pub fn agrees(&self, other: &FragLayout) -> bool {
        self.rank() == other.rank()
            && self.root.active_threads() == other.root.active_threads()
            && (0..self.rank()).all(|a| self.dim_agrees(a, other, a))
    }
    /// Elements per vector group: the contiguous run along the last kept dim.
    pub fn vec_width(&self) -> i64 {
        self.kept.last().map(|&d| self.root.spt[d]).unwrap_or(1)
    }
    /// Describes the layout for dumps: `blocked[shape; spt; thr; reps]`.
    pub fn describe(&self) -> String {
        format!(
            "blocked(shape={:?}, spt={:?}, thr={:?}, reps={:?}, kept={:?})",
            self.root.shape, self.root.spt, self.root.thr, self.root.reps, self.kept
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check_root(shape: &[i64], threads: u32, vec: i64) {
        let b = Blocked::new(shape, threads, vec);
        let f = FragLayout::full(b.clone());
        assert!(b.active_threads() <= threads as i64);
        assert!(b.thr.iter().all(|t| t.count_ones() == 1));
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

    #[test]
    fn outer_fixed_layouts_agree_with_reduced_rows() {
        // The rows of a reduction over [BM, BN] can drive a nest over [BM, D].
        for (bm, bn, d, threads) in [(8i64, 64i64, 32i64, 128u32), (16, 256, 64, 256), (64, 64, 128, 128), (4, 1024, 100, 256)] {
            let s = FragLayout::full(Blocked::new(&[bm, bn], threads, 4));
            let m = s.reduced(1);
            let r = &m.root;
            let fixed = [(r.thr[0], r.spt[0], r.reps[0], r.stride[0])];
            let o = Blocked::with_outer_fixed(&[bm, d], threads, 4, &fixed).expect("layout");
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
                let root = FragLayout::full(Blocked::new(&shape, threads, 4));
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
}

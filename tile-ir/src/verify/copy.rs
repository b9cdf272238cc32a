//! `copy(src, dst)`.
//!
//! Checks: not inside a parallel loop; origin coordinates are `I32`; at most
//! one side global; a global side has one origin coordinate per tensor dim, a
//! non-global side none; a global side's squeezed dims are increasing and in
//! range, and its spanned dims are as many as the other side's rank (no
//! right-alignment: a tile of fewer dims than the tensor says which); two non-global sides have equal shapes; `fill` has the
//! destination's dtype and only comes with a global source; the destination
//! global is mutable.

use super::{scope_name, shape_text, Verifier};
use crate::ir::{CacheHint, DType, Expr, Scope, TileRef};

impl Verifier<'_> {
    pub(super) fn check_copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>, cache: CacheHint) {
        self.no_tile_op_in_parallel("copy");
        let ft = fill.and_then(|f| self.expr(f));
        for r in [src, dst] {
            for o in &r.origin {
                if let Some(t) = self.expr(o) {
                    if t != DType::I32 {
                        let l = self.bl(r.buf);
                        self.err(format!("copy: origin coordinate of {l} has type {t}, expected i32"));
                    }
                }
            }
        }
        let (Some(sb), Some(db)) = (self.buffer(src.buf), self.buffer(dst.buf)) else {
            let (sl, dl) = (self.bl(src.buf), self.bl(dst.buf));
            self.err(format!("copy from {sl} to {dl}: no such buffer"));
            return;
        };
        if cache != CacheHint::Normal && sb.scope != Scope::Global {
            self.err(format!(
                "copy from `{}` with `.evict_first()`: the hint is the L2 policy of reads of a global tensor, and `{}` is a {}",
                sb.name,
                sb.name,
                scope_name(sb.scope)
            ));
        }
        if fill.is_some() && sb.scope != Scope::Global {
            self.err(format!(
                "copy from `{}` with a fill value: fill replaces masked reads of a global tensor, and `{}` is a {}",
                sb.name,
                sb.name,
                scope_name(sb.scope)
            ));
        }
        if let Some(ft) = ft {
            if ft != db.dtype {
                self.err(format!(
                    "copy into `{}`: the fill value has type {ft}, the destination's elements {}",
                    db.name, db.dtype
                ));
            }
        }
        if db.scope == Scope::Global && !db.mutable {
            self.err(format!("copy into `{}`, a read-only tensor; declare it `&mut Tensor`", db.name));
        }
        match (sb.scope == Scope::Global, db.scope == Scope::Global) {
            (true, true) => {
                self.err(format!(
                    "copy from `{}` to `{}`: both sides are global tensors (tensor parameters); stage the data through a shared buffer or a fragment",
                    sb.name, db.name
                ));
            }
            (false, false) => {
                for (b, r) in [(sb, src), (db, dst)] {
                    if !r.origin.is_empty() {
                        self.err(format!(
                            "copy: `{}` is a {} and takes no origin (the whole buffer is copied)",
                            b.name,
                            scope_name(b.scope)
                        ));
                    }
                }
                if sb.shape != db.shape {
                    self.err(format!(
                        "copy from `{}` {} to `{}` {}: the shapes differ",
                        sb.name,
                        shape_text(self.kernel, &sb.shape),
                        db.name,
                        shape_text(self.kernel, &db.shape)
                    ));
                }
            }
            (g_src, _) => {
                let (g, gr, l, lr) = if g_src { (sb, src, db, dst) } else { (db, dst, sb, src) };
                if !lr.origin.is_empty() || !lr.squeezed.is_empty() {
                    self.err(format!(
                        "copy: `{}` is a {} and takes no origin (the whole buffer is copied)",
                        l.name,
                        scope_name(l.scope)
                    ));
                }
                if gr.origin.len() != g.rank() {
                    self.err(format!(
                        "copy: the tile of `{}` has {} origin coordinates, but the tensor has rank {}",
                        g.name,
                        gr.origin.len(),
                        g.rank()
                    ));
                    return;
                }
                if l.rank() > g.rank() {
                    self.err(format!(
                        "copy between `{}` (rank {}) and a tile of `{}` (rank {}): the buffer's rank exceeds the tensor's (`{}` is {}, `{}` is {})",
                        l.name,
                        l.rank(),
                        g.name,
                        g.rank(),
                        l.name,
                        shape_text(self.kernel, &l.shape),
                        g.name,
                        shape_text(self.kernel, &g.shape)
                    ));
                    return;
                }
                let sq = &gr.squeezed;
                if sq.windows(2).any(|w| w[0] >= w[1]) || sq.iter().any(|&d| d >= gr.origin.len()) {
                    self.err(format!(
                        "copy: the squeezed dims {sq:?} of the tile of `{}` must be increasing and below its {} coordinates",
                        g.name,
                        gr.origin.len()
                    ));
                    return;
                }
                let spanned = gr.origin.len() - sq.len();
                if l.rank() != spanned {
                    if sq.is_empty() {
                        self.err(format!(
                            "copy: the tile of `{}` has {} coordinates and `{}` has rank {}: say which dims the tile spans (`e..` spans a dim from `e`, a plain index is squeezed), e.g. `{}.tile([{}])`",
                            g.name,
                            gr.origin.len(),
                            l.name,
                            l.rank(),
                            g.name,
                            range_example(gr.origin.len(), l.rank())
                        ));
                    } else {
                        self.err(format!(
                            "copy: the tile of `{}` spans {spanned} dim{} and `{}` has rank {}: give one range entry (`e..` or `..`) per dim of `{}`",
                            g.name,
                            if spanned == 1 { "" } else { "s" },
                            l.name,
                            l.rank(),
                            l.name
                        ));
                    }
                }
            }
        }
    }
}

/// `a, b, c.., ..`-style coordinates for an example: the last `ranged` of
/// `n` entries spanned.
fn range_example(n: usize, ranged: usize) -> String {
    let names = ["b", "s", "h", "d", "e"];
    (0..n)
        .map(|i| {
            let nm = names.get(i).copied().unwrap_or("i");
            if i + ranged >= n {
                format!("{nm}0..")
            } else {
                nm.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

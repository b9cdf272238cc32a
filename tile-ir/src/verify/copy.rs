//! `copy(src, dst)`.
//!
//! Checks: not inside a parallel loop; origin coordinates are `I32`; at most
//! one side global; a global side has one origin coordinate per tensor dim, a
//! non-global side none; a non-global side facing a global one has rank ≤
//! the tensor's; two non-global sides have equal shapes; `fill` has the
//! destination's dtype and only comes with a global source; the destination
//! global is mutable.

use super::{scope_name, shape_text, Verifier};
use crate::ir::{DType, Expr, Scope, TileRef};

impl Verifier<'_> {
    pub(super) fn check_copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) {
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
                if gr.origin.len() != g.rank() {
                    self.err(format!(
                        "copy: the tile of `{}` has {} origin coordinates, but the tensor has rank {}",
                        g.name,
                        gr.origin.len(),
                        g.rank()
                    ));
                }
                if !lr.origin.is_empty() {
                    self.err(format!(
                        "copy: `{}` is a {} and takes no origin (the whole buffer is copied)",
                        l.name,
                        scope_name(l.scope)
                    ));
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
                }
            }
        }
    }
}

//! Sub-views of shared buffers ([`crate::ir::View`]).
//!
//! Checks, statically: a view is a shared buffer whose parent exists, is a
//! shared buffer and not itself a view, has the view's element type and
//! rank, and holds the whole window (`0 ≤ origin[d]` and
//! `origin[d] + shape[d] ≤ parent.shape[d]` in every dim); a view carries no
//! `annotate_layout` of its own (it has its parent's layout). Whether the
//! window is expressible in the parent's layout is layout inference's
//! question (`passes/layout_infer.rs`), asked once the layout is known.

use super::{scope_name, Verifier};
use crate::ir::{Buffer, Scope, View};

impl Verifier<'_> {
    pub(super) fn check_view(&mut self, buf: &Buffer, view: &View) {
        let span = buf.span;
        if buf.scope != Scope::Shared {
            self.err_at(
                span,
                format!(
                    "`{}` is a {} declared as a view; only shared buffers have views",
                    buf.name,
                    scope_name(buf.scope)
                ),
            );
            return;
        }
        let Some(parent) = self.buffer(view.of) else {
            self.err_at(span, format!("view `{}` is of {}, which does not exist", buf.name, view.of));
            return;
        };
        if parent.scope != Scope::Shared {
            self.err_at(
                span,
                format!(
                    "`{}` is a view of `{}`, a {}; only shared buffers have views",
                    buf.name,
                    parent.name,
                    scope_name(parent.scope)
                ),
            );
            return;
        }
        if parent.view.is_some() {
            self.err_at(
                span,
                format!(
                    "`{}` is a view of `{}`, itself a view; a view is of the buffer that owns the memory",
                    buf.name, parent.name
                ),
            );
            return;
        }
        if parent.dtype != buf.dtype {
            self.err_at(
                span,
                format!(
                    "view `{}` is {} but `{}` holds {}; a view has its buffer's element type",
                    buf.name, buf.dtype, parent.name, parent.dtype
                ),
            );
        }
        if buf.layout.is_some() {
            self.err_at(
                span,
                format!(
                    "view `{}` has its own `annotate_layout`; a view has the layout of `{}` (annotate that buffer)",
                    buf.name, parent.name
                ),
            );
        }
        let (Some(shape), Some(pshape)) = (buf.const_shape(), parent.const_shape()) else { return };
        if view.origin.len() != pshape.len() || shape.len() != pshape.len() {
            self.err_at(
                span,
                format!(
                    "view `{}` of `{}` has {} origin coordinates and {} extents, but `{}` has {} dimensions; give one range per dimension",
                    buf.name,
                    parent.name,
                    view.origin.len(),
                    shape.len(),
                    parent.name,
                    pshape.len()
                ),
            );
            return;
        }
        for d in 0..pshape.len() {
            let (o, n, p) = (view.origin[d], shape[d], pshape[d]);
            if o < 0 || o.checked_add(n).is_none_or(|end| end > p) {
                self.err_at(
                    span,
                    format!(
                        "view `{}` of `{}` is out of bounds: dimension {d} takes {o}..{} but `{}` has {p} (dimension {d} is 0..{p})",
                        buf.name,
                        parent.name,
                        o.saturating_add(n),
                        parent.name
                    ),
                );
            }
        }
    }
}

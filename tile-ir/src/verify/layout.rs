//! `annotate_layout(&buf, spec)`: the layout annotations of shared buffers.
//!
//! Checks: only shared buffers carry a layout, and the spec fits the
//! buffer seen as `[rows, cols]` (outer dims folded into rows), as
//! [`crate::layout::SharedLayout::from_spec`] says.

use super::{scope_name, Verifier};
use crate::ir::Scope;

impl Verifier<'_> {
    /// `annotate_layout(&buf, spec)`: only shared buffers of a constant
    /// shape have a layout, and `spec` must fit the buffer's rows.
    pub(super) fn check_layout_annotation(&mut self, buf: &crate::ir::Buffer, spec: crate::ir::SharedLayoutSpec) {
        if buf.scope != Scope::Shared {
            self.err_at(
                buf.span,
                format!(
                    "`annotate_layout`: `{}` is a {}; only shared buffers have a layout to choose",
                    buf.name,
                    scope_name(buf.scope)
                ),
            );
            return;
        }
        let Some(shape) = buf.const_shape() else { return };
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape.iter().rev().skip(1).product::<i64>();
        if let Err(why) = crate::layout::SharedLayout::from_spec(spec, rows, cols, buf.dtype.size_bytes() as i64) {
            self.err_at(buf.span, format!("`annotate_layout` of shared buffer `{}`: {why}", buf.name));
        }
    }
}

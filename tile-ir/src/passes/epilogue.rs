//! Epilogue staging: fragment → global copies whose fragment layout would
//! store fewer than 16 bytes per access (the mma.sync accumulator holds 2
//! adjacent columns per thread: 4-byte f16 stores) go through a shared
//! scratch tile instead, so that the global stores are 16-byte vectors.
//!
//! Expects a verified kernel and its [`LayoutPlan`]. Rewrites each eligible
//! top-level `copy(frag, tensor.tile(..))` into
//! `copy(frag, scratch); copy(scratch, tensor.tile(..))`, where `scratch` is
//! a new shared buffer of the destination's dtype whose rows are padded by
//! 16 bytes (the accumulator writes of the 8 rows a warp touches at once
//! land in distinct banks; 16-byte row reads stay aligned). The existing
//! lowering then does the rest: the fragment → shared copy converts and
//! writes the scratch, the shared → global copy stores 16-byte vectors,
//! masked at the edges, and falls back to element stores (run-time test)
//! when the row length is not a multiple of the vector; barrier insertion
//! sees both copies' shared accesses.
//!
//! Guarantees: only copies at the top level of the kernel body are staged
//! (so a scratch is never reused by a later iteration of a loop), only when
//! 16-byte vectors can be proven for the tile (its row is a multiple of 16
//! bytes; the destination is a 2-D window along the tensor's last dim: a
//! 2-D tensor, or an N-D one with the other dims squeezed). A scratch is recorded in
//! [`LayoutPlan::aliases`] over the largest shared buffer that no statement
//! at or after the copy mentions (dead there: the top level runs in order);
//! lowering decides whether it fits. Each schedule ([`crate::schedule`])
//! drops the staging when the result would exceed the target's shared-memory
//! limit.

use crate::ir::{Buffer, BufferId, CacheHint, Expr, Extent, Kernel, Scope, Stmt, StmtKind, TileRef};
use crate::layout::SharedLayout;

use super::layout_infer::LayoutPlan;

/// Bytes one vectorized global store writes.
const VECTOR_BYTES: i64 = 16;

/// Returns the rewritten kernel and whether any copy was staged.
pub fn stage_epilogues(kernel: &Kernel, plan: &mut LayoutPlan) -> (Kernel, bool) {
    let mut out = kernel.clone();
    let mut body = Vec::with_capacity(kernel.body.len());
    let mut staged = false;
    for (i, stmt) in kernel.body.iter().enumerate() {
        let StmtKind::Copy { src, dst, fill: None, .. } = &stmt.kind else {
            body.push(stmt.clone());
            continue;
        };
        let Some((rows, cols)) = eligible(kernel, plan, src, dst) else {
            body.push(stmt.clone());
            continue;
        };
        let (fb, gb) = (kernel.buffer(src.buf), kernel.buffer(dst.buf));
        let elem = gb.dtype.size_bytes() as i64;
        let scratch = out.add_buffer(Buffer {
            name: format!("{}_epilogue", fb.name),
            scope: Scope::Shared,
            dtype: gb.dtype,
            shape: vec![Extent::Const(rows), Extent::Const(cols)],
            mutable: true,
            span: stmt.span,
            layout: None,
            view: None,
        });
        let layout =
            SharedLayout { rows, cols, elem, row_stride: cols * elem + VECTOR_BYTES, swizzle: None, panel_cols: None };
        plan.shared.insert(scratch, layout);
        plan.scratch.insert(scratch);
        if let Some(dead) = largest_dead_shared(kernel, plan, &kernel.body[i..]) {
            plan.aliases.insert(scratch, dead);
        }
        let zero = || vec![Expr::i32(0), Expr::i32(0)];
        body.push(Stmt::spanned(
            StmtKind::Copy {
                src: src.clone(),
                dst: TileRef::new(scratch, zero()),
                fill: None,
                cache: CacheHint::Normal,
            },
            stmt.span,
        ));
        body.push(Stmt::spanned(
            StmtKind::Copy {
                src: TileRef::new(scratch, zero()),
                dst: dst.clone(),
                fill: None,
                cache: CacheHint::Normal,
            },
            stmt.span,
        ));
        staged = true;
    }
    out.body = body;
    (out, staged)
}

/// `(rows, cols)` of the tile when the copy `src → dst` gains from staging.
fn eligible(kernel: &Kernel, plan: &LayoutPlan, src: &TileRef, dst: &TileRef) -> Option<(i64, i64)> {
    let (fb, gb) = (kernel.buffer(src.buf), kernel.buffer(dst.buf));
    // A 2-D window whose rows run along the tensor's last dim (the others
    // squeezed: `o.tile([b, h, s0.., ..])` of a 4-D tensor), so that each
    // row of the tile is contiguous in memory.
    let spanned = dst.spanned();
    if fb.scope != Scope::Fragment
        || gb.scope != Scope::Global
        || dst.origin.len() != gb.rank()
        || spanned.len() != 2
        || spanned[1] != gb.rank() - 1
    {
        return None;
    }
    let shape = fb.const_shape()?;
    let [rows, cols] = shape[..] else { return None };
    let layout = plan.frags.get(&src.buf)?;
    if layout.shape() != shape {
        return None;
    }
    let elem = gb.dtype.size_bytes() as i64;
    let direct_bytes = layout.vec_width() * elem;
    if direct_bytes >= VECTOR_BYTES || (cols * elem) % VECTOR_BYTES != 0 || rows <= 0 {
        return None;
    }
    Some((rows, cols))
}

/// The shared buffer with the largest footprint that `rest` (the statements
/// from the staged copy to the end of the kernel) never mentions.
fn largest_dead_shared(kernel: &Kernel, plan: &LayoutPlan, rest: &[Stmt]) -> Option<BufferId> {
    let mut used = Vec::new();
    for s in rest {
        stmt_buffers(s, &mut used);
    }
    (0..kernel.buffers.len())
        .map(|i| BufferId(i as u32))
        .filter(|b| {
            let buf = kernel.buffer(*b);
            // A view owns no memory; a buffer is dead only when its views are.
            buf.scope == Scope::Shared && buf.view.is_none() && !used.iter().any(|u| kernel.same_memory(*u, *b))
        })
        .max_by_key(|b| {
            let buf = kernel.buffer(*b);
            let n: i64 = buf.const_shape().map(|s| s.iter().product()).unwrap_or(0);
            plan.shared.get(b).map(|l| l.bytes()).unwrap_or(n * buf.dtype.size_bytes() as i64)
        })
}

/// Every buffer `s` mentions (reads, writes, copies, gemm operands).
fn stmt_buffers(s: &Stmt, out: &mut Vec<BufferId>) {
    match &s.kind {
        StmtKind::Let { value, .. } | StmtKind::Assign { value, .. } => value.collect_loads(out),
        StmtKind::Store { buf, index, value } | StmtKind::AtomicAdd { buf, index, value } => {
            out.push(*buf);
            index.iter().for_each(|e| e.collect_loads(out));
            value.collect_loads(out);
        }
        StmtKind::For { start, end, body, .. } => {
            start.collect_loads(out);
            end.collect_loads(out);
            body.iter().for_each(|s| stmt_buffers(s, out));
        }
        StmtKind::If { cond, then, otherwise } => {
            cond.collect_loads(out);
            then.iter().chain(otherwise).for_each(|s| stmt_buffers(s, out));
        }
        StmtKind::Copy { src, dst, fill, .. } => {
            for t in [src, dst] {
                out.push(t.buf);
                t.origin.iter().for_each(|e| e.collect_loads(out));
            }
            if let Some(f) = fill {
                f.collect_loads(out);
            }
        }
        StmtKind::Fill { buf, value } => {
            out.push(*buf);
            value.collect_loads(out);
        }
        StmtKind::Reduce { src, dst, .. } => out.extend([*src, *dst]),
        StmtKind::Gemm { a, b, c, .. } => out.extend([*a, *b, *c]),
        StmtKind::Barrier => {}
        StmtKind::Print { args, .. } => args.iter().for_each(|e| e.collect_loads(out)),
    }
}

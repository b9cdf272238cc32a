//! The tile operations besides `copy` and `gemm`: `fill`, `reduce_*`,
//! `atomic_add`, `barrier` and `print`, and where tile operations may be.
//!
//! Checks: no tile op (`Copy`, `Fill`, `Reduce`, `Barrier`, `Gemm`) inside
//! a parallel loop (they are collective); `Fill` targets a non-global buffer
//! with a value of its dtype; `Reduce`: src and dst are fragments,
//! `dim < rank(src)`, dst's shape is src's without `dim` (for a rank-1 src,
//! `[]` or `[1]`), dst's dtype is src's, or `f32` for a float src
//! (accumulate f16/bf16 in f32), not `bool`; `AtomicAdd` on a mutable
//! global tensor, not of `bool`, with a value of the element type.

use super::rules::{reduce_result_shape, reduce_shape_ok};
use super::{scope_name, Verifier};
use crate::ir::{BufferId, DType, Expr, ReduceOp, Scope};

impl Verifier<'_> {
    pub(super) fn no_tile_op_in_parallel(&mut self, what: &str) {
        if let Some(&v) = self.parallel_vars.last() {
            let l = self.vl(v);
            self.err(format!("{what} inside the parallel loop over {l}: tile operations are collective and must be outside parallel loops"));
        }
    }

    pub(super) fn check_fill(&mut self, buf: &BufferId, value: &Expr) {
        self.no_tile_op_in_parallel("fill");
        let t = self.expr(value);
        match self.buffer(*buf) {
            None => self.err(format!("fill of {buf}, which does not exist")),
            Some(b) => {
                if b.scope == Scope::Global {
                    self.err(format!(
                        "fill of `{}`, a global tensor; fill applies to shared, fragment and local buffers",
                        b.name
                    ));
                }
                if let Some(t) = t {
                    if t != b.dtype {
                        self.err(format!(
                            "fill of `{}`: the value has type {t}, the buffer's elements {}",
                            b.name, b.dtype
                        ));
                    }
                }
            }
        }
    }

    pub(super) fn check_reduce(&mut self, op: &ReduceOp, src: &BufferId, dst: &BufferId, dim: &usize) {
        self.no_tile_op_in_parallel("reduce");
        let opn = format!("{op:?}").to_lowercase();
        let (Some(sb), Some(db)) = (self.buffer(*src), self.buffer(*dst)) else {
            let (sl, dl) = (self.bl(*src), self.bl(*dst));
            self.err(format!("reduce_{opn} from {sl} to {dl}: no such buffer"));
            return;
        };
        for b in [sb, db] {
            if b.scope != Scope::Fragment {
                self.err(format!("reduce_{opn}: `{}` is a {}, expected a fragment", b.name, scope_name(b.scope)));
            }
        }
        if *dim >= sb.rank() {
            self.err(format!("reduce_{opn} of `{}` along dim {dim}, but it has rank {}", sb.name, sb.rank()));
        } else if let (Some(ss), Some(ds)) = (sb.const_shape(), db.const_shape()) {
            if !reduce_shape_ok(&ss, *dim, &ds) {
                let want = reduce_result_shape(&ss, *dim).unwrap_or_default();
                self.err(format!(
                    "reduce_{opn} of `{}` {:?} along dim {dim} gives shape {:?}, but `{}` has shape {:?}",
                    sb.name, ss, want, db.name, ds
                ));
            }
        }
        let dtype_ok = sb.dtype == db.dtype || (sb.dtype.is_float() && db.dtype == DType::F32);
        if !dtype_ok {
            self.err(format!(
                "reduce_{opn} from `{}` ({}) into `{}` ({}): the destination must have the source's type (or f32 for a float source)",
                sb.name, sb.dtype, db.name, db.dtype
            ));
        }
        if sb.dtype == DType::Bool {
            self.err(format!("reduce_{opn} of `{}`, whose elements are bool", sb.name));
        }
    }

    pub(super) fn check_atomic_add(&mut self, buf: &BufferId, index: &[Expr], value: &Expr) {
        let t = self.expr(value);
        self.access(*buf, index, "atomic_add on");
        if let Some(b) = self.buffer(*buf) {
            if b.scope != Scope::Global {
                self.err(format!(
                    "atomic_add on `{}`, a {}; atomics apply to global tensors only",
                    b.name,
                    scope_name(b.scope)
                ));
            } else if !b.mutable {
                self.err(format!("atomic_add on `{}`, a read-only tensor; declare it `&mut Tensor`", b.name));
            }
            if b.dtype == DType::Bool {
                self.err(format!("atomic_add on `{}`, whose elements are bool", b.name));
            }
            if let Some(t) = t {
                if t != b.dtype {
                    self.err(format!(
                        "atomic_add on `{}`: the value has type {t}, the tensor's elements {}",
                        b.name, b.dtype
                    ));
                }
            }
        }
    }
}

impl Verifier<'_> {
    /// `Print`: a format that parses ([`crate::print_format::parse`]) with
    /// one placeholder per argument, and arguments that type-check. It may
    /// be inside a parallel loop (each iteration prints).
    pub(super) fn check_print(&mut self, format: &str, args: &[Expr]) {
        for a in args {
            let _ = self.expr(a);
        }
        match crate::print_format::parse(format) {
            Err(e) => self.err(format!("print: {e}")),
            Ok(pieces) => {
                let n = crate::print_format::arg_count(&pieces);
                if n != args.len() {
                    self.err(format!(
                        "print: the format has {n} placeholder{} but {} argument{} given",
                        if n == 1 { "" } else { "s" },
                        args.len(),
                        if args.len() == 1 { " is" } else { "s are" }
                    ));
                }
            }
        }
    }
}

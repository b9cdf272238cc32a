//! The kernel header: threads, variables, dims, params, buffers, the grid,
//! `use_swizzle` and the cluster.
//!
//! Checks: `threads` is a positive multiple of 32, at most 1024; every
//! `VarId`/`BufferId` in the header is in range; `params` and `dims` are
//! consistent (tensor params are global buffers, scalar params are `Param`
//! vars of a scalar type, every dynamic dim is an `i32` `Dim` var listed once
//! in `dims` and bound by some tensor's shape; every global buffer is a
//! parameter); shared/fragment/local shapes are constant and positive;
//! global shapes are positive constants or `Dyn` dims; the grid uses only
//! `Dim` vars, `Param` vars and integer constants, and has an integer type;
//! `rasterize` (`use_swizzle`), when set, is at least 1; `blocks_per_sm`
//! blocks of `threads` fit one SM ([`super::rules::blocks_per_sm_problem`]); `cluster` extents
//! are at least 1, with a product of at most [`MAX_CLUSTER_BLOCKS`] (the
//! portable cluster size), and divide every constant grid extent (dynamic
//! extents are checked at launch); a shared buffer fits the largest target's
//! shared memory and a fragment fits [`MAX_REGS_PER_THREAD`] registers per
//! thread. Layout annotations: [`super::layout`].

use super::rules::{blocks_per_sm_problem, threads_ok};
use super::{buf_label, scope_name, shape_text, Verifier};
use crate::ir::{BufferId, DType, Expr, Extent, Kernel, ParamKind, Scope, SpanId, Value, VarId, VarKind};
use crate::target::Target;

/// The most blocks a thread block cluster may have without the non-portable
/// opt-in (sm_90).
pub const MAX_CLUSTER_BLOCKS: u64 = 8;

/// The most registers a fragment or a local buffer may take per thread (the
/// lowering's limit: a parallel nest or a fragment unrolls over them).
pub const MAX_REGS_PER_THREAD: u64 = 256;

impl Verifier<'_> {
    /// A shared buffer larger than any target's shared memory, or a fragment
    /// that cannot fit in [`MAX_REGS_PER_THREAD`] registers per thread
    /// whatever its layout, is an error here, before schedules and layouts
    /// would work over its elements.
    fn check_buffer_size(&mut self, b: BufferId, scope: Scope) {
        let Some(buf) = self.buffer(b) else { return };
        let mut elements: u128 = 1;
        for e in &buf.shape {
            match *e {
                Extent::Const(c) if c > 0 && c <= i32::MAX as i64 => elements = elements.saturating_mul(c as u128),
                // Reported above.
                _ => return,
            }
        }
        let label =
            format!("{} `{}` ({} {})", scope_name(scope), buf.name, shape_text(self.kernel, &buf.shape), buf.dtype);
        match scope {
            Scope::Shared => {
                let limit = Target::ALL.iter().map(|t| t.info().shared_limit).max().unwrap_or(0);
                let bytes = elements.saturating_mul(buf.dtype.size_bytes() as u128);
                if bytes > limit as u128 {
                    self.err_at(
                        buf.span,
                        format!("{label} takes {bytes} bytes, more than the {limit} bytes of shared memory of any target; use a smaller tile"),
                    );
                }
            }
            Scope::Fragment => {
                let threads = self.kernel.threads as u128;
                if threads_ok(self.kernel.threads.into()) && elements.div_ceil(threads) > MAX_REGS_PER_THREAD as u128 {
                    self.err_at(
                        buf.span,
                        format!(
                            "{label} has {elements} elements: at least {} registers per thread with {threads} threads (at most {MAX_REGS_PER_THREAD}); use a smaller tile or more threads",
                            elements.div_ceil(threads)
                        ),
                    );
                }
            }
            _ => {}
        }
    }

    pub(super) fn check_header(&mut self) {
        let k = self.kernel;
        if !threads_ok(k.threads.into()) {
            self.err_at(
                SpanId::NONE,
                format!("kernel `{}`: threads = {} must be a positive multiple of 32, at most 1024", k.name, k.threads),
            );
        }
        if let Some(problem) = blocks_per_sm_problem(k.blocks_per_sm.into(), k.threads.into()) {
            self.err_at(SpanId::NONE, format!("kernel `{}`: {problem}", k.name));
        }
        // Variables: kinds and types that are fixed.
        for (i, var) in k.vars.iter().enumerate() {
            let id = VarId(i as u32);
            match var.kind {
                VarKind::Dim if var.dtype != DType::I32 => {
                    self.err_at(SpanId::NONE, format!("dimension `{}` has type {}, expected i32", var.name, var.dtype))
                }
                VarKind::Dim if !k.dims.contains(&id) => {
                    self.err_at(SpanId::NONE, format!("dimension `{}` is not listed in the kernel's dims", var.name))
                }
                VarKind::BlockIdx(axis) if axis > 2 => self.err_at(
                    SpanId::NONE,
                    format!("block index `{}` has axis {axis}, expected 0 (x), 1 (y) or 2 (z)", var.name),
                ),
                VarKind::BlockIdx(_) if var.dtype != DType::I32 => self
                    .err_at(SpanId::NONE, format!("block index `{}` has type {}, expected i32", var.name, var.dtype)),
                VarKind::Param if !k.params.iter().any(|p| p.kind == ParamKind::Scalar(id)) => self.err_at(
                    SpanId::NONE,
                    format!("scalar parameter variable `{}` is not listed in the kernel's params", var.name),
                ),
                _ => {}
            }
        }
        // dims: Dim vars, listed once, each bound by some tensor's shape.
        for (i, &d) in k.dims.iter().enumerate() {
            let Some(var) = self.var(d) else {
                self.err_at(SpanId::NONE, format!("dims[{i}] refers to {d}, which does not exist"));
                continue;
            };
            if var.kind != VarKind::Dim {
                self.err_at(SpanId::NONE, format!("dims[{i}] is `{}`, which is not a dimension variable", var.name));
            }
            if k.dims[..i].contains(&d) {
                self.err_at(SpanId::NONE, format!("dimension `{}` is listed twice in dims", var.name));
            }
            let used = k.params.iter().any(|p| match p.kind {
                ParamKind::Tensor(b) => self.buffer(b).is_some_and(|b| b.shape.contains(&Extent::Dyn(d))),
                ParamKind::Scalar(_) => false,
            });
            if !used {
                self.err_at(
                    SpanId::NONE,
                    format!(
                        "dimension `{}` appears in no tensor parameter's shape, so nothing binds it at launch",
                        var.name
                    ),
                );
            }
        }
        // params
        for (i, p) in k.params.iter().enumerate() {
            match p.kind {
                ParamKind::Tensor(b) => match self.buffer(b) {
                    None => {
                        self.err_at(SpanId::NONE, format!("parameter `{}` refers to {b}, which does not exist", p.name))
                    }
                    Some(buf) => {
                        if buf.scope != Scope::Global {
                            self.err_at(
                                buf.span,
                                format!(
                                    "tensor parameter `{}` must be a global buffer, `{}` is a {}",
                                    p.name,
                                    buf.name,
                                    scope_name(buf.scope)
                                ),
                            );
                        }
                        if k.params[..i].iter().any(|q| q.kind == p.kind) {
                            self.err_at(buf.span, format!("tensor `{}` is listed twice in params", buf.name));
                        }
                    }
                },
                ParamKind::Scalar(v) => match self.var(v) {
                    None => {
                        self.err_at(SpanId::NONE, format!("parameter `{}` refers to {v}, which does not exist", p.name))
                    }
                    Some(var) => {
                        if var.kind != VarKind::Param {
                            self.err_at(
                                SpanId::NONE,
                                format!("scalar parameter `{}` must be a variable of kind Param", p.name),
                            );
                        }
                        if !matches!(var.dtype, DType::F32 | DType::I32 | DType::U32 | DType::F16 | DType::BF16) {
                            self.err_at(
                                SpanId::NONE,
                                format!(
                                    "scalar parameter `{}` has type {}; scalars are f32, i32, u32, f16 or bf16",
                                    p.name, var.dtype
                                ),
                            );
                        }
                    }
                },
            }
        }
        // buffers
        for (i, buf) in k.buffers.iter().enumerate() {
            let id = BufferId(i as u32);
            if let Some(spec) = buf.layout {
                self.check_layout_annotation(buf, spec);
            }
            if let Some(view) = &buf.view {
                self.check_view(buf, view);
            }
            match buf.scope {
                Scope::Global => {
                    if !k.params.iter().any(|p| p.kind == ParamKind::Tensor(id)) {
                        self.err_at(buf.span, format!("global tensor `{}` is not a kernel parameter", buf.name));
                    }
                    if buf.dtype == DType::Bool || buf.dtype == DType::I64 {
                        self.err_at(
                            buf.span,
                            format!(
                                "tensor `{}` has element type {}; tensors hold f16, bf16, f32, i32 or u32",
                                buf.name, buf.dtype
                            ),
                        );
                    }
                    for (d, e) in buf.shape.iter().enumerate() {
                        match *e {
                            Extent::Const(c) if c <= 0 || c > i32::MAX as i64 => self.err_at(
                                buf.span,
                                format!("tensor `{}`: dimension {d} is {c}, expected a positive i32", buf.name),
                            ),
                            Extent::Const(_) => {}
                            Extent::Dyn(v) => match self.var(v) {
                                None => self.err_at(
                                    buf.span,
                                    format!("tensor `{}`: dimension {d} refers to {v}, which does not exist", buf.name),
                                ),
                                Some(var) if var.kind != VarKind::Dim || !k.dims.contains(&v) => self.err_at(
                                    buf.span,
                                    format!("tensor `{}`: dimension {d} is `{}`, which is not a dynamic dimension listed in dims", buf.name, var.name),
                                ),
                                Some(_) => {}
                            },
                        }
                    }
                }
                scope => {
                    for (d, e) in buf.shape.iter().enumerate() {
                        match *e {
                            Extent::Const(c) if c <= 0 || c > i32::MAX as i64 => self.err_at(
                                buf.span,
                                format!(
                                    "{} `{}`: dimension {d} is {c}, expected a positive constant",
                                    scope_name(scope),
                                    buf.name
                                ),
                            ),
                            Extent::Const(_) => {}
                            Extent::Dyn(v) => {
                                let vl = self.vl(v);
                                self.err_at(
                                    buf.span,
                                    format!(
                                        "{} `{}`: dimension {d} is {vl}; only global tensors have dynamic dimensions",
                                        scope_name(scope),
                                        buf.name
                                    ),
                                )
                            }
                        }
                    }
                    self.check_buffer_size(id, scope);
                }
            }
        }
        if k.rasterize == Some(0) {
            self.err_at(SpanId::NONE, "use_swizzle: the panel width is 0, expected at least 1");
        }
        let blocks: u128 = k.cluster.iter().map(|&c| c as u128).product();
        if k.cluster.contains(&0) {
            self.err_at(
                SpanId::NONE,
                format!("kernel `{}`: cluster {:?} has an extent of 0; every extent is at least 1", k.name, k.cluster),
            );
        } else if blocks > MAX_CLUSTER_BLOCKS as u128 {
            self.err_at(
                SpanId::NONE,
                format!(
                    "kernel `{}`: cluster {:?} has {blocks} blocks; the portable limit is {MAX_CLUSTER_BLOCKS} blocks per cluster",
                    k.name, k.cluster
                ),
            );
        } else {
            // A constant grid extent that the cluster does not divide could
            // never launch on a GPU with clusters.
            for (axis, e) in k.grid.iter().enumerate() {
                if let Expr::Const(Value::I32(extent)) = e {
                    let c = k.cluster[axis] as i64;
                    if *extent > 0 && (*extent as i64) % c != 0 {
                        let name = ["x", "y", "z"][axis];
                        self.err_at(
                            SpanId::NONE,
                            format!(
                                "kernel `{}`: the grid's {name} extent is the constant {extent}, not a multiple of the cluster's {c}; the grid must be a multiple of the cluster on every axis",
                                k.name
                            ),
                        );
                    }
                }
            }
        }
        // grid
        for (axis, e) in k.grid.iter().enumerate() {
            self.span = SpanId::NONE;
            let mut bad = Vec::new();
            grid_check(k, e, &mut bad);
            let placed_ok = bad.is_empty();
            for b in bad {
                self.err(format!("grid extent {axis}: {b}"));
            }
            // Type-check only what uses allowed names, to report each mistake once.
            if !placed_ok {
                continue;
            }
            if let Some(t) = self.expr_type_quiet(e) {
                if !t.is_int() {
                    self.err(format!("grid extent {axis} has type {t}, expected an integer"));
                }
            }
        }
    }

    /// Type of a grid expression without scoping/placement errors (those
    /// are reported by `grid_check`). Reports type errors.
    pub(super) fn expr_type_quiet(&mut self, e: &Expr) -> Option<DType> {
        let saved = std::mem::take(&mut self.parallel_vars);
        let r = self.expr(e);
        self.parallel_vars = saved;
        r
    }
}

/// Reports, in `bad`, what a grid expression uses besides `Dim`/`Param`
/// variables and constants.
fn grid_check(k: &Kernel, e: &Expr, bad: &mut Vec<String>) {
    match e {
        Expr::Const(_) => {}
        Expr::Var(v) => match k.vars.get(v.0 as usize) {
            None => bad.push(format!("{v} does not exist")),
            Some(var) if !matches!(var.kind, VarKind::Dim | VarKind::Param) => bad.push(format!(
                "`{}` is not a dimension or scalar parameter; the grid may use only those and constants",
                var.name
            )),
            Some(_) => {}
        },
        Expr::Load { buf, .. } => bad.push(format!(
            "it loads from {}; the grid may use only dimensions, scalar parameters and constants",
            buf_label(k, *buf)
        )),
        Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => grid_check(k, arg, bad),
        Expr::Binary { lhs, rhs, .. } => {
            grid_check(k, lhs, bad);
            grid_check(k, rhs, bad);
        }
        Expr::Fma { a, b, c } => {
            grid_check(k, a, bad);
            grid_check(k, b, bad);
            grid_check(k, c, bad);
        }
        Expr::Select { cond, then, otherwise } => {
            grid_check(k, cond, bad);
            grid_check(k, then, bad);
            grid_check(k, otherwise, bad);
        }
    }
}

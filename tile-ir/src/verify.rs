//! The verifier: checks every invariant of [`crate::ir`] and reports all the
//! problems it finds, each at the span of the statement (or buffer) concerned,
//! naming buffers and variables by the names the user wrote.
//!
//! Expects: any [`Kernel`] (handles may be out of range, types may disagree).
//! Guarantees, when it returns `Ok`:
//! - every `VarId`/`BufferId` is in range; `params` and `dims` are consistent
//!   (tensor params are global buffers, scalar params are `Param` vars, every
//!   dynamic dim is an `i32` `Dim` var listed once in `dims` and bound by
//!   some tensor's shape; every global buffer is a parameter);
//! - `threads` is a positive multiple of 32, at most 1024;
//! - the grid uses only `Dim` vars, `Param` vars and integer constants;
//! - shared/fragment/local shapes are constant and positive; global shapes
//!   are positive constants or `Dyn` dims;
//! - expressions are well typed: binary operands agree, comparisons give
//!   `Bool`, conditions are `Bool`, indices and loop bounds are `I32`,
//!   math intrinsics take floats (`abs` and `neg` also signed integers),
//!   casts are between numeric types or from `bool` to an integer;
//! - `Let` binds `Let`/`Mut` vars (each once), `Assign` targets `Mut` vars,
//!   with the value of the variable's type; loop vars are `Loop` vars of `I32`;
//!   every variable is bound before use (lexical scoping: a `Let` is visible
//!   to the rest of its block; a loop variable inside its body);
//! - indexing has the buffer's rank; `Store`/`AtomicAdd` write only mutable
//!   globals (or non-global buffers, for `Store`); atomics only on globals,
//!   with a value of the element type;
//! - `Copy`: at most one side global; a global side has one origin coordinate
//!   per tensor dim, a non-global side none; a non-global side facing a global
//!   one has rank ≤ the tensor's; two non-global sides have equal shapes;
//!   `fill` has the destination's dtype and only comes with a global source;
//!   the destination global is mutable;
//! - `Reduce`: src and dst are fragments; `dim < rank(src)`; dst's shape is
//!   src's without `dim` (for a rank-1 src, `[]` or `[1]`); dst's dtype is
//!   src's, or `f32` for a float src (accumulate f16/bf16 in f32);
//! - `Fill` targets a non-global buffer with a value of its dtype;
//! - fragments are accessed only inside `Parallel` loops, each index being a
//!   loop variable of the enclosing parallel nest (or the constant `0` on an
//!   extent-1 dimension, a broadcast); parallel loops have constant bounds;
//!   no tile op (`Copy`, `Fill`, `Reduce`, `Barrier`) inside a parallel loop;
//!   a variable bound outside a parallel loop is not reassigned inside it
//!   (its iterations would race on the GPU);
//! - `Gemm`: not inside a parallel loop; `a` is a shared buffer or a
//!   fragment, `b` a shared buffer, `c` a fragment, all of rank 2; `a` and
//!   `b` hold the same type, f16 or bf16; `c` holds f32; with `op(a)` =
//!   `[M, K]` and `op(b)` = `[K, N]` (transposed when `trans_*` is set), `c`
//!   is `[M, N]`;
//! - `rasterize` (`use_swizzle`), when set, is at least 1;
//! - `cluster` extents are at least 1, with a product of at most
//!   [`MAX_CLUSTER_BLOCKS`] (the portable cluster size), and divide every
//!   constant grid extent (dynamic extents are checked at launch).

use crate::ir::{
    BinOp, Buffer, BufferId, DType, Expr, Extent, Kernel, LoopKind, ParamKind, Scope, SpanId, Stmt, StmtKind, TileRef,
    UnOp, Value, VarId, VarKind,
};
use crate::CompileError;

/// The most blocks a thread block cluster may have without the non-portable
/// opt-in (sm_90).
pub const MAX_CLUSTER_BLOCKS: u64 = 8;

/// Checks every invariant listed in [`crate::ir`]'s module doc (and this
/// module's doc). Returns all the problems found.
pub fn verify(kernel: &Kernel) -> Result<(), Vec<CompileError>> {
    let mut v = Verifier::new(kernel);
    v.check_header();
    v.check_block(&kernel.body);
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

/// `name` of a variable in backquotes, or a note that the handle is dangling.
fn var_label(kernel: &Kernel, id: VarId) -> String {
    match kernel.vars.get(id.0 as usize) {
        Some(v) => format!("`{}`", v.name),
        None => format!("{id} (no such variable)"),
    }
}

fn buf_label(kernel: &Kernel, id: BufferId) -> String {
    match kernel.buffers.get(id.0 as usize) {
        Some(b) => format!("`{}`", b.name),
        None => format!("{id} (no such buffer)"),
    }
}

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Global => "global tensor",
        Scope::Shared => "shared buffer",
        Scope::Fragment => "fragment",
        Scope::Local => "local buffer",
    }
}

/// Whether `as` between the two types is allowed: numeric ↔ numeric, same
/// type, or `bool` → integer (as Rust).
pub fn cast_allowed(from: DType, to: DType) -> bool {
    let numeric = |t: DType| t.is_float() || t.is_int();
    from == to || (numeric(from) && numeric(to)) || (from == DType::Bool && to.is_int())
}

struct Verifier<'k> {
    kernel: &'k Kernel,
    errors: Vec<CompileError>,
    /// Whether each variable is visible at the current point.
    visible: Vec<bool>,
    /// Whether a `Let`/`For` has bound each variable already (bound twice = error).
    bound: Vec<bool>,
    /// Variables bound in the open lexical scopes, to unbind at scope exit.
    scope_stack: Vec<VarId>,
    /// Loop variables of the enclosing parallel loops, outermost first.
    parallel_vars: Vec<VarId>,
    /// For each variable, the parallel depth at which it was bound.
    bind_depth: Vec<usize>,
    /// The span of the statement being checked.
    span: SpanId,
}

impl<'k> Verifier<'k> {
    fn new(kernel: &'k Kernel) -> Self {
        let n = kernel.vars.len();
        let mut visible = vec![false; n];
        // Dims, params and block indices are visible everywhere.
        for (i, var) in kernel.vars.iter().enumerate() {
            if matches!(var.kind, VarKind::Dim | VarKind::Param | VarKind::BlockIdx(_)) {
                visible[i] = true;
            }
        }
        Verifier {
            kernel,
            errors: Vec::new(),
            visible,
            bound: vec![false; n],
            scope_stack: Vec::new(),
            parallel_vars: Vec::new(),
            bind_depth: vec![0; n],
            span: SpanId::NONE,
        }
    }

    fn err(&mut self, message: impl Into<String>) {
        self.errors.push(CompileError::new(self.span, message));
    }

    fn err_at(&mut self, span: SpanId, message: impl Into<String>) {
        self.errors.push(CompileError::new(span, message));
    }

    fn var(&self, id: VarId) -> Option<&'k crate::ir::Var> {
        self.kernel.vars.get(id.0 as usize)
    }

    fn buffer(&self, id: BufferId) -> Option<&'k Buffer> {
        self.kernel.buffers.get(id.0 as usize)
    }

    fn vl(&self, id: VarId) -> String {
        var_label(self.kernel, id)
    }

    fn bl(&self, id: BufferId) -> String {
        buf_label(self.kernel, id)
    }

    // ---- kernel header: threads, params, dims, buffers, grid ----

    /// `annotate_layout(&buf, spec)`: only shared buffers of a constant
    /// shape have a layout, and `spec` must fit the buffer's rows.
    fn check_layout_annotation(&mut self, buf: &crate::ir::Buffer, spec: crate::ir::SharedLayoutSpec) {
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

    fn check_header(&mut self) {
        let k = self.kernel;
        // `%` rather than `is_multiple_of`: the workspace supports Rust 1.85.
        #[allow(clippy::manual_is_multiple_of)]
        let bad_threads = k.threads == 0 || k.threads % 32 != 0 || k.threads > 1024;
        if bad_threads {
            self.err_at(
                SpanId::NONE,
                format!("kernel `{}`: threads = {} must be a positive multiple of 32, at most 1024", k.name, k.threads),
            );
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
    fn expr_type_quiet(&mut self, e: &Expr) -> Option<DType> {
        let saved = std::mem::take(&mut self.parallel_vars);
        let r = self.expr(e);
        self.parallel_vars = saved;
        r
    }

    // ---- statements ----

    fn check_block(&mut self, stmts: &[Stmt]) {
        let mark = self.scope_stack.len();
        for s in stmts {
            self.check_stmt(s);
        }
        while self.scope_stack.len() > mark {
            let v = self.scope_stack.pop().expect("length checked");
            self.visible[v.0 as usize] = false;
        }
    }

    fn bind(&mut self, v: VarId) {
        let i = v.0 as usize;
        // Dims, params and block indices stay visible everywhere (binding one
        // is reported by the caller; do not cascade into "unbound" errors).
        if i >= self.visible.len()
            || matches!(self.kernel.vars[i].kind, VarKind::Dim | VarKind::Param | VarKind::BlockIdx(_))
        {
            return;
        }
        if self.bound[i] {
            let l = self.vl(v);
            self.err(format!("variable {l} ({v}) is bound twice; every let and loop binds a fresh variable"));
        }
        self.bound[i] = true;
        self.visible[i] = true;
        self.bind_depth[i] = self.parallel_vars.len();
        self.scope_stack.push(v);
    }

    fn in_parallel(&self) -> bool {
        !self.parallel_vars.is_empty()
    }

    fn check_stmt(&mut self, s: &Stmt) {
        self.span = s.span;
        match &s.kind {
            StmtKind::Let { var, value } => {
                let t = self.expr(value);
                match self.var(*var) {
                    None => self.err(format!("let binds {var}, which does not exist")),
                    Some(v) => {
                        if !matches!(v.kind, VarKind::Let | VarKind::Mut) {
                            self.err(format!(
                                "let binds `{}`, a {:?} variable; let binds only Let or Mut variables",
                                v.name, v.kind
                            ));
                        }
                        if let Some(t) = t {
                            if t != v.dtype {
                                self.err(format!("let `{}`: the value has type {t}, the variable {}", v.name, v.dtype));
                            }
                        }
                    }
                }
                // Bound after its value: `let x = x + 1` refers to an outer x.
                self.bind(*var);
            }
            StmtKind::Assign { var, value } => {
                let t = self.expr(value);
                match self.var(*var) {
                    None => self.err(format!("assignment to {var}, which does not exist")),
                    Some(v) => {
                        if v.kind != VarKind::Mut {
                            self.err(format!("cannot assign to `{}`: it is not a `let mut` variable", v.name));
                        } else if !self.visible[var.0 as usize] {
                            self.err(format!("assignment to `{}` before its `let mut` (or outside its scope)", v.name));
                        } else if self.bind_depth[var.0 as usize] < self.parallel_vars.len() {
                            self.err(format!(
                                "assignment to `{}` inside a parallel loop, but it is declared outside it: the loop's iterations would race; \
                                 use a fragment and a reduction instead",
                                v.name
                            ));
                        }
                        if let Some(t) = t {
                            if t != v.dtype {
                                self.err(format!(
                                    "assignment to `{}`: the value has type {t}, the variable {}",
                                    v.name, v.dtype
                                ));
                            }
                        }
                    }
                }
            }
            StmtKind::Store { buf, index, value } => {
                let t = self.expr(value);
                self.access(*buf, index, "store to");
                if let Some(b) = self.buffer(*buf) {
                    if b.scope == Scope::Global && !b.mutable {
                        self.err(format!("store to `{}`, a read-only tensor; declare it `&mut Tensor`", b.name));
                    }
                    if let Some(t) = t {
                        if t != b.dtype {
                            self.err(format!(
                                "store to `{}`: the value has type {t}, the buffer's elements {}",
                                b.name, b.dtype
                            ));
                        }
                    }
                }
            }
            StmtKind::AtomicAdd { buf, index, value } => {
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
            StmtKind::For { var, start, end, kind, body } => {
                let ts = self.expr(start);
                let te = self.expr(end);
                let name = self.vl(*var);
                for (what, t) in [("start", ts), ("end", te)] {
                    if let Some(t) = t {
                        if t != DType::I32 {
                            self.err(format!("loop {name}: the {what} bound has type {t}, expected i32"));
                        }
                    }
                }
                match self.var(*var) {
                    None => self.err(format!("loop variable {var} does not exist")),
                    Some(v) => {
                        if v.kind != VarKind::Loop {
                            self.err(format!("loop variable `{}` must be of kind Loop, not {:?}", v.name, v.kind));
                        }
                        if v.dtype != DType::I32 {
                            self.err(format!("loop variable `{}` has type {}, expected i32", v.name, v.dtype));
                        }
                    }
                }
                if let LoopKind::Pipelined { stages } = kind {
                    if *stages == 0 {
                        self.err(format!("pipelined loop {name} has 0 stages, expected at least 1"));
                    }
                    if self.in_parallel() {
                        self.err(format!("pipelined loop {name} inside a parallel loop"));
                    }
                }
                let parallel = *kind == LoopKind::Parallel;
                if parallel {
                    for (what, e) in [("start", start), ("end", end)] {
                        if !matches!(e, Expr::Const(Value::I32(_))) {
                            self.err(format!("parallel loop {name}: the {what} bound must be an i32 constant"));
                        }
                    }
                }
                let mark = self.scope_stack.len();
                self.bind(*var);
                if parallel {
                    self.parallel_vars.push(*var);
                }
                self.check_block(body);
                if parallel {
                    self.parallel_vars.pop();
                }
                // unbind the loop variable
                while self.scope_stack.len() > mark {
                    let v = self.scope_stack.pop().expect("length checked");
                    self.visible[v.0 as usize] = false;
                }
            }
            StmtKind::If { cond, then, otherwise } => {
                if let Some(t) = self.expr(cond) {
                    if t != DType::Bool {
                        self.err(format!("if condition has type {t}, expected bool"));
                    }
                }
                self.check_block(then);
                self.span = s.span;
                self.check_block(otherwise);
            }
            StmtKind::Copy { src, dst, fill } => self.check_copy(src, dst, fill.as_ref()),
            StmtKind::Fill { buf, value } => {
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
            StmtKind::Reduce { op, src, dst, dim, keep: _ } => {
                self.no_tile_op_in_parallel("reduce");
                let opn = format!("{op:?}").to_lowercase();
                let (Some(sb), Some(db)) = (self.buffer(*src), self.buffer(*dst)) else {
                    let (sl, dl) = (self.bl(*src), self.bl(*dst));
                    self.err(format!("reduce_{opn} from {sl} to {dl}: no such buffer"));
                    return;
                };
                for b in [sb, db] {
                    if b.scope != Scope::Fragment {
                        self.err(format!(
                            "reduce_{opn}: `{}` is a {}, expected a fragment",
                            b.name,
                            scope_name(b.scope)
                        ));
                    }
                }
                if *dim >= sb.rank() {
                    self.err(format!("reduce_{opn} of `{}` along dim {dim}, but it has rank {}", sb.name, sb.rank()));
                } else if let (Some(ss), Some(ds)) = (sb.const_shape(), db.const_shape()) {
                    let mut want = ss.clone();
                    want.remove(*dim);
                    let ok = ds == want || (ss.len() == 1 && ds == [1]);
                    if !ok {
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
            StmtKind::Barrier => self.no_tile_op_in_parallel("barrier"),
            StmtKind::Gemm { a, b, c, trans_a, trans_b, .. } => self.check_gemm(*a, *b, *c, *trans_a, *trans_b),
        }
    }

    fn check_gemm(&mut self, a: BufferId, b: BufferId, c: BufferId, trans_a: bool, trans_b: bool) {
        self.no_tile_op_in_parallel("gemm");
        let (Some(ab), Some(bb), Some(cb)) = (self.buffer(a), self.buffer(b), self.buffer(c)) else {
            let (al, bl, cl) = (self.bl(a), self.bl(b), self.bl(c));
            self.err(format!("gemm of {al} and {bl} into {cl}: no such buffer"));
            return;
        };
        let t = |trans: bool| if trans { ".t" } else { "" };
        let (an, bn) = (format!("`{}{}`", ab.name, t(trans_a)), format!("`{}{}`", bb.name, t(trans_b)));
        if !matches!(ab.scope, Scope::Shared | Scope::Fragment) {
            self.err(format!(
                "gemm: operand A {an} is a {}, expected a shared buffer or a fragment",
                scope_name(ab.scope)
            ));
        }
        if bb.scope != Scope::Shared {
            self.err(format!("gemm: operand B {bn} is a {}, expected a shared buffer", scope_name(bb.scope)));
        }
        if cb.scope != Scope::Fragment {
            self.err(format!("gemm: the accumulator `{}` is a {}, expected a fragment", cb.name, scope_name(cb.scope)));
        }
        for (name, buf) in [(&an, ab), (&bn, bb)] {
            if !matches!(buf.dtype, DType::F16 | DType::BF16) {
                self.err(format!("gemm: operand {name} holds {}; operands hold f16 or bf16", buf.dtype));
            }
        }
        if ab.dtype != bb.dtype && [ab.dtype, bb.dtype].iter().all(|t| matches!(t, DType::F16 | DType::BF16)) {
            self.err(format!("gemm: operands {an} ({}) and {bn} ({}) hold different types", ab.dtype, bb.dtype));
        }
        if cb.dtype != DType::F32 {
            self.err(format!("gemm: the accumulator `{}` holds {}, expected f32", cb.name, cb.dtype));
        }
        let mut ranks_ok = true;
        for (name, buf) in [(an.clone(), ab), (bn.clone(), bb), (format!("`{}`", cb.name), cb)] {
            if buf.rank() != 2 {
                self.err(format!("gemm: {name} has rank {}, expected a matrix (rank 2)", buf.rank()));
                ranks_ok = false;
            }
        }
        let (Some(sa), Some(sb), Some(sc)) = (ab.const_shape(), bb.const_shape(), cb.const_shape()) else {
            return;
        };
        if !ranks_ok {
            return;
        }
        let (m_a, k_a) = if trans_a { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
        let (k_b, n_b) = if trans_b { (sb[1], sb[0]) } else { (sb[0], sb[1]) };
        let (m_c, n_c) = (sc[0], sc[1]);
        if let Some(what) = gemm_mismatch((m_a, k_a), (k_b, n_b), (m_c, n_c)) {
            self.err(format!(
                "gemm shape mismatch: {an} {sa:?} is M×K = {m_a}×{k_a}, {bn} {sb:?} is K×N = {k_b}×{n_b}, `{}` {sc:?} is M×N = {m_c}×{n_c}: {what}",
                cb.name
            ));
        }
    }

    fn no_tile_op_in_parallel(&mut self, what: &str) {
        if let Some(&v) = self.parallel_vars.last() {
            let l = self.vl(v);
            self.err(format!("{what} inside the parallel loop over {l}: tile operations are collective and must be outside parallel loops"));
        }
    }

    fn check_copy(&mut self, src: &TileRef, dst: &TileRef, fill: Option<&Expr>) {
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
                    "copy from `{}` to `{}`: both sides are global tensors; copy through a shared buffer or fragment",
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
                        "copy between `{}` (rank {}) and a tile of `{}` (rank {}): the buffer's rank exceeds the tensor's",
                        l.name,
                        l.rank(),
                        g.name,
                        g.rank()
                    ));
                }
            }
        }
    }

    /// Checks an element access (`Load`, `Store`, `AtomicAdd`): buffer
    /// exists, arity, index types, fragment placement.
    fn access(&mut self, buf: BufferId, index: &[Expr], what: &str) {
        let mut types = Vec::with_capacity(index.len());
        for e in index {
            types.push(self.expr(e));
        }
        let Some(b) = self.buffer(buf) else {
            self.err(format!("{what} {buf}, which does not exist"));
            return;
        };
        if index.len() != b.rank() {
            self.err(format!("{what} `{}` with {} indices, but it has rank {}", b.name, index.len(), b.rank()));
        }
        for (i, t) in types.into_iter().enumerate() {
            if let Some(t) = t {
                if t != DType::I32 {
                    self.err(format!("{what} `{}`: index {i} has type {t}, expected i32", b.name));
                }
            }
        }
        if b.scope == Scope::Fragment {
            if !self.in_parallel() {
                self.err(format!(
                    "{what} fragment `{}` outside a parallel loop; fragment elements are accessed only in `for .. in parallel(..)`",
                    b.name
                ));
            } else {
                for (i, e) in index.iter().enumerate() {
                    let ok = match e {
                        Expr::Var(v) => self.parallel_vars.contains(v),
                        Expr::Const(Value::I32(0)) => b.shape.get(i) == Some(&Extent::Const(1)),
                        _ => false,
                    };
                    if !ok {
                        self.err(format!(
                            "{what} fragment `{}`: index {i} must be a variable of the enclosing parallel loops \
                             (or 0 on a dimension of extent 1)",
                            b.name
                        ));
                    }
                }
            }
        }
    }

    // ---- expressions ----

    /// The type of `e`, reporting problems. `None` if it has no type (an error
    /// was reported), so that callers do not cascade.
    fn expr(&mut self, e: &Expr) -> Option<DType> {
        match e {
            Expr::Const(v) => Some(v.dtype()),
            Expr::Var(id) => {
                let Some(v) = self.var(*id) else {
                    self.err(format!("use of {id}, which does not exist"));
                    return None;
                };
                if !self.visible[id.0 as usize] {
                    self.err(format!("use of `{}` ({id}) before it is bound (or outside its scope)", v.name));
                }
                Some(v.dtype)
            }
            Expr::Load { buf, index } => {
                self.access(*buf, index, "load from");
                self.buffer(*buf).map(|b| b.dtype)
            }
            Expr::Unary { op, arg } => {
                let t = self.expr(arg)?;
                let ok = match op {
                    UnOp::Neg => t.is_float() || matches!(t, DType::I32 | DType::I64),
                    UnOp::Not => t == DType::Bool || t.is_int(),
                    UnOp::Abs => t.is_float() || matches!(t, DType::I32 | DType::I64),
                    UnOp::Exp2 | UnOp::Exp | UnOp::Log2 | UnOp::Log | UnOp::Sqrt | UnOp::Rsqrt => t.is_float(),
                };
                if !ok {
                    self.err(format!("{} applied to {t}", unop_name(*op)));
                    return None;
                }
                Some(t)
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.expr(lhs), self.expr(rhs));
                let (a, b) = (a?, b?);
                if a != b {
                    self.err(format!("operands of {} have types {a} and {b}; insert a cast", binop_name(*op)));
                    return None;
                }
                let ok = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem | BinOp::Min | BinOp::Max => {
                        a != DType::Bool
                    }
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => true,
                    BinOp::And | BinOp::Or | BinOp::Xor => a == DType::Bool || a.is_int(),
                    BinOp::Shl | BinOp::Shr => a.is_int(),
                };
                if !ok {
                    self.err(format!("{} applied to {a}", binop_name(*op)));
                    return None;
                }
                Some(if op.is_comparison() { DType::Bool } else { a })
            }
            Expr::Fma { a, b, c } => {
                let (ta, tb, tc) = (self.expr(a), self.expr(b), self.expr(c));
                let (ta, tb, tc) = (ta?, tb?, tc?);
                if ta != tb || tb != tc {
                    self.err(format!("operands of fma have types {ta}, {tb} and {tc}; insert casts"));
                    return None;
                }
                if ta == DType::Bool {
                    self.err("fma applied to bool");
                    return None;
                }
                Some(ta)
            }
            Expr::Cast { to, arg } => {
                let t = self.expr(arg)?;
                if !cast_allowed(t, *to) {
                    self.err(format!("cast from {t} to {to} is not allowed"));
                }
                Some(*to)
            }
            Expr::Select { cond, then, otherwise } => {
                let tc = self.expr(cond);
                let (tt, to) = (self.expr(then), self.expr(otherwise));
                if let Some(tc) = tc {
                    if tc != DType::Bool {
                        self.err(format!("select condition has type {tc}, expected bool"));
                    }
                }
                let (tt, to) = (tt?, to?);
                if tt != to {
                    self.err(format!("select arms have types {tt} and {to}"));
                    return None;
                }
                Some(tt)
            }
        }
    }
}

/// Which extents of a gemm disagree, given `op(a)` = `[M, K]`, `op(b)` =
/// `[K, N]` and `c` = `[M, N]`: e.g. `"K disagrees (32 from A, 48 from B)"`,
/// or `None` when they agree. Shared with the frontend's message.
pub fn gemm_mismatch(a_mk: (i64, i64), b_kn: (i64, i64), c_mn: (i64, i64)) -> Option<String> {
    let mut parts = Vec::new();
    if a_mk.0 != c_mn.0 {
        parts.push(format!("M disagrees ({} from A, {} from the accumulator)", a_mk.0, c_mn.0));
    }
    if b_kn.1 != c_mn.1 {
        parts.push(format!("N disagrees ({} from B, {} from the accumulator)", b_kn.1, c_mn.1));
    }
    if a_mk.1 != b_kn.0 {
        parts.push(format!("K disagrees ({} from A, {} from B)", a_mk.1, b_kn.0));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
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

fn shape_text(k: &Kernel, shape: &[Extent]) -> String {
    let parts: Vec<String> = shape
        .iter()
        .map(|e| match e {
            Extent::Const(c) => c.to_string(),
            Extent::Dyn(v) => k.vars.get(v.0 as usize).map_or_else(|| v.to_string(), |x| x.name.clone()),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The name of a unary operator as printed (`neg`, `exp2`, ..).
pub fn unop_name(op: UnOp) -> &'static str {
    match op {
        UnOp::Neg => "neg",
        UnOp::Not => "not",
        UnOp::Exp2 => "exp2",
        UnOp::Exp => "exp",
        UnOp::Log2 => "log2",
        UnOp::Log => "log",
        UnOp::Abs => "abs",
        UnOp::Sqrt => "sqrt",
        UnOp::Rsqrt => "rsqrt",
    }
}

/// The name of a binary operator (`add`, `lt`, ..).
pub fn binop_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Rem => "rem",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Lt => "lt",
        BinOp::Le => "le",
        BinOp::Gt => "gt",
        BinOp::Ge => "ge",
        BinOp::Eq => "eq",
        BinOp::Ne => "ne",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::Xor => "xor",
        BinOp::Shl => "shl",
        BinOp::Shr => "shr",
    }
}

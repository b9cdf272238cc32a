//! The verifier: checks every invariant of [`crate::ir`] and reports all the
//! problems it finds, each at the span of the statement (or buffer) concerned,
//! naming buffers and variables by the names the user wrote.
//!
//! Expects: any [`Kernel`] (handles may be out of range, types may disagree).
//! Guarantees, when it returns `Ok`, every invariant listed by its parts, one
//! file per kind of rule:
//! - `kernel.rs`: threads, variables, dims, params, buffer shapes, the grid,
//!   `use_swizzle` and the cluster;
//! - `layout.rs`: `annotate_layout` specs;
//! - `types.rs`: expressions are well typed;
//! - `scopes.rs`: `let`/assignment targets, binding once, lexical scoping,
//!   no reassignment of outer variables inside parallel loops;
//! - `access.rs`: element loads and stores (rank, index types, writability,
//!   fragment access only in parallel loops by their variables);
//! - `loops.rs`: loop variables and bounds, pipelined and parallel loops, `if`;
//! - `copy.rs`, `gemm.rs`, `tile_ops.rs` (`fill`, `reduce_*`, `atomic_add`,
//!   `barrier`): the tile operations;
//! - [`rules`]: the pure rules of tile ops that the frontend also asks
//!   (before it has a kernel to verify), so that each is written once.
//!
//! This module holds the entry point, the walk over statements and the
//! error collection. The frontend (`tile-macros`) reports syntax, names and
//! literal typing itself and relies on these checks for the rest, mapping
//! each error's `SpanId` back to the user's tokens.

mod access;
mod copy;
mod gemm;
mod kernel;
mod layout;
mod loops;
pub mod rules;
mod scopes;
mod tile_ops;
mod types;
mod view;

pub use kernel::{MAX_CLUSTER_BLOCKS, MAX_REGS_PER_THREAD};
pub use rules::{cast_allowed, gemm_mismatch};
pub use types::{binop_name, unop_name};

use crate::ir::{Buffer, BufferId, Extent, Kernel, Scope, SpanId, Stmt, StmtKind, VarId, VarKind};
use crate::CompileError;

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

    fn check_stmt(&mut self, s: &Stmt) {
        self.span = s.span;
        match &s.kind {
            StmtKind::Let { var, value } => self.check_let(var, value),
            StmtKind::Assign { var, value } => self.check_assign(var, value),
            StmtKind::Store { buf, index, value } => self.check_store(buf, index, value),
            StmtKind::AtomicAdd { buf, index, value } => self.check_atomic_add(buf, index, value),
            StmtKind::For { var, start, end, kind, body } => self.check_for(var, start, end, kind, body),
            StmtKind::If { cond, then, otherwise } => self.check_if(cond, then, otherwise),
            StmtKind::Copy { src, dst, fill, cache } => self.check_copy(src, dst, fill.as_ref(), *cache),
            StmtKind::Fill { buf, value } => self.check_fill(buf, value),
            StmtKind::Reduce { op, src, dst, dim, keep: _ } => self.check_reduce(op, src, dst, dim),
            StmtKind::Barrier => self.no_tile_op_in_parallel("barrier"),
            StmtKind::Print { format, args } => self.check_print(format, args),
            StmtKind::Gemm { a, b, c, trans_a, trans_b, policy, .. } => {
                self.check_gemm(*a, *b, *c, *trans_a, *trans_b);
                self.check_gemm_owner(*c, *policy);
            }
        }
    }
}

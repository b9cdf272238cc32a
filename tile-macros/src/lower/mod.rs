//! Lowering: the parsed kernel (attribute, signature, syn body) → `tile_ir::Kernel`.
//!
//! Expects a [`Signature`] from `sig.rs` (whose body had its turbofish shapes
//! rewritten) and the [`KernelAttr`]. Guarantees a `Kernel` whose every
//! statement and buffer carries a `SpanId` registered in the returned
//! [`SpanTable`]. The frontend checks what only it can see, each at the
//! tokens at fault: syntax, names (with "did you mean"), literal typing,
//! statement placement (what may be inside `parallel`, `grid` first, ..),
//! writability and the argument kinds of tile ops. The typing and shape
//! rules of tile ops are `tile_ir::verify`'s: asked here through
//! `tile_ir::verify::rules` where the answer decides which operand to
//! point at, else left to the verifier, whose errors map back to the
//! statement through the `SpanTable`.
//!
//! Errors are collected, never thrown: a construct that fails is reported,
//! skipped, and its name (if it binds one) is bound to a poisoned entry so
//! that later uses stay silent. When errors were reported the returned
//! kernel is incomplete and must not be compiled; the verifier still checks
//! what was lowered ([`verify_partial`]), so that all mistakes show at once.
//!
//! Typing follows Rust: binary operators take operands of one type and the
//! frontend never converts silently, except that untyped literals (and
//! `consts(..)` names) adopt the type of the other operand, defaulting to
//! `i32` / `f32`.
//!
//! One file per job: `stmt.rs` recognizes statements and dispatches them;
//! `grid.rs`, `buffers.rs`, `loops.rs`, `assign.rs`, `calls.rs` (tile
//! operations) and `gemm.rs` lower each kind; `expr.rs` lowers expressions
//! and `typing.rs` types literals and folds constants; `syntax.rs` holds the
//! syn helpers. This file holds the entry point, the lowering context, the
//! scopes of names and the kernel's parameters.

mod assign;
mod buffers;
mod calls;
mod expr;
mod gemm;
mod grid;
mod helpers;
mod loops;
mod stmt;
mod syntax;
mod typing;

use crate::attr::KernelAttr;
use crate::diag::{did_you_mean, Errors, Reported, SpanRange, SpanTable};
use crate::generics::{Instance, ParamKind};
use crate::sig::{DimDecl, Elem, ParamType, Signature};
use proc_macro2::Span;
use quote::ToTokens;
use std::collections::HashMap;
use syn::ext::IdentExt;
use syn::Ident;
use syntax::is_upper_case_name;
use tile_ir::{BufferId, DType, Expr, Extent, Kernel, SpanId, TileRef, VarId};

/// Every function a kernel body may call (for "did you mean" suggestions).
const FUNCTIONS: &[&str] = &[
    "grid",
    "shared",
    "fragment",
    "local",
    "copy",
    "fill",
    "clear",
    "reduce_max",
    "reduce_sum",
    "reduce_min",
    "atomic_add",
    "barrier",
    "print",
    "gemm",
    "use_swizzle",
    "annotate_layout",
    "parallel",
    "pipelined",
    "exp2",
    "exp",
    "log2",
    "log",
    "abs",
    "sqrt",
    "rsqrt",
    "max",
    "min",
    "fma",
    "cdiv",
];
/// Functions with a value, usable in expressions.
const MATH: &[&str] = &["exp2", "exp", "log2", "log", "abs", "sqrt", "rsqrt", "max", "min", "fma", "cdiv"];
/// Element types of buffers and the targets of `as`.
const DTYPES: [&str; 5] = ["f16", "bf16", "f32", "i32", "u32"];

const STATEMENTS_HELP: &str = "a kernel body is made of `let`, assignments (`=`, `+=`, ..), `for` loops over `a..b`, `parallel(..)` or `pipelined(..)`, `if`/`else`, and the tile operations `copy`, `fill`, `clear`, `reduce_max`/`reduce_sum`/`reduce_min`, `gemm`, `atomic_add` and `barrier` (and `use_swizzle(panel)` right after `grid(..)`, `annotate_layout(&buf, layout)` before a shared buffer's first use)";

/// Lowers a kernel without generic parameters.
#[cfg(test)]
pub(crate) fn lower(attr: &KernelAttr, sig: &Signature, errors: &mut Errors) -> (Kernel, SpanTable) {
    lower_instance(attr, sig, None, errors)
}

/// Lowers a kernel, or one instance of a generic kernel: its type
/// parameters stand for the instance's element types, its const parameters
/// are constants like `consts(..)`, and the kernel is named
/// [`Instance::ir_name`].
pub(crate) fn lower_instance(
    attr: &KernelAttr,
    sig: &Signature,
    instance: Option<&Instance>,
    errors: &mut Errors,
) -> (Kernel, SpanTable) {
    let base = sig.ident.unraw().to_string();
    let name = instance.map_or_else(|| base.clone(), |i| i.ir_name(&base));
    let mut consts: HashMap<String, i64> = attr.consts.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let mut type_params = Vec::new();
    // The instance's const parameters alone (`cluster = (NAME, ..)` takes
    // only those).
    let mut param_values: HashMap<String, i64> = HashMap::new();
    if let Some(instance) = instance {
        for (n, v) in instance.consts(&sig.generics) {
            if attr.consts.iter().any(|(c, _)| *c == n) {
                errors.at(
                    n.span(),
                    format!("the const parameter `{n}` has the name of a constant in `consts(..)`; rename one of them"),
                );
            }
            consts.insert(n.to_string(), v);
            param_values.insert(n.to_string(), v);
        }
        type_params = instance.types(&sig.generics);
    }
    let const_params: Vec<String> =
        sig.generics.iter().filter(|g| matches!(g.kind, ParamKind::Const(_))).map(|g| g.name.to_string()).collect();
    // `threads = NAME`: a const parameter (or a `consts(..)` name).
    let mut threads = attr.threads;
    if let Some(name) = &attr.threads_param {
        match consts.get(&name.to_string()) {
            Some(&v) => threads = crate::attr::threads_value(v as i128, name.span(), errors),
            None => {
                errors.at(
                    name.span(),
                    format!("`threads = {name}`: `{name}` is not a const parameter of the kernel; `threads` is an integer literal or the name of a const parameter (`fn k<const THREADS: usize>(..)`)"),
                );
            }
        }
    }
    // `blocks_per_sm = N | NAME`: checked against this instance's threads.
    let mut blocks_per_sm = 1;
    if let Some((spec, span)) = &attr.blocks_per_sm {
        let value = match spec {
            crate::attr::BlocksPerSm::Value(v) => Some(*v),
            crate::attr::BlocksPerSm::Param(name) => match consts.get(&name.to_string()) {
                Some(&v) => Some(v as i128),
                None => {
                    errors.at(
                        *span,
                        format!("`blocks_per_sm = {name}`: `{name}` is not a const parameter of the kernel; `blocks_per_sm` is an integer literal or the name of a const parameter (`fn k<const BLOCKS: usize>(..)`)"),
                    );
                    None
                }
            },
        };
        if let Some(v) = value {
            let t = threads.unwrap_or(128) as u64;
            match u64::try_from(v).ok().map(|b| (b, tile_ir::verify::rules::blocks_per_sm_problem(b, t))) {
                Some((b, None)) => blocks_per_sm = b as u32,
                Some((_, Some(problem))) => {
                    errors.at(*span, problem);
                }
                None => {
                    errors.at(*span, format!("`blocks_per_sm = {v}` must be between 1 and 32"));
                }
            }
        }
    }
    let mut kernel = Kernel::new(name, threads.unwrap_or(128));
    kernel.cluster = crate::attr::resolve_cluster(attr, &param_values, errors);
    kernel.warp_specialize = attr.warp_specialize;
    kernel.blocks_per_sm = blocks_per_sm;
    kernel.dependent_launch = attr.dependent_launch;
    let mut lowerer = Lowerer {
        k: kernel,
        spans: SpanTable::new(sig.ident.span()),
        errors,
        consts,
        type_params,
        const_params,
        scopes: vec![Vec::new()],
        parallel_depth: 0,
        grid_at: None,
        at_kernel_start: false,
        first_stmt: false,
        buffer_depth: HashMap::new(),
        grid_axes: 0,
        grid_vars: [None; 3],
        grid_just_declared: false,
        right_after_grid: false,
        swizzle_at: None,
        used_buffers: Default::default(),
        annotated_at: HashMap::new(),
        helpers: Vec::new(),
        read_only_aliases: Vec::new(),
    };
    lowerer.params(sig);
    lowerer.at_kernel_start = true;
    let body = lowerer.block(&sig.body.stmts);
    lowerer.uncalled_helpers();
    lowerer.k.body = body;
    let (kernel, spans) = (lowerer.k, lowerer.spans);
    if !errors.is_empty() {
        verify_partial(&kernel, &spans, errors);
    }
    (kernel, spans)
}

/// The verifier's errors about the statements and buffers of a kernel that
/// failed to lower, which `backend.rs` will not compile (it verifies only
/// complete kernels). A failed construct is left out of the kernel and
/// everything naming it fails too, so what remains is consistent and the
/// verifier's errors there are real mistakes (a gemm whose shapes disagree
/// next to a misspelt name elsewhere). Errors about the kernel as a whole
/// are left out: the attribute and signature checks here cover them, and an
/// incomplete kernel may lack what its header refers to.
fn verify_partial(kernel: &Kernel, spans: &SpanTable, errors: &mut Errors) {
    let Err(found) = tile_ir::verify::verify(kernel) else { return };
    for e in found.into_iter().filter(|e| e.span != SpanId::NONE) {
        errors.push(spans.range(e.span).error(e.message));
    }
}

#[derive(Copy, Clone)]
enum Binding {
    /// A scalar. `parallel`: the variable of a `parallel` loop. `depth`: how
    /// many parallel loops enclose its declaration.
    Var {
        id: VarId,
        parallel: bool,
        depth: u32,
    },
    Buffer(BufferId),
    /// A helper (`let name = |..| ..;`): its index in `Lowerer::helpers`.
    Helper(usize),
    /// Its declaration failed (already reported): uses are silent errors.
    Poisoned,
}

/// A lowered expression, or an untyped constant that will take the type of
/// its context.
#[derive(Clone, Debug)]
enum Val {
    Typed(Expr, DType),
    Int(i64),
    Float(f64),
}

impl Val {
    fn describe(&self) -> String {
        match self {
            Val::Typed(_, t) => format!("`{t}`"),
            Val::Int(_) => "an integer constant".into(),
            Val::Float(_) => "a float literal".into(),
        }
    }
}

/// The left side of `+=` and friends.
enum Target {
    Var(VarId),
    Element(BufferId, Vec<Expr>),
}

/// One side of a `copy`.
struct Side {
    tile: TileRef,
    name: String,
    /// The `[..]` of a `.tile([..])`, for errors about its entries.
    /// For a `.tile([..])`: its `[..]` tokens and each entry's source text,
    /// for errors about them.
    at: Option<(proc_macro2::TokenStream, Vec<String>)>,
}

struct Lowerer<'e> {
    k: Kernel,
    spans: SpanTable,
    errors: &'e mut Errors,
    consts: HashMap<String, i64>,
    /// The element type each type parameter stands for in this instance.
    type_params: Vec<(String, DType)>,
    /// The names of the kernel's const parameters (their values are in
    /// `consts`), for errors that use one as a type.
    const_params: Vec<String>,
    scopes: Vec<Vec<(String, Binding)>>,
    /// How many `parallel` loops enclose the code being lowered.
    parallel_depth: u32,
    /// Where `grid(..)` was called, once it has been.
    grid_at: Option<Span>,
    /// How many `parallel` loops enclose each buffer's declaration.
    buffer_depth: HashMap<BufferId, u32>,
    /// True until the kernel body's first statement starts lowering.
    at_kernel_start: bool,
    /// True while lowering the kernel body's first statement (before any
    /// statement nested in it).
    first_stmt: bool,
    /// How many axes `grid(..)` declared (0 before it is seen).
    grid_axes: usize,
    /// The block index variables `grid(..)` bound, per axis (`None` for `_`).
    grid_vars: [Option<tile_ir::VarId>; 3],
    /// Set by `grid(..)`; taken by the next statement.
    grid_just_declared: bool,
    /// True while lowering the statement right after `grid(..)`, the only
    /// place for `use_swizzle(..)`.
    right_after_grid: bool,
    /// Where `use_swizzle(..)` was called, once it has been.
    swizzle_at: Option<Span>,
    /// Buffers that a statement has named (through [`Lowerer::lookup`]):
    /// `annotate_layout` must come before a buffer's first use.
    used_buffers: std::cell::RefCell<std::collections::HashSet<BufferId>>,
    /// Where each buffer's `annotate_layout(..)` is.
    annotated_at: HashMap<BufferId, Span>,
    /// The helpers defined so far (`helpers.rs`), by `Binding::Helper`.
    helpers: Vec<helpers::Helper>,
    /// Names that are buffers a helper took as `&buf` (read-only there).
    read_only_aliases: Vec<String>,
}

impl Lowerer<'_> {
    pub(super) fn bind(&mut self, name: &Ident, binding: Binding) {
        // A new binding shadows a helper's read-only alias of that name.
        self.read_only_aliases.retain(|n| name != n);
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name.to_string(), binding));
        }
    }

    /// The binding of `name`; a buffer found here counts as used.
    pub(super) fn lookup(&self, name: &str) -> Option<Binding> {
        let found = self.lookup_quiet(name);
        if let Some(Binding::Buffer(b)) = found {
            self.used_buffers.borrow_mut().insert(b);
        }
        found
    }

    /// The binding of `name`, without marking a buffer used.
    pub(super) fn lookup_quiet(&self, name: &str) -> Option<Binding> {
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).find(|(n, _)| n == name).map(|(_, b)| *b)
    }

    pub(super) fn visible_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.scopes.iter().flat_map(|s| s.iter().map(|(n, _)| n.clone())).collect();
        names.extend(self.consts.keys().cloned());
        names
    }

    pub(super) fn unknown_name(&mut self, ident: &Ident) -> Reported {
        let name = ident.to_string();
        if self.type_params.iter().any(|(n, _)| *n == name) {
            return self.errors.at(
                ident.span(),
                format!("`{name}` is a type parameter of the kernel: it names an element type (`Tensor<{name}, ..>`, `shared::<{name}, ..>()`, `x as {name}`), not a value"),
            );
        }
        if is_upper_case_name(&name) {
            return self.errors.at(
                ident.span(),
                format!(
                    "`{name}` is not a kernel constant: `#[tile_kernel]` cannot see `const` items from outside the kernel; add it to the attribute, e.g. `#[tile_kernel(threads = .., consts({name} = ..))]`"
                ),
            );
        }
        let names = self.visible_names();
        let hint = did_you_mean(&name, names.iter().map(|s| s.as_str()));
        self.errors.at(ident.span(), format!("cannot find `{name}` in this kernel{hint}"))
    }

    /// A parameter's element type in this instance.
    fn resolve_elem(&mut self, elem: &Elem) -> Option<DType> {
        match elem {
            Elem::Known(d) => Some(*d),
            Elem::Param(ident) => match self.type_params.iter().find(|(n, _)| *ident == n) {
                Some((_, d)) => Some(*d),
                None => {
                    self.errors.at(ident.span(), format!("internal error: no element type for `{ident}`"));
                    None
                }
            },
        }
    }

    pub(super) fn span_id(&mut self, tokens: &dyn ToTokens) -> SpanId {
        self.spans.add(tokens)
    }

    pub(super) fn params(&mut self, sig: &Signature) {
        let mut dims: HashMap<String, VarId> = HashMap::new();
        let mut seen: Vec<String> = Vec::new();
        for p in &sig.params {
            let name = p.name.to_string();
            if seen.contains(&name) {
                self.errors.at(p.name.span(), format!("the parameter `{name}` is declared twice"));
                continue;
            }
            seen.push(name.clone());
            let span = self.spans.add_range(SpanRange { start: p.name.span(), end: SpanRange::of(&p.ty_tokens).end });
            match &p.ty {
                ParamType::Tensor { mutable, dtype, dims: decl } => {
                    let Some(dtype) = self.resolve_elem(dtype) else {
                        self.bind(&p.name, Binding::Poisoned);
                        continue;
                    };
                    let mut shape = Vec::new();
                    for d in decl {
                        match d {
                            DimDecl::Literal(v) => shape.push(Extent::Const(*v)),
                            DimDecl::Name(ident) => {
                                let dn = ident.to_string();
                                if let Some(v) = self.consts.get(&dn) {
                                    shape.push(Extent::Const(*v));
                                } else if let Some(v) = dims.get(&dn) {
                                    shape.push(Extent::Dyn(*v));
                                } else if self.type_params.iter().any(|(n, _)| *ident == n) {
                                    self.errors.at(
                                        ident.span(),
                                        format!("`{dn}` is a type parameter of the kernel, not a dimension; a dimension is an integer, a constant or a name of its own"),
                                    );
                                    shape.push(Extent::Const(1));
                                } else if sig.params.iter().any(|q| q.name == *ident) {
                                    self.errors.at(
                                        ident.span(),
                                        format!("the dimension `{dn}` has the name of a parameter; rename one of them"),
                                    );
                                    shape.push(Extent::Const(1));
                                } else {
                                    let v = self.k.add_dim(dn.clone());
                                    dims.insert(dn, v);
                                    self.bind(ident, Binding::Var { id: v, parallel: false, depth: 0 });
                                    shape.push(Extent::Dyn(v));
                                }
                            }
                        }
                    }
                    let id = self.k.add_tensor_param(name, dtype, shape, *mutable);
                    self.k.buffers[id.0 as usize].span = span;
                    self.bind(&p.name, Binding::Buffer(id));
                }
                ParamType::Scalar(dtype) => {
                    let Some(dtype) = self.resolve_elem(dtype) else {
                        self.bind(&p.name, Binding::Poisoned);
                        continue;
                    };
                    let v = self.k.add_scalar_param(name, dtype);
                    self.bind(&p.name, Binding::Var { id: v, parallel: false, depth: 0 });
                }
                ParamType::Invalid => self.bind(&p.name, Binding::Poisoned),
            }
        }
    }
}

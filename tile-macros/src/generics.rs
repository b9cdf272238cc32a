//! Generic kernels: the generic parameters of a kernel
//! (`fn matmul<T: Float16, const BM: usize>(..)`), the instances the
//! attribute lists (`instances((f16, 128), (bf16, 64))`), and the checks
//! between them.
//!
//! Expects the signature's `syn::Generics` and the attribute's instance
//! lists. Guarantees [`GenericParam`]s whose kinds and bounds are known (a
//! lifetime, a default, an unknown bound or a const parameter of a type that
//! is not an integer is an error at its tokens) and [`Instance`]s that have
//! one argument per parameter, of the parameter's kind, within its bound or
//! integer type, and no two alike (each mistake an error at the instance's
//! tokens). An instance is then lowered and compiled like a kernel whose
//! type parameters are written out and whose const parameters are
//! `consts(..)` (`expand.rs`). `tune(BM, ..)` names const parameters the
//! autotuner picks ([`check_tune`]); the instances are then grouped by their
//! other arguments ([`tuning_groups`]), each group one `launch_tuned`
//! choice.

use crate::diag::Errors;
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use tile_ir::DType;

/// What a type parameter's bound allows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum TypeBound {
    /// `T` or `T: Element`: any element type.
    Element,
    /// `T: Float`: `f16`, `bf16`, `f32`.
    Float,
    /// `T: Float16`: `f16`, `bf16` (the tensor-core inputs).
    Float16,
    /// `T: Integer`: `i32`, `u32`.
    Integer,
}

/// The bounds a type parameter may name, with what they allow.
pub(crate) const BOUNDS: [(&str, TypeBound, &[DType]); 4] = [
    ("Element", TypeBound::Element, &[DType::F16, DType::BF16, DType::F32, DType::I32, DType::U32]),
    ("Float", TypeBound::Float, &[DType::F16, DType::BF16, DType::F32]),
    ("Float16", TypeBound::Float16, &[DType::F16, DType::BF16]),
    ("Integer", TypeBound::Integer, &[DType::I32, DType::U32]),
];

impl TypeBound {
    pub fn name(self) -> &'static str {
        BOUNDS.iter().find(|(_, b, _)| *b == self).map_or("Element", |(n, _, _)| n)
    }

    pub fn allows(self) -> &'static [DType] {
        BOUNDS.iter().find(|(_, b, _)| *b == self).map_or(&[], |(_, _, d)| d)
    }
}

/// The integer type of a const parameter, and the values it holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConstType {
    Usize,
    U32,
    I32,
    I64,
}

impl ConstType {
    fn from_name(name: &str) -> Option<ConstType> {
        Some(match name {
            "usize" => ConstType::Usize,
            "u32" => ConstType::U32,
            "i32" => ConstType::I32,
            "i64" => ConstType::I64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ConstType::Usize => "usize",
            ConstType::U32 => "u32",
            ConstType::I32 => "i32",
            ConstType::I64 => "i64",
        }
    }

    fn holds(self, v: i64) -> bool {
        match self {
            ConstType::Usize => v >= 0,
            ConstType::U32 => (0..=u32::MAX as i64).contains(&v),
            ConstType::I32 => (i32::MIN as i64..=i32::MAX as i64).contains(&v),
            ConstType::I64 => true,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum ParamKind {
    Type(TypeBound),
    Const(ConstType),
}

/// One generic parameter of a kernel, as declared.
#[derive(Clone, Debug)]
pub(crate) struct GenericParam {
    pub name: syn::Ident,
    pub kind: ParamKind,
}

/// One argument of an instance as written in the attribute.
#[derive(Clone, Debug)]
pub(crate) enum InstanceArgDecl {
    /// A name: an element type (or a mistake).
    Name(syn::Ident),
    /// An integer literal, possibly negated; its tokens for errors.
    Int(i64, TokenStream),
    /// Anything else (reported when checked against the parameters).
    Other(TokenStream),
}

/// One instance as written: `(f16, 128, 256)` (or a bare `f16` for a
/// kernel with one parameter), optionally named: `mm_small = (f16, 64, 128)`.
#[derive(Clone, Debug)]
pub(crate) struct InstanceDecl {
    pub args: Vec<InstanceArgDecl>,
    pub tokens: TokenStream,
    /// The kernel name given before `=`, if any.
    pub name: Option<syn::Ident>,
}

/// One argument of a checked instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InstanceArg {
    Type(DType),
    Const(i64),
}

/// A checked instance: one argument per generic parameter.
#[derive(Clone, Debug)]
pub(crate) struct Instance {
    pub args: Vec<InstanceArg>,
    /// Where the attribute lists it (the generated `impl` points there).
    pub span: Span,
    /// The kernel name the attribute gives it (`name = (..)`), if any.
    pub name: Option<String>,
}

impl Instance {
    /// The element type each type parameter stands for.
    pub fn types(&self, params: &[GenericParam]) -> Vec<(String, DType)> {
        params
            .iter()
            .zip(&self.args)
            .filter_map(|(p, a)| match a {
                InstanceArg::Type(d) => Some((p.name.to_string(), *d)),
                InstanceArg::Const(_) => None,
            })
            .collect()
    }

    /// The value of each const parameter (for the kernel's constants).
    pub fn consts(&self, params: &[GenericParam]) -> Vec<(syn::Ident, i64)> {
        params
            .iter()
            .zip(&self.args)
            .filter_map(|(p, a)| match a {
                InstanceArg::Const(v) => Some((p.name.clone(), *v)),
                InstanceArg::Type(_) => None,
            })
            .collect()
    }

    /// The arguments as Rust writes them: `f16, 128, 256`.
    pub fn args_text(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| match a {
                InstanceArg::Type(d) => d.name().to_string(),
                InstanceArg::Const(v) => v.to_string(),
            })
            .collect();
        args.join(", ")
    }

    /// How errors and docs name the instance: `matmul::<f16, 128, 256>`.
    pub fn display(&self, kernel: &str) -> String {
        format!("{kernel}::<{}>", self.args_text())
    }

    /// The instance's kernel name (its PTX entry, its `TILE_DUMP` files,
    /// `KernelMeta::name`): the one the attribute gives (`name = (..)`),
    /// else `matmul__f16_128_256`, negative values as `m5`; a PTX
    /// identifier either way.
    pub fn ir_name(&self, kernel: &str) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let mut name = format!("{kernel}_");
        for a in &self.args {
            name.push('_');
            match a {
                InstanceArg::Type(d) => name.push_str(d.name()),
                InstanceArg::Const(v) if *v < 0 => name.push_str(&format!("m{}", v.unsigned_abs())),
                InstanceArg::Const(v) => name.push_str(&v.to_string()),
            }
        }
        name
    }
}

/// The kernel's generic parameters from `syn::Generics`; every mistake is
/// reported and the parameter left out (or kept with the loosest kind).
pub(crate) fn params(generics: &syn::Generics, errors: &mut Errors) -> Vec<GenericParam> {
    let mut out: Vec<GenericParam> = Vec::new();
    for p in &generics.params {
        let param = match p {
            syn::GenericParam::Lifetime(l) => {
                errors.spanned(l, "a tile kernel has no lifetime parameters; its generic parameters are element types (`T: Float16`) and integer constants (`const BM: usize`)");
                continue;
            }
            syn::GenericParam::Type(t) => {
                if let Some((_, d)) = &t.default {
                    errors.spanned(
                        d,
                        "a kernel's type parameter has no default; every instance names its type in `instances(..)`",
                    );
                }
                GenericParam { name: t.ident.clone(), kind: ParamKind::Type(type_bound(t, errors)) }
            }
            syn::GenericParam::Const(c) => {
                if let Some((_, d)) = &c.default {
                    errors.spanned(
                        d,
                        "a kernel's const parameter has no default; every instance gives its value in `instances(..)`",
                    );
                }
                let ty = match &c.ty {
                    syn::Type::Path(p) => p.path.get_ident().and_then(|i| ConstType::from_name(&i.to_string())),
                    _ => None,
                };
                let Some(ty) = ty else {
                    errors.spanned(
                        &c.ty,
                        "a kernel's const parameter is an integer: `const BM: usize` (or `u32`, `i32`, `i64`)",
                    );
                    continue;
                };
                GenericParam { name: c.ident.clone(), kind: ParamKind::Const(ty) }
            }
        };
        if ["Instance", "Instances", "Tuned"].iter().any(|r| param.name == r) {
            errors.at(
                param.name.span(),
                format!("`{}` is the name of an item the kernel's module defines; rename the parameter", param.name),
            );
            continue;
        }
        if out.iter().any(|q| q.name == param.name) {
            errors.at(param.name.span(), format!("the generic parameter `{}` is declared twice", param.name));
            continue;
        }
        out.push(param);
    }
    out
}

fn type_bound(t: &syn::TypeParam, errors: &mut Errors) -> TypeBound {
    let mut bound = TypeBound::Element;
    for b in &t.bounds {
        let name = match b {
            syn::TypeParamBound::Trait(tb) if tb.path.segments.last().is_some_and(|s| s.arguments.is_empty()) => {
                tb.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default()
            }
            _ => String::new(),
        };
        match BOUNDS.iter().find(|(n, _, _)| *n == name) {
            // Two bounds: what both allow (`Float + Float16` is `Float16`).
            Some((_, b2, allowed)) => {
                let both: Vec<DType> = bound.allows().iter().copied().filter(|d| allowed.contains(d)).collect();
                if both.is_empty() {
                    errors.spanned(b, format!("`{}` and `{name}` together allow no element type", bound.name()));
                } else if both.len() < bound.allows().len() {
                    bound = *b2;
                }
            }
            None => {
                errors.spanned(b, format!("unknown bound on the type parameter `{}`; {}", t.ident, BOUNDS_HELP));
            }
        }
    }
    bound
}

const BOUNDS_HELP: &str = "a kernel's type parameter is an element type bounded by `Float16` (f16 | bf16), `Float` (f16 | bf16 | f32), `Integer` (i32 | u32) or `Element` (any of the five; the same as no bound)";

/// `instances(..)`'s contents: a comma-separated list of `(a, b, ..)`
/// tuples, or of bare arguments (one-parameter kernels), each optionally
/// preceded by `name =` (the instance's kernel name).
pub(crate) fn parse_instance_list(input: syn::parse::ParseStream) -> syn::Result<Vec<InstanceDecl>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let name = if input.peek(syn::Ident) && input.peek2(syn::Token![=]) && !input.peek2(syn::Token![==]) {
            let name: syn::Ident = input.parse()?;
            input.parse::<syn::Token![=]>()?;
            Some(name)
        } else {
            None
        };
        if input.peek(syn::token::Paren) {
            let group: proc_macro2::Group = input.parse()?;
            let tokens = group.to_token_stream();
            let args = syn::parse::Parser::parse2(
                |inner: syn::parse::ParseStream| {
                    let mut args = Vec::new();
                    while !inner.is_empty() {
                        args.push(parse_instance_arg(inner)?);
                        if inner.is_empty() {
                            break;
                        }
                        inner.parse::<syn::Token![,]>()?;
                    }
                    Ok(args)
                },
                group.stream(),
            )?;
            out.push(InstanceDecl { args, tokens, name });
        } else {
            let arg = parse_instance_arg(input)?;
            let tokens = match &arg {
                InstanceArgDecl::Name(i) => i.to_token_stream(),
                InstanceArgDecl::Int(_, t) | InstanceArgDecl::Other(t) => t.clone(),
            };
            out.push(InstanceDecl { args: vec![arg], tokens, name });
        }
        if input.is_empty() {
            break;
        }
        input.parse::<syn::Token![,]>()?;
    }
    Ok(out)
}

/// One argument: a name, an integer literal (`-` allowed), or the tokens up
/// to the next comma.
fn parse_instance_arg(input: syn::parse::ParseStream) -> syn::Result<InstanceArgDecl> {
    if input.peek(syn::Ident) && (input.peek2(syn::Token![,]) || peek_end(input)) {
        return Ok(InstanceArgDecl::Name(input.parse()?));
    }
    let mut tokens = TokenStream::new();
    while !input.is_empty() && !input.peek(syn::Token![,]) {
        tokens.extend([input.parse::<proc_macro2::TokenTree>()?]);
    }
    if tokens.is_empty() {
        return Err(input.error("expected an instance argument: an element type (`f16`) or an integer (`128`)"));
    }
    let int = syn::parse2::<syn::Expr>(tokens.clone()).ok().and_then(|e| int_value(&e));
    Ok(match int {
        Some(v) => InstanceArgDecl::Int(v, tokens),
        None => InstanceArgDecl::Other(tokens),
    })
}

fn peek_end(input: syn::parse::ParseStream) -> bool {
    let fork = input.fork();
    let _ = fork.parse::<syn::Ident>();
    fork.is_empty()
}

fn int_value(e: &syn::Expr) -> Option<i64> {
    match e {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) if i.suffix().is_empty() => i.base10_parse().ok(),
        syn::Expr::Unary(syn::ExprUnary { op: syn::UnOp::Neg(_), expr, .. }) => int_value(expr)?.checked_neg(),
        _ => None,
    }
}

/// Checks the instances against the parameters; the good ones are
/// returned, in order (each mistake reported at the instance's tokens).
/// `kernel` names the kernel in messages; `at` is where to report a
/// missing `instances(..)`.
pub(crate) fn check_instances(
    kernel: &str,
    params: &[GenericParam],
    decls: Option<&[InstanceDecl]>,
    at: Span,
    errors: &mut Errors,
) -> Vec<Instance> {
    let signature = || {
        let names: Vec<String> = params.iter().map(|p| p.name.to_string()).collect();
        format!("`{kernel}<{}>`", names.join(", "))
    };
    let Some(decls) = decls else {
        if !params.is_empty() {
            errors.at(
                at,
                format!(
                    "the generic kernel {} lists its instances in the attribute, e.g. `#[tile_kernel(threads = .., instances({}))]`: every instance is compiled at build time",
                    signature(),
                    example_instance(params)
                ),
            );
        }
        return Vec::new();
    };
    if params.is_empty() {
        let first = decls.first().map(|d| d.tokens.clone()).unwrap_or_default();
        errors.spanned(
            &first,
            format!("`instances(..)` on `{kernel}`, which has no generic parameters; write them after its name: `fn {kernel}<T: Float16, const BM: usize>(..)`"),
        );
        return Vec::new();
    }
    if decls.is_empty() {
        errors.at(
            at,
            format!("`instances()` is empty; list at least one, e.g. `instances({})`", example_instance(params)),
        );
    }
    let mut out: Vec<Instance> = Vec::new();
    'decls: for d in decls {
        if d.args.len() != params.len() {
            errors.spanned(
                &d.tokens,
                format!(
                    "this instance has {} argument{}, and {} has {} parameter{}",
                    d.args.len(),
                    if d.args.len() == 1 { "" } else { "s" },
                    signature(),
                    params.len(),
                    if params.len() == 1 { "" } else { "s" }
                ),
            );
            continue;
        }
        let mut args = Vec::new();
        for (p, a) in params.iter().zip(&d.args) {
            match (&p.kind, a) {
                (ParamKind::Type(bound), InstanceArgDecl::Name(ident)) => {
                    let dtype =
                        DType::from_name(&ident.to_string()).filter(|d| TypeBound::Element.allows().contains(d));
                    let Some(dtype) = dtype else {
                        errors.at(
                            ident.span(),
                            format!("`{ident}` is not an element type; the type parameter `{}` takes `f16`, `bf16`, `f32`, `i32` or `u32`", p.name),
                        );
                        continue 'decls;
                    };
                    if !bound.allows().contains(&dtype) {
                        let allowed: Vec<&str> = bound.allows().iter().map(|d| d.name()).collect();
                        errors.at(
                            ident.span(),
                            format!(
                                "`{ident}` does not satisfy the bound `{}: {}` ({})",
                                p.name,
                                bound.name(),
                                allowed.join(" | ")
                            ),
                        );
                        continue 'decls;
                    }
                    args.push(InstanceArg::Type(dtype));
                }
                (ParamKind::Const(ty), InstanceArgDecl::Int(v, tokens)) => {
                    if !ty.holds(*v) {
                        errors.spanned(
                            tokens,
                            format!("`{v}` is not a `{}`, the type of the const parameter `{}`", ty.name(), p.name),
                        );
                        continue 'decls;
                    }
                    args.push(InstanceArg::Const(*v));
                }
                (ParamKind::Type(_), other) => {
                    errors.spanned(
                        &arg_tokens(other),
                        format!(
                            "the type parameter `{}` takes an element type here (`f16`, `bf16`, `f32`, `i32`, `u32`)",
                            p.name
                        ),
                    );
                    continue 'decls;
                }
                (ParamKind::Const(ty), other) => {
                    errors.spanned(
                        &arg_tokens(other),
                        format!("the const parameter `{}: {}` takes an integer literal here", p.name, ty.name()),
                    );
                    continue 'decls;
                }
            }
        }
        let span = d.tokens.clone().into_iter().next().map_or(at, |t| t.span());
        let instance = Instance { args, span, name: d.name.as_ref().map(|n| n.to_string()) };
        if out.iter().any(|i| i.args == instance.args) {
            errors.spanned(&d.tokens, format!("the instance `{}` is listed twice", instance.display(kernel)));
            continue;
        }
        let ir_name = instance.ir_name(kernel);
        if let Some(other) = out.iter().find(|i| i.ir_name(kernel) == ir_name) {
            let at = d.name.as_ref().map_or_else(|| d.tokens.clone(), |n| n.to_token_stream());
            errors.spanned(
                &at,
                format!(
                    "the instances `{}` and `{}` would both be the kernel `{ir_name}`; give them different names",
                    other.display(kernel),
                    instance.display(kernel)
                ),
            );
            continue;
        }
        out.push(instance);
    }
    out
}

fn arg_tokens(a: &InstanceArgDecl) -> TokenStream {
    match a {
        InstanceArgDecl::Name(i) => i.to_token_stream(),
        InstanceArgDecl::Int(_, t) | InstanceArgDecl::Other(t) => t.clone(),
    }
}

fn example_instance(params: &[GenericParam]) -> String {
    let args: Vec<&str> = params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Type(TypeBound::Integer) => "i32",
            ParamKind::Type(_) => "f16",
            ParamKind::Const(_) => "128",
        })
        .collect();
    if args.len() == 1 {
        args[0].to_string()
    } else {
        format!("({})", args.join(", "))
    }
}

/// Checks `tune(..)`'s names against the parameters: each names a const
/// parameter, once. Returns the tuned parameters' indices in declaration
/// order (empty when there is no `tune(..)` or it is wrong: reported).
pub(crate) fn check_tune(
    kernel: &str,
    params: &[GenericParam],
    tune: Option<&(Vec<syn::Ident>, Span)>,
    errors: &mut Errors,
) -> Vec<usize> {
    let Some((names, at)) = tune else { return Vec::new() };
    if params.is_empty() {
        errors.at(
            *at,
            format!("`tune(..)` names the const parameters the autotuner picks among the instances, and `{kernel}` has no generic parameters; write them after its name (`fn {kernel}<T: Float16, const BM: usize>(..)`) and list the instances in `instances(..)`"),
        );
        return Vec::new();
    }
    let consts: Vec<String> =
        params.iter().filter(|p| matches!(p.kind, ParamKind::Const(_))).map(|p| p.name.to_string()).collect();
    if names.is_empty() {
        errors.at(
            *at,
            format!(
                "`tune()` names no parameter; name the const parameters the autotuner picks, e.g. `tune({})`",
                consts.join(", ")
            ),
        );
        return Vec::new();
    }
    let mut out: Vec<usize> = Vec::new();
    let mut ok = true;
    for name in names {
        match params.iter().position(|p| p.name == *name) {
            None => {
                errors.at(
                    name.span(),
                    format!(
                        "`tune(..)` names `{name}`, which is not a generic parameter of `{kernel}`; its const parameters are {}{}",
                        if consts.is_empty() { "none".to_string() } else { consts.join(", ") },
                        crate::diag::did_you_mean(&name.to_string(), consts.iter().map(String::as_str))
                    ),
                );
                ok = false;
            }
            Some(i) if matches!(params[i].kind, ParamKind::Type(_)) => {
                errors.at(
                    name.span(),
                    format!("`{name}` is a type parameter: the caller chooses element types (`launch_tuned::<f16, ..>`); `tune(..)` names const parameters (tile sizes, stages, threads, split-K, warp policy)"),
                );
                ok = false;
            }
            Some(i) if out.contains(&i) => {
                errors.at(name.span(), format!("`{name}` is named twice in `tune(..)`"));
                ok = false;
            }
            Some(i) => out.push(i),
        }
    }
    if !ok {
        return Vec::new();
    }
    out.sort_unstable();
    out
}

/// One choice of `launch_tuned`: the instances that agree on every
/// parameter `tune(..)` does not name.
pub(crate) struct TuningGroup {
    /// The untuned parameters' arguments (declaration order).
    pub fixed: Vec<InstanceArg>,
    /// The instances' indices, in `instances(..)` order.
    pub members: Vec<usize>,
}

/// The instances grouped by their untuned arguments, groups in the order
/// of their first instance.
pub(crate) fn tuning_groups(instances: &[Instance], tuned: &[usize]) -> Vec<TuningGroup> {
    let mut groups: Vec<TuningGroup> = Vec::new();
    for (i, inst) in instances.iter().enumerate() {
        let fixed: Vec<InstanceArg> =
            inst.args.iter().enumerate().filter(|(j, _)| !tuned.contains(j)).map(|(_, a)| a.clone()).collect();
        match groups.iter_mut().find(|g| g.fixed == fixed) {
            Some(g) => g.members.push(i),
            None => groups.push(TuningGroup { fixed, members: vec![i] }),
        }
    }
    groups
}

/// `BM = 128, BN = 256`: the tuned arguments of an instance.
pub(crate) fn tuned_config(params: &[GenericParam], instance: &Instance, tuned: &[usize]) -> String {
    let parts: Vec<String> = tuned
        .iter()
        .map(|&j| match &instance.args[j] {
            InstanceArg::Const(v) => format!("{} = {v}", params[j].name),
            InstanceArg::Type(d) => format!("{} = {}", params[j].name, d.name()),
        })
        .collect();
    parts.join(", ")
}

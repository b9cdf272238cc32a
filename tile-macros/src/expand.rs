//! Expansion: orchestrates the pipeline and quotes the generated module.
//!
//! Expects the attribute's and the item's tokens. Guarantees, for a kernel
//! `fn name(..)`, the module described in ARCHITECTURE.md ("The generated
//! code"): `pub static META: ::tile::KernelMeta` and `pub fn launch(stream,
//! params..) -> Result<(), ::tile::Error>`. When anything is wrong it still
//! emits that module (with an empty `META` and a `launch` of the right
//! signature, so that callers do not get follow-up errors) next to the
//! `compile_error!`s. A panic anywhere below becomes an error at the
//! kernel's name instead of an ICE-like "proc macro panicked".

use crate::backend::{self, TargetCode};
use crate::diag::Errors;
use crate::generics::{self, Instance, InstanceArg, ParamKind};
use crate::sig::Elem;
use crate::sig::{DimDecl, ParamType, Signature};
use crate::{attr, lower, sig};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use tile_ir::DType;

pub(crate) fn tile_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let name_span = find_fn_name(&item).unwrap_or_else(Span::call_site);
    let editor = crate::editor::editor_uses(&attr, &item);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| expand(attr, item))) {
        Ok(tokens) => quote! { #tokens #editor },
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            syn::Error::new(name_span, format!("internal error in `#[tile_kernel]` (a bug; please report it): {msg}"))
                .to_compile_error()
        }
    }
}

/// The identifier after `fn`, found without parsing (for errors when parsing fails).
fn find_fn_name(item: &TokenStream) -> Option<Span> {
    let mut iter = item.clone().into_iter();
    while let Some(tt) = iter.next() {
        if matches!(&tt, TokenTree::Ident(i) if i == "fn") {
            if let Some(TokenTree::Ident(name)) = iter.next() {
                return Some(name.span());
            }
        }
    }
    None
}

/// What ends up in `META` when everything compiled.
struct Compiled {
    ir_json: String,
    targets: Vec<TargetCode>,
}

fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_with(attr, item, &backend::BuildEnv::from_env())
}

/// [`expand`] with the build environment given (the fuzz test compiles for
/// every target without `TILE_PTXAS` or `TILE_DUMP`).
pub(crate) fn expand_with(attr: TokenStream, item: TokenStream, env: &backend::BuildEnv) -> TokenStream {
    let mut errors = Errors::default();
    let attr = attr::parse(attr, &mut errors);
    let sig = match sig::parse(item, &mut errors) {
        Ok(sig) => sig,
        Err(e) => {
            errors.push(e);
            return errors.combined().map(|e| e.to_compile_error()).unwrap_or_default();
        }
    };
    let kept_attrs = kept_attributes(&sig, &mut errors);
    if !sig.generics.is_empty() || attr.instances.is_some() || attr.tune.is_some() {
        return expand_generic(&attr, &sig, &kept_attrs, env, errors);
    }
    let (kernel, spans) = lower::lower_instance(&attr, &sig, None, &mut errors);
    let mut compiled = None;
    if errors.is_empty() {
        compiled = compile(&kernel, &spans, &sig, &attr, env, &mut errors);
    }
    if !errors.is_empty() {
        compiled = None;
    }
    let module = module(&sig, &kept_attrs, attr.threads, compiled.as_ref());
    let errors = errors.combined().map(|e| e.to_compile_error());
    quote! { #module #errors }
}

/// Compiles a kernel that lowered without errors for every target, and
/// serializes its IR; `None` (with the errors in `errors`) when it fails.
fn compile(
    kernel: &tile_ir::Kernel,
    spans: &crate::diag::SpanTable,
    sig: &Signature,
    attr: &attr::KernelAttr,
    env: &backend::BuildEnv,
    errors: &mut Errors,
) -> Option<Compiled> {
    let (compiled, failures) = compile_keeping(kernel, spans, sig, attr, env, errors);
    backend::report(failures, spans, errors);
    compiled
}

/// [`compile`], with the targets' compile errors returned unreported
/// (`backend::compile_targets`).
fn compile_keeping(
    kernel: &tile_ir::Kernel,
    spans: &crate::diag::SpanTable,
    sig: &Signature,
    attr: &attr::KernelAttr,
    env: &backend::BuildEnv,
    errors: &mut Errors,
) -> (Option<Compiled>, backend::TargetFailures) {
    let (targets, failures) =
        backend::compile_targets(kernel, spans, sig.ident.span(), attr.archs.as_deref(), env, errors);
    // The embedded IR carries the statements' source lines (the PTX does not
    // depend on them).
    let mut embedded = kernel.clone();
    embedded.source = spans.source_map();
    match serde_json::to_string(&embedded) {
        Ok(ir_json) => (Some(Compiled { ir_json, targets }), failures),
        Err(e) => {
            errors
                .at(sig.ident.span(), format!("internal error in `#[tile_kernel]`: cannot serialize the kernel: {e}"));
            (None, failures)
        }
    }
}

/// A generic kernel: every instance lowered and compiled on its own (its
/// errors collected apart, then merged: an error every instance has is
/// reported once, one that only some have names them), and the module of
/// [`generic_module`].
fn expand_generic(
    attr: &attr::KernelAttr,
    sig: &Signature,
    kept_attrs: &[syn::Attribute],
    env: &backend::BuildEnv,
    mut errors: Errors,
) -> TokenStream {
    let name = syn::ext::IdentExt::unraw(&sig.ident).to_string();
    let at = attr.instances.as_ref().map_or(sig.ident.span(), |(_, s)| *s);
    let decls = attr.instances.as_ref().map(|(d, _)| d.as_slice());
    let instances = generics::check_instances(&name, &sig.generics, decls, at, &mut errors);
    let tuned = generics::check_tune(&name, &sig.generics, attr.tune.as_ref(), &mut errors);
    if sig.generics.is_empty() {
        // `instances(..)` on a plain kernel (reported): the plain module.
        let module = module(sig, kept_attrs, attr.threads, None);
        let errors = errors.combined().map(|e| e.to_compile_error());
        return quote! { #module #errors };
    }
    let mut per_instance = Vec::new();
    let mut compiled = Vec::new();
    let mut pending = Vec::new();
    for instance in &instances {
        let mut own = Errors::default();
        let (kernel, spans) = lower::lower_instance(attr, sig, Some(instance), &mut own);
        let (code, failures) = if errors.is_empty() && own.is_empty() {
            compile_keeping(&kernel, &spans, sig, attr, env, &mut own)
        } else {
            (None, Vec::new())
        };
        compiled.push((kernel.name.clone(), kernel.threads, code));
        pending.push((spans, failures));
        per_instance.push(own);
    }
    let groups = if tuned.is_empty() { Vec::new() } else { generics::tuning_groups(&instances, &tuned) };
    drop_failed_candidates(&name, &instances, &groups, &compiled, &mut pending, env, &mut errors);
    for ((spans, failures), own) in pending.into_iter().zip(&mut per_instance) {
        backend::report(failures, &spans, own);
    }
    let labels: Vec<String> = instances.iter().map(|i| i.display(&name)).collect();
    merge_instance_errors(&labels, per_instance, &mut errors);
    if !errors.is_empty() {
        for c in &mut compiled {
            c.2 = None;
        }
    }
    let tuning = Tuning { params: &tuned, groups: &groups };
    let module = generic_module(sig, kept_attrs, &instances, &compiled, &tuning);
    let errors = errors.combined().map(|e| e.to_compile_error());
    quote! { #module #errors }
}

/// A tuned kernel's candidates that fail to compile for a target where
/// another candidate of their group compiles: their errors for that target
/// are dropped (the instance's `META` has no variant there, so the tuner
/// skips it on such a GPU), each with a note in `TILE_DUMP`
/// (`<instance>.<arch>.dropped.txt`). Where no candidate of a group
/// compiles for a target, the errors stay and are reported.
fn drop_failed_candidates(
    name: &str,
    instances: &[Instance],
    groups: &[generics::TuningGroup],
    compiled: &[(String, u32, Option<Compiled>)],
    pending: &mut [(crate::diag::SpanTable, backend::TargetFailures)],
    env: &backend::BuildEnv,
    errors: &mut Errors,
) {
    let compiles_for =
        |i: usize, arch: &str| compiled[i].2.as_ref().is_some_and(|c| c.targets.iter().any(|t| t.arch == arch));
    for g in groups {
        for &m in &g.members {
            let mut archs: Vec<&'static str> = pending[m].1.iter().filter_map(|(_, a)| *a).collect();
            archs.dedup();
            for arch in archs {
                let Some(&winner) = g.members.iter().find(|&&o| o != m && compiles_for(o, arch)) else { continue };
                let (dropped, kept): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut pending[m].1).into_iter().partition(|(_, a)| *a == Some(arch));
                pending[m].1 = kept;
                if let Some(dir) = &env.dump {
                    let mut note = format!(
                        "`{}` is not a candidate of the tuned kernel on {arch}: it does not compile there (`{}` does)\n",
                        instances[m].display(name),
                        instances[winner].display(name)
                    );
                    for (e, _) in &dropped {
                        note.push_str(&format!("- {}\n", e.message));
                    }
                    backend::write_dump(
                        dir,
                        &format!("{}.{arch}.dropped.txt", compiled[m].0),
                        &note,
                        Span::call_site(),
                        errors,
                    );
                }
            }
        }
    }
}

/// What `tune(..)` adds to a generic kernel's module: the tuned
/// parameters' indices and the groups of instances `launch_tuned` picks
/// among (both empty without `tune(..)`).
struct Tuning<'a> {
    params: &'a [usize],
    groups: &'a [generics::TuningGroup],
}

/// Moves each instance's errors into `errors`: one that every instance
/// reports (the same message at the same tokens) once as it is, the others
/// with the instances that have them, e.g. "(in instance
/// `matmul::<bf16, 256>`)".
fn merge_instance_errors(labels: &[String], per_instance: Vec<Errors>, errors: &mut Errors) {
    struct Entry {
        key: (String, String, usize),
        range: crate::diag::SpanRange,
        message: String,
        instances: Vec<usize>,
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (i, own) in per_instance.into_iter().enumerate() {
        let mut seen: std::collections::HashMap<(String, String), usize> = Default::default();
        for e in own.into_single() {
            let message = e.to_string();
            let span = format!("{:?}", e.span());
            let n = seen.entry((span.clone(), message.clone())).or_default();
            let key = (span, message.clone(), *n);
            *n += 1;
            match entries.iter_mut().find(|x| x.key == key) {
                Some(x) => x.instances.push(i),
                None => {
                    entries.push(Entry { key, range: crate::diag::range_of_error(&e), message, instances: vec![i] })
                }
            }
        }
    }
    for e in entries {
        let message = if e.instances.len() == labels.len() {
            e.message
        } else {
            let names: Vec<String> = e.instances.iter().map(|&i| format!("`{}`", labels[i])).collect();
            let which = if names.len() == 1 { "instance" } else { "instances" };
            format!("{} (in {which} {})", e.message, names.join(", "))
        };
        errors.push(e.range.error(message));
    }
}

/// Doc comments, `cfg` and lint attributes move to the module; anything
/// else is an error (the function does not exist any more).
fn kept_attributes(sig: &Signature, errors: &mut Errors) -> Vec<syn::Attribute> {
    let mut kept = Vec::new();
    for a in &sig.attrs {
        let path = a.path();
        let known = ["doc", "cfg", "cfg_attr", "allow", "warn", "deny", "expect", "forbid"];
        if known.iter().any(|k| path.is_ident(k)) {
            kept.push(a.clone());
        } else {
            errors.spanned(
                a,
                "this attribute is not supported on a tile kernel (the function becomes a module `name { META, launch }`); doc comments, `cfg` and lint attributes are kept",
            );
        }
    }
    kept
}

/// `tokens` with every span set to `span`, so that rustc's notes about the
/// generated `launch` point at the user's parameter.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

fn rust_type(dtype: DType) -> TokenStream {
    match dtype {
        DType::F16 => quote!(::tile::f16),
        DType::BF16 => quote!(::tile::bf16),
        DType::F32 => quote!(f32),
        DType::I32 => quote!(i32),
        DType::U32 => quote!(u32),
        DType::I64 => quote!(i64),
        DType::Bool => quote!(bool),
    }
}

fn scalar_arg(dtype: DType) -> Option<TokenStream> {
    Some(match dtype {
        DType::F16 => quote!(F16),
        DType::BF16 => quote!(BF16),
        DType::F32 => quote!(F32),
        DType::I32 => quote!(I32),
        DType::U32 => quote!(U32),
        DType::I64 | DType::Bool => return None,
    })
}

fn elem_name(e: &Elem) -> String {
    match e {
        Elem::Known(d) => d.to_string(),
        Elem::Param(i) => i.to_string(),
    }
}

/// How a parameter was written, for the generated docs.
fn describe_param(ty: &ParamType) -> String {
    match ty {
        ParamType::Tensor { mutable, dtype, dims } => {
            let dims: Vec<String> = dims
                .iter()
                .map(|d| match d {
                    DimDecl::Literal(v) => v.to_string(),
                    DimDecl::Name(i) => i.to_string(),
                })
                .collect();
            format!("&{}Tensor<{}, {}>", if *mutable { "mut " } else { "" }, elem_name(dtype), dims.join(", "))
        }
        ParamType::Scalar(d) => elem_name(d),
        ParamType::Invalid => "(invalid)".into(),
    }
}

/// The element type's Rust tokens: a concrete type, or the type parameter.
fn elem_type(e: &Elem) -> TokenStream {
    match e {
        Elem::Known(d) => rust_type(*d),
        Elem::Param(i) => i.to_token_stream(),
    }
}

/// The `launch` wrapper's pieces: the stream's name, the parameters, the
/// `KernelArg`s they become, and the ones that take no argument.
struct LaunchParams {
    stream: syn::Ident,
    params: Vec<TokenStream>,
    args: Vec<TokenStream>,
    unused: Vec<syn::Ident>,
}

fn launch_params(sig: &Signature) -> LaunchParams {
    let span = sig.ident.span();
    let stream = if sig.params.iter().any(|p| p.name == "stream") {
        format_ident!("__tile_stream", span = span)
    } else {
        format_ident!("stream", span = span)
    };
    let mut params = Vec::new();
    let mut args = Vec::new();
    let mut unused = Vec::new();
    for p in &sig.params {
        let pname = &p.name;
        let ty_span = p.ty_tokens.clone().into_iter().next().map_or(pname.span(), |t| t.span());
        match &p.ty {
            ParamType::Tensor { mutable, dtype, .. } => {
                let elem = respan(elem_type(dtype), ty_span);
                if *mutable {
                    params.push(quote_spanned!(ty_span=> #pname: &mut impl ::tile::TensorArgMut<Elem = #elem>));
                    args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::tensor_mut(#pname)));
                } else {
                    params.push(quote_spanned!(ty_span=> #pname: &impl ::tile::TensorArg<Elem = #elem>));
                    args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::tensor(#pname)));
                }
            }
            ParamType::Scalar(dtype) => {
                let ty = respan(elem_type(dtype), ty_span);
                params.push(quote_spanned!(ty_span=> #pname: #ty));
                match dtype {
                    Elem::Known(d) => match scalar_arg(*d) {
                        Some(variant) => {
                            args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::#variant(#pname)))
                        }
                        None => unused.push(pname.clone()),
                    },
                    Elem::Param(_) => {
                        args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::element(#pname)))
                    }
                }
            }
            ParamType::Invalid => {
                // Accept anything, so that the call site gets no follow-up error.
                params.push(quote_spanned!(ty_span=> #pname: impl ::core::marker::Sized));
                unused.push(pname.clone());
            }
        }
    }
    LaunchParams { stream, params, args, unused }
}

/// `META`'s value: the compiled kernel, or (after errors) an empty one.
fn meta_value(name: &str, compiled: Option<&Compiled>) -> TokenStream {
    let (ir, targets) = match compiled {
        Some(c) => {
            let targets = c.targets.iter().map(|t| {
                let (arch, schedule, ptx, shared, threads, persistent) =
                    (t.arch, t.schedule, &t.ptx, t.shared_bytes, t.threads, t.persistent);
                let maps = t.tensor_maps.iter().map(|m| {
                    let tensor = m.tensor;
                    let box_shape = &m.box_shape;
                    let swizzle = m.swizzle.bytes();
                    quote!(::tile::TensorMapMeta { tensor: #tensor, box_shape: &[#(#box_shape),*], swizzle_bytes: #swizzle })
                });
                let cubin = match &t.cubin {
                    Some(bytes) => {
                        let bytes = proc_macro2::Literal::byte_string(bytes);
                        quote!(::core::option::Option::Some(#bytes))
                    }
                    None => quote!(::core::option::Option::None),
                };
                quote!(::tile::KernelTarget {
                    arch: #arch,
                    schedule: #schedule,
                    ptx: #ptx,
                    shared_bytes: #shared,
                    threads: #threads,
                    tensor_maps: &[#(#maps),*],
                    persistent: #persistent,
                    cubin: #cubin,
                })
            });
            (c.ir_json.clone(), quote!(#(#targets),*))
        }
        None => (String::new(), quote!()),
    };
    quote!(::tile::KernelMeta {
        name: #name,
        ir: #ir,
        targets: &[#targets],
    })
}

fn params_doc(sig: &Signature) -> String {
    let signature: Vec<String> =
        sig.params.iter().map(|p| format!("`{}: {}`", p.name, describe_param(&p.ty))).collect();
    format!(" Parameters: {}.", if signature.is_empty() { "none".to_string() } else { signature.join(", ") })
}

fn module(sig: &Signature, attrs: &[syn::Attribute], threads: Option<u32>, compiled: Option<&Compiled>) -> TokenStream {
    let vis = &sig.vis;
    let ident = &sig.ident;
    let name = syn::ext::IdentExt::unraw(ident).to_string();
    let span = ident.span();
    let LaunchParams { stream, params, args, unused } = launch_params(sig);
    let meta = meta_value(&name, compiled);
    let launch_doc = format!(
        " Launches the kernel `{name}` on `{stream}` ({} threads per block; dynamic dimensions and the grid come from the tensors' shapes).",
        threads.map_or_else(|| "?".to_string(), |t| t.to_string())
    );
    let params_doc = params_doc(sig);
    let meta_doc =
        format!(" The compiled kernel `{name}`: its Tile IR (JSON) and the PTX of each target (several variants per target, preferred first, when one needs TMA-addressable tensors).");
    let launch = quote_spanned!(span=> launch);
    let mod_tokens = quote! {
        #(#attrs)*
        #vis mod #ident {
            #[doc = #meta_doc]
            #[allow(dead_code)]
            pub static META: ::tile::KernelMeta = #meta;

            #[doc = #launch_doc]
            #[doc = ""]
            #[doc = #params_doc]
            #[allow(dead_code, clippy::too_many_arguments)]
            pub fn #launch(#stream: &::tile::Stream, #(#params),*) -> ::core::result::Result<(), ::tile::Error> {
                #(let _ = #unused;)*
                ::tile::__private::launch(#stream, &self::META, &mut [#(#args),*])
            }
        }
    };
    mod_tokens.into_token_stream()
}

/// The module of a generic kernel `name<P..>`: a trait `Instance<P..>`
/// (with a diagnostic naming the instances when a use is not one), an
/// uninhabited `Instances` implementing it once per instance with that
/// instance's `META`, `INSTANCES` (every `META`, in the attribute's order),
/// `meta::<P..>()`, and `launch::<P..>(stream, params..)`, whose tensors are
/// `impl TensorArg<Elem = T>` for a type parameter `T`.
fn generic_module(
    sig: &Signature,
    attrs: &[syn::Attribute],
    instances: &[Instance],
    compiled: &[(String, u32, Option<Compiled>)],
    tuning: &Tuning,
) -> TokenStream {
    let vis = &sig.vis;
    let ident = &sig.ident;
    let name = syn::ext::IdentExt::unraw(ident).to_string();
    let span = ident.span();
    let LaunchParams { stream, params, args, unused } = launch_params(sig);
    // The generic parameters: declared (`T, const BM: usize`), used (`T, BM`),
    // and on `launch` (`T: ::tile::Element, const BM: usize`).
    let mut declared = Vec::new();
    let mut used = Vec::new();
    let mut on_launch = Vec::new();
    for g in &sig.generics {
        let n = &g.name;
        used.push(quote!(#n));
        match &g.kind {
            ParamKind::Type(_) => {
                declared.push(quote!(#n));
                on_launch.push(quote!(#n: ::tile::Element));
            }
            ParamKind::Const(ty) => {
                let ty = format_ident!("{}", ty.name());
                declared.push(quote!(const #n: #ty));
                on_launch.push(quote!(const #n: #ty));
            }
        }
    }
    let labels: Vec<String> = instances.iter().map(|i| format!("`{}`", i.display(&name))).collect();
    let list = if labels.is_empty() { "none".to_string() } else { labels.join(", ") };
    let placeholders: Vec<String> = sig.generics.iter().map(|g| format!("{{{}}}", g.name)).collect();
    let message = format!("`{name}` has no instance `{name}::<{}>`", placeholders.join(", "));
    let label = format!("not an instance of `{name}`");
    let note = format!(
        "the instances of `{name}` (its `#[tile_kernel(instances(..))]`, each compiled at build time) are {list}"
    );
    let mut statics = Vec::new();
    let mut impls = Vec::new();
    let mut refs = Vec::new();
    for (i, (instance, (kernel_name, threads, code))) in instances.iter().zip(compiled).enumerate() {
        let stat = format_ident!("__META_{}", i);
        let meta = meta_value(kernel_name, code.as_ref());
        let doc = format!(" `{}` ({threads} threads per block).", instance.display(&name));
        statics.push(quote! {
            #[doc = #doc]
            #[doc(hidden)]
            pub static #stat: ::tile::KernelMeta = #meta;
        });
        let args = instance.args.iter().map(instance_arg);
        let at = instance.span;
        impls.push(quote_spanned! {at=>
            impl Instance<#(#args),*> for Instances {
                const META: &'static ::tile::KernelMeta = &#stat;
            }
        });
        refs.push(quote!(&#stat));
    }
    let count = refs.len();
    let trait_doc = format!(" Implemented by [`Instances`] for each instance of `{name}`: {list}.");
    let launch_doc = format!(
        " Launches the instance `{name}::<{}>` of the kernel on `{stream}` (dynamic dimensions and the grid come from the tensors' shapes); the instances are {list}, and any other is a compile error.",
        sig.generics.iter().map(|g| g.name.to_string()).collect::<Vec<_>>().join(", ")
    );
    let params_doc = params_doc(sig);
    let launch = quote_spanned!(span=> launch);
    let tuned_items = tuned_items(sig, instances, tuning, &name, &stream, &params, &args, &unused);
    quote! {
        #(#attrs)*
        #vis mod #ident {
            #tuned_items

            #[doc = #trait_doc]
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            pub trait Instance<#(#declared),*> {
                /// The compiled instance: its Tile IR (JSON) and the PTX of each target.
                const META: &'static ::tile::KernelMeta;
            }

            /// The instances of the kernel (see [`Instance`]).
            #[allow(dead_code)]
            pub enum Instances {}

            #(#statics)*
            #(#impls)*

            /// Every instance's compiled kernel, in the order of `instances(..)`.
            #[allow(dead_code)]
            pub static INSTANCES: [&::tile::KernelMeta; #count] = [#(#refs),*];

            /// The compiled kernel of one instance.
            #[allow(dead_code)]
            pub fn meta<#(#on_launch),*>() -> &'static ::tile::KernelMeta
            where
                Instances: Instance<#(#used),*>,
            {
                <Instances as Instance<#(#used),*>>::META
            }

            #[doc = #launch_doc]
            #[doc = ""]
            #[doc = #params_doc]
            #[allow(dead_code, clippy::too_many_arguments)]
            pub fn #launch<#(#on_launch),*>(#stream: &::tile::Stream, #(#params),*) -> ::core::result::Result<(), ::tile::Error>
            where
                Instances: Instance<#(#used),*>,
            {
                #(let _ = #unused;)*
                ::tile::__private::launch(#stream, <Instances as Instance<#(#used),*>>::META, &mut [#(#args),*])
            }
        }
    }
}

/// An instance argument as a generic argument: `::tile::f16`, `128`, `{ -1 }`.
fn instance_arg(a: &InstanceArg) -> TokenStream {
    match a {
        InstanceArg::Type(d) => rust_type(*d),
        InstanceArg::Const(v) => {
            let lit = proc_macro2::Literal::i64_unsuffixed(*v);
            if *v < 0 {
                quote!({ #lit })
            } else {
                quote!(#lit)
            }
        }
    }
}

/// The items of a tuned kernel (`tune(..)`; nothing without it): a trait
/// `Tuned<untuned params..>` implemented by `Instances` once per group with
/// its `::tile::tune::TunedKernel` (the group's instances, in order, with
/// their tuned arguments as text), `tuned::<..>()`, `launch_tuned::<..>(stream,
/// params..)` (the global tuner) and `launch_tuned_with::<..>(tuner, stream,
/// params..)`.
#[allow(clippy::too_many_arguments)]
fn tuned_items(
    sig: &Signature,
    instances: &[Instance],
    tuning: &Tuning,
    name: &str,
    stream: &syn::Ident,
    params: &[TokenStream],
    args: &[TokenStream],
    unused: &[syn::Ident],
) -> TokenStream {
    if tuning.params.is_empty() {
        return TokenStream::new();
    }
    let span = sig.ident.span();
    let fixed: Vec<&generics::GenericParam> =
        sig.generics.iter().enumerate().filter(|(j, _)| !tuning.params.contains(j)).map(|(_, g)| g).collect();
    let mut declared = Vec::new();
    let mut used = Vec::new();
    let mut on_launch = Vec::new();
    for g in &fixed {
        let n = &g.name;
        used.push(quote!(#n));
        match &g.kind {
            ParamKind::Type(_) => {
                declared.push(quote!(#n));
                on_launch.push(quote!(#n: ::tile::Element));
            }
            ParamKind::Const(ty) => {
                let ty = format_ident!("{}", ty.name());
                declared.push(quote!(const #n: #ty));
                on_launch.push(quote!(const #n: #ty));
            }
        }
    }
    let where_clause = if fixed.is_empty() { quote!() } else { quote!(where Instances: Tuned<#(#used),*>,) };
    let tuned_names: Vec<String> = tuning.params.iter().map(|&j| sig.generics[j].name.to_string()).collect();
    let group_label = |g: &generics::TuningGroup| {
        if g.fixed.is_empty() {
            name.to_string()
        } else {
            let a: Vec<String> = g
                .fixed
                .iter()
                .map(|a| match a {
                    InstanceArg::Type(d) => d.name().to_string(),
                    InstanceArg::Const(v) => v.to_string(),
                })
                .collect();
            format!("{name}::<{}>", a.join(", "))
        }
    };
    let labels: Vec<String> = tuning.groups.iter().map(|g| format!("`{}`", group_label(g))).collect();
    let placeholders: Vec<String> = fixed.iter().map(|g| format!("{{{}}}", g.name)).collect();
    let message = format!("`{name}` has no tuned configurations for `{name}::<{}>`", placeholders.join(", "));
    let note = format!(
        "`{name}` tunes {} among its instances; `launch_tuned` takes {}",
        tuned_names.join(", "),
        labels.join(", ")
    );
    let mut statics = Vec::new();
    let mut impls = Vec::new();
    for (gi, g) in tuning.groups.iter().enumerate() {
        let stat = format_ident!("__TUNED_{}", gi);
        let label = group_label(g);
        let candidates = g.members.iter().map(|&m| {
            let config = generics::tuned_config(&sig.generics, &instances[m], tuning.params);
            let meta = format_ident!("__META_{}", m);
            quote!(::tile::tune::Candidate { config: #config, meta: &#meta })
        });
        statics.push(quote! {
            #[doc(hidden)]
            pub static #stat: ::tile::tune::TunedKernel =
                ::tile::tune::TunedKernel { name: #label, candidates: &[#(#candidates),*] };
        });
        let fixed_args = g.fixed.iter().map(instance_arg);
        let at = instances[g.members[0]].span;
        impls.push(quote_spanned! {at=>
            impl Tuned<#(#fixed_args),*> for Instances {
                const TUNED: &'static ::tile::tune::TunedKernel = &#stat;
            }
        });
    }
    let tuner = if sig.params.iter().any(|p| p.name == "tuner") {
        format_ident!("__tile_tuner", span = span)
    } else {
        format_ident!("tuner", span = span)
    };
    let launch_tuned = quote_spanned!(span=> launch_tuned);
    let launch_tuned_with = quote_spanned!(span=> launch_tuned_with);
    let trait_doc = format!(
        " Implemented by [`Instances`] for each choice of `{name}`'s untuned parameters: {}; its `TUNED` lists the instances the autotuner picks among ({}).",
        labels.join(", "),
        tuned_names.join(", ")
    );
    let launch_doc = format!(
        " Launches the fastest instance of `{name}` for these arguments, among those with the caller's untuned parameters (the autotuner, `tile::tune`: tuned on the first launch per device and shape bucket, cached on disk; `TILE_TUNE=off|quiet|cache-only`). Tuned parameters: {}.",
        tuned_names.join(", ")
    );
    quote! {
        #[doc = #trait_doc]
        #[diagnostic::on_unimplemented(message = #message, label = "not a tuned configuration", note = #note)]
        pub trait Tuned<#(#declared),*> {
            /// The candidates the autotuner picks among.
            const TUNED: &'static ::tile::tune::TunedKernel;
        }

        #(#statics)*
        #(#impls)*

        /// The candidates of one choice of the untuned parameters.
        #[allow(dead_code)]
        pub fn tuned<#(#on_launch),*>() -> &'static ::tile::tune::TunedKernel
        #where_clause
        {
            <Instances as Tuned<#(#used),*>>::TUNED
        }

        #[doc = #launch_doc]
        #[allow(dead_code, clippy::too_many_arguments)]
        pub fn #launch_tuned<#(#on_launch),*>(#stream: &::tile::Stream, #(#params),*) -> ::core::result::Result<(), ::tile::Error>
        #where_clause
        {
            #(let _ = #unused;)*
            ::tile::__private::launch_tuned(#stream, <Instances as Tuned<#(#used),*>>::TUNED, &mut [#(#args),*])
        }

        /// [`launch_tuned`] through `tuner` (a program that tunes ahead of
        /// time, or a test, with its own settings and cache).
        #[allow(dead_code, clippy::too_many_arguments)]
        pub fn #launch_tuned_with<#(#on_launch),*>(#tuner: &::tile::tune::Tuner, #stream: &::tile::Stream, #(#params),*) -> ::core::result::Result<(), ::tile::Error>
        #where_clause
        {
            #(let _ = #unused;)*
            #tuner.launch(#stream, <Instances as Tuned<#(#used),*>>::TUNED, &mut [#(#args),*])
        }
    }
}

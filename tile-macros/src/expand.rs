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
use crate::sig::{DimDecl, ParamType, Signature};
use crate::{attr, lower, sig};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use tile_ir::DType;

pub(crate) fn tile_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let name_span = find_fn_name(&item).unwrap_or_else(Span::call_site);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| expand(attr, item))) {
        Ok(tokens) => tokens,
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
    let (kernel, spans) = lower::lower(&attr, &sig, &mut errors);
    let mut compiled = None;
    if errors.is_empty() {
        let targets = backend::compile_all(&kernel, &spans, sig.ident.span(), attr.archs.as_deref(), env, &mut errors);
        match serde_json::to_string(&kernel) {
            Ok(ir_json) => compiled = Some(Compiled { ir_json, targets }),
            Err(e) => {
                errors.at(
                    sig.ident.span(),
                    format!("internal error in `#[tile_kernel]`: cannot serialize the kernel: {e}"),
                );
            }
        }
    }
    if !errors.is_empty() {
        compiled = None;
    }
    let module = module(&sig, &kept_attrs, attr.threads, compiled.as_ref());
    let errors = errors.combined().map(|e| e.to_compile_error());
    quote! { #module #errors }
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
            format!("&{}Tensor<{dtype}, {}>", if *mutable { "mut " } else { "" }, dims.join(", "))
        }
        ParamType::Scalar(d) => d.to_string(),
        ParamType::Invalid => "(invalid)".into(),
    }
}

fn module(sig: &Signature, attrs: &[syn::Attribute], threads: Option<u32>, compiled: Option<&Compiled>) -> TokenStream {
    let vis = &sig.vis;
    let ident = &sig.ident;
    let name = syn::ext::IdentExt::unraw(ident).to_string();
    let span = ident.span();
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
                let elem = respan(rust_type(*dtype), ty_span);
                if *mutable {
                    params.push(quote_spanned!(ty_span=> #pname: &mut ::tile::DeviceTensor<#elem>));
                    args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::tensor_mut(#pname)));
                } else {
                    params.push(quote_spanned!(ty_span=> #pname: &::tile::DeviceTensor<#elem>));
                    args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::tensor(#pname)));
                }
            }
            ParamType::Scalar(dtype) => {
                let ty = respan(rust_type(*dtype), ty_span);
                params.push(quote_spanned!(ty_span=> #pname: #ty));
                match scalar_arg(*dtype) {
                    Some(variant) => {
                        args.push(quote_spanned!(ty_span=> ::tile::__private::KernelArg::#variant(#pname)))
                    }
                    None => unused.push(pname.clone()),
                }
            }
            ParamType::Invalid => {
                // Accept anything, so that the call site gets no follow-up error.
                params.push(quote_spanned!(ty_span=> #pname: impl ::core::marker::Sized));
                unused.push(pname.clone());
            }
        }
    }
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
                quote!(::tile::KernelTarget {
                    arch: #arch,
                    schedule: #schedule,
                    ptx: #ptx,
                    shared_bytes: #shared,
                    threads: #threads,
                    tensor_maps: &[#(#maps),*],
                    persistent: #persistent,
                })
            });
            (c.ir_json.clone(), quote!(#(#targets),*))
        }
        None => (String::new(), quote!()),
    };
    let signature: Vec<String> =
        sig.params.iter().map(|p| format!("`{}: {}`", p.name, describe_param(&p.ty))).collect();
    let launch_doc = format!(
        " Launches the kernel `{name}` on `{stream}` ({} threads per block; dynamic dimensions and the grid come from the tensors' shapes).",
        threads.map_or_else(|| "?".to_string(), |t| t.to_string())
    );
    let params_doc =
        format!(" Parameters: {}.", if signature.is_empty() { "none".to_string() } else { signature.join(", ") });
    let meta_doc =
        format!(" The compiled kernel `{name}`: its Tile IR (JSON) and the PTX of each target (several variants per target, preferred first, when one needs TMA-addressable tensors).");
    let launch = quote_spanned!(span=> launch);
    let mod_tokens = quote! {
        #(#attrs)*
        #vis mod #ident {
            #[doc = #meta_doc]
            #[allow(dead_code)]
            pub static META: ::tile::KernelMeta = ::tile::KernelMeta {
                name: #name,
                ir: #ir,
                targets: &[#targets],
            };

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

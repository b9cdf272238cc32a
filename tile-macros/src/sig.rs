//! The kernel's signature: `vis fn name<generics>(params) { body }`.
//!
//! A parameter type such as `&Tensor<f16, M, K>` is DSL, not a Rust type
//! (`M`, `K` are dimensions), so this module parses the function itself
//! (attributes, visibility, `fn`, name, parameters with its own type parser)
//! rather than through `syn::ItemFn`, then the body with `syn::Block`.
//!
//! Shapes are generic arguments (`&Tensor<f16, M, K>`); the tuple form
//! `Tensor<f16, (M, K)>` and the 1-D `Tensor<f32, [N]>` are accepted too.
//! `[M, K]` cannot be: rustc parses the item before the macro runs, and
//! `[M, K]` is not Rust type syntax.
//!
//! Generic parameters (`<T: Float16, const BM: usize>`) are checked by
//! `generics.rs`; a parameter's element type may be a type parameter
//! ([`Elem::Param`]), resolved per instance when lowering.
//!
//! Expects the item's tokens. Guarantees either a [`Signature`] (parameter
//! errors are pushed to [`Errors`] and the bad parameter is kept as
//! [`ParamType::Invalid`], so the generated `launch` still has the right
//! arity) or a fatal `syn::Error` when the item is not a function at all.

use crate::diag::Errors;
use crate::generics::{GenericParam, ParamKind};
use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Block, Ident, Token, Visibility};
use tile_ir::DType;

pub(crate) struct Signature {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub ident: Ident,
    /// The generic parameters (empty for a plain kernel).
    pub generics: Vec<GenericParam>,
    pub params: Vec<ParamDecl>,
    pub body: Block,
}

/// An element type as a parameter writes it.
#[derive(Clone, Debug)]
pub(crate) enum Elem {
    Known(DType),
    /// A type parameter of the kernel (`&Tensor<T, M, K>`).
    Param(Ident),
}

pub(crate) struct ParamDecl {
    pub name: Ident,
    pub ty: ParamType,
    /// The parameter's type tokens as written (for spans).
    pub ty_tokens: TokenStream,
}

pub(crate) enum ParamType {
    Tensor {
        mutable: bool,
        dtype: Elem,
        dims: Vec<DimDecl>,
    },
    Scalar(Elem),
    /// Rejected (error already reported).
    Invalid,
}

/// One dimension of a tensor parameter's shape as written.
pub(crate) enum DimDecl {
    Literal(i64),
    Name(Ident),
}

/// The element and scalar types a kernel signature may use.
pub(crate) const PARAM_DTYPES: [&str; 5] = ["f16", "bf16", "f32", "i32", "u32"];

pub(crate) fn parse(item: TokenStream, errors: &mut Errors) -> syn::Result<Signature> {
    let parser = |input: ParseStream| -> syn::Result<Signature> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        if input.peek(Token![const])
            || input.peek(Token![async])
            || input.peek(Token![unsafe])
            || input.peek(Token![extern])
        {
            let tok: TokenTree = input.parse()?;
            return Err(syn::Error::new(tok.span(), format!("a tile kernel cannot be `{tok} fn`; write a plain `fn`")));
        }
        if !input.peek(Token![fn]) {
            return Err(input.error("`#[tile_kernel]` goes on a function: `pub fn name(params) { .. }`"));
        }
        input.parse::<Token![fn]>()?;
        let ident: Ident = input.parse()?;
        let generics = if input.peek(Token![<]) {
            let g: syn::Generics = input.parse()?;
            crate::generics::params(&g, errors)
        } else {
            Vec::new()
        };
        let content;
        let paren = syn::parenthesized!(content in input);
        let _ = paren;
        let params_tokens: TokenStream = content.parse()?;
        let params = parse_params(params_tokens, &generics, errors);
        if input.peek(Token![->]) {
            let arrow: Token![->] = input.parse()?;
            let mut rest = arrow.to_token_stream();
            while !input.is_empty() && !input.peek(syn::token::Brace) {
                rest.extend([input.parse::<TokenTree>()?]);
            }
            errors.spanned(&rest, "a tile kernel returns nothing; write its results into a `&mut Tensor` parameter");
        }
        if input.peek(Token![where]) {
            return Err(input.error(
                "a tile kernel cannot have a `where` clause; bound its type parameters in `<..>` (`T: Float16`)",
            ));
        }
        let body_tree: TokenTree = input.parse()?;
        let TokenTree::Group(group) = body_tree else {
            return Err(syn::Error::new(body_tree.span(), "expected the kernel's body `{ .. }`"));
        };
        if group.delimiter() != Delimiter::Brace {
            return Err(syn::Error::new(group.span(), "expected the kernel's body `{ .. }`"));
        }
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the kernel's body"));
        }
        let body: Block = syn::parse2(TokenTree::Group(group).into_token_stream())?;
        Ok(Signature { attrs, vis, ident, generics, params, body })
    };
    parser.parse2(item)
}

/// Splits the parameter list at top-level commas (commas inside `<..>` do
/// not count: `Tensor<f16, M, K>` is one parameter) and parses each.
fn parse_params(tokens: TokenStream, generics: &[GenericParam], errors: &mut Errors) -> Vec<ParamDecl> {
    let mut params = Vec::new();
    let mut current: Vec<TokenTree> = Vec::new();
    let mut depth = 0i32;
    let flush = |current: &mut Vec<TokenTree>, errors: &mut Errors, params: &mut Vec<ParamDecl>| {
        if !current.is_empty() {
            let ts: TokenStream = current.drain(..).collect();
            if let Some(p) = parse_param(ts, generics, errors) {
                params.push(p);
            }
        }
    };
    for tt in tokens {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
            TokenTree::Punct(p) if p.as_char() == '>' && depth > 0 => depth -= 1,
            TokenTree::Punct(p) if p.as_char() == ',' && depth == 0 => {
                flush(&mut current, errors, &mut params);
                continue;
            }
            _ => {}
        }
        current.push(tt);
    }
    flush(&mut current, errors, &mut params);
    params
}

/// `name: Type`. Returns `None` only when there is no name at all.
fn parse_param(tokens: TokenStream, generics: &[GenericParam], errors: &mut Errors) -> Option<ParamDecl> {
    let parser = |input: ParseStream| -> syn::Result<(Ident, TokenStream)> {
        if input.peek(Token![mut]) {
            let m: Token![mut] = input.parse()?;
            return Err(syn::Error::new(
                m.span,
                "kernel parameters cannot be `mut`; a `&mut Tensor` is written through, scalars are read-only",
            ));
        }
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let ty: TokenStream = input.parse()?;
        Ok((name, ty))
    };
    let (name, ty_tokens) = match parser.parse2(tokens.clone()) {
        Ok(x) => x,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    let ty = match parse_param_type(ty_tokens.clone(), generics) {
        Ok(ty) => ty,
        Err(e) => {
            errors.push(e);
            ParamType::Invalid
        }
    };
    Some(ParamDecl { name, ty, ty_tokens })
}

fn unsupported_type(tokens: &TokenStream) -> syn::Error {
    syn::Error::new_spanned(
        tokens,
        "unsupported parameter type: a kernel parameter is `&Tensor<T, D0, D1, ..>` (read-only), `&mut Tensor<T, D0, D1, ..>`, or a scalar `f32`, `i32`, `u32`, `f16` or `bf16`",
    )
}

fn parse_param_type(tokens: TokenStream, generics: &[GenericParam]) -> syn::Result<ParamType> {
    let whole = tokens.clone();
    let parser = |input: ParseStream| -> syn::Result<ParamType> {
        if input.peek(Token![&]) {
            input.parse::<Token![&]>()?;
            if input.peek(syn::Lifetime) {
                let lt: syn::Lifetime = input.parse()?;
                return Err(syn::Error::new_spanned(lt, "kernel parameters take no lifetimes"));
            }
            let mutable = input.parse::<Option<Token![mut]>>()?.is_some();
            let tensor: Ident = input.parse().map_err(|_| unsupported_type(&whole))?;
            if tensor != "Tensor" {
                return Err(unsupported_type(&whole));
            }
            input.parse::<Token![<]>()?;
            let dtype_ident: Ident = input.parse()?;
            let dtype = element_type(&dtype_ident, generics)?;
            // The dims: `Tensor<T, M, K>`; also `Tensor<T, (M, K)>` and `Tensor<T, [N]>`.
            let mut dim_tokens: Vec<TokenTree> = Vec::new();
            while !input.peek(Token![>]) {
                if input.is_empty() {
                    return Err(input.error("expected `>` closing the tensor type"));
                }
                dim_tokens.push(input.parse()?);
            }
            let close: Token![>] = input.parse()?;
            if !input.is_empty() {
                return Err(input.error("unexpected tokens after the tensor type"));
            }
            let dims = parse_dims(dim_tokens, close.span)?;
            Ok(ParamType::Tensor { mutable, dtype, dims })
        } else {
            let ident: Ident = input.parse().map_err(|_| unsupported_type(&whole))?;
            if ident == "Tensor" {
                return Err(syn::Error::new(
                    ident.span(),
                    "a tensor parameter is passed by reference: `&Tensor<T, D0, D1, ..>` or `&mut Tensor<T, D0, D1, ..>`",
                ));
            }
            if generics.iter().any(|g| g.name == ident) && input.is_empty() {
                return Ok(ParamType::Scalar(element_type(&ident, generics)?));
            }
            match DType::from_name(&ident.to_string()) {
                Some(d) if PARAM_DTYPES.contains(&d.name()) && input.is_empty() => {
                    Ok(ParamType::Scalar(Elem::Known(d)))
                }
                _ => Err(unsupported_type(&whole)),
            }
        }
    };
    parser.parse2(tokens)
}

fn element_type(ident: &Ident, generics: &[GenericParam]) -> syn::Result<Elem> {
    match generics.iter().find(|g| g.name == *ident).map(|g| &g.kind) {
        Some(ParamKind::Type(_)) => return Ok(Elem::Param(ident.clone())),
        Some(ParamKind::Const(_)) => {
            return Err(syn::Error::new(
                ident.span(),
                format!("`{ident}` is a const parameter (an integer), not an element type; tensors hold `f16`, `bf16`, `f32`, `i32`, `u32` or a type parameter"),
            ))
        }
        None => {}
    }
    match DType::from_name(&ident.to_string()) {
        Some(d) if PARAM_DTYPES.contains(&d.name()) => Ok(Elem::Known(d)),
        _ => Err(syn::Error::new(
            ident.span(),
            format!("unsupported element type `{ident}`: tensors hold `f16`, `bf16`, `f32`, `i32` or `u32`"),
        )),
    }
}

/// The dims after the element type: `, M, K` or `, (M, K)` or `, [N]`.
/// (`[M, K]` would be nicer, but rustc parses the item before the macro sees
/// it, and `[M, K]` is not a Rust type.)
fn parse_dims(tokens: Vec<TokenTree>, close: proc_macro2::Span) -> syn::Result<Vec<DimDecl>> {
    let stream: TokenStream = tokens.into_iter().collect();
    let usage = "a tensor type is `Tensor<T, D0, D1, ..>` where each dimension is an integer literal, a constant from `consts(..)`, or a name for a dynamic dimension (e.g. `&Tensor<f16, M, K>`)";
    let one_dim = |input: ParseStream| -> syn::Result<DimDecl> {
        if input.peek(syn::LitInt) {
            let lit: syn::LitInt = input.parse()?;
            let v: i64 = lit.base10_parse()?;
            if v <= 0 {
                return Err(syn::Error::new(lit.span(), "a tensor dimension must be positive"));
            }
            Ok(DimDecl::Literal(v))
        } else if input.peek(Ident) {
            Ok(DimDecl::Name(input.parse()?))
        } else {
            Err(input.error(usage))
        }
    };
    let parser = |input: ParseStream| -> syn::Result<Vec<DimDecl>> {
        let mut dims = Vec::new();
        if input.is_empty() {
            return Err(syn::Error::new(close, format!("missing the tensor's shape: {usage}")));
        }
        input.parse::<Token![,]>()?;
        // `(M, K)` or `[N]`: one group holding the whole shape.
        let grouped = input.fork().parse::<TokenTree>().ok().and_then(|tt| match tt {
            TokenTree::Group(g) if matches!(g.delimiter(), Delimiter::Parenthesis | Delimiter::Bracket) => Some(g),
            _ => None,
        });
        if let Some(g) = grouped {
            input.parse::<TokenTree>()?;
            if !input.is_empty() {
                return Err(input.error(usage));
            }
            let inner = |input: ParseStream| -> syn::Result<Vec<DimDecl>> {
                let mut dims = Vec::new();
                while !input.is_empty() {
                    dims.push(one_dim(input)?);
                    if input.is_empty() {
                        break;
                    }
                    input.parse::<Token![,]>()?;
                }
                Ok(dims)
            };
            dims = inner.parse2(g.stream())?;
            if dims.is_empty() {
                return Err(syn::Error::new(g.span(), "a tensor has at least one dimension"));
            }
            return Ok(dims);
        }
        while !input.is_empty() {
            dims.push(one_dim(input)?);
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        if dims.is_empty() {
            return Err(syn::Error::new(close, format!("missing the tensor's shape: {usage}")));
        }
        Ok(dims)
    };
    parser.parse2(stream)
}

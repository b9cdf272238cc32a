//! The kernel's signature: `vis fn name(params) { body }`.
//!
//! `Tensor<f16, [M, K]>` is not Rust type syntax, so `syn::ItemFn` cannot
//! parse a kernel: this module parses the function itself (attributes,
//! visibility, `fn`, name, parameters with its own type parser), then the
//! body with `syn::Block` after rewriting the one non-Rust construct inside
//! it (shape lists in turbofish, `shared::<f16, [BM, BK]>()`; see
//! [`rewrite_turbofish_shapes`]).
//!
//! Expects the item's tokens. Guarantees either a [`Signature`] (parameter
//! errors are pushed to [`Errors`] and the bad parameter is kept as
//! [`ParamType::Invalid`], so the generated `launch` still has the right
//! arity) or a fatal `syn::Error` when the item is not a function at all.

use crate::diag::Errors;
use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Block, Ident, Token, Visibility};
use tile_ir::DType;

pub(crate) struct Signature {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub ident: Ident,
    pub params: Vec<ParamDecl>,
    pub body: Block,
}

pub(crate) struct ParamDecl {
    pub name: Ident,
    pub ty: ParamType,
    /// The parameter's type tokens as written (for spans).
    pub ty_tokens: TokenStream,
}

pub(crate) enum ParamType {
    Tensor { mutable: bool, dtype: DType, dims: Vec<DimDecl> },
    Scalar(DType),
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
        if input.peek(Token![const]) || input.peek(Token![async]) || input.peek(Token![unsafe]) || input.peek(Token![extern]) {
            let tok: TokenTree = input.parse()?;
            return Err(syn::Error::new(tok.span(), format!("a tile kernel cannot be `{tok} fn`; write a plain `fn`")));
        }
        if !input.peek(Token![fn]) {
            return Err(input.error("`#[tile_kernel]` goes on a function: `pub fn name(params) { .. }`"));
        }
        input.parse::<Token![fn]>()?;
        let ident: Ident = input.parse()?;
        if input.peek(Token![<]) {
            return Err(input.error("a tile kernel cannot be generic; element types are written in the parameters (`&Tensor<f16, [M, N]>`)"));
        }
        let content;
        let paren = syn::parenthesized!(content in input);
        let _ = paren;
        let params_tokens: TokenStream = content.parse()?;
        let params = parse_params(params_tokens, errors);
        if input.peek(Token![->]) {
            let arrow: Token![->] = input.parse()?;
            let mut rest = arrow.to_token_stream();
            while !input.is_empty() && !input.peek(syn::token::Brace) {
                rest.extend([input.parse::<TokenTree>()?]);
            }
            errors.spanned(&rest, "a tile kernel returns nothing; write its results into a `&mut Tensor` parameter");
        }
        if input.peek(Token![where]) {
            return Err(input.error("a tile kernel cannot have a `where` clause"));
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
        let mut braced = Group::new(Delimiter::Brace, rewrite_turbofish_shapes(group.stream()));
        braced.set_span(group.span());
        let body: Block = syn::parse2(braced.into_token_stream())?;
        Ok(Signature { attrs, vis, ident, params, body })
    };
    parser.parse2(item)
}

/// Splits the parameter list at top-level commas (commas inside `<..>` do
/// not count: `Tensor<f16, [M]>` is one parameter) and parses each.
fn parse_params(tokens: TokenStream, errors: &mut Errors) -> Vec<ParamDecl> {
    let mut params = Vec::new();
    let mut current: Vec<TokenTree> = Vec::new();
    let mut depth = 0i32;
    let flush = |current: &mut Vec<TokenTree>, errors: &mut Errors, params: &mut Vec<ParamDecl>| {
        if !current.is_empty() {
            let ts: TokenStream = current.drain(..).collect();
            if let Some(p) = parse_param(ts, errors) {
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
fn parse_param(tokens: TokenStream, errors: &mut Errors) -> Option<ParamDecl> {
    let parser = |input: ParseStream| -> syn::Result<(Ident, TokenStream)> {
        if input.peek(Token![mut]) {
            let m: Token![mut] = input.parse()?;
            return Err(syn::Error::new(m.span, "kernel parameters cannot be `mut`; a `&mut Tensor` is written through, scalars are read-only"));
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
    let ty = match parse_param_type(ty_tokens.clone()) {
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
        "unsupported parameter type: a kernel parameter is `&Tensor<T, [d0, d1, ..]>` (read-only), `&mut Tensor<T, [..]>`, or a scalar `f32`, `i32`, `u32`, `f16` or `bf16`",
    )
}

fn parse_param_type(tokens: TokenStream) -> syn::Result<ParamType> {
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
            let dtype = element_type(&dtype_ident)?;
            input.parse::<Token![,]>()?;
            let shape = match input.parse::<TokenTree>() {
                Ok(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket => g,
                Ok(other) => {
                    return Err(syn::Error::new(other.span(), "expected the tensor's shape in brackets, e.g. `Tensor<f16, [M, K]>`"))
                }
                Err(e) => return Err(e),
            };
            let dims = parse_dims(shape)?;
            input.parse::<Token![>]>()?;
            if !input.is_empty() {
                return Err(input.error("unexpected tokens after the tensor type"));
            }
            Ok(ParamType::Tensor { mutable, dtype, dims })
        } else {
            let ident: Ident = input.parse().map_err(|_| unsupported_type(&whole))?;
            if ident == "Tensor" {
                return Err(syn::Error::new(
                    ident.span(),
                    "a tensor parameter is passed by reference: `&Tensor<T, [..]>` or `&mut Tensor<T, [..]>`",
                ));
            }
            match DType::from_name(&ident.to_string()) {
                Some(d) if PARAM_DTYPES.contains(&d.name()) && input.is_empty() => Ok(ParamType::Scalar(d)),
                _ => Err(unsupported_type(&whole)),
            }
        }
    };
    parser.parse2(tokens)
}

fn element_type(ident: &Ident) -> syn::Result<DType> {
    match DType::from_name(&ident.to_string()) {
        Some(d) if PARAM_DTYPES.contains(&d.name()) => Ok(d),
        _ => Err(syn::Error::new(
            ident.span(),
            format!("unsupported element type `{ident}`: tensors hold `f16`, `bf16`, `f32`, `i32` or `u32`"),
        )),
    }
}

fn parse_dims(group: Group) -> syn::Result<Vec<DimDecl>> {
    let parser = |input: ParseStream| -> syn::Result<Vec<DimDecl>> {
        let mut dims = Vec::new();
        while !input.is_empty() {
            if input.peek(syn::LitInt) {
                let lit: syn::LitInt = input.parse()?;
                let v: i64 = lit.base10_parse()?;
                if v <= 0 {
                    return Err(syn::Error::new(lit.span(), "a tensor dimension must be positive"));
                }
                dims.push(DimDecl::Literal(v));
            } else if input.peek(Ident) {
                dims.push(DimDecl::Name(input.parse()?));
            } else {
                return Err(input.error(
                    "a tensor dimension is an integer literal, a constant from `consts(..)`, or a name for a dynamic dimension",
                ));
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        if dims.is_empty() {
            return Err(syn::Error::new(group.span(), "a tensor has at least one dimension"));
        }
        Ok(dims)
    };
    parser.parse2(group.stream())
}

/// Makes the body parseable by syn: inside a turbofish (`name::<..>`), a
/// bracketed shape `[BM, BK]` is not a Rust generic argument, so it is
/// wrapped in braces (`{ [BM, BK] }`, a const-generic block argument) with
/// the bracket's span. The lowering unwraps it again.
pub(crate) fn rewrite_turbofish_shapes(tokens: TokenStream) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(trees.len());
    // Depth of `<` inside a turbofish; 0 outside one.
    let mut angle = 0usize;
    for (i, tt) in trees.iter().enumerate() {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '<' => {
                let after_path_sep = i >= 2
                    && matches!(&trees[i - 1], TokenTree::Punct(q) if q.as_char() == ':')
                    && matches!(&trees[i - 2], TokenTree::Punct(q) if q.as_char() == ':');
                if angle > 0 || after_path_sep {
                    angle += 1;
                }
                out.push(tt.clone());
            }
            TokenTree::Punct(p) if p.as_char() == '>' && angle > 0 => {
                angle -= 1;
                out.push(tt.clone());
            }
            TokenTree::Group(g) if angle == 1 && g.delimiter() == Delimiter::Bracket => {
                let inner = Group::new(Delimiter::Bracket, rewrite_turbofish_shapes(g.stream()));
                let mut inner = inner;
                inner.set_span(g.span());
                let mut wrapped = Group::new(Delimiter::Brace, TokenTree::Group(inner).into());
                wrapped.set_span(g.span());
                out.push(TokenTree::Group(wrapped));
            }
            TokenTree::Group(g) => {
                let mut ng = Group::new(g.delimiter(), rewrite_turbofish_shapes(g.stream()));
                ng.set_span(g.span());
                out.push(TokenTree::Group(ng));
            }
            _ => out.push(tt.clone()),
        }
    }
    out.into_iter().collect()
}

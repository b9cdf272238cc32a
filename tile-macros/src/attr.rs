//! The attribute: `#[tile_kernel(threads = N, consts(NAME = int, ...),
//! cluster = (x, y, z), warp_specialize = true|false, blocks_per_sm = N,
//! dependent_launch = true|false, archs = "sm_90a,..", instances((f16, 128), ..),
//! tune(BM, BN, ..))]`.
//!
//! Expects the attribute's tokens (what is inside the parentheses).
//! Guarantees a [`KernelAttr`] even when there are errors (they are pushed
//! to [`Errors`]; `threads` then defaults so that lowering can go on and find
//! more mistakes), and that `threads`, when accepted, is a multiple of 32 in
//! 32..=1024, every const name is unique, and `cluster`'s literal extents
//! are ≥ 1 with a product of at most [`MAX_CLUSTER_BLOCKS`] (invalid
//! clusters are reported and left at `[1, 1, 1]`). Extents given by a const
//! parameter's name are checked per instance ([`resolve_cluster`]).

use crate::diag::{did_you_mean, Errors};
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Ident, LitInt, Token};

#[derive(Clone)]
pub(crate) struct KernelAttr {
    /// Threads per block; `None` when missing or invalid (already reported),
    /// or given by a const parameter ([`KernelAttr::threads_param`]).
    pub threads: Option<u32>,
    /// `threads = NAME`: a const parameter of a generic kernel gives the
    /// threads of each instance (checked and resolved in `expand.rs`).
    pub threads_param: Option<Ident>,
    /// `instances(..)`: the instances of a generic kernel, as written, and
    /// the `instances` keyword's span.
    pub instances: Option<(Vec<crate::generics::InstanceDecl>, Span)>,
    /// `tune(BM, BN, ..)`: the const parameters the autotuner picks among
    /// the instances (checked in `generics.rs`), and the keyword's span.
    pub tune: Option<(Vec<Ident>, Span)>,
    /// `consts(NAME = value)`, in the order written.
    pub consts: Vec<(Ident, i64)>,
    /// `cluster = (x, y, z)`: thread block cluster shape; `[1, 1, 1]` when
    /// absent or invalid (already reported). An extent given by a name
    /// ([`KernelAttr::cluster_params`]) is 1 here.
    pub cluster: [u32; 3],
    /// The extents of `cluster = (..)` written as a const parameter's name
    /// (`cluster = (CL, 1, 1)`): the axis and the name, resolved and checked
    /// per instance by [`resolve_cluster`].
    pub cluster_params: Vec<ClusterParam>,
    /// `warp_specialize = true|false`; default `true`.
    pub warp_specialize: bool,
    /// `blocks_per_sm = N` (a literal) or `= NAME` (a const parameter),
    /// with the value's span; resolved and checked against the threads in
    /// `lower_instance`.
    pub blocks_per_sm: Option<(BlocksPerSm, Span)>,
    /// `dependent_launch = true|false`; default `false`.
    pub dependent_launch: bool,
    /// `archs = "sm_90a"`: the only targets to embed (of those `TILE_ARCHS`
    /// asks for); `None`: every target of `TILE_ARCHS`.
    pub archs: Option<Vec<tile_ir::Target>>,
}

/// A cluster extent written as a name: its axis (0 to 2) and the name.
pub(crate) type ClusterParam = (usize, Ident);

/// What `blocks_per_sm = ..` says: a literal or a const parameter's name.
#[derive(Clone)]
pub(crate) enum BlocksPerSm {
    Value(i128),
    Param(Ident),
}

// The portable cluster size limit (blocks per cluster) of sm_90: larger
// clusters need an opt-in that not every GPU grants.
use tile_ir::verify::MAX_CLUSTER_BLOCKS;
use tile_ir::Target;

/// The option names (also the editor's: `editor.rs`).
pub(crate) const OPTIONS: [&str; 9] = [
    "threads",
    "consts",
    "cluster",
    "warp_specialize",
    "blocks_per_sm",
    "dependent_launch",
    "archs",
    "instances",
    "tune",
];

pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> KernelAttr {
    let mut attr = KernelAttr {
        threads: None,
        threads_param: None,
        instances: None,
        tune: None,
        consts: Vec::new(),
        cluster: [1, 1, 1],
        cluster_params: Vec::new(),
        warp_specialize: true,
        blocks_per_sm: None,
        dependent_launch: false,
        archs: None,
    };
    // The options whose second appearance is an error saying only that.
    const ONCE: [&str; 5] = ["threads", "cluster", "warp_specialize", "dependent_launch", "archs"];
    let mut seen: Vec<String> = Vec::new();
    let parser = |input: ParseStream| -> syn::Result<()> {
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            let name = key.to_string();
            if ONCE.contains(&name.as_str()) {
                if seen.contains(&name) {
                    errors.at(key.span(), format!("`{name}` is given twice"));
                }
                seen.push(name.clone());
            }
            match name.as_str() {
                "threads" => {
                    input.parse::<Token![=]>()?;
                    if input.peek(Ident) {
                        // A const parameter's name (a generic kernel).
                        attr.threads_param = Some(input.parse()?);
                    } else {
                        let lit: LitInt = input.parse()?;
                        attr.threads = check_threads(&lit, errors);
                    }
                }
                "instances" => {
                    if attr.instances.is_some() {
                        errors.at(key.span(), "`instances` is given twice; list every instance in one `instances(..)`");
                    }
                    let content;
                    syn::parenthesized!(content in input);
                    let list = crate::generics::parse_instance_list(&content)?;
                    attr.instances = Some((list, key.span()));
                }
                "tune" => {
                    if attr.tune.is_some() {
                        errors.at(key.span(), "`tune` is given twice; name every tuned parameter in one `tune(..)`");
                    }
                    let content;
                    syn::parenthesized!(content in input);
                    let names = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
                    attr.tune = Some((names.into_iter().collect(), key.span()));
                }
                "consts" => {
                    let content;
                    syn::parenthesized!(content in input);
                    while !content.is_empty() {
                        let name: Ident = content.parse()?;
                        content.parse::<Token![=]>()?;
                        let negative = content.parse::<Option<Token![-]>>()?.is_some();
                        let lit: LitInt = content.parse()?;
                        match lit.base10_parse::<i64>() {
                            Ok(v) => {
                                if attr.consts.iter().any(|(n, _)| *n == name) {
                                    errors.at(name.span(), format!("the constant `{name}` is defined twice"));
                                } else {
                                    attr.consts.push((name, if negative { -v } else { v }));
                                }
                            }
                            Err(e) => {
                                errors.push(e);
                            }
                        }
                        if content.is_empty() {
                            break;
                        }
                        content.parse::<Token![,]>()?;
                    }
                }
                "cluster" => {
                    input.parse::<Token![=]>()?;
                    if let Some((cluster, params)) = parse_cluster(input, errors)? {
                        attr.cluster = cluster;
                        attr.cluster_params = params;
                    }
                }
                "warp_specialize" => {
                    let usage = "`warp_specialize` takes `true` (the default: on sm_90a, pipelined loops may get a TMA producer warpgroup) or `false`";
                    if let Some(b) = parse_bool(input, errors, usage)? {
                        attr.warp_specialize = b;
                    }
                }
                "dependent_launch" => {
                    let usage = "`dependent_launch` takes `true` (launched as a programmatic dependent of the kernel before it on the stream, waiting for it at its start) or `false` (the default)";
                    if let Some(b) = parse_bool(input, errors, usage)? {
                        attr.dependent_launch = b;
                    }
                }
                "blocks_per_sm" => {
                    if attr.blocks_per_sm.is_some() {
                        errors.at(key.span(), "`blocks_per_sm` is given twice");
                    }
                    input.parse::<Token![=]>()?;
                    if input.peek(Ident) {
                        let name: Ident = input.parse()?;
                        let span = name.span();
                        attr.blocks_per_sm = Some((BlocksPerSm::Param(name), span));
                    } else {
                        let lit: LitInt = input.parse()?;
                        match lit.base10_parse::<u64>() {
                            Ok(v) => attr.blocks_per_sm = Some((BlocksPerSm::Value(v as i128), lit.span())),
                            Err(e) => {
                                errors.push(e);
                            }
                        }
                    }
                }
                "archs" => {
                    input.parse::<Token![=]>()?;
                    let lit: syn::LitStr = input.parse()?;
                    match crate::backend::parse_target_list(&lit.value()) {
                        Ok(list) if !list.is_empty() => attr.archs = Some(list),
                        Ok(_) => {
                            errors.at(
                                lit.span(),
                                format!(
                                    "`archs` names no target; write e.g. `archs = \"sm_90a\"` (the known targets are {})",
                                    Target::known_names()
                                ),
                            );
                        }
                        Err(name) => {
                            errors.at(
                                lit.span(),
                                format!(
                                    "`archs` names an unknown target `{name}`; the known targets are {}",
                                    Target::known_names()
                                ),
                            );
                        }
                    }
                }
                other => {
                    errors.at(
                        key.span(),
                        format!(
                            "unknown option `{other}` in `#[tile_kernel(..)]`{}; expected `threads = N`, `consts(NAME = value, ..)`, `cluster = (x, y, z)`, `warp_specialize = true|false`, `blocks_per_sm = N`, `dependent_launch = true|false`, `archs = \"sm_90a,..\"`, `instances((..), ..)` or `tune(NAME, ..)`",
                            did_you_mean(other, OPTIONS)
                        ),
                    );
                    // Skip this option's value so that the next one parses.
                    while !input.is_empty() && !input.peek(Token![,]) {
                        input.parse::<proc_macro2::TokenTree>()?;
                    }
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(())
    };
    if let Err(e) = parser.parse2(tokens) {
        errors.push(e);
        return attr;
    }
    if !seen.iter().any(|n| n == "threads") {
        errors.at(
            Span::call_site(),
            "missing `threads = N` in `#[tile_kernel(..)]`: the number of threads per block (a multiple of 32, at most 1024), e.g. `#[tile_kernel(threads = 128)]`",
        );
    }
    attr
}

/// `= true|false`: the literal, or `None` with `usage` reported at the value.
fn parse_bool(input: ParseStream, errors: &mut Errors, usage: &str) -> syn::Result<Option<bool>> {
    input.parse::<Token![=]>()?;
    let value: syn::Expr = input.parse()?;
    match &value {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Bool(b), .. }) => Ok(Some(b.value)),
        _ => {
            errors.spanned(&value, usage);
            Ok(None)
        }
    }
}

/// `(x)`, `(x, y)` or `(x, y, z)` (or a bare `x`); missing extents are 1.
/// Each extent is a positive integer literal or a name (a const parameter,
/// resolved per instance: [`resolve_cluster`]; returned with its axis, its
/// extent 1 in the array). The literals' product is checked here when there
/// is no name, else per instance. `Ok(None)` when the value was wrong
/// (reported); `Err` only when the tokens cannot be skipped.
fn parse_cluster(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<([u32; 3], Vec<ClusterParam>)>> {
    const USAGE: &str = "`cluster = (x, y, z)`: 1 to 3 positive integers, the blocks of a thread block cluster along each grid axis, e.g. `cluster = (2, 1, 1)`";
    let group = if input.peek(syn::token::Paren) {
        let group: proc_macro2::Group = input.parse()?;
        group
    } else {
        let value: syn::Expr = input.parse()?;
        match &value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(_), .. }) => {
                proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, value.to_token_stream())
            }
            syn::Expr::Path(path) if path.path.get_ident().is_some() => {
                proc_macro2::Group::new(proc_macro2::Delimiter::Parenthesis, value.to_token_stream())
            }
            _ => {
                errors.spanned(&value, format!("expected {USAGE}"));
                return Ok(None);
            }
        }
    };
    let items = match Punctuated::<syn::Expr, Token![,]>::parse_terminated.parse2(group.stream()) {
        Ok(items) => items,
        Err(e) => {
            errors.push(e);
            return Ok(None);
        }
    };
    if items.is_empty() {
        errors.spanned(&group, format!("empty cluster; expected {USAGE}"));
        return Ok(None);
    }
    let mut cluster = [1u32; 3];
    let mut params: Vec<ClusterParam> = Vec::new();
    let mut ok = true;
    for (axis, item) in items.iter().enumerate() {
        if axis == 3 {
            errors.spanned(item, "a cluster has at most 3 extents (x, y, z)");
            ok = false;
            break;
        }
        let lit = match item {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(lit), .. }) => lit,
            syn::Expr::Path(path) if path.path.get_ident().is_some() => {
                // A const parameter's name (checked per instance).
                if let Some(name) = path.path.get_ident() {
                    params.push((axis, name.clone()));
                }
                continue;
            }
            _ => {
                errors.spanned(item, format!("a cluster extent must be a positive integer literal; expected {USAGE}"));
                ok = false;
                continue;
            }
        };
        match lit.base10_parse::<u32>() {
            Ok(0) => {
                errors.at(
                    lit.span(),
                    "a cluster extent of 0: every extent is at least 1 (1 leaves that axis unclustered)",
                );
                ok = false;
            }
            Ok(v) => cluster[axis] = v,
            Err(_) => {
                errors.at(lit.span(), format!("the cluster extent `{lit}` is not a small positive integer"));
                ok = false;
            }
        }
    }
    if !ok {
        return Ok(None);
    }
    let blocks: u128 = cluster.iter().map(|&c| c as u128).product();
    if params.is_empty() && blocks > MAX_CLUSTER_BLOCKS as u128 {
        errors.spanned(
            &group,
            format!(
                "`cluster = ({}, {}, {})` has {blocks} blocks; the portable limit is {MAX_CLUSTER_BLOCKS} blocks per cluster",
                cluster[0], cluster[1], cluster[2]
            ),
        );
        return Ok(None);
    }
    Ok(Some((cluster, params)))
}

/// One instance's cluster: [`KernelAttr::cluster`] with the extents that
/// name a const parameter ([`KernelAttr::cluster_params`]) set to its value
/// in `params` (the instance's const parameters, by name; empty for a plain
/// kernel), each checked as a literal is (at least 1, a `u32`, a product of
/// at most [`MAX_CLUSTER_BLOCKS`]). A mistake is reported at the name, with
/// the value, and gives `[1, 1, 1]`.
pub(crate) fn resolve_cluster(
    attr: &KernelAttr,
    params: &std::collections::HashMap<String, i64>,
    errors: &mut Errors,
) -> [u32; 3] {
    if attr.cluster_params.is_empty() {
        return attr.cluster;
    }
    // The cluster as written: `(CL, 1, 1)`.
    let written: Vec<String> = (0..3)
        .map(|axis| match attr.cluster_params.iter().find(|(a, _)| *a == axis) {
            Some((_, name)) => name.to_string(),
            None => attr.cluster[axis].to_string(),
        })
        .collect();
    let written = format!("({})", written.join(", "));
    let mut cluster = attr.cluster;
    let mut ok = true;
    for (axis, name) in &attr.cluster_params {
        let Some(&v) = params.get(&name.to_string()) else {
            errors.at(
                name.span(),
                format!("`cluster = {written}`: `{name}` is not a const parameter of the kernel; a cluster extent is an integer literal or the name of a const parameter (`fn k<const CLUSTER: usize>(..)`)"),
            );
            ok = false;
            continue;
        };
        match u32::try_from(v) {
            Ok(0) => {
                errors.at(
                    name.span(),
                    format!("`cluster = {written}` with `{name} = 0`: every cluster extent is at least 1 (1 leaves that axis unclustered)"),
                );
                ok = false;
            }
            Ok(v) => cluster[*axis] = v,
            Err(_) => {
                errors.at(
                    name.span(),
                    format!("`cluster = {written}` with `{name} = {v}`: a cluster extent is a small positive integer"),
                );
                ok = false;
            }
        }
    }
    if !ok {
        return [1, 1, 1];
    }
    let blocks: u128 = cluster.iter().map(|&c| c as u128).product();
    if blocks > MAX_CLUSTER_BLOCKS as u128 {
        let values: Vec<String> =
            attr.cluster_params.iter().map(|(axis, name)| format!("`{name} = {}`", cluster[*axis])).collect();
        let at = attr.cluster_params[0].1.span();
        errors.at(
            at,
            format!(
                "`cluster = {written}` with {} is `({}, {}, {})`, {blocks} blocks; the portable limit is {MAX_CLUSTER_BLOCKS} blocks per cluster",
                values.join(", "),
                cluster[0],
                cluster[1],
                cluster[2]
            ),
        );
        return [1, 1, 1];
    }
    cluster
}

fn check_threads(lit: &LitInt, errors: &mut Errors) -> Option<u32> {
    let value = match lit.base10_parse::<u64>() {
        Ok(v) => v,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    threads_value(value as i128, lit.span(), errors)
}

/// `value` as threads per block, or an error at `span`.
pub(crate) fn threads_value(value: i128, span: Span, errors: &mut Errors) -> Option<u32> {
    if !u64::try_from(value).is_ok_and(tile_ir::verify::rules::threads_ok) {
        errors.at(
            span,
            format!("`threads = {value}`: the threads per block must be a multiple of 32 (the warp size) between 32 and 1024"),
        );
        return None;
    }
    Some(value as u32)
}

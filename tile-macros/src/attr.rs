//! The attribute: `#[tile_kernel(threads = N, consts(NAME = int, ...))]`.
//!
//! Expects the attribute's tokens (what is inside the parentheses).
//! Guarantees a [`KernelAttr`] even when there are errors (they are pushed
//! to [`Errors`]; `threads` then defaults so that lowering can go on and find
//! more mistakes), and that `threads`, when accepted, is a multiple of 32 in
//! 32..=1024 and every const name is unique.

use crate::diag::{did_you_mean, Errors};
use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::{Ident, LitInt, Token};

pub(crate) struct KernelAttr {
    /// Threads per block; `None` when missing or invalid (already reported).
    pub threads: Option<u32>,
    /// `consts(NAME = value)`, in the order written.
    pub consts: Vec<(Ident, i64)>,
}

const OPTIONS: [&str; 2] = ["threads", "consts"];

pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> KernelAttr {
    let mut attr = KernelAttr {
        threads: None,
        consts: Vec::new(),
    };
    let mut threads_seen = false;
    let parser = |input: ParseStream| -> syn::Result<()> {
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            match key.to_string().as_str() {
                "threads" => {
                    if threads_seen {
                        errors.at(key.span(), "`threads` is given twice");
                    }
                    threads_seen = true;
                    input.parse::<Token![=]>()?;
                    let lit: LitInt = input.parse()?;
                    attr.threads = check_threads(&lit, errors);
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
                                    errors.at(
                                        name.span(),
                                        format!("the constant `{name}` is defined twice"),
                                    );
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
                other => {
                    errors.at(
                        key.span(),
                        format!(
                            "unknown option `{other}` in `#[tile_kernel(..)]`{}; expected `threads = N` or `consts(NAME = value, ..)`",
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
    if !threads_seen {
        errors.at(
            Span::call_site(),
            "missing `threads = N` in `#[tile_kernel(..)]`: the number of threads per block (a multiple of 32, at most 1024), e.g. `#[tile_kernel(threads = 128)]`",
        );
    }
    attr
}

fn check_threads(lit: &LitInt, errors: &mut Errors) -> Option<u32> {
    let value = match lit.base10_parse::<u64>() {
        Ok(v) => v,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    if value == 0 || value % 32 != 0 || value > 1024 {
        errors.at(
            lit.span(),
            format!("`threads = {value}`: the threads per block must be a multiple of 32 (the warp size) between 32 and 1024"),
        );
        return None;
    }
    Some(value as u32)
}

//! What rust-analyzer sees of a kernel: under `cfg(rust_analyzer)` only, a
//! `use` of the `tile::dsl` item behind each language name the kernel
//! writes, carrying that name's span, so that hover and "go to definition"
//! on `copy`, `gemm`, `parallel`, `Tensor`, `threads`, .. inside a kernel
//! reach their documented items. Nothing here reaches rustc's output
//! otherwise (the generated module and PTX do not change).
//!
//! Expects the attribute's and the item's tokens (parsed or not: this walks
//! tokens, so it works on kernels with errors too). Guarantees code that
//! compiles under `--cfg rust_analyzer` whatever the kernel holds: only
//! names of items that exist in `tile::dsl`, imported `as _` (so repeats and
//! user names never clash), and non-generic methods referenced as values.

use proc_macro2::{Delimiter, Ident, TokenStream, TokenTree};
use quote::{quote, quote_spanned};

/// The functions of `tile::dsl`: recognized when called (`name(` or
/// `name::<`).
const FUNCTIONS: &[&str] = &[
    "grid",
    "use_swizzle",
    "shared",
    "fragment",
    "local",
    "annotate_layout",
    "row_major",
    "padded",
    "swizzle",
    "parallel",
    "pipelined",
    "copy",
    "fill",
    "clear",
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "atomic_add",
    "barrier",
    "print",
    "gemm",
    "cdiv",
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
];

/// Types and values of `tile::dsl`, recognized anywhere.
const NAMES: &[&str] = &["Tensor", "WarpPolicy", "FullRow", "FullCol", "Square", "Warpgroup"];

/// Non-generic methods, recognized after a `.`: (method, its type).
const METHODS: &[(&str, &str)] =
    &[("keep", "ReduceStmt"), ("clear", "GemmStmt"), ("policy", "GemmStmt"), ("evict_first", "CopyStmt")];

// The attribute's options (`tile::dsl::attributes`).
use crate::attr::OPTIONS;

pub(crate) fn editor_uses(attr: &TokenStream, item: &TokenStream) -> TokenStream {
    let mut uses = Vec::new();
    let mut methods = Vec::new();
    for tt in attr.clone() {
        if let TokenTree::Ident(i) = &tt {
            if OPTIONS.iter().any(|o| i == o) {
                uses.push(quote_spanned!(i.span()=> use ::tile::dsl::attributes::#i as _;));
            }
        }
    }
    walk(item.clone(), &mut uses, &mut methods);
    if uses.is_empty() && methods.is_empty() {
        return TokenStream::new();
    }
    // `rust_analyzer` is not a cfg rustc expects: allowed on an item around
    // the one it removes.
    quote! {
        #[allow(unexpected_cfgs)]
        const _: () = {
            #[cfg(rust_analyzer)]
            #[allow(unused_imports, dead_code, non_snake_case)]
            const _: () = {
                #(#uses)*
                fn __tile_dsl_methods() {
                    #(#methods)*
                }
            };
        };
    }
}

fn walk(tokens: TokenStream, uses: &mut Vec<TokenStream>, methods: &mut Vec<TokenStream>) {
    let toks: Vec<TokenTree> = tokens.into_iter().collect();
    for (k, tt) in toks.iter().enumerate() {
        match tt {
            TokenTree::Group(g) => walk(g.stream(), uses, methods),
            TokenTree::Ident(i) => {
                let name = i.to_string();
                let next = toks.get(k + 1);
                let after_dot = k > 0 && matches!(&toks[k - 1], TokenTree::Punct(p) if p.as_char() == '.');
                let called = match next {
                    Some(TokenTree::Group(g)) => g.delimiter() == Delimiter::Parenthesis,
                    Some(TokenTree::Punct(p)) => p.as_char() == ':',
                    _ => false,
                };
                if after_dot {
                    // `s.view([..])`: a method of the generic `Shared<T>`.
                    if name == "view" && called {
                        methods.push(quote_spanned!(i.span()=> let _ = ::tile::dsl::Shared::<f32>::#i;));
                    }
                    if let Some((_, ty)) = METHODS.iter().find(|(m, _)| *m == name) {
                        if called {
                            let ty = Ident::new(ty, i.span());
                            methods.push(quote_spanned!(i.span()=> let _ = ::tile::dsl::#ty::#i;));
                        }
                    }
                } else if (called && FUNCTIONS.contains(&name.as_str())) || NAMES.contains(&name.as_str()) {
                    uses.push(quote_spanned!(i.span()=> use ::tile::dsl::#i as _;));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_the_names_the_kernel_calls() {
        let attr: TokenStream = syn::parse_str("threads = 128, consts(B = 4)").unwrap();
        let item: TokenStream = syn::parse_str(
            "fn k(x: &Tensor<f32, N>) { let bx = grid(N); let mut t = fragment::<f32, B>(); \
             let max = 1; reduce_max(&t, &mut m, 0).keep(); gemm(&a, &b, &mut c).clear(); x.fill(1); \
             let v = s.view([.., 4..]); }",
        )
        .unwrap();
        let out = editor_uses(&attr, &item).to_string();
        for want in [
            "use :: tile :: dsl :: attributes :: threads as _",
            "use :: tile :: dsl :: attributes :: consts as _",
            "use :: tile :: dsl :: Tensor as _",
            "use :: tile :: dsl :: grid as _",
            "use :: tile :: dsl :: fragment as _",
            "use :: tile :: dsl :: reduce_max as _",
            "let _ = :: tile :: dsl :: ReduceStmt :: keep",
            "let _ = :: tile :: dsl :: GemmStmt :: clear",
            "let _ = :: tile :: dsl :: Shared :: < f32 > :: view",
            "# [cfg (rust_analyzer)]",
        ] {
            assert!(out.contains(want), "missing {want}: {out}");
        }
        // A variable named like a function, and a method that is not one of
        // the language's, are left alone.
        assert!(!out.contains("dsl :: max"), "{out}");
        assert!(!out.contains(":: fill"), "{out}");
    }
}

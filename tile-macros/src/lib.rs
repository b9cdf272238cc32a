//! `#[tile_kernel]`: a thin frontend over `tile-ir`.
//!
//! The pipeline, one module per step (as in serde_derive / thiserror):
//! [`attr`] parses the attribute, [`sig`] the function (its own parser:
//! `&Tensor<f16, M, K>` is DSL, not a Rust type), [`lower`] turns the body
//! into a `tile_ir::Kernel`, [`backend`] verifies and compiles it for each
//! target, and [`expand`] quotes the `mod name { META; fn launch }` that the
//! runtime uses. Every rejection is a `syn::Error` at a span; all errors of a
//! kernel are reported together; the macro never panics.
use proc_macro::TokenStream;

mod attr;
mod backend;
mod diag;
mod expand;
mod lower;
mod sig;

/// Compiles a kernel function to PTX at build time and replaces it with a
/// module holding its metadata (`META`) and a typed `launch` function.
///
/// See the crate `tile` for the language.
#[proc_macro_attribute]
pub fn tile_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::tile_kernel(attr.into(), item.into()).into()
}

#[cfg(test)]
mod tests;

//! `#[tile_kernel]`: a thin frontend over `tile-ir`.
use proc_macro::TokenStream;

#[proc_macro_attribute]
pub fn tile_kernel(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}

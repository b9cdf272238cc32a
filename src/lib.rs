//! tile: a tile-level GPU kernel language for Rust.
//!
//! Write a kernel as a Rust function under [`tile_kernel`]; `cargo build`
//! compiles it to PTX and generates a typed `launch` wrapper.

pub use tile_macros::tile_kernel;

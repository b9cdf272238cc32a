//! Test support shared by the tests of several crates (`tile-ir`,
//! `tile-runtime`, the `tile` facade): the test kernels in Tile IR text form,
//! each written once, and the input generator.
//!
//! Depends on nothing: the kernels are plain strings, which each test parses
//! with the `tile_ir` it tests (`tile_ir::print::parse_kernel`), so this
//! crate never needs to follow the compiler's internals. Guarantees that
//! each text is, byte for byte, the one its tests compiled before it moved
//! here: a change to a text changes the PTX of every test that uses it
//! (`scripts/ptx-snapshot.sh` shows it).
//!
//! - [`matmul`]: the tiled tensor-core matmul (`c = op(a) · op(b)`), as a
//!   configuration ([`Matmul`]) that prints the kernel, and the named
//!   configurations the tests share.
//! - [`attention`]: the FlashAttention inner loop ([`ATTENTION`]) and its
//!   variations in head dimension, block rows and element type.
//! - [`paged`]: paged attention ([`PAGED_ATTENTION`]), its tiles' origin
//!   read from a block table.
//! - [`rng`]: the xorshift generator ([`Rng`]) the tests draw inputs from.

#![warn(missing_docs)]

pub mod attention;
pub mod matmul;
pub mod paged;
pub mod rng;

pub use attention::{
    attention_4d_sized, attention_4d_text, attention_causal_text, attention_text, Layout4d, ATTENTION,
};
pub use matmul::{Matmul, GEMM_TN_BF16, MATMUL, MATMUL_128X256};
pub use paged::{paged_attention_text, PAGED_ATTENTION};
pub use rng::Rng;

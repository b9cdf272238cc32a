//! Paged attention (issue 13, item 4) in the CPU interpreter: the K and V
//! tiles' origins read from a block table whose pages are out of order,
//! ragged per-batch lengths (loops of 0, 1, 2 and 5 pages, partial last
//! pages), against the f64 reference of `tests/kernels/paged.rs`; and the
//! Tile IR the macro embeds is the text the compiler's tests use
//! (`tile_testkit::PAGED_ATTENTION`, `tile_testkit::paged_attention_text`).
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/paged.rs"]
mod paged;
use tile::prelude::*;

#[test]
fn paged_attention_against_the_reference() {
    let dev = Device::interpreter();
    for two in [false, true] {
        // Trip counts 0, 1, 2 and 5 (lengths 0, 1..64, 65..128, 257..320).
        paged::paged_attention_check(&dev, two, 5, &[0, 37, 128, 300], 11).unwrap();
        paged::paged_attention_check(&dev, two, 140, &[64, 65], 12).unwrap();
        // An empty batch alone: zeros.
        let out = paged::paged_attention_check(&dev, two, 3, &[0], 13).unwrap();
        assert!(out.iter().all(|x| x.to_f32() == 0.0));
    }
}

#[test]
fn embedded_ir_is_the_shared_text() {
    let printed = |ir: &str| {
        let kernel: tile::ir::Kernel = serde_json::from_str(ir).expect("embedded Tile IR parses");
        tile::ir::print::print_kernel(&kernel).trim_end().to_string()
    };
    assert_eq!(printed(paged::paged_attention::meta::<64, 128>().ir), tile_testkit::PAGED_ATTENTION.trim_end());
    let two = printed(paged::paged_attention::meta::<128, 256>().ir);
    assert_eq!(two, tile_testkit::paged_attention_text(128, 256).trim_end());
}

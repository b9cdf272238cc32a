//! Tiles of N-dimensional tensors with squeezed dims (issue 9, item 1) in the
//! CPU interpreter at awkward sizes, against CPU references: `[b, s, h, d]`
//! ⇄ `[b, h, s, d]`, strided columns, `[b, h, s]` row results, and
//! FlashAttention forward over 4-D tensors in both layouts.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/ndtile.rs"]
mod ndtile;
use ndtile::Layout;
use tile::prelude::*;

fn dev() -> Device {
    Device::interpreter()
}

#[test]
fn bshd_to_bhsd() {
    for (b, s, h, hd) in [(2, 45, 3, 64), (1, 1, 1, 1), (3, 70, 2, 40), (1, 33, 5, 100)] {
        ndtile::bshd_to_bhsd_check(&dev(), b, s, h, hd, (b * s * h + hd) as u64).unwrap();
    }
}

#[test]
fn strided_columns() {
    for (m, n) in [(200, 7), (1, 1), (128, 3), (129, 2), (5, 33)] {
        ndtile::columns_check(&dev(), m, n, (m + n) as u64).unwrap();
    }
}

#[test]
fn row_sums_into_bhs() {
    for (b, h, s) in [(2, 3, 100), (1, 1, 1), (3, 2, 64), (1, 4, 129)] {
        ndtile::row_sums_check(&dev(), b, h, s, (b + h + s) as u64).unwrap();
    }
}

#[test]
fn attention_bhsd() {
    for (b, h, sq, sk) in [(2, 2, 100, 77), (1, 1, 1, 1), (1, 3, 64, 130)] {
        ndtile::attention_check(&dev(), Layout::Bhsd, b, h, sq, sk, (sq * sk + h) as u64).unwrap();
    }
}

#[test]
fn attention_bshd() {
    for (b, h, sq, sk) in [(2, 2, 100, 77), (1, 1, 1, 1), (1, 3, 64, 130)] {
        ndtile::attention_check(&dev(), Layout::Bshd, b, h, sq, sk, (sq * sk + 7 * h) as u64).unwrap();
    }
}

/// The Tile IR the macro embeds for the 4-D attention kernels, printed, is
/// the text the compiler's simulator and ptxas tests use
/// (`tile_testkit::attention_4d_text`).
#[test]
fn embedded_ir_is_the_shared_text() {
    let printed = |ir: &str| {
        let kernel: tile::ir::Kernel = serde_json::from_str(ir).expect("embedded Tile IR parses");
        tile::ir::print::print_kernel(&kernel).trim_end().to_string()
    };
    let (bhsd, bshd) = (
        printed(ndtile::attention_bhsd::meta::<64, 64, 64, 128>().ir),
        printed(ndtile::attention_bshd::meta::<64, 64, 64, 128>().ir),
    );
    if let Ok(dir) = std::env::var("NDTILE_PRINT") {
        std::fs::write(format!("{dir}/bhsd.tile"), &bhsd).unwrap();
        std::fs::write(format!("{dir}/bshd.tile"), &bshd).unwrap();
    }
    assert_eq!(bhsd, tile_testkit::attention_4d_text(tile_testkit::Layout4d::Bhsd));
    assert_eq!(bshd, tile_testkit::attention_4d_text(tile_testkit::Layout4d::Bshd));
    let sized = |l, bn| tile_testkit::attention_4d_sized(l, 128, 128, bn, 256);
    assert_eq!(
        printed(ndtile::attention_bhsd::meta::<128, 64, 128, 256>().ir),
        sized(tile_testkit::Layout4d::Bhsd, 64)
    );
    assert_eq!(
        printed(ndtile::attention_bshd::meta::<128, 128, 128, 256>().ir),
        sized(tile_testkit::Layout4d::Bshd, 128)
    );
}

#[test]
fn attention_d128_both_layouts() {
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for (b, h, sq, sk) in [(1, 2, 130, 77), (1, 1, 1, 1)] {
            ndtile::attention_check_d128(&dev(), layout, b, h, sq, sk, (sq + sk + h) as u64)
                .unwrap_or_else(|e| panic!("{layout:?} {sq}x{sk}: {e}"));
        }
    }
}

#[test]
fn pipelined_sum_any_trip_count() {
    for (m, n, extra) in [(70, 0, 64), (70, 1, 0), (64, 2, 4), (130, 3, 12), (1, 5, 0)] {
        ndtile::pipelined_sum_check(&dev(), m, n, extra, (m + n) as u64).unwrap();
    }
}

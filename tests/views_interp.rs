//! Kernels with sub-views of shared buffers (`tests/kernels/views.rs`) in
//! the CPU interpreter, against f64 references: ragged key counts (one
//! partial block, several), head counts off the 64-row block.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/views.rs"]
mod views;
use tile::prelude::*;

#[test]
fn mla_with_views_in_the_interpreter() {
    let dev = Device::interpreter();
    for (b, h, s) in [(1, 64, 70), (2, 5, 1), (1, 65, 130)] {
        views::check_mla_views(&dev, b, h, s, (b * 1000 + h * 10 + s) as u64).unwrap();
    }
}

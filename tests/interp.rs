//! Every example and test kernel, run in the CPU interpreter at awkward sizes
//! (not multiples of the tile), against a CPU reference.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mod.rs"]
mod kernels;
#[path = "../examples/kernels"]
mod examples {
    pub mod softmax;
    pub mod vector_add;
}
use kernels::checks;
use tile::prelude::*;

fn dev() -> Device {
    Device::interpreter()
}

#[test]
fn vector_add() {
    for n in [1, 1000, 4097, 70_001] {
        checks::vector_add(&dev(), n, n as u64).unwrap();
    }
}

#[test]
fn softmax_single_tile() {
    for (m, n) in [(1, 1), (3, 1000), (7, 4096), (2, 33)] {
        checks::softmax(&dev(), m, n, 3).unwrap();
    }
}

#[test]
fn softmax_long_rows() {
    checks::softmax(&dev(), 2, 9001, 5).unwrap();
}

#[test]
fn scale_shift() {
    checks::scale_shift(&dev(), 37, 101, 1).unwrap();
}

#[test]
fn col_sum() {
    checks::col_sum(&dev(), 77, 300, 2).unwrap();
}

#[test]
fn transpose() {
    checks::transpose(&dev(), 45, 70, 3).unwrap();
}

#[test]
fn row_range() {
    checks::row_range(&dev(), 9, 700, 4).unwrap();
}

#[test]
fn histogram() {
    checks::histogram(&dev(), 3001, 37, 5).unwrap();
}

#[test]
fn scalar_walk() {
    checks::scalar_walk(&dev(), 5, 17).unwrap();
}

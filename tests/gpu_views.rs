//! Kernels with sub-views of shared buffers (`tests/kernels/views.rs`) on
//! the GPU against the same f64 references as the interpreter: on sm_90a
//! the variants a launch picks (TMA into the `[64, 192]` KV stages, views
//! read by the gemms), ragged key counts and head counts.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/views.rs"]
mod views;
use tile::prelude::*;

#[test]
fn mla_with_views_on_the_gpu() {
    let dev = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    for (b, h, s) in [(1, 64, 70), (2, 5, 1), (3, 128, 1000), (1, 65, 8191)] {
        views::check_mla_views(&dev, b, h, s, (b * 1000 + h * 10 + s) as u64).unwrap();
    }
}

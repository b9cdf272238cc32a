//! The debug print on the GPU (feature `gpu`), through `vprintf`.
//!
//! `cargo test --release --features gpu --test gpu_debug -- --nocapture`:
//! the process's stdout must show these five lines, in any order (the
//! driver prints them when the launch is synchronized):
//!
//! ```text
//! x[0, 3] = 3.000000
//! x[1, 3] = 43.000000
//! x[2, 3] = 83.000000
//! x[3, 3] = 123.000000
//! block (1, 0) of 2 x 2, scale 0.500000
//! ```
#![cfg(feature = "gpu")]
#[path = "kernels/debug.rs"]
mod debug;
use tile::prelude::*;

#[test]
fn print_demo_on_gpu() {
    let dev = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    println!("--- expected, in any order:\n{}--- printed by the kernel:", debug::PRINT_DEMO_LINES);
    debug::run_print_demo(&dev).unwrap();
    println!("--- end");
}

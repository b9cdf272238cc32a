//! The debug print in the interpreter: the lines of a DSL kernel with
//! block-filtered prints outside and inside a parallel loop, captured.
#[path = "kernels/debug.rs"]
mod debug;
use tile::prelude::*;

#[test]
fn print_demo_lines() {
    let (r, out) = tile::capture_prints(|| debug::run_print_demo(&Device::interpreter()));
    r.unwrap();
    assert_eq!(out, debug::PRINT_DEMO_LINES);
}

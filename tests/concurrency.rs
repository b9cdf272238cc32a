//! Launches from several threads on streams of their own, in the CPU
//! interpreter (`kernels/concurrent.rs`; the GPU version with 8 threads × 100
//! launches is `gpu_concurrency.rs`). Sizes small enough for CI.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/concurrent.rs"]
mod concurrent;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
    pub mod vector_add;
}

#[test]
fn threads_on_streams_of_their_own_get_their_own_results() {
    let plan = concurrent::Plan { threads: 8, iters: 2, m: 9, k: 40, n_tma: 24, n_general: 21, len: 3001 };
    concurrent::run(&tile::Device::interpreter(), &plan);
}

//! MLA decode's gemm shapes (`tests/kernels/mla_split.rs`) on the GPU
//! (feature `gpu`) against f64 references and against the interpreter: on
//! an H200 the sm_90a variants split both gemms' columns over the two
//! warpgroups with wgmma (the warp-specialized loop when the tensors are
//! TMA-addressable, as here; `TILE_SKIP_SCHEDULES=warp_specialized_loop,tma_copy`
//! runs the cp.async variant instead).
//!
//! `cargo test --release --features gpu --test gpu_mla_split`.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mla_split.rs"]
mod mla_split;
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn agree<T: Element>(a: &[T], b: &[T], tol: f64) {
    let a: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let b: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
    let err = tile::rel_error(&a, &b);
    assert!(err <= tol, "GPU and interpreter disagree: relative difference {err:.3e} > {tol:.1e}");
}

#[test]
fn mla_split_attention_on_the_gpu() {
    let (g, cpu) = (gpu(), Device::interpreter());
    // Loops of 1, 2, 3 and 16 key blocks, partial last ones, rows off the block.
    for (sq, sk) in [(64, 64), (70, 130), (1, 1), (63, 65), (200, 1000)] {
        let seed = (sq * 1000 + sk) as u64;
        let on_gpu = mla_split::check_mla_split(&g, sq, sk, seed).unwrap();
        agree(&on_gpu, &mla_split::check_mla_split(&cpu, sq, sk, seed).unwrap(), 5e-3);
    }
    let runs: u64 = g.launch_counts(&mla_split::mla_split::META).iter().sum();
    assert!(runs >= 5, "{runs} launches counted");
}

#[test]
fn gemm_with_split_columns_on_the_gpu() {
    let (g, cpu) = (gpu(), Device::interpreter());
    for (m, n, k) in [(64, 512, 32), (70, 520, 50), (1, 3, 1), (300, 1100, 200)] {
        let seed = (m + n + k) as u64;
        let on_gpu = mla_split::check_gemm_split_cols(&g, m, n, k, seed).unwrap();
        agree(&on_gpu, &mla_split::check_gemm_split_cols(&cpu, m, n, k, seed).unwrap(), 1e-4);
    }
}

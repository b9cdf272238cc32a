//! GEMM and FlashAttention-style kernels on the GPU (feature `gpu`) at
//! awkward sizes, against f64 CPU references and against the interpreter's
//! output (like `tests/gpu.rs`), plus the example's kernels against cuBLAS.
//!
//! `cargo test --release --features gpu --test gpu_gemm` on a machine with an
//! NVIDIA GPU; scripts/dist.sh gathers the binary for a GPU machine.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/gemm.rs"]
mod gemm;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
}
use gemm::Res;
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn cpu() -> Device {
    Device::interpreter()
}

/// Runs `check` on the GPU and in the interpreter; both must pass their
/// reference check and agree with each other within `tol` (relative).
fn both<T: Element>(tol: f64, check: impl Fn(&Device) -> Res<Vec<T>>) {
    let on_gpu = check(&gpu()).unwrap();
    let on_cpu = check(&cpu()).unwrap();
    let a: Vec<f64> = on_gpu.iter().map(|x| x.to_f64()).collect();
    let b: Vec<f64> = on_cpu.iter().map(|x| x.to_f64()).collect();
    let err = tile::rel_error(&a, &b);
    assert!(err <= tol, "GPU and interpreter disagree: relative difference {err:.3e} > {tol:.1e}");
}

/// Shapes with M, N and K off the tiles, degenerate ones and a long K; with
/// `TILE_TEST_SMALL` set (`run.sh memcheck` sets it: the sanitizers are slow)
/// only the small ones.
fn shapes() -> &'static [(usize, usize, usize)] {
    const ALL: &[(usize, usize, usize)] =
        &[(1000, 1999, 777), (1, 1, 1), (1, 4095, 17), (4095, 1, 1000), (17, 17, 4095), (129, 257, 64)];
    const SMALL: &[(usize, usize, usize)] = &[(1, 1, 1), (129, 257, 64), (17, 33, 95)];
    if small() {
        SMALL
    } else {
        ALL
    }
}

fn small() -> bool {
    std::env::var_os("TILE_TEST_SMALL").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Attention (query rows, keys) shapes, likewise.
fn attention_shapes() -> &'static [(usize, usize)] {
    if small() {
        &[(1, 1), (65, 129)]
    } else {
        &[(1000, 1999), (1, 1), (4095, 17), (17, 4095), (64, 64)]
    }
}

#[test]
fn nn_f16() {
    for &(m, n, k) in shapes() {
        gemm::nn_f16(&gpu(), m, n, k, (m + n + k) as u64).unwrap();
    }
    both(2e-3, |d| gemm::nn_f16(d, 100, 70, 50, 1));
}

#[test]
fn nn_bf16_with_f32_output() {
    for &(m, n, k) in shapes() {
        gemm::nn_bf16_f32_out(&gpu(), m, n, k, 2).unwrap();
    }
    both(1e-5, |d| gemm::nn_bf16_f32_out(d, 65, 130, 97, 2));
}

#[test]
fn b_transposed_f16() {
    for &(m, n, k) in shapes() {
        gemm::nt_f16(&gpu(), m, n, k, 3).unwrap();
    }
    both(2e-3, |d| gemm::nt_f16(d, 100, 70, 50, 3));
}

#[test]
fn a_transposed_bf16() {
    for &(m, n, k) in shapes() {
        gemm::tn_bf16(&gpu(), m, n, k, 4).unwrap();
    }
    both(1e-2, |d| gemm::tn_bf16(d, 100, 70, 50, 4));
}

#[test]
fn both_transposed_with_gemm_clear_f16() {
    for &(m, n, k) in shapes() {
        gemm::tt_f16(&gpu(), m, n, k, 5).unwrap();
    }
    both(2e-3, |d| gemm::tt_f16(d, 100, 70, 50, 5));
}

#[test]
fn warp_policies() {
    for &(m, n, k) in shapes() {
        gemm::fullcol_f16(&gpu(), m, n, k, 6).unwrap();
        gemm::fullrow_bf16(&gpu(), m, n, k, 7).unwrap();
    }
    both(2e-3, |d| gemm::fullcol_f16(d, 45, 200, 37, 6));
    both(1e-2, |d| gemm::fullrow_bf16(d, 200, 45, 37, 7));
}

#[test]
fn example_kernels() {
    for &(m, n, k) in shapes() {
        gemm::example_f16(&gpu(), m, n, k, 8).unwrap();
        gemm::example_bf16(&gpu(), m, n, k, 9).unwrap();
        gemm::example_bt_f16(&gpu(), m, n, k, 10).unwrap();
    }
    both(2e-3, |d| gemm::example_f16(d, 130, 129, 70, 8));
}

#[test]
fn example_kernels_match_cublas() {
    let stream = gpu().stream().unwrap();
    let blas = tile::cublas::Gemm::new(&stream).unwrap();
    let (m, n, k) = (1536, 2049, 1000);
    let mut rng = common::Rng::new(12);
    let a_host: Vec<f16> = rng.vec(m * k, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let b_host: Vec<f16> = rng.vec(n * k, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let a = DeviceTensor::from_slice(&stream, &a_host, &[m, k]).unwrap();
    let b = DeviceTensor::from_slice(&stream, &b_host, &[k, n]).unwrap();
    let bt = DeviceTensor::from_slice(&stream, &b_host, &[n, k]).unwrap();
    for trans_b in [false, true] {
        let mut ours = DeviceTensor::<f16>::zeros(&stream, &[m, n]).unwrap();
        let mut theirs = DeviceTensor::<f16>::zeros(&stream, &[m, n]).unwrap();
        let b_used = if trans_b { &bt } else { &b };
        if trans_b {
            examples::gemm::matmul_bt::launch(&stream, &a, b_used, &mut ours).unwrap();
        } else {
            examples::gemm::matmul::launch(&stream, &a, b_used, &mut ours).unwrap();
        }
        blas.gemm_f16(m, n, k, &a, b_used, &mut theirs, false, trans_b).unwrap();
        let x: Vec<f64> = ours.to_vec(&stream).unwrap().iter().map(|v| v.to_f64()).collect();
        let y: Vec<f64> = theirs.to_vec(&stream).unwrap().iter().map(|v| v.to_f64()).collect();
        let err = tile::rel_error(&x, &y);
        assert!(err <= 2e-3, "trans_b={trans_b}: ours and cuBLAS differ by {err:.3e}");
    }
}

#[test]
fn attention_pipelined_f16() {
    for &(sq, sk) in attention_shapes() {
        gemm::attention_f16(&gpu(), sq, sk, (sq + sk) as u64).unwrap();
    }
    both(2e-3, |d| gemm::attention_f16(d, 100, 77, 1));
}

#[test]
fn attention_serial_bf16() {
    for &(sq, sk) in attention_shapes() {
        gemm::attention_bf16(&gpu(), sq, sk, (sq + sk) as u64).unwrap();
    }
    both(1e-2, |d| gemm::attention_bf16(d, 100, 77, 1));
}

//! MLA decode's gemm shapes (`tests/kernels/mla_split.rs`) on the GPU
//! (feature `gpu`) against f64 references and against the interpreter: on
//! an H200 the sm_90a variants split both gemms' columns over the two
//! warpgroups with wgmma (the warp-specialized loop when the tensors are
//! TMA-addressable, as here; `TILE_SKIP_SCHEDULES=warp_specialized_loop,tma_copy`
//! runs the cp.async variant instead).
//!
//! Also `gemm_tune`'s 128×256×32 tile over 512 threads, whose gemm now
//! splits over 2×2 warpgroups (it used mma.sync before).
//!
//! `cargo test --release --features gpu --test gpu_mla_split`.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mla_split.rs"]
mod mla_split;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
}
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

/// `examples/kernels/gemm.rs`'s `matmul::<f16, f16, 128, 256, 32, 3, 512, 8>`
/// (`gemm_tune`): M = 128 over four warpgroups, `Square`, so 2×2 warpgroups
/// of 64×128 with wgmma in its general variants.
#[test]
fn gemm_tune_512_thread_tile_on_the_gpu() {
    let g = gpu();
    let s = g.stream().unwrap();
    for (m, n, k) in [(128, 256, 32), (300, 700, 130), (1, 1, 1)] {
        let mut rng = common::Rng::new((m * 7 + n * 3 + k) as u64);
        let ah: Vec<f16> = rng.vec(m * k, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
        let bh: Vec<f16> = rng.vec(k * n, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
        let a = DeviceTensor::from_slice(&s, &ah, &[m, k]).unwrap();
        let b = DeviceTensor::from_slice(&s, &bh, &[k, n]).unwrap();
        let mut c = DeviceTensor::from_slice(&s, &vec![f16::from_f32(f32::NAN); m * n], &[m, n]).unwrap();
        examples::gemm::matmul::launch::<f16, f16, 128, 256, 32, 3, 512, 8>(&s, &a, &b, &mut c).unwrap();
        let want: Vec<f64> = (0..m * n)
            .map(|i| (0..k).map(|p| ah[(i / n) * k + p].to_f64() * bh[p * n + i % n].to_f64()).sum::<f64>())
            .collect();
        assert_close(&c.to_vec(&s).unwrap(), &want, 2e-3).unwrap_or_else(|e| panic!("{m}x{n}x{k}: {e}"));
    }
}

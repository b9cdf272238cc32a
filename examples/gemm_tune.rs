//! Tile-shape variants of the f16 GEMM (block tile, K slice, stages, threads),
//! each checked against cuBLAS and timed next to it at 8192³: the data behind
//! the configuration in `examples/kernels/gemm.rs`. The variants are
//! instances of that file's generic `matmul`. GPU only.
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;

#[path = "kernels/gemm.rs"]
mod kernels;
use kernels::matmul;

type Launch = fn(&Stream, &DeviceTensor<f16>, &DeviceTensor<f16>, &mut DeviceTensor<f16>) -> Result<(), tile::Error>;

/// The f16 configurations of the example's generic `matmul`
/// (`<T, O, BM, BN, BK, STAGES, THREADS, PANEL>`) that this sweep times: each is
/// one of its instances (listed in `examples/kernels/gemm.rs`).
const VARIANTS: [(&str, Launch); 8] = [
    ("128x128x32 s3 t256", matmul::launch::<f16, f16, 128, 128, 32, 3, 256, 8>),
    ("128x128x64 s3 t256", matmul::launch::<f16, f16, 128, 128, 64, 3, 256, 8>),
    ("128x128x32 s4 t256", matmul::launch::<f16, f16, 128, 128, 32, 4, 256, 8>),
    ("128x256x32 s3 t256", matmul::launch::<f16, f16, 128, 256, 32, 3, 256, 8>),
    ("128x256x64 s3 t256", matmul::launch::<f16, f16, 128, 256, 64, 3, 256, 8>),
    ("256x128x32 s3 t256", matmul::launch::<f16, f16, 256, 128, 32, 3, 256, 8>),
    ("128x256x32 s3 t512", matmul::launch::<f16, f16, 128, 256, 32, 3, 512, 8>),
    ("128x128x64 s4 t128", matmul::launch::<f16, f16, 128, 128, 64, 4, 128, 8>),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::auto()?;
    if device.is_interpreter() {
        println!("gemm_tune needs a GPU");
        return Ok(());
    }
    let stream = device.stream()?;
    let n = 8192usize;
    let mut rng = common::Rng::new(5);
    let to_f16 = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
    let a = DeviceTensor::from_slice(&stream, &to_f16(rng.vec(n * n, -1.0, 1.0)), &[n, n])?;
    let b = DeviceTensor::from_slice(&stream, &to_f16(rng.vec(n * n, -1.0, 1.0)), &[n, n])?;
    let mut c = DeviceTensor::<f16>::zeros(&stream, &[n, n])?;
    let mut c_ref = DeviceTensor::<f16>::zeros(&stream, &[n, n])?;
    let blas = tile::cublas::Gemm::new(&stream)?;
    blas.gemm_f16(n, n, n, &a, &b, &mut c_ref, false, false)?;
    let reference: Vec<f64> = c_ref.to_vec(&stream)?.iter().map(|v| v.to_f64()).collect();
    let flops = 2.0 * (n as f64).powi(3);
    let cublas = bench(&stream, 5, 20, || blas.gemm_f16(n, n, n, &a, &b, &mut c_ref, false, false))?;
    let cublas_tflops = flops / (cublas.median_ms * 1e-3) / 1e12;
    println!("cuBLAS f16 8192^3: {cublas_tflops:.1} TFLOPS");
    for (name, launch) in VARIANTS {
        launch(&stream, &a, &b, &mut c)?;
        let got = c.to_vec(&stream)?;
        let err = tile::rel_error(&got.iter().map(|v| v.to_f64()).collect::<Vec<_>>(), &reference);
        let t = bench(&stream, 5, 20, || launch(&stream, &a, &b, &mut c))?;
        let tflops = flops / (t.median_ms * 1e-3) / 1e12;
        println!("  {name}: {tflops:.1} TFLOPS ({:.3} of cuBLAS), rel diff {err:.1e}", tflops / cublas_tflops);
    }
    Ok(())
}

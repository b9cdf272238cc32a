//! The autotuner on the example's generic f16 GEMM (`matmul` in
//! `examples/kernels/gemm.rs`, whose `tune(..)` makes its tile parameters
//! the tuner's): for each shape, the first `launch_tuned` times every
//! candidate instance (block tile, K slice, stages, threads, panel) on the
//! real arguments; this prints each candidate's time next to cuBLAS, the
//! winner and the tuning time, then times the tuned launch (the cached
//! choice) against cuBLAS. GPU only.
//!
//! `cargo run --release --example gemm_tune -- [--shape MxNxK[,..]] [--save FILE]`:
//! the shapes to tune (default `8192x8192x8192,4096x4096x4096,128x4096x4096`);
//! `--save FILE` writes the choices to `FILE`, a cache to ship: a service
//! started with `TILE_TUNE_CACHE=FILE TILE_TUNE=cache-only` never tunes.
use tile::prelude::*;
use tile::tune::Tuner;

#[path = "kernels/common.rs"]
mod common;

#[path = "kernels/gemm.rs"]
mod kernels;
use kernels::matmul;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn parse_shape(v: &str) -> Result<(usize, usize, usize), String> {
    let dims: Vec<usize> =
        v.split('x').map(|d| d.trim().parse::<usize>()).collect::<Result<_, _>>().map_err(|e| format!("`{v}`: {e}"))?;
    match dims[..] {
        [m, n, k] if m > 0 && n > 0 && k > 0 => Ok((m, n, k)),
        _ => Err(format!("`{v}` is not MxNxK")),
    }
}

fn main() -> Res<()> {
    let mut shapes = vec![(8192, 8192, 8192), (4096, 4096, 4096), (128, 4096, 4096)];
    let mut save = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--shape" => {
                let v = args.next().ok_or("--shape needs a value")?;
                shapes = v.split(',').map(parse_shape).collect::<Result<_, _>>()?;
            }
            "--save" => save = Some(std::path::PathBuf::from(args.next().ok_or("--save needs a file")?)),
            other => {
                return Err(
                    format!("unknown argument `{other}`; usage: gemm_tune [--shape MxNxK[,..]] [--save FILE]").into()
                )
            }
        }
    }
    let device = Device::auto()?;
    if device.is_interpreter() {
        println!("gemm_tune needs a GPU");
        return Ok(());
    }
    let stream = device.stream()?;
    let tuner = Tuner::global()?;
    let blas = tile::cublas::Gemm::new(&stream)?;
    println!("gemm_tune on {}: {} f16 candidates", device.name(), matmul::tuned::<f16, f16>().candidates.len());
    let mut rng = common::Rng::new(5);
    let to_f16 = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
    for (m, n, k) in shapes {
        let a = DeviceTensor::from_slice(&stream, &to_f16(rng.vec(m * k, -1.0, 1.0)), &[m, k])?;
        let b = DeviceTensor::from_slice(&stream, &to_f16(rng.vec(k * n, -1.0, 1.0)), &[k, n])?;
        let mut c = DeviceTensor::<f16>::zeros(&stream, &[m, n])?;
        let mut c_ref = DeviceTensor::<f16>::zeros(&stream, &[m, n])?;
        let flops = 2.0 * m as f64 * n as f64 * k as f64;
        let cublas = bench(&stream, 5, 20, || blas.gemm_f16(m, n, k, &a, &b, &mut c_ref, false, false))?;
        let cublas_tflops = cublas.tflops(flops);
        println!("{m} x {n} x {k}: cuBLAS {cublas_tflops:.1} TFLOPS");
        let since = tuner.records().len();
        matmul::launch_tuned::<f16, f16>(&stream, &a, &b, &mut c)?;
        let reference: Vec<f64> = c_ref.to_vec(&stream)?.iter().map(|v| v.to_f64()).collect();
        let got: Vec<f64> = c.to_vec(&stream)?.iter().map(|v| v.to_f64()).collect();
        let err = tile::rel_error(&got, &reference);
        for r in tuner.records().iter().skip(since) {
            for (i, cand) in r.candidates.iter().enumerate() {
                let mark = if i == r.index { " <- chosen" } else { "" };
                match (cand.ms, &cand.skipped) {
                    (Some(ms), _) => println!(
                        "  {}: {:.3} ms, {:.1} TFLOPS ({:.3} of cuBLAS){mark}",
                        cand.config,
                        ms,
                        flops / (ms * 1e-3) / 1e12,
                        flops / (ms * 1e-3) / 1e12 / cublas_tflops
                    ),
                    (None, why) => println!("  {}: skipped ({})", cand.config, why.as_deref().unwrap_or("?")),
                }
            }
            println!("  chose {} in {:.2} s ({:?}, bucket {})", r.config, r.tuning_ms / 1e3, r.source, r.bucket);
        }
        let tuned = bench(&stream, 5, 20, || matmul::launch_tuned::<f16, f16>(&stream, &a, &b, &mut c))?;
        println!(
            "  tuned launch: {:.1} TFLOPS ({:.3} of cuBLAS), rel diff {err:.1e}",
            tuned.tflops(flops),
            tuned.tflops(flops) / cublas_tflops
        );
    }
    if let Some(path) = save {
        tuner.save(&path)?;
        println!(
            "wrote the choices to {} (ship it: TILE_TUNE_CACHE={} TILE_TUNE=cache-only)",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

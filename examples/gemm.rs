//! Matrix multiply (fp16 and bf16 in, fp32 accumulation) on the GPU, next to
//! cuBLAS; in the CPU interpreter when there is no GPU.
//!
//! On a GPU: correctness at awkward sizes against an f64 CPU reference, at
//! 4096³ against cuBLAS (relative error), then TFLOPS of ours and cuBLAS from
//! the same run at 4096³ and 8192³, one `RESULT gemm ...` line each.
//! Without a GPU: the interpreter at small awkward sizes against the CPU
//! reference.
//!
//! `cargo run --release --example gemm` (`TILE_INTERPRET=1` forces the interpreter).
use tile::cublas;
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/gemm.rs"]
mod kernels;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// fp16 or bf16: the kernel, the cuBLAS call and the tolerance of each type.
trait Dtype: Element + cublas::CublasElement {
    const NAME: &'static str;
    /// Relative L2 error allowed against an f64 reference (one rounding of
    /// the output, f32 accumulation order).
    const TOL: f64;
    fn ours(s: &Stream, a: &DeviceTensor<Self>, b: &DeviceTensor<Self>, c: &mut DeviceTensor<Self>)
        -> tile::Result<()>;
}

impl Dtype for f16 {
    const NAME: &'static str = "f16";
    const TOL: f64 = 2e-3;
    fn ours(s: &Stream, a: &DeviceTensor<f16>, b: &DeviceTensor<f16>, c: &mut DeviceTensor<f16>) -> tile::Result<()> {
        kernels::matmul::launch(s, a, b, c)
    }
}

impl Dtype for bf16 {
    const NAME: &'static str = "bf16";
    const TOL: f64 = 1e-2;
    fn ours(
        s: &Stream,
        a: &DeviceTensor<bf16>,
        b: &DeviceTensor<bf16>,
        c: &mut DeviceTensor<bf16>,
    ) -> tile::Result<()> {
        kernels::matmul_bf16::launch(s, a, b, c)
    }
}

/// Random `[rows, cols]` inputs in [-1, 1) on the device, and their host copy.
fn random<T: Element>(s: &Stream, rng: &mut common::Rng, rows: usize, cols: usize) -> Res<(Vec<T>, DeviceTensor<T>)> {
    let host: Vec<T> = rng.vec(rows * cols, -1.0, 1.0).into_iter().map(|v| T::from_f64(v as f64)).collect();
    let dev = DeviceTensor::from_slice(s, &host, &[rows, cols])?;
    Ok((host, dev))
}

/// Ours at `m × n × k` against the f64 CPU reference (every element).
fn check_vs_cpu<T: Dtype>(s: &Stream, m: usize, n: usize, k: usize) -> Res<()> {
    let mut rng = common::Rng::new((m * 31 + n * 7 + k) as u64);
    let (a_host, a) = random::<T>(s, &mut rng, m, k)?;
    let (b_host, b) = random::<T>(s, &mut rng, k, n)?;
    let mut c = DeviceTensor::from_slice(s, &vec![T::from_f64(f64::NAN); m * n], &[m, n])?;
    T::ours(s, &a, &b, &mut c)?;
    let got = c.to_vec(s)?;
    let want = kernels::reference(m, n, k, &a_host, &b_host, false);
    let err = assert_close(&got, &want, T::TOL).map_err(|e| format!("{} {m} x {n} x {k}: {e}", T::NAME))?;
    println!("{} {m} x {n} x {k}: matches the CPU reference (relative error {err:.2e})", T::NAME);
    Ok(())
}

/// `matmul_bt` (B stored `[n, k]`, multiplied as Bᵀ) against the f64 CPU reference.
fn check_bt_vs_cpu(s: &Stream, m: usize, n: usize, k: usize) -> Res<()> {
    let mut rng = common::Rng::new((m * 13 + n * 5 + k) as u64);
    let (a_host, a) = random::<f16>(s, &mut rng, m, k)?;
    let (b_host, b) = random::<f16>(s, &mut rng, n, k)?;
    let mut c = DeviceTensor::from_slice(s, &vec![f16::NAN; m * n], &[m, n])?;
    kernels::matmul_bt::launch(s, &a, &b, &mut c)?;
    let got = c.to_vec(s)?;
    let want = kernels::reference(m, n, k, &a_host, &b_host, true);
    let err = assert_close(&got, &want, f16::TOL).map_err(|e| format!("f16 Bt {m} x {n} x {k}: {e}"))?;
    println!("f16 {m} x {n} x {k}, B transposed: matches the CPU reference (relative error {err:.2e})");
    Ok(())
}

/// Ours against cuBLAS at `m × n × k` (relative error), then both timed.
fn compare_and_time<T: Dtype>(s: &Stream, blas: &cublas::Gemm, m: usize, n: usize, k: usize) -> Res<()> {
    let mut rng = common::Rng::new(7 + m as u64);
    let (_, a) = random::<T>(s, &mut rng, m, k)?;
    let (_, b) = random::<T>(s, &mut rng, k, n)?;
    let mut ours = DeviceTensor::<T>::zeros(s, &[m, n])?;
    let mut theirs = DeviceTensor::<T>::zeros(s, &[m, n])?;
    T::ours(s, &a, &b, &mut ours)?;
    blas.gemm(m, n, k, &a, &b, &mut theirs, false, false)?;
    let ours_host: Vec<f64> = ours.to_vec(s)?.iter().map(|v| v.to_f64()).collect();
    let theirs_host: Vec<f64> = theirs.to_vec(s)?.iter().map(|v| v.to_f64()).collect();
    let err = rel_error(&ours_host, &theirs_host);
    if err > T::TOL {
        return Err(format!("{} {m}x{n}x{k}: ours and cuBLAS differ by {err:.3e} (> {:.1e})", T::NAME, T::TOL).into());
    }
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let (warmup, iters) = if m * n * k >= 1 << 39 { (5, 20) } else { (10, 50) };
    let ours_t = bench(s, warmup, iters, || T::ours(s, &a, &b, &mut ours))?;
    let theirs_t = bench(s, warmup, iters, || blas.gemm(m, n, k, &a, &b, &mut theirs, false, false))?;
    let (ours_tf, theirs_tf) = (ours_t.tflops(flops), theirs_t.tflops(flops));
    println!(
        "{} {m} x {n} x {k}: ours {:.3} ms, cuBLAS {:.3} ms (relative difference {err:.2e})",
        T::NAME,
        ours_t.median_ms,
        theirs_t.median_ms
    );
    println!(
        "RESULT gemm dtype={} m={m} n={n} k={k} ours_tflops={ours_tf:.1} cublas_tflops={theirs_tf:.1} ratio={:.3}",
        T::NAME,
        ours_tf / theirs_tf
    );
    Ok(())
}

fn main() -> Res<()> {
    let device = Device::auto()?;
    let stream = device.stream()?;
    println!("gemm on {}", device.name());
    if device.is_interpreter() {
        println!("no GPU found: running in the CPU interpreter at small sizes (no cuBLAS, no timing)");
        check_vs_cpu::<f16>(&stream, 100, 70, 50)?;
        check_vs_cpu::<bf16>(&stream, 33, 129, 65)?;
        check_bt_vs_cpu(&stream, 70, 100, 50)?;
        return Ok(());
    }
    for (m, n, k) in [(1000, 1999, 777), (1, 4095, 17), (4095, 1, 1000), (129, 257, 4096)] {
        check_vs_cpu::<f16>(&stream, m, n, k)?;
        check_vs_cpu::<bf16>(&stream, m, n, k)?;
        check_bt_vs_cpu(&stream, m, n, k)?;
    }
    let blas = cublas::Gemm::new(&stream)?;
    println!("cuBLAS: {} (version {})", blas.library_name(), blas.version()?);
    for size in [4096, 8192] {
        compare_and_time::<f16>(&stream, &blas, size, size, size)?;
        compare_and_time::<bf16>(&stream, &blas, size, size, size)?;
    }
    Ok(())
}

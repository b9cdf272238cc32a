//! Matrix multiply (fp16 and bf16 in, fp32 accumulation) on the GPU, next to
//! cuBLAS; in the CPU interpreter when there is no GPU.
//!
//! On a GPU: correctness at awkward sizes against an f64 CPU reference, at
//! 4096³ against cuBLAS (relative error), then TFLOPS of ours and cuBLAS from
//! the same run at 4096³ and 8192³, one `RESULT gemm ...` line each. Ours is
//! the autotuned `matmul` (`launch_tuned`): each new shape bucket is tuned at
//! its first launch (or read from the cache, `~/.cache/tile/tune.json`), and
//! the example prints the configuration that won and how long tuning took.
//! Without a GPU: the interpreter at small awkward sizes against the CPU
//! reference.
//!
//! `cargo run --release --example gemm -- [options]` (`TILE_INTERPRET=1`
//! forces the interpreter):
//!
//! - `--size N[,N..]`: the square sizes to time (default `4096,8192`);
//! - `--dtype f16|bf16[,..]`: the element types (default both);
//! - `--no-check`: skip the correctness checks at awkward sizes;
//! - `--once`: launch our kernel once per size and type and wait for it, no
//!   cuBLAS, no timing: the launch to profile (`ncu --launch-count 1`).
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
        ours(s, a, b, c)
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
        ours(s, a, b, c)
    }
}

/// On a GPU the autotuned `matmul` (`launch_tuned`: the first launch of a
/// shape bucket times every candidate, then the choice is cached on disk);
/// on the interpreter the fixed configuration (timing twelve candidates on
/// the CPU would only measure the interpreter).
fn ours<T: Element>(s: &Stream, a: &DeviceTensor<T>, b: &DeviceTensor<T>, c: &mut DeviceTensor<T>) -> tile::Result<()>
where
    kernels::matmul::Instances: kernels::matmul::Instance<T, T, 128, 256, 64, 3, 256, 8> + kernels::matmul::Tuned<T, T>,
{
    if s.device().is_interpreter() {
        kernels::example(s, a, b, c)
    } else {
        kernels::example_tuned(s, a, b, c)
    }
}

/// How many choices the tuner has made or read.
fn choices() -> Res<usize> {
    Ok(tile::tune::Tuner::global()?.records().len())
}

/// The tuner's choices after the first `since`: one line each (the winner,
/// its time, the tuning time, where the choice came from).
fn report_choices(since: usize) -> Res<()> {
    let records = tile::tune::Tuner::global()?.records();
    for r in records.iter().skip(since) {
        let ms = r.candidates.get(r.index).and_then(|c| c.ms);
        let skipped = r.candidates.iter().filter(|c| c.ms.is_none()).count();
        println!(
            "  tuned {} at {}: {} ({}; {} candidates{}; tuning took {:.2} s; {:?})",
            r.kernel,
            r.bucket,
            r.config,
            ms.map_or("time from the cache".to_string(), |ms| format!("{ms:.3} ms")),
            r.candidates.len(),
            if skipped > 0 { format!(", {skipped} skipped") } else { String::new() },
            r.tuning_ms / 1e3,
            r.source
        );
    }
    Ok(())
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
    let since = choices()?;
    T::ours(s, &a, &b, &mut c)?;
    report_choices(since)?;
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
    kernels::example_bt(s, &a, &b, &mut c)?;
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
    let since = choices()?;
    T::ours(s, &a, &b, &mut ours)?;
    report_choices(since)?;
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

/// The command line (see the module doc).
struct Options {
    sizes: Vec<usize>,
    f16: bool,
    bf16: bool,
    check: bool,
    once: bool,
}

const USAGE: &str = "usage: gemm [--size N[,N..]] [--dtype f16|bf16[,..]] [--no-check] [--once]";

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut opts = Options { sizes: vec![4096, 8192], f16: true, bf16: true, check: true, once: false };
        let mut dtypes: Option<Vec<String>> = None;
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = |name: &str| inline.clone().or_else(|| args.next()).ok_or(format!("{name} needs a value"));
            match flag.as_str() {
                "--size" => {
                    opts.sizes = value("--size")?
                        .split(',')
                        .map(|v| match v.trim().parse::<usize>() {
                            Ok(n) if n > 0 => Ok(n),
                            _ => Err(format!("--size: `{v}` is not a positive integer")),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--dtype" => dtypes = Some(value("--dtype")?.split(',').map(|v| v.trim().to_string()).collect()),
                "--no-check" => opts.check = false,
                "--once" => opts.once = true,
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if let Some(dtypes) = dtypes {
            opts.f16 = false;
            opts.bf16 = false;
            for d in dtypes {
                match d.as_str() {
                    "f16" | "fp16" => opts.f16 = true,
                    "bf16" => opts.bf16 = true,
                    other => return Err(format!("--dtype: `{other}` is not f16 or bf16")),
                }
            }
        }
        Ok(opts)
    }
}

/// Our kernel at `size`³ on random inputs, launched once and waited for.
fn launch_once<T: Dtype>(s: &Stream, size: usize) -> Res<()> {
    let mut rng = common::Rng::new(size as u64);
    let (_, a) = random::<T>(s, &mut rng, size, size)?;
    let (_, b) = random::<T>(s, &mut rng, size, size)?;
    let mut c = DeviceTensor::<T>::zeros(s, &[size, size])?;
    T::ours(s, &a, &b, &mut c)?;
    s.synchronize()?;
    println!("{} {size} x {size} x {size}: launched once", T::NAME);
    Ok(())
}

fn main() {
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(opts) => opts,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("gemm: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&opts) {
        eprintln!("gemm: {e}");
        std::process::exit(1);
    }
}

fn run(opts: &Options) -> Res<()> {
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
    if opts.once {
        for &size in &opts.sizes {
            if opts.f16 {
                launch_once::<f16>(&stream, size)?;
            }
            if opts.bf16 {
                launch_once::<bf16>(&stream, size)?;
            }
        }
        return Ok(());
    }
    if opts.check {
        for (m, n, k) in [(1000, 1999, 777), (1, 4095, 17), (4095, 1, 1000), (129, 257, 4096), (1000, 1000, 1000)] {
            if opts.f16 {
                check_vs_cpu::<f16>(&stream, m, n, k)?;
                check_bt_vs_cpu(&stream, m, n, k)?;
            }
            if opts.bf16 {
                check_vs_cpu::<bf16>(&stream, m, n, k)?;
            }
        }
    }
    let blas = cublas::Gemm::new(&stream)?;
    println!("cuBLAS: {} (version {})", blas.library_name(), blas.version()?);
    for &size in &opts.sizes {
        if opts.f16 {
            compare_and_time::<f16>(&stream, &blas, size, size, size)?;
        }
        if opts.bf16 {
            compare_and_time::<bf16>(&stream, &blas, size, size, size)?;
        }
    }
    Ok(())
}

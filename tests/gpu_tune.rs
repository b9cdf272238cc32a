//! The autotuner on a GPU (feature `gpu`): the example's tuned f16 GEMM at
//! a square, a decode-size and an odd shape (every candidate timed or
//! skipped with its reason, the result against cuBLAS, the tuning time as
//! `RESULT tune ...` lines); an accumulating kernel through a
//! `DeviceTensor` and through a `TensorViewMut` (the saved and restored
//! outputs); and a second process (this binary again, one test selected)
//! that reads the first one's cache with `TILE_TUNE=cache-only`.
//!
//! `cargo test --release --features gpu --test gpu_tune -- --nocapture`
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/tune.rs"]
mod kernels;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
}
use examples::gemm::matmul;
use kernels::axpy;
use tile::prelude::*;
use tile::tune::{Mode, Settings, Source, Tuner};
use tile::TensorViewMut;

/// Set in the child process: the cache directory to read.
const CHILD: &str = "TILE_TUNE_TEST_CHILD";

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("tile-gpu-tune-{tag}-{}-{nonce}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn f16s(rng: &mut common::Rng, n: usize) -> Vec<f16> {
    rng.vec(n, -1.0, 1.0).into_iter().map(f16::from_f32).collect()
}

/// Tunes `matmul::<f16, f16>` at `m × n × k` through `tuner`, checks the
/// result against cuBLAS, returns the record.
fn tune_gemm(tuner: &Tuner, stream: &Stream, m: usize, n: usize, k: usize) -> tile::tune::Record {
    let mut rng = common::Rng::new((m + n + k) as u64);
    let a = DeviceTensor::from_slice(stream, &f16s(&mut rng, m * k), &[m, k]).unwrap();
    let b = DeviceTensor::from_slice(stream, &f16s(&mut rng, k * n), &[k, n]).unwrap();
    let mut c = DeviceTensor::from_slice(stream, &vec![f16::NAN; m * n], &[m, n]).unwrap();
    let mut c_ref = DeviceTensor::<f16>::zeros(stream, &[m, n]).unwrap();
    let since = tuner.records().len();
    // Progress on stderr (not captured), so that a run that stalls says where.
    eprintln!("gpu_tune: tuning matmul::<f16, f16> at {m}x{n}x{k}");
    let start = std::time::Instant::now();
    matmul::launch_tuned_with::<f16, f16>(tuner, stream, &a, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    let first_ms = start.elapsed().as_secs_f64() * 1e3;
    tile::cublas::Gemm::new(stream).unwrap().gemm_f16(m, n, k, &a, &b, &mut c_ref, false, false).unwrap();
    let got: Vec<f64> = c.to_vec(stream).unwrap().iter().map(|v| v.to_f64()).collect();
    let want: Vec<f64> = c_ref.to_vec(stream).unwrap().iter().map(|v| v.to_f64()).collect();
    let err = tile::rel_error(&got, &want);
    assert!(err < 2e-3, "{m}x{n}x{k}: tuned matmul differs from cuBLAS by {err:.2e}");
    let records = tuner.records();
    assert_eq!(records.len(), since + 1, "one tuning per new bucket");
    let r = records[since].clone();
    assert_eq!(r.source, Source::Tuned);
    assert_eq!(r.candidates.len(), matmul::tuned::<f16, f16>().candidates.len());
    for c in &r.candidates {
        assert!(c.ms.is_some() != c.skipped.is_some(), "{c:?}");
        println!(
            "  {m}x{n}x{k} {}: {}",
            c.config,
            c.ms.map_or_else(|| format!("skipped: {}", c.skipped.as_deref().unwrap_or("")), |ms| format!("{ms:.3} ms"))
        );
    }
    println!(
        "RESULT tune kernel={} m={m} n={n} k={k} chosen=\"{}\" best_ms={:.4} tuning_s={:.3} first_launch_s={:.3} timed={} skipped={}",
        r.kernel,
        r.config,
        r.candidates[r.index].ms.unwrap(),
        r.tuning_ms / 1e3,
        first_ms / 1e3,
        r.candidates.iter().filter(|c| c.ms.is_some()).count(),
        r.candidates.iter().filter(|c| c.ms.is_none()).count()
    );
    // The second launch uses the choice: no new record, fast.
    matmul::launch_tuned_with::<f16, f16>(tuner, stream, &a, &b, &mut c).unwrap();
    assert_eq!(tuner.records().len(), since + 1);
    r
}

#[test]
fn tuned_gemm_on_the_gpu_and_a_second_process_reads_the_cache() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let device = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let stream = device.stream().unwrap();
    let dir = temp_dir("gemm");
    let tuner = Tuner::new(Settings {
        mode: Mode::Quiet,
        warmup: None,
        reps: None,
        cache_dir: Some(dir.clone()),
        shipped: None,
    });
    let mut chosen = Vec::new();
    for (m, n, k) in [(4096, 4096, 4096), (128, 4096, 4096), (1000, 1999, 777)] {
        chosen.push(tune_gemm(&tuner, &stream, m, n, k).config);
    }
    // On 9.x the 4-stage 128 × 256 × 64 candidate (sm_90a only) is timed.
    if device.compute_capability().is_some_and(|c| c.0 == 9) {
        let r = &tuner.records()[0];
        let four = r
            .candidates
            .iter()
            .find(|c| c.config == "BM = 128, BN = 256, BK = 64, STAGES = 4, THREADS = 256, PANEL = 8");
        assert!(four.is_some_and(|c| c.ms.is_some()), "{r:?}");
    }
    // A second process, from the environment: cache-only, reads the file.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["second_process_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("TILE_CACHE_DIR", &dir)
        .env("TILE_TUNE", "cache-only")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find(|l| l.starts_with("CHILD ")).unwrap_or_else(|| panic!("no CHILD line:\n{stdout}"));
    println!("{line}");
    assert_eq!(line, format!("CHILD source=Cache config={}", chosen[0]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child of the test above: `launch_tuned` (the global tuner, from
/// `TILE_CACHE_DIR` and `TILE_TUNE=cache-only`) at 4096³.
#[test]
fn second_process_child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let device = Device::cuda(0).unwrap();
    let stream = device.stream().unwrap();
    let n = 4096;
    let a = DeviceTensor::<f16>::zeros(&stream, &[n, n]).unwrap();
    let b = DeviceTensor::<f16>::zeros(&stream, &[n, n]).unwrap();
    let mut c = DeviceTensor::<f16>::zeros(&stream, &[n, n]).unwrap();
    let start = std::time::Instant::now();
    matmul::launch_tuned::<f16, f16>(&stream, &a, &b, &mut c).unwrap();
    stream.synchronize().unwrap();
    let r = &Tuner::global().unwrap().records()[0];
    println!("RESULT tune_second_process first_launch_s={:.3}", start.elapsed().as_secs_f64());
    println!("CHILD source={:?} config={}", r.source, r.config);
}

#[test]
fn accumulating_outputs_survive_tuning_on_the_gpu() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let device = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let stream = device.stream().unwrap();
    let dir = temp_dir("acc");
    let tuner = Tuner::new(Settings {
        mode: Mode::Quiet,
        warmup: None,
        reps: None,
        cache_dir: Some(dir.clone()),
        shipped: None,
    });
    let mut rng = common::Rng::new(9);
    for n in [1usize, 1000, 1 << 20] {
        let x = rng.vec(n, -1.0, 1.0);
        let y = rng.vec(n, -1.0, 1.0);
        let want: Vec<f32> = x.iter().zip(&y).map(|(&x, &y)| y + 0.5 * x).collect();
        let x_t = DeviceTensor::from_slice(&stream, &x, &[n]).unwrap();
        let mut y_t = DeviceTensor::from_slice(&stream, &y, &[n]).unwrap();
        axpy::launch_tuned_with(&tuner, &stream, &x_t, &mut y_t, 0.5).unwrap();
        assert_eq!(y_t.to_vec(&stream).unwrap(), want, "DeviceTensor, n = {n}");
        // Through a view at an offset of a caller's slice (a fresh tuner
        // without a cache: tuned again, restored through the view's address).
        let cu = stream.cuda_stream().unwrap();
        let mut padded = y.clone();
        padded.splice(0..0, [7.0f32; 4]);
        let mut slice = cu.clone_htod(&padded).unwrap();
        {
            let mut view = TensorViewMut::with_offset(&mut slice, 4, &[n]).unwrap();
            let small = DeviceTensor::from_slice(&stream, &x, &[n]).unwrap();
            let fresh =
                Tuner::new(Settings { mode: Mode::Quiet, warmup: None, reps: None, cache_dir: None, shipped: None });
            axpy::launch_tuned_with(&fresh, &stream, &small, &mut view, 0.5).unwrap();
            assert_eq!(fresh.records()[0].source, Source::Tuned);
        }
        let got = cu.clone_dtoh(&slice).unwrap();
        assert_eq!(&got[..4], &[7.0f32; 4]);
        assert_eq!(&got[4..], &want[..], "view, n = {n}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! GPU tests (feature `gpu`): every kernel on the GPU at awkward sizes,
//! against a CPU reference, and against the interpreter's output.
//!
//! `cargo test --release --features gpu --test gpu` on a machine with an
//! NVIDIA GPU; scripts/dist.sh gathers the binary for a GPU machine.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/mod.rs"]
mod kernels;
#[path = "../examples/kernels"]
mod examples {
    pub mod rmsnorm;
    pub mod softmax;
    pub mod vector_add;
}
use kernels::checks;
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn cpu() -> Device {
    Device::interpreter()
}

/// Runs `check` on the GPU and in the interpreter; both must pass their
/// reference check and agree with each other within `tol` (relative).
fn both<T: Copy + Into<f64>>(tol: f64, check: impl Fn(&Device) -> checks::Res<Vec<T>>) {
    let on_gpu = check(&gpu()).unwrap();
    let on_cpu = check(&cpu()).unwrap();
    let a: Vec<f64> = on_gpu.iter().map(|&x| x.into()).collect();
    let b: Vec<f64> = on_cpu.iter().map(|&x| x.into()).collect();
    let err = tile::rel_error(&a, &b);
    assert!(err <= tol, "GPU and interpreter disagree: relative difference {err:.3e} > {tol:.1e}");
}

#[test]
fn vector_add() {
    for n in [1, 999, 4097, 1 << 20, (1 << 22) + 3] {
        checks::vector_add(&gpu(), n, n as u64).unwrap();
    }
    both(0.0, |d| checks::vector_add(d, 10_001, 1));
}

#[test]
fn softmax() {
    for (m, n) in [(1, 1), (333, 1000), (1031, 4096), (64, 4095), (3, 4097), (9, 12_345)] {
        checks::softmax(&gpu(), m, n, (m * n) as u64).unwrap();
    }
    both(2e-3, |d| checks::softmax(d, 13, 777, 2));
    both(2e-3, |d| checks::softmax(d, 3, 5000, 3));
}

/// The RMSNorm of the candle example (`examples/candle_rmsnorm.rs`), rows
/// shorter and longer than its column tile, against the f64 reference.
#[test]
fn rmsnorm() {
    let s = gpu().stream().unwrap();
    let mut rng = common::Rng::new(22);
    for (m, n) in [(1, 1), (333, 1000), (64, 4096), (7, 10_001)] {
        let x = rng.vec(m * n, -2.0, 2.0);
        let w = rng.vec(n, 0.5, 1.5);
        let xt = DeviceTensor::from_slice(&s, &x, &[m, n]).unwrap();
        let wt = DeviceTensor::from_slice(&s, &w, &[n]).unwrap();
        let mut yt = DeviceTensor::<f32>::zeros(&s, &[m, n]).unwrap();
        examples::rmsnorm::rmsnorm::launch(&s, &xt, &wt, &mut yt, 1e-6).unwrap();
        let err = assert_close(&yt.to_vec(&s).unwrap(), &examples::rmsnorm::reference(&x, &w, n, 1e-6), 1e-5);
        err.unwrap_or_else(|e| panic!("{m} x {n}: {e}"));
    }
}

#[test]
fn scale_shift() {
    checks::scale_shift(&gpu(), 1000, 1999, 1).unwrap();
    both(1e-2, |d| checks::scale_shift(d, 37, 101, 1));
}

/// Every instance of a generic kernel on the GPU, and against the interpreter.
#[test]
fn generic_axpy_every_instance() {
    for n in [1, 1000, 1_000_003] {
        checks::axpy::<f32, 1024, 256>(&gpu(), n, n as u64).unwrap();
        checks::axpy::<f16, 512, 128>(&gpu(), n, 1).unwrap();
        checks::axpy::<bf16, 2048, 256>(&gpu(), n, 2).unwrap();
    }
    both(1e-6, |d| checks::axpy::<f32, 1024, 256>(d, 5001, 3));
    both(2e-3, |d| checks::axpy::<f16, 512, 128>(d, 5001, 4));
}

#[test]
fn col_sum() {
    checks::col_sum(&gpu(), 4095, 1001, 2).unwrap();
    both(1e-5, |d| checks::col_sum(d, 77, 300, 2));
}

#[test]
fn transpose() {
    checks::transpose(&gpu(), 1000, 1999, 3).unwrap();
    both(0.0, |d| checks::transpose(d, 45, 70, 3));
}

#[test]
fn row_range() {
    checks::row_range(&gpu(), 1001, 3333, 4).unwrap();
    both(0.0, |d| checks::row_range(d, 9, 700, 4).map(|(h, l)| [h, l].concat()));
}

#[test]
fn histogram() {
    checks::histogram(&gpu(), 1_000_003, 97, 5).unwrap();
    both(0.0, |d| checks::histogram(d, 3001, 37, 5));
}

#[test]
fn scalar_walk() {
    checks::scalar_walk(&gpu(), 300, 1000).unwrap();
    both(0.0, |d| checks::scalar_walk(d, 5, 17));
}

/// Grids past CUDA's per-axis limits (issue 12): 70,000 rows on y (and
/// 65,539 batches on z) launch folded onto x and unfold in the kernel; the
/// same kernels at y and z within the limits launch as written. Each result
/// is exact, and the same as the interpreter's.
#[test]
fn grids_past_the_hardware_axis_limits() {
    for swizzled in [false, true] {
        for (r, c) in [(70_000, 37), (65_535, 33), (65_536, 1), (131_071, 70), (5, 100)] {
            checks::row_tiles(&gpu(), r, c, swizzled, r as u64).unwrap();
        }
        both(0.0, |d| checks::row_tiles(d, 70_000, 37, swizzled, 1));
    }
    for (b, r, c) in [(65_539, 2, 5), (70_000, 8, 33), (3, 7, 40)] {
        checks::batch_rows(&gpu(), b, r, c, b as u64).unwrap();
    }
    both(0.0, |d| checks::batch_rows(d, 65_539, 2, 5, 5));
    checks::huge_grid_is_an_error(&gpu()).unwrap();
}

#[test]
fn shape_mismatch_is_an_error() {
    let d = gpu();
    let s = d.stream().unwrap();
    let x = DeviceTensor::<f16>::zeros(&s, &[4, 8]).unwrap();
    let mut y = DeviceTensor::<f16>::zeros(&s, &[4, 9]).unwrap();
    let err = examples::softmax::softmax::launch(&s, &x, &mut y).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains('N') && msg.contains('y'), "unhelpful message: {msg}");
}

//! Launches from several host threads at once, each on a stream of its own,
//! into the same kernels' modules and tensor-map caches (issue 12, item 3):
//! shared by `tests/concurrency.rs` (the interpreter, in CI) and
//! `tests/gpu_concurrency.rs` (feature `gpu`).
//!
//! Every thread launches the example GEMM (`matmul`, whose sm_90a build has a
//! warp-specialized TMA variant: even threads use TMA-addressable shapes, so
//! it runs there; odd threads use rows of 516 bytes, so the general variant
//! runs) and `vector_add`, `iters` times. `a` and `x` are shared by all
//! threads (read concurrently, one tensor-map spec for `a` shared by the even
//! threads); `b` and `y` are the thread's own, so that each thread's result is
//! different and a result delivered to the wrong thread shows. Before each
//! launch the outputs are overwritten with NaN on the thread's stream, so a
//! launch that did not run (or ran before the overwrite) fails the check.
use tile::prelude::*;

use crate::common::Rng;
use crate::examples::{gemm, vector_add};

/// Sizes and counts of one run.
pub struct Plan {
    pub threads: usize,
    pub iters: usize,
    pub m: usize,
    pub k: usize,
    /// Columns of the even threads' `b` (a multiple of 8: TMA-addressable f16 rows).
    pub n_tma: usize,
    /// Columns of the odd threads' `b` (not a multiple of 8).
    pub n_general: usize,
    /// Length of `vector_add`'s vectors.
    pub len: usize,
}

fn f16s(rng: &mut Rng, n: usize) -> Vec<f16> {
    rng.vec(n, -1.0, 1.0).into_iter().map(f16::from_f32).collect()
}

/// Runs `plan` on `device`; panics (in the failing thread, which the scope
/// re-raises) on any launch error or wrong result, naming the thread and
/// the iteration.
pub fn run(device: &Device, plan: &Plan) {
    let Plan { threads, iters, m, k, n_tma, n_general, len } = *plan;
    assert!(n_tma % 8 == 0 && n_general % 8 != 0, "the plan's column counts must pick both variants");
    let setup = device.stream().unwrap();
    let mut rng = Rng::new(12);
    let a = f16s(&mut rng, m * k);
    let x = rng.vec(len, -10.0, 10.0);
    let a_t = DeviceTensor::from_slice(&setup, &a, &[m, k]).unwrap();
    let x_t = DeviceTensor::from_slice(&setup, &x, &[len]).unwrap();
    setup.synchronize().unwrap();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (a, x, a_t, x_t) = (&a, &x, &a_t, &x_t);
            scope.spawn(move || {
                let stream = device.new_stream().unwrap();
                let n = if t % 2 == 0 { n_tma } else { n_general };
                let mut rng = Rng::new(1000 + t as u64);
                let b = f16s(&mut rng, k * n);
                let y = rng.vec(len, -10.0, 10.0);
                let c_ref = gemm::reference(m, n, k, a, &b, false);
                let z_ref = vector_add::reference(x, &y);
                let b_t = DeviceTensor::from_slice(&stream, &b, &[k, n]).unwrap();
                let y_t = DeviceTensor::from_slice(&stream, &y, &[len]).unwrap();
                let nan_c = DeviceTensor::from_slice(&stream, &vec![f16::NAN; m * n], &[m, n]).unwrap();
                let nan_z = DeviceTensor::from_slice(&stream, &vec![f32::NAN; len], &[len]).unwrap();
                let mut c_t = DeviceTensor::<f16>::zeros(&stream, &[m, n]).unwrap();
                let mut z_t = DeviceTensor::<f32>::zeros(&stream, &[len]).unwrap();
                for i in 0..iters {
                    let at = |what: &str, e: String| format!("thread {t} (n = {n}), iteration {i}: {what}: {e}");
                    c_t.copy_from(&stream, &nan_c).unwrap();
                    z_t.copy_from(&stream, &nan_z).unwrap();
                    gemm::example(&stream, a_t, &b_t, &mut c_t)
                        .unwrap_or_else(|e| panic!("{}", at("matmul", e.to_string())));
                    vector_add::vector_add::launch(&stream, x_t, &y_t, &mut z_t)
                        .unwrap_or_else(|e| panic!("{}", at("vector_add", e.to_string())));
                    let c = c_t.to_vec(&stream).unwrap();
                    tile::assert_close(&c, &c_ref, 2e-3).unwrap_or_else(|e| panic!("{}", at("matmul", e)));
                    let z = z_t.to_vec(&stream).unwrap();
                    tile::assert_close(&z, &z_ref, 1e-6).unwrap_or_else(|e| panic!("{}", at("vector_add", e)));
                }
            });
        }
    });
}

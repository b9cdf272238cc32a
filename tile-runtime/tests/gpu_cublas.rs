//! The cuBLAS peer (feature `gpu`): row-major f16/bf16 GEMM with both
//! transposes at small awkward sizes against an f64 CPU reference, and its
//! argument checks. Run with `cargo test -p tile-runtime --features gpu`.
#![cfg(feature = "gpu")]

mod common;

use common::Rng;
use tile_runtime::cublas::{CublasElement, Gemm};
use tile_runtime::{assert_close, bf16, f16, Device, DeviceTensor, Element, Error, Stream};

fn gpu() -> Stream {
    Device::cuda(0).expect("these tests need a GPU").stream().unwrap()
}

/// Random values in [-1, 1), rounded to `T`.
fn random<T: Element>(rng: &mut Rng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::from_f64(rng.f64())).collect()
}

/// f64 reference of `op(a) · op(b)` with `a` stored `[m, k]` (`[k, m]` if
/// `trans_a`) and `b` stored `[k, n]` (`[n, k]` if `trans_b`).
#[allow(clippy::too_many_arguments)]
fn reference<T: Element>(m: usize, n: usize, k: usize, a: &[T], b: &[T], trans_a: bool, trans_b: bool) -> Vec<f64> {
    let at = |i: usize, p: usize| if trans_a { a[p * m + i] } else { a[i * k + p] }.to_f64();
    let bt = |p: usize, j: usize| if trans_b { b[j * k + p] } else { b[p * n + j] }.to_f64();
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

#[allow(clippy::too_many_arguments)]
fn check<T: CublasElement>(blas: &Gemm, stream: &Stream, m: usize, n: usize, k: usize, ta: bool, tb: bool, tol: f64) {
    let mut rng = Rng::new((m * 131 + n * 17 + k) as u64 + ta as u64 * 2 + tb as u64);
    let a_host = random::<T>(&mut rng, m * k);
    let b_host = random::<T>(&mut rng, k * n);
    let a = DeviceTensor::from_slice(stream, &a_host, &if ta { [k, m] } else { [m, k] }).unwrap();
    let b = DeviceTensor::from_slice(stream, &b_host, &if tb { [n, k] } else { [k, n] }).unwrap();
    let mut c = DeviceTensor::from_slice(stream, &vec![T::from_f64(f64::NAN); m * n], &[m, n]).unwrap();
    blas.gemm(m, n, k, &a, &b, &mut c, ta, tb).unwrap();
    let got = c.to_vec(stream).unwrap();
    let want = reference(m, n, k, &a_host, &b_host, ta, tb);
    if let Err(msg) = assert_close(&got, &want, tol) {
        panic!("{m}x{n}x{k} trans_a={ta} trans_b={tb} {:?}: {msg}", T::DTYPE);
    }
}

#[test]
fn gemm_matches_reference_at_awkward_sizes() {
    let stream = gpu();
    let blas = Gemm::new(&stream).unwrap();
    println!("{blas:?}, version {}", blas.version().unwrap());
    for (m, n, k) in [(1, 1, 1), (17, 33, 9), (100, 70, 50), (129, 1, 257), (1, 300, 77), (255, 129, 64)] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            check::<f16>(&blas, &stream, m, n, k, ta, tb, 2e-3);
            check::<bf16>(&blas, &stream, m, n, k, ta, tb, 1e-2);
        }
    }
}

#[test]
fn empty_sum_gives_zeros() {
    let stream = gpu();
    let blas = Gemm::new(&stream).unwrap();
    let a = DeviceTensor::<f16>::zeros(&stream, &[5, 0]).unwrap();
    let b = DeviceTensor::<f16>::zeros(&stream, &[0, 3]).unwrap();
    let mut c = DeviceTensor::from_slice(&stream, &[f16::ONE; 15], &[5, 3]).unwrap();
    blas.gemm_f16(5, 3, 0, &a, &b, &mut c, false, false).unwrap();
    assert_eq!(c.to_vec(&stream).unwrap(), vec![f16::ZERO; 15]);
}

#[test]
fn wrong_shapes_are_errors() {
    let stream = gpu();
    let blas = Gemm::new(&stream).unwrap();
    let a = DeviceTensor::<f16>::zeros(&stream, &[4, 8]).unwrap();
    let b = DeviceTensor::<f16>::zeros(&stream, &[8, 6]).unwrap();
    let mut c = DeviceTensor::<f16>::zeros(&stream, &[4, 6]).unwrap();
    blas.gemm_f16(4, 6, 8, &a, &b, &mut c, false, false).unwrap();
    let err = blas.gemm_f16(4, 6, 8, &a, &b, &mut c, false, true).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    assert!(err.to_string().contains("`b` must have shape [6, 8]"), "{err}");
    let err = blas.gemm_f16(4, 6, 8, &a, &b, &mut c, true, false).unwrap_err();
    assert!(err.to_string().contains("`a` must have shape [8, 4]"), "{err}");
}

#[test]
fn interpreter_tensors_are_a_device_mismatch() {
    let stream = gpu();
    let blas = Gemm::new(&stream).unwrap();
    let cpu = Device::interpreter().stream().unwrap();
    let a = DeviceTensor::<bf16>::zeros(&cpu, &[2, 2]).unwrap();
    let b = DeviceTensor::<bf16>::zeros(&stream, &[2, 2]).unwrap();
    let mut c = DeviceTensor::<bf16>::zeros(&stream, &[2, 2]).unwrap();
    let err = blas.gemm_bf16(2, 2, 2, &a, &b, &mut c, false, false).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch(_)), "{err}");
}

//! GEMM and FlashAttention-style kernels in the CPU interpreter at awkward
//! sizes (not multiples of the tiles), against f64 CPU references: f16 and
//! bf16, every operand orientation, both warp-policy extremes, serial and
//! pipelined K loops, and the example's kernels.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/gemm.rs"]
mod gemm;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
}
use tile::prelude::*;

fn dev() -> Device {
    Device::interpreter()
}

#[test]
fn nn_f16() {
    for (m, n, k) in [(100, 70, 50), (1, 1, 1), (65, 129, 33), (17, 200, 97)] {
        gemm::nn_f16(&dev(), m, n, k, (m + n + k) as u64).unwrap();
    }
}

#[test]
fn nn_bf16_with_f32_output() {
    for (m, n, k) in [(100, 70, 50), (3, 65, 130)] {
        gemm::nn_bf16_f32_out(&dev(), m, n, k, 2).unwrap();
    }
}

#[test]
fn b_transposed_f16() {
    for (m, n, k) in [(100, 70, 50), (64, 1, 31)] {
        gemm::nt_f16(&dev(), m, n, k, 3).unwrap();
    }
}

#[test]
fn a_transposed_bf16() {
    for (m, n, k) in [(100, 70, 50), (1, 77, 65)] {
        gemm::tn_bf16(&dev(), m, n, k, 4).unwrap();
    }
}

#[test]
fn both_transposed_with_gemm_clear_f16() {
    for (m, n, k) in [(100, 70, 50), (70, 65, 1)] {
        gemm::tt_f16(&dev(), m, n, k, 5).unwrap();
    }
}

#[test]
fn warp_policies() {
    gemm::fullcol_f16(&dev(), 45, 200, 37, 6).unwrap();
    gemm::fullrow_bf16(&dev(), 200, 45, 37, 7).unwrap();
}

#[test]
fn example_kernels() {
    gemm::example_f16(&dev(), 130, 129, 70, 8).unwrap();
    gemm::example_bf16(&dev(), 100, 70, 50, 9).unwrap();
    gemm::example_bt_f16(&dev(), 129, 130, 33, 10).unwrap();
}

#[test]
fn attention_pipelined_f16() {
    for (sq, sk) in [(100, 77), (1, 1), (64, 200), (70, 129)] {
        gemm::attention_f16(&dev(), sq, sk, (sq * sk) as u64).unwrap();
    }
}

#[test]
fn attention_serial_bf16() {
    for (sq, sk) in [(100, 77), (65, 33)] {
        gemm::attention_bf16(&dev(), sq, sk, 11).unwrap();
    }
}

/// The references are independent of the kernels; make sure they can fail:
/// a wrong product must not pass the check.
#[test]
fn reference_rejects_a_wrong_product() {
    let a = [f16::from_f32(1.0), f16::from_f32(2.0)];
    let b = [f16::from_f32(3.0), f16::from_f32(4.0)];
    // [1, 2] · [3, 4]ᵀ = 11; as [2, 1] · [1, 2] it is [[3, 4], [6, 8]].
    assert_eq!(examples::gemm::reference(1, 1, 2, &a, &b, false), vec![11.0]);
    assert_eq!(examples::gemm::reference(2, 2, 1, &a, &b, false), vec![3.0, 4.0, 6.0, 8.0]);
    assert_eq!(examples::gemm::reference_rows(2, 2, 1, &a, &b, true, true, 1..2), vec![6.0, 8.0]);
    assert!(assert_close(&[f16::from_f32(10.0)], &[11.0], gemm::TOL_F16).is_err());
    let att = gemm::attention_ref(&[f16::ONE], &[f16::ONE, f16::ZERO], &[f16::ONE, f16::ZERO], 1, 2, 1);
    let e = std::f64::consts::E;
    assert!((att[0] - e / (e + 1.0)).abs() < 1e-12, "{att:?}");
}

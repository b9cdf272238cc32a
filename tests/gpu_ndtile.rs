//! Tiles of N-dimensional tensors with squeezed dims (issue 9, item 1) on the
//! GPU (feature `gpu`) at awkward sizes, against CPU references and the
//! interpreter: the kernels of `tests/kernels/ndtile.rs`, FlashAttention
//! forward over `[b, h, s, d]` and `[b, s, h, d]` included.
//!
//! `cargo test --release --features gpu --test gpu_ndtile` on a machine with
//! an NVIDIA GPU.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/ndtile.rs"]
mod ndtile;
use ndtile::Layout;
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn cpu() -> Device {
    Device::interpreter()
}

fn agree<T: Element>(a: &[T], b: &[T], tol: f64) {
    let a: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let b: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
    let err = tile::rel_error(&a, &b);
    assert!(err <= tol, "GPU and interpreter disagree: relative difference {err:.3e} > {tol:.1e}");
}

#[test]
fn bshd_to_bhsd() {
    for (b, s, h, hd) in [(2, 45, 3, 64), (1, 1, 1, 1), (3, 70, 2, 40), (2, 1000, 8, 64)] {
        let g = ndtile::bshd_to_bhsd_check(&gpu(), b, s, h, hd, 1).unwrap();
        let c = ndtile::bshd_to_bhsd_check(&cpu(), b, s, h, hd, 1).unwrap();
        agree(&g, &c, 0.0);
    }
}

#[test]
fn strided_columns() {
    for (m, n) in [(200, 7), (1, 1), (129, 2), (3000, 33)] {
        ndtile::columns_check(&gpu(), m, n, 2).unwrap();
    }
}

#[test]
fn row_sums_into_bhs() {
    for (b, h, s) in [(2, 3, 100), (1, 1, 1), (4, 8, 1000)] {
        ndtile::row_sums_check(&gpu(), b, h, s, 3).unwrap();
    }
}

/// Both layouts against the CPU reference and the interpreter; on compute
/// capability 9.x the TMA-copy variant (K and V boxes with extent 1 on the
/// squeezed batch and head) is the first sm_90a variant and is what ran
/// (every shape here is TMA-addressable: rows of 64 f16); the
/// warp-specialized loop declines one consumer warpgroup
/// (`tests/gpu_wsloop.rs` runs it at two).
#[test]
fn attention_4d() {
    let d = gpu();
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for (b, h, sq, sk) in [(2, 2, 100, 77), (1, 1, 1, 1), (1, 3, 64, 130), (2, 8, 1000, 1537)] {
            ndtile::attention_check(&gpu(), layout, b, h, sq, sk, 4).unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        }
        let (g, _) = ndtile::attention_check(&gpu(), layout, 1, 2, 100, 77, 5).unwrap();
        let (c, _) = ndtile::attention_check(&cpu(), layout, 1, 2, 100, 77, 5).unwrap();
        agree(&g, &c, 5e-3);
    }
    if d.compute_capability().is_some_and(|cc| cc.0 == 9) {
        for meta in
            [ndtile::attention_bhsd::meta::<64, 64, 64, 128>(), ndtile::attention_bshd::meta::<64, 64, 64, 128>()]
        {
            let counts = d.launch_counts(meta);
            let sm90: Vec<(usize, &tile::KernelTarget)> =
                meta.targets.iter().enumerate().filter(|(_, t)| t.arch == "sm_90a").collect();
            assert!(
                sm90.len() >= 2
                    && sm90[0].1.schedule == "tma_copy"
                    && sm90[0].1.tensor_maps.len() == 2
                    && sm90.iter().all(|(_, t)| !t.schedule.starts_with("warp_specialized_loop")),
                "{}: not the TMA-copy variant first, or a warp-specialized loop variant",
                meta.name
            );
            assert!(counts[sm90[0].0] > 0, "{}: the TMA-copy variant never ran ({counts:?})", meta.name);
            let others: u64 = counts.iter().enumerate().filter(|(i, _)| *i != sm90[0].0).map(|(_, c)| c).sum();
            assert_eq!(others, 0, "{}: another variant ran on TMA-addressable tensors ({counts:?})", meta.name);
        }
    }
}

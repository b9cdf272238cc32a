//! Paged attention (issue 13, item 4) on the GPU (feature `gpu`): the K and
//! V tiles' origin read from a block table with pages out of order, ragged
//! lengths (loops of 0, 1, 2, 5 and many pages), against the f64 CPU
//! reference of `tests/kernels/paged.rs` and the interpreter, at 64 query
//! rows over one warpgroup (on compute capability 9.x the TMA-copy variant
//! runs: thread 0 reads the page index) and 128 rows over two (the
//! warp-specialized loop: its producer reads the page index). Checks which
//! variant ran (`Device::launch_counts`).
//!
//! `cargo test --release --features gpu --test gpu_paged` on a machine with
//! an NVIDIA GPU; also under `compute-sanitizer --tool {memcheck,racecheck,synccheck}`.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/paged.rs"]
mod paged;
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn check(two: bool) {
    let d = gpu();
    let cases: [(usize, &[usize]); 4] =
        [(5, &[0, 37, 128, 300]), (140, &[64, 65]), (1, &[0]), (64, &[8191, 1, 4096, 63, 0, 2000, 64, 65])];
    for (n, (sq, lens)) in cases.iter().enumerate() {
        let g = paged::paged_attention_check(&d, two, *sq, lens, 20 + n as u64)
            .unwrap_or_else(|e| panic!("two warpgroups {two}, sq {sq}, {lens:?}: {e}"));
        if lens.iter().all(|&l| l <= 300) {
            let c = paged::paged_attention_check(&Device::interpreter(), two, *sq, lens, 20 + n as u64).unwrap();
            let (g, c): (Vec<f64>, Vec<f64>) =
                (g.iter().map(|x| x.to_f64()).collect(), c.iter().map(|x| x.to_f64()).collect());
            let err = tile::rel_error(&g, &c);
            assert!(err <= 5e-3, "GPU and interpreter disagree: {err:.3e}");
        }
    }
    if d.compute_capability().is_some_and(|cc| cc.0 == 9) {
        let meta =
            if two { paged::paged_attention::meta::<128, 256>() } else { paged::paged_attention::meta::<64, 128>() };
        // Two warpgroups: the persistent warp-specialized loop (on by
        // default, `CompileOptions::wsloop_persistent`) unless
        // `TILE_SKIP_SCHEDULES` skips it.
        let persistent = "warp_specialized_loop_persistent";
        let skip = std::env::var("TILE_SKIP_SCHEDULES").unwrap_or_default();
        let has = meta.targets.iter().any(|t| t.schedule == persistent);
        let plain =
            if has && !skip.split(',').any(|s| s.trim() == persistent) { persistent } else { "warp_specialized_loop" };
        let want = if two { plain } else { "tma_copy" };
        let counts = d.launch_counts(meta);
        let ran: Vec<&str> =
            meta.targets.iter().zip(&counts).filter(|(_, n)| **n > 0).map(|(t, _)| t.schedule).collect();
        assert_eq!(ran, [want], "{}", meta.name);
    }
}

#[test]
fn paged_attention_one_warpgroup() {
    check(false);
}

#[test]
fn paged_attention_two_warpgroups() {
    check(true);
}

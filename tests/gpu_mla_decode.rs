//! MLA decode (`examples/kernels/mla_decode.rs`) on the GPU (feature `gpu`)
//! against the CPU f64 reference: seqlens 1, 63, 64, 65, 0 and 8191 in one
//! ragged batch, s_q 1 and 2, h_q 16, 20, 64 and 128, f16 and bf16, paged
//! (pages shuffled, unused rows NaN) and contiguous, outputs poisoned with
//! NaN; an empty split; the device scheduler against the host one on ragged
//! batches of the GPU's SM parts; a decode step after another with the same
//! workspace and metadata (warm: no allocation, new seqlens); the GPU's SM
//! parts with every row checked; scores that jump between key blocks.
//! Large sizes are checked against PyTorch in float32 by `run.sh mla`
//! (`scripts/mla_check.py`).
//! `TILE_TEST_SMALL=1` (the sanitizer runs): short contexts, h_q 16 and 20.
//!
//! `cargo test --release --features gpu --test gpu_mla_decode`
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "../examples/kernels/mla_decode.rs"]
mod mla;
use mla::{Case, Inputs, Metadata, MlaElement, Tiles};
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn small() -> bool {
    std::env::var_os("TILE_TEST_SMALL").is_some()
}

fn tol<T: Element>() -> f64 {
    if T::DTYPE == tile::ir::DType::BF16 {
        4e-3
    } else {
        1e-3
    }
}

/// Every row of the batches of at most 1000 keys, 40 random rows of the
/// longer ones (the f64 reference of 8191 keys is slow on the CPU).
fn rows(c: &Case, seed: u64) -> Vec<(usize, usize, usize)> {
    let mut rng = common::Rng::new(seed);
    let mut out = vec![];
    for (b, &s) in c.seqlens.iter().enumerate() {
        if s <= 1000 {
            out.extend((0..c.s_q).flat_map(|t| (0..c.h_q).map(move |h| (b, t, h))));
        } else {
            out.push((b, c.s_q - 1, c.h_q - 1));
            for _ in 0..40 {
                let t = (rng.next_u64() % c.s_q as u64) as usize;
                out.push((b, t, (rng.next_u64() % c.h_q as u64) as usize));
            }
        }
    }
    out
}

fn check<T: MlaElement>(dev: &Device, c: &Case, seed: u64) {
    let st = dev.stream().unwrap();
    let mut x = Inputs::<T>::new(&st, c, seed).unwrap();
    x.check_metadata(&st, c).unwrap_or_else(|e| panic!("{e}"));
    let hopper = mla::hopper_tiles(&st, Tiles::Auto);
    let meta = match (c.paged, mla::split_seesaw(&st, Tiles::Auto, c.paged, c.s_q, c.h_q)) {
        (true, true) => T::seesaw().1,
        (true, false) => T::paged(hopper, false).1,
        (false, _) => T::contiguous(hopper, false).1,
    };
    let before = dev.launch_counts(meta);
    x.run(&st, c, Tiles::Auto).unwrap();
    x.check(&st, c, Some(&rows(c, seed)), tol::<T>()).unwrap_or_else(|e| panic!("{e}"));
    let after = dev.launch_counts(meta);
    assert!(after.iter().zip(before.iter().chain(std::iter::repeat(&0))).any(|(a, b)| a > b), "{c:?}: no variant ran");
}

fn combinations<T: MlaElement>() {
    let dev = gpu();
    let sms = dev.multiprocessor_count().unwrap() as usize;
    let seqlens = if small() { vec![1, 63, 64, 65, 0, 300] } else { vec![1, 63, 64, 65, 0, 8191] };
    let heads: &[usize] = if small() { &[16, 20] } else { &[16, 20, 64, 128] };
    for paged in [true, false] {
        for s_q in [1, 2] {
            for &h_q in heads {
                // The GPU's SM parts, and few parts (long chunks).
                for num_parts in [mla::num_sm_parts(sms, s_q, h_q), 3] {
                    let c = Case { seqlens: seqlens.clone(), s_q, h_q, paged, num_parts };
                    check::<T>(&dev, &c, (s_q * 100 + h_q) as u64);
                }
            }
        }
    }
}

#[test]
fn every_combination_f16() {
    combinations::<f16>();
}

#[test]
fn every_combination_bf16() {
    combinations::<bf16>();
}

/// The GPU's SM parts (132 on the H200: the 8191 keys in 64 chunks of two
/// key blocks, most chunks unused) with every row checked, not sampled:
/// what `every_combination_*` checks on 41 sampled rows of the long
/// sequence (whose repeats the reference once counted several times: the
/// 0.12 "defect" of session 9, `mla_decode_interp::repeated_rows`).
#[test]
fn many_parts_every_row() {
    let dev = gpu();
    let sms = dev.multiprocessor_count().unwrap() as usize;
    let seqlens = if small() { vec![1, 63, 64, 65, 0, 700] } else { vec![1, 63, 64, 65, 0, 8191] };
    for paged in [true, false] {
        for s_q in [1, 2] {
            let num_parts = mla::num_sm_parts(sms, s_q, 16);
            let c = Case { seqlens: seqlens.clone(), s_q, h_q: 16, paged, num_parts };
            let st = dev.stream().unwrap();
            let mut x = Inputs::<f16>::new(&st, &c, 40 + s_q as u64).unwrap();
            x.check_metadata(&st, &c).unwrap_or_else(|e| panic!("{e}"));
            x.run(&st, &c, Tiles::Auto).unwrap();
            x.check(&st, &c, None, tol::<f16>()).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// The split kernel in clusters of two blocks (`Tiles::HopperPairs` where
/// the 64-row blocks pair up, here h_q 64 with s_q 2 and h_q 128 with
/// s_q 1): the two row blocks of a chunk load each key block once, each
/// half of every box multicast to both. Every row checked, paged and
/// contiguous, the GPU's SM parts and few parts (long chunks), chunks of 0
/// to 5 key blocks (small) or 128; and the warp-specialized loop of the
/// clustered instance is what ran (the multicast is that variant's). An
/// odd number of row blocks (h_q 20) takes the unclustered instance.
#[test]
fn clusters_of_two_row_blocks() {
    let dev = gpu();
    let st = dev.stream().unwrap();
    let sms = dev.multiprocessor_count().unwrap() as usize;
    let seqlens = if small() { vec![1, 63, 64, 65, 0, 300] } else { vec![1, 63, 64, 65, 0, 8191] };
    let hopper = mla::hopper_tiles(&st, Tiles::Auto);
    assert!(!mla::split_cluster(&st, Tiles::HopperPairs, 1, 20) && !mla::split_cluster(&st, Tiles::Auto, 1, 128));
    for paged in [true, false] {
        for (s_q, h_q) in [(2, 64), (1, 128)] {
            assert_eq!(mla::split_cluster(&st, Tiles::HopperPairs, s_q, h_q), hopper);
            let meta = if paged { f16::paged(hopper, hopper).1 } else { f16::contiguous(hopper, hopper).1 };
            for num_parts in [mla::num_sm_parts(sms, s_q, h_q), 3] {
                let c = Case { seqlens: seqlens.clone(), s_q, h_q, paged, num_parts };
                let mut x = Inputs::<f16>::new(&st, &c, 50 + h_q as u64).unwrap();
                let before = dev.launch_counts(meta);
                x.run(&st, &c, Tiles::HopperPairs).unwrap();
                let after = dev.launch_counts(meta);
                x.check(&st, &c, None, tol::<f16>()).unwrap_or_else(|e| panic!("{e}"));
                let ran: Vec<&str> = meta
                    .targets
                    .iter()
                    .zip(after.iter().zip(before.iter().chain(std::iter::repeat(&0))))
                    .filter(|(_, (a, b))| a > b)
                    .map(|(t, _)| t.schedule)
                    .collect();
                if hopper {
                    assert_eq!(ran, ["warp_specialized_loop"], "{c:?}");
                }
            }
        }
    }
}

/// An empty split and a split a row sees nothing of contribute nothing (see
/// the interpreter test of the same name), and Portable tiles agree.
#[test]
fn empty_splits() {
    let dev = gpu();
    let st = dev.stream().unwrap();
    let c = Case { seqlens: vec![65, 0], s_q: 2, h_q: 16, paged: true, num_parts: 2 };
    for tiles in [Tiles::Auto, Tiles::Portable] {
        let mut x = Inputs::<f16>::new(&st, &c, 3).unwrap();
        let chunks = [[0, 0, 1, 0], [0, 1, 1, 0], [0, 1, 2, 1], [1, 0, 0, 1]];
        x.metadata = Metadata {
            chunks: DeviceTensor::from_slice(&st, chunks.as_flattened(), &[4, 4]).unwrap(),
            chunk_begin: DeviceTensor::from_slice(&st, &[0, 3, 4], &[3]).unwrap(),
            // Any permutation of the chunks computes the same.
            order: DeviceTensor::from_slice(&st, &[2, 0, 3, 1], &[4]).unwrap(),
            chunk_order: mla::ChunkOrder::LongestFirst,
            batch: 2,
            num_parts: 2,
        };
        x.run(&st, &c, tiles).unwrap();
        x.check(&st, &c, None, 1e-3).unwrap_or_else(|e| panic!("{e}"));
        let lse = x.lse.to_vec(&st).unwrap();
        assert!(lse[..32].iter().all(|l| l.is_finite()), "{lse:?}");
        assert!(lse[32..].iter().all(|&l| l == f32::NEG_INFINITY), "{lse:?}");
    }
}

/// The device scheduler is the host's on ragged batches of 1 to 2,100
/// requests (more than one shared-memory segment of 1,024 batches), lengths
/// at the key-block edges or random, over the GPU's SM parts (h_q 128: 2
/// row blocks; b 3 at h_q 16: more parts than work).
#[test]
fn scheduler_matches_the_host() {
    let dev = gpu();
    let st = dev.stream().unwrap();
    let sms = dev.multiprocessor_count().unwrap() as usize;
    let mut rng = common::Rng::new(17);
    let edges = [0, 1, 63, 64, 65, 8191];
    for (i, b) in [1, 2, 3, 6, 64, 127, 128, 129, 300, 1500, 2100].into_iter().enumerate() {
        let seqlens: Vec<i32> = (0..b)
            .map(|_| match i % 2 {
                0 => edges[(rng.next_u64() % 6) as usize],
                _ if rng.next_u64() % 7 == 0 => 0,
                _ => (rng.next_u64() % 20000) as i32,
            })
            .collect();
        let parts = mla::num_sm_parts(sms, 1, if b == 3 { 16 } else { 128 });
        let d = DeviceTensor::from_slice(&st, &seqlens, &[b]).unwrap();
        let m = Metadata::compute(&st, &d, parts).unwrap();
        let (chunks, begin) = mla::schedule(&seqlens, parts);
        assert_eq!(m.chunks.to_vec(&st).unwrap(), chunks.iter().flatten().copied().collect::<Vec<_>>(), "b {b}");
        assert_eq!(m.chunk_begin.to_vec(&st).unwrap(), begin, "b {b}");
        assert!(m.order.to_vec(&st).unwrap() == mla::tile_order(&chunks), "b {b}: order");
    }
}

/// Two decode steps with one workspace: the second (one more key per
/// request, metadata updated on the device) is right too, and the
/// workspace did not grow.
#[test]
fn second_step_reuses_the_workspace() {
    let dev = gpu();
    let st = dev.stream().unwrap();
    let c = Case { seqlens: vec![130, 64, 1], s_q: 1, h_q: 64, paged: true, num_parts: 8 };
    let mut x = Inputs::<bf16>::new(&st, &c, 5).unwrap();
    x.run(&st, &c, Tiles::Auto).unwrap();
    x.check(&st, &c, None, tol::<bf16>()).unwrap_or_else(|e| panic!("{e}"));
    let rows = x.workspace.rows();
    // seqlens one shorter each: the same cache, a new step's metadata.
    let c2 = Case { seqlens: vec![129, 63, 0], ..c.clone() };
    x.seqlens = DeviceTensor::from_slice(&st, &c2.seqlens, &[3]).unwrap();
    x.metadata.update(&st, &x.seqlens).unwrap();
    x.run(&st, &c2, Tiles::Auto).unwrap();
    x.check(&st, &c2, None, tol::<bf16>()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(x.workspace.rows(), rows);
}

/// Scores that jump between key blocks (the interpreter test of the same
/// name: keys scaled by `1 + 8·(k mod 4)` in key block `k`, or by the
/// inverse), at long contexts with the GPU's SM parts, f16 and bf16.
#[test]
fn scores_that_jump() {
    fn run<T: MlaElement>(dev: &Device, paged: bool, grow: bool) {
        let sms = dev.multiprocessor_count().unwrap() as usize;
        let seqlens = if small() { vec![200, 70, 1] } else { vec![8191, 1000, 1] };
        let c = Case { seqlens, s_q: 2, h_q: 64, paged, num_parts: mla::num_sm_parts(sms, 2, 64) };
        let st = dev.stream().unwrap();
        let mut x = Inputs::<T>::new(&st, &c, 77).unwrap();
        x.scale_keys(&st, mla::jumping_keys(grow)).unwrap();
        x.run(&st, &c, Tiles::Auto).unwrap();
        x.check(&st, &c, Some(&rows(&c, 77)), tol::<T>()).unwrap_or_else(|e| panic!("paged {paged}, grow {grow}: {e}"));
    }
    let dev = gpu();
    for paged in [true, false] {
        for grow in [true, false] {
            run::<f16>(&dev, paged, grow);
            run::<bf16>(&dev, paged, grow);
        }
    }
}

/// The seesaw split kernel (`Tiles::Seesaw`: two key blocks per
/// iteration, one per warpgroup, in one-stage rings of their own) on the
/// paged cache: seqlens 1, 63, 64, 65, 0 and 8191 (or 300), s_q 1 and 2,
/// h_q 16, 20, 64 and 128, f16 and bf16, the GPU's SM parts (chunks of one
/// block: the odd count's second block masked) and few parts (long
/// chunks), every row of the short sequences checked; and its
/// warp-specialized variant is what ran.
#[test]
fn seesaw() {
    let dev = gpu();
    let st = dev.stream().unwrap();
    if !mla::hopper_tiles(&st, Tiles::Auto) {
        return;
    }
    let sms = dev.multiprocessor_count().unwrap() as usize;
    let seqlens = if small() { vec![1, 63, 64, 65, 0, 300] } else { vec![1, 63, 64, 65, 0, 8191] };
    let heads: &[usize] = if small() { &[16, 20] } else { &[16, 20, 64, 128] };
    for s_q in [1, 2] {
        for &h_q in heads {
            for num_parts in [mla::num_sm_parts(sms, s_q, h_q), 3] {
                let c = Case { seqlens: seqlens.clone(), s_q, h_q, paged: true, num_parts };
                for bf in [false, true] {
                    let seed = (s_q * 1000 + h_q + num_parts) as u64;
                    let meta = if bf { bf16::seesaw().1 } else { f16::seesaw().1 };
                    let ws = meta.targets.iter().position(|t| t.schedule == "warp_specialized_loop");
                    let before = dev.launch_counts(meta);
                    if bf {
                        let mut x = Inputs::<bf16>::new(&st, &c, seed).unwrap();
                        x.run(&st, &c, Tiles::Seesaw).unwrap();
                        x.check(&st, &c, Some(&rows(&c, seed)), tol::<bf16>()).unwrap_or_else(|e| panic!("{e}"));
                    } else {
                        let mut x = Inputs::<f16>::new(&st, &c, seed).unwrap();
                        x.run(&st, &c, Tiles::Seesaw).unwrap();
                        x.check(&st, &c, Some(&rows(&c, seed)), tol::<f16>()).unwrap_or_else(|e| panic!("{e}"));
                    }
                    let after = dev.launch_counts(meta);
                    let ran: Vec<u64> =
                        after.iter().zip(before.iter().chain(std::iter::repeat(&0))).map(|(a, b)| a - b).collect();
                    assert!(ws.is_some_and(|i| ran.get(i).is_some_and(|&n| n > 0)), "{c:?}: {ran:?}");
                }
            }
        }
    }
}

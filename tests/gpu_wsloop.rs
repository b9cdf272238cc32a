//! The warp-specialized loop schedule (issue 9, item 2) on the GPU
//! (feature `gpu`): a producer warpgroup issuing a pipelined loop's TMA
//! boxes into an mbarrier ring, the kernel's own warpgroups running the
//! rest. The kernels of `tests/kernels/ndtile.rs`: FlashAttention forward
//! over 4-D tensors in both layouts at head dim 64 (128 threads) and 128
//! (256 threads, 128 query rows, key blocks of 64 and 128), and a plain sum
//! over `n` pipelined tiles read by ordinary loads (loops of 0, 1, 2, 3 and
//! more iterations with the tensors' sizes unchanged), each against its CPU
//! reference on awkward sizes (one and two key blocks, lengths off the
//! block, s_q ≠ s_k), outputs poisoned first. On compute capability 9.x the
//! `warp_specialized_loop_persistent` variant (on by default:
//! `CompileOptions::wsloop_persistent`; the plain `warp_specialized_loop`
//! when `TILE_SKIP_SCHEDULES` names it) is the first
//! sm_90a one and is the one that ran (`Device::launch_counts`) at head dim 128 (two consumer
//! warpgroups, with their ping-pong; with key blocks of 64, `[b, h, s, d]`,
//! Q·Kᵀ issued one iteration ahead too: `CompileOptions::ping_pong_lookahead`)
//! and for the sum; Q comes by TMA from
//! the producer, K and V each on a ring of their own. At head dim 64 (one
//! consumer warpgroup) the plan declines (the TMA-copy variant's blocks per
//! SM overlap softmax and wgmma better, BENCHMARKS.md): `tma_copy` is first
//! and is what ran.
//!
//! `cargo test --release --features gpu --test gpu_wsloop` on a machine with
//! an NVIDIA GPU (a hang here is a deadlock of the schedule).
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

/// The schedules `TILE_SKIP_SCHEDULES` names (comma-separated).
fn skipped() -> Vec<String> {
    std::env::var("TILE_SKIP_SCHEDULES")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// On 9.x: the first sm_90a variant of `meta` that `TILE_SKIP_SCHEDULES`
/// leaves is the warp-specialized loop's (`T + 128` threads, `maps` tensor
/// maps): the persistent one where the kernel has it (on by default:
/// `CompileOptions::wsloop_persistent`), and only it ran.
fn ran_wsloop(d: &Device, meta: &'static tile::KernelMeta, maps: usize) {
    let persistent = "warp_specialized_loop_persistent";
    let has = meta.targets.iter().any(|t| t.schedule == persistent);
    let skip = skipped();
    let want = if has && !skip.iter().any(|s| s == persistent) { persistent } else { "warp_specialized_loop" };
    ran_first(d, meta, want, maps);
}

/// On 9.x: the first sm_90a variant of `meta` that `TILE_SKIP_SCHEDULES`
/// leaves is `schedule`'s (with `maps` tensor maps), and only it ran.
fn ran_first(d: &Device, meta: &'static tile::KernelMeta, schedule: &str, maps: usize) {
    if d.compute_capability().is_none_or(|cc| cc.0 != 9) {
        eprintln!("{}: not a 9.x device, the sm_90a variants are not tried", meta.name);
        return;
    }
    let counts = d.launch_counts(meta);
    let skip = skipped();
    let sm90: Vec<(usize, &tile::KernelTarget)> = meta
        .targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.arch == "sm_90a" && !skip.iter().any(|s| s == t.schedule))
        .collect();
    let first = sm90.first().map(|(_, t)| *t);
    assert!(
        first.is_some_and(|t| t.schedule == schedule && t.tensor_maps.len() == maps),
        "{}: the first sm_90a variant is not {schedule} with {maps} tensor maps: {:?}",
        meta.name,
        first.map(|t| t.schedule)
    );
    assert!(counts[sm90[0].0] > 0, "{}: {schedule} never ran ({counts:?})", meta.name);
    let others: u64 = counts.iter().enumerate().filter(|(i, _)| *i != sm90[0].0).map(|(_, c)| c).sum();
    assert_eq!(others, 0, "{}: another variant ran on TMA-addressable tensors ({counts:?})", meta.name);
}

/// (b, h, s_q, s_k): one key block (s_k ≤ 64 or 128), two, lengths off the
/// block, s_q ≠ s_k both ways, and a larger one unless `TILE_TEST_SMALL` is
/// set (sanitizer runs); the CPU reference in f64 is what takes the time.
fn shapes() -> Vec<(usize, usize, usize, usize)> {
    let mut v =
        vec![(1, 1, 1, 1), (1, 2, 64, 64), (2, 2, 100, 77), (1, 3, 64, 130), (1, 2, 300, 128), (2, 1, 129, 255)];
    if std::env::var_os("TILE_TEST_SMALL").is_none() {
        v.push((2, 3, 700, 1000));
    }
    v
}

#[test]
fn attention_d64() {
    let d = gpu();
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for (i, (b, h, sq, sk)) in shapes().into_iter().enumerate() {
            ndtile::attention_check(&d, layout, b, h, sq, sk, 40 + i as u64)
                .unwrap_or_else(|e| panic!("{layout:?} b{b} h{h} sq{sq} sk{sk}: {e}"));
        }
    }
    // One consumer warpgroup: the plan declines, the TMA-copy variant (K and V maps) ran.
    ran_first(&d, ndtile::attention_bhsd::meta::<64, 64, 64, 128>(), "tma_copy", 2);
    ran_first(&d, ndtile::attention_bshd::meta::<64, 64, 64, 128>(), "tma_copy", 2);
}

#[test]
fn attention_d128() {
    let d = gpu();
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for (i, (b, h, sq, sk)) in shapes().into_iter().enumerate() {
            ndtile::attention_check_d128(&d, layout, b, h, sq, sk, 50 + i as u64)
                .unwrap_or_else(|e| panic!("{layout:?} d128 b{b} h{h} sq{sq} sk{sk}: {e}"));
        }
    }
    ran_wsloop(&d, ndtile::attention_bhsd::meta::<128, 64, 128, 256>(), 3);
    ran_wsloop(&d, ndtile::attention_bshd::meta::<128, 128, 128, 256>(), 3);
}

/// Loops of 0, 1, 2, 3, 4 and 9 iterations (the parities wrap several
/// times), with rows off the block.
#[test]
fn pipelined_sum_any_trip_count() {
    let d = gpu();
    for (m, n, extra) in [(70, 0, 64), (70, 1, 0), (64, 2, 4), (130, 3, 12), (1, 4, 0), (1000, 9, 60)] {
        ndtile::pipelined_sum_check(&d, m, n, extra, (m + n) as u64)
            .unwrap_or_else(|e| panic!("m{m} n{n} extra{extra}: {e}"));
    }
    ran_wsloop(&d, &ndtile::pipelined_sum::META, 1);
}

//! FlashAttention forward (`examples/kernels/flash_attention.rs`) on the GPU
//! (feature `gpu`): every combination (layouts, f16/bf16, head dims 64, 128
//! and 256, causal and not, MHA and GQA, s_q ≠ s_k, lengths off the block,
//! rows that see no key) at moderate sizes against the CPU f64 reference,
//! the variant that ran, key loops of 0, 1 and 2 blocks, and causal skipping
//! the blocks above the diagonal (about half the time of non-causal).
//! Large sizes are checked against PyTorch SDPA by `run.sh attention`
//! (`scripts/attention_check.py`).
//!
//! `cargo test --release --features gpu --test gpu_flash_attention`
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "../examples/kernels/flash_attention.rs"]
mod fa;
use fa::{AttentionElement, Case, Inputs, Layout, Tiles};
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn small() -> bool {
    std::env::var_os("TILE_TEST_SMALL").is_some()
}

fn tol<T: Element>() -> f64 {
    if T::DTYPE == tile::ir::DType::BF16 {
        2e-2
    } else {
        5e-3
    }
}

/// Runs `c` with `tiles` and checks every row; on compute capability 9.x
/// also that a variant with tensor maps (TMA) ran, as the tensors are
/// TMA-addressable (launch counts are per kernel: tests running at the same
/// time may add launches of other variants, so this asks that one of those
/// that ran uses TMA and names them all when none does).
fn check_with<T: AttentionElement>(dev: &Device, c: &Case, seed: u64, tiles: Tiles) {
    let st = dev.stream().unwrap();
    let (_, meta) = T::instance_for(&st, c.layout, c.d, tiles, c.causal).unwrap();
    let before = dev.launch_counts(meta);
    let mut x = Inputs::<T>::new(&st, c, seed).unwrap();
    x.run_with(&st, c, tiles).unwrap();
    x.check(&st, c, None, tol::<T>()).unwrap_or_else(|e| panic!("{e}"));
    let after = dev.launch_counts(meta);
    let ran: Vec<_> =
        meta.targets.iter().zip(after.iter().zip(&before)).filter(|(_, (a, b))| a > b).map(|(t, _)| t).collect();
    let names: Vec<String> = ran.iter().map(|t| format!("{} {}", t.arch, t.schedule)).collect();
    assert!(!ran.is_empty(), "{c:?}: no variant of {} ran", meta.name);
    if dev.compute_capability().is_some_and(|cc| cc.0 == 9) {
        assert!(
            ran.iter().any(|t| !t.tensor_maps.is_empty()),
            "{c:?}: TMA-addressable tensors on 9.x, but only variants without TMA ran: {names:?}"
        );
    }
}

fn check<T: AttentionElement>(dev: &Device, c: &Case, seed: u64) {
    check_with::<T>(dev, c, seed, Tiles::Auto);
}

fn all_combinations<T: AttentionElement>(seed: u64) {
    let dev = gpu();
    let shapes: &[(usize, usize, usize, usize, usize)] = if small() {
        &[(1, 2, 1, 200, 45), (1, 2, 2, 45, 70)]
    } else {
        // (b, h, h_kv, s_q, s_k): MHA, GQA 2:1 and 4:1, s_q < s_k, s_q > s_k.
        &[(2, 4, 4, 333, 333), (2, 4, 2, 333, 517), (1, 8, 2, 517, 333), (3, 2, 1, 1, 200)]
    };
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for d in fa::HEAD_DIMS {
            for causal in [false, true] {
                for &(b, h, h_kv, s_q, s_k) in shapes {
                    let c = Case { layout, b, h, h_kv, s_q, s_k, d, causal };
                    check::<T>(&dev, &c, seed);
                    // d64's and d256's tiles differ between Hopper (the
                    // default here) and sm_80; d64 has a second Hopper
                    // instance (three warpgroups, P·V deferred).
                    if d != 128 {
                        check_with::<T>(&dev, &c, seed, Tiles::Portable);
                    }
                    if d == 64 && dev.compute_capability().is_some_and(|cc| cc.0 == 9) {
                        check_with::<T>(&dev, &c, seed, Tiles::Blocks(192, 64));
                    }
                }
            }
        }
    }
}

#[test]
fn every_combination_f16() {
    all_combinations::<f16>(1);
}

#[test]
fn every_combination_bf16() {
    all_combinations::<bf16>(2);
}

/// Key loops of 0 (causal, s_q > s_k: the first query blocks see no key), 1
/// and 2 blocks, and one query row.
#[test]
fn short_loops() {
    let dev = gpu();
    for d in fa::HEAD_DIMS {
        for (s_q, s_k, causal) in [(300, 20, true), (1, 1, false), (64, 64, true), (1, 33, true), (128, 100, false)] {
            for layout in [Layout::Bhsd, Layout::Bshd] {
                let c = Case { layout, b: 2, h: 3, h_kv: 1, s_q, s_k, d, causal };
                check::<f16>(&dev, &c, 5);
                if d == 64 && dev.compute_capability().is_some_and(|cc| cc.0 == 9) {
                    check_with::<f16>(&dev, &c, 5, Tiles::Blocks(192, 64));
                }
            }
        }
    }
}

/// Rows to check of `c`: the first and last of every 128-row query block
/// (a tile of the persistent variant; a tile lost or run twice by its
/// scheduler shows in both) and of every 64-row half, for every (b, h).
fn tile_rows(c: &Case) -> Vec<(usize, usize, usize)> {
    let mut rows = Vec::new();
    for b in 0..c.b {
        for h in 0..c.h {
            for start in (0..c.s_q).step_by(64) {
                rows.push((b, h, start));
                rows.push((b, h, (start + 63).min(c.s_q - 1)));
            }
        }
    }
    rows.dedup();
    rows
}

/// Whether `TILE_SKIP_SCHEDULES` names the persistent warp-specialized loop.
fn persistent_skipped() -> bool {
    std::env::var("TILE_SKIP_SCHEDULES")
        .is_ok_and(|s| s.split(',').any(|x| x.trim() == "warp_specialized_loop_persistent"))
}

/// The grids a persistent variant meets (`warp_specialized_loop_persistent`,
/// on by default, `CompileOptions::wsloop_persistent`: the first sm_90a
/// variant of the head-dim 128 instance, two consumer warpgroups over
/// 128-row query blocks, launched with as many blocks as the SMs hold, its
/// tiles taken from the dynamic scheduler's counter, or by the static
/// stride under `TILE_PERSISTENT_STATIC=1`; head dim 256 keeps the plain
/// variant, whose plan says why) on grids of fewer tiles than SMs (one tile
/// per block, most blocks idle), of twice the SMs (two per block) and more
/// (three or four per block, uneven), causal with s_q > s_k (tiles whose
/// key loop is empty: rows that see no key) and s_q < s_k, GQA, both
/// layouts, against the f64 reference on the first and last rows of every
/// 64-row block (`tile_rows`); on 9.x, where the instance has a persistent
/// variant, it is the one that ran (unless `TILE_SKIP_SCHEDULES` skips it).
#[test]
fn persistent_tiles_per_block() {
    let dev = gpu();
    let sms = dev.multiprocessor_count().unwrap_or(132) as usize;
    // `n` query blocks of 128 rows, the last ragged.
    let rows = |n: usize| 128 * n - 5;
    let mut shapes = vec![
        (1, 3, 3, rows(2), 300, true),
        (1, 2, 1, rows(sms), 200, false),
        (1, 2, 2, rows(sms), rows(sms) + 40, true),
    ];
    if !small() {
        shapes.push((2, 3, 1, rows(sms / 2 + 3), 333, true));
    }
    let skipped = persistent_skipped();
    let st = dev.stream().unwrap();
    for d in [128, 256] {
        for layout in [Layout::Bhsd, Layout::Bshd] {
            for &(b, h, h_kv, s_q, s_k, causal) in &shapes {
                let c = Case { layout, b, h, h_kv, s_q, s_k, d, causal };
                let (_, meta) =
                    <f16 as AttentionElement>::instance(layout, d, fa::hopper_tiles(&st, Tiles::Auto)).unwrap();
                let before = dev.launch_counts(meta);
                let mut x = Inputs::<f16>::new(&st, &c, 11).unwrap();
                x.run(&st, &c).unwrap();
                x.check(&st, &c, Some(&tile_rows(&c)), tol::<f16>()).unwrap_or_else(|e| panic!("{e}"));
                let after = dev.launch_counts(meta);
                let persistent = meta.targets.iter().position(|t| t.schedule == "warp_specialized_loop_persistent");
                assert_eq!(persistent.is_some(), d == 128, "{c:?}: the persistent variant (head dim 128 only)");
                if let (Some(i), true) = (persistent, dev.compute_capability().is_some_and(|cc| cc.0 == 9) && !skipped)
                {
                    assert!(after[i] > before[i], "{c:?}: the persistent variant did not run ({after:?})");
                }
            }
        }
    }
}

/// The dynamic tile scheduler's counter is the stream's, zeroed before each
/// launch: two launches in a row on one stream (the second's zeroing waits
/// for the first kernel) and two at once on two streams (a counter each)
/// are all right, each with its own inputs, checked after all were issued.
#[test]
fn persistent_launches_in_a_row_and_on_two_streams() {
    let dev = gpu();
    let sms = dev.multiprocessor_count().unwrap_or(132) as usize;
    let c =
        Case { layout: Layout::Bhsd, b: 1, h: 2, h_kv: 2, s_q: 128 * (sms + 7) - 3, s_k: 500, d: 128, causal: true };
    let st = dev.stream().unwrap();
    let (_, meta) = <f16 as AttentionElement>::instance(c.layout, c.d, fa::hopper_tiles(&st, Tiles::Auto)).unwrap();
    let before = dev.launch_counts(meta);
    let rows = tile_rows(&c);
    let mut a = Inputs::<f16>::new(&st, &c, 21).unwrap();
    let mut b = Inputs::<f16>::new(&st, &c, 22).unwrap();
    a.run(&st, &c).unwrap();
    b.run(&st, &c).unwrap();
    a.check(&st, &c, Some(&rows), tol::<f16>()).unwrap_or_else(|e| panic!("first of two on one stream: {e}"));
    b.check(&st, &c, Some(&rows), tol::<f16>()).unwrap_or_else(|e| panic!("second of two on one stream: {e}"));
    let (s1, s2) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
    let mut x = Inputs::<f16>::new(&s1, &c, 23).unwrap();
    let mut y = Inputs::<f16>::new(&s2, &c, 24).unwrap();
    for _ in 0..3 {
        x.run(&s1, &c).unwrap();
        y.run(&s2, &c).unwrap();
    }
    x.check(&s1, &c, Some(&rows), tol::<f16>()).unwrap_or_else(|e| panic!("stream 1 of 2: {e}"));
    y.check(&s2, &c, Some(&rows), tol::<f16>()).unwrap_or_else(|e| panic!("stream 2 of 2: {e}"));
    let after = dev.launch_counts(meta);
    let persistent = meta.targets.iter().position(|t| t.schedule == "warp_specialized_loop_persistent");
    if let (Some(i), true) = (persistent, dev.compute_capability().is_some_and(|cc| cc.0 == 9) && !persistent_skipped())
    {
        assert!(after[i] >= before[i] + 8, "the persistent variant did not run every time ({before:?} -> {after:?})");
    }
}

/// Causal at full speed: the blocks above the diagonal are never computed,
/// so causal takes well under the time of non-causal (the FLOPs are half).
#[test]
fn causal_skips_blocks_above_the_diagonal() {
    if small() {
        return;
    }
    let dev = gpu();
    let st = dev.stream().unwrap();
    for d in fa::HEAD_DIMS {
        let mut ms = vec![];
        for causal in [false, true] {
            let c = Case { layout: Layout::Bhsd, b: 2, h: 16, h_kv: 16, s_q: 4096, s_k: 4096, d, causal };
            let mut x = Inputs::<f16>::new(&st, &c, 9).unwrap();
            ms.push(bench(&st, 3, 10, || x.run(&st, &c)).unwrap().median_ms);
        }
        assert!(
            ms[1] < 0.7 * ms[0],
            "d{d}: causal {:.3} ms vs full {:.3} ms: blocks above the diagonal ran?",
            ms[1],
            ms[0]
        );
    }
}

/// What `forward` refuses, as errors that say what to fix.
#[test]
fn refusals() {
    let dev = gpu();
    let st = dev.stream().unwrap();
    let t = |shape: &[usize]| DeviceTensor::<f16>::zeros(&st, shape).unwrap();
    let (q, k) = (t(&[1, 4, 8, 64]), t(&[1, 3, 8, 64]));
    let mut o = t(&[1, 4, 8, 64]);
    let e = fa::forward(&st, &q, &k, &k, &mut o, fa::Options::default()).unwrap_err();
    assert!(e.to_string().contains("must divide"), "{e}");
    let (q, k) = (t(&[1, 4, 8, 96]), t(&[1, 4, 8, 96]));
    let mut o = t(&[1, 4, 8, 96]);
    let e = fa::forward(&st, &q, &k, &k, &mut o, fa::Options::default()).unwrap_err();
    assert!(e.to_string().contains("head dim 96"), "{e}");
}

/// Empty shapes: no query rows is nothing to do; no keys gives o = 0 and
/// lse = −∞.
#[test]
fn empty_shapes() {
    fa::check_empty_shapes(&gpu().stream().unwrap());
}

/// Causal skips the key blocks above the diagonal, for every instance:
/// with the values of the keys past the first query block's reach poisoned
/// with NaN, its rows are still right, which they would not be if a block
/// past their reach were loaded and masked (`0 · NaN`).
#[test]
fn causal_never_reads_blocks_above_the_diagonal() {
    fa::check_causal_never_reads_above_the_diagonal(&gpu().stream().unwrap());
}

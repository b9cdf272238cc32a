//! GEMM and FlashAttention-style kernels in the CPU interpreter at awkward
//! sizes (not multiples of the tiles), against f64 CPU references: f16 and
//! bf16, every operand orientation, both warp-policy extremes, serial and
//! pipelined K loops, and the example's kernels; the Hopper-shaped kernels
//! (issue 4: 128-row tiles, BK = 64, every orientation, 2 to 4 stages, one
//! consumer warpgroup) on small shapes that cut every tile dimension.
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

/// The Tile IR that the macro embeds for the attention kernel and for the
/// example's matmul, printed, is the text the compiler's own tests use
/// (`tile_testkit`): the DSL and IR-text copies of each kernel cannot drift apart.
#[test]
fn embedded_ir_is_the_shared_text() {
    let printed = |ir: &str| {
        let kernel: tile::ir::Kernel = serde_json::from_str(ir).expect("embedded Tile IR parses");
        tile::ir::print::print_kernel(&kernel).trim_end().to_string()
    };
    assert_eq!(printed(gemm::attention::META.ir), tile_testkit::ATTENTION);
    // The example's kernels are launched as programmatic dependents.
    let example = tile_testkit::Matmul { dependent_launch: true, ..tile_testkit::MATMUL_128X256 };
    // The generic kernels' instances: the kernel named after the instance.
    let f16 = tile_testkit::Matmul { name: "matmul__f16_f16_128_256_64_3_256_8", ..example };
    assert_eq!(printed(examples::gemm::matmul::meta::<f16, f16, 128, 256, 64, 3, 256, 8>().ir), f16.text());
    let bf16 = tile_testkit::Matmul { name: "matmul__bf16_bf16_128_256_64_3_256_8", dtype: "bf16", ..example };
    assert_eq!(printed(examples::gemm::matmul::meta::<bf16, bf16, 128, 256, 64, 3, 256, 8>().ir), bf16.text());
    let bt = tile_testkit::Matmul { name: "matmul_bt__f16_f16_128_256_64_3_256", trans_b: true, ..example };
    assert_eq!(printed(examples::gemm::matmul_bt::meta::<f16, f16, 128, 256, 64, 3, 256>().ir), bt.text());
    // The split-K kernels (the simulator's `hopper_splitk_sim.rs` runs these texts).
    let small = tile_testkit::Matmul { bm: 64, bn: 128, threads: 128, stages: 4, ..example };
    let nn = tile_testkit::Matmul { name: "matmul_splitk__f16_f32_64_128_64_4_128_1_1", ..small };
    assert_eq!(
        printed(examples::gemm::matmul_splitk::meta::<f16, f32, 64, 128, 64, 4, 128, 1, 1>().ir),
        nn.splitk_text()
    );
    let nt = tile_testkit::Matmul {
        name: "matmul_bt_splitk__bf16_bf16_128_128_64_4_256_1_1",
        dtype: "bf16",
        out: Some("bf16"),
        trans_b: true,
        bm: 128,
        bn: 128,
        threads: 256,
        stages: 4,
        ..example
    };
    assert_eq!(
        printed(examples::gemm::matmul_bt_splitk::meta::<bf16, bf16, 128, 128, 64, 4, 256, 1, 1>().ir),
        nt.splitk_text()
    );
    // Decode-size tiles: the same kernel text, with two or three blocks per
    // SM asked in its header (and nothing else changed).
    let two = tile_testkit::Matmul {
        name: "matmul_splitk__f16_f32_64_128_64_3_128_2_1",
        stages: 3,
        blocks_per_sm: 2,
        ..small
    };
    assert_eq!(
        printed(examples::gemm::matmul_splitk::meta::<f16, f32, 64, 128, 64, 3, 128, 2, 1>().ir),
        two.splitk_text()
    );
    let narrow = tile_testkit::Matmul {
        name: "matmul_bt_splitk__bf16_f32_64_64_64_3_128_3_1",
        dtype: "bf16",
        trans_b: true,
        bn: 64,
        stages: 3,
        blocks_per_sm: 3,
        ..small
    };
    assert_eq!(
        printed(examples::gemm::matmul_bt_splitk::meta::<bf16, f32, 64, 64, 64, 3, 128, 3, 1>().ir),
        narrow.splitk_text()
    );
    // A deep tile (sm_90a only): the same text, 16 stages.
    let thin = tile_testkit::Matmul {
        name: "matmul_splitk__f16_f16_64_32_64_16_128_1_1",
        out: Some("f16"),
        bn: 32,
        stages: 16,
        ..small
    };
    assert_eq!(
        printed(examples::gemm::matmul_splitk::meta::<f16, f16, 64, 32, 64, 16, 128, 1, 1>().ir),
        thin.splitk_text()
    );
    for meta in examples::gemm::matmul_splitk::INSTANCES.iter().chain(&examples::gemm::matmul_bt_splitk::INSTANCES) {
        let k: tile::ir::Kernel = serde_json::from_str(meta.ir).expect("embedded Tile IR parses");
        // `name__T_O_BM_BN_BK_STAGES_THREADS_BLOCKS_CL`, or the first
        // instances' names of before `BLOCKS` (one block per SM, no cluster).
        let fields: Vec<u32> =
            meta.name.split("__").nth(1).unwrap_or("").split('_').skip(2).filter_map(|f| f.parse().ok()).collect();
        let (blocks, cluster) = match fields[..] {
            [.., blocks, cluster] if fields.len() == 7 => (blocks, cluster),
            _ => (1, 1),
        };
        assert_eq!((k.blocks_per_sm, k.cluster), (blocks, [cluster, 1, 1]), "{}", meta.name);
    }
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

/// Small awkward shapes for the Hopper-shaped kernels: M, N, K off every
/// tile (128, 256, 64) and off 8 (K = 1 and 77: rows of `a` not a multiple of
/// 16 bytes, the general variant's case on a GPU), a single row or column,
/// and K spanning several pipeline stages.
const HOPPER_SHAPES: &[(usize, usize, usize)] =
    &[(130, 260, 72), (1, 17, 77), (200, 1, 136), (65, 129, 1), (129, 40, 200)];

#[test]
fn hopper_every_orientation_f16() {
    for case in gemm::hopper_f16() {
        for (i, &(m, n, k)) in HOPPER_SHAPES.iter().enumerate() {
            gemm::check_hopper(&dev(), m, n, k, case.trans, 100 + i as u64, case.launch)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
    }
}

#[test]
fn hopper_every_orientation_bf16() {
    for case in gemm::hopper_bf16() {
        for (i, &(m, n, k)) in HOPPER_SHAPES.iter().enumerate() {
            gemm::check_hopper(&dev(), m, n, k, case.trans, 200 + i as u64, case.launch)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
    }
}

#[test]
fn hopper_bf16_with_f32_output() {
    for (m, n, k) in [(130, 260, 72), (3, 300, 200)] {
        gemm::check_hopper(&dev(), m, n, k, gemm::NN, 7, gemm::HOPPER_NN_BF16_F32_OUT).unwrap();
    }
}

#[test]
fn hopper_stage_counts_agree_bitwise() {
    // K = 200: four k-steps of 64, so that 4 stages hold the whole loop.
    for (m, n, k) in [(130, 129, 200), (1, 200, 520), (129, 1, 65)] {
        gemm::check_stage_independence(&dev(), m, n, k, 11, &gemm::stages_f16()).unwrap();
        gemm::check_stage_independence(&dev(), m, n, k, 12, &gemm::stages_tn_bf16()).unwrap();
    }
}

#[test]
fn hopper_one_consumer_warpgroup() {
    for (m, n, k) in [(130, 129, 200), (1, 1, 1), (257, 100, 64)] {
        gemm::check_hopper(&dev(), m, n, k, gemm::NN, 13, gemm::ONE_WARPGROUP_F16).unwrap();
        gemm::check_hopper(&dev(), m, n, k, gemm::NT, 14, gemm::ONE_WARPGROUP_NT_BF16).unwrap();
    }
}

#[test]
fn hopper_general_only() {
    for (m, n, k) in [(130, 260, 72), (3, 129, 65)] {
        gemm::check_hopper(&dev(), m, n, k, gemm::NN, 15, gemm::general_only_nn_f16::launch).unwrap();
        gemm::check_hopper(&dev(), m, n, k, gemm::TT, 16, gemm::general_only_tt_bf16::launch).unwrap();
    }
}

/// The checks of the Hopper kernels must be able to fail: a result with one
/// wrong element in a row the sampling skips, one never-written element,
/// and one element off by a single missing product.
#[test]
fn hopper_check_rejects_wrong_results() {
    let (m, n, k) = (1100, 600, 500); // over FULL_REFERENCE_LIMIT: rows are sampled
    assert!(m * n * k > gemm::FULL_REFERENCE_LIMIT);
    // `a` has two nonzeros per row, at columns p1(i) and p2(i) (never equal:
    // 6i + 3 is odd), so that the exact product costs O(m·n), not O(m·n·k).
    let (p1, p2) = (|i: usize| i % k, |i: usize| (i * 7 + 3) % k);
    let mut rng = common::Rng::new(1);
    let mut a = vec![f16::ZERO; m * k];
    for i in 0..m {
        a[i * k + p1(i)] = f16::from_f32(rng.uniform(-1.0, 1.0));
        a[i * k + p2(i)] = f16::from_f32(rng.uniform(-1.0, 1.0));
    }
    let b: Vec<f16> = rng.vec(k * n, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let term = |i: usize, p: usize, j: usize| a[i * k + p].to_f64() * b[p * n + j].to_f64();
    let exact: Vec<f64> =
        (0..m * n).map(|x| (x / n, x % n)).map(|(i, j)| term(i, p1(i), j) + term(i, p2(i), j)).collect();
    let good: Vec<f16> = exact.iter().map(|&v| f16::from_f64(v)).collect();
    gemm::check_scaled(m, n, k, &a, &b, gemm::NN, &good, 5).expect("the exact product rounded to f16 passes");
    let sampled = gemm::sample_rows(m, n, k, 5);
    let unsampled = (0..m).find(|r| !sampled.contains(r)).unwrap();
    // A block's worth of garbage in one unsampled row: the row sums catch it.
    let mut bad = good.clone();
    for v in &mut bad[unsampled * n..unsampled * n + 128] {
        *v = f16::from_f32(v.to_f32() + 3.0);
    }
    assert!(gemm::check_scaled(m, n, k, &a, &b, gemm::NN, &bad, 5).is_err());
    let mut bad = good.clone();
    bad[unsampled * n + 7] = f16::NAN;
    assert!(gemm::check_scaled(m, n, k, &a, &b, gemm::NN, &bad, 5).is_err());
    // One product of row 0 missing from a sampled element (0, j), j chosen
    // where that product is not tiny.
    let j = (0..n).find(|&j| term(0, p2(0), j).abs() > 0.1).unwrap();
    let mut bad = good.clone();
    bad[j] = f16::from_f64(exact[j] - term(0, p2(0), j));
    assert!(gemm::check_scaled(m, n, k, &a, &b, gemm::NN, &bad, 5).is_err());
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
    // The Hopper checks' parallel reference and its sums agree with the example's.
    let (m, n, k) = (37, 29, 23);
    let mut rng = common::Rng::new(9);
    let x: Vec<bf16> = rng.vec(m * k, -1.0, 1.0).into_iter().map(bf16::from_f32).collect();
    let y: Vec<bf16> = rng.vec(k * n, -1.0, 1.0).into_iter().map(bf16::from_f32).collect();
    for trans in [gemm::NN, gemm::TN, gemm::NT, gemm::TT] {
        let full = examples::gemm::reference_rows(m, n, k, &x, &y, trans.a, trans.b, 0..m);
        let rows = [0, 5, 6, 36];
        let want: Vec<f64> = rows.iter().flat_map(|&i| full[i * n..(i + 1) * n].to_vec()).collect();
        assert_eq!(gemm::reference_at(m, n, k, &x, &y, trans, &rows), want, "{trans:?}");
        let (row_sums, col_sums) = gemm::reference_sums(m, n, k, &x, &y, trans);
        for i in 0..m {
            let s: f64 = full[i * n..(i + 1) * n].iter().sum();
            assert!((row_sums[i] - s).abs() < 1e-9, "{trans:?} row {i}");
        }
        for j in 0..n {
            let s: f64 = (0..m).map(|i| full[i * n + j]).sum();
            assert!((col_sums[j] - s).abs() < 1e-9, "{trans:?} column {j}");
        }
    }
    let att = gemm::attention_ref(&[f16::ONE], &[f16::ONE, f16::ZERO], &[f16::ONE, f16::ZERO], 1, 2, 1);
    let e = std::f64::consts::E;
    assert!((att[0] - e / (e + 1.0)).abs() < 1e-12, "{att:?}");
}

/// Every tile of the shape rule, K split into 1 to 5 ranges (K = 333: six
/// k-steps of 64, which 4 and 5 do not divide, so that the last range is
/// short or empty; K = 77: more ranges than k-steps), M, N and K odd (rows
/// of `a` and `b` not 16-byte multiples: the padded operands, and the same
/// read unpadded), M = 1, both layouts, f16 and bf16.
#[test]
fn shaped_gemm_every_tile_and_split() {
    use examples::gemm::{Config, Layout, Tiles};
    let shapes = [(1, 130, 333), (67, 129, 200), (3, 17, 77), (130, 40, 64)];
    let mut seed = 300;
    for tiles in Tiles::ALL {
        for split in [1, 2, 4, 5] {
            for layout in [Layout::Ab, Layout::Abt] {
                for &(m, n, k) in &shapes {
                    seed += 1;
                    let config = Some(Config { tiles, split });
                    if seed % 2 == 0 {
                        gemm::check_shaped::<f16>(&dev(), m, n, k, layout, config, gemm::TOL_F16, seed).unwrap();
                    } else {
                        gemm::check_shaped::<bf16>(&dev(), m, n, k, layout, config, gemm::TOL_BF16, seed).unwrap();
                    }
                    // The same configuration reading the odd rows as they are.
                    let config = Config { tiles, split };
                    gemm::check_unpadded::<f16>(&dev(), m, n, k, layout, config, gemm::TOL_F16, seed).unwrap();
                }
            }
        }
    }
}

/// The autotuner picks among the shape rule's candidates where the rule is
/// not sure (M < 2048): each candidate timed once on the real tensors (the
/// interpreter's host clock), the choice right against the f64 reference,
/// kept in memory and read back from the cache by another tuner; odd N and
/// K (their own bucket); where the rule is sure, its choice untimed.
#[test]
fn shaped_gemm_tuned() {
    use examples::gemm::{candidates, choose, Layout};
    use tile::tune::{Mode, Settings, Source, Tuner};
    let dir = std::env::temp_dir().join(format!("tile-shaped-tuned-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let settings =
        || Settings { mode: Mode::Quiet, warmup: None, reps: None, cache_dir: Some(dir.clone()), shipped: None };
    let tuner = Tuner::new(settings());
    // K = 600: ten k-steps, so two ranges are a candidate.
    let (m, n, k) = (3, 130, 600);
    assert!(candidates(m, n, k).len() > 2, "{:?}", candidates(m, n, k));
    assert_eq!(candidates(m, n, k)[0], choose(m, n, k));
    let r = gemm::check_shaped_tuned::<f16>(&dev(), &tuner, m, n, k, Layout::Abt, gemm::TOL_F16, 41).unwrap();
    assert_eq!(r.source, Source::Tuned);
    assert!(r.candidates.len() > 2 && r.candidates.iter().all(|c| c.ms.is_some()), "{:?}", r.candidates);
    assert_eq!(r.bucket, "3x256*x1024");
    // The same bucket (M = 3, N odd in 129..=256, K in 513..=1024, the same
    // candidates) again: the choice in memory.
    let again = gemm::check_shaped_tuned::<f16>(&dev(), &tuner, m, 129, 616, Layout::Abt, gemm::TOL_F16, 42).unwrap();
    assert_eq!((again.index, again.source), (r.index, Source::Tuned));
    assert_eq!(tuner.records().len(), 1, "tuned once");
    // Another tuner on the same cache directory reads it.
    let other = Tuner::new(settings());
    let cached = gemm::check_shaped_tuned::<f16>(&dev(), &other, m, n, k, Layout::Abt, gemm::TOL_F16, 43).unwrap();
    assert_eq!((cached.index, cached.config.as_str(), cached.source), (r.index, r.config.as_str(), Source::Cache));
    // Odd N in the other layout, bf16: its own key, right too; each
    // candidate also timed reading the odd rows unpadded.
    let ab = gemm::check_shaped_tuned::<bf16>(&dev(), &tuner, 5, 17, 77, Layout::Ab, gemm::TOL_BF16, 44).unwrap();
    assert_eq!((ab.bucket.as_str(), ab.source), ("5x32*x128*", Source::Tuned));
    let unpadded = ab.candidates.iter().filter(|c| c.config.ends_with(" unpadded")).count();
    assert!(unpadded > 0 && unpadded < ab.candidates.len(), "{:?}", ab.candidates);
    assert!(r.candidates.iter().any(|c| c.config.ends_with(" unpadded")), "N = 130: {:?}", r.candidates);
    // Whole rows: nothing to read unpadded.
    let whole = gemm::check_shaped_tuned::<f16>(&dev(), &tuner, 3, 128, 640, Layout::Abt, gemm::TOL_F16, 45).unwrap();
    assert!(whole.candidates.len() > 2, "{:?}", whole.candidates);
    assert!(whole.candidates.iter().all(|c| !c.config.ends_with(" unpadded")), "{:?}", whole.candidates);
    // Where the rule is sure: its choice, nothing timed.
    assert_eq!(candidates(2048, 64, 64), [choose(2048, 64, 64)]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shape rule's own choice at decode-size and odd shapes (never a tile
/// only sm_90a has), and its
/// choices: 16 × 128 (M ≤ 16) and 64 × 128 tiles at two blocks per SM
/// for M ≤ 256 with K split
/// so that the blocks fill their last wave over the 264 slots, 128-row
/// tiles above with K split when the output has too few tiles for the GPU,
/// never a range under 4 k-steps; the candidates the tuner times.
#[test]
fn shaped_gemm_rule() {
    use examples::gemm::{candidates, choose, split_cap, Config, Layout, Tiles, SMS};
    for &(m, n, k) in &[(1, 300, 1000), (16, 129, 4095), (100, 257, 515)] {
        for layout in [Layout::Ab, Layout::Abt] {
            gemm::check_shaped::<f16>(&dev(), m, n, k, layout, None, gemm::TOL_F16, 7).unwrap();
        }
    }
    // A tensor of another shape than the prepared one is an error, never a
    // silently padded or cropped product.
    let s = dev().stream().unwrap();
    let mut g = examples::gemm::ShapedGemm::<f16>::new(&s, 3, 17, 77, Layout::Ab, None).unwrap();
    let a = DeviceTensor::<f16>::zeros(&s, &[3, 77]).unwrap();
    let b = DeviceTensor::<f16>::zeros(&s, &[77, 17]).unwrap();
    let mut c = DeviceTensor::<f16>::zeros(&s, &[3, 17]).unwrap();
    g.run(&s, &a, &b, &mut c).unwrap();
    let short = DeviceTensor::<f16>::zeros(&s, &[3, 76]).unwrap();
    let err = g.run(&s, &short, &b, &mut c).unwrap_err().to_string();
    assert!(err.contains("`a` has shape [3, 76]"), "{err}");
    assert!(g.run(&s, &a, &a, &mut c).is_err());
    // Decode-size M: 16 × 128 (M ≤ 16) or 64 × 128 at two blocks per SM, K split so that the
    // blocks fill the last of their waves over 264 slots at least 85 %
    // (4096 × 4096: 32 tiles × 8 ranges = 256 blocks; 14336 × 4096: 112
    // tiles, whose multiples up to 6 fill 84.8 %, × 7 = 784 of 792); none
    // where the tiles alone do (M = 256, N = 8192: 256 of 264).
    assert_eq!(choose(1, 4096, 4096), Config { tiles: Tiles::Gemv, split: 8 });
    assert_eq!(choose(1, 14336, 4096), Config { tiles: Tiles::Gemv, split: 7 });
    assert_eq!(choose(17, 4096, 4096), Config { tiles: Tiles::SmallTwo, split: 8 });
    assert_eq!(choose(256, 8192, 8192), Config { tiles: Tiles::SmallTwo, split: 1 });
    // M = 256: a second range's partial sums would cost half of `b`'s
    // bytes again ([`split_cap`]): 128 blocks, one range.
    assert_eq!(choose(256, 4096, 4096), Config { tiles: Tiles::SmallTwo, split: 1 });
    assert_eq!(choose(64, 4096, 4096), Config { tiles: Tiles::SmallTwo, split: 4 });
    assert_eq!(choose(256, 14336, 4096), Config { tiles: Tiles::SmallTwo, split: 1 });
    assert_eq!(choose(8192, 8192, 8192).split, 1);
    assert_eq!(choose(8192, 8192, 8192).tiles, Tiles::Wide);
    for m in [1, 16, 64, 128, 256, 1024, 4096] {
        for (n, k) in [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (4097, 4095)] {
            let c = choose(m, n, k);
            let (bm, bn) = c.tiles.dims();
            assert!(c.split == 1 || k.div_ceil(64) / c.split >= 4, "{m}x{n}x{k}: {c}");
            let blocks = m.div_ceil(bm) * n.div_ceil(bn) * c.split;
            let slots = SMS * c.tiles.blocks_per_sm();
            if c.tiles.blocks_per_sm() > 1 {
                // The last wave at least 85 % full, or no split fills it so.
                let fill = |b: usize| b * 100 >= b.div_ceil(slots) * slots * 85;
                let most = (k.div_ceil(64) / 4).clamp(1, 16).min(split_cap(m, k));
                assert!(fill(blocks) || (1..=most).all(|s| !fill(blocks / c.split * s)), "{m}x{n}x{k}: {c}");
            } else {
                assert!(c.split == 1 || blocks <= SMS, "{m}x{n}x{k}: {c}");
                assert!(c.split > 1 || blocks * 2 > SMS || k < 512, "{m}x{n}x{k}: {c}");
            }
        }
    }
    // The candidates: the rule's first, each tile once with one range, the
    // several-blocks-per-SM tiles only at M ≤ 256.
    let all = candidates(16, 4096, 4096);
    assert_eq!(all[0], choose(16, 4096, 4096));
    for tiles in Tiles::ALL {
        assert!(all.contains(&Config { tiles, split: 1 }), "{tiles:?}: {all:?}");
    }
    assert!(all.contains(&Config { tiles: Tiles::Narrow, split: 6 }), "{all:?}");
    assert!(!candidates(1024, 4096, 4096).iter().any(|c| c.tiles.blocks_per_sm() > 1));
    assert!(!candidates(64, 4096, 4096).iter().any(|c| c.tiles == Tiles::Gemv));
    // The deep tiles (sm_90a only) up to the M each suits; never the rule's.
    assert!(candidates(64, 4096, 4096).contains(&Config { tiles: Tiles::Thin, split: 1 }));
    assert!(!candidates(65, 4096, 4096).iter().any(|c| c.tiles == Tiles::Thin));
    assert!(candidates(128, 4096, 4096).contains(&Config { tiles: Tiles::Deep, split: 1 }));
    assert!(!candidates(129, 4096, 4096).iter().any(|c| c.tiles == Tiles::Deep));
    assert!(candidates(256, 4096, 4096).contains(&Config { tiles: Tiles::Tall, split: 1 }));
    assert!(!candidates(257, 4096, 4096).iter().any(|c| c.tiles == Tiles::Tall));
    for m in [1, 16, 64, 128, 256, 1024, 4096] {
        for (n, k) in [(4096, 4096), (4097, 4095), (28672, 8192)] {
            assert!(!choose(m, n, k).tiles.sm90_only(), "{m}x{n}x{k}");
        }
    }
}

/// The pipelined split-K reduction (what `ShapedGemm` runs) sums exactly as
/// the plain one: the same bits for 0 to 9 ranges (fewer and more than its
/// 4 stages), M and N off its 16 × 256 tile, f16 and bf16.
#[test]
fn pipelined_splitk_reduce_matches_the_plain_one() {
    use examples::gemm::{splitk_reduce, splitk_reduce_pipelined};
    let s = dev().stream().unwrap();
    let mut rng = common::Rng::new(77);
    for (split, m, n) in [(0, 3, 40), (1, 17, 300), (3, 1, 257), (4, 16, 256), (9, 33, 513)] {
        let ws_host = rng.vec(split * m * n, -4.0, 4.0);
        let ws = DeviceTensor::from_slice(&s, &ws_host, &[split, m, n]).unwrap();
        let mut plain = DeviceTensor::<f16>::zeros(&s, &[m, n]).unwrap();
        let mut piped = DeviceTensor::<f16>::from_slice(&s, &vec![f16::NAN; m * n], &[m, n]).unwrap();
        splitk_reduce::launch::<f16>(&s, &ws, &mut plain).unwrap();
        splitk_reduce_pipelined::launch::<f16>(&s, &ws, &mut piped).unwrap();
        let (plain, piped) = (plain.to_vec(&s).unwrap(), piped.to_vec(&s).unwrap());
        for (i, (x, y)) in plain.iter().zip(&piped).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "split {split}, {m}x{n}: element {i}");
        }
        let mut piped = DeviceTensor::<bf16>::zeros(&s, &[m, n]).unwrap();
        splitk_reduce_pipelined::launch::<bf16>(&s, &ws, &mut piped).unwrap();
        for (i, got) in piped.to_vec(&s).unwrap().iter().enumerate() {
            let want = (0..split).fold(0.0f32, |a, z| a + ws_host[(z * m + i / n) * n + i % n]);
            assert_eq!(got.to_bits(), bf16::from_f32(want).to_bits(), "bf16 split {split}, {m}x{n}: element {i}");
        }
    }
}

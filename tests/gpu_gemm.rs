//! GEMM and FlashAttention-style kernels on the GPU (feature `gpu`) at
//! awkward sizes, against f64 CPU references and against the interpreter's
//! output (like `tests/gpu.rs`), plus the example's kernels against cuBLAS;
//! the Hopper-shaped kernels (issue 4, tests `hopper_*`) on both sm_90a
//! variants: the warp-specialized TMA + wgmma one when the operands are
//! TMA-addressable, the general cp.async + mma.sync one when they are not.
//!
//! `cargo test --release --features gpu --test gpu_gemm` on a machine with an
//! NVIDIA GPU; scripts/dist.sh gathers the binary for a GPU machine.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/gemm.rs"]
mod gemm;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
}
use gemm::Res;
use tile::prelude::*;

fn gpu() -> Device {
    Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver")
}

fn cpu() -> Device {
    Device::interpreter()
}

/// Runs `check` on the GPU and in the interpreter; both must pass their
/// reference check and agree with each other within `tol` (relative).
fn both<T: Element>(tol: f64, check: impl Fn(&Device) -> Res<Vec<T>>) {
    let on_gpu = check(&gpu()).unwrap();
    let on_cpu = check(&cpu()).unwrap();
    let a: Vec<f64> = on_gpu.iter().map(|x| x.to_f64()).collect();
    let b: Vec<f64> = on_cpu.iter().map(|x| x.to_f64()).collect();
    let err = tile::rel_error(&a, &b);
    assert!(err <= tol, "GPU and interpreter disagree: relative difference {err:.3e} > {tol:.1e}");
}

/// Shapes with M, N and K off the tiles, degenerate ones and a long K; with
/// `TILE_TEST_SMALL` set (`run.sh memcheck` sets it: the sanitizers are slow)
/// only the small ones.
fn shapes() -> &'static [(usize, usize, usize)] {
    const ALL: &[(usize, usize, usize)] =
        &[(1000, 1999, 777), (1, 1, 1), (1, 4095, 17), (4095, 1, 1000), (17, 17, 4095), (129, 257, 64)];
    const SMALL: &[(usize, usize, usize)] = &[(1, 1, 1), (129, 257, 64), (17, 33, 95)];
    if small() {
        SMALL
    } else {
        ALL
    }
}

fn small() -> bool {
    std::env::var_os("TILE_TEST_SMALL").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Attention (query rows, keys) shapes, likewise.
fn attention_shapes() -> &'static [(usize, usize)] {
    if small() {
        &[(1, 1), (65, 129)]
    } else {
        &[(1000, 1999), (1, 1), (4095, 17), (17, 4095), (64, 64)]
    }
}

#[test]
fn nn_f16() {
    for &(m, n, k) in shapes() {
        gemm::nn_f16(&gpu(), m, n, k, (m + n + k) as u64).unwrap();
    }
    both(2e-3, |d| gemm::nn_f16(d, 100, 70, 50, 1));
}

#[test]
fn nn_bf16_with_f32_output() {
    for &(m, n, k) in shapes() {
        gemm::nn_bf16_f32_out(&gpu(), m, n, k, 2).unwrap();
    }
    both(1e-5, |d| gemm::nn_bf16_f32_out(d, 65, 130, 97, 2));
}

#[test]
fn b_transposed_f16() {
    for &(m, n, k) in shapes() {
        gemm::nt_f16(&gpu(), m, n, k, 3).unwrap();
    }
    both(2e-3, |d| gemm::nt_f16(d, 100, 70, 50, 3));
}

#[test]
fn a_transposed_bf16() {
    for &(m, n, k) in shapes() {
        gemm::tn_bf16(&gpu(), m, n, k, 4).unwrap();
    }
    both(1e-2, |d| gemm::tn_bf16(d, 100, 70, 50, 4));
}

#[test]
fn both_transposed_with_gemm_clear_f16() {
    for &(m, n, k) in shapes() {
        gemm::tt_f16(&gpu(), m, n, k, 5).unwrap();
    }
    both(2e-3, |d| gemm::tt_f16(d, 100, 70, 50, 5));
}

#[test]
fn warp_policies() {
    for &(m, n, k) in shapes() {
        gemm::fullcol_f16(&gpu(), m, n, k, 6).unwrap();
        gemm::fullrow_bf16(&gpu(), m, n, k, 7).unwrap();
    }
    both(2e-3, |d| gemm::fullcol_f16(d, 45, 200, 37, 6));
    both(1e-2, |d| gemm::fullrow_bf16(d, 200, 45, 37, 7));
}

#[test]
fn example_kernels() {
    for &(m, n, k) in shapes() {
        gemm::example_f16(&gpu(), m, n, k, 8).unwrap();
        gemm::example_bf16(&gpu(), m, n, k, 9).unwrap();
        gemm::example_bt_f16(&gpu(), m, n, k, 10).unwrap();
    }
    both(2e-3, |d| gemm::example_f16(d, 130, 129, 70, 8));
}

#[test]
fn example_kernels_match_cublas() {
    let stream = gpu().stream().unwrap();
    let blas = tile::cublas::Gemm::new(&stream).unwrap();
    let (m, n, k) = (1536, 2049, 1000);
    let mut rng = common::Rng::new(12);
    let a_host: Vec<f16> = rng.vec(m * k, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let b_host: Vec<f16> = rng.vec(n * k, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let a = DeviceTensor::from_slice(&stream, &a_host, &[m, k]).unwrap();
    let b = DeviceTensor::from_slice(&stream, &b_host, &[k, n]).unwrap();
    let bt = DeviceTensor::from_slice(&stream, &b_host, &[n, k]).unwrap();
    for trans_b in [false, true] {
        let mut ours = DeviceTensor::<f16>::zeros(&stream, &[m, n]).unwrap();
        let mut theirs = DeviceTensor::<f16>::zeros(&stream, &[m, n]).unwrap();
        let b_used = if trans_b { &bt } else { &b };
        if trans_b {
            examples::gemm::example_bt(&stream, &a, b_used, &mut ours).unwrap();
        } else {
            examples::gemm::example(&stream, &a, b_used, &mut ours).unwrap();
        }
        blas.gemm_f16(m, n, k, &a, b_used, &mut theirs, false, trans_b).unwrap();
        let x: Vec<f64> = ours.to_vec(&stream).unwrap().iter().map(|v| v.to_f64()).collect();
        let y: Vec<f64> = theirs.to_vec(&stream).unwrap().iter().map(|v| v.to_f64()).collect();
        let err = tile::rel_error(&x, &y);
        assert!(err <= 2e-3, "trans_b={trans_b}: ours and cuBLAS differ by {err:.3e}");
    }
}

#[test]
fn attention_pipelined_f16() {
    for &(sq, sk) in attention_shapes() {
        gemm::attention_f16(&gpu(), sq, sk, (sq + sk) as u64).unwrap();
    }
    both(2e-3, |d| gemm::attention_f16(d, 100, 77, 1));
}

#[test]
fn attention_serial_bf16() {
    for &(sq, sk) in attention_shapes() {
        gemm::attention_bf16(&gpu(), sq, sk, (sq + sk) as u64).unwrap();
    }
    both(1e-2, |d| gemm::attention_bf16(d, 100, 77, 1));
}

/// M, N, K for the Hopper-shaped kernels. On sm_90a the warp-specialized
/// variant needs every operand's rows to be a multiple of 16 bytes (8
/// elements); `gemm::tma_operands` says which variant a shape takes, and
/// `hopper_shapes_cover_both_variants` checks that each orientation gets both.
/// With `TILE_TEST_SMALL` (`run.sh memcheck` and `hopper`'s sanitizer runs)
/// one small shape of each kind.
fn hopper_shapes() -> &'static [(usize, usize, usize)] {
    const ALL: &[(usize, usize, usize)] = &[
        // Multiples of 8 but of no tile: TMA-addressable in every orientation,
        // partial tiles in M, N and K (K = 15·64 + 40).
        (1000, 1000, 1000),
        // Whole tiles only.
        (4096, 4096, 4096),
        // K = 1999: a row of a row-major `a` is 3998 bytes, not a multiple of
        // 16, so no TMA map: the general variant in every orientation (and
        // K off BK, M and N off the tiles).
        (1999, 1000, 1999),
        // M = 4095: TMA for `a · b` and `a · bᵀ` (M is never a row length),
        // the general variant once `a` is stored [K, M].
        (4095, 1000, 4096),
        // 520 = 64·8 + 8, N = 4095: TMA only for `a · bᵀ`.
        (127, 4095, 520),
        // K = 4095, one short of the tiles: the general variant wherever K is
        // a row length, TMA for `aᵀ · b` (K outermost in both operands).
        (1000, 584, 4095),
        // Every dimension smaller than the TMA box (8 = one 16-byte row).
        (8, 4096, 8),
        (1, 1, 1),
    ];
    const SMALL: &[(usize, usize, usize)] = &[(136, 264, 200), (65, 129, 77)];
    if small() {
        SMALL
    } else {
        ALL
    }
}

#[test]
fn hopper_shapes_cover_both_variants() {
    for trans in [gemm::NN, gemm::TN, gemm::NT, gemm::TT] {
        let tma = hopper_shapes().iter().filter(|&&(m, n, k)| gemm::tma_operands(m, n, k, trans, 2)).count();
        assert!(tma > 0, "{trans:?}: no shape with TMA-addressable operands");
        assert!(tma < hopper_shapes().len(), "{trans:?}: no shape that needs the general variant");
    }
}

fn hopper_cases<T: Element, O: Element>(cases: &[gemm::HopperCase<T, O>], seed: u64) {
    for case in cases {
        for (i, &(m, n, k)) in hopper_shapes().iter().enumerate() {
            gemm::check_hopper(&gpu(), m, n, k, case.trans, seed + i as u64, case.launch)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
    }
}

#[test]
fn hopper_every_orientation_f16() {
    hopper_cases(&gemm::hopper_f16(), 100);
    both(2e-3, |d| gemm::check_hopper(d, 136, 264, 200, gemm::TN, 1, gemm::HOPPER_TN_F16));
}

#[test]
fn hopper_every_orientation_bf16() {
    hopper_cases(&gemm::hopper_bf16(), 200);
    both(1e-2, |d| gemm::check_hopper(d, 65, 129, 77, gemm::NT, 2, gemm::HOPPER_NT_BF16));
}

#[test]
fn hopper_bf16_with_f32_output() {
    let case =
        gemm::HopperCase { name: "hopper_nn_bf16_f32_out", trans: gemm::NN, launch: gemm::HOPPER_NN_BF16_F32_OUT };
    hopper_cases(&[case], 300);
    both(1e-5, |d| gemm::check_hopper(d, 136, 264, 200, gemm::NN, 3, gemm::HOPPER_NN_BF16_F32_OUT));
}

#[test]
fn hopper_one_consumer_warpgroup() {
    let cases = [gemm::HopperCase { name: "one_warpgroup_f16", trans: gemm::NN, launch: gemm::ONE_WARPGROUP_F16 }];
    hopper_cases(&cases, 400);
    let cases =
        [gemm::HopperCase { name: "one_warpgroup_nt_bf16", trans: gemm::NT, launch: gemm::ONE_WARPGROUP_NT_BF16 }];
    hopper_cases(&cases, 500);
}

/// Outputs at 2, 3 and 4 stages are bitwise identical, on both variants
/// (K = 1999 and K = 77 take the general one, the other shapes TMA).
#[test]
fn hopper_stage_counts_agree_bitwise() {
    let shapes: &[(usize, usize, usize)] = if small() {
        &[(136, 264, 200), (65, 129, 77)]
    } else {
        &[(1000, 1000, 1000), (4096, 2048, 4096), (1999, 1000, 1999), (8, 4096, 8)]
    };
    for &(m, n, k) in shapes {
        gemm::check_stage_independence(&gpu(), m, n, k, 600, &gemm::stages_f16()).unwrap();
        gemm::check_stage_independence(&gpu(), m, n, k, 700, &gemm::stages_tn_bf16()).unwrap();
    }
}

/// Every Hopper-shaped kernel (and the example's) has the shape the sm_90a warp-specialized
/// lowering takes, so that the `hopper_` tests above run it (not only the
/// fallback): on sm_90a, `compile_variants` gives a TMA + mbarrier + wgmma
/// variant first, with tensor maps of both operands, and the general
/// variant, without maps, last. No GPU needed, but under the `gpu` feature
/// with the tests it guards: it holds once the sm_90a lowering (issue 4) is in.
#[test]
fn hopper_kernels_have_a_warp_specialized_variant() {
    let metas = gemm::hopper_metas();
    let mut missing = Vec::new();
    for (name, meta) in metas {
        let kernel: tile::ir::Kernel = serde_json::from_str(meta.ir).expect("embedded Tile IR parses");
        let variants =
            tile::ir::compile_variants(&kernel, tile::ir::Target::Sm90a, tile::ir::CompileOptions::default())
                .unwrap_or_else(|e| panic!("{name}: sm_90a compile failed: {e:?}"));
        let (first, last) = (&variants[0], &variants[variants.len() - 1]);
        let ws = variants.len() >= 2
            && first.schedule == "warp_specialized_gemm"
            && first.tensor_maps.len() >= 2
            && ["wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier"].iter().all(|op| first.ptx.contains(op));
        if !ws {
            missing.push(name);
        }
        assert!(last.tensor_maps.is_empty(), "{name}: the last variant must run on any tensors");
    }
    assert!(missing.is_empty(), "no warp-specialized TMA + wgmma sm_90a variant for {missing:?}");
}

/// `warp_specialize = false`: on TMA-addressable shapes the TMA-copy
/// variant runs (checked with `launch_counts` on sm_90), the general one on
/// the others; both correct.
#[test]
fn hopper_general_only() {
    let d = gpu();
    hopper_cases(
        &[gemm::HopperCase { name: "general_only_nn_f16", trans: gemm::NN, launch: gemm::general_only_nn_f16::launch }],
        800,
    );
    hopper_cases(
        &[gemm::HopperCase {
            name: "general_only_tt_bf16",
            trans: gemm::TT,
            launch: gemm::general_only_tt_bf16::launch,
        }],
        900,
    );
    if d.compute_capability().is_some_and(|cc| cc.0 == 9) {
        for meta in [&gemm::general_only_nn_f16::META, &gemm::general_only_tt_bf16::META] {
            let counts = d.launch_counts(meta);
            let sm90: Vec<(usize, &tile::KernelTarget)> =
                meta.targets.iter().enumerate().filter(|(_, t)| t.arch == "sm_90a").collect();
            assert!(
                sm90.len() >= 2 && sm90[0].1.schedule == "tma_copy" && !sm90[0].1.tensor_maps.is_empty(),
                "{}: no TMA-copy variant",
                meta.name
            );
            assert!(counts[sm90[0].0] > 0, "{}: the TMA-copy variant never ran ({counts:?})", meta.name);
            assert!(counts[sm90[sm90.len() - 1].0] > 0, "{}: the general variant never ran ({counts:?})", meta.name);
        }
    }
}

/// `ShapedGemm::tuned` on the GPU: where the rule is not sure the tuner
/// times every candidate on the real tensors (each one's product written
/// to `c`, then the chosen one's checked against the f64 reference), a
/// second tuner on the same cache directory reads the choice; odd rows too.
#[test]
fn shaped_gemm_tuned_on_the_gpu() {
    use examples::gemm::Layout;
    use tile::tune::{Mode, Settings, Source, Tuner};
    let d = gpu();
    let dir = std::env::temp_dir().join(format!("tile-gpu-shaped-tuned-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let settings =
        || Settings { mode: Mode::Quiet, warmup: None, reps: None, cache_dir: Some(dir.clone()), shipped: None };
    let tuner = Tuner::new(settings());
    let shapes: &[(usize, usize, usize, Layout)] = if small() {
        &[(16, 512, 1024, Layout::Abt), (3, 257, 333, Layout::Ab)]
    } else {
        &[(64, 4096, 4096, Layout::Abt), (1, 4097, 4095, Layout::Ab), (256, 1000, 2048, Layout::Ab)]
    };
    let mut seed = 2000;
    for &(m, n, k, layout) in shapes {
        seed += 1;
        let r = gemm::check_shaped_tuned::<f16>(&d, &tuner, m, n, k, layout, gemm::TOL_F16, seed).unwrap();
        assert_eq!(r.source, Source::Tuned, "{m}x{n}x{k}");
        assert!(r.candidates.iter().filter(|c| c.ms.is_some()).count() >= 2, "{m}x{n}x{k}: {:?}", r.candidates);
        let other = Tuner::new(settings());
        let again = gemm::check_shaped_tuned::<bf16>(&d, &other, m, n, k, layout, gemm::TOL_BF16, seed).unwrap();
        // bf16 is another kernel (its own key): tuned by `other` too.
        assert_eq!(again.source, Source::Tuned, "{m}x{n}x{k} bf16");
        let cached =
            gemm::check_shaped_tuned::<f16>(&d, &Tuner::new(settings()), m, n, k, layout, gemm::TOL_F16, seed).unwrap();
        assert_eq!((cached.source, cached.index), (Source::Cache, r.index), "{m}x{n}x{k}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shape dispatch (`examples::gemm::ShapedGemm`, issue 10) against the
/// f64 reference, both layouts, f16 and bf16: decode-size M with K split
/// (the rule's choice and explicit ranges that do not divide the k-steps),
/// rows that are not 16-byte multiples (odd K, odd N, both: the padded
/// operands and the workspace output; the same rows read unpadded), M, N,
/// K all odd; the tiles of two and three blocks per SM and the deep tiles.
/// On sm_90 the split-K kernels' warp-specialized variant must have run on
/// the aligned shapes.
#[test]
fn shaped_gemm_small_m_split_k_and_odd_rows() {
    use examples::gemm::{Config, Layout, Tiles};
    let d = gpu();
    let shapes: &[(usize, usize, usize, Option<Config>)] = if small() {
        &[
            (1, 256, 512, None),
            (3, 257, 333, Some(Config { tiles: Tiles::Small, split: 3 })),
            (3, 257, 333, Some(Config { tiles: Tiles::Narrow, split: 2 })),
            // Each instance whose warp-specialized variant is checked below,
            // with 16-byte output rows (else the variant without a TMA
            // store runs).
            (3, 256, 333, Some(Config { tiles: Tiles::SmallTwo, split: 2 })),
            (3, 256, 333, Some(Config { tiles: Tiles::Thin, split: 1 })),
            (70, 128, 333, Some(Config { tiles: Tiles::Deep, split: 2 })),
            (130, 192, 301, Some(Config { tiles: Tiles::Tall, split: 1 })),
            // The clusters (TMA multicast of `a`'s tile): a range of 0, 1
            // and 2 k-steps (K = 128 in 3 ranges), odd K, edges in M.
            (3, 256, 333, Some(Config { tiles: Tiles::ThinPair, split: 1 })),
            (70, 128, 128, Some(Config { tiles: Tiles::ThinPair, split: 3 })),
            (17, 256, 301, Some(Config { tiles: Tiles::ThinQuad, split: 2 })),
            (70, 256, 333, Some(Config { tiles: Tiles::DeepPair, split: 1 })),
        ]
    } else {
        &[
            (1, 4096, 4096, None),
            (16, 4097, 4095, None),
            (128, 4096, 1024, None),
            (256, 1000, 2048, None),
            (3, 257, 333, Some(Config { tiles: Tiles::Small, split: 3 })),
            (77, 1999, 777, Some(Config { tiles: Tiles::Mid, split: 5 })),
            (1000, 300, 1000, None),
            (64, 1024, 4096, Some(Config { tiles: Tiles::Small, split: 16 })),
            // The tiles of two and three blocks per SM: one range (the
            // split-K kernel writing `c`), ranges that do not divide the
            // k-steps, odd K and N.
            (1, 4096, 4096, Some(Config { tiles: Tiles::SmallTwo, split: 8 })),
            (16, 4097, 4095, Some(Config { tiles: Tiles::SmallTwo, split: 1 })),
            (1, 14336, 4096, Some(Config { tiles: Tiles::Narrow, split: 3 })),
            (1, 4096, 4096, Some(Config { tiles: Tiles::Gemv, split: 8 })),
            (16, 28672, 4095, Some(Config { tiles: Tiles::Gemv, split: 1 })),
            (3, 1000, 4097, Some(Config { tiles: Tiles::Gemv, split: 6 })),
            (17, 999, 1001, Some(Config { tiles: Tiles::Narrow, split: 5 })),
            (256, 4096, 4096, Some(Config { tiles: Tiles::SmallTwo, split: 2 })),
            // The deep tiles (sm_90a only: elsewhere their launch must be
            // an error, checked below): one range, ranges, odd K and N
            // (odd K alone of `a · b` reads `b` unpadded).
            (64, 4096, 2048, Some(Config { tiles: Tiles::Thin, split: 1 })),
            (16, 4096, 4095, Some(Config { tiles: Tiles::Thin, split: 1 })),
            (5, 4097, 4095, Some(Config { tiles: Tiles::Thin, split: 3 })),
            (128, 2048, 2048, Some(Config { tiles: Tiles::Deep, split: 1 })),
            (100, 1000, 3001, Some(Config { tiles: Tiles::Deep, split: 2 })),
            (256, 2048, 4096, Some(Config { tiles: Tiles::Tall, split: 1 })),
            (200, 4097, 4095, Some(Config { tiles: Tiles::Tall, split: 1 })),
            (160, 2048, 2048, Some(Config { tiles: Tiles::Tall, split: 4 })),
            // The clusters of 2 and 4 (TMA multicast of `a`'s tile).
            (64, 4096, 4096, Some(Config { tiles: Tiles::ThinPair, split: 1 })),
            (64, 4096, 4096, Some(Config { tiles: Tiles::ThinQuad, split: 1 })),
            (16, 4096, 4095, Some(Config { tiles: Tiles::ThinQuad, split: 1 })),
            (5, 4096, 4095, Some(Config { tiles: Tiles::ThinPair, split: 3 })),
            (128, 4096, 4096, Some(Config { tiles: Tiles::DeepPair, split: 1 })),
            (100, 1024, 3001, Some(Config { tiles: Tiles::DeepPair, split: 2 })),
        ]
    };
    let hopper = d.compute_capability().is_some_and(|cc| cc.0 == 9);
    let mut seed = 1000;
    for &(m, n, k, config) in shapes {
        for layout in [Layout::Ab, Layout::Abt] {
            seed += 1;
            if !hopper && config.is_some_and(|c| c.tiles.sm90_only()) {
                let s = d.stream().unwrap();
                let a = DeviceTensor::<f16>::zeros(&s, &[m, k]).unwrap();
                let b_shape = if layout == Layout::Ab { [k, n] } else { [n, k] };
                let b = DeviceTensor::<f16>::zeros(&s, &b_shape).unwrap();
                let mut c = DeviceTensor::<f16>::zeros(&s, &[m, n]).unwrap();
                let mut g = examples::gemm::ShapedGemm::<f16>::new(&s, m, n, k, layout, config).unwrap();
                assert!(g.run(&s, &a, &b, &mut c).is_err(), "{m}x{n}x{k}: an sm_90a-only tile launched");
                continue;
            }
            gemm::check_shaped::<f16>(&d, m, n, k, layout, config, gemm::TOL_F16, seed).unwrap();
            gemm::check_shaped::<bf16>(&d, m, n, k, layout, config, gemm::TOL_BF16, seed).unwrap();
        }
    }
    // Odd rows read as they are (`ShapedGemm::unpadded`: the kernels'
    // variants without tensor maps, element-wise copies and stores).
    let unpadded: &[(usize, usize, usize, Config)] = if small() {
        &[
            (3, 257, 333, Config { tiles: Tiles::Small, split: 2 }),
            (3, 257, 333, Config { tiles: Tiles::Thin, split: 1 }),
        ]
    } else {
        &[
            (16, 4097, 4095, Config { tiles: Tiles::Gemv, split: 8 }),
            (16, 4097, 4095, Config { tiles: Tiles::Deep, split: 1 }),
            (5, 4096, 4095, Config { tiles: Tiles::Thin, split: 3 }),
            (77, 1999, 777, Config { tiles: Tiles::Mid, split: 5 }),
            (200, 4097, 4096, Config { tiles: Tiles::Tall, split: 1 }),
        ]
    };
    for &(m, n, k, config) in unpadded {
        if !hopper && config.tiles.sm90_only() {
            continue;
        }
        for layout in [Layout::Ab, Layout::Abt] {
            seed += 1;
            gemm::check_unpadded::<f16>(&d, m, n, k, layout, config, gemm::TOL_F16, seed).unwrap();
            gemm::check_unpadded::<bf16>(&d, m, n, k, layout, config, gemm::TOL_BF16, seed).unwrap();
        }
    }
    if hopper {
        for meta in [
            examples::gemm::matmul_splitk::meta::<f16, f32, 64, 128, 64, 4, 128, 1, 1>(),
            examples::gemm::matmul_bt_splitk::meta::<bf16, f32, 64, 128, 64, 4, 128, 1, 1>(),
            examples::gemm::matmul_splitk::meta::<f16, f32, 64, 128, 64, 3, 128, 2, 1>(),
            examples::gemm::matmul_bt_splitk::meta::<bf16, f32, 64, 64, 64, 3, 128, 3, 1>(),
            examples::gemm::matmul_splitk::meta::<f16, f16, 64, 32, 64, 16, 128, 1, 1>(),
            examples::gemm::matmul_bt_splitk::meta::<bf16, bf16, 128, 64, 64, 8, 256, 1, 1>(),
            examples::gemm::matmul_splitk::meta::<f16, f32, 64, 64, 64, 12, 128, 1, 1>(),
            // The clusters' multicast variants.
            examples::gemm::matmul_splitk::meta::<f16, f16, 64, 32, 64, 16, 128, 1, 2>(),
            examples::gemm::matmul_bt_splitk::meta::<bf16, f32, 64, 32, 64, 16, 128, 1, 2>(),
            examples::gemm::matmul_splitk::meta::<f16, f16, 64, 64, 64, 12, 128, 1, 2>(),
        ] {
            let counts = d.launch_counts(meta);
            let ws = meta.targets.iter().position(|t| t.arch == "sm_90a" && t.schedule == "warp_specialized_gemm");
            let ws = ws.unwrap_or_else(|| panic!("{}: no warp-specialized variant", meta.name));
            assert!(counts[ws] > 0, "{}: the warp-specialized variant never ran ({counts:?})", meta.name);
        }
        // The 16-row tile has no warp-specialized variant: the TMA-copy one.
        let meta = examples::gemm::matmul_bt_splitk::meta::<f16, f32, 16, 128, 64, 4, 128, 2, 1>();
        let tma = meta.targets.iter().position(|t| t.arch == "sm_90a" && t.schedule == "tma_copy");
        let tma = tma.unwrap_or_else(|| panic!("{}: no TMA-copy variant", meta.name));
        assert!(d.launch_counts(meta)[tma] > 0, "{}: the TMA-copy variant never ran", meta.name);
    }
}

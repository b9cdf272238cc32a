//! The split-K GEMM (`examples/kernels/gemm.rs`'s `matmul_splitk` and
//! `matmul_bt_splitk`, as `tile_testkit::Matmul::splitk_text` prints them)
//! on the Thread IR simulator: its warp-specialized variant (TMA producer,
//! wgmma consumers) over a third grid axis of K ranges, each block writing
//! its f32 partial product to `ws[z, .., ..]`. Checked against an f64
//! reference of each range's partial sum for ranges of 0, 1 and 2 k-steps
//! (more ranges than k-steps: the last ones read only past K), a last range
//! shorter than the others, edges in M and N, both layouts, f16 and bf16,
//! under several interleavings; one range written in the input type, `b`
//! wider than the output; and the general variant (what runs on
//! sm_80 and where TMA cannot) on the same problems.

mod gemm_sim;
mod sim;

use gemm_sim::{decode, random, Rng};
use sim::SimTensor;
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{Matmul, MATMUL_128X256};

/// The f64 partial sums of `a · op(b)` over k in `[z·steps·bk, (z+1)·steps·bk)`,
/// `[split, m, n]`; `b` is `[kb, nb]` (`[nb, kk]` if `trans_b`), `nb ≥ n`,
/// `kb ≤ kk` (its rows past `kb` count as zeros).
#[allow(clippy::too_many_arguments)]
fn partials(
    m: usize,
    n: usize,
    nb: usize,
    kk: usize,
    kb: usize,
    a: &[f64],
    b: &[f64],
    trans_b: bool,
    split: usize,
    bk: usize,
) -> Vec<f64> {
    let steps = kk.div_ceil(bk).div_ceil(split);
    let mut out = vec![0.0; split * m * n];
    for z in 0..split {
        let (lo, hi) = ((z * steps * bk).min(kk), ((z + 1) * steps * bk).min(kk));
        for i in 0..m {
            for j in 0..n {
                out[(z * m + i) * n + j] = (lo..hi)
                    .map(|p| {
                        let bv = if trans_b {
                            b[j * kk + p]
                        } else if p < kb {
                            b[p * nb + j]
                        } else {
                            0.0
                        };
                        a[i * kk + p] * bv
                    })
                    .sum();
            }
        }
    }
    out
}

/// Runs `schedule`'s variant of `cfg`'s split-K kernel at `m × n × kk` in
/// `split` ranges and checks every output element (NaN bits to start: an
/// element never written fails).
fn check(cfg: Matmul, schedule: &str, m: usize, n: usize, kk: usize, split: usize) {
    check_wide_b(cfg, schedule, m, n, n, kk, split)
}

/// [`check`] with `b` `nb ≥ n` wide (a padded `b`: its extra columns must
/// not be written anywhere).
fn check_wide_b(cfg: Matmul, schedule: &str, m: usize, n: usize, nb: usize, kk: usize, split: usize) {
    check_blocks(cfg, 1, schedule, m, n, nb, kk, split)
}

/// `cfg`'s split-K kernel as the example declares it with `blocks_per_sm =
/// blocks` (1: the default, not printed).
fn splitk_kernel(cfg: Matmul, blocks: u32) -> Kernel {
    let k = parse_kernel(&Matmul { blocks_per_sm: blocks, ..cfg }.splitk_text()).unwrap();
    assert_eq!(k.blocks_per_sm, blocks);
    k
}

/// [`check_wide_b`] of the kernel with `blocks_per_sm = blocks`.
#[allow(clippy::too_many_arguments)]
fn check_blocks(cfg: Matmul, blocks: u32, schedule: &str, m: usize, n: usize, nb: usize, kk: usize, split: usize) {
    check_short_b(cfg, blocks, schedule, m, n, nb, kk, kk, split)
}

/// [`check_blocks`] with `b` (not transposed) `kb ≤ kk` rows long: the
/// example's `a · b` with odd K, `a` padded in K and `b` read as it is.
#[allow(clippy::too_many_arguments)]
fn check_short_b(
    cfg: Matmul,
    blocks: u32,
    schedule: &str,
    m: usize,
    n: usize,
    nb: usize,
    kk: usize,
    kb: usize,
    split: usize,
) {
    let kb = if cfg.trans_b { kk } else { kb };
    let k = splitk_kernel(cfg, blocks);
    let variants = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
    let c = variants.iter().find(|c| c.schedule == schedule).unwrap_or_else(|| panic!("no {schedule} variant"));
    let dt = if cfg.dtype == "bf16" { DType::BF16 } else { DType::F16 };
    let mut rng = Rng(0x5917 ^ (m * 7919 + n * 131 + kk * 7 + split) as u64);
    let (ab, av) = random(&mut rng, dt, m * kk, -1.0, 1.0);
    let (bb, bv) = random(&mut rng, dt, kb * nb, -1.0, 1.0);
    let b_shape = if cfg.trans_b { vec![nb, kk] } else { vec![kb, nb] };
    let (out_dt, out_size, tol) = match cfg.out {
        Some("f16") => (DType::F16, 2, 2e-3),
        Some("bf16") => (DType::BF16, 2, 8e-3),
        _ => (DType::F32, 4, 1e-4),
    };
    let tensors = vec![
        SimTensor { bytes: ab, shape: vec![m, kk], elem: 2 },
        SimTensor { bytes: bb, shape: b_shape, elem: 2 },
        SimTensor { bytes: vec![0xFF; out_size * split * m * n], shape: vec![split, m, n], elem: out_size },
    ];
    // The kernel's dims in order (`Matmul::splitk_text`).
    let dims: Vec<i64> = if cfg.trans_b {
        vec![m as i64, kk as i64, nb as i64, split as i64, n as i64]
    } else {
        vec![m as i64, kk as i64, kb as i64, nb as i64, split as i64, n as i64]
    };
    let out = if schedule == "warp_specialized_gemm" || schedule == "tma_copy" {
        sim::run_interleavings(&c.function, &k, tensors, &dims, &[], None)
    } else {
        sim::run_function(&c.function, &k, tensors, &dims, &[], sim::RunOptions::default()).tensors
    };
    let got = decode(out_dt, &out[2]);
    let want = partials(m, n, nb, kk, kb, &av, &bv, cfg.trans_b, split, cfg.bk as usize);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{} {schedule} {m}×{n}×{kk} split {split}: ws[{}, {}, {}] = {g}, want {w}",
            cfg.name,
            i / (m * n),
            i / n % m,
            i % n
        );
    }
}

/// The shape rule's 64 × 128 tile (one consumer warpgroup).
const SMALL: Matmul = Matmul { name: "splitk_small", bm: 64, bn: 128, threads: 128, stages: 4, ..MATMUL_128X256 };

#[test]
fn ranges_of_0_1_and_2_k_steps() {
    // K = 128: two k-steps; 1 range of 2, 2 ranges of 1, 3 ranges of 1
    // (the last empty), 4 ranges of 1 (two empty).
    for split in [1, 2, 3, 4] {
        check(SMALL, "warp_specialized_gemm", 64, 128, 128, split);
    }
    // K = 0: every range empty (the loops must not hang; zeros written).
    check(SMALL, "warp_specialized_gemm", 64, 128, 0, 2);
}

#[test]
fn short_last_range_edges_layouts_and_bf16() {
    // K = 330: six k-steps, the last partial; 4 ranges of 2 (the last one
    // empty), M and N off the tile.
    check(SMALL, "warp_specialized_gemm", 70, 130, 330, 4);
    check(Matmul { trans_b: true, dtype: "bf16", ..SMALL }, "warp_specialized_gemm", 3, 129, 330, 3);
    // The 128 × 128 tile: two consumer warpgroups.
    let mid = Matmul { bm: 128, bn: 128, threads: 256, ..SMALL };
    check(Matmul { trans_b: true, ..mid }, "warp_specialized_gemm", 130, 72, 200, 2);
}

/// One range written as the product itself (`O = T`: the odd-N output of
/// `ShapedGemm`), rows of `c` not 16-byte multiples, `b` wider than `c`
/// (padded), both layouts.
#[test]
fn one_range_in_the_input_type_and_a_wider_b() {
    check_wide_b(Matmul { out: Some("f16"), ..SMALL }, "warp_specialized_gemm", 70, 129, 136, 200, 1);
    let bt = Matmul { out: Some("bf16"), dtype: "bf16", trans_b: true, ..SMALL };
    check_wide_b(bt, "warp_specialized_gemm", 65, 131, 131, 130, 1);
    check_wide_b(Matmul { out: Some("f16"), ..SMALL }, "warp_specialized_gemm", 3, 17, 24, 64, 2);
}

/// `b [KB, N]` shorter than `a [M, K]` is wide (`a · b` with odd K: `a`
/// padded in K to a multiple of 8, `b`'s 16-byte rows read as they are):
/// its rows past `KB` read zeros (the TMA box's out-of-bounds fill in the
/// warp-specialized variant, the masks in the others), in every range, the
/// last k-step partly past `KB` and past `K`; one range and several, the
/// deep 64 × 32 × 16-stage tile too.
#[test]
fn a_b_shorter_than_k_reads_zeros_past_its_rows() {
    let thin = Matmul { bn: 32, stages: 16, ..SMALL };
    for schedule in ["warp_specialized_gemm", "tma_copy", "cp_async_pipeline"] {
        check_short_b(Matmul { out: Some("f16"), ..SMALL }, 1, schedule, 17, 130, 136, 200, 197, 1);
        check_short_b(SMALL, 1, schedule, 5, 64, 64, 336, 333, 3);
        check_short_b(Matmul { dtype: "bf16", ..thin }, 1, schedule, 3, 40, 40, 136, 129, 2);
    }
}

#[test]
fn the_general_variant_agrees() {
    let general = |c: &Compiled| c.schedule == "cp_async_pipeline" || c.schedule == "general";
    let k = parse_kernel(&SMALL.splitk_text()).unwrap();
    let last = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap().pop().unwrap();
    assert!(general(&last), "the last variant is {}", last.schedule);
    check(SMALL, last.schedule, 70, 130, 330, 4);
    check(Matmul { trans_b: true, ..SMALL }, last.schedule, 5, 17, 77, 3);
}

/// The decode-size tiles of two and three blocks per SM (`Tiles::SmallTwo`,
/// `Tiles::Narrow`, `Tiles::Gemv`): the launch bound on every variant, the
/// warp-specialized register split of the block's share of the file (two
/// blocks of 256 threads: 128 each at entry, the producer at 40, the
/// consumers 216; three: 80 at entry, the consumers 120), the same results
/// as any tile (ranges that do not divide the k-steps, edges, both layouts,
/// a range in the input type), and on sm_80 the shared memory of the blocks
/// within the SM's.
#[test]
fn several_blocks_per_sm() {
    let two = Matmul { stages: 3, ..SMALL };
    let narrow = Matmul { bn: 64, stages: 3, ..SMALL };
    for (cfg, blocks, consumer) in [(two, 2, 216), (narrow, 3, 120)] {
        let k = splitk_kernel(cfg, blocks);
        for target in [Target::Sm90a, Target::Sm80] {
            let variants = compile_variants(&k, target, CompileOptions::default()).unwrap();
            for c in &variants {
                assert!(c.ptx.contains(&format!(".minnctapersm {blocks}\n")), "{} {}", target.name(), c.schedule);
                assert!(blocks as u64 * (c.shared_bytes as u64 + 1024) <= target.info().shared_limit as u64 + 1024);
            }
            if target == Target::Sm90a {
                let ws = variants.iter().find(|c| c.schedule == "warp_specialized_gemm").expect("a ws variant");
                assert!(ws.ptx.contains(&format!("setmaxnreg.inc.sync.aligned.u32 {consumer};")), "{blocks}");
                assert!(ws.ptx.contains("setmaxnreg.dec.sync.aligned.u32 40;"), "{blocks}");
            }
        }
        check_blocks(cfg, blocks, "warp_specialized_gemm", 70, 130, 130, 330, 4);
        check_blocks(
            Matmul { trans_b: true, dtype: "bf16", ..cfg },
            blocks,
            "warp_specialized_gemm",
            3,
            129,
            129,
            330,
            3,
        );
        check_blocks(Matmul { out: Some("f16"), ..cfg }, blocks, "warp_specialized_gemm", 17, 65, 72, 200, 1);
        let last = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap().pop().unwrap();
        check_blocks(Matmul { trans_b: true, ..cfg }, blocks, last.schedule, 5, 17, 17, 77, 3);
    }
    // The 16-row tile of M ≤ 16 (`Tiles::Gemv`, two blocks per SM): no
    // warp-specialized variant (its warpgroups own 64 rows), the TMA-copy
    // pipeline and the cp.async one (mma.sync) on sm_90a, cp.async on sm_80.
    let gemv = Matmul { bm: 16, bn: 128, stages: 4, ..SMALL };
    for trans_b in [false, true] {
        let cfg = Matmul { trans_b, ..gemv };
        let k = splitk_kernel(cfg, 2);
        for (target, want) in
            [(Target::Sm90a, vec!["tma_copy", "cp_async_pipeline"]), (Target::Sm80, vec!["cp_async_pipeline"])]
        {
            let variants = compile_variants(&k, target, CompileOptions::default()).unwrap();
            let got: Vec<&str> = variants.iter().map(|c| c.schedule).collect();
            assert_eq!(got, want, "{}", target.name());
            for c in &variants {
                assert!(c.ptx.contains(".minnctapersm 2\n"), "{} {}", target.name(), c.schedule);
                assert!(c.ptx.contains("mma.sync"), "{} {}", target.name(), c.schedule);
            }
        }
        for schedule in ["tma_copy", "cp_async_pipeline"] {
            check_blocks(cfg, 2, schedule, 1, 129, 129, 77, 2);
            check_blocks(cfg, 2, schedule, 17, 130, 130, 330, 3);
            check_blocks(Matmul { out: Some("bf16"), dtype: "bf16", ..cfg }, 2, schedule, 16, 65, 72, 200, 1);
        }
    }
    // Without the bound: no `.minnctapersm` on sm_80, one block's split on sm_90a.
    let one = compile_variants(&splitk_kernel(two, 1), Target::Sm80, CompileOptions::default()).unwrap();
    assert!(one.iter().all(|c| !c.ptx.contains(".minnctapersm")));
}

/// `blocks_per_sm` blocks whose shared memory exceeds the SM's: a compile
/// error that says so (four blocks of 64 × 128 × 64 in 4 stages, 96 KiB each).
#[test]
fn blocks_whose_shared_memory_does_not_fit_are_an_error() {
    let k = splitk_kernel(SMALL, 4);
    let errs = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_err();
    let text = format!("{errs:?}");
    assert!(text.contains("`blocks_per_sm = 4` needs 4 ×"), "{text}");
    // And the verifier refuses more threads than an SM holds.
    let k = splitk_kernel(SMALL, 17);
    let errs = tile_ir::verify::verify(&k).unwrap_err();
    assert!(format!("{errs:?}").contains("`blocks_per_sm = 17` with 128 threads"), "{errs:?}");
}

/// The deep narrow tiles in thread block clusters (`Tiles::ThinPair`,
/// `Tiles::ThinQuad`): `a`'s tile is the same for the cluster's blocks (its
/// origin has no `bx`), so the warp-specialized variant splits its box over
/// them and multicasts it (32 or 16 rows each), every consumer warp of the
/// cluster releases each block's stage (lane 0 for its warp), and each producer waits for the
/// last releases before its block may exit. The cluster's blocks run
/// together on the simulator (remote arrivals, multicast landing in each
/// block): ranges of 0, 1 and 2 k-steps, K = 0, edges in M, both layouts,
/// under several interleavings, against the same reference.
#[test]
fn clusters_multicast_the_shared_operand() {
    let pair = Matmul { bn: 32, stages: 3, cluster: 2, ..SMALL };
    let quad = Matmul { cluster: 4, ..pair };
    for (cfg, rows) in [(pair, 32), (quad, 16)] {
        let k = splitk_kernel(cfg, 1);
        let variants = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
        let ws = variants.iter().find(|c| c.schedule == "warp_specialized_gemm").expect("a ws variant");
        assert_eq!(ws.tensor_maps[0].box_shape, vec![rows, 64], "a's box: its rows shared over the cluster");
        assert_eq!(ws.tensor_maps[1].box_shape, vec![64, 32], "b's box ([BK, BN]): each block its own");
        let c = cfg.cluster;
        for needle in [
            ".multicast::cluster".to_string(),
            "mapa.shared::cluster.u32".into(),
            "mbarrier.arrive.release.cta.shared::cluster.b64".into(),
            "barrier.cluster.wait.acquire.aligned".into(),
        ] {
            assert!(ws.ptx.contains(&needle), "cluster {c}: no `{needle}`");
        }
        // Each empty barrier counts one lane of each of the cluster's 4·C
        // consumer warps (one remote arrival per warp, not per thread).
        let inits: Vec<&str> = ws.ptx.lines().filter(|l| l.contains("mbarrier.init")).collect();
        let counts: std::collections::BTreeSet<&str> =
            inits.iter().filter_map(|l| l.trim().trim_end_matches(';').rsplit(", ").next()).collect();
        let want = (4 * c).to_string();
        assert_eq!(counts, ["1", want.as_str()].into_iter().collect(), "cluster {c}: {inits:?}");
        // The general variants do not multicast (the cluster is only a launch shape there).
        assert!(variants
            .iter()
            .filter(|v| v.schedule != "warp_specialized_gemm")
            .all(|v| !v.ptx.contains("multicast")));
    }
    for split in [1, 2, 3] {
        check(pair, "warp_specialized_gemm", 70, 64, 128, split);
    }
    check(pair, "warp_specialized_gemm", 64, 64, 0, 2);
    check(Matmul { trans_b: true, dtype: "bf16", ..pair }, "warp_specialized_gemm", 3, 128, 330, 2);
    check(Matmul { out: Some("f16"), ..quad }, "warp_specialized_gemm", 65, 128, 200, 1);
    check(Matmul { trans_b: true, ..quad }, "warp_specialized_gemm", 17, 256, 64, 1);
}

/// No multicast where the cluster's blocks might not share `a`'s tile: a
/// rasterization panel that is not a multiple of the cluster (its blocks
/// may sit in two rows of a panel), or a cluster along y (the blocks differ
/// in `by`). The variant is then the plain warp-specialized one, still
/// correct on the simulator.
#[test]
fn no_multicast_where_the_cluster_may_not_share_a_tile() {
    let odd_panel = Matmul { bn: 32, stages: 3, cluster: 2, swizzle: Some(3), ..SMALL };
    let k = splitk_kernel(odd_panel, 1);
    let variants = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
    let ws = variants.iter().find(|c| c.schedule == "warp_specialized_gemm").expect("a ws variant");
    assert!(!ws.ptx.contains("multicast") && !ws.ptx.contains("mapa"), "panel 3, cluster 2");
    assert_eq!(ws.tensor_maps[0].box_shape, vec![64, 64]);
    check(odd_panel, "warp_specialized_gemm", 70, 128, 200, 2);
    let mut along_y = splitk_kernel(Matmul { bn: 32, stages: 3, ..SMALL }, 1);
    along_y.cluster = [1, 2, 1];
    let variants = compile_variants(&along_y, Target::Sm90a, CompileOptions::default()).unwrap();
    assert!(variants.iter().all(|v| !v.ptx.contains("multicast")));
}

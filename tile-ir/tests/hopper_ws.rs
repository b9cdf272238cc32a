//! The warp-specialized TMA + wgmma variant (sm_90a): which kernels get it,
//! what it contains, and that ptxas assembles it without spills.

mod ptxas;

use tile_ir::print::parse_kernel;
use tile_ir::{compile_variants, CompileOptions, Target};
use tile_testkit::{Matmul, MATMUL_128X256};

#[test]
fn the_example_gemm_gets_a_warp_specialized_variant() {
    let k = parse_kernel(&MATMUL_128X256.text()).unwrap();
    let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
    assert_eq!(v.len(), 3, "the warp-specialized variant, the TMA-copy one and the general one");
    let ws = &v[0];
    if let Ok(dir) = std::env::var("TILE_WS_DUMP") {
        std::fs::write(format!("{dir}/ws.ptx"), &ws.ptx).unwrap();
        std::fs::write(format!("{dir}/ws.thread"), &ws.thread_ir).unwrap();
    }
    assert_eq!(ws.threads, 384);
    assert!(ws.persistent, "pre-statements, the loop and a TMA store: persistent");
    assert!(ws.ptx.contains("%nctaid.x"));
    let plain =
        compile_variants(&k, Target::Sm90a, CompileOptions { persistent: false, ..CompileOptions::default() }).unwrap();
    assert!(!plain[0].persistent);
    // Not persistent: it reads `nctaid.x` only to unfold its grid at entry
    // (a dynamic y extent may pass 65,535 and be folded onto x).
    assert!(tile_ir::abi::folds_grid(&k));
    assert_eq!(plain[0].ptx.matches("%nctaid.x").count(), 1, "{}", plain[0].ptx);
    if let Some(report) = ptxas::assemble("matmul_ws_plain", &plain[0].ptx, "sm_90a") {
        assert!(report.contains("0 bytes spill stores, 0 bytes spill loads"), "{report}");
    }
    assert_eq!(ws.tensor_maps.len(), 3, "A, B and the TMA store of C");
    assert_eq!(ws.tensor_maps[0].box_shape, vec![128, 64]);
    assert_eq!(ws.tensor_maps[1].box_shape, vec![64, 64]);
    assert_eq!((ws.tensor_maps[2].tensor, &ws.tensor_maps[2].box_shape), (2, &vec![128, 64]));
    assert!(ws.ptx.contains("cp.async.bulk.tensor.2d.global.shared::cta"), "TMA store");
    for needle in [
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
        "cp.async.bulk.tensor.2d",
        "setmaxnreg.dec",
        "setmaxnreg.inc",
        "mbarrier.try_wait.parity",
    ] {
        assert!(ws.ptx.contains(needle), "missing {needle}");
    }
    let tma = &v[1];
    assert_eq!((tma.threads, tma.tensor_maps.len()), (256, 2));
    assert!(
        tma.ptx.contains("cp.async.bulk.tensor.2d")
            && tma.ptx.contains("wgmma.mma_async")
            && !tma.ptx.contains("cp.async.cg")
    );
    if let Some(report) = ptxas::assemble("matmul_tma", &tma.ptx, "sm_90a") {
        assert!(report.contains("0 bytes spill stores, 0 bytes spill loads"), "{report}");
    }
    let general = &v[2];
    assert_eq!(general.threads, 256);
    assert!(general.tensor_maps.is_empty());
    // The general variant uses wgmma too (B in 64-column panels), through cp.async.
    assert!(general.ptx.contains("wgmma.mma_async") && general.ptx.contains("cp.async.cg"));
    let report = ptxas::assemble("matmul_ws", &ws.ptx, "sm_90a");
    if let Some(report) = report {
        assert!(report.contains("0 bytes spill stores, 0 bytes spill loads"), "{report}");
        println!("{report}");
    }
    // sm_80 has one variant.
    assert_eq!(compile_variants(&k, Target::Sm80, CompileOptions::default()).unwrap().len(), 1);
}

/// The GPU test's base configuration (tile-runtime/tests/gpu_ws_gemm.rs).
const BASE: Matmul = MATMUL_128X256;

/// Every configuration the GPU test runs (tile-runtime/tests/gpu_ws_gemm.rs)
/// gets a warp-specialized variant that ptxas assembles without spills.
#[test]
fn gemm_configurations_assemble_without_spills() {
    let configs = [
        BASE,
        Matmul { dtype: "bf16", ..BASE },
        Matmul { trans_b: true, ..BASE },
        Matmul { trans_a: true, ..BASE },
        Matmul { trans_a: true, trans_b: true, ..BASE },
        Matmul { stages: 2, ..BASE },
        Matmul { stages: 4, ..BASE },
        Matmul { bm: 64, bn: 128, threads: 128, ..BASE },
        Matmul { bk: 32, ..BASE },
        Matmul { dtype: "bf16", bn: 128, bk: 32, trans_b: true, ..BASE },
        // Two 64-row slices per warpgroup.
        Matmul { bm: 128, bn: 128, threads: 128, ..BASE },
        Matmul { bm: 256, bn: 128, threads: 256, stages: 4, ..BASE },
        Matmul { bm: 128, bn: 64, threads: 128, trans_a: true, dtype: "bf16", ..BASE },
    ];
    for c in configs {
        let text = c.text();
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
        assert_eq!(v.len(), 3, "{c:?}: no warp-specialized variant");
        assert_eq!(v[0].threads, c.threads + 128);
        if let Some(report) = ptxas::assemble("matmul_ws", &v[0].ptx, "sm_90a") {
            assert!(report.contains("0 bytes spill stores, 0 bytes spill loads"), "{c:?}\n{report}");
        }
    }
}

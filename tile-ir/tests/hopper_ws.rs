//! The warp-specialized TMA + wgmma variant (sm_90a): which kernels get it,
//! what it contains, and that ptxas assembles it without spills.

mod ptxas;

use tile_ir::print::parse_kernel;
use tile_ir::{compile_variants, CompileOptions, Target};

/// The example GEMM configuration: 128×256×64, 3 stages, 256 threads.
pub const MATMUL_128X256: &str = "kernel matmul<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[K, N], @2 c: &mut f16[M, N]) threads=256 grid=((N + 255) / 256, (M + 127) / 128, 1) swizzle=8 {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[128, 64]
  @4 b_s: shared f16[64, 256]
  @5 acc: fragment f32[128, 256]
  fill acc, 0.0
  for %5 k in pipelined(3) 0..(K + 63) / 64 {
    copy a[by * 128, k * 64] -> a_s
    copy b[k * 64, bx * 256] -> b_s
    gemm a_s, b_s -> acc
  }
  copy acc -> c[by * 128, bx * 256]
}";

#[test]
fn the_example_gemm_gets_a_warp_specialized_variant() {
    let k = parse_kernel(MATMUL_128X256).unwrap();
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
    assert!(!plain[0].persistent && !plain[0].ptx.contains("%nctaid.x"));
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

#[derive(Copy, Clone, Debug)]
struct Config {
    bf16: bool,
    trans_a: bool,
    trans_b: bool,
    stages: u32,
    bm: i64,
    bn: i64,
    bk: i64,
    threads: u32,
}

const BASE: Config =
    Config { bf16: false, trans_a: false, trans_b: false, stages: 3, bm: 128, bn: 256, bk: 64, threads: 256 };

fn kernel_text(c: Config) -> String {
    let t = if c.bf16 { "bf16" } else { "f16" };
    let (bm, bn, bk) = (c.bm, c.bn, c.bk);
    let (a_ty, a_s, a_org) = if c.trans_a {
        ("[K, M]", format!("[{bk}, {bm}]"), format!("[k * {bk}, by * {bm}]"))
    } else {
        ("[M, K]", format!("[{bm}, {bk}]"), format!("[by * {bm}, k * {bk}]"))
    };
    let (b_ty, b_s, b_org) = if c.trans_b {
        ("[N, K]", format!("[{bn}, {bk}]"), format!("[bx * {bn}, k * {bk}]"))
    } else {
        ("[K, N]", format!("[{bk}, {bn}]"), format!("[k * {bk}, bx * {bn}]"))
    };
    let ta = if c.trans_a { ".t" } else { "" };
    let tb = if c.trans_b { ".t" } else { "" };
    format!(
        "kernel matmul<%0 M, %1 K, %2 N>(@0 a: &{t}{a_ty}, @1 b: &{t}{b_ty}, @2 c: &mut {t}[M, N]) threads={th} grid=((N + {bn1}) / {bn}, (M + {bm1}) / {bm}, 1) swizzle=8 {{
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared {t}{a_s}
  @4 b_s: shared {t}{b_s}
  @5 acc: fragment f32[{bm}, {bn}]
  fill acc, 0.0
  for %5 k in pipelined({st}) 0..(K + {bk1}) / {bk} {{
    copy a{a_org} -> a_s
    copy b{b_org} -> b_s
    gemm a_s{ta}, b_s{tb} -> acc
  }}
  copy acc -> c[by * {bm}, bx * {bn}]
}}",
        th = c.threads,
        bn1 = bn - 1,
        bm1 = bm - 1,
        bk1 = bk - 1,
        st = c.stages,
    )
}

/// Every configuration the GPU test runs (tile-runtime/tests/gpu_ws_gemm.rs)
/// gets a warp-specialized variant that ptxas assembles without spills.
#[test]
fn gemm_configurations_assemble_without_spills() {
    let configs = [
        BASE,
        Config { bf16: true, ..BASE },
        Config { trans_b: true, ..BASE },
        Config { trans_a: true, ..BASE },
        Config { trans_a: true, trans_b: true, ..BASE },
        Config { stages: 2, ..BASE },
        Config { stages: 4, ..BASE },
        Config { bm: 64, bn: 128, threads: 128, ..BASE },
        Config { bk: 32, ..BASE },
        Config { bf16: true, bn: 128, bk: 32, trans_b: true, ..BASE },
        // Two 64-row slices per warpgroup.
        Config { bm: 128, bn: 128, threads: 128, ..BASE },
        Config { bm: 256, bn: 128, threads: 256, stages: 4, ..BASE },
        Config { bm: 128, bn: 64, threads: 128, trans_a: true, bf16: true, ..BASE },
    ];
    for c in configs {
        let text = kernel_text(c);
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
        assert_eq!(v.len(), 3, "{c:?}: no warp-specialized variant");
        assert_eq!(v[0].threads, c.threads + 128);
        if let Some(report) = ptxas::assemble("matmul_ws", &v[0].ptx, "sm_90a") {
            assert!(report.contains("0 bytes spill stores, 0 bytes spill loads"), "{c:?}\n{report}");
        }
    }
}

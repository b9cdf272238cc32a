//! TMA pipelined copies in the general sm_90a lowering
//! (`CompileOptions::tma_copies`, the variant `compile_variants` puts before
//! the general one): gemm kernels whose pipelined copies become thread 0's
//! TMA boxes on per-stage mbarriers, run on the Thread IR simulator (TMA,
//! mbarrier and swizzle semantics from `sim/hopper.rs`) against an f64
//! reference at sizes that are not multiples of the tile, with wgmma
//! (panelled 128B operands) and with mma.sync (threads not a multiple of
//! 128), nested in an outer loop (parities carried across runs); the PTX
//! assembles with ptxas; `compile_variants` orders the variants.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{random, reference, Rng};
use std::collections::HashMap;
use tile_ir::print::parse_kernel;
use tile_ir::*;

fn options() -> CompileOptions {
    CompileOptions { tma_copies: true, ..CompileOptions::default() }
}

/// `C (f32) = A · B` over `reps` repetitions of the pipelined loop (the
/// accumulator is cleared before each, so the result is one product).
fn text(threads: u32, bm: i64, bn: i64, bk: i64, stages: u32, reps: i64) -> String {
    format!(
        "kernel g<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[K, N], @2 c: &mut f32[M, N]) threads={threads} grid=((N + {bn1}) / {bn}, (M + {bm1}) / {bm}, 1) warp_specialize=false {{
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[{bm}, {bk}]
  @4 b_s: shared f16[{bk}, {bn}]
  @5 acc: fragment f32[{bm}, {bn}]
  for %6 r in 0..{reps} {{
    fill acc, 0.0
    for %5 k in pipelined({stages}) 0..(K + {bk1}) / {bk} {{
      copy a[by * {bm}, k * {bk}] -> a_s
      copy b[k * {bk}, bx * {bn}] -> b_s
      gemm a_s, b_s -> acc
    }}
  }}
  copy acc -> c[by * {bm}, bx * {bn}]
}}",
        bn1 = bn - 1,
        bm1 = bm - 1,
        bk1 = bk - 1,
    )
}

/// Compiles with TMA copies, runs on the simulator with the tensor maps the
/// kernel declares, checks against f64.
fn check(text: &str, m: usize, n: usize, kk: usize) -> Compiled {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}\n{text}"));
    let c = compile_with(&k, Target::Sm90a, options()).unwrap_or_else(|e| panic!("compile: {e:?}"));
    assert_eq!(c.tensor_maps.len(), 2, "both pipelined copies use TMA");
    assert!(c.ptx.contains("cp.async.bulk.tensor.2d") && c.ptx.contains("mbarrier.try_wait.parity"));
    assert!(!c.ptx.contains("cp.async.cg") && !c.ptx.contains("cp.async.ca"), "no cp.async left");
    let mut rng = Rng(0x7A ^ (m * 131 + n * 7 + kk) as u64);
    let (ab, av) = random(&mut rng, DType::F16, m * kk, -1.0, 1.0);
    let (bb, bv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
    let f = &c.function;
    let dims = [m as i64, kk as i64, n as i64];
    let mut params = HashMap::new();
    for (i, (name, _)) in f.params.iter().enumerate() {
        if i < 3 {
            params.insert(name.clone(), sim::GBASE + ((i as u64) << 32));
        } else if i < 6 {
            params.insert(name.clone(), dims[i - 3] as u32 as u64);
        }
    }
    let mut sm = sim::Sim::new(f, vec![ab, bb, vec![0xFF; 4 * m * n]], params);
    let shapes = [[m, kk], [kk, n]];
    for tm in &c.tensor_maps {
        let [rows, cols] = shapes[tm.tensor];
        sm.add_tensor_map(
            &tm.param,
            sim::SimTensorMap {
                tensor: tm.tensor,
                elem_bytes: 2,
                dims: vec![cols as u64, rows as u64],
                strides: vec![2 * cols as u64],
                boxdim: tm.box_shape.iter().rev().copied().collect(),
                swizzle: tm.swizzle.bytes(),
            },
        );
    }
    sm.run_grid(tile_ir::abi::eval_grid(&k, &dims).unwrap());
    let got: Vec<f64> = sm.tensors[2].chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect();
    let want = reference(m, n, kk, &av, &bv, false, false);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{m}×{n}×{kk}: C[{}, {}] = {g}, want {w}", i / n, i % n);
    }
    c
}

#[test]
fn tma_copies_feed_wgmma() {
    // 64×64×64 (128B rows), one warpgroup, 3 stages; edges in M, N and K.
    let c = check(&text(128, 64, 64, 64, 3, 1), 100, 72, 88);
    assert!(c.ptx.contains("wgmma.mma_async"));
    if let Some(r) = ptxas::assemble("tma_copy_wgmma", &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{r}");
    }
    // B [32, 128]: two 64-column panels; 2 stages; the loop run twice.
    check(&text(128, 64, 128, 32, 2, 2), 70, 136, 72);
}

#[test]
fn tma_copies_feed_mma_sync() {
    // 64 threads: not a warpgroup multiple, so ldmatrix + mma.sync read the
    // TMA-written swizzled tiles (64B and 128B rows).
    let c = check(&text(64, 32, 64, 32, 3, 2), 50, 72, 104);
    assert!(c.ptx.contains("mma.sync") && !c.ptx.contains("wgmma"));
    if let Some(r) = ptxas::assemble("tma_copy_mma", &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{r}");
    }
}

#[test]
fn variants_put_tma_copies_before_the_general_lowering() {
    let k = parse_kernel(&text(128, 64, 64, 64, 3, 1)).unwrap();
    let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
    assert_eq!(v.len(), 2, "warp_specialize=false: the TMA-copy variant, then the general one");
    assert_eq!(v[0].tensor_maps.len(), 2);
    assert!(v[1].tensor_maps.is_empty() && v[1].ptx.contains("cp.async.cg"));
    assert_eq!(compile_variants(&k, Target::Sm80, CompileOptions::default()).unwrap().len(), 1);
}

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

use gemm_sim::{attention_reference, decode, random, reference, rel_l2, Rng};
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
    let params = sim::plain_params(f, &k, 3, &dims, &[], 0);
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

// ------------------------------------------------ N-D tiles with squeezed dims

/// Runs the compiled variant `c` of `k` on the simulator: tensors in
/// parameter order (shapes outermost first, `elem`-byte elements), then
/// `dims`, then `scalars`; each tensor map the variant declares is encoded
/// from its tensor's shape (dense row-major, as the runtime's `map_spec`).
fn run_variant(
    c: &Compiled,
    k: &Kernel,
    tensors: Vec<Vec<u8>>,
    shapes: &[(Vec<usize>, usize)],
    dims: &[i64],
    scalars: &[u64],
) -> Vec<Vec<u8>> {
    let tensors = tensors
        .into_iter()
        .zip(shapes)
        .map(|(bytes, (shape, elem))| sim::SimTensor { bytes, shape: shape.clone(), elem: *elem })
        .collect();
    sim::run_compiled(c, k, tensors, dims, scalars, sim::RunOptions::default()).tensors
}

/// A pipelined loop of 2-D tiles of a rank-`rank` tensor `[.., S, H, 64]`
/// (rank 3: `[S, H, 64]`; 4: `[B, S, H, 64]`; 5: `[A, B, S, H, 64]`), the
/// outer dims and the head squeezed, through shared memory into
/// `y[.., H, S, 64]`. The head read is `h + dh`: with `dh = 1` the last
/// head's tiles have a squeezed index out of range and must read zeros.
fn squeezed_copy_text(rank: usize, dh: i64) -> String {
    let (outer, outer_idx, grid_z): (&str, &str, &str) = match rank {
        3 => ("", "", "1"),
        4 => ("B, ", "bz, ", "B"),
        _ => ("A, B, ", "bz / B, bz % B, ", "A * B"),
    };
    let dims = match rank {
        3 => "<%0 S, %1 H>",
        4 => "<%0 B, %1 S, %2 H>",
        _ => "<%0 A, %1 B, %2 S, %3 H>",
    };
    let n = rank as u32 - 1;
    let (v0, v1, v2) = (n, n + 1, n + 2);
    format!(
        "kernel sq_copy{rank}{dims}(@0 x: &f16[{outer}S, H, 64], @1 y: &mut f16[{outer}H, S, 64]) threads=128 grid=(H, {grid_z}, 1) {{
  %{v0} hx = block_idx.x
  %{v1} bz = block_idx.y
  @2 x_s: shared f16[32, 64]
  for %{v2} kb in pipelined(3) 0..(S + 31) / 32 {{
    copy x[{outer_idx}kb * 32.., hx + {dh}, 0..] -> x_s
    barrier
    copy x_s -> y[{outer_idx}hx, kb * 32.., 0..]
    barrier
  }}
}}"
    )
}

/// The squeezed copy of rank `rank` on the simulator, TMA-copy variant,
/// against the gather it means (zeros where the head `h + dh` is past `H`
/// or the row past `S`).
fn check_squeezed_copy(rank: usize, dh: i64, outer: &[usize], s: usize, h: usize) -> Compiled {
    let text = squeezed_copy_text(rank, dh);
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("parse: {e:?}\n{text}"));
    // With the persistent loop on (the default), as its variants are compiled here too.
    let v =
        compile_variants(&k, Target::Sm90a, CompileOptions { wsloop_persistent: true, ..CompileOptions::default() })
            .unwrap_or_else(|e| panic!("{e:?}"));
    // The warp-specialized loop comes first (`codegen_wsloop.rs`), persistent
    // then not, then this one.
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    assert_eq!(
        names[..3],
        ["warp_specialized_loop_persistent", "warp_specialized_loop", "tma_copy"],
        "{}: the TMA-copy variant comes third",
        k.name
    );
    let c = v[2].clone();
    assert_eq!(c.tensor_maps.len(), 1);
    let mut want_box = vec![1u32; rank];
    want_box[rank - 3] = 32;
    want_box[rank - 1] = 64;
    assert_eq!(c.tensor_maps[0].box_shape, want_box, "box: 1 on the squeezed dims");
    assert!(c.ptx.contains(&format!("cp.async.bulk.tensor.{rank}d")), "{}", c.ptx);
    assert!(!c.ptx.contains("cp.async.cg") && !c.ptx.contains("cp.async.ca"), "no cp.async left");
    let nb: usize = outer.iter().product();
    let n = nb * s * h * 64;
    let mut rng = Rng(0x5E ^ (rank * 1000 + s * 10 + h) as u64);
    let (xb, xv) = random(&mut rng, DType::F16, n, -4.0, 4.0);
    let mut xshape = outer.to_vec();
    xshape.extend([s, h, 64]);
    let mut yshape = outer.to_vec();
    yshape.extend([h, s, 64]);
    let mut dims: Vec<i64> = outer.iter().map(|&d| d as i64).collect();
    dims.extend([s as i64, h as i64]);
    let out = run_variant(&c, &k, vec![xb, vec![0xFF; 2 * n]], &[(xshape, 2), (yshape, 2)], &dims, &[]);
    let got = decode(DType::F16, &out[1]);
    for o in 0..nb {
        for hi in 0..h {
            for i in 0..s {
                for e in 0..64 {
                    let src = hi as i64 + dh;
                    let want = if src < h as i64 { xv[((o * s + i) * h + src as usize) * 64 + e] } else { 0.0 };
                    let g = got[((o * h + hi) * s + i) * 64 + e];
                    assert_eq!(g, want, "{}: y[{o}, {hi}, {i}, {e}] (x head {src} of {h})", k.name);
                }
            }
        }
    }
    c
}

/// 3-D, 4-D and 5-D tensors with squeezed outer dims and a squeezed head
/// between the row and column ranges: one TMA box per stage with extent 1
/// on the squeezed dims, edge rows (S off the 32-row tile) zero-filled, a
/// squeezed head index out of range reading the whole tile as zeros.
#[test]
fn tma_boxes_of_tiles_with_squeezed_dims() {
    let c = check_squeezed_copy(4, 0, &[2], 45, 3);
    if let Some(r) = ptxas::assemble("tma_copy_squeezed4", &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{r}");
    }
    check_squeezed_copy(4, 1, &[2], 70, 2);
    let c = check_squeezed_copy(3, 0, &[], 33, 2);
    if let Some(r) = ptxas::assemble("tma_copy_squeezed3", &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{r}");
    }
    let c = check_squeezed_copy(5, 1, &[2, 2], 40, 2);
    if let Some(r) = ptxas::assemble("tma_copy_squeezed5", &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{r}");
    }
}

/// The 4-D FlashAttention kernels (`tile_testkit::attention_4d_text`
/// in both layouts: K and V tiles with the batch and head squeezed) on
/// sm_90a: the TMA-copy schedule takes them, `compile_variants` puts its
/// variant first, its two maps (K, V) have boxes `[1, 1, 64, 64]`
/// (`[b, h, s, d]`) or `[1, 64, 1, 64]` (`[b, s, h, d]`), and the variant
/// matches an f64 reference on the simulator at lengths off the 64-row
/// tiles (edge K/V tiles zero-filled by TMA, masked by the kernel).
#[test]
fn tma_copies_feed_4d_attention_in_both_layouts() {
    for (layout, bshd) in [(tile_testkit::Layout4d::Bhsd, false), (tile_testkit::Layout4d::Bshd, true)] {
        let text = &tile_testkit::attention_4d_text(layout);
        let k = parse_kernel(text).unwrap();
        let d = schedule::decisions(&k, Target::Sm90a, CompileOptions::default());
        let tma = d.iter().find(|(s, _)| s.name() == "tma_copy").expect("a tma_copy decision");
        assert!(tma.1.is_ok(), "{}: tma_copy declines: {:?}", k.name, tma.1);
        let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
        // First: the warp-specialized loop declines one consumer warpgroup
        // with a gemm in its loop (`codegen_wsloop.rs`).
        assert_eq!(
            v[0].schedule,
            "tma_copy",
            "{}: variants {:?}",
            k.name,
            v.iter().map(|c| c.schedule).collect::<Vec<_>>()
        );
        assert!(v.last().unwrap().tensor_maps.is_empty(), "the last variant runs on any tensors");
        let c = &v[0];
        let want_box: Vec<u32> = if bshd { vec![1, 64, 1, 64] } else { vec![1, 1, 64, 64] };
        let maps: Vec<(usize, Vec<u32>)> = c.tensor_maps.iter().map(|m| (m.tensor, m.box_shape.clone())).collect();
        assert_eq!(maps, vec![(1, want_box.clone()), (2, want_box)], "{}: K and V maps", k.name);
        assert!(c.tensor_maps.iter().all(|m| m.swizzle.bytes() == 128), "{}: 128-byte rows swizzled", k.name);
        assert!(c.ptx.contains("cp.async.bulk.tensor.4d"));
        if let Some(r) = ptxas::assemble(&format!("tma_copy_{}", k.name), &c.ptx, "sm_90a") {
            assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{r}");
        }
        for (b, h, sq, sk) in [(2usize, 2usize, 70usize, 129usize), (1, 3, 1, 65), (1, 2, 64, 200)] {
            check_attention_4d(&k, c, bshd, b, h, sq, sk, 0x7A77 ^ (sq * 1000 + sk + h) as u64);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_attention_4d(k: &Kernel, c: &Compiled, bshd: bool, b: usize, h: usize, sq: usize, sk: usize, seed: u64) {
    let d = 64;
    let mut rng = Rng(seed);
    let (qb, qv) = random(&mut rng, DType::F16, b * h * sq * d, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, DType::F16, b * h * sk * d, -2.0, 2.0);
    let (vb, vv) = random(&mut rng, DType::F16, b * h * sk * d, -1.0, 1.0);
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    let dims: Vec<i64> = if bshd {
        vec![b as i64, sq as i64, h as i64, sk as i64]
    } else {
        vec![b as i64, h as i64, sq as i64, sk as i64]
    };
    let shape = |b: usize, h: usize, s: usize| if bshd { vec![b, s, h, 64] } else { vec![b, h, s, 64] };
    let shapes =
        [(shape(b, h, sq), 2), (shape(b, h, sk), 2), (shape(b, h, sk), 2), (shape(b, h, sq), 2), (vec![b, h, sq], 4)];
    let tensors = vec![qb, kb, vb, vec![0xFF; 2 * b * h * sq * d], vec![0xFF; 4 * b * h * sq]];
    let out = run_variant(c, k, tensors, &shapes, &dims, &[scale.to_bits() as u64]);
    let o = decode(DType::F16, &out[3]);
    let at = |s: usize, bi: usize, hi: usize, i: usize, e: usize| {
        if bshd {
            ((bi * s + i) * h + hi) * d + e
        } else {
            ((bi * h + hi) * s + i) * d + e
        }
    };
    for bi in 0..b {
        for hi in 0..h {
            let gather = |x: &[f64], s: usize| -> Vec<f64> {
                (0..s).flat_map(|i| (0..d).map(move |e| (i, e))).map(|(i, e)| x[at(s, bi, hi, i, e)]).collect()
            };
            let want = attention_reference(&gather(&qv, sq), &gather(&kv, sk), &gather(&vv, sk), sq, sk, d);
            let got: Vec<f64> =
                (0..sq).flat_map(|i| (0..d).map(move |e| (i, e))).map(|(i, e)| o[at(sq, bi, hi, i, e)]).collect();
            let err = rel_l2(&got, &want);
            assert!(err <= 5e-3, "{} b{bi} h{hi} sq={sq} sk={sk}: relative L2 error {err:.3e}", k.name);
        }
    }
}

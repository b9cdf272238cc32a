//! The gemm examples' kernels as the `tile` macro lowers them (text form of
//! `examples/kernels/gemm.rs` and `tests/kernels/gemm.rs`): tensor-core gemm
//! (gemm-cg) inside software-pipelined loops (gemm-pipe), with rasterization
//! (`swizzle=`), both operand transposes and the FlashAttention inner loop
//! (A from registers), run on the Thread IR simulator (which models cp.async
//! as asynchronous and checks shared-memory races) against f64 references at
//! sizes that are not multiples of the tiles.
//!
//! This is where the two branches meet: ldmatrix must read the stage that the
//! pipelined copies filled, and the schedule's waits must cover it.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::*;
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{Matmul, ATTENTION, GEMM_TN_BF16, MATMUL};

/// The example matmul with B stored `[N, K]`.
const MATMUL_BT: Matmul = Matmul { name: "matmul_bt", trans_b: true, ..MATMUL };

#[test]
fn matmul_three_stages_with_rasterization() {
    // K = 70: three k-steps (the last partial), as many as stages; K = 33: fewer; K = 161: more.
    for (m, n, kk) in [(130, 129, 70), (129, 257, 161), (1, 1, 1), (70, 130, 33)] {
        check_gemm(&MATMUL.text(), DType::F16, m, n, kk, false, false, &[m as i64, kk as i64, n as i64], 2e-3);
    }
}

#[test]
fn matmul_b_transposed() {
    for (m, n, kk) in [(130, 129, 100), (5, 200, 64)] {
        check_gemm(&MATMUL_BT.text(), DType::F16, m, n, kk, false, true, &[m as i64, kk as i64, n as i64], 2e-3);
    }
}

#[test]
fn a_transposed_bf16_two_stages() {
    for (m, n, kk) in [(100, 70, 150), (65, 64, 31)] {
        check_gemm(&GEMM_TN_BF16.text(), DType::BF16, m, n, kk, true, false, &[kk as i64, m as i64, n as i64], 1e-2);
    }
}

#[test]
fn attention_pipelined_over_key_tiles() {
    for (sq, sk) in [(70, 129), (64, 64), (1, 200)] {
        check_attention(Target::Sm80, ATTENTION, DType::F16, 64, sq, sk, 0xA77E ^ (sq * 1000 + sk) as u64, 5e-3);
    }
}

/// `use_swizzle(2)` on a 5 × 7 grid: the prologue remaps the block indices
/// (the remap code is there, and only with `swizzle=`), every block still
/// writes its own coordinates exactly once (the remap is a bijection).
#[test]
fn rasterized_blocks_cover_the_grid_once() {
    let text = |swizzle: &str| {
        format!(
            "kernel blocks<%0 H, %1 W>(@0 out: &mut i32[H, W]) threads=32 grid=(W, H, 1){swizzle} {{
  %2 bx = block_idx.x
  %3 by = block_idx.y
  out[by, bx] = by * 1000 + bx
}}"
        )
    };
    let (h, w) = (7usize, 5usize);
    let out = run(&text(" swizzle=2"), vec![vec![0xFF; 4 * h * w]], &[h as i64, w as i64], &[]);
    let got: Vec<i32> = out[0].chunks(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let want: Vec<i32> = (0..h * w).map(|i| (i / w * 1000 + i % w) as i32).collect();
    assert_eq!(got, want);
    let ptx = |t: &str| compile(&parse_kernel(t).unwrap(), Target::Sm80).unwrap().ptx;
    assert!(ptx(&text(" swizzle=2")).contains("min.s32"), "no rasterization code");
    assert!(!ptx(&text("")).contains("min.s32"), "rasterization code without swizzle");
}

/// FlashAttention forward over 4-D tensors, as the macro lowers
/// `tests/kernels/ndtile.rs` (tiles that squeeze the batch and head dims):
/// `[b, h, s, d]` and `[b, s, h, d]`, on both targets, the output against an
/// f64 reference per (batch, head), lengths off the 64-row tiles; the LSE
/// (`lse: [B, H, SQ]` in both layouts) likewise.
#[test]
fn attention_over_4d_tensors_in_both_layouts() {
    for (layout, bshd) in [(tile_testkit::Layout4d::Bhsd, false), (tile_testkit::Layout4d::Bshd, true)] {
        let text = &tile_testkit::attention_4d_text(layout);
        for target in [Target::Sm80, Target::Sm90a] {
            for (b, h, sq, sk) in [(2usize, 2usize, 70usize, 129usize), (1, 3, 1, 65)] {
                check_attention_4d(target, text, bshd, b, h, sq, sk, 0xA77E ^ (sq * 1000 + sk + h) as u64);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_attention_4d(target: Target, text: &str, bshd: bool, b: usize, h: usize, sq: usize, sk: usize, seed: u64) {
    let d = 64;
    let mut rng = Rng(seed);
    let (qb, qv) = random(&mut rng, DType::F16, b * h * sq * d, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, DType::F16, b * h * sk * d, -2.0, 2.0);
    let (vb, vv) = random(&mut rng, DType::F16, b * h * sk * d, -1.0, 1.0);
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    // Kernel dims: [B, H, SQ, SK] for [b, h, s, d], [B, SQ, H, SK] for [b, s, h, d].
    let dims: Vec<i64> = if bshd {
        vec![b as i64, sq as i64, h as i64, sk as i64]
    } else {
        vec![b as i64, h as i64, sq as i64, sk as i64]
    };
    let out = run_on(
        target,
        text,
        vec![qb, kb, vb, vec![0xFF; 2 * b * h * sq * d], vec![0xFF; 4 * b * h * sq]],
        &dims,
        &[scale.to_bits() as u64],
    );
    let o = decode(DType::F16, &out[3]);
    let lse = decode(DType::F32, &out[4]);
    assert_eq!(lse.len(), b * h * sq);
    // Element (bi, hi, i, c) of a tensor of sequence length s.
    let at = |s: usize, bi: usize, hi: usize, i: usize, c: usize| {
        if bshd {
            ((bi * s + i) * h + hi) * d + c
        } else {
            ((bi * h + hi) * s + i) * d + c
        }
    };
    for bi in 0..b {
        for hi in 0..h {
            let gather = |x: &[f64], s: usize| -> Vec<f64> {
                (0..s).flat_map(|i| (0..d).map(move |c| (i, c))).map(|(i, c)| x[at(s, bi, hi, i, c)]).collect()
            };
            let (q1, k1, v1) = (gather(&qv, sq), gather(&kv, sk), gather(&vv, sk));
            let want = attention_reference(&q1, &k1, &v1, sq, sk, d);
            let got: Vec<f64> =
                (0..sq).flat_map(|i| (0..d).map(move |c| (i, c))).map(|(i, c)| o[at(sq, bi, hi, i, c)]).collect();
            let err = rel_l2(&got, &want);
            assert!(err <= 5e-3, "{target:?} bshd={bshd} b{bi} h{hi} sq={sq} sk={sk}: relative L2 error {err:.3e}");
            for (i, want) in attention_lse_reference(&q1, &k1, sq, sk, d).into_iter().enumerate() {
                let got = lse[(bi * h + hi) * sq + i];
                assert!(
                    (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                    "{target:?} bshd={bshd} b{bi} h{hi} sq={sq} sk={sk} row {i}: lse {got} want {want}"
                );
            }
        }
    }
}

/// Every variant of the 4-D attention kernels assembles without spills; on
/// sm_90a the first is the TMA-copy one (boxes with extent 1 on the
/// squeezed dims, `codegen_tma_copy.rs`: K and V; the warp-specialized loop
/// declines one consumer warpgroup by default, `codegen_wsloop.rs` covers
/// it); the others and sm_80's have no tensor maps.
#[test]
fn attention_over_4d_tensors_assembles_without_spills() {
    for layout in [tile_testkit::Layout4d::Bhsd, tile_testkit::Layout4d::Bshd] {
        let text = &tile_testkit::attention_4d_text(layout);
        let k = parse_kernel(text).unwrap();
        for (target, arch) in [(Target::Sm80, "sm_80"), (Target::Sm90a, "sm_90a")] {
            let variants = compile_variants(&k, target, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
            for (i, c) in variants.iter().enumerate() {
                let want = match (target, i) {
                    (Target::Sm90a, 0) => "tma_copy",
                    _ => "cp_async_pipeline",
                };
                assert_eq!(c.schedule, want, "{} ({arch}) variant {i}", k.name);
                assert_eq!(
                    c.tensor_maps.len(),
                    match want {
                        "tma_copy" => 2,
                        _ => 0,
                    },
                    "{} ({arch}) {}: tensor maps",
                    k.name,
                    c.schedule
                );
                if let Some(r) = ptxas::assemble(&k.name, &c.ptx, arch) {
                    assert!(
                        r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"),
                        "{} ({arch}) spills:\n{r}",
                        k.name
                    );
                }
            }
        }
    }
}

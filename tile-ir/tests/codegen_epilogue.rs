//! Epilogue staging (`passes/epilogue.rs`): a GEMM's f32 accumulator copied
//! to global memory goes through a shared scratch tile so that the global
//! stores are 16-byte vectors. Checked on the Thread IR simulator against an
//! f64 reference, staged and direct, for f16, bf16 and f32 outputs, at sizes
//! off the tile and with rows that are not a multiple of the vector (the
//! run-time fallback to element stores); the scratch takes the memory of the
//! dead pipelined B stages when it fits there, fresh memory otherwise.

mod gemm_sim;
mod sim;

use gemm_sim::{random, Rng};
use half::{bf16, f16};
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{Matmul, MATMUL};

/// `c = a · b` with `bm × bn × bk` tiles, 3 stages, `threads` threads,
/// f16 inputs and `out` output.
fn matmul(out: &'static str, bm: i64, bn: i64, bk: i64, threads: u32) -> String {
    Matmul { out: Some(out), bm, bn, bk, threads, swizzle: None, ..MATMUL }.text()
}

fn read(out: &str, bytes: &[u8], i: usize) -> f64 {
    match out {
        "f16" => f16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])).to_f64(),
        "bf16" => bf16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])).to_f64(),
        _ => f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]) as f64,
    }
}

/// `(output dtype, bm, bn, bk, threads, whether the scratch fits in the dead
/// B stages)`.
const CONFIGS: [(&str, i64, i64, i64, u32, bool); 6] = [
    ("f16", 64, 64, 64, 128, true),
    ("bf16", 64, 64, 64, 128, true),
    ("f32", 64, 64, 64, 128, true),
    ("f32", 64, 128, 16, 128, false),
    ("f16", 128, 128, 32, 256, false),
    ("f32", 32, 64, 64, 128, true),
];

#[test]
fn staged_epilogue_matches_reference_at_edges() {
    for (out, bm, bn, bk, threads, aliased) in CONFIGS {
        let text = matmul(out, bm, bn, bk, threads);
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("parse: {e:?}\n{text}"));
        let staged = compile(&k, Target::Sm80).unwrap_or_else(|e| panic!("{out} {bm}x{bn}: {e:?}"));
        let direct =
            compile_with(&k, Target::Sm80, CompileOptions { stage_epilogues: false, ..CompileOptions::default() })
                .unwrap_or_else(|e| panic!("{out} {bm}x{bn} (direct): {e:?}"));
        assert!(staged.ptx.contains("st.global.v4"), "{out} {bm}x{bn}: not staged");
        assert!(!direct.ptx.contains("st.global.v4"), "{out} {bm}x{bn}: direct path has 16-byte stores");
        if aliased {
            assert_eq!(staged.shared_bytes, direct.shared_bytes, "{out} {bm}x{bn}: scratch not in the dead B stages");
        } else {
            assert!(staged.shared_bytes > direct.shared_bytes, "{out} {bm}x{bn}: scratch should need fresh memory");
        }
        let esize = if out == "f32" { 4 } else { 2 };
        // N a multiple of 8 (16-byte path, f16) or of 4 (f32) and not (element fallback); M, N off the tile.
        for (m, n, kk) in [
            (bm as usize + 5, bn as usize + 8, 72usize),
            (bm as usize * 2 - 1, bn as usize + 3, 40),
            (3, 8, 8),
            (7, 13, 17),
        ] {
            let mut rng = Rng(0xE916 ^ (m * 7 + n * 131 + kk + bm as usize) as u64);
            let (ab, av) = random(&mut rng, DType::F16, m * kk, -1.0, 1.0);
            let (bb, bv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
            let tol = match out {
                "f16" => 2e-2,
                "bf16" => 1e-1,
                _ => 1e-3,
            };
            for (what, c) in [("staged", &staged), ("direct", &direct)] {
                let res = sim::launch(
                    &c.function,
                    &k,
                    vec![ab.clone(), bb.clone(), vec![0xFF; esize * m * n]],
                    &[m as i64, kk as i64, n as i64],
                    &[],
                )
                .tensors;
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..kk).map(|p| av[i * kk + p] * bv[p * n + j]).sum();
                        let got = read(out, &res[2], i * n + j);
                        assert!(
                            (got - want).abs() <= tol * (1.0 + want.abs()),
                            "{what} {out} {bm}x{bn}, {m}x{n}x{kk}: C[{i},{j}] = {got}, want {want}"
                        );
                    }
                }
            }
        }
    }
}

/// A fragment copy that already stores 16 bytes per access, or a tile whose
/// rows are not a multiple of 16 bytes, is left alone.
#[test]
fn copies_that_gain_nothing_are_not_staged() {
    let text = "kernel add<%0 M, %1 N>(@0 x: &f32[M, N], @1 y: &mut f32[M, N]) threads=128 grid=((N + 63) / 64, (M + 15) / 16, 1) {
  %2 bx = block_idx.x
  %3 by = block_idx.y
  @2 t: fragment f32[16, 64]
  copy x[by * 16, bx * 64] -> t
  copy t -> y[by * 16, bx * 64]
}";
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    let c = compile(&k, Target::Sm80).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.shared_bytes, 0);
}

/// A scratch that fits neither in a dead buffer nor next to the pipeline
/// stages (the example configuration with an f32 output: 130 KB of scratch,
/// 96 KB of dead B stages, 144 KB of stages) leaves the direct stores.
#[test]
fn a_scratch_that_does_not_fit_falls_back_to_direct_stores() {
    let k = parse_kernel(&matmul("f32", 128, 256, 64, 256)).unwrap_or_else(|e| panic!("parse: {e:?}"));
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile(&k, target).unwrap_or_else(|e| panic!("{e:?}"));
        let direct = compile_with(&k, target, CompileOptions { stage_epilogues: false, ..CompileOptions::default() })
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.ptx, direct.ptx);
        assert!(!c.ptx.contains("st.global.v4"));
    }
}

//! Reduce-layout fragments (the rows of an mma accumulator, replicated over
//! the lanes that hold a row) copied to 1-D global f32 tensors, on the Thread
//! IR simulator for both targets, against f64 references at a row count off
//! the 64-row tile.
//!
//! Regression test: these stores once read wrong in every even row here, and
//! the cause was the harness (`gemm_sim::decode` read every element as two
//! bytes, so an f32 tensor came back as the halves of its elements), not the
//! simulator or the code generator.

mod gemm_sim;
mod sim;

use gemm_sim::*;
use tile_ir::*;

/// `c = a · b` in an mma accumulator, its row maxima and row sums copied
/// out, then the same fragment refilled with a constant and copied out again.
const ROW_STATS: &str = "kernel row_stats<%0 M, %1 K>(@0 a: &f16[M, K], @1 b: &f16[K, 64], @2 mx: &mut f32[M], @3 sm: &mut f32[M], @4 three: &mut f32[M]) threads=128 grid=((M + 63) / 64, 1, 1) {
  %2 bx = block_idx.x
  @5 a_s: shared f16[64, 64]
  @6 b_s: shared f16[64, 64]
  @7 c: fragment f32[64, 64]
  @8 m: fragment f32[64]
  @9 s: fragment f32[64]
  copy a[bx * 64.., 0..] -> a_s
  copy b[0.., 0..] -> b_s
  gemm a_s, b_s -> c, clear, policy=full_row
  reduce.max c -> m, dim=1
  reduce.sum c -> s, dim=1
  copy m -> mx[bx * 64..]
  copy s -> sm[bx * 64..]
  fill m, 3.0
  copy m -> three[bx * 64..]
}";

#[test]
fn row_reductions_and_fills_copied_to_1d_tensors() {
    for target in [Target::Sm80, Target::Sm90a] {
        for (m, kk) in [(70usize, 64usize), (130, 50), (1, 64)] {
            let mut rng = Rng(0x15E ^ (m * 100 + kk) as u64);
            let (ab, av) = random(&mut rng, DType::F16, m * kk, -1.0, 1.0);
            let (bb, bv) = random(&mut rng, DType::F16, kk * 64, -1.0, 1.0);
            let out = run_on(
                target,
                ROW_STATS,
                vec![ab, bb, vec![0xFF; 4 * m], vec![0xFF; 4 * m], vec![0xFF; 4 * m]],
                &[m as i64, kk as i64],
                &[],
            );
            let c = reference(m, 64, kk, &av, &bv, false, false);
            let (mx, sm, three) =
                (decode(DType::F32, &out[2]), decode(DType::F32, &out[3]), decode(DType::F32, &out[4]));
            assert_eq!((mx.len(), sm.len(), three.len()), (m, m, m));
            for i in 0..m {
                let row = &c[i * 64..(i + 1) * 64];
                let want_max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let want_sum: f64 = row.iter().sum();
                let ctx = format!("{target:?} M={m} K={kk} row {i}");
                assert!(
                    (mx[i] - want_max).abs() <= 1e-3 * (1.0 + want_max.abs()),
                    "{ctx}: max {} want {want_max}",
                    mx[i]
                );
                assert!(
                    (sm[i] - want_sum).abs() <= 1e-3 * (1.0 + want_sum.abs()),
                    "{ctx}: sum {} want {want_sum}",
                    sm[i]
                );
                assert_eq!(three[i], 3.0, "{ctx}: fill");
            }
        }
    }
}

/// The harness reads f32 tensors as whole 4-byte elements.
#[test]
fn decode_reads_f32_elements_whole() {
    let (b, v) = encode(DType::F32, &[3.0, -0.5, 1e-3]);
    assert_eq!(b.len(), 12);
    assert_eq!(decode(DType::F32, &b), v);
}

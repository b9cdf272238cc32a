use tile::prelude::*;

// A mistake the frontend reports (a misspelt name) and one the verifier
// reports (the gemm's shapes disagree) are shown together, each at its
// statement.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 32, D = 64))]
pub fn scores(q: &Tensor<f16, S, D>, k: &Tensor<f16, SK, D>, out: &mut Tensor<f32, S, SK>, scale: f32) {
    let (bx, by) = grid(cdiv(SK, BN), cdiv(S, BM));
    let mut q_s = shared::<f16, BM, D>();
    let mut k_s = shared::<f16, BN, D>();
    let mut s = fragment::<f32, BM, BN>();
    copy(q.tile([by * BM, 0]), &mut q_s);
    copy(k.tile([bx * BN, 0]), &mut k_s);
    gemm(&q_s, &k_s, &mut s).clear().policy(FullRow);
    for (i, j) in parallel((BM, BN)) {
        s[(i, j)] = s[(i, j)] * scal;
    }
    copy(&s, out.tile([by * BM, bx * BN]));
}

fn main() {}

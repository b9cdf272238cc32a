use tile::prelude::*;

/// C = A · B on shared-memory tiles, without tensor cores: every element of
/// the block's tile is a dot product over the staged K slices.
#[tile_kernel(threads = 256, consts(BM = 32, BN = 32, BK = 16))]
pub fn matmul_simt(a: &Tensor<f32, M, K>, b: &Tensor<f32, K, N>, c: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f32, BM, BK>();
    let mut b_s = shared::<f32, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), 2) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        for (i, j) in parallel((BM, BN)) {
            for kk in 0..BK {
                acc[(i, j)] += a_s[(i, kk)] * b_s[(kk, j)];
            }
        }
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

fn main() {
    assert_eq!(matmul_simt::META.name, "matmul_simt");
}

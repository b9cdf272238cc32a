use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32))]
pub fn per_row(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    copy(a.tile([by * BM, 0]), &mut a_s);
    copy(b.tile([0, bx * BN]), &mut b_s);
    for i in parallel(BM) {
        gemm(&a_s, &b_s, &mut acc).clear();
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

fn main() {}

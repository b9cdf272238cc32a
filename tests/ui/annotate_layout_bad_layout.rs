use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 64, BN = 64, BK = 32))]
pub fn bad_layout(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    // 64-byte rows: only 4 chunks to permute, so at most 2 bits.
    annotate_layout(&a_s, swizzle(3));
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for kk in 0..cdiv(K, BK) {
        copy(a.tile([by * BM, kk * BK]), &mut a_s);
        copy(b.tile([kk * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

fn main() {}

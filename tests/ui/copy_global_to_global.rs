use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 64, BN = 64))]
pub fn copy2d(x: &Tensor<f16, M, N>, y: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    copy(x.tile([by * BM, bx * BN]), y.tile([by * BM, bx * BN]));
}

fn main() {}

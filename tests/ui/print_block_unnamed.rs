use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 4, BN = 128))]
pub fn scaled(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>, s: f32) {
    let (bx, _) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    copy(x.tile([0, bx * BN]), &mut t);
    print("s = {}", s).block((0, 1));
    for (i, j) in parallel((BM, BN)) {
        t[(i, j)] = t[(i, j)] * s;
    }
    copy(&t, y.tile([0, bx * BN]));
}

fn main() {}

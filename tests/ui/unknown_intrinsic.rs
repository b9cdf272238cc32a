use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 4, BN = 256))]
pub fn row_exp(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    let row = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    copy(x.tile([row * BM, 0]), &mut t);
    for (i, j) in parallel((BM, BN)) {
        t[(i, j)] = exp3(t[(i, j)]);
    }
    copy(&t, y.tile([row * BM, 0]));
}

fn main() {}

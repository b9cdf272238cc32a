use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 4, BN = 256))]
pub fn row_max(x: &Tensor<f32, M, N>, out: &mut Tensor<f32, M>) {
    let row = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    let mut m = fragment::<f32, BN>();
    copy(x.tile([row * BM, 0]), &mut t).fill(f32::NEG_INFINITY);
    reduce_max(&t, &mut m, 1);
    copy(&m, out.tile([row * BM]));
}

fn main() {}

use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 64))]
pub fn row_sum(x: &Tensor<f32, M, K>, out: &mut Tensor<f32, M>) {
    let bx = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, K>();
    let mut s = fragment::<f32, BM>();
    copy(x.tile([bx * BM, 0]), &mut t);
    reduce_sum(&t, &mut s, 1);
    copy(&s, out.tile([bx * BM]));
}

fn main() {}

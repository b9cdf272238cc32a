use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 64, BK = 32))]
pub fn row_sums(x: &Tensor<f32, M, K>, out: &mut Tensor<f32, M>) {
    let bx = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, BK>();
    let mut s = fragment::<f32, BM>();
    clear(&mut s);
    let mut k = 0;
    while k < cdiv(K, BK) {
        copy(x.tile([bx * BM, k * BK]), &mut t);
        reduce_sum(&t, &mut s, 1).keep();
        k += 1;
    }
    copy(&s, out.tile([bx * BM]));
}

fn main() {}

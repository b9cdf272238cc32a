use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BM = 64, BK = 32))]
pub fn stage(a: &Tensor<f16, M, K>, out: &mut Tensor<f16, M, K>) {
    let (bx, by) = grid(cdiv(K, BK), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut a_f = fragment::<f16, BK, BM>();
    copy(a.tile([by * BM, bx * BK]), &mut a_s);
    copy(&a_s, &mut a_f);
    copy(&a_f, out.tile([by * BM, bx * BK]));
}

fn main() {}

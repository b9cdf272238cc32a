use tile::prelude::*;

// A tile entry's range has no end: the extent comes from the buffer.
#[tile_kernel(threads = 128, consts(BM = 64, BN = 64))]
pub fn window(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    copy(x.tile([by * BM..by * BM + BM, bx * BN..]), &mut t);
    copy(&t, y.tile([by * BM.., bx * BN..=bx * BN + 63]));
}

fn main() {}

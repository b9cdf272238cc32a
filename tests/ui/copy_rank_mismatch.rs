use tile::prelude::*;

// A 2-D fragment cannot take a tile of a 1-D tensor (the verifier's rule,
// reported at the statement).
#[tile_kernel(threads = 128, consts(BM = 4, BN = 64))]
pub fn widen(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BN));
    let mut t = fragment::<f32, BM, BN>();
    copy(x.tile([bx * BN]), &mut t).fill(0.0);
    copy(&t, y.tile([bx * BN]));
}

fn main() {}

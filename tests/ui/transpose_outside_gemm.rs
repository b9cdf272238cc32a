use tile::prelude::*;

#[tile_kernel(threads = 128, consts(B = 32))]
pub fn transpose(x: &Tensor<f16, N, N>, y: &mut Tensor<f16, N, N>) {
    let (bx, by) = grid(cdiv(N, B), cdiv(N, B));
    let mut t = shared::<f16, B, B>();
    let mut u = fragment::<f16, B, B>();
    copy(x.tile([by * B, bx * B]), &mut t);
    copy(&t.t(), &mut u);
    copy(&u, y.tile([bx * B, by * B]));
}

fn main() {}

use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BN = 128))]
pub fn scaled(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>, s: f32) {
    let bx = grid(cdiv(N, BN));
    let mut t = fragment::<f32, BN>();
    copy(x.tile([bx * BN]), &mut t);
    for i in parallel(BN) {
        print("t[{}] = {}", t[i]);
        t[i] = t[i] * s;
    }
    copy(&t, y.tile([bx * BN]));
}

fn main() {}

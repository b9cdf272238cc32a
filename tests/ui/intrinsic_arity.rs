use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn clamp_low(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>, lo: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = max(t[i], lo, 0.0);
    }
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {}

use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn inplace_scale(x: &Tensor<f32, N>, s: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = t[i] * s;
    }
    copy(&t, x.tile([bx * BLOCK]));
}

fn main() {}

use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn negate(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let mut t = fragment::<f32, BLOCK>();
    let bx = grid(cdiv(N, BLOCK));
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = -t[i];
    }
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {}

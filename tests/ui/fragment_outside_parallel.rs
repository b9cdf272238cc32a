use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn first_plus_one(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    t[0] = t[0] + 1.0;
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {}

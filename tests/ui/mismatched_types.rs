use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn add_bias(x: &Tensor<f16, N>, bias: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut h = fragment::<f16, BLOCK>();
    let mut b = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut h);
    copy(bias.tile([bx * BLOCK]), &mut b);
    for i in parallel(BLOCK) {
        b[i] = h[i] + b[i];
    }
    copy(&b, y.tile([bx * BLOCK]));
}

fn main() {}

use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 1024), archs = "sm_90a, sm_100")]
pub fn copy_kernel(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {}

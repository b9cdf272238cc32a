use tile::prelude::*;

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn shift(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    let mut u = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK - 1) {
        u[i] = t[i + 1];
    }
    copy(&u, y.tile([bx * BLOCK]));
}

fn main() {}

use tile::prelude::*;
use tile::{DeviceTensor, Stream};

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn axpy(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>, alpha: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    let mut u = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(y.tile([bx * BLOCK]), &mut u);
    for i in parallel(BLOCK) {
        u[i] = fma(alpha, t[i], u[i]);
    }
    copy(&u, y.tile([bx * BLOCK]));
}

fn run(stream: &Stream, x: &DeviceTensor<f32>, y: &mut DeviceTensor<f32>) {
    axpy::launch(stream, x, y).unwrap();
}

fn main() {
    let _ = run;
}

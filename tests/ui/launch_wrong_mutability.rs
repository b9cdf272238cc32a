use tile::prelude::*;
use tile::{DeviceTensor, Stream};

#[tile_kernel(threads = 256, consts(BLOCK = 1024))]
pub fn vector_add(a: &Tensor<f32, N>, b: &Tensor<f32, N>, c: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut x = fragment::<f32, BLOCK>();
    let mut y = fragment::<f32, BLOCK>();
    copy(a.tile([bx * BLOCK]), &mut x);
    copy(b.tile([bx * BLOCK]), &mut y);
    for i in parallel(BLOCK) {
        x[i] = x[i] + y[i];
    }
    copy(&x, c.tile([bx * BLOCK]));
}

fn run(stream: &Stream, a: &DeviceTensor<f32>, b: &DeviceTensor<f32>, c: &DeviceTensor<f32>) {
    vector_add::launch(stream, a, b, c).unwrap();
}

fn main() {
    let _ = run;
}

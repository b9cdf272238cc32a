use tile::prelude::*;
use tile::{DeviceTensor, Stream};

// Every mistake of a kernel is reported at once.
#[tile_kernel(threads = 100, consts(BLOCK = 512))]
pub fn scale(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>, s: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = t[i] * scal;
    }
    copy(&t, y.tile([bx]), 0);
}

fn run(stream: &Stream, x: &DeviceTensor<f32>, y: &mut DeviceTensor<f32>) {
    // The launch wrapper still exists: no follow-up error here.
    scale::launch(stream, x, y, 2.0).unwrap();
}

fn main() {
    let _ = run;
}

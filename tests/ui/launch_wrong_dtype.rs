use tile::prelude::*;
use tile::{DeviceTensor, Stream};

#[tile_kernel(threads = 128, consts(BLOCK = 512))]
pub fn scale(x: &Tensor<f16, N>, y: &mut Tensor<f16, N>, s: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    let mut o = fragment::<f16, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        o[i] = (t[i] * s) as f16;
    }
    copy(&o, y.tile([bx * BLOCK]));
}

fn run(stream: &Stream, x: &DeviceTensor<f32>, y: &mut DeviceTensor<f16>) {
    scale::launch(stream, x, y, 2.0).unwrap();
}

fn main() {
    let _ = run;
}

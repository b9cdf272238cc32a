use tile::prelude::*;
use tile::{DeviceTensor, Stream};

#[tile_kernel(threads = 128, instances((f16, 512), (bf16, 512), (f16, 1024)))]
pub fn scale<T: Float16, const BLOCK: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>, s: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    let mut o = fragment::<T, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        o[i] = (t[i] * s) as T;
    }
    copy(&o, y.tile([bx * BLOCK]));
}

fn run(stream: &Stream, x: &DeviceTensor<f16>, y: &mut DeviceTensor<f16>, xf: &DeviceTensor<f32>, yf: &mut DeviceTensor<f32>) {
    // A configuration that is not an instance.
    scale::launch::<f16, 256>(stream, x, y, 2.0).unwrap();
    // A dtype that is not an instance (inferred from the tensors).
    scale::launch::<_, 512>(stream, xf, yf, 2.0).unwrap();
}

fn main() {
    let _ = run;
}

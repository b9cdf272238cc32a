use tile::prelude::*;
use tile::{DeviceTensor, Stream};

// `tune(..)` names a type parameter and a name that is not a parameter.
#[tile_kernel(threads = 128, instances((f16, 512), (f16, 1024)), tune(T, BLOK))]
pub fn scale<T: Float16, const BLOCK: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>, s: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = t[i] * s;
    }
    copy(&t, y.tile([bx * BLOCK]));
}

#[tile_kernel(threads = 128, instances((f16, 512), (f16, 1024)), tune(BLOCK))]
pub fn scale2<T: Float16, const BLOCK: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>, s: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = t[i] * s;
    }
    copy(&t, y.tile([bx * BLOCK]));
}

fn run(stream: &Stream, x: &DeviceTensor<bf16>, y: &mut DeviceTensor<bf16>) {
    // No instance of `scale2` has `T = bf16`: nothing to tune among.
    scale2::launch_tuned::<bf16>(stream, x, y, 2.0).unwrap();
}

fn main() {
    let _ = run;
}

use tile::prelude::*;
use tile::{DeviceTensor, Stream};

/// Row-wise softmax of an `[M, N]` matrix with `N <= BN`, `scale` applied to
/// the logits first.
#[tile_kernel(threads = 128, consts(BM = 4, BN = 256))]
pub fn softmax(x: &Tensor<f16, M, N>, y: &mut Tensor<f16, M, N>, scale: f32) {
    let row = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    let mut m = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut o = fragment::<f16, BM, BN>();
    copy(x.tile([row * BM, 0]), &mut t).fill(f32::NEG_INFINITY);
    reduce_max(&t, &mut m, 1);
    for (i, j) in parallel((BM, BN)) {
        t[(i, j)] = exp2((t[(i, j)] - m[i]) * scale * 1.442695);
    }
    reduce_sum(&t, &mut l, 1);
    for (i, j) in parallel((BM, BN)) {
        o[(i, j)] = (t[(i, j)] / l[i]) as f16;
    }
    copy(&o, y.tile([row * BM, 0]));
}

#[allow(dead_code)]
fn run(stream: &Stream, x: &DeviceTensor<f16>, y: &mut DeviceTensor<f16>) -> Result<(), tile::Error> {
    softmax::launch(stream, x, y, 0.125)
}

fn main() {
    assert_eq!(softmax::META.name, "softmax");
    assert!(softmax::META.ir.contains("\"Reduce\""));
}

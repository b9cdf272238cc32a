use tile::prelude::*;

// Two row softmaxes written once, a scalar argument and a capture.
#[tile_kernel(threads = 128)]
pub fn two_softmaxes(a: &Tensor<f32, 64, 64>, b: &mut Tensor<f32, 64, 64>, scale: f32) {
    let mut s0 = fragment::<f32, 64, 64>();
    let mut s1 = fragment::<f32, 64, 64>();
    let mut m0 = fragment::<f32, 64>();
    let mut m1 = fragment::<f32, 64>();
    copy(a.tile([0, 0]), &mut s0);
    copy(a.tile([0, 0]), &mut s1);
    let softmax = |s: &mut _, m: &mut _, shift: f32| {
        reduce_max(&s, &mut m, 1);
        for (i, j) in parallel((64, 64)) {
            s[(i, j)] = exp2((s[(i, j)] - m[i]) * scale + shift);
        }
    };
    softmax(&mut s0, &mut m0, 0.0);
    softmax(&mut s1, &mut m1, -1.0);
    for (i, j) in parallel((64, 64)) {
        s0[(i, j)] = s0[(i, j)] + s1[(i, j)];
    }
    copy(&s0, b.tile([0, 0]));
}

fn main() {}

//! The tuned kernels of the autotuner's tests, shared by
//! `tests/tune_interp.rs` (the interpreter, in CI) and `tests/gpu_tune.rs`
//! (feature `gpu`).
#![allow(dead_code)]
use tile::prelude::*;

/// `y += alpha · x`: reads its output, so the tuner must restore it.
#[tile_kernel(threads = THREADS, instances((32, 32), (64, 32), (128, 64), (256, 128)), tune(BLOCK, THREADS))]
pub fn axpy<const BLOCK: usize, const THREADS: usize>(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>, alpha: f32) {
    let bx = grid(cdiv(N, BLOCK));
    let mut xs = fragment::<f32, BLOCK>();
    let mut ys = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut xs);
    copy(y.tile([bx * BLOCK]), &mut ys);
    for i in parallel(BLOCK) {
        ys[i] = ys[i] + alpha * xs[i];
    }
    copy(&ys, y.tile([bx * BLOCK]));
}

/// `c = a + b` over a type the caller picks (`T`) and a tuned block.
#[tile_kernel(threads = 32, instances((f32, 32), (f32, 64), (f16, 64)), tune(BLOCK))]
pub fn add<T: Float, const BLOCK: usize>(a: &Tensor<T, N>, b: &Tensor<T, N>, c: &mut Tensor<T, N>) {
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

//! `c = a + b` on fp32 vectors: the smallest complete kernel.
use tile::prelude::*;

#[tile_kernel(threads = 256, consts(BLOCK = 2048))]
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

/// The CPU reference, in f64.
pub fn reference(a: &[f32], b: &[f32]) -> Vec<f64> {
    a.iter().zip(b).map(|(&x, &y)| x as f64 + y as f64).collect()
}

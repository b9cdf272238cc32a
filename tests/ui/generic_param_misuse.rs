use tile::prelude::*;

// A type parameter is an element type, a const parameter an integer: each
// used as the other is an error at the use.
#[tile_kernel(threads = 128, instances((f16, 64)))]
pub fn tiles<T: Float16, const BM: usize>(x: &Tensor<T, M, N>, y: &mut Tensor<T, M, N>) {
    let bx = grid(cdiv(M, BM));
    let mut s = shared::<BM, 64>();
    let z = T;
    copy(x.tile([bx * BM, 0]), &mut s);
    copy(&s, y.tile([bx * BM, 0]));
}

// `threads` may be a const parameter; `cluster` takes literals only.
#[tile_kernel(threads = THREADS, cluster = (C, 1, 1), instances((2, 128)))]
pub fn clustered<const C: usize, const THREADS: usize>(y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, 128));
    y[bx] = 1.0;
}

fn main() {}

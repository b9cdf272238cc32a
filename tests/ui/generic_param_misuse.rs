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

// `threads` and a `cluster` extent may be a const parameter, not a type
// parameter.
#[tile_kernel(threads = THREADS, cluster = (T, 1, 1), instances((f32, 128)))]
pub fn clustered<T: Float, const THREADS: usize>(y: &mut Tensor<T, N>) {
    let bx = grid(cdiv(N, 128));
    y[bx] = 1.0;
}

fn main() {}

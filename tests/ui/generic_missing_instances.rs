use tile::prelude::*;

// A generic kernel is compiled at build time, once per listed instance.
#[tile_kernel(threads = 128)]
pub fn tiles<T: Float16, const BM: usize>(x: &Tensor<T, M, N>, y: &mut Tensor<T, M, N>) {
    let bx = grid(cdiv(M, BM));
    let mut s = shared::<T, BM, 64>();
    copy(x.tile([bx * BM, 0]), &mut s);
    copy(&s, y.tile([bx * BM, 0]));
}

fn main() {}

use tile::prelude::*;

// 4096 × 64 f16 fits shared memory, 8192 × 64 does not: the error names
// the one instance that has it.
#[tile_kernel(threads = 128, instances((f16, 64), (bf16, 64), (f16, 8192)))]
pub fn tiles<T: Float16, const BM: usize>(x: &Tensor<T, M, N>, y: &mut Tensor<T, M, N>) {
    let bx = grid(cdiv(M, BM));
    let mut s = shared::<T, BM, 64>();
    copy(x.tile([bx * BM, 0]), &mut s);
    copy(&s, y.tile([bx * BM, 0]));
}

fn main() {}

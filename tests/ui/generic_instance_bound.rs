use tile::prelude::*;

// f32 is not a tensor-core input: `T: Float16` is f16 | bf16.
#[tile_kernel(threads = 128, instances((f16, 64), (f32, 64)))]
pub fn tiles<T: Float16, const BM: usize>(x: &Tensor<T, M, N>, y: &mut Tensor<T, M, N>) {
    let bx = grid(cdiv(M, BM));
    let mut s = shared::<T, BM, 64>();
    copy(x.tile([bx * BM, 0]), &mut s);
    copy(&s, y.tile([bx * BM, 0]));
}

fn main() {}

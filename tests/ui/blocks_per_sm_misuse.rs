use tile::prelude::*;

// 16 blocks of 256 threads are 4,096 threads: more than an SM holds.
#[tile_kernel(threads = 256, consts(BLOCK = 1024), blocks_per_sm = 16)]
pub fn copy_kernel(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

// A generic kernel's `blocks_per_sm` names one of its const parameters.
#[tile_kernel(threads = 128, blocks_per_sm = BLOCKS, instances((1024, 2)))]
pub fn generic_copy<const BLOCK: usize, const WAVES: usize>(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {}

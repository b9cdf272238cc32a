use tile::prelude::*;

// `CLUSTER` is not a const parameter of the kernel (its only one is `CL`).
#[tile_kernel(threads = 128, consts(BLOCK = 1024), cluster = (CLUSTER, 1, 1), instances(2, 1))]
pub fn copy_kernel<const CL: usize>(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {}

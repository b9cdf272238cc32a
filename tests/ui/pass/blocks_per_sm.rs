use tile::prelude::*;

// `blocks_per_sm` as a literal and as a const parameter of a generic kernel.
#[tile_kernel(threads = 128, consts(BLOCK = 1024), blocks_per_sm = 4)]
pub fn copy_kernel(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

#[tile_kernel(threads = 128, blocks_per_sm = BLOCKS, instances((1024, 1), (512, 3)))]
pub fn generic_copy<const BLOCK: usize, const BLOCKS: usize>(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {
    assert!(copy_kernel::META.ir.contains("\"blocks_per_sm\":4"));
    // 1 is the default: not in the IR (whose source map names this file).
    assert!(!generic_copy::meta::<1024, 1>().ir.contains("\"blocks_per_sm\":"));
    assert!(generic_copy::meta::<512, 3>().ir.contains("\"blocks_per_sm\":3"));
}

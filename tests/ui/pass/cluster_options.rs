use tile::prelude::*;

/// A clustered kernel without warp specialization compiles and keeps both
/// options in its embedded IR.
#[tile_kernel(threads = 128, consts(BLOCK = 1024), cluster = (2, 1, 1), warp_specialize = false)]
pub fn copy_kernel(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

/// A generic kernel's cluster extents may be its const parameters: each
/// instance (and each tuned candidate) has its own cluster.
#[tile_kernel(threads = 128, consts(BLOCK = 1024), cluster = (CL, 1, 1), instances(2, 1), tune(CL))]
pub fn copy_clustered<const CL: usize>(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    copy(&t, y.tile([bx * BLOCK]));
}

fn main() {
    let ir = copy_kernel::META.ir;
    assert!(ir.contains("\"cluster\":[2,1,1]") && ir.contains("\"warp_specialize\":false"), "{ir}");
    let ir = copy_clustered::meta::<2>().ir;
    assert!(ir.contains("\"cluster\":[2,1,1]"), "{ir}");
    let ir = copy_clustered::meta::<1>().ir;
    assert!(!ir.contains("\"cluster\""), "{ir}");
    assert_eq!(copy_clustered::tuned().candidates.len(), 2);
}

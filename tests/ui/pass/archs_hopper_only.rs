use tile::prelude::*;

/// A Hopper-only GEMM (4 stages of 128×256×64 need 192 KB of shared memory,
/// more than sm_80 has): `archs = "sm_90a"` embeds only that target, so the
/// build does not fail on sm_80's limit.
#[tile_kernel(threads = 256, archs = "sm_90a", consts(BM = 128, BN = 256, BK = 64, STAGES = 4))]
pub fn matmul(a: &Tensor<f16, M, K>, b: &Tensor<f16, K, N>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BK, BN>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([k * BK, bx * BN]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc);
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}

fn main() {
    // No sm_80 code (whatever TILE_ARCHS adds); sm_90a, when built, leads
    // with the warp-specialized variant.
    assert!(matmul::META.targets.iter().all(|t| t.arch == "sm_90a"));
    if let Some(first) = matmul::META.targets.first() {
        assert!(first.threads == 384 && first.tensor_maps.len() == 3);
    }
}

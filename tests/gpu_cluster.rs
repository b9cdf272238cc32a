//! GPU tests of thread block clusters through `#[tile_kernel]` (feature
//! `gpu`): a clustered kernel gives the same answer as without clusters, a
//! grid that is not a multiple of the cluster is a launch error on GPUs with
//! clusters (compute capability 9.0+), and GPUs without clusters and the
//! interpreter ignore the cluster.
//!
//! `cargo test --features gpu --test gpu_cluster` on a machine with a GPU.
#![cfg(feature = "gpu")]

use tile::prelude::*;
use tile::Result;

/// `y = 2x + 1`, 128 elements per block, clusters of two blocks along x.
#[tile_kernel(threads = 128, consts(BLOCK = 128), cluster = (2, 1, 1))]
pub fn affine_pairs(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut t);
    for i in parallel(BLOCK) {
        t[i] = t[i] * 2.0 + 1.0;
    }
    copy(&t, y.tile([bx * BLOCK]));
}

/// `c = a + b` on `[M, N]` in 16 × 32 tiles, clusters of 2 × 2 blocks.
#[tile_kernel(threads = 128, consts(BM = 16, BN = 32), cluster = (2, 2), warp_specialize = false)]
pub fn add_quads(a: &Tensor<f32, M, N>, b: &Tensor<f32, M, N>, c: &mut Tensor<f32, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut x = fragment::<f32, BM, BN>();
    let mut y = fragment::<f32, BM, BN>();
    copy(a.tile([by * BM, bx * BN]), &mut x);
    copy(b.tile([by * BM, bx * BN]), &mut y);
    for (i, j) in parallel((BM, BN)) {
        x[(i, j)] = x[(i, j)] + y[(i, j)];
    }
    copy(&x, c.tile([by * BM, bx * BN]));
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn run_pairs(device: &Device, n: usize) -> Result<()> {
    let stream = device.stream()?;
    let x = values(n, n as u64);
    let xt = DeviceTensor::from_slice(&stream, &x, &[n])?;
    let mut yt = DeviceTensor::<f32>::zeros(&stream, &[n])?;
    affine_pairs::launch(&stream, &xt, &mut yt)?;
    let want: Vec<f64> = x.iter().map(|&v| (v * 2.0 + 1.0) as f64).collect();
    assert_eq!(assert_close(&yt.to_vec(&stream)?, &want, 0.0), Ok(0.0), "n = {n} on {device:?}");
    Ok(())
}

fn run_quads(device: &Device, m: usize, n: usize) -> Result<()> {
    let stream = device.stream()?;
    let (a, b) = (values(m * n, 1), values(m * n, 2));
    let at = DeviceTensor::from_slice(&stream, &a, &[m, n])?;
    let bt = DeviceTensor::from_slice(&stream, &b, &[m, n])?;
    let mut ct = DeviceTensor::<f32>::zeros(&stream, &[m, n])?;
    add_quads::launch(&stream, &at, &bt, &mut ct)?;
    let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| (x + y) as f64).collect();
    assert_eq!(assert_close(&ct.to_vec(&stream)?, &want, 0.0), Ok(0.0), "{m}x{n} on {device:?}");
    Ok(())
}

#[test]
fn clustered_kernels_give_the_right_answer() {
    let gpu = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    // 8, 2 and 782 blocks: multiples of 2.
    for n in [1000, 129, 100_001] {
        run_pairs(&gpu, n).unwrap();
    }
    // Grids (4, 2), (64, 64), (2, 8): multiples of (2, 2).
    for (m, n) in [(17, 100), (1024, 2048), (127, 33)] {
        run_quads(&gpu, m, n).unwrap();
    }
}

#[test]
fn a_grid_that_is_not_a_multiple_of_the_cluster_is_an_error_where_clusters_exist() {
    let gpu = Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let clusters = gpu.compute_capability().unwrap().0 >= 9;
    // 9 blocks along x.
    match run_pairs(&gpu, 1100) {
        Err(Error::Launch { kernel, message }) if clusters => {
            assert_eq!(kernel, "affine_pairs");
            assert!(message.contains("x = 9 is not a multiple of 2"), "{message}");
        }
        Ok(()) if !clusters => {}
        other => panic!("{other:?}"),
    }
    // Grid (3, 1): both axes wrong.
    match run_quads(&gpu, 16, 96) {
        Err(Error::Launch { message, .. }) if clusters => {
            assert!(message.contains("x = 3 is not a multiple of 2 and y = 1 is not a multiple of 2"), "{message}");
        }
        Ok(()) if !clusters => {}
        other => panic!("{other:?}"),
    }
    // The interpreter ignores clusters: the cluster never changes results.
    run_pairs(&Device::interpreter(), 1100).unwrap();
    run_quads(&Device::interpreter(), 16, 96).unwrap();
}

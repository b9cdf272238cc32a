//! Launches from 8 host threads on 8 streams, 100 times each, through the
//! same modules and tensor-map caches (feature `gpu`; issue 12, item 3):
//! `kernels/concurrent.rs` on the GPU, with the example GEMM at sizes off its
//! tiles. On a 9.x GPU the even threads run its warp-specialized TMA variant
//! and the odd ones its general variant, which `Device::launch_counts`
//! confirms; every result is checked against an f64 CPU reference.
//!
//! `cargo test --release --features gpu --test gpu_concurrency`.
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "kernels/concurrent.rs"]
mod concurrent;
#[path = "../examples/kernels"]
mod examples {
    pub mod gemm;
    pub mod vector_add;
}

#[test]
fn eight_threads_on_eight_streams_launch_100_times_each() {
    let device = tile::Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let meta = examples::gemm::matmul::meta::<tile::f16, tile::f16, 128, 256, 64, 3, 256, 8>();
    let before = device.launch_counts(meta);
    let plan = concurrent::Plan { threads: 8, iters: 100, m: 300, k: 200, n_tma: 264, n_general: 258, len: 100_003 };
    concurrent::run(&device, &plan);
    let after = device.launch_counts(meta);
    let ran: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(ran.iter().sum::<u64>(), 800, "launches per variant: {ran:?}");
    if device.compute_capability().unwrap().0 == 9 {
        // The preferred sm_90a variant is the warp-specialized one (with maps
        // of its operands, `gpu_gemm.rs` checks): it runs on the even
        // threads' shapes and never on the odd threads'.
        let ws = meta.targets.iter().position(|t| t.arch == "sm_90a").expect("an sm_90a build");
        assert!(!meta.targets[ws].tensor_maps.is_empty(), "{}", meta.targets[ws].schedule);
        assert_eq!(ran[ws], 400, "the TMA variant must run exactly on the even threads' shapes: {ran:?}");
    }
}

/// Eight threads opening the device and launching for the first time at the
/// same moment, each on a new stream: the module of a kernel none has
/// launched yet is loaded once (one cache entry, counts add up) and every
/// result is right.
#[test]
fn concurrent_first_launches_load_each_module_once() {
    let device = tile::Device::cuda(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let meta = examples::gemm::matmul::meta::<tile::bf16, tile::bf16, 128, 256, 64, 3, 256, 8>();
    let start = std::sync::Barrier::new(8);
    std::thread::scope(|scope| {
        for t in 0..8usize {
            let start = &start;
            scope.spawn(move || {
                let device = tile::Device::cuda(0).unwrap();
                let stream = device.new_stream().unwrap();
                let (m, n, k) = (130 + t, 264, 72);
                let mut rng = common::Rng::new(t as u64);
                let a: Vec<tile::bf16> = rng.vec(m * k, -1.0, 1.0).into_iter().map(tile::bf16::from_f32).collect();
                let b: Vec<tile::bf16> = rng.vec(k * n, -1.0, 1.0).into_iter().map(tile::bf16::from_f32).collect();
                let a_t = tile::DeviceTensor::from_slice(&stream, &a, &[m, k]).unwrap();
                let b_t = tile::DeviceTensor::from_slice(&stream, &b, &[k, n]).unwrap();
                let mut c_t = tile::DeviceTensor::<tile::bf16>::zeros(&stream, &[m, n]).unwrap();
                stream.synchronize().unwrap();
                start.wait();
                examples::gemm::example(&stream, &a_t, &b_t, &mut c_t).unwrap();
                let c = c_t.to_vec(&stream).unwrap();
                tile::assert_close(&c, &examples::gemm::reference(m, n, k, &a, &b, false), 1e-2)
                    .unwrap_or_else(|e| panic!("thread {t}: {e}"));
            });
        }
    });
    assert_eq!(device.launch_counts(meta).iter().sum::<u64>(), 8);
}

//! Resource errors on a GPU (feature `gpu`; issue 12, item 4): a tensor
//! larger than the device's memory or than what is free, a variant whose
//! dynamic shared memory or block exceeds the device's limits, and a grid
//! no device runs are `tile::Error`s naming the tensor or the kernel and the
//! limit, checked before the driver call where possible; afterwards the
//! device still works. The kernels are `tests/ptx/scale.ptx` with the Tile
//! IR of `tests/common` and hand-built variants (as `gpu_variants.rs`).
#![cfg(feature = "gpu")]

mod common;

use common::{gpu, leak, leak_meta, scale_kernel, Rng};
use tile_runtime::__private::{launch, KernelArg};
use tile_runtime::{assert_close, DeviceTensor, Error, KernelMeta, KernelTarget, Stream};

/// The dynamic shared memory `scale.ptx` uses with 128 threads (a word per
/// thread from byte 101888).
const SCALE_SHARED: u32 = 100 * 1024;

/// `scale` with the given dynamic shared memory and threads on both archs.
fn scale_meta(shared_bytes: u32, threads: u32) -> &'static KernelMeta {
    let ptx = include_str!("ptx/scale.ptx");
    let variant = |arch, ptx| KernelTarget {
        arch,
        schedule: "general",
        ptx,
        shared_bytes,
        threads,
        tensor_maps: &[],
        persistent: false,
        cubin: None,
    };
    leak_meta(
        &scale_kernel(),
        vec![variant("sm_80", ptx), variant("sm_90a", leak(ptx.replace(".target sm_80", ".target sm_90a")))],
    )
}

fn run_scale(stream: &Stream, meta: &'static KernelMeta, n: usize) -> Result<(), Error> {
    let mut rng = Rng::new(n as u64);
    let a: Vec<f32> = (0..n).map(|_| rng.f64() as f32).collect();
    let at = DeviceTensor::from_slice(stream, &a, &[n]).unwrap();
    let mut ct = DeviceTensor::<f32>::zeros(stream, &[n]).unwrap();
    launch(stream, meta, &mut [KernelArg::tensor(&at), KernelArg::tensor_mut(&mut ct), KernelArg::F32(3.0)])?;
    let reference: Vec<f64> = a.iter().map(|&v| (v * 3.0) as f64).collect();
    assert_eq!(assert_close(&ct.to_vec(stream).unwrap(), &reference, 0.0), Ok(0.0), "n = {n}");
    Ok(())
}

fn launch_error(r: Result<(), Error>) -> String {
    match r {
        Err(e @ Error::Launch { .. }) => {
            let text = e.to_string();
            assert!(text.starts_with("cannot launch kernel `scale`: "), "{text}");
            text
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
}

#[test]
fn a_tensor_larger_than_the_device_is_out_of_memory_before_the_driver_is_asked() {
    let (device, stream) = gpu();
    let total = device.total_memory().unwrap();
    match DeviceTensor::<f32>::zeros(&stream, &[250_000_000_000]) {
        Err(Error::OutOfMemory { tensor, device: on, bytes, message }) => {
            assert_eq!(tensor, "a DeviceTensor<f32> of shape [250000000000]");
            assert!(on.contains(device.name()) && on.contains("cuda:0"), "{on}");
            assert_eq!(bytes, 1_000_000_000_000);
            assert!(message.contains(&format!("the device has {total} bytes")), "{message}");
            assert!(message.contains("split the work into smaller tensors"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let data = vec![1.0f32; 1000];
    let err = DeviceTensor::from_slice(&stream, &data, &[1000]).map(|_| ());
    assert!(err.is_ok(), "{err:?}");
    // The device still runs kernels.
    run_scale(&stream, scale_meta(SCALE_SHARED, 128), 1000).unwrap();
}

#[test]
fn a_tensor_larger_than_the_free_memory_is_out_of_memory_with_the_free_bytes() {
    let (device, stream) = gpu();
    let total = device.total_memory().unwrap();
    // Three tensors of 60% of the device each: at most one fits.
    let elements = (total as f64 * 0.6) as usize / 4;
    let mut kept = Vec::new();
    let mut failure = None;
    for _ in 0..3 {
        match DeviceTensor::<f32>::zeros(&stream, &[elements]) {
            Ok(t) => kept.push(t),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    assert!(kept.len() <= 1, "two tensors of 60% of the memory were allocated");
    match failure {
        Some(Error::OutOfMemory { tensor, bytes, message, .. }) => {
            assert_eq!(tensor, format!("a DeviceTensor<f32> of shape [{elements}]"));
            assert_eq!(bytes, elements as u64 * 4);
            assert!(message.contains("of them free") && message.contains("drop tensors"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    drop(kept);
    stream.synchronize().unwrap();
    run_scale(&stream, scale_meta(SCALE_SHARED, 128), 4097).unwrap();
}

#[test]
fn shared_memory_above_the_devices_limit_is_refused_naming_the_variant_and_the_limit() {
    let (device, stream) = gpu();
    let limit = device.max_shared_memory_per_block().unwrap();
    // At the limit it runs (scale.ptx declares its dynamic shared memory).
    run_scale(&stream, scale_meta(limit, 128), 1000).unwrap();
    let text = launch_error(run_scale(&stream, scale_meta(limit + 16, 128), 1000));
    assert!(text.contains(&format!("needs {} bytes of dynamic shared memory per block", limit + 16)), "{text}");
    assert!(text.contains(&format!("{} allows at most {limit}", device.name())), "{text}");
    assert!(text.contains("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") && text.contains("stages"), "{text}");
    launch_error(run_scale(&stream, scale_meta(u32::MAX, 128), 1000));
}

#[test]
fn a_block_the_device_cannot_run_is_refused_naming_the_limit() {
    let (device, stream) = gpu();
    for threads in [0, 1056, 2048] {
        let text = launch_error(run_scale(&stream, scale_meta(0, threads), 1000));
        assert!(
            text.contains(&format!("has {threads} threads per block, but {} runs 1 to 1024", device.name())),
            "{text}"
        );
        assert!(text.contains("MAX_THREADS_PER_BLOCK"), "{text}");
    }
    // 1024 threads (their shared words end at 101888 + 4096 bytes) run.
    run_scale(&stream, scale_meta(110 * 1024, 1024), 1000).unwrap();
}

#[test]
fn a_grid_of_more_blocks_than_a_device_runs_is_a_launch_error() {
    let (_, stream) = gpu();
    let mut k = scale_kernel();
    let n = tile_ir::Expr::var(k.dims[0]);
    k.grid[0] = tile_ir::Expr::binary(tile_ir::BinOp::Mul, n.clone(), n);
    let ptx = include_str!("ptx/scale.ptx");
    let meta = leak_meta(
        &k,
        vec![KernelTarget {
            arch: "sm_80",
            schedule: "general",
            ptx,
            shared_bytes: 0,
            threads: 128,
            tensor_maps: &[],
            persistent: false,
            cubin: None,
        }],
    );
    let a = DeviceTensor::<f32>::zeros(&stream, &[65536]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[65536]).unwrap();
    let r = launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)]);
    let text = launch_error(r);
    assert!(text.contains("4294967296"), "{text}");
}

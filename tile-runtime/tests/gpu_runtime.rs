//! Runtime GPU tests: need an NVIDIA GPU (compute capability 8.0+) and its driver.
//! Run with `cargo test -p tile-runtime --features gpu`.
//!
//! The kernels are hand-written PTX that follows the launch ABI (checked by
//! ptxas for sm_80 and sm_90a), paired with the Tile IR of `tests/common`, so
//! these tests exercise the runtime alone: module loading and caching, the
//! JIT error log, target choice, the parameter order, the dynamic
//! shared-memory opt-in, copies, events and device checks.
#![cfg(feature = "gpu")]

mod common;

use common::{affine_kernel, gpu, leak, leak_meta, scale_kernel, Rng};
use tile_runtime::__private::{launch, KernelArg};
use tile_runtime::{
    assert_close, bench, bf16, f16, Device, DeviceTensor, Element, Error, KernelMeta, KernelTarget, Stream,
};

/// Targets for both archs from one sm_80 PTX text.
fn targets(ptx: &str, shared_bytes: u32, threads: u32) -> Vec<KernelTarget> {
    vec![
        KernelTarget {
            arch: "sm_80",
            schedule: "general",
            ptx: leak(ptx.to_string()),
            shared_bytes,
            threads,
            tensor_maps: &[],
            persistent: false,
            cubin: None,
        },
        KernelTarget {
            arch: "sm_90a",
            schedule: "general",
            ptx: leak(ptx.replace(".target sm_80", ".target sm_90a")),
            shared_bytes,
            threads,
            tensor_maps: &[],
            persistent: false,
            cubin: None,
        },
    ]
}

/// `scale` needs 100 KiB of dynamic shared memory: above the 48 KiB default,
/// so the launch fails unless the runtime opted in.
fn scale_meta() -> &'static KernelMeta {
    leak_meta(&scale_kernel(), targets(include_str!("ptx/scale.ptx"), 100 * 1024, 128))
}

#[test]
fn device_properties_and_identity() {
    let (device, _) = gpu();
    let (major, _) = device.compute_capability().unwrap();
    assert!(major >= 8);
    assert!(!device.name().is_empty() && !device.is_interpreter());
    assert!(Device::cuda(0).unwrap().same_as(&device));
    assert!(!Device::interpreter().same_as(&device));
    assert!(Device::auto().unwrap().same_as(&device));
    match Device::cuda(999) {
        Err(Error::Driver { message, .. }) => assert!(message.contains("no CUDA device 999"), "{message}"),
        other => panic!("{other:?}"),
    }
    eprintln!("GPU: {device:?}");
}

fn round_trip<T: Element + PartialEq>(stream: &Stream, rng: &mut Rng, shape: &[usize]) {
    let n: usize = shape.iter().product();
    let data: Vec<T> = (0..n).map(|_| T::from_f64(rng.f64() * 1000.0)).collect();
    let t = DeviceTensor::from_slice(stream, &data, shape).unwrap();
    assert_eq!(t.device_ptr().is_some_and(|p| p != 0), n > 0);
    assert!(t.to_vec(stream).unwrap() == data);
    let mut copy = DeviceTensor::<T>::zeros(stream, shape).unwrap();
    assert!(copy.to_vec(stream).unwrap().iter().all(|v| v.to_f64() == 0.0));
    copy.copy_from(stream, &t).unwrap();
    assert!(copy.to_vec(stream).unwrap() == data);
}

#[test]
fn tensors_round_trip_and_copy_on_the_gpu() {
    let (_, stream) = gpu();
    let mut rng = Rng::new(5);
    for shape in [&[0usize][..], &[1], &[1001], &[17, 33, 3]] {
        round_trip::<f16>(&stream, &mut rng, shape);
        round_trip::<bf16>(&stream, &mut rng, shape);
        round_trip::<f32>(&stream, &mut rng, shape);
        round_trip::<i32>(&stream, &mut rng, shape);
        round_trip::<u32>(&stream, &mut rng, shape);
    }
}

fn run_scale(stream: &Stream, meta: &'static KernelMeta, n: usize, s: f32, rng: &mut Rng) {
    let a: Vec<f32> = (0..n).map(|_| rng.f64() as f32 * 10.0).collect();
    let at = DeviceTensor::from_slice(stream, &a, &[n]).unwrap();
    let mut ct = DeviceTensor::from_slice(stream, &vec![f32::NAN; n], &[n]).unwrap();
    launch(stream, meta, &mut [KernelArg::tensor(&at), KernelArg::tensor_mut(&mut ct), KernelArg::F32(s)]).unwrap();
    let c = ct.to_vec(stream).unwrap();
    for i in 0..n {
        assert_eq!(c[i].to_bits(), (a[i] * s).to_bits(), "n = {n}, element {i}");
    }
}

#[test]
fn launch_runs_with_large_dynamic_shared_memory_and_caches_the_module() {
    let (_, stream) = gpu();
    let meta = scale_meta();
    let mut rng = Rng::new(1);
    for n in [1, 127, 128, 129, 100_003] {
        run_scale(&stream, meta, n, -1.75, &mut rng);
    }
}

#[test]
fn launch_passes_two_dims_and_16_bit_scalars_in_abi_order() {
    let (_, stream) = gpu();
    let meta = leak_meta(&affine_kernel(), targets(include_str!("ptx/affine.ptx"), 0, 256));
    let mut rng = Rng::new(2);
    for (m, n) in [(1, 1), (37, 1001), (256, 3)] {
        let x: Vec<f16> = (0..m * n).map(|_| f16::from_f64(rng.f64() * 8.0)).collect();
        let xt = DeviceTensor::from_slice(&stream, &x, &[m, n]).unwrap();
        let mut yt = DeviceTensor::<f32>::zeros(&stream, &[m, n]).unwrap();
        let alpha = f16::from_f64(-1.375);
        let beta = 70_000u32;
        launch(
            &stream,
            meta,
            &mut [KernelArg::tensor(&xt), KernelArg::tensor_mut(&mut yt), KernelArg::F16(alpha), KernelArg::U32(beta)],
        )
        .unwrap();
        let reference: Vec<f64> =
            x.iter().map(|v| (f16::from_f64(v.to_f64() * alpha.to_f64()).to_f32() + beta as f32) as f64).collect();
        assert_eq!(assert_close(&yt.to_vec(&stream).unwrap(), &reference, 0.0), Ok(0.0), "{m}x{n}");
    }
}

#[test]
fn an_empty_grid_does_not_launch() {
    let (_, stream) = gpu();
    let a = DeviceTensor::<f32>::zeros(&stream, &[0]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[0]).unwrap();
    // Broken PTX proves nothing was loaded: loading it would fail.
    let meta = leak_meta(&scale_kernel(), targets(".version 8.0\n.target sm_80\nnonsense", 0, 128));
    launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(1.0)]).unwrap();
}

#[test]
fn a_jit_failure_returns_the_driver_log() {
    let (_, stream) = gpu();
    let ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry scale(.param .u64 a, .param .u64 c, \
               .param .s32 n, .param .f32 s)\n{\n    frobnicate.u32 %r1;\n    ret;\n}\n";
    let meta = leak_meta(&scale_kernel(), targets(ptx, 0, 128));
    let a = DeviceTensor::<f32>::zeros(&stream, &[10]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[10]).unwrap();
    match launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(1.0)]) {
        Err(Error::Jit { kernel, arch, log }) => {
            assert_eq!(kernel, "scale");
            assert!(arch == "sm_80" || arch == "sm_90a");
            assert!(log.contains("CUDA_ERROR_INVALID_PTX") || log.contains("error"), "{log}");
            eprintln!("JIT log:\n{log}");
        }
        other => panic!("{other:?}"),
    }
}

/// `targets` with `cubin` embedded in every variant.
fn with_cubin(mut targets: Vec<KernelTarget>, cubin: &'static [u8]) -> Vec<KernelTarget> {
    for t in &mut targets {
        t.cubin = Some(cubin);
    }
    targets
}

/// A cubin the driver cannot load falls back to the PTX (and the module
/// says it came from the PTX); when the PTX fails too, the JIT error names
/// the cubin's failure as well.
#[test]
fn a_cubin_that_does_not_load_falls_back_to_the_ptx() {
    let (device, stream) = gpu();
    const BAD: &[u8] = b"\x7fELF\x02\x01\x01 not a cubin at all";
    let meta = leak_meta(&scale_kernel(), with_cubin(targets(include_str!("ptx/scale.ptx"), 100 * 1024, 128), BAD));
    run_scale(&stream, meta, 1000, 3.0, &mut Rng::new(4));
    let sources = device.module_sources(meta);
    assert_eq!(sources.iter().flatten().collect::<Vec<_>>(), vec![&tile_runtime::ModuleSource::Ptx], "{sources:?}");
    let ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry scale(.param .u64 a, .param .u64 c, \
               .param .s32 n, .param .f32 s)\n{\n    frobnicate.u32 %r1;\n    ret;\n}\n";
    let meta = leak_meta(&scale_kernel(), with_cubin(targets(ptx, 0, 128), BAD));
    let a = DeviceTensor::<f32>::zeros(&stream, &[10]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[10]).unwrap();
    match launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(1.0)]) {
        Err(Error::Jit { log, .. }) => assert!(log.contains("cubin failed to load too"), "{log}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_matching_target_and_device_mismatch_are_errors() {
    let (_, stream) = gpu();
    let only_old = leak_meta(
        &scale_kernel(),
        vec![KernelTarget {
            arch: "sm_70",
            schedule: "general",
            ptx: "",
            shared_bytes: 0,
            threads: 128,
            tensor_maps: &[],
            persistent: false,
            cubin: None,
        }],
    );
    let a = DeviceTensor::<f32>::zeros(&stream, &[10]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[10]).unwrap();
    match launch(&stream, only_old, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(1.0)]) {
        Err(Error::NoTarget { available, .. }) => assert_eq!(available, vec!["sm_70".to_string()]),
        other => panic!("{other:?}"),
    }

    let cpu = Device::interpreter().stream().unwrap();
    let host = DeviceTensor::<f32>::zeros(&cpu, &[10]).unwrap();
    match launch(
        &stream,
        scale_meta(),
        &mut [KernelArg::tensor(&host), KernelArg::tensor_mut(&mut c), KernelArg::F32(1.0)],
    ) {
        Err(Error::DeviceMismatch(what)) => assert!(what.contains("`a`"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(a.to_vec(&cpu), Err(Error::DeviceMismatch(_))));
    assert!(matches!(host.to_vec(&stream), Err(Error::DeviceMismatch(_))));
}

#[test]
fn events_time_device_work() {
    let (_, stream) = gpu();
    let n = 64 << 20; // 256 MiB of f32
    let src = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
    let mut dst = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
    let ms = stream.time(|| dst.copy_from(&stream, &src)).unwrap();
    assert!(ms > 0.0);
    let result = bench(&stream, 3, 20, || dst.copy_from(&stream, &src)).unwrap();
    let gbps = result.gbps(2.0 * src.num_bytes() as f64);
    eprintln!("device copy of {} MiB: {result:?}, {gbps:.0} GB/s", src.num_bytes() >> 20);
    assert!(result.min_ms > 0.0 && result.min_ms <= result.median_ms && result.median_ms <= result.max_ms);
    // Any GPU of compute capability 8.0+ copies faster than 100 GB/s; a
    // timing that measured the host instead of the device would not.
    assert!(gbps > 100.0, "{gbps}");

    let meta = scale_meta();
    let mut ct = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
    let result = bench(&stream, 2, 10, || {
        launch(&stream, meta, &mut [KernelArg::tensor(&src), KernelArg::tensor_mut(&mut ct), KernelArg::F32(2.0)])
    })
    .unwrap();
    eprintln!("scale over {n} floats: {result:?}, {:.0} GB/s", result.gbps(2.0 * src.num_bytes() as f64));
}

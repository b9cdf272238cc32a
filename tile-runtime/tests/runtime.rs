//! Runtime behaviour that needs no GPU: driver detection, the interpreter
//! device, tensors, launch argument checking, dimension binding, timing and
//! the comparison helpers.

mod common;

use common::{affine_kernel, leak_meta, scale_kernel, Rng};
use tile_runtime::__private::{launch, KernelArg};
use tile_runtime::{
    assert_close, bench, bf16, f16, rel_error, Device, DeviceTensor, Element, Error, KernelMeta, Stream,
};

fn interp_stream() -> Stream {
    Device::interpreter().stream().unwrap()
}

#[test]
fn cuda_without_a_driver_is_no_driver_not_a_panic() {
    match Device::cuda(0) {
        Err(Error::NoDriver(message)) => {
            assert!(message.contains("no NVIDIA driver"), "{message}");
            assert!(message.contains("Device::interpreter()"), "{message}");
            assert!(message.contains("TILE_INTERPRET=1"), "{message}");
        }
        // On a machine with a GPU the device opens.
        Ok(device) => assert!(!device.is_interpreter() && device.compute_capability().is_some()),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[test]
fn auto_honours_tile_interpret_and_falls_back_to_the_interpreter() {
    // The only test that touches the environment variable.
    std::env::set_var("TILE_INTERPRET", "1");
    let forced = Device::auto().unwrap();
    assert!(forced.is_interpreter());
    assert_eq!(forced.name(), "CPU interpreter");
    assert_eq!(forced.compute_capability(), None);
    std::env::set_var("TILE_INTERPRET", "0");
    let auto = Device::auto().unwrap();
    std::env::remove_var("TILE_INTERPRET");
    // Without a driver, auto is the interpreter; with one, it is GPU 0.
    assert_eq!(auto.is_interpreter(), Device::cuda(0).is_err());
}

fn round_trip<T: Element + PartialEq>(rng: &mut Rng, shape: &[usize]) {
    let stream = interp_stream();
    let n: usize = shape.iter().product();
    let data: Vec<T> = (0..n).map(|_| T::from_f64(rng.f64() * 1000.0)).collect();
    let t = DeviceTensor::from_slice(&stream, &data, shape).unwrap();
    assert_eq!(t.shape(), shape);
    assert_eq!(t.len(), n);
    assert_eq!(t.dtype(), T::DTYPE);
    assert_eq!(t.num_bytes(), n * std::mem::size_of::<T>());
    assert_eq!(t.device_ptr(), None);
    let back = t.to_vec(&stream).unwrap();
    assert!(back == data, "round trip changed the data of a {shape:?} {} tensor", T::DTYPE);
}

#[test]
fn tensors_round_trip_on_the_interpreter() {
    let mut rng = Rng::new(7);
    for shape in [&[0usize][..], &[1], &[37], &[3, 5, 7], &[129, 33]] {
        round_trip::<f16>(&mut rng, shape);
        round_trip::<bf16>(&mut rng, shape);
        round_trip::<f32>(&mut rng, shape);
        round_trip::<i32>(&mut rng, shape);
        round_trip::<u32>(&mut rng, shape);
    }
}

#[test]
fn zeros_copy_clone_and_reshape() {
    let stream = interp_stream();
    let z = DeviceTensor::<bf16>::zeros(&stream, &[4, 6]).unwrap();
    assert!(z.to_vec(&stream).unwrap().iter().all(|v| v.to_f64() == 0.0));

    let data: Vec<i32> = (0..24).map(|i| i * 3 - 7).collect();
    let src = DeviceTensor::from_slice(&stream, &data, &[4, 6]).unwrap();
    let mut dst = DeviceTensor::<i32>::zeros(&stream, &[24]).unwrap();
    dst.copy_from(&stream, &src).unwrap();
    assert_eq!(dst.to_vec(&stream).unwrap(), data);
    assert_eq!(src.try_clone(&stream).unwrap().to_vec(&stream).unwrap(), data);

    let reshaped = dst.reshape(&[2, 3, 4]).unwrap();
    assert_eq!(reshaped.shape(), &[2, 3, 4]);
    assert_eq!(reshaped.to_vec(&stream).unwrap(), data);

    let mut short = DeviceTensor::<i32>::zeros(&stream, &[23]).unwrap();
    match short.copy_from(&stream, &src) {
        Err(Error::Shape { message, .. }) => assert!(message.contains("23 elements"), "{message}"),
        other => panic!("expected a shape error, got {other:?}"),
    }
}

/// A tensor launched with another shape: read through `view_as` (no
/// copy; the view's shape binds the kernel's dims), written after
/// `reshape_in_place`; both refuse a shape of another element count.
#[test]
fn views_of_another_shape() {
    use tile_runtime::TensorArg;
    let stream = interp_stream();
    let meta = leak_meta(&scale_kernel(), vec![]);
    let data: Vec<f32> = (0..300).map(|i| i as f32 * 0.5 - 20.0).collect();
    let a = DeviceTensor::from_slice(&stream, &data, &[3, 4, 25]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[12, 25]).unwrap();
    let view = a.view_as(&[300]).unwrap();
    assert_eq!(view.shape(), &[300]);
    c.reshape_in_place(&[300]).unwrap();
    launch(&stream, meta, &mut [view.kernel_arg(), KernelArg::tensor_mut(&mut c), KernelArg::F32(3.0)]).unwrap();
    c.reshape_in_place(&[12, 25]).unwrap();
    assert_eq!(c.shape(), &[12, 25]);
    let want: Vec<f32> = data.iter().map(|x| x * 3.0).collect();
    assert_eq!(c.to_vec(&stream).unwrap(), want);
    assert_eq!(a.shape(), &[3, 4, 25], "the viewed tensor keeps its shape");

    // The view's shape, not the tensor's, binds `N`.
    let short = a.view_as(&[2, 150]).unwrap();
    let r = launch(&stream, meta, &mut [short.kernel_arg(), KernelArg::tensor_mut(&mut c), KernelArg::F32(1.0)]);
    assert!(r.is_err(), "a 2-D view passed for a 1-D parameter launched");

    for err in [a.view_as(&[301]).map(|_| ()).unwrap_err(), c.reshape_in_place(&[7, 7]).unwrap_err()] {
        let text = err.to_string();
        assert!(matches!(err, Error::Shape { .. }) && text.contains("300 elements"), "{text}");
    }
    assert_eq!(c.shape(), &[12, 25], "a refused reshape leaves the shape");
}

#[test]
fn shape_errors_from_constructors_and_reshape() {
    let stream = interp_stream();
    let err = DeviceTensor::from_slice(&stream, &[1.0f32; 10], &[3, 4]).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("[3, 4]") && text.contains("12 elements") && text.contains("10"), "{text}");

    let t = DeviceTensor::from_slice(&stream, &[1.0f32; 12], &[3, 4]).unwrap();
    let err = t.reshape(&[5, 2]).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Shape { .. }) && text.contains("[5, 2]") && text.contains("12"), "{text}");

    let err = DeviceTensor::<f32>::zeros(&stream, &[usize::MAX, 2]).unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
}

fn expect_argument_error(result: Result<(), Error>, param: &str, needle: &str) {
    match result {
        Err(Error::Argument { kernel, param: p, message }) => {
            assert_eq!(kernel, "scale");
            assert_eq!(p, param);
            assert!(message.contains(needle), "{message}");
        }
        other => panic!("expected an argument error about `{param}`, got {other:?}"),
    }
}

#[test]
fn launch_checks_arity_kinds_types_and_mutability() {
    let stream = interp_stream();
    let meta = leak_meta(&scale_kernel(), vec![]);
    let a = DeviceTensor::from_slice(&stream, &[1.0f32; 50], &[50]).unwrap();
    let a16 = DeviceTensor::from_slice(&stream, &[f16::ONE; 50], &[50]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[50]).unwrap();

    let r = launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c)]);
    match r {
        Err(Error::Argument { message, .. }) => {
            assert!(message.contains("takes 3 arguments (a, c, s), got 2"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let r = launch(&stream, meta, &mut [KernelArg::tensor(&a16), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)]);
    expect_argument_error(r, "a", "expects a read-only f32 tensor, got a read-only f16 tensor");
    let r = launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor(&c), KernelArg::F32(2.0)]);
    expect_argument_error(r, "c", "expects a writable f32 tensor, got a read-only f32 tensor");
    let r =
        launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F16(f16::ONE)]);
    expect_argument_error(r, "s", "expects an f32 scalar, got an f16 scalar");
    let r = launch(&stream, meta, &mut [KernelArg::F32(1.0), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)]);
    expect_argument_error(r, "a", "got an f32 scalar");
    let r = launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::tensor(&a)]);
    expect_argument_error(r, "s", "got a read-only f32 tensor");
}

#[test]
fn launch_reports_dimension_mismatches_by_parameter_and_dimension() {
    let stream = interp_stream();
    let meta = leak_meta(&scale_kernel(), vec![]);
    let a = DeviceTensor::from_slice(&stream, &[1.0f32; 100], &[100]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[99]).unwrap();
    let err = launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)])
        .unwrap_err();
    match &err {
        Error::Shape { kernel, param, dim, message } => {
            assert_eq!((kernel.as_str(), param.as_str(), *dim), ("scale", "c", Some(0)));
            assert!(message.contains("`N` is 100") && message.contains("99"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with("kernel `scale`: "), "{err}");

    let a2 = DeviceTensor::from_slice(&stream, &[1.0f32; 100], &[10, 10]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[100]).unwrap();
    let err = launch(&stream, meta, &mut [KernelArg::tensor(&a2), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)])
        .unwrap_err();
    match err {
        Error::Shape { param, dim: None, message, .. } => {
            assert_eq!(param, "a");
            assert!(message.contains("rank 1") && message.contains("[N]"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_empty_grid_launches_nothing() {
    let stream = interp_stream();
    let meta = leak_meta(&scale_kernel(), vec![]);
    let a = DeviceTensor::<f32>::zeros(&stream, &[0]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[0]).unwrap();
    launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)]).unwrap();
}

/// Runs `affine` on the interpreter. Until the interpreter exists the launch
/// must come back as `Error::Interpreter`; once it does, the result must match.
#[test]
fn a_valid_launch_reaches_the_interpreter() {
    let stream = interp_stream();
    let meta = leak_meta(&affine_kernel(), vec![]);
    let mut rng = Rng::new(11);
    let (m, n) = (13, 37);
    let x: Vec<f16> = (0..m * n).map(|_| f16::from_f64(rng.f64() * 4.0)).collect();
    let xt = DeviceTensor::from_slice(&stream, &x, &[m, n]).unwrap();
    let mut yt = DeviceTensor::<f32>::zeros(&stream, &[m, n]).unwrap();
    let alpha = f16::from_f64(-1.5);
    let beta = 3u32;
    let r = launch(
        &stream,
        meta,
        &mut [KernelArg::tensor(&xt), KernelArg::tensor_mut(&mut yt), KernelArg::F16(alpha), KernelArg::U32(beta)],
    );
    match r {
        // The placeholder interpreter of tile-ir (until the real one lands).
        Err(Error::Interpreter(message)) if message.contains("not built yet") => {
            assert!(message.starts_with("kernel `affine`: "), "{message}")
        }
        Ok(()) => {
            let reference: Vec<f64> =
                x.iter().map(|v| f16::from_f64(v.to_f64() * alpha.to_f64()).to_f64() + beta as f64).collect();
            assert_close(&yt.to_vec(&stream).unwrap(), &reference, 1e-6).unwrap();
        }
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn unreadable_metadata_is_an_error() {
    let stream = interp_stream();
    let meta: &'static KernelMeta = Box::leak(Box::new(KernelMeta { name: "broken", ir: "{ not json", targets: &[] }));
    match launch(&stream, meta, &mut []) {
        Err(Error::InvalidMeta { kernel, message }) => {
            assert_eq!(kernel, "broken");
            assert!(message.contains("does not parse"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rel_error_is_relative_l2_and_nan_is_infinite() {
    assert_eq!(rel_error(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
    let e = rel_error(&[1.0, 2.0, 2.0], &[1.0, 2.0, 3.0]);
    assert!((e - 1.0 / 14f64.sqrt()).abs() < 1e-15, "{e}");
    assert_eq!(rel_error(&[f64::NAN, 2.0], &[1.0, 2.0]), f64::INFINITY);
    assert_eq!(rel_error(&[1.0, 2.0], &[1.0, f64::NAN]), f64::INFINITY);
    assert_eq!(rel_error(&[f64::INFINITY], &[1.0]), f64::INFINITY);
    assert_eq!(rel_error(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    // Matching NaNs and infinities (e.g. a masked softmax row) count as equal.
    assert_eq!(rel_error(&[f64::NAN, f64::NEG_INFINITY, 2.0], &[f64::NAN, f64::NEG_INFINITY, 2.0]), 0.0);
    // A zero reference gives the absolute error.
    assert_eq!(rel_error(&[3.0, 4.0], &[0.0, 0.0]), 5.0);
}

#[test]
fn assert_close_accepts_within_tolerance_and_names_the_worst_element() {
    let mut rng = Rng::new(3);
    let reference: Vec<f64> = (0..1001).map(|_| rng.f64()).collect();
    let halves: Vec<f16> = reference.iter().map(|&v| f16::from_f64(v)).collect();
    let err = assert_close(&halves, &reference, 1e-3).unwrap();
    assert!(err > 0.0 && err < 1e-3, "{err}");

    let mut bad = halves.clone();
    bad[517] = f16::from_f64(reference[517] + 0.5);
    let message = assert_close(&bad, &reference, 1e-3).unwrap_err();
    assert!(message.contains("worst element is 517"), "{message}");
    assert!(message.contains(&format!("reference {}", reference[517])), "{message}");

    let mut nan = halves.clone();
    nan[9] = f16::NAN;
    let message = assert_close(&nan, &reference, 1.0).unwrap_err();
    assert!(message.contains("element 9: got NaN"), "{message}");

    let message = assert_close(&halves[..10], &reference, 1.0).unwrap_err();
    assert!(message.contains("10 elements") && message.contains("1001"), "{message}");
}

#[test]
fn bench_and_time_on_the_interpreter_use_the_host_clock() {
    let stream = interp_stream();
    assert!(matches!(bench(&stream, 0, 0, || Ok(())), Err(Error::Usage(_))));

    let mut calls = 0;
    let result = bench(&stream, 2, 5, || {
        calls += 1;
        std::thread::sleep(std::time::Duration::from_millis(3));
        Ok(())
    })
    .unwrap();
    assert_eq!(calls, 7);
    assert_eq!(result.iters, 5);
    assert!(result.min_ms >= 3.0, "{result:?}");
    assert!(result.min_ms <= result.median_ms && result.median_ms <= result.max_ms, "{result:?}");
    assert!(result.min_ms <= result.mean_ms && result.mean_ms <= result.max_ms, "{result:?}");
    assert!((result.gbps(1e9) - 1e3 / result.median_ms).abs() < 1e-9);

    let ms = stream
        .time(|| {
            std::thread::sleep(std::time::Duration::from_millis(4));
            Ok(())
        })
        .unwrap();
    assert!(ms >= 4.0, "{ms}");

    // An error inside the closure stops the benchmark and comes back unchanged.
    let r = bench(&stream, 0, 3, || Err(Error::Usage("boom".into())));
    assert_eq!(r.unwrap_err(), Error::Usage("boom".into()));
}

#[test]
fn runtime_handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Device>();
    check::<Stream>();
    check::<DeviceTensor<f16>>();
    check::<tile_runtime::Event>();
    check::<KernelMeta>();
}

/// What may cross threads (the `device.rs` doc, "Threads"): asserted at
/// compile time, so that a field that is not thread-safe fails the build.
#[test]
fn devices_streams_events_tensors_and_metadata_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Device>();
    assert_send_sync::<Stream>();
    assert_send_sync::<tile_runtime::Event>();
    assert_send_sync::<DeviceTensor<f16>>();
    assert_send_sync::<DeviceTensor<bf16>>();
    assert_send_sync::<DeviceTensor<f32>>();
    assert_send_sync::<KernelMeta>();
    assert_send_sync::<Error>();
    // A cuBLAS handle may move to another thread but not be shared (cublas.rs).
    fn assert_send<T: Send>() {}
    assert_send::<tile_runtime::cublas::Gemm>();
}

#[test]
fn an_absurd_interpreter_allocation_is_an_error_not_an_abort() {
    let stream = interp_stream();
    // 10^12 bytes: more than the host has (and 2^61 elements more than it can address).
    for shape in [vec![250_000_000_000usize], vec![1 << 30, 1 << 31]] {
        match DeviceTensor::<f32>::zeros(&stream, &shape) {
            Err(Error::OutOfMemory { tensor, device, bytes, message }) => {
                assert_eq!(tensor, format!("a DeviceTensor<f32> of shape {shape:?}"));
                assert_eq!(device, "the CPU interpreter");
                assert_eq!(bytes, shape.iter().product::<usize>() as u64 * 4);
                assert!(message.contains("smaller tensors"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    // Past usize: a shape error, as before.
    assert!(matches!(DeviceTensor::<f32>::zeros(&stream, &[usize::MAX, 2]), Err(Error::Shape { .. })));
    // A small one still works afterwards.
    assert_eq!(DeviceTensor::<f32>::zeros(&stream, &[3]).unwrap().to_vec(&stream).unwrap(), vec![0.0; 3]);
}

/// A grid of more blocks than any device runs (2^32 on x) is a launch error
/// naming the kernel, on every device (the grid is evaluated before the
/// device is asked).
#[test]
fn a_grid_no_device_can_run_is_a_launch_error_naming_the_kernel() {
    let stream = interp_stream();
    let mut k = scale_kernel();
    let n = tile_ir::Expr::var(k.dims[0]);
    k.grid[0] = tile_ir::Expr::binary(tile_ir::BinOp::Mul, n.clone(), n);
    let meta = leak_meta(&k, vec![]);
    let a = DeviceTensor::<f32>::zeros(&stream, &[65536]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[65536]).unwrap();
    match launch(&stream, meta, &mut [KernelArg::tensor(&a), KernelArg::tensor_mut(&mut c), KernelArg::F32(2.0)]) {
        Err(e @ Error::Launch { .. }) => {
            let text = e.to_string();
            assert!(text.starts_with("cannot launch kernel `scale`: ") && text.contains("4294967296"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

/// The interpreter's streams: `new_stream` gives a stream of the same
/// device, usable from other threads, and launches from several threads at
/// once through one kernel's cached metadata all compute their own result.
#[test]
fn interpreter_launches_from_several_threads_agree_with_the_reference() {
    let device = Device::interpreter();
    let meta = leak_meta(&scale_kernel(), vec![]);
    std::thread::scope(|scope| {
        for t in 0..8u32 {
            let device = &device;
            scope.spawn(move || {
                let stream = device.new_stream().unwrap();
                assert!(stream.device().same_as(device));
                let mut rng = Rng::new(100 + t as u64);
                for i in 0..10 {
                    let n = 1 + (rng.next_u64() % 1000) as usize;
                    let a: Vec<f32> = (0..n).map(|_| rng.f64() as f32).collect();
                    let s = t as f32 + i as f32 * 0.5;
                    let at = DeviceTensor::from_slice(&stream, &a, &[n]).unwrap();
                    let mut ct = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
                    launch(
                        &stream,
                        meta,
                        &mut [KernelArg::tensor(&at), KernelArg::tensor_mut(&mut ct), KernelArg::F32(s)],
                    )
                    .unwrap();
                    let c = ct.to_vec(&stream).unwrap();
                    assert!(c.iter().zip(&a).all(|(c, a)| *c == a * s), "thread {t}, launch {i}");
                }
            });
        }
    });
}

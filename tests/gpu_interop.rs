//! Zero-copy interop with cudarc on the GPU (feature `gpu`): a kernel reads
//! and writes memory that cudarc `CudaSlice`s own, through `TensorView` /
//! `TensorViewMut`, on the caller's `CudaStream` (`Stream::from_cudarc`);
//! same device pointer before and after (no copy), sub-ranges by element
//! offset, and the errors for a shape past the slice, a misaligned offset
//! and another context.
//!
//! `cargo test --release --features gpu --test gpu_interop`
#![cfg(feature = "gpu")]
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "../examples/kernels"]
mod examples {
    pub mod vector_add;
}
use examples::vector_add::vector_add;
use tile::cudarc::driver::{CudaContext, CudaSlice, DevicePtr};
use tile::prelude::*;
use tile::{TensorView, TensorViewMut};

fn address(slice: &CudaSlice<f32>, stream: &std::sync::Arc<tile::cudarc::driver::CudaStream>) -> u64 {
    let (ptr, _guard) = slice.device_ptr(stream);
    ptr
}

#[test]
fn a_kernel_writes_through_a_view_into_the_callers_slice() {
    let ctx = CudaContext::new(0).expect("the gpu tests need an NVIDIA GPU and driver");
    // The caller's own stream, not tile's default one.
    let cu = ctx.new_stream().unwrap();
    let stream = Stream::from_cudarc(cu.clone()).unwrap();
    assert!(std::sync::Arc::ptr_eq(stream.cuda_stream().unwrap(), &cu));
    let mut rng = common::Rng::new(11);
    // Offsets in elements (multiples of 4 f32: views keep 16-byte alignment).
    for (n, off_b, off_c) in [(1usize, 0usize, 0usize), (4097, 4, 8), (100_003, 36, 1000)] {
        let a_host = rng.vec(n, -1.0, 1.0);
        let b_host = rng.vec(n + off_b + 5, -1.0, 1.0);
        let c_len = n + off_c + 7;
        let a: CudaSlice<f32> = cu.clone_htod(&a_host).unwrap();
        let b: CudaSlice<f32> = cu.clone_htod(&b_host).unwrap();
        let mut c: CudaSlice<f32> = cu.clone_htod(&vec![f32::NAN; c_len]).unwrap();
        let before = address(&c, &cu);
        {
            let av = TensorView::new(&a, &[n]).unwrap();
            // A sub-range of b: elements off_b..off_b + n.
            let bv = TensorView::with_offset(&b, off_b, &[n]).unwrap();
            let mut cv = TensorViewMut::with_offset(&mut c, off_c, &[n]).unwrap();
            vector_add::launch(&stream, &av, &bv, &mut cv).unwrap();
        }
        // The kernel wrote the caller's allocation: same device address.
        assert_eq!(address(&c, &cu), before, "n = {n}");
        let out = cu.clone_dtoh(&c).unwrap();
        cu.synchronize().unwrap();
        let reference = examples::vector_add::reference(&a_host, &b_host[off_b..off_b + n]);
        assert_close(&out[off_c..off_c + n], &reference, 1e-6).unwrap();
        // Nothing outside the view was written.
        assert!(out[..off_c].iter().chain(&out[off_c + n..]).all(|x| x.is_nan()), "n = {n}: a write outside the view");
    }
}

#[test]
fn views_mix_with_owned_tensors_on_the_callers_stream() {
    let ctx = CudaContext::new(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let cu = ctx.new_stream().unwrap();
    let stream = Stream::from_cudarc(cu.clone()).unwrap();
    let n = 5000;
    let mut rng = common::Rng::new(12);
    let (a_host, b_host) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
    let a: CudaSlice<f32> = cu.clone_htod(&a_host).unwrap();
    let b = DeviceTensor::from_slice(&stream, &b_host, &[n]).unwrap();
    let mut c = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
    vector_add::launch(&stream, &TensorView::new(&a, &[n]).unwrap(), &b, &mut c).unwrap();
    assert_close(&c.to_vec(&stream).unwrap(), &examples::vector_add::reference(&a_host, &b_host), 1e-6).unwrap();
    // And the other way round: an owned tensor read, a view written.
    let mut d: CudaSlice<f32> = cu.clone_htod(&vec![0.0f32; n]).unwrap();
    vector_add::launch(&stream, &b, &b, &mut TensorViewMut::new(&mut d, &[n]).unwrap()).unwrap();
    let out = cu.clone_dtoh(&d).unwrap();
    let twice: Vec<f64> = b_host.iter().map(|&x| 2.0 * x as f64).collect();
    assert_close(&out, &twice, 1e-6).unwrap();
}

#[test]
fn views_past_the_slice_and_other_contexts_are_errors() {
    let ctx = CudaContext::new(0).expect("the gpu tests need an NVIDIA GPU and driver");
    let cu = ctx.default_stream();
    let a: CudaSlice<f32> = cu.clone_htod(&vec![0.0f32; 100]).unwrap();
    let e = TensorView::with_offset(&a, 41, &[6, 10]).unwrap_err();
    assert!(matches!(e, tile::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("the slice has 59 past the offset 41"), "{e}");
    assert!(TensorView::with_offset(&a, 101, &[0]).is_err());
    assert!(TensorView::with_offset(&a, 40, &[6, 10]).is_ok());
    // An offset that breaks the 16-byte alignment of the tensor's start.
    let e = TensorView::with_offset(&a, 3, &[10]).unwrap_err();
    assert!(matches!(e, tile::Error::Usage(_)) && e.to_string().contains("multiple of 4"), "{e}");

    // A context of its own (not the device's primary one): refused, since
    // tile's modules live in the primary context.
    let other = CudaContext::new_non_primary(0, 0).unwrap();
    let other_stream = other.default_stream();
    let e = Stream::from_cudarc(other_stream.clone()).unwrap_err();
    assert!(matches!(e, tile::Error::DeviceMismatch(_)) && e.to_string().contains("primary context"), "{e}");
    let b: CudaSlice<f32> = other_stream.clone_htod(&vec![0.0f32; 10]).unwrap();
    let e = TensorView::new(&b, &[10]).unwrap_err();
    assert!(e.to_string().contains("primary context"), "{e}");
    ctx.bind_to_thread().unwrap();

    // A view on the interpreter's stream: the tensor is on another device.
    let a_view = TensorView::new(&a, &[100]).unwrap();
    let cpu = Device::interpreter().stream().unwrap();
    let x = DeviceTensor::<f32>::zeros(&cpu, &[100]).unwrap();
    let mut y = DeviceTensor::<f32>::zeros(&cpu, &[100]).unwrap();
    let e = vector_add::launch(&cpu, &a_view, &x, &mut y).unwrap_err();
    assert!(matches!(e, tile::Error::DeviceMismatch(_)), "{e:?}");
}

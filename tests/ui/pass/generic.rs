use tile::prelude::*;
use tile::{DeviceTensor, Stream};

/// y = alpha · x + y, generic over the element type, the block and the threads.
#[tile_kernel(threads = THREADS, instances((f32, 256, 128), (f16, 512, 128), (bf16, 1024, 256)))]
pub fn axpy<T: Float, const BLOCK: usize, const THREADS: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>, alpha: T) {
    let bx = grid(cdiv(N, BLOCK));
    let mut a = fragment::<T, BLOCK>();
    let mut b = fragment::<T, BLOCK>();
    copy(x.tile([bx * BLOCK]), &mut a);
    copy(y.tile([bx * BLOCK]), &mut b);
    for i in parallel(BLOCK) {
        b[i] = alpha * a[i] + b[i];
    }
    copy(&b, y.tile([bx * BLOCK]));
}

// The element type is inferred from the tensors; the constants are named.
#[allow(dead_code)]
fn run(s: &Stream, x: &DeviceTensor<f16>, y: &mut DeviceTensor<f16>) -> Result<(), tile::Error> {
    axpy::launch::<_, 512, 128>(s, x, y, f16::from_f32(2.0))
}

// Host code generic over the instances.
#[allow(dead_code)]
fn run_any<T: Element>(s: &Stream, x: &DeviceTensor<T>, y: &mut DeviceTensor<T>, alpha: T) -> Result<(), tile::Error>
where
    axpy::Instances: axpy::Instance<T, 1024, 256>,
{
    axpy::launch::<T, 1024, 256>(s, x, y, alpha)
}

fn main() {
    assert_eq!(axpy::INSTANCES.len(), 3);
    assert_eq!(axpy::meta::<f32, 256, 128>().name, "axpy__f32_256_128");
    assert_eq!(axpy::meta::<bf16, 1024, 256>().name, "axpy__bf16_1024_256");
    assert!(axpy::meta::<f16, 512, 128>().ir.contains("\"threads\":128"));
    // Each instance runs in the interpreter.
    let device = Device::interpreter();
    let s = device.stream().unwrap();
    let n = 1000;
    let xh: Vec<f16> = (0..n).map(|i| f16::from_f32(i as f32 * 0.25)).collect();
    let yh: Vec<f16> = (0..n).map(|i| f16::from_f32(1.0 - i as f32 * 0.125)).collect();
    let x = DeviceTensor::from_slice(&s, &xh, &[n]).unwrap();
    let mut y = DeviceTensor::from_slice(&s, &yh, &[n]).unwrap();
    run(&s, &x, &mut y).unwrap();
    let got = y.to_vec(&s).unwrap();
    let want: Vec<f64> = xh.iter().zip(&yh).map(|(a, b)| 2.0 * a.to_f64() + b.to_f64()).collect();
    tile::assert_close(&got, &want, 1e-3).unwrap();
}

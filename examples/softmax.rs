//! Row softmax of an fp16 matrix on the GPU (or in the CPU interpreter when
//! there is none): checks against the CPU and prints the bandwidth next to a
//! device-to-device copy of the same number of bytes.
//!
//! `cargo run --release --example softmax`
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/softmax.rs"]
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::auto()?;
    let stream = device.stream()?;
    let shapes: &[(usize, usize)] = if device.is_interpreter() {
        println!("no GPU found: running in the CPU interpreter at small sizes");
        &[(37, 1000), (5, 5000)]
    } else {
        &[(65536, 4096), (1031, 777), (77, 10_000)]
    };
    println!("softmax on {}", device.name());
    let mut rng = common::Rng::new(11);
    for &(m, n) in shapes {
        let x_host: Vec<f16> = rng.vec(m * n, -8.0, 8.0).into_iter().map(f16::from_f32).collect();
        let x = DeviceTensor::from_slice(&stream, &x_host, &[m, n])?;
        let mut y = DeviceTensor::from_slice(&stream, &vec![f16::NAN; m * n], &[m, n])?;
        kernels::softmax::launch(&stream, &x, &mut y)?;
        let y_host = y.to_vec(&stream)?;
        // Check a sample of rows (all of them for small shapes).
        let rows = m.min(300);
        let err = assert_close(&y_host[..rows * n], &kernels::reference(&x_host, n, 0..rows), 5e-3)?;
        let tail = (m - rows)..m;
        let err_tail = assert_close(&y_host[tail.start * n..], &kernels::reference(&x_host, n, tail), 5e-3)?;
        println!("{m} x {n}: correct (relative error {:.2e})", err.max(err_tail));

        if device.is_interpreter() || m * n < (1 << 26) {
            continue;
        }
        let ours = bench(&stream, 10, 50, || kernels::softmax::launch(&stream, &x, &mut y))?;
        let bytes = 2.0 * 2.0 * (m * n) as f64;
        let src = DeviceTensor::<f16>::zeros(&stream, &[m * n])?;
        let mut dst = DeviceTensor::<f16>::zeros(&stream, &[m * n])?;
        let copy = bench(&stream, 10, 50, || dst.copy_from(&stream, &src))?;
        let ours_bw = bytes / (ours.median_ms * 1e-3) / 1e12;
        let copy_bw = bytes / (copy.median_ms * 1e-3) / 1e12;
        println!(
            "ours: {:.3} ms, {ours_bw:.2} TB/s; copy: {:.3} ms, {copy_bw:.2} TB/s",
            ours.median_ms, copy.median_ms
        );
        println!(
            "RESULT softmax m={m} n={n} ours_tbps={ours_bw:.3} copy_tbps={copy_bw:.3} ratio={:.3}",
            ours_bw / copy_bw
        );
    }
    Ok(())
}

//! Adds two fp32 vectors on the GPU (or in the CPU interpreter when there is
//! none), checks the result against the CPU and prints the bandwidth next to
//! a device-to-device copy of the same number of bytes.
//!
//! `cargo run --release --example vector_add`
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/vector_add.rs"]
mod kernels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::auto()?;
    let stream = device.stream()?;
    let n: usize = if device.is_interpreter() {
        println!("no GPU found: running in the CPU interpreter at a small size");
        100_003
    } else {
        1 << 28
    };
    println!("vector_add on {}: n = {n}", device.name());

    let mut rng = common::Rng::new(7);
    let a_host = rng.vec(n, -1.0, 1.0);
    let b_host = rng.vec(n, -1.0, 1.0);
    let a = DeviceTensor::from_slice(&stream, &a_host, &[n])?;
    let b = DeviceTensor::from_slice(&stream, &b_host, &[n])?;
    let mut c = DeviceTensor::from_slice(&stream, &vec![f32::NAN; n], &[n])?;

    kernels::vector_add::launch(&stream, &a, &b, &mut c)?;
    let err = assert_close(&c.to_vec(&stream)?, &kernels::reference(&a_host, &b_host), 1e-6)?;
    println!("correct: relative error {err:.2e}");

    let (warmup, iters) = if device.is_interpreter() { (0, 1) } else { (10, 50) };
    let ours = bench(&stream, warmup, iters, || kernels::vector_add::launch(&stream, &a, &b, &mut c))?;
    let bytes = 3.0 * 4.0 * n as f64;
    let ours_bw = bytes / (ours.median_ms * 1e-3) / 1e12;
    if device.is_interpreter() {
        println!("ours: {:.3} ms ({ours_bw:.4} TB/s, interpreter)", ours.median_ms);
        return Ok(());
    }
    // Peer: a device-to-device copy that reads and writes as many bytes in all.
    let src = DeviceTensor::<f32>::zeros(&stream, &[3 * n / 2])?;
    let mut dst = DeviceTensor::<f32>::zeros(&stream, &[3 * n / 2])?;
    let copy = bench(&stream, warmup, iters, || dst.copy_from(&stream, &src))?;
    let copy_bw = bytes / (copy.median_ms * 1e-3) / 1e12;
    println!("ours: {:.3} ms, {ours_bw:.2} TB/s", ours.median_ms);
    println!("copy: {:.3} ms, {copy_bw:.2} TB/s", copy.median_ms);
    println!("RESULT vector_add n={n} ours_tbps={ours_bw:.3} copy_tbps={copy_bw:.3} ratio={:.3}", ours_bw / copy_bw);
    Ok(())
}

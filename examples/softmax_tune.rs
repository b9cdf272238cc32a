//! Softmax variants (threads per row, rows per block), timed side by side
//! with a device copy of the same bytes: the data behind the choice made in
//! `examples/kernels/softmax.rs`. GPU only.
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;

/// `R` rows of up to `BN` = 4096 columns per block of `THREADS` threads,
/// one instance per configuration the sweep times.
#[tile_kernel(threads = THREADS, consts(BN = 4096), instances((128, 1), (256, 1), (512, 1), (1024, 1), (256, 2), (512, 2)))]
pub fn softmax_rows<const THREADS: usize, const R: usize>(x: &Tensor<f16, M, N>, y: &mut Tensor<f16, M, N>) {
    let bx = grid(cdiv(M, R));
    let mut t = fragment::<f32, R, BN>();
    let mut row_max = fragment::<f32, R>();
    let mut row_sum = fragment::<f32, R>();
    copy(x.tile([bx * R, 0]), &mut t).fill(f32::NEG_INFINITY);
    reduce_max(&t, &mut row_max, 1);
    for (i, j) in parallel((R, BN)) {
        t[(i, j)] = exp2((t[(i, j)] - row_max[i]) * 1.4426950408889634);
    }
    reduce_sum(&t, &mut row_sum, 1);
    for (i, j) in parallel((R, BN)) {
        t[(i, j)] = t[(i, j)] / row_sum[i];
    }
    copy(&t, y.tile([bx * R, 0]));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::auto()?;
    if device.is_interpreter() {
        println!("softmax_tune needs a GPU");
        return Ok(());
    }
    let stream = device.stream()?;
    let (m, n) = (65536usize, 4096usize);
    let mut rng = common::Rng::new(3);
    let x_host: Vec<f16> = rng.vec(m * n, -8.0, 8.0).into_iter().map(f16::from_f32).collect();
    let x = DeviceTensor::from_slice(&stream, &x_host, &[m, n])?;
    let mut y = DeviceTensor::<f16>::zeros(&stream, &[m, n])?;
    let bytes = 4.0 * (m * n) as f64;
    let src = DeviceTensor::<f16>::zeros(&stream, &[m * n])?;
    let mut dst = DeviceTensor::<f16>::zeros(&stream, &[m * n])?;
    type Launch = fn(&Stream, &DeviceTensor<f16>, &mut DeviceTensor<f16>) -> Result<(), tile::Error>;
    let variants: [(&str, Launch); 6] = [
        ("t128_r1", softmax_rows::launch::<128, 1>),
        ("t256_r1", softmax_rows::launch::<256, 1>),
        ("t512_r1", softmax_rows::launch::<512, 1>),
        ("t1024_r1", softmax_rows::launch::<1024, 1>),
        ("t256_r2", softmax_rows::launch::<256, 2>),
        ("t512_r2", softmax_rows::launch::<512, 2>),
    ];
    for round in 0..2 {
        let copy = bench(&stream, 10, 50, || dst.copy_from(&stream, &src))?;
        let copy_bw = bytes / (copy.median_ms * 1e-3) / 1e12;
        println!("round {round}: copy {copy_bw:.2} TB/s");
        for (name, launch) in variants {
            launch(&stream, &x, &mut y)?;
            let rows = y.to_vec(&stream)?;
            let check = assert_close(&rows[..64 * n], &softmax_ref(&x_host[..64 * n], n), 5e-3);
            let t = bench(&stream, 10, 50, || launch(&stream, &x, &mut y))?;
            let bw = bytes / (t.median_ms * 1e-3) / 1e12;
            println!(
                "  {name}: {bw:.2} TB/s ({:.3}), {}",
                bw / copy_bw,
                if check.is_ok() { "correct" } else { "WRONG" }
            );
        }
    }
    Ok(())
}

fn softmax_ref(x: &[f16], n: usize) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let max = row.iter().map(|v| v.to_f64()).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v.to_f64() - max).exp()).sum();
            row.iter().map(move |v| (v.to_f64() - max).exp() / sum).collect::<Vec<_>>()
        })
        .collect()
}

//! A kernel with debug prints, shared by the interpreter test
//! (`tests/debug_interp.rs`, output captured) and the GPU test
//! (`tests/gpu_debug.rs`, output read by a person).
#![allow(dead_code)]
use tile::prelude::*;

/// Scales a 2-D tensor; prints the block's grid coordinates and `scale`
/// from block (1, 0), and the elements of column 3 from block (0, 0).
#[tile_kernel(threads = 128, consts(BM = 4, BN = 32))]
pub fn print_demo(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>, scale: f32) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    copy(x.tile([by * BM, bx * BN]), &mut t);
    print("block ({}, {}) of {} x {}, scale {}", bx, by, cdiv(N, BN), cdiv(M, BM), scale).block((1, 0));
    for (i, j) in parallel((BM, BN)) {
        if j == 3 {
            print("x[{}, {}] = {}", by * BM + i, bx * BN + j, t[(i, j)]).block((0, 0));
        }
        t[(i, j)] = t[(i, j)] * scale;
    }
    copy(&t, y.tile([by * BM, bx * BN]));
}

/// The lines `print_demo` prints for [`run_print_demo`]'s 6 × 40 input
/// (`x[i, j] = 40 i + j`) and scale 0.5, in the interpreter's order (on the
/// GPU the same lines, in any order).
pub const PRINT_DEMO_LINES: &str = "x[0, 3] = 3.000000\nx[1, 3] = 43.000000\nx[2, 3] = 83.000000\nx[3, 3] = 123.000000\nblock (1, 0) of 2 x 2, scale 0.500000\n";

/// Runs `print_demo` on a 6 × 40 tensor and checks `y = 0.5 x`.
pub fn run_print_demo(dev: &Device) -> tile::Result<()> {
    let (m, n) = (6usize, 40usize);
    let stream = dev.stream()?;
    let host: Vec<f32> = (0..m * n).map(|i| i as f32).collect();
    let x = DeviceTensor::from_slice(&stream, &host, &[m, n])?;
    let mut y = DeviceTensor::<f32>::zeros(&stream, &[m, n])?;
    print_demo::launch(&stream, &x, &mut y, 0.5)?;
    let out = y.to_vec(&stream)?;
    for (i, (a, b)) in host.iter().zip(&out).enumerate() {
        assert_eq!(*b, a * 0.5, "element {i}");
    }
    Ok(())
}

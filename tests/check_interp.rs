//! The interpreter's check mode (`TILE_INTERPRET_CHECK=1`): a planted
//! out-of-bounds shared write and a read of a never-written fragment element
//! are errors naming the kernel, the buffer, the indices, the block and the
//! source line; a correct kernel runs silently. (This file's tests set the
//! variable for their whole process: keep every test here in check mode.)
use tile::prelude::*;

/// Shifts each tile right by one through shared memory, writing one element
/// past the end of `s` (the bug).
#[tile_kernel(threads = 64, consts(B = 64))]
pub fn shift_oob(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, B));
    let mut s = shared::<f32, B>();
    let mut t = fragment::<f32, B>();
    copy(x.tile([bx * B]), &mut t);
    for i in parallel(B) {
        s[i + 1] = t[i];
    }
    copy(&s, y.tile([bx * B]));
}

/// Sums a tile into `acc[0]` of a fragment that is never cleared (the bug:
/// `acc` is read before any write).
#[tile_kernel(threads = 64, consts(B = 64))]
pub fn sum_uninit(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, B));
    let mut t = fragment::<f32, B>();
    let mut acc = fragment::<f32, B>();
    copy(x.tile([bx * B]), &mut t);
    for i in parallel(B) {
        acc[i] = acc[i] + t[i];
    }
    copy(&acc, y.tile([bx * B]));
}

/// The correct version: `acc` cleared first.
#[tile_kernel(threads = 64, consts(B = 64))]
pub fn sum_ok(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, B));
    let mut t = fragment::<f32, B>();
    let mut acc = fragment::<f32, B>();
    clear(&mut acc);
    copy(x.tile([bx * B]), &mut t);
    for i in parallel(B) {
        acc[i] = acc[i] + t[i];
    }
    copy(&acc, y.tile([bx * B]));
}

fn tensors(n: usize) -> (Stream, DeviceTensor<f32>, DeviceTensor<f32>) {
    std::env::set_var(tile::INTERPRET_CHECK_ENV, "1");
    let stream = Device::interpreter().stream().unwrap();
    let host: Vec<f32> = (0..n).map(|i| i as f32 - 7.5).collect();
    let x = DeviceTensor::from_slice(&stream, &host, &[n]).unwrap();
    let y = DeviceTensor::<f32>::zeros(&stream, &[n]).unwrap();
    (stream, x, y)
}

/// The line of the first line of this file containing `needle`.
fn line_of(needle: &str) -> usize {
    include_str!("check_interp.rs").lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn out_of_bounds_shared_write_names_its_line() {
    let (stream, x, mut y) = tensors(100);
    let e = shift_oob::launch(&stream, &x, &mut y).unwrap_err().to_string();
    let line = line_of("s[i + 1] = t[i];");
    for want in [
        "kernel `shift_oob`".to_string(),
        "block (0, 0, 0)".into(),
        format!("check_interp.rs:{line}"),
        "index [64] is out of bounds for shared buffer `s` of shape [64]".into(),
    ] {
        assert!(e.contains(&want), "missing {want:?} in: {e}");
    }
}

#[test]
fn uninitialized_read_names_buffer_indices_and_line() {
    let (stream, x, mut y) = tensors(100);
    let e = sum_uninit::launch(&stream, &x, &mut y).unwrap_err().to_string();
    let line = line_of("acc[i] = acc[i] + t[i];");
    for want in [
        "kernel `sum_uninit`".to_string(),
        "block (0, 0, 0)".into(),
        format!("check_interp.rs:{line}"),
        "read of fragment `acc` at [0], which this block has not written".into(),
    ] {
        assert!(e.contains(&want), "missing {want:?} in: {e}");
    }
}

#[test]
fn correct_kernel_is_silent() {
    let (stream, x, mut y) = tensors(100);
    sum_ok::launch(&stream, &x, &mut y).unwrap();
    let out = y.to_vec(&stream).unwrap();
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, i as f32 - 7.5);
    }
}

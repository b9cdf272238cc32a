use tile::prelude::*;
use tile::{DeviceTensor, Stream};

/// c = a + b.
#[tile_kernel(threads = 256, consts(BLOCK = 1024))]
pub fn vector_add(a: &Tensor<f32, N>, b: &Tensor<f32, N>, c: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut x = fragment::<f32, BLOCK>();
    let mut y = fragment::<f32, BLOCK>();
    copy(a.tile([bx * BLOCK]), &mut x);
    copy(b.tile([bx * BLOCK]), &mut y);
    for i in parallel(BLOCK) {
        x[i] = x[i] + y[i];
    }
    copy(&x, c.tile([bx * BLOCK]));
}

// The launch wrapper has the kernel's signature, with device tensors.
#[allow(dead_code)]
fn run(stream: &Stream, a: &DeviceTensor<f32>, b: &DeviceTensor<f32>, c: &mut DeviceTensor<f32>) -> Result<(), tile::Error> {
    vector_add::launch(stream, a, b, c)
}

fn main() {
    assert_eq!(vector_add::META.name, "vector_add");
    assert!(vector_add::META.ir.contains("\"vector_add\""));
    // The tests build with an empty TILE_ARCHS: no PTX, interpreter only.
    assert!(vector_add::META.targets.is_empty());
}

use tile::cudarc::driver::CudaSlice;
use tile::prelude::*;
use tile::{Stream, TensorView};

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

// A read-only view (of a `&CudaSlice`) cannot be the written tensor.
fn run(stream: &Stream, a: &CudaSlice<f32>, c: &CudaSlice<f32>) {
    let a = TensorView::new(a, &[100]).unwrap();
    let mut c = TensorView::new(c, &[100]).unwrap();
    vector_add::launch(stream, &a, &a, &mut c).unwrap();
}

fn main() {
    let _ = run;
}

use tile::cudarc::driver::CudaSlice;
use tile::TensorView;

// A view borrows its slice: it cannot outlive it.
fn view_of(slice: CudaSlice<f32>) -> TensorView<'static, f32> {
    TensorView::new(&slice, &[4]).unwrap()
}

fn main() {
    let _ = view_of;
}

use tile::prelude::*;

// The helper scales its row in place, but the caller lends `m0` as `&m0`.
#[tile_kernel(threads = 128)]
pub fn lent_read_only(a: &Tensor<f32, 64, 64>, b: &mut Tensor<f32, 64, 64>) {
    let mut s0 = fragment::<f32, 64, 64>();
    let mut m0 = fragment::<f32, 64>();
    copy(a.tile([0, 0]), &mut s0);
    let row_max = |s: &_, m| {
        reduce_max(&s, &mut m, 1);
    };
    row_max(&s0, &m0);
    copy(&s0, b.tile([0, 0]));
}

fn main() {}

use tile::prelude::*;

#[tile_kernel(threads = 128)]
pub fn forgotten(a: &Tensor<f32, 128>, b: &mut Tensor<f32, 128>) {
    let mut x = fragment::<f32, 128>();
    copy(a.tile([0]), &mut x);
    let double = |v| {
        for i in parallel(128) {
            v[i] = v[i] * 2.0;
        }
    };
    copy(&x, b.tile([0]));
}

fn main() {}

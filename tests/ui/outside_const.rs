use tile::prelude::*;

const BLOCK: i32 = 256;

#[tile_kernel(threads = 128)]
pub fn relu(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut t = fragment::<f32, 256>();
    copy(x.tile([bx * 256]), &mut t);
    for i in parallel(256) {
        t[i] = max(t[i], 0.0);
    }
    copy(&t, y.tile([bx * 256]));
}

fn main() {
    let _ = BLOCK;
}

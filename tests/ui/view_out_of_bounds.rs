use tile::prelude::*;

#[tile_kernel(threads = 128)]
pub fn view_out_of_bounds(kv: &Tensor<f16, S, 576>, o: &mut Tensor<f16, S, 64>) {
    let bx = grid(cdiv(S, 64));
    let mut kv_s = shared::<f16, 64, 576>();
    // 576 columns: a K_pe view of 512..640 runs off the end.
    let k_pe = kv_s.view([.., 512..640]);
    copy(kv.tile([bx * 64, 0]), &mut kv_s);
    copy(&k_pe, o.tile([bx * 64, 0]));
}

fn main() {}

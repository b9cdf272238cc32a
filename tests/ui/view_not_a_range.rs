use tile::prelude::*;

#[tile_kernel(threads = 128)]
pub fn view_not_a_range(kv: &Tensor<f16, S, 576>, o: &mut Tensor<f16, S, 64>, c: i32) {
    let bx = grid(cdiv(S, 64));
    let mut kv_s = shared::<f16, 64, 576>();
    let mut f = fragment::<f32, 64, 64>();
    // An index instead of a range, a bound that is not a constant, a view of a fragment.
    let row = kv_s.view([0, 512..]);
    let moving = kv_s.view([.., c..576]);
    let of_fragment = f.view([.., ..]);
    copy(kv.tile([bx * 64, 0]), &mut kv_s);
}

fn main() {}

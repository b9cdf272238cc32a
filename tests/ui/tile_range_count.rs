use tile::prelude::*;

// One range entry per dim of the buffer: here one range faces a 2-D buffer,
// and three face a 2-D fragment.
#[tile_kernel(threads = 128, consts(BM = 64, D = 64))]
pub fn queries(q: &Tensor<f16, B, S, H, D>, o: &mut Tensor<f16, B, S, H, D>) {
    let (s0, h, b) = grid(cdiv(S, BM), H, B);
    let mut q_s = shared::<f16, BM, D>();
    let mut acc = fragment::<f16, BM, D>();
    copy(q.tile([b, s0 * BM.., h, 0]), &mut q_s);
    copy(&q_s, &mut acc);
    copy(&acc, o.tile([b, s0 * BM.., h.., ..]));
}

fn main() {}

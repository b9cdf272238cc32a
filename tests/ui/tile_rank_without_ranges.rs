use tile::prelude::*;

// A 2-D buffer facing a tile of a 4-D tensor must say which dims the tile
// spans (the window was once silently the last two dims).
#[tile_kernel(threads = 128, consts(BN = 64, D = 64))]
pub fn keys(kv: &Tensor<f16, B, S, H, D>, out: &mut Tensor<f16, B, S, H, D>) {
    let (s0, b) = grid(cdiv(S, BN), B);
    let mut k_s = shared::<f16, BN, D>();
    copy(kv.tile([b, s0 * BN, 0, 0]), &mut k_s);
    copy(&k_s, out.tile([b, s0 * BN.., 0, ..]));
}

fn main() {}

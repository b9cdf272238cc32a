//! Tile-shape variants of the FlashAttention forward kernel (threads, query
//! block, key block, stages) per head dim, f16 `[b, h, s, d]`, each checked
//! on sampled rows against the CPU reference and timed, causal and not: the
//! data behind the instances of `examples/kernels/flash_attention.rs`. GPU only.
//!
//! `cargo run --release --example flash_attention_tune --features gpu [-- d64,d128,d256]`
use tile::prelude::*;

#[path = "kernels/common.rs"]
mod common;
#[macro_use]
#[path = "kernels/flash_attention.rs"]
mod kernels;

use kernels::{Case, Launch, Layout};

// The sweep: instances of the examples' `[b, h, s, d]` source,
// `<T, D, THREADS, BM, BN, STAGES>`.
attention_bhsd!(
    tune,
    threads = THREADS,
    instances(
        (f16, 64, 128, 64, 64, 2),
        (f16, 64, 128, 64, 64, 3),
        (f16, 64, 128, 64, 128, 2),
        (f16, 64, 256, 128, 64, 2),
        (f16, 64, 256, 128, 128, 2),
        (f16, 128, 128, 64, 32, 2),
        (f16, 128, 128, 64, 32, 3),
        (f16, 128, 128, 64, 48, 2),
        (f16, 128, 128, 64, 64, 2),
        (f16, 128, 128, 64, 128, 2),
        (f16, 128, 256, 128, 64, 2),
        (f16, 128, 256, 128, 64, 3),
        (f16, 128, 256, 128, 128, 2),
        (f16, 256, 128, 64, 32, 2),
        (f16, 256, 128, 64, 64, 2),
        (f16, 256, 256, 128, 32, 2),
    )
);
// Past sm_80's shared memory.
attention_bhsd!(
    tune_sm90,
    threads = THREADS,
    archs = "sm_90a",
    instances(
        (f16, 256, 256, 128, 64, 2),
        (f16, 256, 256, 128, 80, 2),
        (f16, 128, 256, 128, 128, 3),
        (f16, 64, 384, 192, 128, 2),
        (f16, 64, 384, 192, 128, 3),
        (f16, 64, 384, 192, 128, 4)
    )
);

type Variant = (&'static str, usize, Launch<f16>, &'static tile::KernelMeta);

/// One instance of `$kernel` (`tune` or `tune_sm90`) as a [`Variant`],
/// named `d<D> t<THREADS> <BM>x<BN> s<STAGES>`.
macro_rules! variant {
    ($kernel:ident, $d:literal, $t:literal, $bm:literal, $bn:literal, $s:literal) => {
        (
            concat!("d", $d, " t", $t, " ", $bm, "x", $bn, " s", $s),
            $d,
            $kernel::launch::<f16, $d, $t, $bm, $bn, $s>,
            $kernel::meta::<f16, $d, $t, $bm, $bn, $s>(),
        )
    };
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::auto()?;
    if device.is_interpreter() {
        println!("flash_attention_tune needs a GPU");
        return Ok(());
    }
    let want: Vec<String> =
        std::env::args().skip(1).flat_map(|a| a.split(',').map(String::from).collect::<Vec<_>>()).collect();
    let stream = device.stream()?;
    let variants: [Variant; 22] = [
        variant!(tune, 64, 128, 64, 64, 2),
        variant!(tune, 64, 128, 64, 64, 3),
        variant!(tune, 64, 128, 64, 128, 2),
        variant!(tune, 64, 256, 128, 64, 2),
        variant!(tune, 64, 256, 128, 128, 2),
        variant!(tune, 128, 128, 64, 32, 2),
        variant!(tune, 128, 128, 64, 32, 3),
        variant!(tune, 128, 128, 64, 48, 2),
        variant!(tune, 128, 128, 64, 64, 2),
        variant!(tune, 128, 128, 64, 128, 2),
        variant!(tune, 128, 256, 128, 64, 2),
        variant!(tune, 128, 256, 128, 64, 3),
        variant!(tune, 128, 256, 128, 128, 2),
        variant!(tune, 256, 128, 64, 32, 2),
        variant!(tune, 256, 128, 64, 64, 2),
        variant!(tune, 256, 256, 128, 32, 2),
        variant!(tune_sm90, 256, 256, 128, 64, 2),
        variant!(tune_sm90, 256, 256, 128, 80, 2),
        variant!(tune_sm90, 128, 256, 128, 128, 3),
        variant!(tune_sm90, 64, 384, 192, 128, 2),
        variant!(tune_sm90, 64, 384, 192, 128, 3),
        variant!(tune_sm90, 64, 384, 192, 128, 4),
    ];
    for d in [64usize, 128, 256] {
        if !want.is_empty() && !want.iter().any(|w| *w == format!("d{d}")) {
            continue;
        }
        // The acceptance shape of each head dim (b·s = 16k tokens at d128).
        let (b, h, s) = match d {
            64 => (8, 16, 2048),
            128 => (4, 32, 4096),
            _ => (2, 16, 4096),
        };
        for causal in [false, true] {
            let c = Case { layout: Layout::Bhsd, b, h, h_kv: h, s_q: s, s_k: s, d, causal };
            let mut x = kernels::Inputs::<f16>::new(&stream, &c, 3)?;
            let rows: Vec<(usize, usize, usize)> = (0..16).map(|i| (i % b, (i * 7) % h, (i * 997) % s)).collect();
            let scale = std::f32::consts::LOG2_E / (d as f32).sqrt();
            for &(name, vd, launch, meta) in variants.iter().filter(|v| v.1 == d) {
                let _ = vd;
                let run = |x: &mut kernels::Inputs<f16>| {
                    launch(&stream, &x.dq, &x.dk, &x.dv, &mut x.o, &mut x.lse, scale, i32::from(causal))
                };
                if let Err(e) = run(&mut x) {
                    println!("  {name}: launch failed: {e}");
                    continue;
                }
                let check = x.check(&stream, &c, Some(&rows), 5e-3);
                let before = device.launch_counts(meta);
                let t = bench(&stream, 3, 20, || run(&mut x))?;
                let after = device.launch_counts(meta);
                let ran: Vec<String> = meta
                    .targets
                    .iter()
                    .zip(after.iter().zip(&before))
                    .filter(|(_, (a, b))| a > b)
                    .map(|(t, _)| format!("{} {} thr {} B smem", t.schedule, t.threads, t.shared_bytes))
                    .collect();
                let tf = c.flops() / (t.median_ms * 1e-3) / 1e12;
                let ok = match check {
                    Ok((e, _)) => format!("ok {e:.1e}"),
                    Err(e) => format!("WRONG: {e}"),
                };
                println!(
                    "RESULT attention_tune {name} causal={} b{b} h{h} s{s}: {:.3} ms {tf:.1} TFLOPS [{}] {ok}",
                    u8::from(causal),
                    t.median_ms,
                    ran.join("+")
                );
            }
        }
    }
    Ok(())
}

//! FlashAttention forward (`examples/kernels/flash_attention.rs`) in the CPU
//! interpreter at small awkward sizes, against the CPU f64 reference: every
//! layout × element type × head dim × masking, with MHA and GQA, s_q < s_k
//! and s_q > s_k (causal: rows that see no key give o = 0, lse = −∞), and
//! the host API's refusals. The interpreter runs Hopper's tiles (the
//! default: at d64 three consumer warpgroups over 192 x 128 blocks, and
//! 192 x 64 beside them) and, at d64 and d256 where they differ, the
//! portable ones.
#[path = "../examples/kernels/common.rs"]
mod common;
#[path = "../examples/kernels/flash_attention.rs"]
mod fa;
use fa::{AttentionElement, Case, Inputs, Layout, Tiles};
use tile::prelude::*;

fn run<T: AttentionElement>(c: &Case, tol: f64) -> (Vec<f64>, Vec<f32>) {
    run_with::<T>(c, tol, Tiles::Auto)
}

fn run_with<T: AttentionElement>(c: &Case, tol: f64, tiles: Tiles) -> (Vec<f64>, Vec<f32>) {
    let st = Device::interpreter().stream().unwrap();
    let mut x = Inputs::<T>::new(&st, c, (c.s_q * 31 + c.s_k + c.d) as u64).unwrap();
    x.run_with(&st, c, tiles).unwrap();
    x.check(&st, c, None, tol).unwrap_or_else(|e| panic!("{e}"));
    let o = x.o.to_vec(&st).unwrap().iter().map(|v| v.to_f64()).collect();
    (o, x.lse.to_vec(&st).unwrap())
}

fn combinations<T: AttentionElement>(tol: f64) {
    for layout in [Layout::Bhsd, Layout::Bshd] {
        for d in fa::HEAD_DIMS {
            for causal in [false, true] {
                // GQA with s_q > s_k (causal: the first 30 rows see no key), MHA with s_q < s_k.
                for (h, h_kv, s_q, s_k) in [(2, 1, 70, 40), (2, 2, 17, 75)] {
                    let c = Case { layout, b: 1, h, h_kv, s_q, s_k, d, causal };
                    run::<T>(&c, tol);
                    // d64's and d256's tiles differ between Hopper (the
                    // default here) and sm_80; d64 has a second Hopper
                    // instance (three warpgroups, 192 x 64).
                    if d != 128 && s_q > s_k {
                        run_with::<T>(&c, tol, Tiles::Portable);
                    }
                    if d == 64 {
                        run_with::<T>(&c, tol, Tiles::Blocks(192, 64));
                    }
                }
            }
        }
    }
}

#[test]
fn every_combination_f16() {
    combinations::<f16>(2e-3);
}

#[test]
fn every_combination_bf16() {
    combinations::<bf16>(1e-2);
}

/// The mask matters where it should: causal and non-causal agree on the
/// last row (it sees every key) and differ elsewhere; rows that see no key
/// are exactly 0 with lse −∞.
#[test]
fn causal_masks_what_it_should() {
    let c = Case { layout: Layout::Bhsd, b: 1, h: 1, h_kv: 1, s_q: 90, s_k: 70, d: 64, causal: false };
    let (full, _) = run::<f16>(&c, 5e-3);
    let (causal, lse) = run::<f16>(&Case { causal: true, ..c }, 5e-3);
    let row = |o: &[f64], i: usize| o[i * 64..(i + 1) * 64].to_vec();
    assert_eq!(row(&full, 89), row(&causal, 89));
    assert!(row(&full, 40).iter().zip(row(&causal, 40)).any(|(a, b)| (a - b).abs() > 1e-2));
    for (i, &l) in lse.iter().enumerate().take(20) {
        assert!(row(&causal, i).iter().all(|&v| v == 0.0), "row {i} sees no key");
        assert_eq!(l, f32::NEG_INFINITY);
    }
    assert!(lse[20].is_finite());
}

#[test]
fn refusals() {
    let st = Device::interpreter().stream().unwrap();
    let t = |shape: &[usize]| DeviceTensor::<f16>::zeros(&st, shape).unwrap();
    type Shapes<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a str);
    let cases: [Shapes; 5] = [
        (&[1, 4, 8, 64], &[1, 3, 8, 64], &[1, 4, 8, 64], "must divide"),
        (&[1, 4, 8, 96], &[1, 4, 8, 96], &[1, 4, 8, 96], "head dim 96"),
        (&[1, 4, 8, 64], &[1, 4, 8, 128], &[1, 4, 8, 64], "head dim"),
        (&[1, 4, 8, 64], &[1, 4, 8, 64], &[1, 4, 9, 64], "o has shape"),
        (&[4, 8, 64], &[4, 8, 64], &[4, 8, 64], "4-D"),
    ];
    for (qs, ks, os, want) in cases {
        let (q, k, mut o) = (t(qs), t(ks), t(os));
        let e = fa::forward(&st, &q, &k, &k, &mut o, fa::Options::default()).unwrap_err();
        assert!(e.to_string().contains(want), "{qs:?} {ks:?} {os:?}: {e}");
    }
    let (q, k, mut o) = (t(&[1, 4, 8, 64]), t(&[1, 4, 8, 64]), t(&[1, 4, 8, 64]));
    let mut lse = DeviceTensor::<f32>::zeros(&st, &[1, 4, 9]).unwrap();
    let opts = fa::Options { lse: Some(&mut lse), ..Default::default() };
    let e = fa::forward(&st, &q, &k, &k, &mut o, opts).unwrap_err();
    assert!(e.to_string().contains("lse has shape"), "{e}");
    // Blocks no instance of the head dim has.
    let (q, k, mut o) = (t(&[1, 4, 8, 64]), t(&[1, 4, 8, 64]), t(&[1, 4, 8, 64]));
    let opts = fa::Options { tiles: Tiles::Blocks(128, 128), ..Default::default() };
    let e = fa::forward(&st, &q, &k, &k, &mut o, opts).unwrap_err();
    assert!(e.to_string().contains("head dim 64 with 128 x 128 blocks"), "{e}");
}

/// Empty shapes: no query rows is nothing to do; no keys gives o = 0 and
/// lse = −∞ (every row sees no key).
#[test]
fn empty_shapes() {
    fa::check_empty_shapes(&Device::interpreter().stream().unwrap());
}

/// Causal skips the key blocks above the diagonal, for every instance:
/// with the values of the keys past the first query block's reach poisoned
/// with NaN, its rows are still right, which they would not be if a block
/// past their reach were loaded and masked (`0 · NaN`), and the next
/// block's are not.
#[test]
fn causal_never_reads_blocks_above_the_diagonal() {
    fa::check_causal_never_reads_above_the_diagonal(&Device::interpreter().stream().unwrap());
}

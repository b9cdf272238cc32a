//! Helpers (`let name = |..| { .. };`, inlined at each call): that a call
//! lowers to what the body written out at the call lowers to, that captures
//! are lexical and scalar arguments are evaluated once, run in the
//! interpreter; and the mistakes a helper can hold.

use super::{lower_err, lower_ok};
use tile_ir::interp::{self, Arg, TensorData};
use tile_ir::*;

/// Two row softmaxes written once as a helper (an immutable scalar passed
/// as itself: no copy).
const WITH_HELPER: &str = "fn k(a: &Tensor<f32, 16, 8>, b: &mut Tensor<f32, 16, 8>) {
    let mut s0 = fragment::<f32, 16, 8>();
    let mut s1 = fragment::<f32, 16, 8>();
    let mut m0 = fragment::<f32, 16>();
    let mut m1 = fragment::<f32, 16>();
    copy(a.tile([0, 0]), &mut s0);
    copy(a.tile([0, 0]), &mut s1);
    let c0 = 0.5;
    let softmax = |s: &mut _, m, c: f32| {
        reduce_max(&s, &mut m, 1);
        for (i, j) in parallel((16, 8)) {
            s[(i, j)] = exp2(s[(i, j)] - m[i] * c);
        }
    };
    softmax(&mut s0, &mut m0, c0);
    softmax(&mut s1, &mut m1, c0);
    for (i, j) in parallel((16, 8)) {
        s0[(i, j)] = s0[(i, j)] + s1[(i, j)];
    }
    copy(&s0, b.tile([0, 0]));
}";

/// The same, written out.
const WRITTEN_OUT: &str = "fn k(a: &Tensor<f32, 16, 8>, b: &mut Tensor<f32, 16, 8>) {
    let mut s0 = fragment::<f32, 16, 8>();
    let mut s1 = fragment::<f32, 16, 8>();
    let mut m0 = fragment::<f32, 16>();
    let mut m1 = fragment::<f32, 16>();
    copy(a.tile([0, 0]), &mut s0);
    copy(a.tile([0, 0]), &mut s1);
    let c0 = 0.5;
    reduce_max(&s0, &mut m0, 1);
    for (i, j) in parallel((16, 8)) {
        s0[(i, j)] = exp2(s0[(i, j)] - m0[i] * c0);
    }
    reduce_max(&s1, &mut m1, 1);
    for (i, j) in parallel((16, 8)) {
        s1[(i, j)] = exp2(s1[(i, j)] - m1[i] * c0);
    }
    for (i, j) in parallel((16, 8)) {
        s0[(i, j)] = s0[(i, j)] + s1[(i, j)];
    }
    copy(&s0, b.tile([0, 0]));
}";

#[test]
fn a_helper_call_lowers_as_its_body_written_out() {
    let with = lower_ok("threads = 128", WITH_HELPER);
    let without = lower_ok("threads = 128", WRITTEN_OUT);
    assert_eq!(print::print_kernel(&with), print::print_kernel(&without));
}

/// Runs a kernel of signature `(a: &Tensor<f32, 32>, b: &mut Tensor<f32, 32>)`
/// on `a[i] = i` and returns `b` (poisoned with NaN first).
fn run_32(src: &str) -> Vec<f32> {
    let k = lower_ok("threads = 32", src);
    let a: Vec<u8> = (0..32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut b: Vec<u8> = f32::NAN.to_le_bytes().repeat(32);
    interp::launch(
        &k,
        &mut [
            Arg::Tensor { data: TensorData::Ro(&a), shape: vec![32] },
            Arg::Tensor { data: TensorData::Rw(&mut b), shape: vec![32] },
        ],
    )
    .unwrap();
    b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn captures_are_lexical_and_scalars_are_evaluated_once_at_the_call() {
    // `scale` is shadowed after the helper: the helper keeps the one it saw.
    // `k` is read into the parameter `x` at each call: the second call sees
    // the value `k` has then, and the helper's writes to `x` (a `mut`
    // parameter) stay inside it.
    let b = run_32(
        "fn k(a: &Tensor<f32, 32>, b: &mut Tensor<f32, 32>) {
            let mut v = fragment::<f32, 32>();
            copy(a.tile([0]), &mut v);
            let scale = 2.0;
            let mut k = 1.0;
            let mut scale_add = |o: &mut _, mut x: f32| {
                x = x * 10.0;
                for i in parallel(32) {
                    o[i] = o[i] * scale + x;
                }
            };
            let scale = 3.0;
            scale_add(&mut v, k);
            k = k + scale;
            scale_add(&mut v, k);
            for i in parallel(32) {
                v[i] = v[i] + k;
            }
            copy(&v, b.tile([0]));
        }",
    );
    for (i, got) in b.iter().enumerate() {
        // ((i·2 + 10)·2 + 40) + 4
        let want = (i as f32 * 2.0 + 10.0) * 2.0 + 40.0 + 4.0;
        assert_eq!(*got, want, "b[{i}]");
    }
}

#[test]
fn helpers_call_earlier_helpers_and_run_in_loops() {
    let b = run_32(
        "fn k(a: &Tensor<f32, 32>, b: &mut Tensor<f32, 32>) {
            let mut v = fragment::<f32, 32>();
            let mut t = shared::<f32, 32>();
            copy(a.tile([0]), &mut v);
            let add = |o: &mut _, x: f32| {
                for i in parallel(32) {
                    o[i] = o[i] + x;
                }
            };
            let twice = |o: &mut _, x| {
                add(&mut o, x);
                add(&mut o, x);
            };
            for r in 0..3 {
                twice(&mut v, r as f32);
            }
            copy(&v, &mut t);
            copy(&t, b.tile([0]));
        }",
    );
    for (i, got) in b.iter().enumerate() {
        assert_eq!(*got, i as f32 + 2.0 * (0.0 + 1.0 + 2.0), "b[{i}]");
    }
}

#[test]
fn helper_mistakes_are_reported_at_their_tokens() {
    let k = |body: &str| {
        format!("fn k(a: &Tensor<f32, 32>, b: &mut Tensor<f32, 32>) {{ let mut v = fragment::<f32, 32>(); {body} }}")
    };
    let cases: &[(&str, &str)] = &[
        ("let f = |o: &mut _| { clear(&mut o); };", "the helper `f` is never called"),
        ("let f = |o: &mut _| { clear(&mut o); }; f(&mut v, 1);", "the helper `f` takes 1 argument, but 2 were given"),
        ("let f = |o| { clear(&mut o); }; f(&v);", "cannot write to `o`: the helper's caller passed it as `&buf`"),
        ("let f = |o| { o[0] = 1.0; }; f(&v);", "cannot write to `o`"),
        ("let f = |o| { o[0] = 1.0; }; f(&v);", "in this call of the helper `f`: the error above is in its body"),
        ("let f = |o| { copy(&v, &mut o); }; f(&v);", "cannot write to `o`"),
        ("let f = |o: &mut _| { clear(&mut o); }; f(&v);", "the parameter `o` of `f` is `&mut`: pass `&mut v`"),
        ("let f = |o: &mut _| { clear(&mut o); }; f(1.0);", "the parameter `o` of `f` is a reference"),
        ("let x = 1.0; let f = |o| { v[0] = o; }; f(&x);", "`x` is a scalar: pass it by value"),
        ("let f = |mut o| { clear(&mut o); }; f(&mut v);", "`mut o` takes a scalar by value"),
        ("let f = move |o: &mut _| { clear(&mut o); }; f(&mut v);", "`move` is not supported on a helper"),
        ("let f = |o: &mut _| -> f32 { clear(&mut o); }; f(&mut v);", "a helper returns nothing"),
        ("let f = |(o, p)| { clear(&mut o); }; f(&mut v);", "a helper parameter is a name"),
        ("let f = |o: &mut _| { clear(&mut o); }; let x = f(&mut v);", "`f` is a helper: call it as a statement"),
        ("let f = |o: &mut _| { clear(&mut o); }; f(&mut v); clear(&mut f);", "`f` is a helper"),
        ("let f = |o: &mut _| { f(&mut o); }; f(&mut v);", "unknown function `f`"),
        ("let f = |o: &mut _| { clear(&mut o); }; f(&mut v).keep();", "`f` is a helper; `.keep()` does not apply"),
        ("let f = |o: &mut _| { clear(&mut o); }; f(&mut a);", "cannot write to `a`: it is a read-only parameter"),
        ("let f = |o: &_, x: i32| { v[0] = o[x]; }; f(&a, 1.5);", "expected `i32`, found a float literal"),
        (
            "let f = |o: &mut _| { clear(&mut o); }; for i in parallel(32) { f(&mut v); }",
            "`clear` is a block-wide operation",
        ),
    ];
    for (body, expected) in cases {
        lower_err("threads = 32", &k(body), &[expected]);
    }
    // A mistake in a body called twice: reported once, with a note at each call.
    let errs = lower_err(
        "threads = 32",
        &k("let f = |o| { for i in parallel(32) { o[i] = zz; } }; f(&mut v); f(&mut v);"),
        &["cannot find `zz`", "in this call of the helper `f`"],
    );
    assert_eq!(errs.iter().filter(|e| e.contains("cannot find `zz`")).count(), 1, "{errs:#?}");
    assert_eq!(errs.iter().filter(|e| e.contains("in this call of the helper `f`")).count(), 2, "{errs:#?}");
}

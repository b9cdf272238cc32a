//! Every kind of mistake the frontend reports (and the verifier's, for
//! the rules that are its own), and that malformed kernels never panic.

use super::{lower_err, verified_err, ENV_LOCK};

#[test]
fn unknown_function_suggests() {
    lower_err(
        "threads = 32",
        "fn k(a: &mut Tensor<f32, 32>) { for i in parallel(32) { a[i] = exp3(a[i]); } }",
        &["unknown function `exp3`", "did you mean `exp2`?"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &mut Tensor<f32, 32>) { reduce_mx(&a, &a, 0); }",
        &["did you mean `reduce_max`?"],
    );
}

#[test]
fn name_errors() {
    lower_err("threads = 32", "fn k(a: &mut Tensor<f32, 32>) { let x = 1; let y = z + 1; }", &["cannot find `z`"]);
    lower_err(
        "threads = 32",
        "fn k(a: &mut Tensor<f32, 32>) { let count = 1; let y = cuont + 1; }",
        &["did you mean `count`?"],
    );
    let errs = lower_err(
        "threads = 32",
        "fn k(a: &mut Tensor<f32, 32>) { let mut s = shared::<f32, TILE>(); }",
        &["`TILE` is not a kernel constant", "cannot see `const` items", "consts(TILE = ..)"],
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    // A failed declaration does not cascade into "unknown variable" errors.
    let errs = lower_err(
        "threads = 32",
        "fn k(a: &mut Tensor<f32, 32>) { let x = nope + 1; let y = x * 2; let z = y; }",
        &["cannot find `nope`"],
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
}

/// A kernel that fails to lower is not compiled, but the verifier still
/// checks what was lowered: its errors come with the frontend's.
#[test]
fn verifier_errors_come_with_frontend_errors() {
    let errs = lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>, b: &mut Tensor<f32, 64>) { copy(a.tile([0]), b.tile([0])); let x = y; }",
        &["cannot find `y` in this kernel", "copy from `a` to `b`: both sides are global tensors"],
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
}

#[test]
fn shape_errors() {
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, M, K>) { let mut s = shared::<f32, 64, K>(); }",
        &["must be a compile-time constant", "`K` is a dynamic dimension"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>, n: i32) { let mut s = fragment::<f32, n>(); }",
        &["`n` is a kernel parameter"],
    );
    // The sides of a copy are the verifier's rule.
    verified_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut s = shared::<f32, 64, 32>(); let mut f = fragment::<f32, 32, 64>(); copy(&s, &mut f); }",
        &["copy from `s` [64, 32] to `f` [32, 64]: the shapes differ"],
    );
    verified_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>, b: &mut Tensor<f32, 64>) { copy(a.tile([0]), b.tile([0])); }",
        &["copy from `a` to `b`: both sides are global tensors (tensor parameters); stage the data through a shared buffer or a fragment"],
    );
    verified_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut g = fragment::<f32, 4, 16>(); copy(a.tile([0]), &mut g); }",
        &["copy between `g` (rank 2) and a tile of `a` (rank 1): the buffer's rank exceeds the tensor's (`g` is [4, 16], `a` is [64])"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut f = fragment::<f32, 64>(); copy(&f, a.tile([0])); }",
        &["cannot write to `a`", "read-only"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { for i in parallel(64) { a[i] = 1.0; } }",
        &["cannot write to `a`"],
    );
    lower_err("threads = 32", "fn k(a: &Tensor<f32, 64>) { atomic_add(&mut a[0], 1.0); }", &["cannot write to `a`"]);
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut s = fragment::<f32, 4, 8>(); let mut m = fragment::<f32, 4>(); reduce_max(&s, &mut m, 2); }",
        &["over dimension 2", "has rank 2"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut s = fragment::<f32, 4, 8>(); let mut m = fragment::<f32, 8>(); reduce_sum(&s, &mut m, 1); }",
        &["shape mismatch in `reduce_sum`", "gives [4]", "`m` is [8]"],
    );
}

#[test]
fn fragment_rules() {
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut f = fragment::<f32, 64>(); f[0] = 1.0; }",
        &["outside a `parallel` loop"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut f = fragment::<f32, 64>(); for i in parallel(63) { f[i + 1] = 1.0; } }",
        &["can only be indexed by the variables of enclosing `parallel` loops"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut f = fragment::<f32, 64>(); let mut acc = 0.0; for i in parallel(64) { acc += f[i]; } }",
        &["cannot assign to `acc` inside a `parallel` loop"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut f = fragment::<f32, 64>(); for i in parallel(64) { copy(a.tile([0]), &mut f); } }",
        &["block-wide operation"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut l = local::<f32, 64>(); for i in parallel(64) { l[i] = a[i]; } }",
        &["cannot write the local buffer `l` inside a `parallel` loop"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f16, 64, 64>) { gemm(&a, &a, &a); }",
        &["operand A of `gemm` is a shared buffer or a fragment, but `a` is a tensor parameter"],
    );
}

#[test]
fn type_errors() {
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f16, 64>, b: &mut Tensor<f32, 64>) { for i in parallel(64) { b[i] = a[i] + b[i]; } }",
        &["mismatched types in `+`", "`f16`", "`f32`"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f16, 64>, b: &mut Tensor<f32, 64>) { for i in parallel(64) { b[i] = a[i]; } }",
        &["`b` holds `f32` elements", "`as f32`"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<i32, 64>) { let x = a[0] + 1.5; }",
        &["expected `i32`, found a float literal"],
    );
    lower_err("threads = 32", "fn k(a: &Tensor<f32, 64>) { if a[0] { barrier(); } }", &["must be a `bool`"]);
    lower_err("threads = 32", "fn k(a: &Tensor<i32, 64>) { let x = exp2(a[0]); }", &["`exp2` needs a float argument"]);
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let x = max(a[0]); }",
        &["`max` takes 2 arguments, but 1 was given"],
    );
    lower_err("threads = 32", "fn k(a: &Tensor<f32, 64>) { let x = a[0] as f64; }", &["unsupported type"]);
}

#[test]
fn attribute_errors() {
    lower_err("consts(B = 4)", "fn k(a: &Tensor<f32, 64>) { }", &["missing `threads = N`"]);
    lower_err("threads = 100", "fn k(a: &Tensor<f32, 64>) { }", &["multiple of 32"]);
    lower_err("threads = 2048", "fn k(a: &Tensor<f32, 64>) { }", &["between 32 and 1024"]);
    lower_err("threads = 32, thread = 4", "fn k(a: &Tensor<f32, 64>) { }", &["did you mean `threads`?"]);
    lower_err("threads = 32, consts(A = 1, A = 2)", "fn k(a: &Tensor<f32, 64>) { }", &["defined twice"]);
}

#[test]
fn signature_errors() {
    lower_err("threads = 32", "fn k(a: Vec<f32>) { }", &["unsupported parameter type"]);
    lower_err("threads = 32", "fn k(a: &Tensor<f64, N>) { }", &["unsupported element type `f64`"]);
    lower_err("threads = 32", "fn k(a: Tensor<f32, N>) { }", &["passed by reference"]);
    lower_err("threads = 32", "fn k(a: &Tensor<f32, 64>) -> f32 { }", &["returns nothing"]);
    lower_err("threads = 32", "struct S;", &["goes on a function"]);
}

#[test]
fn statement_errors() {
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let mut i = 0; while i < 4 { i += 1; } }",
        &["`while` loops are not supported", "for i in parallel(n)"],
    );
    lower_err("threads = 32", "fn k(a: &Tensor<f32, 64>) { println!(\"hi\"); }", &["macros are not supported"]);
    lower_err("threads = 32", "fn k(a: &Tensor<f32, 64>) { const X: i32 = 4; }", &["consts(X = ..)"]);
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>) { let x = 1; let b = grid(4); }",
        &["must be the first statement"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, N>) { let b = grid(N); let c = grid(N); }",
        &["called twice", "first declared here"],
    );
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, N>, n: i32) { let b = grid(n); }",
        &["only tensor dimensions and constants"],
    );
    lower_err("threads = 32", "fn k(a: &Tensor<f32, N>) { let x = 1; x = 2; }", &["cannot assign twice to `x`"]);
    lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, N>) { for i in 0..4 { if i == 2 { break; } } }",
        &["`break` is not supported"],
    );
    lower_err("threads = 32", "fn k(a: &Tensor<f32, N>) { for i in (0..4).rev() { } }", &["unsupported loop iterator"]);
    lower_err("threads = 32", "fn k(a: &Tensor<f32, N>) { for i in paralel(4) { } }", &["did you mean `parallel`?"]);
}

#[test]
fn errors_are_all_collected() {
    let errs = lower_err(
        "threads = 32",
        "fn k(a: &Tensor<f32, 64>, b: &mut Tensor<f16, 64>) { let x = foo(1); let mut f = fragment::<f32, 64>(); f[0] = 1.0; while true { } }",
        &["unknown function `foo`", "outside a `parallel` loop", "`while`"],
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

/// Malformed kernels: each must give errors (never a panic, which the
/// expansion would turn into an "internal error").
#[test]
fn malformed_kernels_never_panic() {
    let cases: &[(&str, &str)] = &[
        ("threads = 0", "fn k() {}"),
        ("threads = \"x\"", "fn k() {}"),
        ("threads = 32, consts(A = 1.5)", "fn k() {}"),
        ("threads = 32, consts(A)", "fn k() {}"),
        ("threads = 32,,", "fn k() {}"),
        ("threads = 32, cluster", "fn k() {}"),
        ("threads = 32, cluster =", "fn k() {}"),
        ("threads = 32, cluster = (,)", "fn k() {}"),
        ("threads = 32, cluster = (-1)", "fn k() {}"),
        ("threads = 32, warp_specialize", "fn k() {}"),
        ("threads = 32, warp_specialize = ", "fn k() {}"),
        ("threads = 32", "fn k(a: &Tensor<f32>) {}"),
        ("threads = 32", "fn k(a: &Tensor<f32, >) {}"),
        ("threads = 32", "fn k(a: &Tensor<, N>) {}"),
        ("threads = 32", "fn k(a: &Tensor<f32, 0>) {}"),
        ("threads = 32", "fn k(a: &Tensor<f32, ()>) {}"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, N>, a: f32) {}"),
        ("threads = 32", "fn k(a: &'a Tensor<f32, N>) {}"),
        ("threads = 32", "fn k(mut a: f32) {}"),
        ("threads = 32", "fn k(a) {}"),
        ("threads = 32", "fn k(a: &Tensor<f32, N>, N: i32) {}"),
        ("threads = 32", "fn k() { let (a, b) = grid(1); }"),
        ("threads = 32", "fn k() { let x; }"),
        ("threads = 32", "fn k() { let a = grid(); }"),
        ("threads = 32", "fn k() { let a = grid(1, 2, 3, 4); }"),
        ("threads = 32", "fn k() { for (i, j) in parallel(4) {} }"),
        ("threads = 32", "fn k() { for i in parallel((4, 4)) {} }"),
        ("threads = 32", "fn k() { for i in parallel(0) {} }"),
        ("threads = 32", "fn k() { for i in parallel() {} }"),
        ("threads = 32", "fn k() { for i in pipelined(4) {} }"),
        ("threads = 32", "fn k() { for i in pipelined(4, 0) {} }"),
        ("threads = 32", "fn k() { for i in 0.. {} }"),
        ("threads = 32", "fn k() { for mut i in 0..4 {} }"),
        ("threads = 32", "fn k() { 'outer: for i in 0..4 {} }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let x = a[()]; }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4, 4>) { let x = a[0][1]; }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let x = a; }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let x = a.len(); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let x = a.tile([0]); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { copy(); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { copy(&a); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let s = shared::<f32, 4>(); copy(a, s); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(a.tile(0, 1), &mut s); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(a.tile([0, 1]), &mut s); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(&a, &s); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(s.tile([0]), &mut s); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(&a, &mut s).keep(); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(&a, &mut s).fill(); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(&a, &mut s).evict_first(1); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(&a, &mut s).evict_first().keep(); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); reduce_max(&s, &mut s); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); reduce_max(&a, &mut s, 0); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); reduce_max(&s, &mut s, -1); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); reduce_max(&s, &mut s, 0).fill(1); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f16, 4, 2>(); let mut m = shared::<f32, 4>(); reduce_sum(&s, &mut m, 1); }"),
        ("threads = 32", "fn k(a: &Tensor<f32, 4>) { atomic_add(a[0], 1.0); }"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, 4>) { atomic_add(&a[0], 1.0); }"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); atomic_add(&mut s[0], 1.0); }"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, 4>) { fill(&mut a, 1.0); }"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, 4>) { fill(a, 1.0); }"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, 4>) { clear(&mut nothing); }"),
        ("threads = 32", "fn k(a: &mut Tensor<f32, 4>) { barrier(1); }"),
        ("threads = 32", "fn k() { let s = shared::<f32>(); }"),
        ("threads = 32", "fn k() { let s = shared::<f32, 0>(); }"),
        ("threads = 32", "fn k() { let s = shared::<f32, { -1 }>(); }"),
        ("threads = 32", "fn k() { let s = shared::<bool, 4>(); }"),
        ("threads = 32", "fn k() { let s = shared(); }"),
        ("threads = 32", "fn k() { let s = shared::<f32, 4>(1); }"),
        ("threads = 32", "fn k() { let (s, t) = shared::<f32, 4>(); }"),
        ("threads = 32", "fn k() { let s = shared::<f32, { let x = 1; x }>(); }"),
        ("threads = 32", "fn k() { let x = 1 << 70; }"),
        ("threads = 32", "fn k() { let x = 1 / 0; }"),
        ("threads = 32", "fn k() { let x = 5_000_000_000; }"),
        ("threads = 32", "fn k() { let x: u32 = -1; }"),
        ("threads = 32", "fn k() { let x = i32::MAX; }"),
        ("threads = 32", "fn k() { let x = 1usize; }"),
        ("threads = 32", "fn k() { let x = 1.0f64; }"),
        ("threads = 32", "fn k() { let x = \"s\"; }"),
        ("threads = 32", "fn k() { let x = true + 1; }"),
        ("threads = 32", "fn k() { let x = 1.5 & 2.0; }"),
        ("threads = 32", "fn k() { let x = 1.0; let y = x << 1; }"),
        ("threads = 32", "fn k() { let x = 1u32; let y = -x; }"),
        ("threads = 32", "fn k() { let x = 1.0; let y = !x; }"),
        ("threads = 32", "fn k() { let x = 1; let y = *x; }"),
        ("threads = 32", "fn k() { let x = 1 && 2; }"),
        ("threads = 32", "fn k() { let x = true as i32; }"),
        ("threads = 32", "fn k() { let x = 1 as bool; }"),
        ("threads = 32", "fn k() { let x = if true { 1 }; }"),
        ("threads = 32", "fn k() { let x = if true { 1 } else { 1.5f32 as i32; 2 }; }"),
        ("threads = 32", "fn k() { let x = if 1 { 1 } else { 2 }; }"),
        ("threads = 32", "fn k() { let x = (1, 2); }"),
        ("threads = 32", "fn k() { let x = [1, 2]; }"),
        ("threads = 32", "fn k() { let x = { 1 }; }"),
        ("threads = 32", "fn k() { let x = |y| y; }"),
        ("threads = 32", "fn k() { let x = s.field; }"),
        ("threads = 32", "fn k() { let x = cdiv(1.0, 2); }"),
        ("threads = 32", "fn k() { let x = cdiv(4, 0); }"),
        ("threads = 32", "fn k() { let x = fma(1.0, 2.0); }"),
        ("threads = 32", "fn k() { let x = fma(true, true, true); }"),
        ("threads = 32", "fn k() { let x = max(true, false); }"),
        ("threads = 32", "fn k() { let x = sqrt(1u32); }"),
        ("threads = 32", "fn k() { let x = copy(); }"),
        ("threads = 32", "fn k() { let x = parallel(4); }"),
        ("threads = 32", "fn k() { let x = f32::max(1.0, 2.0); }"),
        ("threads = 32", "fn k() { let x = 1.0.frobnicate(); }"),
        ("threads = 32", "fn k() { let x = 1; x += 1.5; }"),
        ("threads = 32", "fn k() { let mut x = 1; x += 1.5; }"),
        ("threads = 32", "fn k() { let mut x = 1; x < 2; }"),
        ("threads = 32", "fn k() { let mut x = 1; x; }"),
        ("threads = 32", "fn k() { 1 }"),
        ("threads = 32", "fn k() { exp2(1.0); }"),
        ("threads = 32", "fn k() { x.max(1.0); }"),
        ("threads = 32", "fn k() { parallel(4); }"),
        ("threads = 32", "fn k() { shared::<f32, 4>(); }"),
        ("threads = 32", "fn k() { foo::bar(); }"),
        ("threads = 32", "fn k() { (foo)(); }"),
        ("threads = 32", "fn k() { loop {} }"),
        ("threads = 32", "fn k() { match 1 { _ => {} } }"),
        ("threads = 32", "fn k() { return; }"),
        ("threads = 32", "fn k() { for i in 0..4 { continue; } }"),
        ("threads = 32", "fn k() { unsafe {} }"),
        ("threads = 32", "fn k() { fn inner() {} }"),
        ("threads = 32", "fn k() { if let Some(x) = y {} }"),
        ("threads = 32", "fn k() { let Some(x) = y else { return; }; }"),
        ("threads = 32", "fn k() { let _ = 1; }"),
        ("threads = 32", "fn k() { let mut i = 0; for i2 in parallel(4) { i = 1; } }"),
        ("threads = 32", "fn k(n: i32) { n = 1; }"),
        ("threads = 32", "fn k(a: &Tensor<f32, N>) { N = 1; }"),
        ("threads = 32, consts(C = 1)", "fn k() { C = 1; }"),
        ("threads = 32", "fn k() { for i in 0..4 { i = 1; } }"),
        ("threads = 32", "fn k() { let b = grid(1); b = 1; }"),
        ("threads = 32", "fn k() { let mut s = shared::<f32, 4>(); s = 1; }"),
        ("threads = 32", "fn k() { (1) = 2; }"),
        ("threads = 32", "fn k() { let x = 1; x[0] = 1; }"),
        ("threads = 32", "fn k() { let mut f = fragment::<f32, 4>(); for i in parallel(4) { f[i] = f; } }"),
        ("threads = 32", "async fn k() {}"),
        ("threads = 32", "const fn k() {}"),
        ("threads = 32", "fn k() where {}"),
        ("threads = 32", "fn k()"),
        ("threads = 32", "fn k() {} fn j() {}"),
        ("threads = 32", "#[inline] fn k() {}"),
        ("threads = 32", ""),
    ];
    let _env = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("TILE_ARCHS", "");
    for (attr, item) in cases {
        let (Ok(attr_ts), Ok(item_ts)) = (attr.parse(), item.parse()) else { panic!("bad test tokens: {item}") };
        let out = crate::expand::tile_kernel(attr_ts, item_ts).to_string();
        assert!(out.contains("compile_error"), "no error for #[tile_kernel({attr})] {item}\n{out}");
        assert!(!out.contains("internal error"), "panic for #[tile_kernel({attr})] {item}\n{out}");
        if std::env::var_os("TILE_TEST_SHOW").is_some() {
            let msgs: Vec<&str> =
                out.split("compile_error ! {").skip(1).map(|m| m.split(" }").next().unwrap_or("")).collect();
            eprintln!("{item}\n    {}", msgs.join("\n    "));
        }
    }
}

/// Extreme constants found by the fuzz test (`fuzz.rs`): each is an error
/// naming the limit, at once (a 64 × 10^6 shared tile used to compile for
/// minutes; a 32 × (2^31 − 1) fragment took seconds and added an internal
/// error).
#[test]
fn extreme_constants_are_errors_naming_the_limit() {
    let gemm = r#"
pub fn g(a: &Tensor<f16, M, K>, b: &Tensor<f16, N, K>, c: &mut Tensor<f16, M, N>) {
    let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
    let mut a_s = shared::<f16, BM, BK>();
    let mut b_s = shared::<f16, BN, BK>();
    let mut acc = fragment::<f32, BM, BN>();
    clear(&mut acc);
    for k in pipelined(cdiv(K, BK), STAGES) {
        copy(a.tile([by * BM, k * BK]), &mut a_s);
        copy(b.tile([bx * BN, k * BK]), &mut b_s);
        gemm(&a_s, &b_s, &mut acc).trans_b();
    }
    copy(&acc, c.tile([by * BM, bx * BN]));
}
"#;
    let start = std::time::Instant::now();
    verified_err(
        "threads = 128, consts(BM = 64, BN = 64, BK = 1000000, STAGES = 2)",
        gemm,
        &[
            "shared buffer `a_s` ([64, 1000000] f16) takes 128000000 bytes, more than the",
            "bytes of shared memory of any target",
        ],
    );
    verified_err(
        "threads = 128, consts(BM = 64, BN = 1000000, BK = 64, STAGES = 2)",
        gemm,
        &["fragment `acc` ([64, 1000000] f32) has 64000000 elements: at least 500000 registers per thread with 128 threads (at most 256)"],
    );
    verified_err("threads = 128, consts(BM = 64, BN = 64, BK = 64, STAGES = 0)", gemm, &["between 1 and 16, found 0"]);
    verified_err(
        "threads = 256, consts(BM = 32, BN = 2147483647)",
        "pub fn k(x: &Tensor<f32, M, N>) { let mut t = fragment::<f32, BM, BN>(); copy(x.tile([0, 0]), &mut t); }",
        &["fragment `t` ([32, 2147483647] f32) has 68719476704 elements: at least 268435456 registers per thread with 256 threads (at most 256)"],
    );
    lower_err("threads = 2147483648", "pub fn k() {}", &["between 32 and 1024"]);
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
}

/// The compile errors of the whole expansion (every target, no ptxas).
fn expansion_errors(attr: &str, item: &str) -> Vec<String> {
    let env = crate::backend::BuildEnv::plain(tile_ir::Target::ALL.to_vec());
    let out = crate::expand::expand_with(attr.parse().expect("attr"), item.parse().expect("item"), &env).to_string();
    out.split("compile_error ! {").skip(1).map(|m| m.split(" }").next().unwrap_or("").to_string()).collect()
}

/// A fragment indexed in a parallel loop over other extents than its shape
/// is an error at the loop (the fuzz test found it as an internal error at
/// the copy: "layout shape differs from the copy's tile").
#[test]
fn fragment_indexed_over_other_extents() {
    let errs = expansion_errors(
        "threads = 256, consts(BLOCK = 2048)",
        "pub fn k(a: &Tensor<f32, N>, c: &mut Tensor<f32, N>) {
            let bx = grid(cdiv(N, BLOCK));
            let mut x = fragment::<f32, BLOCK>();
            let mut y = fragment::<f32, 65536>();
            copy(a.tile([bx * BLOCK]), &mut x);
            copy(a.tile([bx * BLOCK]), &mut y);
            for i in parallel(BLOCK) { x[i] = x[i] + y[i]; }
            copy(&x, c.tile([bx * BLOCK]));
        }",
    );
    assert!(
        errs.iter().any(|m| m
            .contains("the parallel loop over (i) indexes fragment `y` over extents [2048], but its shape is [65536]")),
        "{errs:#?}"
    );
    assert!(errs.iter().all(|m| !m.trim_start_matches([' ', '"']).starts_with("internal")), "{errs:#?}");
    let errs = expansion_errors(
        "threads = 128, consts(BM = 16, BN = 64)",
        "pub fn k(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
            let (bx, by) = grid(cdiv(N, BN), cdiv(M, BM));
            let mut t = fragment::<f32, BN, BM>();
            let mut out = fragment::<f32, BM, BN>();
            copy(x.tile([by * BM, bx * BN]), &mut t);
            for (i, j) in parallel((BM, BN)) { out[(i, j)] = t[(i, j)]; }
            copy(&out, y.tile([by * BM, bx * BN]));
        }",
    );
    assert!(
        errs.iter().any(|m| m.contains("indexes fragment `t` over extents [16, 64], but its shape is [64, 16]")),
        "{errs:#?}"
    );
    assert!(errs.iter().all(|m| !m.trim_start_matches([' ', '"']).starts_with("internal")), "{errs:#?}");
}

#[test]
fn evict_first_errors() {
    let k = "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); ";
    lower_err(
        "threads = 32",
        &format!("{k}copy(&a, &mut s).evict_first(1); }}"),
        &["`.evict_first()` takes no arguments"],
    );
    lower_err(
        "threads = 32",
        &format!("{k}copy(&a, &mut s).evict_first().evict_first(); }}"),
        &["`.evict_first()` is given twice"],
    );
    lower_err(
        "threads = 32",
        &format!("{k}copy(&a, &mut s).evict_first().keep(); }}"),
        &["unknown method `.keep()` on `copy(..)`; it supports `.fill(value)` and `.evict_first()`"],
    );
    verified_err(
        "threads = 32",
        &format!("{k}let mut t = shared::<f32, 4>(); copy(&a, &mut s); copy(&s, &mut t).evict_first(); }}"),
        &["copy from `s` with `.evict_first()`: the hint is the L2 policy of reads of a global tensor, and `s` is a shared buffer"],
    );
}

//! Unit tests of the frontend: kernels parsed from strings, lowered, and
//! checked by structure (the IR) or by their error messages.

use crate::diag::Errors;
use crate::{attr, lower, sig};
use tile_ir::*;

/// Runs attribute + signature + lowering on source text.
pub(crate) fn lower_src(attr_src: &str, item_src: &str) -> (Option<Kernel>, Vec<String>) {
    let mut errors = Errors::default();
    let attr = attr::parse(attr_src.parse().expect("attr tokens"), &mut errors);
    match sig::parse(item_src.parse().expect("item tokens"), &mut errors) {
        Ok(sig) => {
            let (k, _spans) = lower::lower(&attr, &sig, &mut errors);
            (Some(k), errors.messages())
        }
        Err(e) => {
            errors.push(e);
            (None, errors.messages())
        }
    }
}

pub(crate) fn lower_ok(attr_src: &str, item_src: &str) -> Kernel {
    let (k, errs) = lower_src(attr_src, item_src);
    assert!(errs.is_empty(), "unexpected errors: {errs:#?}");
    k.expect("kernel")
}

/// The errors of a kernel that must fail; each `expected` must appear in one message.
pub(crate) fn lower_err(attr_src: &str, item_src: &str, expected: &[&str]) -> Vec<String> {
    let (_, errs) = lower_src(attr_src, item_src);
    assert!(!errs.is_empty(), "expected errors, got none");
    for e in expected {
        assert!(errs.iter().any(|m| m.contains(e)), "no error contains {e:?}; errors: {errs:#?}");
    }
    errs
}

/// The errors the macro reports for a kernel that must fail: the
/// frontend's, or, when it lowered, the verifier's (as `backend.rs` runs
/// it). For the tile-op rules that live in `tile_ir::verify`.
pub(crate) fn verified_err(attr_src: &str, item_src: &str, expected: &[&str]) -> Vec<String> {
    let (k, mut errs) = lower_src(attr_src, item_src);
    if errs.is_empty() {
        if let Err(found) = tile_ir::verify::verify(&k.expect("kernel")) {
            errs.extend(found.into_iter().map(|e| e.message));
        }
    }
    assert!(!errs.is_empty(), "expected errors, got none");
    for e in expected {
        assert!(errs.iter().any(|m| m.contains(e)), "no error contains {e:?}; errors: {errs:#?}");
    }
    errs
}

fn walk<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in stmts {
        out.push(s);
        match &s.kind {
            StmtKind::For { body, .. } => walk(body, out),
            StmtKind::If { then, otherwise, .. } => {
                walk(then, out);
                walk(otherwise, out);
            }
            _ => {}
        }
    }
}

pub(crate) fn all_stmts(k: &Kernel) -> Vec<&Stmt> {
    let mut v = Vec::new();
    walk(&k.body, &mut v);
    v
}

const VECTOR_ADD: &str = r#"
pub fn vector_add(a: &Tensor<f32, N>, b: &Tensor<f32, N>, c: &mut Tensor<f32, N>) {
    let bx = grid(cdiv(N, BLOCK));
    let mut x = fragment::<f32, BLOCK>();
    let mut y = fragment::<f32, BLOCK>();
    copy(a.tile([bx * BLOCK]), &mut x);
    copy(b.tile([bx * BLOCK]), &mut y);
    for i in parallel(BLOCK) {
        x[i] = x[i] + y[i];
    }
    copy(&x, c.tile([bx * BLOCK]));
}
"#;

#[test]
fn vector_add_lowers() {
    let k = lower_ok("threads = 256, consts(BLOCK = 1024)", VECTOR_ADD);
    assert_eq!(k.name, "vector_add");
    assert_eq!(k.threads, 256);
    assert_eq!(k.params.len(), 3);
    assert_eq!(k.dims.len(), 1);
    let n = k.dims[0];
    assert_eq!(k.var(n).name, "N");
    assert_eq!(k.var(n).kind, VarKind::Dim);
    // a, b, c share the dynamic dimension N; c is the only writable one.
    for (i, mutable) in [(0, false), (1, false), (2, true)] {
        let buf = k.buffer(BufferId(i));
        assert_eq!(buf.scope, Scope::Global);
        assert_eq!(buf.shape, vec![Extent::Dyn(n)]);
        assert_eq!(buf.mutable, mutable);
    }
    // grid = cdiv(N, 1024) = (N + 1023) / 1024, then 1, 1.
    assert_eq!(
        k.grid[0],
        Expr::binary(BinOp::Div, Expr::binary(BinOp::Add, Expr::var(n), Expr::i32(1023)), Expr::i32(1024))
    );
    for (len, blocks) in [(5000i64, 5i64), (1024, 1), (1025, 2), (1, 1)] {
        assert_eq!(tile_ir::abi::eval_host_int(&k, &k.grid[0], &[len]), Ok(blocks));
    }
    assert_eq!(k.grid[1], Expr::i32(1));
    let x = k.buffer(BufferId(3));
    assert_eq!(
        (x.name.as_str(), x.scope, x.dtype, x.shape.clone()),
        ("x", Scope::Fragment, DType::F32, vec![Extent::Const(1024)])
    );
    assert_eq!(k.body.len(), 4);
    let StmtKind::Copy { src, dst, fill: None } = &k.body[0].kind else { panic!("{:?}", k.body[0]) };
    assert_eq!(src.buf, BufferId(0));
    assert_eq!(dst.buf, BufferId(3));
    assert!(dst.origin.is_empty());
    assert!(matches!(&src.origin[..], [Expr::Binary { op: BinOp::Mul, .. }]));
    let StmtKind::For { kind: LoopKind::Parallel, end, body, var, .. } = &k.body[2].kind else { panic!() };
    assert_eq!(*end, Expr::i32(1024));
    assert_eq!(k.var(*var).kind, VarKind::Loop);
    let StmtKind::Store { buf, index, value } = &body[0].kind else { panic!() };
    assert_eq!(*buf, BufferId(3));
    assert_eq!(index, &vec![Expr::var(*var)]);
    assert!(matches!(value, Expr::Binary { op: BinOp::Add, .. }));
    let StmtKind::Copy { dst, .. } = &k.body[3].kind else { panic!() };
    assert_eq!(dst.buf, BufferId(2));
    // Every statement and buffer carries a span.
    assert!(all_stmts(&k).iter().all(|s| s.span != SpanId::NONE));
    assert!(k.buffers.iter().all(|b| b.span != SpanId::NONE));
    // The kernel survives a JSON round trip (what META.ir holds).
    let json = serde_json::to_string(&k).unwrap();
    let back: Kernel = serde_json::from_str(&json).unwrap();
    assert_eq!(back, k);
}

const SOFTMAX: &str = r#"
/// Row softmax.
pub fn softmax(x: &Tensor<f16, M, N>, y: &mut Tensor<f16, M, N>, scale: f32) {
    let row = grid(cdiv(M, BM));
    let mut t = fragment::<f32, BM, BN>();
    let mut m = fragment::<f32, BM>();
    let mut l = fragment::<f32, BM>();
    let mut o = fragment::<f16, BM, BN>();
    copy(x.tile([row * BM, 0]), &mut t).fill(f32::NEG_INFINITY);
    fill(&mut m, f32::NEG_INFINITY);
    reduce_max(&t, &mut m, 1).keep();
    for (i, j) in parallel((BM, BN)) {
        t[(i, j)] = exp2((t[(i, j)] - m[i]) * scale * 1.4426950408889634);
    }
    reduce_sum(&t, &mut l, 1);
    for (i, j) in parallel((BM, BN)) {
        o[[i, j]] = (t[(i, j)] / l[i]) as f16;
    }
    copy(&o, y.tile([row * BM, 0]));
}
"#;

#[test]
fn softmax_lowers() {
    let k = lower_ok("threads = 128, consts(BM = 4, BN = 256)", SOFTMAX);
    assert_eq!(k.dims.len(), 2);
    assert!(matches!(k.params[2].kind, ParamKind::Scalar(_)));
    let StmtKind::Copy { fill: Some(Expr::Const(Value::F32(f))), .. } = &k.body[0].kind else {
        panic!("{:?}", k.body[0])
    };
    assert_eq!(*f, f32::NEG_INFINITY);
    let StmtKind::Reduce { op: ReduceOp::Max, dim: 1, keep: true, .. } = &k.body[2].kind else {
        panic!("{:?}", k.body[2])
    };
    let StmtKind::Reduce { op: ReduceOp::Sum, keep: false, .. } = &k.body[4].kind else { panic!() };
    // (i, j) in parallel((BM, BN)) is a nest of two parallel loops.
    let StmtKind::For { kind: LoopKind::Parallel, end, body, .. } = &k.body[3].kind else { panic!() };
    assert_eq!(*end, Expr::i32(4));
    let StmtKind::For { kind: LoopKind::Parallel, end, body, .. } = &body[0].kind else { panic!() };
    assert_eq!(*end, Expr::i32(256));
    let StmtKind::Store { value: Expr::Unary { op: UnOp::Exp2, .. }, .. } = &body[0].kind else {
        panic!("{:?}", body[0])
    };
    // The f16 store of an f32 value carries the user's cast.
    let StmtKind::For { body, .. } = &k.body[5].kind else { panic!() };
    let StmtKind::For { body, .. } = &body[0].kind else { panic!() };
    let StmtKind::Store { value: Expr::Cast { to: DType::F16, .. }, .. } = &body[0].kind else { panic!() };
}

#[test]
fn untyped_literals_adopt_the_other_operand_type() {
    let k = lower_ok(
        "threads = 32",
        r#"fn k(a: &mut Tensor<f16, 64>, s: u32) {
            for i in parallel(64) {
                a[i] = a[i] * 2 + 0.5;
            }
            let mut n = s + 1;
            n += 3;
            let e = 1e-5;
            let mx = max(a[0], 0.0);
            let lo = f32::NEG_INFINITY as f16;
            let big = 70000.0 as f16;
            let t = -2.7 as i32;
            let u = 3u32 as i32;
        }"#,
    );
    let StmtKind::For { body, .. } = &k.body[0].kind else { panic!() };
    let StmtKind::Store { value: Expr::Binary { op: BinOp::Add, lhs, rhs }, .. } = &body[0].kind else { panic!() };
    assert_eq!(**rhs, Expr::Const(Value::F16(half::f16::from_f32(0.5))));
    let Expr::Binary { op: BinOp::Mul, rhs: two, .. } = &**lhs else { panic!() };
    assert_eq!(**two, Expr::Const(Value::F16(half::f16::from_f32(2.0))));
    let StmtKind::Let { var, value: Expr::Binary { rhs, .. } } = &k.body[1].kind else { panic!() };
    assert_eq!(k.var(*var).dtype, DType::U32);
    assert_eq!(k.var(*var).kind, VarKind::Mut);
    assert_eq!(**rhs, Expr::Const(Value::U32(1)));
    let StmtKind::Assign { value: Expr::Binary { op: BinOp::Add, rhs, .. }, .. } = &k.body[2].kind else { panic!() };
    assert_eq!(**rhs, Expr::Const(Value::U32(3)));
    let StmtKind::Let { var, value } = &k.body[3].kind else { panic!() };
    assert_eq!((k.var(*var).dtype, value), (DType::F32, &Expr::f32(1e-5)));
    let StmtKind::Let { var, .. } = &k.body[4].kind else { panic!() };
    assert_eq!(k.var(*var).dtype, DType::F16);
    // Casts of constants fold, with Rust's `as` semantics.
    let consts: Vec<&Expr> = k.body[5..]
        .iter()
        .map(|s| match &s.kind {
            StmtKind::Let { value, .. } => value,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(consts[0], &Expr::Const(Value::F16(half::f16::NEG_INFINITY)));
    assert_eq!(consts[1], &Expr::Const(Value::F16(half::f16::INFINITY)));
    assert_eq!(consts[2], &Expr::i32(-2));
    assert_eq!(consts[3], &Expr::i32(3));
}

#[test]
fn constants_fold_and_loops_lower() {
    let k = lower_ok(
        "threads = 64, consts(BK = 32, STAGES = 3)",
        r#"fn k(a: &Tensor<f32, M, K>, out: &mut Tensor<f32, M>) {
            let (bx, by) = grid(cdiv(M, 64), 2);
            let mut acc = local::<f32, { BK * 2 - 60 }>();
            let mut s = shared::<f32, 64, BK>();
            clear(&mut acc);
            for k in pipelined(cdiv(K, BK), STAGES) {
                copy(a.tile([bx * 64, k * BK]), &mut s);
                for kk in 0..=BK - 1 {
                    if kk % 2 == 0 && by > 0 {
                        acc[0] += s[(0, kk)];
                    } else if kk == 1 {
                        acc[1] = max(acc[1], s[[1, kk]]);
                    } else {
                        barrier();
                    }
                }
            }
            let v = if by == 0 { acc[0] } else { -acc[1] };
            atomic_add(&mut out[bx], v);
        }"#,
    );
    assert_eq!(k.buffer(BufferId(2)).shape, vec![Extent::Const(4)]);
    assert_eq!(k.vars.iter().filter(|v| matches!(v.kind, VarKind::BlockIdx(_))).count(), 2);
    assert_eq!(k.grid[1], Expr::i32(2));
    let StmtKind::Fill { value: Expr::Const(Value::F32(z)), .. } = &k.body[0].kind else { panic!() };
    assert_eq!(*z, 0.0);
    let StmtKind::For { kind: LoopKind::Pipelined { stages: 3 }, body, .. } = &k.body[1].kind else { panic!() };
    let StmtKind::For { kind: LoopKind::Serial, end, body, .. } = &body[1].kind else { panic!() };
    // `..=` adds one to the end.
    assert!(matches!(end, Expr::Binary { op: BinOp::Add, .. }));
    let StmtKind::If { cond, then, otherwise } = &body[0].kind else { panic!() };
    assert_eq!(k.expr_type(cond), DType::Bool);
    assert!(matches!(then[0].kind, StmtKind::Store { value: Expr::Binary { op: BinOp::Add, .. }, .. }));
    assert!(matches!(otherwise[0].kind, StmtKind::If { .. }));
    let StmtKind::Let { value: Expr::Select { .. }, .. } = &k.body[2].kind else { panic!() };
    let StmtKind::AtomicAdd { buf: BufferId(1), .. } = &k.body[3].kind else { panic!() };
}

#[test]
fn shape_spellings() {
    // Generic-argument dims are the main form; a tuple or a 1-D slice type
    // holding the whole shape is accepted too.
    let k = lower_ok(
        "threads = 32, consts(BM = 8, BK = 4)",
        r#"fn k(a: &Tensor<f32, (M, K)>, b: &mut Tensor<f32, [N]>, c: &Tensor<i32, 7, K>) {
            let mut s = shared::<f32, (BM, BK)>();
            let mut t = local::<f32, [BM]>();
            let mut u = fragment::<f32, 16, { BM * 2 }>();
        }"#,
    );
    let shapes: Vec<Vec<Extent>> = k.buffers.iter().map(|b| b.shape.clone()).collect();
    let (m, kd, n) = (k.dims[0], k.dims[1], k.dims[2]);
    assert_eq!(
        shapes,
        vec![
            vec![Extent::Dyn(m), Extent::Dyn(kd)],
            vec![Extent::Dyn(n)],
            vec![Extent::Const(7), Extent::Dyn(kd)],
            vec![Extent::Const(8), Extent::Const(4)],
            vec![Extent::Const(8)],
            vec![Extent::Const(16), Extent::Const(16)],
        ]
    );
}

// ------------------------------------------------------------------ errors

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
    lower_err("threads = 32", "fn k<T>(a: &Tensor<T, 64>) { }", &["cannot be generic"]);
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

/// Serializes the tests that set environment variables.
static ENV_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn generated_module() {
    let _env = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("TILE_ARCHS", "");
    std::env::remove_var("TILE_DUMP");
    std::env::remove_var("TILE_PTXAS");
    let out =
        crate::expand::tile_kernel("threads = 256, consts(BLOCK = 1024)".parse().unwrap(), VECTOR_ADD.parse().unwrap())
            .to_string();
    if std::env::var_os("TILE_TEST_SHOW").is_some() {
        eprintln!("{out}");
    }
    assert!(out.starts_with("pub mod vector_add"), "{out}");
    assert!(!out.contains("compile_error"), "{out}");
    for needle in [
        "pub static META : :: tile :: KernelMeta",
        "name : \"vector_add\"",
        "targets : & []",
        "pub fn launch (stream : & :: tile :: Stream , a : & :: tile :: DeviceTensor < f32 > , b : & :: tile :: DeviceTensor < f32 > , c : & mut :: tile :: DeviceTensor < f32 >)",
        ":: tile :: __private :: launch (stream , & self :: META , & mut [:: tile :: __private :: KernelArg :: tensor (a) , :: tile :: __private :: KernelArg :: tensor (b) , :: tile :: __private :: KernelArg :: tensor_mut (c)])",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in {out}");
    }
    // On error: the module with an empty META and the same launch, plus the errors.
    let out = crate::expand::tile_kernel(
        "threads = 256".parse().unwrap(),
        "fn bad(x: &Tensor<bf16, N>, s: f16, q: Vec<u8>) { let y = nope; }".parse().unwrap(),
    )
    .to_string();
    assert!(out.contains("mod bad"), "{out}");
    assert!(out.contains("ir : \"\""), "{out}");
    assert!(out.contains("x : & :: tile :: DeviceTensor < :: tile :: bf16 >"), "{out}");
    assert!(out.contains("KernelArg :: F16 (s)"), "{out}");
    assert!(out.contains("q : impl :: core :: marker :: Sized"), "{out}");
    assert!(out.contains("compile_error"), "{out}");
    // An unknown target is an error.
    std::env::set_var("TILE_ARCHS", "sm_75");
    let out =
        crate::expand::tile_kernel("threads = 32".parse().unwrap(), "fn k(a: &Tensor<f32, 4>) { }".parse().unwrap())
            .to_string();
    assert!(out.contains("unknown target `sm_75`"), "{out}");
    std::env::set_var("TILE_ARCHS", "");
}

#[test]
fn cluster_and_warp_specialize_options() {
    let body = "fn k(a: &Tensor<f32, 64>) { }";
    let k = lower_ok("threads = 128", body);
    assert_eq!((k.cluster, k.warp_specialize), ([1, 1, 1], true));
    let k = lower_ok("threads = 128, cluster = (2, 1, 1), warp_specialize = false", body);
    assert_eq!((k.cluster, k.warp_specialize), ([2, 1, 1], false));
    // Missing extents are 1; a bare integer is the x extent.
    assert_eq!(lower_ok("cluster = (2, 4), threads = 64", body).cluster, [2, 4, 1]);
    assert_eq!(lower_ok("threads = 64, cluster = (4,)", body).cluster, [4, 1, 1]);
    assert_eq!(lower_ok("threads = 64, cluster = 8", body).cluster, [8, 1, 1]);
    assert_eq!(lower_ok("threads = 64, cluster = (1, 2, 4)", body).cluster, [1, 2, 4]);
    assert!(lower_ok("threads = 64, warp_specialize = true", body).warp_specialize);
    // The options survive the JSON the runtime reads.
    let k = lower_ok("threads = 64, cluster = (2, 2, 1), warp_specialize = false", body);
    let back: Kernel = serde_json::from_str(&serde_json::to_string(&k).unwrap()).unwrap();
    assert_eq!((back.cluster, back.warp_specialize), ([2, 2, 1], false));

    lower_err("threads = 64, cluster = (0, 1, 1)", body, &["a cluster extent of 0"]);
    lower_err(
        "threads = 64, cluster = (4, 4, 1)",
        body,
        &["`cluster = (4, 4, 1)` has 16 blocks; the portable limit is 8 blocks per cluster"],
    );
    lower_err("threads = 64, cluster = (2, 2, 2, 1)", body, &["at most 3 extents"]);
    lower_err(
        "threads = 64, cluster = (2, x)",
        body,
        &["a cluster extent must be a positive integer literal; `x` is a name"],
    );
    lower_err("threads = 64, cluster = (2.0, 1)", body, &["a cluster extent must be a positive integer literal"]);
    lower_err("threads = 64, cluster = ()", body, &["empty cluster"]);
    lower_err("threads = 64, cluster = CLUSTER", body, &["expected `cluster = (x, y, z)`"]);
    lower_err("threads = 64, cluster = (2, 1, 1), cluster = (2, 1, 1)", body, &["`cluster` is given twice"]);
    lower_err("threads = 64, cluster = (99999999999, 1, 1)", body, &["not a small positive integer"]);
    lower_err("threads = 64, warp_specialize = 1", body, &["`warp_specialize` takes `true`"]);
    lower_err("threads = 64, warp_specialize = yes", body, &["`warp_specialize` takes `true`"]);
    lower_err(
        "threads = 64, warp_specialize = true, warp_specialize = false",
        body,
        &["`warp_specialize` is given twice"],
    );
    // A constant grid extent the cluster does not divide is a compile
    // error (here the missing y axis, extent 1).
    let k = lower_ok("threads = 64, cluster = (1, 2)", "fn k(a: &Tensor<f32, N>) { let bx = grid(cdiv(N, 64)); }");
    let errs = tile_ir::verify::verify(&k).unwrap_err();
    assert!(
        errs[0].message.contains("the grid's y extent is the constant 1, not a multiple of the cluster's 2"),
        "{errs:?}"
    );
    let k = lower_ok("threads = 64, cluster = (2, 1)", "fn k(a: &Tensor<f32, N>) { let bx = grid(cdiv(N, 64)); }");
    tile_ir::verify::verify(&k).unwrap();
    // Every mistake at once, and the other options still apply.
    let errs = lower_err(
        "threads = 64, cluster = (0, 1), warp_specialize = no, clustr = 2",
        body,
        &["extent of 0", "`warp_specialize` takes", "did you mean `cluster`"],
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

/// The FlashAttention forward pass in the DSL with its products written as
/// loops (the `gemm` form is in `tests_gemm.rs`): the vocabulary lowers.
#[test]
fn flash_attention_lowers() {
    let k = lower_ok(
        "threads = 128, consts(BM = 32, BN = 32, D = 64)",
        r#"
        /// o = softmax(q kᵀ · scale) v, per (batch, head).
        pub fn flash_fwd(
            q: &Tensor<f16, B, H, S, D>,
            key: &Tensor<f16, B, H, SK, D>,
            value: &Tensor<f16, B, H, SK, D>,
            o: &mut Tensor<f16, B, H, S, D>,
            scale: f32,
        ) {
            let (bx, bh) = grid(cdiv(S, BM), B * H);
            let b = bh / H;
            let h = bh % H;
            let mut q_s = shared::<f16, BM, D>();
            let mut k_s = shared::<f16, BN, D>();
            let mut v_s = shared::<f16, BN, D>();
            let mut p_s = shared::<f32, BM, BN>();
            let mut s = fragment::<f32, BM, BN>();
            let mut acc = fragment::<f32, BM, D>();
            let mut m = fragment::<f32, BM>();
            let mut m_prev = fragment::<f32, BM>();
            let mut l = fragment::<f32, BM>();
            let mut r = fragment::<f32, BM>();
            let mut row_sum = fragment::<f32, BM>();
            let mut out = fragment::<f16, BM, D>();
            let log2e = 1.4426950408889634;
            copy(q.tile([b, h, bx * BM, 0]), &mut q_s);
            clear(&mut acc);
            clear(&mut l);
            fill(&mut m, f32::NEG_INFINITY);
            for kb in pipelined(cdiv(SK, BN), 2) {
                copy(key.tile([b, h, kb * BN, 0]), &mut k_s);
                copy(value.tile([b, h, kb * BN, 0]), &mut v_s);
                for (i, j) in parallel((BM, BN)) {
                    let mut dot = 0.0;
                    for d in 0..D {
                        dot += (q_s[(i, d)] as f32) * (k_s[(j, d)] as f32);
                    }
                    s[(i, j)] = if kb * BN + j < SK { dot * scale * log2e } else { f32::NEG_INFINITY };
                }
                copy(&m, &mut m_prev);
                reduce_max(&s, &mut m, 1).keep();
                for i in parallel(BM) {
                    r[i] = exp2(m_prev[i] - m[i]);
                }
                for (i, j) in parallel((BM, BN)) {
                    s[(i, j)] = exp2(s[(i, j)] - m[i]);
                }
                reduce_sum(&s, &mut row_sum, 1);
                for i in parallel(BM) {
                    l[i] = l[i] * r[i] + row_sum[i];
                }
                // A thread owns some (i, d): it reads row i of the
                // probabilities from shared memory, not from the fragment.
                copy(&s, &mut p_s);
                for (i, d) in parallel((BM, D)) {
                    let mut sum = acc[(i, d)] * r[i];
                    for j in 0..BN {
                        sum = fma(p_s[(i, j)], v_s[(j, d)] as f32, sum);
                    }
                    acc[(i, d)] = sum;
                }
            }
            for (i, d) in parallel((BM, D)) {
                out[(i, d)] = (acc[(i, d)] / l[i]) as f16;
            }
            copy(&out, o.tile([b, h, bx * BM, 0]));
        }
        "#,
    );
    assert_eq!(k.dims.iter().map(|d| k.var(*d).name.as_str()).collect::<Vec<_>>(), ["B", "H", "S", "SK"]);
    assert_eq!(k.buffers.iter().filter(|b| b.scope == Scope::Fragment).count(), 8);
    let stmts = all_stmts(&k);
    let count = |f: &dyn Fn(&StmtKind) -> bool| stmts.iter().filter(|s| f(&s.kind)).count();
    assert_eq!(count(&|s| matches!(s, StmtKind::Copy { .. })), 6);
    assert_eq!(count(&|s| matches!(s, StmtKind::Reduce { keep: true, .. })), 1);
    assert_eq!(count(&|s| matches!(s, StmtKind::For { kind: LoopKind::Pipelined { stages: 2 }, .. })), 1);
    assert_eq!(count(&|s| matches!(s, StmtKind::For { kind: LoopKind::Parallel, .. })), 10);
    assert!(stmts.iter().all(|s| s.span != SpanId::NONE));
    // The grid's second axis is B * H, evaluated on the host.
    assert_eq!(tile_ir::abi::eval_host_int(&k, &k.grid[1], &[2, 3, 100, 100]), Ok(6));
    assert_eq!(tile_ir::abi::eval_host_int(&k, &k.grid[0], &[2, 3, 100, 100]), Ok(4));
}

//! What kernels lower to: the IR of the examples, literal typing, folding,
//! loops and shape spellings.

use super::{all_stmts, lower_ok, VECTOR_ADD};
use tile_ir::*;

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
    let StmtKind::Copy { src, dst, fill: None, .. } = &k.body[0].kind else { panic!("{:?}", k.body[0]) };
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

/// An `if` on constants keeps only the branch taken, spliced into the
/// enclosing block (at the top level and inside a parallel nest); one on a
/// runtime value stays an `if`.
#[test]
fn constant_ifs_keep_the_branch_taken() {
    let k = lower_ok(
        "threads = 32, consts(D = 256)",
        r#"fn k(out: &mut Tensor<f32, 32>, n: i32) {
            let bx = grid(1);
            let mut x = fragment::<f32, 32>();
            if D > 128 {
                fill(&mut x, 1.0);
            } else if D > 64 {
                fill(&mut x, 2.0);
            } else {
                fill(&mut x, 3.0);
            }
            for i in parallel(32) {
                if D < 128 {
                    x[i] = x[i] * 2.0;
                } else {
                    x[i] = x[i] * 4.0;
                }
                if n > 0 {
                    x[i] = x[i] + 1.0;
                }
                // `&&`, `||` and `!` on constants fold too; with a runtime
                // operand the `if` stays.
                if D > 64 && !(D < 128) || D == 0 {
                    x[i] = x[i] + 2.0;
                }
                if D > 64 && n > 0 {
                    x[i] = x[i] + 3.0;
                }
            }
            copy(&x, out.tile([bx * 32..]));
        }"#,
    );
    let ifs = all_stmts(&k).into_iter().filter(|s| matches!(s.kind, StmtKind::If { .. })).count();
    assert_eq!(ifs, 2, "only the runtime `if n > 0` and `if D > 64 && n > 0` stay");
    let StmtKind::For { body, .. } = &k.body[1].kind else { panic!("{:?}", k.body[1]) };
    assert!(matches!(body[2].kind, StmtKind::Store { .. }), "{:?}", body[2]);
    let StmtKind::Fill { value: Expr::Const(Value::F32(v)), .. } = &k.body[0].kind else { panic!("{:?}", k.body[0]) };
    assert_eq!(*v, 1.0);
    let StmtKind::For { body, .. } = &k.body[1].kind else { panic!("{:?}", k.body[1]) };
    let StmtKind::Store { value: Expr::Binary { op: BinOp::Mul, rhs, .. }, .. } = &body[0].kind else {
        panic!("{:?}", body[0])
    };
    assert_eq!(**rhs, Expr::Const(Value::F32(4.0)));
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

/// The FlashAttention forward pass in the DSL with its products written as
/// loops (the `gemm` form is in `gemm.rs`): the vocabulary lowers.
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
            copy(q.tile([b, h, bx * BM.., ..]), &mut q_s);
            clear(&mut acc);
            clear(&mut l);
            fill(&mut m, f32::NEG_INFINITY);
            for kb in pipelined(cdiv(SK, BN), 2) {
                copy(key.tile([b, h, kb * BN.., ..]), &mut k_s);
                copy(value.tile([b, h, kb * BN.., ..]), &mut v_s);
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
            copy(&out, o.tile([b, h, bx * BM.., ..]));
        }
        "#,
    );
    assert_eq!(k.dims.iter().map(|d| k.var(*d).name.as_str()).collect::<Vec<_>>(), ["B", "H", "S", "SK"]);
    assert_eq!(k.buffers.iter().filter(|b| b.scope == Scope::Fragment).count(), 8);
    let stmts = all_stmts(&k);
    let count = |f: &dyn Fn(&StmtKind) -> bool| stmts.iter().filter(|s| f(&s.kind)).count();
    assert_eq!(count(&|s| matches!(s, StmtKind::Copy { .. })), 6);
    // `t.tile([b, h, r0.., ..])`: batch and head squeezed, one origin per dim.
    let squeezed = |s: &StmtKind| match s {
        StmtKind::Copy { src, dst, .. } => [src, dst].iter().any(|t| t.squeezed == [0, 1] && t.origin.len() == 4),
        _ => false,
    };
    assert_eq!(count(&squeezed), 4);
    assert_eq!(count(&|s| matches!(s, StmtKind::Reduce { keep: true, .. })), 1);
    assert_eq!(count(&|s| matches!(s, StmtKind::For { kind: LoopKind::Pipelined { stages: 2 }, .. })), 1);
    assert_eq!(count(&|s| matches!(s, StmtKind::For { kind: LoopKind::Parallel, .. })), 10);
    assert!(stmts.iter().all(|s| s.span != SpanId::NONE));
    // The grid's second axis is B * H, evaluated on the host.
    assert_eq!(tile_ir::abi::eval_host_int(&k, &k.grid[1], &[2, 3, 100, 100]), Ok(6));
    assert_eq!(tile_ir::abi::eval_host_int(&k, &k.grid[0], &[2, 3, 100, 100]), Ok(4));
}

#[test]
fn copy_modifiers_in_any_order() {
    use tile_ir::CacheHint;
    for body in ["copy(&a, &mut s).fill(2.0).evict_first();", "copy(&a, &mut s).evict_first().fill(2.0);"] {
        let k =
            lower_ok("threads = 32", &format!("fn k(a: &Tensor<f32, 4>) {{ let mut s = shared::<f32, 4>(); {body} }}"));
        let StmtKind::Copy { fill: Some(_), cache: CacheHint::EvictFirst, .. } = &k.body[0].kind else {
            panic!("{body}: {:?}", k.body[0])
        };
    }
    let k = lower_ok("threads = 32", "fn k(a: &Tensor<f32, 4>) { let mut s = shared::<f32, 4>(); copy(&a, &mut s); }");
    assert!(matches!(&k.body[0].kind, StmtKind::Copy { fill: None, cache: CacheHint::Normal, .. }));
}

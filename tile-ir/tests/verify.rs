//! Verifier tests: valid kernels pass; each mistake is reported once, with
//! its message and the span of the statement (or buffer) concerned.

mod interp_kernels;

use interp_kernels::*;
use tile_ir::verify::verify;
use tile_ir::*;

/// A small valid kernel to break: tensors `a` (read-only) and `c` (mutable)
/// of `[N]`, fragment `f` and shared `s` of `[128]`, fragment `g` of `[4, 8]`,
/// loop variables `i`, `j`, block index `bx`.
struct Base {
    k: Kernel,
    n: VarId,
    a: BufferId,
    c: BufferId,
    f: BufferId,
    s: BufferId,
    g: BufferId,
    i: VarId,
    j: VarId,
    bx: VarId,
}

const SP: SpanId = SpanId(7);

fn base() -> Base {
    let mut k = Kernel::new("base", 128);
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F32, vec![Extent::Dyn(n)], false);
    let c = k.add_tensor_param("c", DType::F32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(128));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let f = local(&mut k, "f", Scope::Fragment, DType::F32, &[128]);
    let s = local(&mut k, "s", Scope::Shared, DType::F32, &[128]);
    let g = local(&mut k, "g", Scope::Fragment, DType::F32, &[4, 8]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let j = k.add_var("j", DType::I32, VarKind::Loop);
    Base { k, n, a, c, f, s, g, i, j, bx }
}

fn sp(kind: StmtKind) -> Stmt {
    Stmt::spanned(kind, SP)
}

/// Asserts that verification fails with exactly one error, at `span`,
/// whose message contains `msg`.
#[track_caller]
fn expect_one(k: &Kernel, span: SpanId, msg: &str) {
    let errs = verify(k).expect_err("the kernel should not verify");
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    assert_eq!(errs[0].span, span, "span of {:?}", errs[0].message);
    assert!(errs[0].message.contains(msg), "message {:?} should contain {msg:?}", errs[0].message);
}

#[test]
fn example_kernels_verify() {
    verify(&vector_add(256)).unwrap();
    verify(&softmax(4, 1024)).unwrap();
    let b = base();
    verify(&b.k).unwrap();
}

#[test]
fn threads_must_be_a_multiple_of_32() {
    let mut b = base();
    b.k.threads = 100;
    expect_one(&b.k, SpanId::NONE, "threads = 100 must be a positive multiple of 32");
}

#[test]
fn dangling_variable_and_buffer() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Store { buf: b.s, index: vec![Expr::i32(0)], value: Expr::Var(VarId(99)) }));
    expect_one(&b.k, SP, "use of %99, which does not exist");
    let mut b = base();
    b.k.body.push(sp(StmtKind::Fill { buf: BufferId(42), value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "fill of @42, which does not exist");
}

#[test]
fn binary_operands_must_agree() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Store {
        buf: b.s,
        index: vec![Expr::i32(0)],
        value: add(Expr::f32(1.0), Expr::i32(1)),
    }));
    expect_one(&b.k, SP, "operands of add have types f32 and i32; insert a cast");
}

#[test]
fn conditions_must_be_bool() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::If { cond: v(b.bx), then: vec![], otherwise: vec![] }));
    expect_one(&b.k, SP, "if condition has type i32, expected bool");
}

#[test]
fn indices_must_be_i32() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Store { buf: b.s, index: vec![Expr::f32(0.0)], value: Expr::f32(1.0) }));
    expect_one(&b.k, SP, "store to `s`: index 0 has type f32, expected i32");
}

#[test]
fn casts_to_bool_and_from_bool_to_float_are_rejected() {
    for (from, to) in
        [(Expr::i32(1), DType::Bool), (Expr::f32(1.0), DType::Bool), (Expr::Const(Value::Bool(true)), DType::F32)]
    {
        let mut b = base();
        let t = b.k.add_var("t", to, VarKind::Let);
        let from_t = b.k.expr_type(&from);
        b.k.body.push(sp(StmtKind::Let { var: t, value: Expr::cast(to, from) }));
        expect_one(&b.k, SP, &format!("cast from {from_t} to {to} is not allowed"));
    }
    // Allowed: bool → int, float ↔ int.
    let mut b = base();
    let t = b.k.add_var("t", DType::U32, VarKind::Let);
    b.k.body.push(sp(StmtKind::Let { var: t, value: Expr::cast(DType::U32, Expr::Const(Value::Bool(true))) }));
    verify(&b.k).unwrap();
}

#[test]
fn math_intrinsics_take_floats() {
    let mut b = base();
    let t = b.k.add_var("t", DType::I32, VarKind::Let);
    b.k.body.push(sp(StmtKind::Let { var: t, value: Expr::unary(UnOp::Exp2, v(b.bx)) }));
    expect_one(&b.k, SP, "exp2 applied to i32");
}

#[test]
fn let_binds_let_vars_of_its_type() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Let { var: b.i, value: Expr::i32(0) }));
    expect_one(&b.k, SP, "let binds `i`, a Loop variable");
    let mut b = base();
    let t = b.k.add_var("t", DType::F32, VarKind::Let);
    b.k.body.push(sp(StmtKind::Let { var: t, value: Expr::i32(0) }));
    expect_one(&b.k, SP, "let `t`: the value has type i32, the variable f32");
}

#[test]
fn assign_needs_a_mut_var() {
    let mut b = base();
    let t = b.k.add_var("t", DType::I32, VarKind::Let);
    b.k.body.push(st(StmtKind::Let { var: t, value: Expr::i32(0) }));
    b.k.body.push(sp(StmtKind::Assign { var: t, value: Expr::i32(1) }));
    expect_one(&b.k, SP, "cannot assign to `t`: it is not a `let mut` variable");
}

#[test]
fn grid_uses_only_dims_params_and_constants() {
    let mut b = base();
    b.k.grid[1] = v(b.bx);
    expect_one(&b.k, SpanId::NONE, "grid extent 1: `bx` is not a dimension or scalar parameter");
    let mut b = base();
    let t = b.k.add_var("t", DType::I32, VarKind::Let);
    b.k.grid[1] = v(t);
    expect_one(&b.k, SpanId::NONE, "grid extent 1: `t` is not a dimension or scalar parameter");
    let mut b = base();
    b.k.grid[2] = Expr::f32(1.0);
    expect_one(&b.k, SpanId::NONE, "grid extent 2 has type f32, expected an integer");
}

#[test]
fn local_shapes_are_constant_and_positive() {
    let mut b = base();
    let bad = b.k.add_buffer(Buffer {
        name: "z".into(),
        scope: Scope::Shared,
        dtype: DType::F32,
        shape: vec![Extent::Const(0)],
        mutable: false,
        span: SpanId(3),
        layout: None,
        view: None,
    });
    let _ = bad;
    expect_one(&b.k, SpanId(3), "shared buffer `z`: dimension 0 is 0, expected a positive constant");
    let mut b = base();
    b.k.add_buffer(Buffer {
        name: "d".into(),
        scope: Scope::Fragment,
        dtype: DType::F32,
        shape: vec![Extent::Dyn(b.n)],
        mutable: false,
        span: SpanId(4),
        layout: None,
        view: None,
    });
    expect_one(&b.k, SpanId(4), "fragment `d`: dimension 0 is `N`; only global tensors have dynamic dimensions");
}

/// Buffers too large for any target are errors at the buffer, naming the
/// limit (the mutation fuzz test found a 64 × 10^6 shared tile compiling for
/// minutes): shared memory over the largest target's, fragments over 256
/// registers per thread whatever their layout.
#[test]
fn buffers_must_fit_any_target() {
    let add = |k: &mut Kernel, name: &str, scope: Scope, dtype: DType, shape: &[i64]| {
        k.add_buffer(Buffer {
            name: name.into(),
            scope,
            dtype,
            shape: shape.iter().map(|&c| Extent::Const(c)).collect(),
            mutable: true,
            span: SpanId(5),
            layout: None,
            view: None,
        })
    };
    let mut b = base();
    add(&mut b.k, "a_s", Scope::Shared, DType::F16, &[64, 1_000_000]);
    let limit = Target::ALL.iter().map(|t| t.info().shared_limit).max().unwrap();
    expect_one(
        &b.k,
        SpanId(5),
        &format!("shared buffer `a_s` ([64, 1000000] f16) takes 128000000 bytes, more than the {limit} bytes of shared memory of any target"),
    );
    // Exactly the limit is not this error.
    let mut b = base();
    add(&mut b.k, "fits", Scope::Shared, DType::F32, &[limit as i64 / 4]);
    assert!(verify(&b.k).is_ok());
    let mut b = base();
    add(&mut b.k, "t", Scope::Fragment, DType::F32, &[32, 2147483647]);
    expect_one(&b.k, SpanId(5), "fragment `t` ([32, 2147483647] f32) has 68719476704 elements: at least 536870912 registers per thread with 128 threads (at most 256)");
    // 256 per thread is fine for the verifier; 256 × 128 + 1 is not.
    let mut b = base();
    add(&mut b.k, "ok", Scope::Fragment, DType::F32, &[256 * 128]);
    assert!(verify(&b.k).is_ok());
    let mut b = base();
    add(&mut b.k, "t", Scope::Fragment, DType::F32, &[256 * 128 + 1]);
    expect_one(&b.k, SpanId(5), "at least 257 registers per thread with 128 threads (at most 256)");
    // Products past i64 saturate instead of overflowing.
    let mut b = base();
    add(&mut b.k, "h", Scope::Shared, DType::F32, &[2147483647, 2147483647, 2147483647]);
    expect_one(&b.k, SpanId(5), "shared buffer `h`");
}

#[test]
fn tensor_dims_must_be_listed_dims() {
    let mut b = base();
    let p = b.k.add_scalar_param("p", DType::I32);
    let t = b.k.add_tensor_param("t", DType::F32, vec![Extent::Dyn(p)], false);
    b.k.buffers[t.0 as usize].span = SpanId(5);
    expect_one(&b.k, SpanId(5), "tensor `t`: dimension 0 is `p`, which is not a dynamic dimension listed in dims");
}

#[test]
fn index_arity_is_the_rank() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Store { buf: b.s, index: vec![Expr::i32(0), Expr::i32(0)], value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "store to `s` with 2 indices, but it has rank 1");
}

#[test]
fn copy_between_two_globals() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.a, vec![Expr::i32(0)]),
        dst: tile(b.c, vec![Expr::i32(0)]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "copy from `a` to `c`: both sides are global tensors");
}

#[test]
fn copy_origin_arity_is_the_tensor_rank() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.a, vec![Expr::i32(0), Expr::i32(0)]),
        dst: tile(b.f, vec![]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "the tile of `a` has 2 origin coordinates, but the tensor has rank 1");
}

#[test]
fn copy_local_rank_at_most_tensor_rank() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.a, vec![Expr::i32(0)]),
        dst: tile(b.g, vec![]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "copy between `g` (rank 2) and a tile of `a` (rank 1)");
}

#[test]
fn copy_between_buffers_of_different_shapes() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.s, vec![]),
        dst: tile(b.g, vec![]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "copy from `s` [128] to `g` [4, 8]: the shapes differ");
}

#[test]
fn copy_fill_has_the_destination_type() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.a, vec![Expr::i32(0)]),
        dst: tile(b.f, vec![]),
        fill: Some(Expr::i32(0)),
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "copy into `f`: the fill value has type i32, the destination's elements f32");
}

#[test]
fn copy_into_a_read_only_tensor() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.f, vec![]),
        dst: tile(b.a, vec![Expr::i32(0)]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "copy into `a`, a read-only tensor");
}

#[test]
fn reduce_checks() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Reduce { op: ReduceOp::Sum, src: b.s, dst: b.f, dim: 0, keep: false }));
    let errs = verify(&b.k).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.span == SP && e.message.contains("reduce_sum: `s` is a shared buffer, expected a fragment")),
        "{errs:#?}"
    );

    let mut b = base();
    b.k.body.push(sp(StmtKind::Reduce { op: ReduceOp::Max, src: b.g, dst: b.f, dim: 2, keep: false }));
    expect_one(&b.k, SP, "reduce_max of `g` along dim 2, but it has rank 2");

    let mut b = base();
    let d = local(&mut b.k, "d", Scope::Fragment, DType::F32, &[8]);
    b.k.body.push(sp(StmtKind::Reduce { op: ReduceOp::Max, src: b.g, dst: d, dim: 1, keep: true }));
    expect_one(&b.k, SP, "reduce_max of `g` [4, 8] along dim 1 gives shape [4], but `d` has shape [8]");

    let mut b = base();
    let d = local(&mut b.k, "d", Scope::Fragment, DType::F16, &[4]);
    b.k.body.push(sp(StmtKind::Reduce { op: ReduceOp::Min, src: b.g, dst: d, dim: 1, keep: false }));
    expect_one(&b.k, SP, "reduce_min from `g` (f32) into `d` (f16)");

    // Allowed: rank 1 into [1] or [], f16 into f32.
    let mut b = base();
    let one = local(&mut b.k, "one", Scope::Fragment, DType::F32, &[1]);
    let h = local(&mut b.k, "h", Scope::Fragment, DType::F16, &[4, 8]);
    let d = local(&mut b.k, "d", Scope::Fragment, DType::F32, &[8]);
    b.k.body.push(sp(StmtKind::Reduce { op: ReduceOp::Sum, src: b.f, dst: one, dim: 0, keep: false }));
    b.k.body.push(sp(StmtKind::Reduce { op: ReduceOp::Sum, src: h, dst: d, dim: 0, keep: true }));
    verify(&b.k).unwrap();
}

#[test]
fn fill_targets_non_global_buffers() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Fill { buf: b.c, value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "fill of `c`, a global tensor");
    let mut b = base();
    b.k.body.push(sp(StmtKind::Fill { buf: b.s, value: Expr::i32(0) }));
    expect_one(&b.k, SP, "fill of `s`: the value has type i32, the buffer's elements f32");
}

#[test]
fn store_to_a_read_only_tensor() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Store { buf: b.a, index: vec![Expr::i32(0)], value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "store to `a`, a read-only tensor; declare it `&mut Tensor`");
}

#[test]
fn atomic_add_checks() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::AtomicAdd { buf: b.a, index: vec![Expr::i32(0)], value: Expr::f32(1.0) }));
    expect_one(&b.k, SP, "atomic_add on `a`, a read-only tensor");
    let mut b = base();
    b.k.body.push(sp(StmtKind::AtomicAdd { buf: b.s, index: vec![Expr::i32(0)], value: Expr::f32(1.0) }));
    expect_one(&b.k, SP, "atomic_add on `s`, a shared buffer; atomics apply to global tensors only");
    let mut b = base();
    b.k.body.push(sp(StmtKind::AtomicAdd { buf: b.c, index: vec![Expr::i32(0)], value: Expr::i32(1) }));
    expect_one(&b.k, SP, "atomic_add on `c`: the value has type i32, the tensor's elements f32");
}

#[test]
fn fragments_only_inside_parallel_loops() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Store { buf: b.f, index: vec![Expr::i32(0)], value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "store to fragment `f` outside a parallel loop");
    // In a serial loop: still outside.
    let mut b = base();
    b.k.body.push(sfor(
        b.i,
        Expr::i32(0),
        Expr::i32(128),
        vec![sp(StmtKind::Store { buf: b.f, index: vec![v(b.i)], value: Expr::f32(0.0) })],
    ));
    expect_one(&b.k, SP, "store to fragment `f` outside a parallel loop");
}

#[test]
fn fragments_indexed_by_parallel_loop_vars() {
    let mut b = base();
    b.k.body.push(pfor(
        b.i,
        127,
        vec![sp(StmtKind::Store { buf: b.f, index: vec![add(v(b.i), Expr::i32(1))], value: Expr::f32(0.0) })],
    ));
    expect_one(&b.k, SP, "store to fragment `f`: index 0 must be a variable of the enclosing parallel loops");
    // A load of another fragment, indexed by a serial loop's variable.
    let mut b = base();
    let t = b.k.add_var("t", DType::F32, VarKind::Let);
    b.k.body.push(sfor(
        b.j,
        Expr::i32(0),
        Expr::i32(4),
        vec![pfor(b.i, 8, vec![sp(StmtKind::Let { var: t, value: Expr::load(b.g, vec![v(b.j), v(b.i)]) })])],
    ));
    expect_one(&b.k, SP, "load from fragment `g`: index 0 must be a variable of the enclosing parallel loops");
}

#[test]
fn parallel_loops_have_constant_bounds() {
    let mut b = base();
    b.k.body.push(Stmt::spanned(
        StmtKind::For { var: b.i, start: Expr::i32(0), end: v(b.n), kind: LoopKind::Parallel, body: vec![] },
        SP,
    ));
    expect_one(&b.k, SP, "parallel loop `i`: the end bound must be an i32 constant");
}

#[test]
fn no_tile_ops_inside_parallel_loops() {
    let mut b = base();
    b.k.body.push(pfor(
        b.i,
        128,
        vec![sp(StmtKind::Copy {
            src: tile(b.a, vec![Expr::i32(0)]),
            dst: tile(b.s, vec![]),
            fill: None,
            cache: CacheHint::Normal,
        })],
    ));
    expect_one(&b.k, SP, "copy inside the parallel loop over `i`: tile operations are collective");
    let mut b = base();
    b.k.body.push(pfor(b.i, 128, vec![sp(StmtKind::Barrier)]));
    expect_one(&b.k, SP, "barrier inside the parallel loop over `i`");
}

#[test]
fn loop_vars_are_loop_kind_i32() {
    let mut b = base();
    let x = b.k.add_var("x", DType::I32, VarKind::Let);
    b.k.body.push(Stmt::spanned(
        StmtKind::For { var: x, start: Expr::i32(0), end: Expr::i32(4), kind: LoopKind::Serial, body: vec![] },
        SP,
    ));
    expect_one(&b.k, SP, "loop variable `x` must be of kind Loop, not Let");
    let mut b = base();
    let x = b.k.add_var("x", DType::F32, VarKind::Loop);
    b.k.body.push(Stmt::spanned(
        StmtKind::For { var: x, start: Expr::i32(0), end: Expr::i32(4), kind: LoopKind::Serial, body: vec![] },
        SP,
    ));
    expect_one(&b.k, SP, "loop variable `x` has type f32, expected i32");
}

#[test]
fn variables_are_bound_before_use_and_scoped() {
    let mut b = base();
    let t = b.k.add_var("t", DType::I32, VarKind::Let);
    b.k.body.push(sp(StmtKind::Store { buf: b.c, index: vec![v(t)], value: Expr::f32(0.0) }));
    b.k.body.push(st(StmtKind::Let { var: t, value: Expr::i32(0) }));
    expect_one(&b.k, SP, "use of `t` (%");
    // Bound inside an `if`, used after it.
    let mut b = base();
    let t = b.k.add_var("t", DType::I32, VarKind::Let);
    b.k.body.push(st(StmtKind::If {
        cond: Expr::Const(Value::Bool(true)),
        then: vec![st(StmtKind::Let { var: t, value: Expr::i32(0) })],
        otherwise: vec![],
    }));
    b.k.body.push(sp(StmtKind::Store { buf: b.c, index: vec![v(t)], value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "before it is bound (or outside its scope)");
    // A loop variable after its loop.
    let mut b = base();
    b.k.body.push(sfor(b.i, Expr::i32(0), Expr::i32(2), vec![]));
    b.k.body.push(sp(StmtKind::Store { buf: b.c, index: vec![v(b.i)], value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "use of `i`");
}

#[test]
fn variables_are_bound_once() {
    let mut b = base();
    let t = b.k.add_var("t", DType::I32, VarKind::Let);
    b.k.body.push(st(StmtKind::Let { var: t, value: Expr::i32(0) }));
    b.k.body.push(sp(StmtKind::Let { var: t, value: Expr::i32(1) }));
    expect_one(&b.k, SP, "variable `t` (%");
}

#[test]
fn no_assignment_to_outer_vars_in_parallel_loops() {
    let mut b = base();
    let acc = b.k.add_var("acc", DType::F32, VarKind::Mut);
    b.k.body.push(st(StmtKind::Let { var: acc, value: Expr::f32(0.0) }));
    b.k.body.push(pfor(
        b.i,
        128,
        vec![sp(StmtKind::Assign { var: acc, value: add(v(acc), Expr::load(b.f, vec![v(b.i)])) })],
    ));
    expect_one(&b.k, SP, "assignment to `acc` inside a parallel loop, but it is declared outside it");
}

#[test]
fn every_problem_is_reported() {
    let mut b = base();
    b.k.threads = 0;
    b.k.body.push(Stmt::spanned(StmtKind::Store { buf: b.a, index: vec![], value: Expr::i32(0) }, SpanId(1)));
    b.k.body.push(Stmt::spanned(StmtKind::Barrier, SpanId(2)));
    b.k.body.push(Stmt::spanned(StmtKind::Fill { buf: b.f, value: Expr::f32(0.0) }, SpanId(3)));
    b.k.body.push(pfor(b.i, 8, vec![Stmt::spanned(StmtKind::Barrier, SpanId(4))]));
    let errs = verify(&b.k).unwrap_err();
    let spans: Vec<u32> = errs.iter().map(|e| e.span.0).collect();
    // threads; store: arity, read-only, value type; the barrier in the loop.
    assert_eq!(spans, vec![u32::MAX, 1, 1, 1, 4], "{errs:#?}");
}

#[test]
fn dims_must_be_bound_by_a_tensor() {
    let mut b = base();
    b.k.add_dim("K");
    expect_one(&b.k, SpanId::NONE, "dimension `K` appears in no tensor parameter's shape");
}

#[test]
fn copy_fill_only_with_a_global_source() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(b.f, vec![]),
        dst: tile(b.c, vec![Expr::i32(0)]),
        fill: Some(Expr::f32(0.0)),
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "copy from `f` with a fill value: fill replaces masked reads of a global tensor");
}

#[test]
fn binding_a_block_index_is_reported_once() {
    let mut b = base();
    b.k.body.push(sp(StmtKind::Let { var: b.bx, value: Expr::i32(0) }));
    b.k.body.push(st(StmtKind::Store { buf: b.c, index: vec![v(b.bx)], value: Expr::f32(0.0) }));
    expect_one(&b.k, SP, "let binds `bx`, a BlockIdx(0) variable");
}

/// A kernel with shared `[M, K]` A (`f16`), shared `[K, N]` B and an f32
/// fragment `[M, N]` accumulator, for breaking gemm rules one at a time.
fn gemm_base(a_shape: &[i64], b_shape: &[i64], c_shape: &[i64]) -> (Kernel, BufferId, BufferId, BufferId) {
    let mut k = Kernel::new("g", 128);
    let t = k.add_tensor_param("t", DType::F32, vec![Extent::Const(4)], true);
    let _ = t;
    let a = local(&mut k, "a_s", Scope::Shared, DType::F16, a_shape);
    let b = local(&mut k, "b_s", Scope::Shared, DType::F16, b_shape);
    let c = local(&mut k, "acc", Scope::Fragment, DType::F32, c_shape);
    (k, a, b, c)
}

fn gemm_stmt(a: BufferId, b: BufferId, c: BufferId, trans_a: bool, trans_b: bool) -> Stmt {
    sp(StmtKind::Gemm { a, b, c, trans_a, trans_b, clear: false, policy: WarpPolicy::FullCol })
}

#[test]
fn gemm_shapes_follow_the_transposes() {
    // [M, K] = [40, 24], [K, N] = [24, 8]: every transposed storage verifies.
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        let a_shape: &[i64] = if ta { &[24, 40] } else { &[40, 24] };
        let b_shape: &[i64] = if tb { &[8, 24] } else { &[24, 8] };
        let (mut k, a, b, c) = gemm_base(a_shape, b_shape, &[40, 8]);
        k.body = vec![gemm_stmt(a, b, c, ta, tb)];
        verify(&k).unwrap_or_else(|e| panic!("trans_a={ta} trans_b={tb}: {e:#?}"));
        // The same storage read the other way round is a mismatch.
        k.body = vec![gemm_stmt(a, b, c, !ta, tb)];
        let errs = verify(&k).expect_err("a transposed A must not verify");
        assert!(errs[0].message.contains("gemm shape mismatch"), "{errs:#?}");
    }
}

#[test]
fn gemm_shape_mismatch_names_the_extents() {
    let (mut k, a, b, c) = gemm_base(&[40, 32], &[48, 8], &[40, 8]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    expect_one(&k, SP, "K disagrees (32 from A, 48 from B)");
    let (mut k, a, b, c) = gemm_base(&[40, 32], &[32, 8], &[16, 9]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    expect_one(&k, SP, "`a_s` [40, 32] is M×K = 40×32, `b_s` [32, 8] is K×N = 32×8, `acc` [16, 9] is M×N = 16×9: M disagrees (40 from A, 16 from the accumulator); N disagrees (8 from B, 9 from the accumulator)");
    let (mut k, a, b, c) = gemm_base(&[40, 32], &[8, 31], &[40, 8]);
    k.body = vec![gemm_stmt(a, b, c, false, true)];
    expect_one(&k, SP, "`b_s.t()` [8, 31] is K×N = 31×8");
}

#[test]
fn gemm_shape_mismatch_names_the_transpose_that_fits() {
    // A stored [K, M] = [24, 40]: read transposed, it fits.
    let (mut k, a, b, c) = gemm_base(&[24, 40], &[24, 8], &[40, 8]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    expect_one(&k, SP, "; `gemm(&a_s.t(), &b_s, ..)` would fit");
    // Both stored transposed, both read as stored: the hint flips both.
    let (mut k, a, b, c) = gemm_base(&[24, 40], &[8, 24], &[40, 8]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    expect_one(&k, SP, "; `gemm(&a_s.t(), &b_s.t(), ..)` would fit");
    // No reading fits: no hint.
    let (mut k, a, b, c) = gemm_base(&[40, 32], &[48, 8], &[40, 8]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    let errs = verify(&k).expect_err("K disagrees");
    assert!(!errs[0].message.contains("would fit"), "{errs:#?}");
}

#[test]
fn gemm_operand_scopes_and_types() {
    // A may be a fragment; B may not.
    let (mut k, a, b, c) = gemm_base(&[16, 16], &[16, 16], &[16, 16]);
    k.buffers[a.0 as usize].scope = Scope::Fragment;
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    verify(&k).unwrap();
    k.buffers[b.0 as usize].scope = Scope::Fragment;
    expect_one(&k, SP, "operand B `b_s` is a fragment, expected a shared buffer");
    k.buffers[b.0 as usize].scope = Scope::Shared;
    k.buffers[a.0 as usize].scope = Scope::Local;
    expect_one(&k, SP, "operand A `a_s` is a local buffer, expected a shared buffer or a fragment");
    k.buffers[a.0 as usize].scope = Scope::Shared;
    k.buffers[c.0 as usize].scope = Scope::Shared;
    expect_one(&k, SP, "the accumulator `acc` is a shared buffer, expected a fragment");
    k.buffers[c.0 as usize].scope = Scope::Fragment;
    k.buffers[c.0 as usize].dtype = DType::F16;
    expect_one(&k, SP, "the accumulator `acc` holds f16, expected f32");
    k.buffers[c.0 as usize].dtype = DType::F32;
    k.buffers[b.0 as usize].dtype = DType::BF16;
    expect_one(&k, SP, "operands `a_s` (f16) and `b_s` (bf16) hold different types");
    k.buffers[b.0 as usize].dtype = DType::BF16;
    k.buffers[a.0 as usize].dtype = DType::BF16;
    verify(&k).unwrap();
    k.buffers[a.0 as usize].dtype = DType::F32;
    expect_one(&k, SP, "operand `a_s` holds f32; operands hold f16 or bf16");
    // A global operand (a tensor) is rejected too.
    let (mut k, _a, b, c) = gemm_base(&[16, 16], &[16, 16], &[16, 16]);
    k.body = vec![gemm_stmt(BufferId(0), b, c, false, false)];
    let errs = verify(&k).expect_err("a tensor operand");
    assert!(errs.iter().any(|e| e.message.contains("operand A `t` is a global tensor")), "{errs:#?}");
}

#[test]
fn gemm_ranks_and_handles() {
    let (mut k, a, b, c) = gemm_base(&[16, 16, 1], &[16, 16], &[16, 16]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    expect_one(&k, SP, "`a_s` has rank 3, expected a matrix (rank 2)");
    k.body = vec![gemm_stmt(a, BufferId(42), c, false, false)];
    expect_one(&k, SP, "no such buffer");
}

#[test]
fn gemm_is_not_allowed_in_a_parallel_loop() {
    let (mut k, a, b, c) = gemm_base(&[16, 16], &[16, 16], &[16, 16]);
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    k.body = vec![pfor(i, 4, vec![gemm_stmt(a, b, c, false, false)])];
    expect_one(&k, SP, "gemm inside the parallel loop over `i`");
}

#[test]
fn gemm_errors_are_all_collected() {
    let (mut k, a, b, c) = gemm_base(&[16, 16], &[16, 16], &[16, 8]);
    k.buffers[c.0 as usize].dtype = DType::F16;
    k.buffers[b.0 as usize].scope = Scope::Fragment;
    k.body = vec![
        gemm_stmt(a, b, c, false, false),
        Stmt::spanned(StmtKind::Barrier, SpanId(9)),
        gemm_stmt(a, b, c, true, true),
    ];
    let errs = verify(&k).expect_err("three mistakes per gemm");
    assert_eq!(errs.len(), 6, "{errs:#?}");
    assert!(errs.iter().all(|e| e.span == SP));
}

#[test]
fn cluster_extents_are_positive_and_portable() {
    let (mut k, a, b, c) = gemm_base(&[16, 16], &[16, 16], &[16, 16]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    k.grid = [Expr::i32(8), Expr::i32(8), Expr::i32(8)];
    for ok in [[1, 1, 1], [2, 1, 1], [1, 2, 4], [8, 1, 1], [2, 2, 2]] {
        k.cluster = ok;
        verify(&k).unwrap_or_else(|e| panic!("{ok:?}: {e:?}"));
    }
    k.cluster = [2, 0, 1];
    expect_one(&k, SpanId::NONE, "cluster [2, 0, 1] has an extent of 0");
    k.cluster = [4, 4, 1];
    expect_one(&k, SpanId::NONE, "cluster [4, 4, 1] has 16 blocks; the portable limit is 8 blocks per cluster");
    // No overflow on absurd extents.
    k.cluster = [u32::MAX, u32::MAX, u32::MAX];
    expect_one(&k, SpanId::NONE, "the portable limit is 8");
    k.cluster = [1, 1, 1];
    k.warp_specialize = false;
    verify(&k).unwrap();
    // Constant grid extents must be multiples of the cluster.
    k.grid = [Expr::i32(6), Expr::i32(1), Expr::i32(1)];
    k.cluster = [3, 1, 1];
    verify(&k).unwrap();
    k.cluster = [2, 2, 1];
    expect_one(&k, SpanId::NONE, "the grid's y extent is the constant 1, not a multiple of the cluster's 2");
    k.cluster = [4, 1, 1];
    expect_one(&k, SpanId::NONE, "the grid's x extent is the constant 6, not a multiple of the cluster's 4");
}

#[test]
fn rasterize_panel_is_positive() {
    let (mut k, a, b, c) = gemm_base(&[16, 16], &[16, 16], &[16, 16]);
    k.body = vec![gemm_stmt(a, b, c, false, false)];
    k.rasterize = Some(3);
    verify(&k).unwrap();
    k.rasterize = Some(0);
    expect_one(&k, SpanId::NONE, "use_swizzle: the panel width is 0");
}

/// A 2-D read-only tensor `x` of `[N, N]` added to [`base`].
fn with_matrix(b: &mut Base) -> BufferId {
    b.k.add_tensor_param("x", DType::F32, vec![Extent::Dyn(b.n), Extent::Dyn(b.n)], false)
}

fn squeezed_tile(buf: BufferId, origin: Vec<Expr>, squeezed: Vec<usize>) -> TileRef {
    TileRef { buf, origin, squeezed }
}

#[test]
fn copy_tile_with_squeezed_dims_verifies() {
    let mut b = base();
    let x = with_matrix(&mut b);
    // A column `[128]` of `x` (squeezed innermost) and a row (squeezed leading).
    for squeezed in [vec![1], vec![0]] {
        b.k.body.push(sp(StmtKind::Copy {
            src: squeezed_tile(x, vec![Expr::i32(0), v(b.bx)], squeezed),
            dst: tile(b.f, vec![]),
            fill: None,
            cache: CacheHint::Normal,
        }));
    }
    verify(&b.k).unwrap();
}

#[test]
fn copy_tile_rank_differs_without_ranges() {
    let mut b = base();
    let x = with_matrix(&mut b);
    b.k.body.push(sp(StmtKind::Copy {
        src: tile(x, vec![Expr::i32(0), v(b.bx)]),
        dst: tile(b.f, vec![]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(
        &b.k,
        SP,
        "the tile of `x` has 2 coordinates and `f` has rank 1: say which dims the tile spans (`e..` spans a dim from `e`, a plain index is squeezed), e.g. `x.tile([b, s0..])`",
    );
}

#[test]
fn copy_tile_spanned_dims_are_the_buffer_rank() {
    let mut b = base();
    let x = with_matrix(&mut b);
    b.k.body.push(sp(StmtKind::Copy {
        src: squeezed_tile(x, vec![Expr::i32(0), v(b.bx)], vec![0]),
        dst: tile(b.g, vec![]),
        fill: None,
        cache: CacheHint::Normal,
    }));
    expect_one(&b.k, SP, "the tile of `x` spans 1 dim and `g` has rank 2: give one range entry");
}

#[test]
fn copy_tile_squeezed_dims_in_range_and_increasing() {
    for squeezed in [vec![2], vec![1, 0], vec![0, 0]] {
        let mut b = base();
        let x = with_matrix(&mut b);
        b.k.body.push(sp(StmtKind::Copy {
            src: squeezed_tile(x, vec![Expr::i32(0), v(b.bx)], squeezed),
            dst: tile(b.f, vec![]),
            fill: None,
            cache: CacheHint::Normal,
        }));
        expect_one(&b.k, SP, "of the tile of `x` must be increasing and below its 2 coordinates");
    }
}

/// A view of `of` at `origin` with extents `shape`, at span `SpanId(9)`.
fn view_of(k: &mut Kernel, of: BufferId, origin: &[i64], shape: &[i64], scope: Scope) -> BufferId {
    let dtype = k.buffer(of).dtype;
    k.add_buffer(Buffer {
        span: SpanId(9),
        view: Some(View { of, origin: origin.to_vec() }),
        ..Buffer::new("v", scope, dtype, shape.iter().map(|&e| Extent::Const(e)).collect())
    })
}

/// Sub-views of shared buffers: in bounds, of the parent's rank and element
/// type, of a shared buffer that is not itself a view, without a layout of
/// their own; each mistake at the view.
#[test]
fn views_are_checked_against_their_buffer() {
    let mut b = base();
    let w = local(&mut b.k, "w", Scope::Shared, DType::F16, &[64, 576]);
    view_of(&mut b.k, w, &[0, 512], &[64, 64], Scope::Shared);
    view_of(&mut b.k, w, &[0, 0], &[64, 512], Scope::Shared);
    verify(&b.k).unwrap();
    let cases: Vec<(Vec<i64>, Vec<i64>, &str)> = vec![
        (vec![0, 520], vec![64, 64], "view `v` of `w` is out of bounds: dimension 1 takes 520..584 but `w` has 576"),
        (vec![1, 0], vec![64, 64], "dimension 0 takes 1..65 but `w` has 64"),
        (vec![0, -1], vec![64, 1], "dimension 1 takes -1..0"),
        (vec![0], vec![64, 64], "has 1 origin coordinates and 2 extents, but `w` has 2 dimensions"),
        (vec![0, 0, 0], vec![1, 64, 64], "has 3 origin coordinates and 3 extents, but `w` has 2 dimensions"),
    ];
    for (origin, shape, msg) in cases {
        let mut b = base();
        let w = local(&mut b.k, "w", Scope::Shared, DType::F16, &[64, 576]);
        view_of(&mut b.k, w, &origin, &shape, Scope::Shared);
        expect_one(&b.k, SpanId(9), msg);
    }
    // Of a fragment, as a fragment, of a view, of another element type, annotated.
    let mut b = base();
    let f = b.f;
    view_of(&mut b.k, f, &[0], &[64], Scope::Shared);
    expect_one(&b.k, SpanId(9), "`v` is a view of `f`, a fragment; only shared buffers have views");
    let mut b = base();
    let s = b.s;
    view_of(&mut b.k, s, &[0], &[64], Scope::Fragment);
    expect_one(&b.k, SpanId(9), "`v` is a fragment declared as a view; only shared buffers have views");
    let mut b = base();
    let s = b.s;
    let v = view_of(&mut b.k, s, &[0], &[64], Scope::Shared);
    b.k.add_buffer(Buffer {
        span: SpanId(10),
        view: Some(View { of: v, origin: vec![0] }),
        ..Buffer::new("vv", Scope::Shared, DType::F32, vec![Extent::Const(8)])
    });
    expect_one(&b.k, SpanId(10), "`vv` is a view of `v`, itself a view");
    let mut b = base();
    let s = b.s;
    let v = view_of(&mut b.k, s, &[0], &[64], Scope::Shared);
    b.k.buffers[v.0 as usize].dtype = DType::F16;
    expect_one(&b.k, SpanId(9), "view `v` is f16 but `s` holds f32");
    let mut b = base();
    let s = b.s;
    let v = view_of(&mut b.k, s, &[0], &[64], Scope::Shared);
    b.k.buffers[v.0 as usize].layout = Some(SharedLayoutSpec::RowMajor);
    expect_one(&b.k, SpanId(9), "view `v` has its own `annotate_layout`");
}

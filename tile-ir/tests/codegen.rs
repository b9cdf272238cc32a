//! Code generation tests: kernels built by hand, compiled for sm_80 and
//! sm_90a, assembled with ptxas (`TILE_PTXAS`, else `ptxas` on PATH; skipped
//! when neither exists unless `CI` is set), and checked for PTX structure.

use tile_ir::*;

fn ptxas() -> Option<String> {
    if let Ok(p) = std::env::var("TILE_PTXAS") {
        if !p.is_empty() {
            return Some(p);
        }
    }
    if std::process::Command::new("ptxas").arg("--version").output().is_ok() {
        return Some("ptxas".into());
    }
    if std::env::var("CI").is_ok() {
        panic!("ptxas not found (set TILE_PTXAS) and CI is set");
    }
    None
}

/// Assembles `ptx` for `arch`; returns ptxas's `-v` report.
fn assemble(name: &str, ptx: &str, arch: &str) -> Option<String> {
    let Some(bin) = ptxas() else {
        eprintln!("skipping ptxas check of {name} ({arch}): no ptxas (set TILE_PTXAS)");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("tile-codegen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.{arch}.ptx"));
    std::fs::write(&src, ptx).unwrap();
    let out = dir.join(format!("{name}.{arch}.cubin"));
    let res = std::process::Command::new(&bin)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run ptxas");
    let report = format!("{}{}", String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
    assert!(res.status.success(), "ptxas failed on {name} ({arch}):\n{report}\n--- PTX ---\n{}", numbered(ptx));
    Some(report)
}

fn numbered(s: &str) -> String {
    s.lines().enumerate().map(|(i, l)| format!("{:4} {l}\n", i + 1)).collect()
}

struct Built {
    sm80: Compiled,
    sm90: Compiled,
    reports: Vec<String>,
}

fn build(k: &Kernel) -> Built {
    let sm80 = compile(k, Target::Sm80).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    let sm90 = compile(k, Target::Sm90a).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    let mut reports = vec![];
    for (c, arch) in [(&sm80, "sm_80"), (&sm90, "sm_90a")] {
        assert!(c.ptx.contains(&format!(".target {arch}")));
        assert!(c.ptx.contains(".version 8.0"));
        assert!(c.ptx.contains(".address_size 64"));
        assert!(c.ptx.contains(&format!(".visible .entry {}(", k.name)));
        assert!(c.ptx.contains(&format!(".maxntid {}, 1, 1", k.threads)));
        if let Some(r) = assemble(&k.name, &c.ptx, arch) {
            reports.push(r);
        }
    }
    Built { sm80, sm90, reports }
}

fn no_spills(b: &Built) {
    for r in &b.reports {
        assert!(r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"), "spills:\n{r}");
    }
}

fn frag(k: &mut Kernel, name: &str, dt: DType, shape: &[i64]) -> BufferId {
    buffer(k, name, Scope::Fragment, dt, shape)
}
fn buffer(k: &mut Kernel, name: &str, scope: Scope, dt: DType, shape: &[i64]) -> BufferId {
    k.add_buffer(Buffer {
        name: name.into(),
        scope,
        dtype: dt,
        shape: shape.iter().map(|&c| Extent::Const(c)).collect(),
        mutable: true,
        span: SpanId::NONE,
    })
}
fn s(kind: StmtKind) -> Stmt {
    Stmt::new(kind)
}
fn v(x: VarId) -> Expr {
    Expr::var(x)
}
fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}
fn copy(src: BufferId, so: Vec<Expr>, dst: BufferId, dor: Vec<Expr>) -> Stmt {
    s(StmtKind::Copy { src: TileRef { buf: src, origin: so }, dst: TileRef { buf: dst, origin: dor }, fill: None })
}
fn par(k: &mut Kernel, name: &str, n: i64, body: impl FnOnce(VarId) -> Vec<Stmt>) -> Stmt {
    let i = k.add_var(name, DType::I32, VarKind::Loop);
    s(StmtKind::For { var: i, start: Expr::i32(0), end: Expr::i32(n as i32), kind: LoopKind::Parallel, body: body(i) })
}
fn par2(k: &mut Kernel, n0: i64, n1: i64, body: impl FnOnce(VarId, VarId) -> Vec<Stmt>) -> Stmt {
    let i = k.add_var("i", DType::I32, VarKind::Loop);
    let j = k.add_var("j", DType::I32, VarKind::Loop);
    let inner = s(StmtKind::For { var: j, start: Expr::i32(0), end: Expr::i32(n1 as i32), kind: LoopKind::Parallel, body: body(i, j) });
    s(StmtKind::For { var: i, start: Expr::i32(0), end: Expr::i32(n0 as i32), kind: LoopKind::Parallel, body: vec![inner] })
}

pub fn vector_add(threads: u32, block: i64) -> Kernel {
    let mut k = Kernel::new("vector_add", threads);
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F32, vec![Extent::Dyn(n)], false);
    let b = k.add_tensor_param("b", DType::F32, vec![Extent::Dyn(n)], false);
    let c = k.add_tensor_param("c", DType::F32, vec![Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(block as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let x = frag(&mut k, "x", DType::F32, &[block]);
    let y = frag(&mut k, "y", DType::F32, &[block]);
    let origin = || vec![bin(BinOp::Mul, v(bx), Expr::i32(block as i32))];
    let lp = par(&mut k, "i", block, |i| {
        vec![s(StmtKind::Store {
            buf: x,
            index: vec![v(i)],
            value: bin(BinOp::Add, Expr::load(x, vec![v(i)]), Expr::load(y, vec![v(i)])),
        })]
    });
    k.body = vec![copy(a, origin(), x, vec![]), copy(b, origin(), y, vec![]), lp, copy(x, vec![], c, origin())];
    k
}

#[test]
fn vector_add_compiles_vectorized() {
    let k = vector_add(256, 1024);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("ld.global.v4.f32"), "{}", c.ptx);
        assert!(c.ptx.contains("st.global.v4.f32"));
        assert!(!c.ptx.contains("bar.sync"), "no shared memory, no barrier");
        assert_eq!(c.shared_bytes, 0);
        // Params in ABI order: tensors, then dims.
        let pa = c.ptx.find(".param .u64 p0_a").unwrap();
        let pb = c.ptx.find(".param .u64 p1_b").unwrap();
        let pc = c.ptx.find(".param .u64 p2_c").unwrap();
        let pn = c.ptx.find(".param .s32 p3_N").unwrap();
        assert!(pa < pb && pb < pc && pc < pn);
    }
    no_spills(&b);
}

/// Row softmax: one block per row of an f16 [M, N] tensor, N ≤ BN.
pub fn softmax(threads: u32, bn: i64) -> Kernel {
    let mut k = Kernel::new("softmax", threads);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let xin = k.add_tensor_param("x", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let yout = k.add_tensor_param("y", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k.grid[0] = v(m);
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let xs = frag(&mut k, "s", DType::F32, &[1, bn]);
    let mx = frag(&mut k, "mx", DType::F32, &[1]);
    let sum = frag(&mut k, "sum", DType::F32, &[1]);
    let scale = std::f32::consts::LOG2_E;
    let e1 = par2(&mut k, 1, bn, |i, j| {
        vec![s(StmtKind::Store {
            buf: xs,
            index: vec![v(i), v(j)],
            value: Expr::unary(
                UnOp::Exp2,
                bin(BinOp::Mul, bin(BinOp::Sub, Expr::load(xs, vec![v(i), v(j)]), Expr::load(mx, vec![v(i)])), Expr::f32(scale)),
            ),
        })]
    });
    let e2 = par2(&mut k, 1, bn, |i, j| {
        vec![s(StmtKind::Store {
            buf: xs,
            index: vec![v(i), v(j)],
            value: bin(BinOp::Div, Expr::load(xs, vec![v(i), v(j)]), Expr::load(sum, vec![v(i)])),
        })]
    });
    k.body = vec![
        s(StmtKind::Copy {
            src: TileRef { buf: xin, origin: vec![v(bx), Expr::i32(0)] },
            dst: TileRef { buf: xs, origin: vec![] },
            fill: Some(Expr::f32(f32::NEG_INFINITY)),
        }),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: xs, dst: mx, dim: 1, keep: false }),
        e1,
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: xs, dst: sum, dim: 1, keep: false }),
        e2,
        copy(xs, vec![], yout, vec![v(bx), Expr::i32(0)]),
    ];
    k
}

#[test]
fn softmax_compiles_with_shuffles_and_cross_warp_reduction() {
    let k = softmax(256, 4096);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("shfl.sync.bfly.b32"));
        assert!(c.ptx.contains("ld.global.v4.b32"), "16-byte f16 loads");
        assert!(c.ptx.contains("ex2.approx.ftz.f32"));
        assert!(c.ptx.contains("bar.sync 0"), "rows span 8 warps: shared-memory reduction");
        assert!(c.shared_bytes > 0);
    }
    no_spills(&b);
}

fn store(buf: BufferId, index: Vec<Expr>, value: Expr) -> Stmt {
    s(StmtKind::Store { buf, index, value })
}
fn ld(buf: BufferId, index: Vec<Expr>) -> Expr {
    Expr::load(buf, index)
}

/// Reduce a [A, B] (or [A, B, C]) fragment along `dim` and write the result.
pub fn reduce_kernel(shape: &[i64], dim: usize, op: ReduceOp, dt: DType, threads: u32) -> Kernel {
    let mut k = Kernel::new(format!("reduce_{}d_dim{dim}_{:?}_{}", shape.len(), op, dt.name()), threads);
    let dims: Vec<VarId> = (0..shape.len()).map(|d| k.add_dim(format!("D{d}"))).collect();
    let x = k.add_tensor_param("x", dt, dims.iter().map(|&d| Extent::Dyn(d)).collect(), false);
    let mut out_shape: Vec<Extent> = dims.iter().map(|&d| Extent::Dyn(d)).collect();
    out_shape.remove(dim);
    let y = k.add_tensor_param("y", DType::F32, out_shape, true);
    let f = frag(&mut k, "f", DType::F32, shape);
    let mut rshape = shape.to_vec();
    rshape.remove(dim);
    let r = frag(&mut k, "r", DType::F32, &rshape);
    let zeros = |n: usize| (0..n).map(|_| Expr::i32(0)).collect::<Vec<_>>();
    k.body = vec![
        copy(x, zeros(shape.len()), f, vec![]),
        s(StmtKind::Fill { buf: r, value: Expr::f32(1.0) }),
        s(StmtKind::Reduce { op, src: f, dst: r, dim, keep: true }),
        copy(r, vec![], y, zeros(rshape.len())),
    ];
    k
}

#[test]
fn reductions_along_every_dim_assemble() {
    let cases: &[&[i64]] = &[&[4, 64], &[16, 256], &[3, 100], &[64, 8], &[2, 4, 8], &[8, 3, 64], &[4, 32, 32], &[1, 1024]];
    for shape in cases {
        for dim in 0..shape.len() {
            for (op, dt, threads) in [(ReduceOp::Sum, DType::F32, 128), (ReduceOp::Max, DType::F16, 256), (ReduceOp::Min, DType::BF16, 64)] {
                let k = reduce_kernel(shape, dim, op, dt, threads);
                let b = build(&k);
                let _ = b;
            }
        }
    }
}

/// Copies a [R, C] tile global → shared → fragment (transposed through shared by
/// element stores) → global.
pub fn shared_transpose(threads: u32, r: i64, c: i64) -> Kernel {
    let mut k = Kernel::new("transpose", threads);
    let m = k.add_dim("M");
    let n = k.add_dim("N");
    let a = k.add_tensor_param("a", DType::F16, vec![Extent::Dyn(m), Extent::Dyn(n)], false);
    let b = k.add_tensor_param("b", DType::F16, vec![Extent::Dyn(n), Extent::Dyn(m)], true);
    k.grid = [Expr::cdiv(v(n), Expr::i32(c as i32)), Expr::cdiv(v(m), Expr::i32(r as i32)), Expr::i32(1)];
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let sa = buffer(&mut k, "sa", Scope::Shared, DType::F16, &[r, c]);
    let t = frag(&mut k, "t", DType::F16, &[c, r]);
    let lp = par2(&mut k, c, r, |i, j| vec![store(t, vec![v(i), v(j)], ld(sa, vec![v(j), v(i)]))]);
    k.body = vec![
        copy(a, vec![bin(BinOp::Mul, v(by), Expr::i32(r as i32)), bin(BinOp::Mul, v(bx), Expr::i32(c as i32))], sa, vec![]),
        lp,
        copy(t, vec![], b, vec![bin(BinOp::Mul, v(bx), Expr::i32(c as i32)), bin(BinOp::Mul, v(by), Expr::i32(r as i32))]),
    ];
    k
}

#[test]
fn transpose_through_shared_has_one_barrier() {
    let k = shared_transpose(128, 32, 64);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert_eq!(c.ptx.matches("bar.sync").count(), 1, "{}", c.thread_ir);
        assert!(c.ptx.contains("st.shared.v4.b32"), "16-byte shared stores");
        assert!(c.ptx.contains("ld.shared.b16"));
        assert_eq!(c.shared_bytes, 32 * 64 * 2);
    }
}

/// A serial loop with dynamic bounds accumulating tiles of a row through shared memory,
/// with if/else, scalar params, casts and atomics.
pub fn loop_kernel(threads: u32) -> Kernel {
    let mut k = Kernel::new("looped", threads);
    let n = k.add_dim("N");
    let x = k.add_tensor_param("x", DType::BF16, vec![Extent::Dyn(n)], false);
    let total = k.add_tensor_param("total", DType::F32, vec![Extent::Const(4)], true);
    let counts = k.add_tensor_param("counts", DType::I32, vec![Extent::Const(4)], true);
    let alpha = k.add_scalar_param("alpha", DType::F32);
    let lim = k.add_scalar_param("lim", DType::U32);
    let h = k.add_scalar_param("h", DType::F16);
    let xs = buffer(&mut k, "xs", Scope::Shared, DType::F32, &[256]);
    let acc = frag(&mut k, "acc", DType::F32, &[256]);
    let red = frag(&mut k, "red", DType::F32, &[]);
    let loc = buffer(&mut k, "loc", Scope::Local, DType::I32, &[4]);
    let it = k.add_var("it", DType::I32, VarKind::Loop);
    let cnt = k.add_var("cnt", DType::I32, VarKind::Mut);
    let q = k.add_var("q", DType::F32, VarKind::Let);
    let lp = par(&mut k, "i", 256, |i| {
        vec![store(
            acc,
            vec![v(i)],
            Expr::Fma {
                a: Box::new(ld(xs, vec![v(i)])),
                b: Box::new(v(alpha)),
                c: Box::new(ld(acc, vec![v(i)])),
            },
        )]
    });
    let body = vec![
        copy(x, vec![bin(BinOp::Mul, v(it), Expr::i32(256))], xs, vec![]),
        lp,
        s(StmtKind::If {
            cond: bin(BinOp::Lt, Expr::cast(DType::U32, v(it)), v(lim)),
            then: vec![s(StmtKind::Assign { var: cnt, value: bin(BinOp::Add, v(cnt), Expr::i32(1)) })],
            otherwise: vec![s(StmtKind::Assign { var: cnt, value: bin(BinOp::Sub, v(cnt), Expr::i32(1)) })],
        }),
        store(loc, vec![bin(BinOp::Rem, v(it), Expr::i32(4))], v(cnt)),
    ];
    k.body = vec![
        s(StmtKind::Fill { buf: acc, value: Expr::f32(0.0) }),
        s(StmtKind::Fill { buf: loc, value: Expr::i32(0) }),
        s(StmtKind::Let { var: cnt, value: Expr::i32(0) }),
        s(StmtKind::For { var: it, start: Expr::i32(0), end: Expr::cdiv(v(n), Expr::i32(256)), kind: LoopKind::Serial, body }),
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: acc, dst: red, dim: 0, keep: false }),
        s(StmtKind::Let { var: q, value: bin(BinOp::Mul, Expr::cast(DType::F32, v(h)), Expr::cast(DType::F32, ld(loc, vec![Expr::i32(1)]))) }),
        s(StmtKind::AtomicAdd { buf: total, index: vec![Expr::i32(0)], value: Expr::unary(UnOp::Sqrt, Expr::unary(UnOp::Abs, v(q))) }),
        s(StmtKind::AtomicAdd { buf: counts, index: vec![Expr::i32(1)], value: v(cnt) }),
        s(StmtKind::Store { buf: counts, index: vec![Expr::i32(2)], value: Expr::cast(DType::I32, Expr::unary(UnOp::Exp, v(alpha))) }),
    ];
    k
}

#[test]
fn loop_with_shared_if_atomics_and_locals() {
    let _ = VarId(0);
    let k = loop_kernel(256);
    let b = build(&k);
    for c in [&b.sm80, &b.sm90] {
        assert!(c.ptx.contains("atom.global.add.f32"));
        assert!(c.ptx.contains("atom.global.add.s32"));
        assert!(c.ptx.contains("cvt.rzi.s32.f32"));
        assert!(c.ptx.contains("bra.uni"));
        // Barrier before the nest (RAW) and at the loop head (WAR across the back-edge).
        assert!(c.ptx.matches("bar.sync").count() >= 2, "{}", c.thread_ir);
    }
}

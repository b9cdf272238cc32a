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

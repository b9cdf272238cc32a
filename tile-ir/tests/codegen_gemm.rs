//! Tensor-core GEMM code generation: hand-built gemm kernels run on the
//! Thread IR simulator (whose ldmatrix / mma.sync semantics are written from
//! the PTX ISA, independently of the lowering) against a CPU reference, at
//! sizes that are not multiples of the tile; plus ptxas assembly for sm_80
//! and sm_90a (no spills) and PTX structure checks.
//!
//! The kernels are compiled with `compile_verified` because the verifier
//! learns `Gemm` on another branch.

mod gemm_sim;
mod kernels;
mod sim;

mod ptxas;
use gemm_sim::encode;
use kernels::{buffer, copy, par2, s, v};
use ptxas::assemble;
use tile_ir::*;
use tile_testkit::Rng;

// ------------------------------------------------------------------ builders

fn mul(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::Mul, a, Expr::i32(b as i32))
}
fn gemm(a: BufferId, b: BufferId, c: BufferId, cfg: &Cfg, clear: bool) -> Stmt {
    s(StmtKind::Gemm { a, b, c, trans_a: cfg.trans_a, trans_b: cfg.trans_b, clear, policy: cfg.policy })
}

#[derive(Clone, Debug)]
struct Cfg {
    threads: u32,
    bm: i64,
    bn: i64,
    bk: i64,
    dt: DType,
    trans_a: bool,
    trans_b: bool,
    policy: WarpPolicy,
    /// How the accumulator starts: `Zero` (fill 0), `Clear` (fill 7, then
    /// the first gemm clears), `Load` (copied from C: C += A·B).
    init: Init,
}

#[derive(Copy, Clone, Debug, PartialEq)]
enum Init {
    Zero,
    Clear,
    Load,
}

/// `C[M, N] (f32) (+)= op(A) · op(B)` tiled `bm × bn`, K in steps of `bk`.
/// A is `[M, K]` (`[K, M]` with `trans_a`), B `[K, N]` (`[N, K]` with `trans_b`).
fn gemm_kernel(cfg: &Cfg) -> Kernel {
    let mut k = Kernel::new("gemm", cfg.threads);
    let (m, n, kd) = (k.add_dim("M"), k.add_dim("N"), k.add_dim("K"));
    let a_shape =
        if cfg.trans_a { vec![Extent::Dyn(kd), Extent::Dyn(m)] } else { vec![Extent::Dyn(m), Extent::Dyn(kd)] };
    let b_shape =
        if cfg.trans_b { vec![Extent::Dyn(n), Extent::Dyn(kd)] } else { vec![Extent::Dyn(kd), Extent::Dyn(n)] };
    let a = k.add_tensor_param("a", cfg.dt, a_shape, false);
    let b = k.add_tensor_param("b", cfg.dt, b_shape, false);
    let c = k.add_tensor_param("c", DType::F32, vec![Extent::Dyn(m), Extent::Dyn(n)], true);
    k.grid[0] = Expr::cdiv(v(n), Expr::i32(cfg.bn as i32));
    k.grid[1] = Expr::cdiv(v(m), Expr::i32(cfg.bm as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let by = k.add_var("by", DType::I32, VarKind::BlockIdx(1));
    let ko = k.add_var("ko", DType::I32, VarKind::Loop);
    let a_s =
        buffer(&mut k, "a_s", Scope::Shared, cfg.dt, &if cfg.trans_a { [cfg.bk, cfg.bm] } else { [cfg.bm, cfg.bk] });
    let b_s =
        buffer(&mut k, "b_s", Scope::Shared, cfg.dt, &if cfg.trans_b { [cfg.bn, cfg.bk] } else { [cfg.bk, cfg.bn] });
    let acc = buffer(&mut k, "acc", Scope::Fragment, DType::F32, &[cfg.bm, cfg.bn]);
    let (row0, col0, k0) = (mul(v(by), cfg.bm), mul(v(bx), cfg.bn), mul(v(ko), cfg.bk));
    let a_org = if cfg.trans_a { vec![k0.clone(), row0.clone()] } else { vec![row0.clone(), k0.clone()] };
    let b_org = if cfg.trans_b { vec![col0.clone(), k0.clone()] } else { vec![k0.clone(), col0.clone()] };
    let step = match cfg.init {
        Init::Clear => s(StmtKind::If {
            cond: Expr::binary(BinOp::Eq, v(ko), Expr::i32(0)),
            then: vec![gemm(a_s, b_s, acc, cfg, true)],
            otherwise: vec![gemm(a_s, b_s, acc, cfg, false)],
        }),
        _ => gemm(a_s, b_s, acc, cfg, false),
    };
    let init = match cfg.init {
        Init::Zero => s(StmtKind::Fill { buf: acc, value: Expr::f32(0.0) }),
        Init::Clear => s(StmtKind::Fill { buf: acc, value: Expr::f32(7.0) }),
        Init::Load => copy(c, vec![row0.clone(), col0.clone()], acc, vec![]),
    };
    k.body = vec![
        init,
        s(StmtKind::For {
            var: ko,
            start: Expr::i32(0),
            end: Expr::cdiv(v(kd), Expr::i32(cfg.bk as i32)),
            kind: LoopKind::Serial,
            body: vec![copy(a, a_org, a_s, vec![]), copy(b, b_org, b_s, vec![]), step],
        }),
        copy(acc, vec![], c, vec![row0, col0]),
    ];
    k
}

// --------------------------------------------------------------- simulation

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Runs `k` on the simulator (tensors in parameter order, `dims` in `k.dims` order).
fn run(k: &Kernel, target: Target, tensors: Vec<Vec<u8>>, dims: &[i64]) -> Vec<Vec<u8>> {
    let c = compile_verified(k, target).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
    sim::launch(&c.function, k, tensors, dims, &[]).tensors
}

fn check_gemm(cfg: &Cfg, m: usize, n: usize, kk: usize, seed: u64) {
    check_gemm_on(Target::Sm80, cfg, m, n, kk, seed)
}

fn check_gemm_on(target: Target, cfg: &Cfg, m: usize, n: usize, kk: usize, seed: u64) {
    let mut rng = Rng(seed);
    let k = gemm_kernel(cfg);
    let a: Vec<f32> = (0..m * kk).map(|_| rng.f32(-1.0, 1.0)).collect();
    let b: Vec<f32> = (0..kk * n).map(|_| rng.f32(-1.0, 1.0)).collect();
    let c0: Vec<f32> = (0..m * n).map(|_| rng.f32(-1.0, 1.0)).collect();
    let (ab, av) = encode(cfg.dt, &a);
    let (bb, bv) = encode(cfg.dt, &b);
    // Element (i, p) of op(A) and (p, j) of op(B) in the stored arrays.
    let a_at = |i: usize, p: usize| if cfg.trans_a { av[p * m + i] } else { av[i * kk + p] };
    let b_at = |p: usize, j: usize| if cfg.trans_b { bv[j * kk + p] } else { bv[p * n + j] };
    let out = run(&k, target, vec![ab, bb, encode(DType::F32, &c0).0], &[m as i64, n as i64, kk as i64]);
    let got = f32s(&out[2]);
    for i in 0..m {
        for j in 0..n {
            let mut want: f64 = (0..kk).map(|p| a_at(i, p) * b_at(p, j)).sum();
            if cfg.init == Init::Load {
                want += c0[i * n + j] as f64;
            }
            let g = got[i * n + j] as f64;
            assert!(
                (g - want).abs() <= 1e-3 * (1.0 + want.abs()),
                "{cfg:?} {m}×{n}×{kk}: C[{i},{j}] = {g}, want {want}"
            );
        }
    }
}

fn cfg(threads: u32, bm: i64, bn: i64, bk: i64) -> Cfg {
    Cfg {
        threads,
        bm,
        bn,
        bk,
        dt: DType::F16,
        trans_a: false,
        trans_b: false,
        policy: WarpPolicy::Square,
        init: Init::Zero,
    }
}

#[test]
fn gemm_f16_64x64x32_128_threads_awkward_sizes() {
    let c = cfg(128, 64, 64, 32);
    check_gemm(&c, 64, 64, 32, 1);
    check_gemm(&c, 100, 72, 40, 2);
}

#[test]
fn gemm_both_transposes_and_bf16() {
    for (ta, tb) in [(false, true), (true, false), (true, true)] {
        for dt in [DType::F16, DType::BF16] {
            let c = Cfg { trans_a: ta, trans_b: tb, dt, ..cfg(128, 64, 64, 32) };
            check_gemm(&c, 70, 64, 48, 3);
            // sm_90a: wgmma when wgmma_shape accepts the gemm, else mma.sync.
            check_gemm_on(Target::Sm90a, &c, 64, 66, 32, 19);
        }
    }
}

#[test]
fn gemm_policies_and_init_modes() {
    for policy in [WarpPolicy::Square, WarpPolicy::FullRow, WarpPolicy::FullCol] {
        for init in [Init::Zero, Init::Clear, Init::Load] {
            let c = Cfg { policy, init, ..cfg(128, 64, 64, 32) };
            check_gemm(&c, 64, 80, 64, 4);
        }
    }
}

#[test]
fn gemm_layouts_are_reported() {
    let c = compile_verified(&gemm_kernel(&cfg(256, 128, 128, 32)), Target::Sm80).unwrap();
    let get = |n: &str| c.layouts.iter().find(|(b, _)| b == n).map(|x| x.1.clone()).unwrap_or_default();
    // 8 warps as 4×2: 32×64 per warp; A rows of 64 bytes, B rows of 256 bytes.
    assert!(
        get("acc").contains("t[2+:3]*1 + t[6+:2]*32") && get("acc").contains("t[0+:2]*2 + t[5+:1]*64"),
        "{}",
        get("acc")
    );
    assert_eq!(get("a_s"), "shared swizzle<2,4,3>(rows=128, row_bytes=64)");
    assert_eq!(get("b_s"), "shared swizzle<3,4,4>(rows=32, row_bytes=256)");
}

#[test]
fn gemm_128x128x32_256_threads() {
    for dt in [DType::F16, DType::BF16] {
        let c = Cfg { dt, ..cfg(256, 128, 128, 32) };
        check_gemm(&c, 130, 128, 64, 5);
    }
    let c = Cfg { trans_b: true, ..cfg(256, 128, 128, 32) };
    check_gemm(&c, 128, 136, 32, 6);
}

#[test]
fn gemm_odd_warp_tiles_and_k64() {
    // N per warp = 8 (an odd number of n8 atoms: ldmatrix.x2), K tile 64 (128-byte rows).
    let c = Cfg { policy: WarpPolicy::FullCol, ..cfg(128, 32, 32, 64) };
    check_gemm(&c, 40, 32, 100, 7);
    let c = Cfg { policy: WarpPolicy::FullCol, trans_b: true, ..cfg(128, 32, 32, 64) };
    check_gemm(&c, 32, 40, 64, 8);
    // K tile 16 (32-byte rows: Swizzle<1,4,3>), K tile 48 (96-byte rows: padded to 112).
    check_gemm(&cfg(128, 64, 64, 16), 64, 64, 40, 14);
    check_gemm(&cfg(128, 64, 64, 48), 64, 64, 100, 15);
    check_gemm(&Cfg { trans_a: true, trans_b: true, ..cfg(128, 64, 64, 48) }, 64, 64, 96, 16);
    // N tile 24 (48-byte B rows, row-major; three n8 atoms per warp: ldmatrix .x4 + .x2).
    check_gemm(&Cfg { policy: WarpPolicy::FullRow, ..cfg(128, 64, 24, 32) }, 64, 30, 64, 17);
    check_gemm(&Cfg { policy: WarpPolicy::FullRow, trans_b: true, ..cfg(128, 64, 24, 32) }, 64, 24, 64, 18);
    // 96 threads: the largest power of two of warps (2) computes, the third warp idles.
    check_gemm(&cfg(96, 64, 64, 32), 64, 70, 32, 10);
    // M 128, N 64, K 16 (32-byte rows), 64 threads.
    let c = Cfg { trans_a: true, ..cfg(64, 128, 64, 16) };
    check_gemm(&c, 128, 64, 48, 9);
}

// ------------------------------------------------------------------- errors

fn compile_err(k: &Kernel) -> String {
    match compile_verified(k, Target::Sm80) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.iter().map(|e| e.message.clone()).collect::<Vec<_>>().join("\n"),
    }
}

#[test]
fn accumulator_layout_conflicts_name_both_gemms() {
    // The same accumulator from a FullRow and a FullCol gemm.
    let mut k = gemm_kernel(&Cfg { policy: WarpPolicy::FullRow, ..cfg(128, 64, 64, 32) });
    let StmtKind::For { body, .. } = &mut k.body[1].kind else { panic!("loop") };
    let StmtKind::Gemm { a, b, c, .. } = body[2].kind.clone() else { panic!("gemm") };
    body.push(s(StmtKind::Gemm { a, b, c, trans_a: false, trans_b: false, clear: false, policy: WarpPolicy::FullCol }));
    let e = compile_err(&k);
    assert!(
        e.contains("layout conflict on fragment `acc`") && e.contains("warps 4×1") && e.contains("warps 1×4"),
        "{e}"
    );
}

#[test]
fn unsupported_gemm_shapes_are_errors() {
    let e = compile_err(&gemm_kernel(&cfg(128, 64, 64, 24)));
    assert!(e.contains("K a multiple of 16"), "{e}");
    let e = compile_err(&gemm_kernel(&cfg(128, 40, 64, 32)));
    assert!(e.contains("M a multiple of 16") || e.contains("cannot be split"), "{e}");
    // 256×256 f32 over 128 threads: 512 registers per thread.
    let e = compile_err(&gemm_kernel(&cfg(128, 256, 256, 16)));
    assert!(e.contains("registers per thread"), "{e}");
}

// -------------------------------------------------------------------- ptxas

/// Compiles for both targets, checks the PTX structure, assembles without spills.
fn assemble_both(k: &Kernel, ldmatrix: &[&str]) -> Vec<String> {
    let mut reports = vec![];
    for (target, arch) in [(Target::Sm80, "sm_80"), (Target::Sm90a, "sm_90a")] {
        let c = compile_verified(k, target).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name));
        // On sm_90a the gemms that wgmma can describe lower to wgmma (codegen_wgmma.rs).
        if !tile_ir::passes::layout_infer::wgmma_accumulators(k, target).is_empty() {
            assert!(c.ptx.contains("wgmma.mma_async") && !c.ptx.contains("mma.sync"), "no wgmma in {}", k.name);
        } else {
            assert!(c.ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32."), "no mma.sync in {}", k.name);
            for l in ldmatrix {
                assert!(c.ptx.contains(l), "no `{l}` in {}", k.name);
            }
        }
        if let Some(r) = assemble(&k.name, &c.ptx, arch) {
            assert!(
                r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"),
                "{} ({arch}) spills:\n{r}",
                k.name
            );
            reports.push(r);
        }
    }
    reports
}

#[test]
fn gemm_128x128x32_256_threads_assembles_without_spills() {
    for (dt, ta, tb) in [(DType::F16, false, false), (DType::BF16, false, true), (DType::F16, true, false)] {
        let c = Cfg { dt, trans_a: ta, trans_b: tb, ..cfg(256, 128, 128, 32) };
        let k = gemm_kernel(&c);
        let want: &[&str] = match (ta, tb) {
            (false, false) => {
                &["ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"]
            }
            (false, true) => &["ldmatrix.sync.aligned.m8n8.x4.shared.b16"],
            _ => &["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"],
        };
        for r in assemble_both(&k, want) {
            eprintln!("{c:?}:\n{r}");
        }
    }
}

#[test]
fn gemm_128x256x32_and_64x64_tiles_assemble() {
    for c in [cfg(256, 128, 256, 32), cfg(128, 64, 64, 64), Cfg { policy: WarpPolicy::FullCol, ..cfg(128, 32, 32, 64) }]
    {
        assemble_both(&gemm_kernel(&c), &["ldmatrix.sync.aligned.m8n8"]);
    }
}

// ----------------------------------------------------------- attention pattern

/// One FlashAttention-style step per block of `bm` query rows against all
/// `bn` keys: S = Q·Kᵀ, m = rowmax(S), P = exp2(S − m), l = rowsum(P),
/// O = (P as dt)·V / l. `policy2` is the second gemm's policy.
fn attention_kernel(
    threads: u32,
    bm: i64,
    bn: i64,
    d: i64,
    dt: DType,
    policy1: WarpPolicy,
    policy2: WarpPolicy,
) -> Kernel {
    let mut k = Kernel::new("attention", threads);
    let m = k.add_dim("M");
    let q = k.add_tensor_param("q", dt, vec![Extent::Dyn(m), Extent::Const(d)], false);
    let kt = k.add_tensor_param("k", dt, vec![Extent::Const(bn), Extent::Const(d)], false);
    let vt = k.add_tensor_param("v", dt, vec![Extent::Const(bn), Extent::Const(d)], false);
    let o = k.add_tensor_param("o", DType::F32, vec![Extent::Dyn(m), Extent::Const(d)], true);
    k.grid[0] = Expr::cdiv(v(m), Expr::i32(bm as i32));
    let bx = k.add_var("bx", DType::I32, VarKind::BlockIdx(0));
    let q_s = buffer(&mut k, "q_s", Scope::Shared, dt, &[bm, d]);
    let k_s = buffer(&mut k, "k_s", Scope::Shared, dt, &[bn, d]);
    let v_s = buffer(&mut k, "v_s", Scope::Shared, dt, &[bn, d]);
    let sc = buffer(&mut k, "s", Scope::Fragment, DType::F32, &[bm, bn]);
    let p = buffer(&mut k, "p", Scope::Fragment, dt, &[bm, bn]);
    let mx = buffer(&mut k, "m", Scope::Fragment, DType::F32, &[bm]);
    let l = buffer(&mut k, "l", Scope::Fragment, DType::F32, &[bm]);
    let acc = buffer(&mut k, "acc", Scope::Fragment, DType::F32, &[bm, d]);
    let row0 = mul(v(bx), bm);
    let exp = par2(&mut k, bm, bn, |i, j| {
        let x = Expr::binary(BinOp::Sub, Expr::load(sc, vec![v(i), v(j)]), Expr::load(mx, vec![v(i)]));
        vec![s(StmtKind::Store { buf: sc, index: vec![v(i), v(j)], value: Expr::unary(UnOp::Exp2, x) })]
    });
    let norm = par2(&mut k, bm, d, |i, j| {
        let x = Expr::binary(BinOp::Div, Expr::load(acc, vec![v(i), v(j)]), Expr::load(l, vec![v(i)]));
        vec![s(StmtKind::Store { buf: acc, index: vec![v(i), v(j)], value: x })]
    });
    let g = |a, b, c, trans_b, policy| s(StmtKind::Gemm { a, b, c, trans_a: false, trans_b, clear: true, policy });
    k.body = vec![
        copy(q, vec![row0.clone(), Expr::i32(0)], q_s, vec![]),
        copy(kt, vec![Expr::i32(0), Expr::i32(0)], k_s, vec![]),
        copy(vt, vec![Expr::i32(0), Expr::i32(0)], v_s, vec![]),
        g(q_s, k_s, sc, true, policy1),
        s(StmtKind::Reduce { op: ReduceOp::Max, src: sc, dst: mx, dim: 1, keep: false }),
        exp,
        s(StmtKind::Reduce { op: ReduceOp::Sum, src: sc, dst: l, dim: 1, keep: false }),
        copy(sc, vec![], p, vec![]),
        g(p, v_s, acc, false, policy2),
        norm,
        copy(acc, vec![], o, vec![row0, Expr::i32(0)]),
    ];
    k
}

fn check_attention(threads: u32, bm: i64, bn: i64, d: i64, dt: DType, m: usize, seed: u64) {
    let mut rng = Rng(seed);
    let k = attention_kernel(threads, bm, bn, d, dt, WarpPolicy::FullRow, WarpPolicy::FullRow);
    let (bn_, d_) = (bn as usize, d as usize);
    let qf: Vec<f32> = (0..m * d_).map(|_| rng.f32(-1.0, 1.0)).collect();
    let kf: Vec<f32> = (0..bn_ * d_).map(|_| rng.f32(-1.0, 1.0)).collect();
    let vf: Vec<f32> = (0..bn_ * d_).map(|_| rng.f32(-1.0, 1.0)).collect();
    let ((qb, qv), (kb, kv), (vb, vv)) = (encode(dt, &qf), encode(dt, &kf), encode(dt, &vf));
    let out = run(&k, Target::Sm80, vec![qb, kb, vb, vec![0u8; 4 * m * d_]], &[m as i64]);
    let got = f32s(&out[3]);
    let round = |x: f64| encode(dt, &[x as f32]).1[0];
    for i in 0..m {
        let srow: Vec<f64> = (0..bn_).map(|j| (0..d_).map(|c| qv[i * d_ + c] * kv[j * d_ + c]).sum()).collect();
        let mxv = srow.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let prow: Vec<f64> = srow.iter().map(|x| (x - mxv).exp2()).collect();
        let lsum: f64 = prow.iter().sum();
        for c in 0..d_ {
            let want: f64 = (0..bn_).map(|j| round(prow[j]) * vv[j * d_ + c]).sum::<f64>() / lsum;
            let g = got[i * d_ + c] as f64;
            assert!(
                (g - want).abs() <= 2e-3 * (1.0 + want.abs()),
                "attention t{threads} {dt:?} m{m}: O[{i},{c}] = {g}, want {want}"
            );
        }
    }
}

#[test]
fn attention_step_with_a_from_registers() {
    check_attention(128, 64, 64, 64, DType::F16, 100, 11);
    check_attention(128, 64, 32, 32, DType::BF16, 64, 12);
    check_attention(256, 128, 64, 64, DType::F16, 130, 13);
}

#[test]
fn a_from_registers_needs_warps_along_m_only() {
    // Square on 64×64 with 4 warps splits N: P cannot feed the second gemm.
    let k = attention_kernel(128, 64, 64, 64, DType::F16, WarpPolicy::Square, WarpPolicy::Square);
    let e = compile_err(&k);
    eprintln!("{e}");
    assert!(e.contains("A from fragment") || e.contains("layout conflict"), "{e}");
}

/// S = A·B with warps splitting N (Square), then S − rowmax(S) stored: the
/// row reduction crosses warps through shared memory. The row maxima are also
/// broadcast over another fragment `x[BM, 24]` (its layout takes the
/// accumulator's row distribution): x − rowmax(S).
#[test]
fn gemm_then_row_max_across_warps() {
    for (threads, bm, bn, policy) in [
        (128u32, 64i64, 64i64, WarpPolicy::Square),
        (256, 64, 128, WarpPolicy::FullCol),
        (256, 128, 128, WarpPolicy::Square),
    ] {
        let mut k = Kernel::new("gemm_rowmax", threads);
        let kk = 32i64;
        let a = k.add_tensor_param("a", DType::F16, vec![Extent::Const(bm), Extent::Const(kk)], false);
        let b = k.add_tensor_param("b", DType::F16, vec![Extent::Const(kk), Extent::Const(bn)], false);
        let o = k.add_tensor_param("o", DType::F32, vec![Extent::Const(bm), Extent::Const(bn)], true);
        let xg = k.add_tensor_param("x", DType::F32, vec![Extent::Const(bm), Extent::Const(24)], true);
        let a_s = buffer(&mut k, "a_s", Scope::Shared, DType::F16, &[bm, kk]);
        let b_s = buffer(&mut k, "b_s", Scope::Shared, DType::F16, &[kk, bn]);
        let sc = buffer(&mut k, "s", Scope::Fragment, DType::F32, &[bm, bn]);
        let mx = buffer(&mut k, "m", Scope::Fragment, DType::F32, &[bm]);
        let x = buffer(&mut k, "xf", Scope::Fragment, DType::F32, &[bm, 24]);
        let xsub = par2(&mut k, bm, 24, |i, j| {
            let e = Expr::binary(BinOp::Sub, Expr::load(x, vec![v(i), v(j)]), Expr::load(mx, vec![v(i)]));
            vec![s(StmtKind::Store { buf: x, index: vec![v(i), v(j)], value: e })]
        });
        let sub = par2(&mut k, bm, bn, |i, j| {
            let x = Expr::binary(BinOp::Sub, Expr::load(sc, vec![v(i), v(j)]), Expr::load(mx, vec![v(i)]));
            vec![s(StmtKind::Store { buf: sc, index: vec![v(i), v(j)], value: x })]
        });
        k.body = vec![
            copy(a, vec![Expr::i32(0), Expr::i32(0)], a_s, vec![]),
            copy(b, vec![Expr::i32(0), Expr::i32(0)], b_s, vec![]),
            s(StmtKind::Gemm { a: a_s, b: b_s, c: sc, trans_a: false, trans_b: false, clear: true, policy }),
            s(StmtKind::Reduce { op: ReduceOp::Max, src: sc, dst: mx, dim: 1, keep: false }),
            sub,
            copy(sc, vec![], o, vec![Expr::i32(0), Expr::i32(0)]),
            copy(xg, vec![Expr::i32(0), Expr::i32(0)], x, vec![]),
            xsub,
            copy(x, vec![], xg, vec![Expr::i32(0), Expr::i32(0)]),
        ];
        let mut rng = Rng(21);
        let (mm, nn, kk_) = (bm as usize, bn as usize, kk as usize);
        let af: Vec<f32> = (0..mm * kk_).map(|_| rng.f32(-1.0, 1.0)).collect();
        let bf_: Vec<f32> = (0..kk_ * nn).map(|_| rng.f32(-1.0, 1.0)).collect();
        let ((ab, av), (bb, bv)) = (encode(DType::F16, &af), encode(DType::F16, &bf_));
        let x0: Vec<f32> = (0..mm * 24).map(|_| rng.f32(-1.0, 1.0)).collect();
        let out = run(&k, Target::Sm80, vec![ab, bb, vec![0u8; 4 * mm * nn], encode(DType::F32, &x0).0], &[]);
        let got = f32s(&out[2]);
        let gx = f32s(&out[3]);
        for i in 0..mm {
            let row: Vec<f64> = (0..nn).map(|j| (0..kk_).map(|p| av[i * kk_ + p] * bv[p * nn + j]).sum()).collect();
            let mxv = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            for j in 0..nn {
                let g = got[i * nn + j] as f64;
                assert!(
                    (g - (row[j] - mxv)).abs() <= 1e-3 * (1.0 + mxv.abs()),
                    "t{threads} {policy:?}: [{i},{j}] = {g}, want {}",
                    row[j] - mxv
                );
            }
            for j in 0..24 {
                let want = x0[i * 24 + j] as f64 - mxv;
                assert!(
                    (gx[i * 24 + j] as f64 - want).abs() <= 1e-3 * (1.0 + want.abs()),
                    "t{threads} {policy:?}: x[{i},{j}]"
                );
            }
        }
        if let Some(r) = assemble(&k.name, &compile_verified(&k, Target::Sm80).unwrap().ptx, "sm_80") {
            assert!(r.contains("0 bytes spill stores"), "{r}");
        }
    }
}

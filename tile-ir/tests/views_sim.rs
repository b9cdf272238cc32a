//! Sub-views of shared buffers (`kv_s.view([.., 512..])`, `View` in the IR)
//! run on the Thread IR simulator (its race detector on) and in the
//! interpreter, against f64 references at awkward sizes, for every variant
//! `compile_variants` makes on sm_80 and sm_90a: views as copy destinations,
//! as gemm operands (A and B, transposed and not: ldmatrix + mma.sync on
//! sm_80, wgmma descriptors on sm_90a), and in element access; and a
//! pipelined loop whose stage buffer is read whole (`kv_s.t()`) and through a
//! view (V = `kv_s[.., ..64]`), MLA's pattern, under cp.async, TMA and the
//! warp-specialized loop (and with V in a buffer of its own on sm_90a's
//! cp.async pipeline, whose wgmmas need a `fence.proxy.async` after the
//! cp.asyncs: taking it out is caught). Every variant is assembled by ptxas
//! when `TILE_PTXAS` is set.

mod gemm_sim;
mod sim;

use gemm_sim::{decode, random, rel_l2, Rng};
use sim::{RunOptions, SimTensor};
use tile_ir::print::parse_kernel;
use tile_ir::*;

/// `s = x[:, :64]·w[:, :64]ᵀ + x[:, 64:]·w[:, 64:]ᵀ` (both halves through
/// views of one buffer each, x's copied in by halves into its views, w's
/// whole), `y = f16(s) · w` (the whole of w's buffer as B), `z = 2·x[:, 64:]`
/// read element by element through the view. `w` has at most 64 rows.
const VIEWS_GEMM: &str = "kernel views_gemm<%0 M, %1 N>(@0 x: &f16[M, 128], @1 w: &f16[N, 128], @2 y: &mut f32[M, 128], @3 z: &mut f32[M, 64]) threads=128 grid=(1, (M + 63) / 64, 1) {
  %2 by = block_idx.y
  @4 x_s: shared f16[64, 128]
  @5 x_lo: shared f16[64, 64] = view x_s[0, 0]
  @6 x_hi: shared f16[64, 64] = view x_s[0, 64]
  @7 w_s: shared f16[64, 128]
  @8 w_lo: shared f16[64, 64] = view w_s[0, 0]
  @9 w_hi: shared f16[64, 64] = view w_s[0, 64]
  @10 p_s: shared f16[64, 64]
  @11 s: fragment f32[64, 64]
  @12 o: fragment f32[64, 128]
  @13 t: fragment f32[64, 64]
  copy x[by * 64, 0] -> x_lo
  copy x[by * 64, 64] -> x_hi
  copy w[0, 0] -> w_s
  gemm x_lo, w_lo.t -> s, clear
  gemm x_hi, w_hi.t -> s
  copy s -> p_s
  gemm p_s, w_s -> o, clear
  copy o -> y[by * 64, 0]
  for %3 i in parallel 0..64 {
    for %4 j in parallel 0..64 {
      t[%3, %4] = x_hi[%3, %4] as f32 * 2.0
    }
  }
  copy t -> z[by * 64, 0]
}";

/// MLA's pattern, small: per key block of 64, `s = q · kvᵀ` over all 128
/// columns of the stage buffer (`kv_s.t`), `o += f16(s) · kv[:, :64]` (V, a
/// view of the stage buffer); `q` has 64 rows per block.
const VIEWS_LOOP: &str = "kernel views_loop<%0 M, %1 S>(@0 q: &f16[M, 128], @1 kv: &f16[S, 128], @2 out: &mut f32[M, 64]) threads=128 grid=(1, (M + 63) / 64, 1) {
  %2 by = block_idx.y
  @3 q_s: shared f16[64, 128]
  @4 kv_s: shared f16[64, 128]
  @5 v_s: shared f16[64, 64] = view kv_s[0, 0]
  @6 p_s: shared f16[64, 64]
  @7 s: fragment f32[64, 64]
  @8 o: fragment f32[64, 64]
  copy q[by * 64, 0] -> q_s
  fill o, 0.0
  for %3 k in pipelined(2) 0..(S + 63) / 64 {
    copy kv[k * 64, 0] -> kv_s
    gemm q_s, kv_s.t -> s, clear
    copy s -> p_s
    gemm p_s, v_s -> o
  }
  copy o -> out[by * 64, 0]
}";

fn f16r(x: f64) -> f64 {
    half::f16::from_f64(x).to_f64()
}

/// Every variant of `k` on `target` (the one-warpgroup warp-specialized loop included).
fn variants(k: &Kernel, target: Target) -> Vec<Compiled> {
    let options = CompileOptions { wsloop_one_warpgroup: true, ..CompileOptions::default() };
    compile_variants(k, target, options).unwrap_or_else(|e| panic!("{} on {}: {e:?}", k.name, target.name()))
}

fn t2(bytes: Vec<u8>, rows: usize, cols: usize, elem: usize) -> SimTensor {
    SimTensor { bytes, shape: vec![rows, cols], elem }
}

#[test]
fn views_as_copy_destinations_gemm_operands_and_elements() {
    let k = parse_kernel(VIEWS_GEMM).unwrap();
    crate_verify(&k);
    // The text form round-trips (`= view x_s[0, 64]`).
    let printed = print::print_kernel(&k);
    assert!(printed.contains("x_hi: shared f16[64, 64] = view x_s[0, 64]"), "{printed}");
    assert_eq!(parse_kernel(&printed).unwrap(), k);
    for (m, n) in [(1usize, 1usize), (63, 37), (100, 64), (129, 5)] {
        let mut rng = Rng(0x51e ^ (m * 131 + n) as u64);
        let (xb, x) = random(&mut rng, DType::F16, m * 128, -1.0, 1.0);
        let (wb, w) = random(&mut rng, DType::F16, n * 128, -1.0, 1.0);
        // References: s over the 64 (zero-padded) rows of w, p = f16(s), y = p · w.
        let wp = |r: usize, c: usize| if r < n { w[r * 128 + c] } else { 0.0 };
        let mut y = vec![0.0; m * 128];
        let mut z = vec![0.0; m * 64];
        for i in 0..m {
            let p: Vec<f64> = (0..64).map(|j| f16r((0..128).map(|c| x[i * 128 + c] * wp(j, c)).sum())).collect();
            for c in 0..128 {
                y[i * 128 + c] = (0..64).map(|j| p[j] * wp(j, c)).sum();
            }
            for j in 0..64 {
                z[i * 64 + j] = 2.0 * x[i * 128 + 64 + j];
            }
        }
        let tensors = vec![
            t2(xb.clone(), m, 128, 2),
            t2(wb.clone(), n, 128, 2),
            t2(vec![0xFF; 4 * m * 128], m, 128, 4),
            t2(vec![0xFF; 4 * m * 64], m, 64, 4),
        ];
        let dims = [m as i64, n as i64];
        for target in [Target::Sm80, Target::Sm90a] {
            for c in variants(&k, target) {
                let what = format!("{} m={m} n={n}", c.schedule);
                if target == Target::Sm90a {
                    assert!(c.ptx.contains("wgmma.mma_async"), "{what}: the views' gemms take wgmma on sm_90a");
                }
                let out = sim::run_compiled(&c, &k, tensors.clone(), &dims, &[], RunOptions::default()).tensors;
                let err = rel_l2(&decode(DType::F32, &out[2]), &y);
                assert!(err <= 2e-3, "{what}: y relative L2 error {err:.3e}");
                assert_eq!(decode(DType::F32, &out[3]), z, "{what}: z through the view");
            }
        }
        // The interpreter agrees.
        let mut args = vec![
            (xb, vec![m, 128]),
            (wb, vec![n, 128]),
            (vec![0u8; 4 * m * 128], vec![m, 128]),
            (vec![0u8; 4 * m * 64], vec![m, 64]),
        ];
        interp_run(&k, &mut args);
        assert!(rel_l2(&decode(DType::F32, &args[2].0), &y) <= 2e-3, "interpreter y m={m} n={n}");
        assert_eq!(decode(DType::F32, &args[3].0), z, "interpreter z m={m} n={n}");
    }
}

#[test]
fn a_stage_buffer_read_whole_and_through_a_view() {
    let k = parse_kernel(VIEWS_LOOP).unwrap();
    crate_verify(&k);
    for (m, s) in [(5usize, 1usize), (64, 64), (70, 150), (3, 0)] {
        let mut rng = Rng(0x10a ^ (m * 1000 + s) as u64);
        let (qb, q) = random(&mut rng, DType::F16, m * 128, -1.0, 1.0);
        let (kb, kv) = random(&mut rng, DType::F16, s.max(1) * 128, -1.0, 1.0);
        let want = views_loop_reference(&q, &kv, m, s);
        let tensors =
            vec![t2(qb.clone(), m, 128, 2), t2(kb.clone(), s.max(1), 128, 2), t2(vec![0xFF; 4 * m * 64], m, 64, 4)];
        let dims = [m as i64, s as i64];
        let mut schedules = Vec::new();
        for target in [Target::Sm80, Target::Sm90a] {
            for c in variants(&k, target) {
                let what = format!("{} {} m={m} s={s}", target.name(), c.schedule);
                schedules.push(c.schedule.to_string());
                let out = sim::run_interleavings(&c.function, &k, tensors.clone(), &dims, &[], None);
                let got = decode(DType::F32, &out[2]);
                let err = rel_l2(&got, &want);
                assert!(
                    err <= 5e-3 || (s == 0 && got.iter().all(|v| *v == 0.0)),
                    "{what}: relative L2 error {err:.3e}"
                );
            }
        }
        for want_schedule in ["warp_specialized_loop", "tma_copy", "cp_async_pipeline"] {
            assert!(schedules.iter().any(|s| s == want_schedule), "no {want_schedule} variant: {schedules:?}");
        }
        let mut args = vec![(qb, vec![m, 128]), (kb, vec![s.max(1), 128]), (vec![0u8; 4 * m * 64], vec![m, 64])];
        if s == 0 {
            continue;
        }
        interp_run(&k, &mut args);
        let err = rel_l2(&decode(DType::F32, &args[2].0), &want);
        assert!(err <= 5e-3 || s == 0, "interpreter m={m} s={s}: {err:.3e}");
    }
}

/// The f64 reference of [`VIEWS_LOOP`] (`m` query rows, `s` keys): per key
/// block, `P = f16(Q · Kᵀ)` over the block's keys, `out += P · V` with `V`
/// the first 64 columns of the keys.
fn views_loop_reference(q: &[f64], kv: &[f64], m: usize, s: usize) -> Vec<f64> {
    let mut want = vec![0.0; m * 64];
    for i in 0..m {
        for kb0 in (0..s).step_by(64) {
            let p: Vec<f64> = (kb0..(kb0 + 64).min(s))
                .map(|j| f16r((0..128).map(|c| q[i * 128 + c] * kv[j * 128 + c]).sum()))
                .collect();
            for d in 0..64 {
                want[i * 64 + d] += p.iter().enumerate().map(|(jj, pj)| pj * kv[(kb0 + jj) * 128 + d]).sum::<f64>();
            }
        }
    }
    want
}

fn crate_verify(k: &Kernel) {
    if let Err(e) = verify::verify(k) {
        panic!("{}: {e:?}", k.name);
    }
}

/// Runs `k` in the interpreter on `args` (bytes, shape), every tensor writable.
fn interp_run(k: &Kernel, args: &mut [(Vec<u8>, Vec<usize>)]) {
    let mut a: Vec<interp::Arg<'_>> = args
        .iter_mut()
        .map(|(b, shape)| interp::Arg::Tensor { data: interp::TensorData::Rw(b.as_mut_slice()), shape: shape.clone() })
        .collect();
    interp::launch(k, &mut a).unwrap_or_else(|e| panic!("{}: {e}", k.name));
}

/// The same loop with V in a buffer of its own, on sm_90a's cp.async
/// pipeline: its wgmmas read stages its cp.asyncs wrote, so a
/// `fence.proxy.async` must come between (the barrier pass's); against the
/// reference under interleavings, and with the fences taken out the
/// simulator reports the wgmma's read of generic-proxy writes.
#[test]
fn sm90a_cp_async_pipeline_wgmma_fence() {
    let text = VIEWS_LOOP
        .replace("@5 v_s: shared f16[64, 64] = view kv_s[0, 0]", "@5 v_s: shared f16[64, 64]")
        .replace("    copy kv[k * 64, 0] -> kv_s\n", "    copy kv[k * 64, 0] -> kv_s\n    copy kv[k * 64, 0] -> v_s\n");
    let k = parse_kernel(&text).unwrap();
    crate_verify(&k);
    let c = variants(&k, Target::Sm90a).into_iter().find(|c| c.schedule == "cp_async_pipeline").unwrap();
    let problem = |m: usize, s: usize| {
        let mut rng = Rng(0xfe ^ (m * 1000 + s) as u64);
        let (qb, q) = random(&mut rng, DType::F16, m * 128, -1.0, 1.0);
        let (kb, kv) = random(&mut rng, DType::F16, s.max(1) * 128, -1.0, 1.0);
        let tensors = vec![t2(qb, m, 128, 2), t2(kb, s.max(1), 128, 2), t2(vec![0xFF; 4 * m * 64], m, 64, 4)];
        (tensors, views_loop_reference(&q, &kv, m, s))
    };
    for (m, s) in [(5usize, 1usize), (64, 64), (70, 150)] {
        let (tensors, want) = problem(m, s);
        let out = sim::run_interleavings(&c.function, &k, tensors, &[m as i64, s as i64], &[], None);
        let err = rel_l2(&decode(DType::F32, &out[2]), &want);
        assert!(err <= 5e-3, "m={m} s={s}: relative L2 error {err:.3e}");
    }
    fn unfenced(body: &mut Vec<thread_ir::Stmt>) -> usize {
        let before = body.len();
        body.retain(|s| !matches!(s, thread_ir::Stmt::Inst { inst: thread_ir::Inst::FenceProxyAsync, .. }));
        let mut n = before - body.len();
        for s in body.iter_mut() {
            match s {
                thread_ir::Stmt::If { then, otherwise, .. } => n += unfenced(then) + unfenced(otherwise),
                thread_ir::Stmt::For { body, .. } => n += unfenced(body),
                _ => {}
            }
        }
        n
    }
    let mut f = c.function.clone();
    assert!(unfenced(&mut f.body) > 0, "no fence.proxy.async to take out");
    let (tensors, _) = problem(70, 150);
    let dims = [70, 150];
    let r = std::panic::catch_unwind(move || sim::run_interleavings(&f, &k, tensors, &dims, &[], None));
    let e = r.expect_err("wgmmas reading cp.async stages without a fence went unnoticed");
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("has not executed fence.proxy.async since"), "{msg}");
}

/// A view that is not whole panels of a buffer laid out in 64-column panels
/// (a gemm operand with views) is a compile error at the view, on every
/// target; the same view of a buffer no gemm reads (row-major) compiles.
#[test]
fn a_view_off_the_panels_is_a_compile_error_at_the_view() {
    let text = VIEWS_GEMM
        .replace("@6 x_hi: shared f16[64, 64] = view x_s[0, 64]", "@6 x_hi: shared f16[64, 64] = view x_s[0, 32]")
        .replace("  gemm x_hi, w_hi.t -> s\n", "");
    let mut k = parse_kernel(&text).unwrap();
    let span = SpanId(5);
    k.buffers[6].span = span;
    crate_verify(&k);
    for target in [Target::Sm80, Target::Sm90a] {
        let errs = compile(&k, target).expect_err("a view off the panels compiles");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].span, span);
        let msg = &errs[0].message;
        assert!(
            msg.contains("view `x_hi` of `x_s` at [0, 32] is not expressible in the layout of `x_s`")
                && msg.contains("not whole panels of 64 columns"),
            "{msg}"
        );
    }
    // Without the gemm on `x_lo`, `x_s` is row-major and the view is fine.
    let text = text.replace("  gemm x_lo, w_lo.t -> s, clear\n", "  fill s, 0.0\n");
    let k = parse_kernel(&text).unwrap();
    for target in [Target::Sm80, Target::Sm90a] {
        compile(&k, target).unwrap_or_else(|e| panic!("{e:?}"));
    }
}

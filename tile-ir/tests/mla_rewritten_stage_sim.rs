//! A pipelined copy whose destination the loop body writes afterwards: the
//! MLA split kernel's shape (`examples/kernels/mla_decode.rs`: K as
//! `kv_s` [64, d] and `kpe_s` [64, dp], V = `kv_s`, whose rows past the
//! sequence the body zeroes in the stage before P·V), narrowed to d 128.
//!
//! The warp-specialized loop pipelines `kv_s` (its producer issues it as TMA
//! into a ring, the consumers release the stage after P·V, the last
//! statement touching it); the cp.async and TMA-copy pipelines, which refill
//! a stage at the top of the next iteration, refuse it and say why. The KV
//! copies carry `cache=evict_first` (TMA's L2 hint), and the two gemms into
//! S are chained (the first left in flight). On the
//! simulator (races, TMA, mbarriers, wgmma operands checked) against an f64
//! reference, the keys past each batch's length NaN in the tensor (so a
//! zeroing that missed the stage P·V reads, or came after it, leaks NaN),
//! loops of 0, 1 (partial and full block), 2 and 3 key blocks (a stage
//! reused, its parity flipped); the same run with a zeroing whose condition
//! never holds shows that the NaN keys are read.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{decode, random, rel_l2, Rng};
use sim::SimTensor;
use tile_ir::passes::pipeline;
use tile_ir::print::parse_kernel;
use tile_ir::*;

const D: usize = 128;
const DP: usize = 64;
const DK: usize = D + DP;

/// The kernel; `zero_v`: the zeroing of V's rows past the sequence is
/// right (else its condition never holds: the same code, a planted bug).
fn kernel(zero_v: bool) -> String {
    kernel_with(zero_v, false)
}

/// [`kernel`]; `rope_first`: K_pe copied first and `S = Q_pe·K_peᵀ` first
/// (the chain's first gemm is then K_pe's ring's last user, and its stage
/// is refilled a P·V earlier).
fn kernel_with(zero_v: bool, rope_first: bool) -> String {
    let past = if zero_v { "len" } else { "len + 1000000" };
    let (load_kv, load_kpe) = (
        "copy kv[bz, kb * 64.., 0..] -> kv_s, cache=evict_first".to_string(),
        format!("copy kv[bz, kb * 64.., {D}..] -> kpe_s, cache=evict_first"),
    );
    let (nope, rope) = ("gemm q_s, kv_s.t -> s", "gemm qpe_s, kpe_s.t -> s");
    let loads_and_scores = if rope_first {
        format!("{load_kpe}\n    {load_kv}\n    {rope}, clear, policy=full_col\n    {nope}, policy=full_col")
    } else {
        format!("{load_kv}\n    {load_kpe}\n    {nope}, clear, policy=full_col\n    {rope}, policy=full_col")
    };
    format!(
        "kernel mla_rewritten<%0 B, %1 H, %2 S>(@0 q: &f16[B, H, {DK}], @1 kv: &f16[B, S, {DK}], @2 seqlens: &i32[B], @3 out: &mut f32[B, H, {D}], %3 scale: f32) threads=256 grid=((H + 63) / 64, B, 1) {{
  %4 hx = block_idx.x
  %5 bz = block_idx.y
  @4 q_s: shared f16[64, {D}]
  @5 qpe_s: shared f16[64, {DP}]
  @6 kv_s: shared f16[64, {D}]
  @7 kpe_s: shared f16[64, {DP}]
  @8 p_s: shared f16[64, 64]
  @9 s: fragment f32[64, 64]
  @10 acc: fragment f32[64, {D}]
  @11 m: fragment f32[64]
  @12 m_s: fragment f32[64]
  @13 alpha: fragment f32[64]
  @14 l: fragment f32[64]
  @15 row_sum: fragment f32[64]
  let %6 len: i32 = seqlens[bz]
  copy q[bz, hx * 64.., 0..] -> q_s
  copy q[bz, hx * 64.., {D}..] -> qpe_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %7 kb in pipelined(2) 0..(len + 63) / 64 {{
    {loads_and_scores}
    if (kb + 1) * 64 > len {{
      for %8 i in parallel 0..64 {{
        for %9 j in parallel 0..64 {{
          if kb * 64 + %9 >= len {{
            s[%8, %9] = -inf
          }}
        }}
      }}
    }}
    copy m -> alpha
    reduce.max s -> m, dim=1, keep
    for %10 i in parallel 0..64 {{
      m_s[%10] = select(m[%10] == -inf, 0.0, m[%10] * scale)
      alpha[%10] = exp2(alpha[%10] * scale - m_s[%10])
    }}
    for %11 i in parallel 0..64 {{
      for %12 j in parallel 0..64 {{
        s[%11, %12] = exp2(s[%11, %12] * scale - m_s[%11])
      }}
    }}
    reduce.sum s -> row_sum, dim=1
    for %13 i in parallel 0..64 {{
      l[%13] = l[%13] * alpha[%13] + row_sum[%13]
    }}
    for %14 i in parallel 0..64 {{
      for %15 j in parallel 0..{D} {{
        acc[%14, %15] = acc[%14, %15] * alpha[%14]
      }}
    }}
    if (kb + 1) * 64 > len {{
      for %16 j in parallel 0..64 {{
        for %17 c in parallel 0..{D} {{
          if kb * 64 + %16 >= {past} {{
            kv_s[%16, %17] = 0.0f16
          }}
        }}
      }}
    }}
    copy s -> p_s
    gemm p_s, kv_s -> acc, policy=full_col
  }}
  for %18 i in parallel 0..64 {{
    alpha[%18] = select(l[%18] == 0.0, 0.0, 1.0 / l[%18])
  }}
  for %19 i in parallel 0..64 {{
    for %20 j in parallel 0..{D} {{
      acc[%19, %20] = acc[%19, %20] * alpha[%19]
    }}
  }}
  copy acc -> out[bz, hx * 64.., 0..]
}}"
    )
}

/// Per (batch, head): the base-2 softmax of `q·k` over the batch's first
/// `len` keys times V (the first `D` columns of kv); zeros without keys.
fn reference(q: &[f64], kv: &[f64], lens: &[usize], h: usize, s: usize, scale: f64) -> Vec<f64> {
    let mut out = vec![0.0; lens.len() * h * D];
    for (bi, &len) in lens.iter().enumerate() {
        for hi in 0..h {
            if len == 0 {
                continue;
            }
            let qr = &q[(bi * h + hi) * DK..][..DK];
            let key = |j: usize| &kv[(bi * s + j) * DK..][..DK];
            let sc: Vec<f64> = (0..len).map(|j| (0..DK).map(|c| qr[c] * key(j)[c]).sum()).collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|x| ((x - mx) * scale).exp2()).collect();
            let l: f64 = w.iter().sum();
            for c in 0..D {
                out[(bi * h + hi) * D + c] = (0..len).map(|j| w[j] * key(j)[c]).sum::<f64>() / l;
            }
        }
    }
    out
}

fn variant(k: &Kernel, schedule: &str) -> Compiled {
    variant_with(k, schedule, CompileOptions::default())
}

fn variant_with(k: &Kernel, schedule: &str, options: CompileOptions) -> Compiled {
    let v = compile_variants(k, Target::Sm90a, options).unwrap_or_else(|e| panic!("{e:?}"));
    v.into_iter().find(|c| c.schedule == schedule).unwrap_or_else(|| panic!("no {schedule} variant"))
}

#[test]
fn only_the_warp_specialized_loop_pipelines_a_rewritten_stage() {
    let k = parse_kernel(&kernel(true)).unwrap();
    let kv_s = k.buffers.iter().position(|b| b.name == "kv_s").map(|i| BufferId(i as u32)).unwrap();
    let kpe_s = k.buffers.iter().position(|b| b.name == "kpe_s").map(|i| BufferId(i as u32)).unwrap();
    let serial = pipeline::plan(&k);
    assert_eq!(serial.stages_of(kv_s), 1);
    assert_eq!(serial.stages_of(kpe_s), 2);
    assert!(serial.rewritten.is_empty());
    assert!(serial.refusals.iter().any(|r| r.contains("`kv_s`") && r.contains("writes")), "{:?}", serial.refusals);
    let ws = pipeline::plan_with(&k, true);
    assert_eq!(ws.stages_of(kv_s), 2);
    assert!(ws.rewritten.contains(&kv_s) && !ws.rewritten.contains(&kpe_s));
    // The producer issues both copies (a ring each), the consumers load nothing themselves.
    let c = variant(&k, "warp_specialized_loop");
    assert!(!c.ptx.contains("cp.async.cg") && !c.ptx.contains("cp.async.ca"), "consumers load with cp.async");
    // Two rings of two stages and Q's barrier, and kv_s's two boxes of 64
    // columns each on a barrier of its own per stage (its first reader is
    // Q·Kᵀ, which waits for each box before the slices reading it).
    assert_eq!(c.ptx.matches("mbarrier.init").count(), 2 * 2 * 2 + 1 + 2 * 2);
    assert_eq!(c.ptx.matches("mbarrier.arrive.expect_tx").count(), 2 + 1 + 1, "kv_s's pieces, kpe_s, Q");
    let off = variant_with(&k, "warp_specialized_loop", CompileOptions { piece_barriers: false, ..Default::default() });
    assert_eq!(off.ptx.matches("mbarrier.init").count(), 2 * 2 * 2 + 1, "one full barrier per stage");
    assert_eq!(off.ptx.matches("mbarrier.arrive.expect_tx").count(), 3);
    // Q·Kᵀ over the nope columns is left in flight into `S += Q_pe·K_peᵀ`:
    // three gemms, three commits, two waits.
    let count = |p: &str| c.ptx.matches(p).count();
    assert_eq!((count("wgmma.commit_group"), count("wgmma.wait_group.sync.aligned 0")), (3, 2));
    // `.evict_first()`: one L2 policy made before the producer's loop, on
    // its three boxes per iteration (kv_s: two of 64 columns, kpe_s: one),
    // not on Q's.
    assert_eq!(c.ptx.matches("createpolicy.fractional.L2::evict_first.b64").count(), 1);
    let hinted = c.ptx.lines().filter(|l| l.contains("cp.async.bulk.tensor") && l.contains(".L2::cache_hint")).count();
    let boxes = c.ptx.lines().filter(|l| l.contains("cp.async.bulk.tensor")).count();
    assert_eq!((hinted, boxes), (3, 3 + 3), "{}", c.ptx);
    if let Some(report) = ptxas::assemble("mla_rewritten", &c.ptx, "sm_90a") {
        assert!(!report.contains("spill stores") || report.contains(" 0 bytes spill stores"), "{report}");
    }
    // The TMA-copy variant issues the hinted kpe_s as TMA too (kv_s, not
    // pipelined there, is a plain copy).
    let t = variant(&k, "tma_copy");
    assert!(t.ptx.contains("createpolicy.fractional.L2::evict_first.b64") && t.ptx.contains(".L2::cache_hint"));
    // Printed and parsed back.
    let text = tile_ir::print::print_kernel(&k);
    assert!(text.contains("-> kv_s, cache=evict_first"), "{text}");
    assert_eq!(parse_kernel(&text).unwrap().body, k.body);
}

/// The simulator's inputs: loops of 0, 1 (partial), 1 (full), 2 and 3
/// key blocks, the keys past each length NaN (f16 0x7e00); the scale
/// parameter, the dims and the lengths.
struct SimCase {
    tensors: Vec<SimTensor>,
    dims: [i64; 3],
    scale: f32,
    lens: Vec<usize>,
    want: Vec<f64>,
}

fn sim_case() -> SimCase {
    let lens = vec![0usize, 50, 64, 100, 190];
    let (b, h, s) = (lens.len(), 64usize, 192usize);
    let scale = (std::f64::consts::LOG2_E / (DK as f64).sqrt()) as f32;
    let mut rng = Rng(0x6d6c61);
    let (qb, q) = random(&mut rng, DType::F16, b * h * DK, -1.0, 1.0);
    let (mut kb, mut kv) = random(&mut rng, DType::F16, b * s * DK, -1.0, 1.0);
    for (bi, &len) in lens.iter().enumerate() {
        for j in len..s {
            for c in 0..DK {
                let at = (bi * s + j) * DK + c;
                kb[2 * at..2 * at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
                kv[at] = f64::NAN;
            }
        }
    }
    let seqlens: Vec<u8> = lens.iter().flat_map(|&l| (l as i32).to_le_bytes()).collect();
    let want = reference(&q, &kv, &lens, h, s, scale as f64);
    let tensors = vec![
        SimTensor { bytes: qb, shape: vec![b, h, DK], elem: 2 },
        SimTensor { bytes: kb, shape: vec![b, s, DK], elem: 2 },
        SimTensor { bytes: seqlens, shape: vec![b], elem: 4 },
        SimTensor { bytes: vec![0xFF; 4 * b * h * D], shape: vec![b, h, D], elem: 4 },
    ];
    SimCase { tensors, dims: [b as i64, h as i64, s as i64], scale, lens, want }
}

impl SimCase {
    /// Runs `c` on the simulator; its output.
    fn run(&self, c: &Compiled, k: &Kernel, opts: sim::RunOptions) -> Vec<f64> {
        let params = [self.scale.to_bits() as u64];
        let out = sim::run_compiled(c, k, self.tensors.clone(), &self.dims, &params, opts).tensors;
        decode(DType::F32, &out[3])
    }

    /// Every output finite, zero for an empty batch, else within 5e-3 of
    /// the reference (relative L2 per batch).
    fn check(&self, got: &[f64]) {
        let h = self.dims[1] as usize;
        for (bi, &len) in self.lens.iter().enumerate() {
            let rows = bi * h * D..(bi + 1) * h * D;
            let (g, w) = (&got[rows.clone()], &self.want[rows]);
            assert!(g.iter().all(|x| x.is_finite()), "len {len}: non-finite output");
            if len == 0 {
                assert!(g.iter().all(|&x| x == 0.0), "len 0: output not zero");
            } else {
                let err = rel_l2(g, w);
                assert!(err <= 5e-3, "len {len}: relative L2 error {err:.3e}");
            }
        }
    }
}

#[test]
fn rewritten_stage_on_the_simulator() {
    let k = parse_kernel(&kernel(true)).unwrap();
    let c = variant(&k, "warp_specialized_loop");
    let case = sim_case();
    let (tensors, dims, scale) = (|| case.tensors.clone(), case.dims, case.scale);
    let run = |c: &Compiled, k: &Kernel| case.run(c, k, Default::default());
    let check = |got: &[f64]| case.check(got);
    // With kv_s's boxes on barriers of their own (the default) and on one
    // barrier per stage.
    check(&run(&c, &k));
    let off = variant_with(&k, "warp_specialized_loop", CompileOptions { piece_barriers: false, ..Default::default() });
    check(&run(&off, &k));
    // The persistent variant over 2 blocks (3 and 2 tiles of 0 to 3 key
    // blocks: the rings' and the pieces' phases carried across tiles), with
    // and without the pieces.
    for pieces in [true, false] {
        let options = CompileOptions { wsloop_persistent: true, piece_barriers: pieces, ..Default::default() };
        let p = variant_with(&k, "warp_specialized_loop_persistent", options);
        assert_eq!(p.ptx.matches("mbarrier.arrive.expect_tx").count() > 3, pieces);
        let opts = sim::RunOptions { shape: Some([2, 1, 1]), ..Default::default() };
        check(&case.run(&p, &k, opts));
    }
    // Planted: Q·Kᵀ not waiting for kv_s's second box (the wait between
    // its wgmmas) reads columns TMA has not written yet.
    let mut f = c.function.clone();
    let mut dropped = 0;
    for s in f.body.iter_mut() {
        if let thread_ir::Stmt::For { uniform: true, body, .. } = s {
            dropped += drop_wait_between_wgmmas(body);
        }
    }
    assert_eq!(dropped, 1);
    let planted = std::panic::catch_unwind(|| {
        let out = sim::run_function(&f, &k, tensors(), &dims, &[scale.to_bits() as u64], Default::default()).tensors;
        decode(DType::F32, &out[3])
    });
    assert!(
        planted.map_or(true, |got| std::panic::catch_unwind(|| check(&got)).is_err()),
        "reading kv_s's second box before it lands went unnoticed"
    );
    // Planted: with a zeroing that never happens the NaN keys reach the output.
    let bare = parse_kernel(&kernel(false)).unwrap();
    let got = run(&variant(&bare, "warp_specialized_loop"), &bare);
    assert!(got.iter().any(|x| x.is_nan()), "the NaN keys past the lengths are never read");
}

/// Removes the first `mbarrier` wait at the top level of `body` that sits
/// between two wgmmas (a pieced gemm's wait for its second box); how many.
fn drop_wait_between_wgmmas(body: &mut Vec<thread_ir::Stmt>) -> usize {
    use thread_ir::{Inst, Stmt};
    let is = |s: &Stmt, f: &dyn Fn(&Inst) -> bool| matches!(s, Stmt::Inst { inst, .. } if f(inst));
    let wgmma = |i: &Inst| matches!(i, Inst::Wgmma { .. });
    let Some(first) = body.iter().position(|s| is(s, &wgmma)) else { return 0 };
    let Some(at) = (first..body.len()).find(|&i| is(&body[i], &|i| matches!(i, Inst::MbarWait { .. }))) else {
        return 0;
    };
    if !body[at..].iter().any(|s| is(s, &wgmma)) {
        return 0;
    }
    body.remove(at);
    1
}

/// The consumers' key loop at the top level of `body`.
fn key_loop(body: &mut [thread_ir::Stmt]) -> &mut Vec<thread_ir::Stmt> {
    body.iter_mut()
        .find_map(|s| match s {
            thread_ir::Stmt::For { uniform: true, body, .. } if body.iter().any(is_wgmma) => Some(body),
            _ => None,
        })
        .expect("a key loop with wgmmas")
}

fn is_wgmma(s: &thread_ir::Stmt) -> bool {
    matches!(s, thread_ir::Stmt::Inst { inst: thread_ir::Inst::Wgmma { .. }, .. })
}

fn position(body: &[thread_ir::Stmt], f: impl Fn(&thread_ir::Inst) -> bool) -> Option<usize> {
    body.iter().position(|s| matches!(s, thread_ir::Stmt::Inst { inst, .. } if f(inst)))
}

/// K_pe's gemm first (`S = Q_pe·K_peᵀ`, then `S += Q·Kᵀ`): the chain's first
/// gemm is K_pe's ring's last user. It is still left in flight into the
/// second, and the ring is released after the chain's wait, not after its
/// own wgmmas (whose reads of the stage are pending until that wait);
/// right on the simulator in the plain and persistent variants, and a
/// release moved before that wait (the producer may refill the stage under
/// the pending wgmmas) is caught.
#[test]
fn rope_first_chain_releases_after_its_wait() {
    use thread_ir::Inst;
    let k = parse_kernel(&kernel_with(true, true)).unwrap();
    let c = variant(&k, "warp_specialized_loop");
    let count = |p: &str| c.ptx.matches(p).count();
    assert_eq!((count("wgmma.commit_group"), count("wgmma.wait_group.sync.aligned 0")), (3, 2), "{}", c.ptx);
    let mut f = c.function.clone();
    let body = key_loop(&mut f.body);
    let first_wgmma = body.iter().position(is_wgmma).unwrap();
    let wait = position(body, |i| matches!(i, Inst::WgmmaWait { pending: 0 })).unwrap();
    let release = position(body, |i| matches!(i, Inst::MbarArrive { .. })).unwrap();
    assert!(first_wgmma < wait && wait < release, "wgmma {first_wgmma}, wait {wait}, release {release}");
    let case = sim_case();
    case.check(&case.run(&c, &k, Default::default()));
    let off = variant_with(&k, "warp_specialized_loop", CompileOptions { piece_barriers: false, ..Default::default() });
    case.check(&case.run(&off, &k, Default::default()));
    let options = CompileOptions { wsloop_persistent: true, ..Default::default() };
    let p = variant_with(&k, "warp_specialized_loop_persistent", options);
    case.check(&case.run(&p, &k, sim::RunOptions { shape: Some([2, 1, 1]), ..Default::default() }));
    // Planted: K_pe's release moved before the chain's wait.
    let moved = body.remove(release);
    body.insert(wait, moved);
    let planted = std::panic::catch_unwind(|| {
        let params = [case.scale.to_bits() as u64];
        let out = sim::run_function(&f, &k, case.tensors.clone(), &case.dims, &params, Default::default()).tensors;
        decode(DType::F32, &out[3])
    });
    assert!(
        planted.map_or(true, |got| std::panic::catch_unwind(|| case.check(&got)).is_err()),
        "a release of K_pe's stage under pending wgmmas went unnoticed"
    );
}

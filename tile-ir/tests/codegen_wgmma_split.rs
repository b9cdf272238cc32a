//! wgmma with the output's columns split over warpgroups and with N over
//! several instructions (the gemm shapes of MLA decode), in the general
//! sm_90a lowering and in the warp-specialized loop: kernels in text form
//! compiled for `Target::Sm90a` and run on the Thread IR simulator (its
//! wgmma semantics are the PTX ISA's, `sim/hopper.rs`, independent of the
//! lowering) against f64 references at awkward sizes.
//!
//! - plain `FullCol` gemms over two warpgroups sharing M = 64 (N = 64,
//!   128, 320, 512: one warpgroup per half of the columns), over four
//!   (quarters), 2×2 warpgroups with `Square` (M = 128, N = 128 and 256:
//!   `gemm_tune`'s 512-thread tile), and one warpgroup with N = 320
//!   (256 + 64, A shared);
//! - an MLA-shaped attention kernel (M = 64 rows shared by 256 threads,
//!   S = Q·KVᵀ with K = 192 and both gemms `FullCol`, row max and sum across
//!   the two warpgroups, P through shared memory, O[64, 128] += P·V)
//!   against the f64 attention reference, general and warp-specialized;
//! - ptxas assembles the variants without spills (`TILE_PTXAS`);
//! - register A with the columns split is a compile error saying why.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{attention_reference, decode, random, reference, rel_l2, run_on, wgmma_ns, Rng};
use tile_ir::print::parse_kernel;
use tile_ir::*;

fn compiled(text: &str) -> Compiled {
    let k = parse_kernel(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    compile(&k, Target::Sm90a).unwrap_or_else(|e| panic!("compile {}: {e:?}", k.name))
}

/// ptxas (when present) assembles `c` for sm_90a without spills; the
/// registers it used.
fn assert_no_spills(c: &Compiled, name: &str) -> Option<u32> {
    let r = ptxas::assemble(name, &c.ptx, "sm_90a")?;
    assert!(r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"), "{name} spills:\n{r}");
    assert!(!r.contains("serialized"), "{name}: ptxas serializes the wgmmas:\n{r}");
    r.split("Used ").nth(1).and_then(|x| x.split(' ').next()).and_then(|x| x.parse().ok())
}

/// One tile `C[BM, BN] = A[BM, K] · op(B)`, K in steps of `bk`, with `policy`.
struct G {
    threads: u32,
    bm: i64,
    bn: i64,
    bk: i64,
    tb: bool,
    policy: &'static str,
}

impl G {
    fn text(&self) -> String {
        let G { threads, bm, bn, bk, tb, policy } = *self;
        let b_shape = if tb { "N, K" } else { "K, N" };
        let b_s = if tb { format!("{bn}, {bk}") } else { format!("{bk}, {bn}") };
        let b_org = if tb { format!("bx * {bn}, k * {bk}") } else { format!("k * {bk}, bx * {bn}") };
        let bt = if tb { ".t" } else { "" };
        format!(
            "kernel g<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[{b_shape}], @2 c: &mut f32[M, N]) threads={threads} grid=((N + {bn1}) / {bn}, (M + {bm1}) / {bm}, 1) {{
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[{bm}, {bk}]
  @4 b_s: shared f16[{b_s}]
  @5 acc: fragment f32[{bm}, {bn}]
  fill acc, 0.0
  for %5 k in 0..(K + {bk1}) / {bk} {{
    copy a[by * {bm}, k * {bk}] -> a_s
    copy b[{b_org}] -> b_s
    gemm a_s, b_s{bt} -> acc, policy={policy}
  }}
  copy acc -> c[by * {bm}, bx * {bn}]
}}",
            bn1 = bn - 1,
            bm1 = bm - 1,
            bk1 = bk - 1,
        )
    }

    fn check(&self, m: usize, n: usize, kk: usize) {
        let mut rng = Rng(0x5B1D ^ (m * 7919 + n * 31 + kk) as u64);
        let (ab, av) = random(&mut rng, DType::F16, m * kk, -1.0, 1.0);
        let (bb, bv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
        let out = run_on(
            Target::Sm90a,
            &self.text(),
            vec![ab, bb, vec![0xFF; 4 * m * n]],
            &[m as i64, kk as i64, n as i64],
            &[],
        );
        let got = decode(DType::F32, &out[2]);
        let want = reference(m, n, kk, &av, &bv, false, self.tb);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                "{}x{}x{} over {} threads: C[{}, {}] = {g}, want {w}",
                self.bm,
                self.bn,
                self.bk,
                self.threads,
                i / n,
                i % n
            );
        }
    }
}

/// `FullCol` over warpgroups that share the 64 rows: each issues its own
/// instructions over its columns (N per instruction = its share, or 256s
/// when the share is wider), on the simulator against the f64 gemm.
#[test]
fn full_col_gemms_split_the_columns_over_warpgroups() {
    // (gemm, instruction Ns per k16 step, problem m × n × k)
    let cases = [
        (G { threads: 256, bm: 64, bn: 64, bk: 32, tb: true, policy: "full_col" }, vec![32], (64, 60, 40)),
        (G { threads: 256, bm: 64, bn: 128, bk: 32, tb: false, policy: "full_col" }, vec![64], (50, 128, 70)),
        (G { threads: 256, bm: 64, bn: 128, bk: 64, tb: true, policy: "full_col" }, vec![64], (64, 130, 64)),
        (G { threads: 256, bm: 64, bn: 320, bk: 32, tb: true, policy: "full_col" }, vec![160], (64, 320, 48)),
        (G { threads: 256, bm: 64, bn: 512, bk: 16, tb: false, policy: "full_col" }, vec![256], (64, 500, 16)),
        (G { threads: 512, bm: 64, bn: 256, bk: 16, tb: false, policy: "full_col" }, vec![64], (64, 256, 20)),
        (G { threads: 512, bm: 128, bn: 128, bk: 32, tb: true, policy: "square" }, vec![64], (130, 128, 32)),
        // `gemm_tune`'s 128×256×32 tile over 512 threads: 2×2 warpgroups of 64×128.
        (G { threads: 512, bm: 128, bn: 256, bk: 32, tb: false, policy: "square" }, vec![128], (128, 250, 40)),
        (G { threads: 128, bm: 64, bn: 320, bk: 16, tb: false, policy: "full_col" }, vec![256, 64], (64, 320, 30)),
    ];
    for (g, per_step, (m, n, kk)) in cases {
        let c = compiled(&g.text());
        let ns = wgmma_ns(&c.ptx);
        let steps = (g.bk / 16) as usize;
        let want: Vec<u32> = (0..steps).flat_map(|_| per_step.iter().copied()).collect();
        assert_eq!(ns, want, "{}x{}x{} over {} threads:\n{}", g.bm, g.bn, g.bk, g.threads, c.thread_ir);
        assert!(!c.ptx.contains("mma.sync"), "{}", c.thread_ir);
        assert_no_spills(&c, &format!("wgmma_split_{}_{}_{}_{}", g.threads, g.bm, g.bn, g.bk));
        g.check(m, n, kk);
    }
}

/// `FullRow` never splits N, and a split whose B has no descriptor at a
/// warpgroup's first column keeps mma.sync (and computes the same).
#[test]
fn splits_without_a_descriptor_keep_mma_sync() {
    for g in [
        G { threads: 256, bm: 64, bn: 64, bk: 32, tb: false, policy: "full_col" },
        G { threads: 256, bm: 64, bn: 320, bk: 16, tb: false, policy: "full_col" },
    ] {
        let c = compiled(&g.text());
        assert!(c.ptx.contains("mma.sync") && !c.ptx.contains("wgmma"), "{}", c.thread_ir);
        g.check(64, g.bn as usize, 40);
    }
}

/// Register A when the columns are split: every warpgroup would need all
/// of A's rows; the compile error says so and what to do.
#[test]
fn register_a_with_split_columns_is_refused() {
    let text =
        "kernel pv(@0 a: &f16[64, 64], @1 b: &f16[64, 128], @2 c: &mut f32[64, 128]) threads=256 grid=(1, 1, 1) {
  @3 p: fragment f16[64, 64]
  @4 v_s: shared f16[64, 128]
  @5 acc: fragment f32[64, 128]
  copy a[0, 0] -> p
  copy b[0, 0] -> v_s
  gemm p, v_s -> acc, clear, policy=full_col
  copy acc -> c[0, 0]
}";
    let k = parse_kernel(text).unwrap();
    let e = format!("{:?}", compile(&k, Target::Sm90a).unwrap_err());
    assert!(e.contains("split over 2 warpgroups") && e.contains("stage `p` through shared memory"), "{e}");
}

/// The MLA-shaped kernel: 64 query rows shared by two warpgroups; the
/// scores `s = q_s · kv_sᵀ` (K = `dk`) and `o += p_s · v_s` both `FullCol`;
/// the key loop pipelined over `stages` (0: a serial loop).
fn mla_text(dk: i64, dv: i64, stages: u32) -> String {
    let kind = if stages > 0 { format!("pipelined({stages}) ") } else { String::new() };
    format!(
        "kernel mla_split<%0 SQ, %1 SK>(@0 q: &f16[SQ, {dk}], @1 kv: &f16[SK, {dk}], @2 v: &f16[SK, {dv}], @3 o: &mut f16[SQ, {dv}], %2 scale: f32) threads=256 grid=((SQ + 63) / 64, 1, 1) {{
  %3 bx = block_idx.x
  @4 q_s: shared f16[64, {dk}]
  @5 kv_s: shared f16[64, {dk}]
  @6 v_s: shared f16[64, {dv}]
  @7 s: fragment f32[64, 64]
  @8 p: fragment f16[64, 64]
  @9 p_s: shared f16[64, 64]
  @10 acc: fragment f32[64, {dv}]
  @11 m: fragment f32[64]
  @12 m_prev: fragment f32[64]
  @13 l: fragment f32[64]
  @14 row_sum: fragment f32[64]
  copy q[bx * 64, 0] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %4 kb in {kind}0..(SK + 63) / 64 {{
    copy kv[kb * 64, 0] -> kv_s
    copy v[kb * 64, 0] -> v_s
    gemm q_s, kv_s.t -> s, clear, policy=full_col
    for %5 i in parallel 0..64 {{
      for %6 j in parallel 0..64 {{
        if kb * 64 + %6 >= SK {{
          s[%5, %6] = -inf
        }}
      }}
    }}
    copy m -> m_prev
    reduce.max s -> m, dim=1, keep
    for %7 i in parallel 0..64 {{
      for %8 j in parallel 0..64 {{
        s[%7, %8] = exp2((s[%7, %8] - m[%7]) * scale)
      }}
    }}
    reduce.sum s -> row_sum, dim=1
    for %9 i in parallel 0..64 {{
      l[%9] = l[%9] * exp2((m_prev[%9] - m[%9]) * scale) + row_sum[%9]
    }}
    for %10 i in parallel 0..64 {{
      for %11 j in parallel 0..{dv} {{
        acc[%10, %11] = acc[%10, %11] * exp2((m_prev[%10] - m[%10]) * scale)
      }}
    }}
    copy s -> p
    copy p -> p_s
    gemm p_s, v_s -> acc, policy=full_col
  }}
  for %12 i in parallel 0..64 {{
    for %13 j in parallel 0..{dv} {{
      acc[%12, %13] = acc[%12, %13] / l[%12]
    }}
  }}
  copy acc -> o[bx * 64, 0]
}}"
    )
}

fn mla_inputs(sq: usize, sk: usize, dk: usize, dv: usize) -> (Vec<Vec<u8>>, Vec<f64>) {
    gemm_sim::mla_inputs(0x31A, sq, sk, dk, dv)
}

/// The general lowering: both gemms split the columns over the two
/// warpgroups (32 score columns and 64 output columns each), the row max
/// and sum combine the warpgroups' halves through shared memory.
#[test]
fn mla_shaped_attention_general_on_the_simulator() {
    let (dk, dv) = (192usize, 128usize);
    let text = mla_text(dk as i64, dv as i64, 2);
    let c = compiled(&text);
    let ks = dk / 16 + 64 / 16;
    assert_eq!(wgmma_ns(&c.ptx), [vec![32; dk / 16], vec![64; 64 / 16]].concat(), "{}", c.thread_ir);
    assert_eq!(wgmma_ns(&c.ptx).len(), ks);
    assert!(!c.ptx.contains("mma.sync"));
    let scale = (std::f64::consts::LOG2_E / (dk as f64).sqrt()) as f32;
    for (sq, sk) in [(64, 64), (50, 130), (70, 20)] {
        let (tensors, want) = mla_inputs(sq, sk, dk, dv);
        let out = run_on(Target::Sm90a, &text, tensors, &[sq as i64, sk as i64], &[scale.to_bits() as u64]);
        let err = rel_l2(&decode(DType::F16, &out[3]), &want);
        assert!(err <= 5e-3, "mla sq={sq} sk={sk}: relative L2 error {err:.3e}");
    }
    let _ = attention_reference;
}

/// The same kernel's warp-specialized loop variant (a producer warpgroup
/// issuing TMA, the two consumer warpgroups splitting the columns), under
/// several interleavings, for loops of 1, 2 and 3 key blocks.
#[test]
fn mla_shaped_attention_warp_specialized_on_the_simulator() {
    let (dk, dv) = (192usize, 128usize);
    let text = mla_text(dk as i64, dv as i64, 2);
    let k = parse_kernel(&text).unwrap();
    let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let c = v.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
    assert!(wgmma_ns(&c.ptx).contains(&32) && wgmma_ns(&c.ptx).contains(&64), "{}", c.thread_ir);
    let scale = (std::f64::consts::LOG2_E / (dk as f64).sqrt()) as f32;
    for (sq, sk) in [(64, 33), (61, 128), (64, 150)] {
        let (tensors, want) = mla_inputs(sq, sk, dk, dv);
        let shapes = [vec![sq, dk], vec![sk, dk], vec![sk, dv], vec![sq, dv]];
        let tensors =
            tensors.into_iter().zip(shapes).map(|(bytes, shape)| sim::SimTensor { bytes, shape, elem: 2 }).collect();
        let out =
            sim::run_interleavings(&c.function, &k, tensors, &[sq as i64, sk as i64], &[scale.to_bits() as u64], None);
        let err = rel_l2(&decode(DType::F16, &out[3]), &want);
        assert!(err <= 5e-3, "mla ws sq={sq} sk={sk}: relative L2 error {err:.3e}");
    }
}

/// ptxas: the MLA-shaped kernel at TileLang's size (K = 576, O = 64×512
/// f32 over 256 threads: 128 accumulator registers each, 2×256 halves;
/// a serial key loop, as V is loaded apart from K here and two stages of
/// both do not fit in shared memory) assembles without spills.
#[test]
fn mla_full_size_assembles_without_spills() {
    let text = mla_text(576, 512, 0);
    let k = parse_kernel(&text).unwrap();
    let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    for c in &v {
        let ns = wgmma_ns(&c.ptx);
        assert!(ns.contains(&32) && ns.contains(&256) && !c.ptx.contains("mma.sync"), "{}: {ns:?}", c.schedule);
        if let Some(regs) = assert_no_spills(c, &format!("mla_576_512_{}", c.schedule)) {
            eprintln!("mla 576/512 {}: {regs} registers", c.schedule);
        }
    }
}

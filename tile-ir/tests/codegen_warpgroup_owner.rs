//! Gemms that one warpgroup runs alone (`policy=warpgroup(w)`) and the
//! fragments derived from them: MLA decode's shape, where warpgroup `w`
//! computes the scores `s = q_s · kv_sᵀ` (N = 64 on one warpgroup instead
//! of two halves of N = 32), their row maximum and exponentials, and hands
//! P and the rows' rescale to both warpgroups through shared memory, while
//! both hold half of O (`full_col`). Kernels in text form, compiled for
//! sm_90a (wgmma, the general lowering and the warp-specialized loop with
//! per-piece barriers) and sm_80 (mma.sync on the owner's four warps), run
//! on the Thread IR simulator (its races and deadlocks fail the test)
//! against the f64 reference, owner 0 and owner 1.
//!
//! Also: the statements on the owner's fragments sit in its branches (one
//! per stretch of them), the scores are one N = 64 wgmma per k16 slice (a
//! chain of two issued with no wait between), O split in halves of one
//! warpgroup each (views of V) shares registers across the warpgroups and
//! computes the same, a stage read only through views is waited for in
//! every pipelined variant, ptxas assembles the variants without spills,
//! and the mistakes are errors that say what to do (mixing one
//! warpgroup's fragment with all threads', a warpgroup the block lacks, 128
//! rows, a reduction its warps would need a barrier for).

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{decode, rel_l2, run_on, wgmma_ns};
use tile_ir::print::{parse_kernel, print_kernel};
use tile_ir::*;

/// The scores' gemm and everything on them on warpgroup `owner`; P and
/// the rescale through shared memory; O `[64, dv]` over both warpgroups.
/// `stages` 0: a serial key loop.
fn owner_text(owner: u32, dk: i64, dv: i64, stages: u32) -> String {
    let kind = if stages > 0 { format!("pipelined({stages}) ") } else { String::new() };
    format!(
        "kernel mla_owner<%0 SQ, %1 SK>(@0 q: &f16[SQ, {dk}], @1 kv: &f16[SK, {dk}], @2 v: &f16[SK, {dv}], @3 o: &mut f16[SQ, {dv}], %2 scale: f32) threads=256 grid=((SQ + 63) / 64, 1, 1) {{
  %3 bx = block_idx.x
  @4 q_s: shared f16[64, {dk}]
  @5 kv_s: shared f16[64, {dk}]
  @6 v_s: shared f16[64, {dv}]
  @7 s: fragment f32[64, 64]
  @8 p_s: shared f16[64, 64]
  @9 acc: fragment f32[64, {dv}]
  @10 m: fragment f32[64]
  @11 m_prev: fragment f32[64]
  @12 l: fragment f32[64]
  @13 row_sum: fragment f32[64]
  @14 alpha_s: shared f32[64]
  @15 l_s: shared f32[64]
  copy q[bx * 64, 0] -> q_s
  fill acc, 0.0
  fill l, 0.0
  fill m, -inf
  for %4 kb in {kind}0..(SK + 63) / 64 {{
    copy kv[kb * 64, 0] -> kv_s
    copy v[kb * 64, 0] -> v_s
    gemm q_s, kv_s.t -> s, clear, policy=warpgroup({owner})
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
      alpha_s[%9] = exp2((m_prev[%9] - m[%9]) * scale)
    }}
    copy s -> p_s
    for %10 i in parallel 0..64 {{
      for %11 j in parallel 0..{dv} {{
        acc[%10, %11] = acc[%10, %11] * alpha_s[%10]
      }}
    }}
    gemm p_s, v_s -> acc, policy=full_col
  }}
  for %12 i in parallel 0..64 {{
    l_s[%12] = l[%12]
  }}
  for %13 i in parallel 0..64 {{
    for %14 j in parallel 0..{dv} {{
      acc[%13, %14] = acc[%13, %14] / l_s[%13]
    }}
  }}
  copy acc -> o[bx * 64, 0]
}}"
    )
}

fn inputs(sq: usize, sk: usize, dk: usize, dv: usize) -> (Vec<Vec<u8>>, Vec<f64>) {
    gemm_sim::mla_inputs(0x0E1, sq, sk, dk, dv)
}

fn scale(dk: usize) -> u64 {
    ((std::f64::consts::LOG2_E / (dk as f64).sqrt()) as f32).to_bits() as u64
}

fn assert_no_spills(c: &Compiled, name: &str) {
    if let Some(r) = ptxas::assemble(name, &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"), "{name} spills:\n{r}");
        assert!(!r.contains("serialized"), "{name}: ptxas serializes the wgmmas:\n{r}");
    }
}

/// The general lowering on both targets, owner 0 and 1: the scores are
/// N = 64 wgmmas (sm_90a) on the owner alone, and the results match at
/// sizes with partial row and key blocks.
#[test]
fn one_warpgroups_scores_general_on_both_targets() {
    let (dk, dv) = (128usize, 128usize);
    for owner in [0, 1] {
        let text = owner_text(owner, dk as i64, dv as i64, 2);
        let k = parse_kernel(&text).unwrap();
        // The text form keeps the owner.
        assert!(print_kernel(&k).contains(&format!("policy=warpgroup({owner})")));
        assert_eq!(parse_kernel(&print_kernel(&k)).unwrap(), k);
        let c = compile(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(wgmma_ns(&c.ptx), [vec![64; dk / 16], vec![64; 64 / 16]].concat(), "{}", c.thread_ir);
        assert_no_spills(&c, &format!("owner_general_{owner}"));
        for target in [Target::Sm90a, Target::Sm80] {
            for (sq, sk) in [(64, 64), (50, 130), (70, 20)] {
                let (tensors, want) = inputs(sq, sk, dk, dv);
                let out = run_on(target, &text, tensors, &[sq as i64, sk as i64], &[scale(dk)]);
                let err = rel_l2(&decode(DType::F16, &out[3]), &want);
                assert!(err <= 5e-3, "owner {owner} {target:?} sq={sq} sk={sk}: relative L2 error {err:.3e}");
            }
        }
    }
}

/// A chain of two gemms into the scores (the same product twice: the
/// second accumulates, as MLA's rope part does), so the scores are twice
/// `q·kvᵀ` and the kernel's scale is halved.
fn chained(text: &str, owner: u32) -> String {
    let gemm = format!("    gemm q_s, kv_s.t -> s, clear, policy=warpgroup({owner})\n");
    text.replace(&gemm, &format!("{gemm}    gemm q_s, kv_s.t -> s, policy=warpgroup({owner})\n"))
}

/// The warp-specialized loop (a producer warpgroup's TMA, per-piece
/// barriers on `kv_s`'s three boxes waited for in the owner's branch and
/// in the other's `else`) under several interleavings, for loops of 1, 2
/// and 3 key blocks, owner 0 and 1; and with the scores a chain of two
/// gemms, issued as one stretch (no wait between them).
#[test]
fn one_warpgroups_scores_warp_specialized_on_the_simulator() {
    let (dk, dv) = (192usize, 128usize);
    for (owner, chain) in [(0, false), (1, false), (0, true)] {
        let text = owner_text(owner, dk as i64, dv as i64, 2);
        let text = if chain { chained(&text, owner) } else { text };
        let k = parse_kernel(&text).unwrap();
        let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
        let c = v.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
        assert!(wgmma_ns(&c.ptx).iter().all(|&n| n == 64), "{}", c.thread_ir);
        assert_no_spills(c, &format!("owner_ws_{owner}_{chain}"));
        if chain {
            // The scores' wgmmas (the first 2·dk/16) with no wait among them.
            let lines: Vec<&str> = c.ptx.lines().map(str::trim).collect();
            let scores: Vec<usize> =
                (0..lines.len()).filter(|&i| lines[i].starts_with("wgmma.mma_async")).take(2 * dk / 16).collect();
            let waits =
                (scores[0]..*scores.last().unwrap()).filter(|&i| lines[i].starts_with("wgmma.wait_group")).count();
            assert_eq!(waits, 0, "a wait inside the chain:\n{}", c.thread_ir);
        }
        let kernel_scale =
            |dk: usize| if chain { (f32::from_bits(scale(dk) as u32) / 2.0).to_bits() as u64 } else { scale(dk) };
        for (sq, sk) in [(64, 33), (61, 128), (64, 150)] {
            let (tensors, want) = inputs(sq, sk, dk, dv);
            let shapes = [vec![sq, dk], vec![sk, dk], vec![sk, dv], vec![sq, dv]];
            let tensors = tensors
                .into_iter()
                .zip(shapes)
                .map(|(bytes, shape)| sim::SimTensor { bytes, shape, elem: 2 })
                .collect();
            let out =
                sim::run_interleavings(&c.function, &k, tensors, &[sq as i64, sk as i64], &[kernel_scale(dk)], None);
            let err = rel_l2(&decode(DType::F16, &out[3]), &want);
            assert!(err <= 5e-3, "owner {owner} ws sq={sq} sk={sk}: relative L2 error {err:.3e}");
        }
    }
}

/// O as two halves, one per warpgroup (each half's gemm on its warpgroup
/// alone, reading a column view of `v_s`), the scores on warpgroup 0.
fn halves_text(dk: i64, stages: u32) -> String {
    let kind = if stages > 0 { format!("pipelined({stages}) ") } else { String::new() };
    format!(
        "kernel mla_halves<%0 SQ, %1 SK>(@0 q: &f16[SQ, {dk}], @1 kv: &f16[SK, {dk}], @2 v: &f16[SK, 128], @3 o: &mut f16[SQ, 128], %2 scale: f32) threads=256 grid=((SQ + 63) / 64, 1, 1) {{
  %3 bx = block_idx.x
  @4 q_s: shared f16[64, {dk}]
  @5 kv_s: shared f16[64, {dk}]
  @6 v_s: shared f16[64, 128]
  @7 v_l: shared f16[64, 64] = view @6[0, 0]
  @8 v_r: shared f16[64, 64] = view @6[0, 64]
  @9 s: fragment f32[64, 64]
  @10 p_s: shared f16[64, 64]
  @11 o_l: fragment f32[64, 64]
  @12 o_r: fragment f32[64, 64]
  @13 m: fragment f32[64]
  @14 m_prev: fragment f32[64]
  @15 l: fragment f32[64]
  @16 row_sum: fragment f32[64]
  @17 alpha_s: shared f32[64]
  @18 l_s: shared f32[64]
  copy q[bx * 64, 0] -> q_s
  fill o_l, 0.0
  fill o_r, 0.0
  fill l, 0.0
  fill m, -inf
  for %4 kb in {kind}0..(SK + 63) / 64 {{
    copy kv[kb * 64, 0] -> kv_s
    copy v[kb * 64, 0] -> v_s
    gemm q_s, kv_s.t -> s, clear, policy=warpgroup(0)
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
      alpha_s[%9] = exp2((m_prev[%9] - m[%9]) * scale)
    }}
    copy s -> p_s
    for %10 i in parallel 0..64 {{
      for %11 j in parallel 0..64 {{
        o_l[%10, %11] = o_l[%10, %11] * exp2((m_prev[%10] - m[%10]) * scale)
      }}
    }}
    for %12 i in parallel 0..64 {{
      for %13 j in parallel 0..64 {{
        o_r[%12, %13] = o_r[%12, %13] * alpha_s[%12]
      }}
    }}
    gemm p_s, v_l -> o_l, policy=warpgroup(0)
    gemm p_s, v_r -> o_r, policy=warpgroup(1)
  }}
  for %14 i in parallel 0..64 {{
    l_s[%14] = l[%14]
  }}
  for %15 i in parallel 0..64 {{
    for %16 j in parallel 0..64 {{
      o_l[%15, %16] = o_l[%15, %16] / l[%15]
    }}
  }}
  for %17 i in parallel 0..64 {{
    for %18 j in parallel 0..64 {{
      o_r[%17, %18] = o_r[%17, %18] / l_s[%17]
    }}
  }}
  copy o_l -> o[bx * 64, 0]
  copy o_r -> o[bx * 64, 64]
}}"
    )
}

/// The accumulator registers of each `m64n64` wgmma of a PTX module.
fn wgmma_accumulators(ptx: &str) -> Vec<String> {
    ptx.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("wgmma.mma_async"))
        .map(|l| l.split('{').nth(1).and_then(|x| x.split('}').next()).unwrap_or("").to_string())
        .collect()
}

/// The relative L2 error of the halves kernel `k` compiled as `c` on the
/// simulator under interleavings, at `(sq, sk, dk, dv)`.
fn simulated_error(c: &Compiled, k: &Kernel, (sq, sk, dk, dv): (usize, usize, usize, usize)) -> f64 {
    let (tensors, want) = inputs(sq, sk, dk, dv);
    let shapes = [vec![sq, dk], vec![sk, dk], vec![sk, dv], vec![sq, dv]];
    let tensors =
        tensors.into_iter().zip(shapes).map(|(bytes, shape)| sim::SimTensor { bytes, shape, elem: 2 }).collect();
    let out = sim::run_interleavings(&c.function, k, tensors, &[sq as i64, sk as i64], &[scale(dk)], None);
    rel_l2(&decode(DType::F16, &out[3]), &want)
}

/// O's right half (warpgroup 1's) takes the registers of one of warpgroup
/// 0's fragments (a thread runs only its warpgroup's statements), and the
/// results match, general and warp-specialized, under interleavings.
#[test]
fn halves_of_one_warpgroup_each_share_registers() {
    let (dk, dv) = (128usize, 128usize);
    let text = halves_text(dk as i64, 2);
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e:?}"));
    // (Without the scores issued one iteration ahead, into twin registers.)
    let plain = CompileOptions { lookahead: false, ..CompileOptions::default() };
    for c in &compile_variants(&k, Target::Sm90a, plain).unwrap_or_else(|e| panic!("{e:?}")) {
        let acc = wgmma_accumulators(&c.ptx);
        // The scores, O's left half (warpgroup 0's) and its right half
        // (warpgroup 1's, in registers of one of the others, all three
        // fragments of 32 registers): two register sets in all.
        let sets: std::collections::HashSet<&String> = acc.iter().collect();
        assert_eq!(sets.len(), 2, "{}: {sets:?}", c.schedule);
    }
    let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    for c in &v {
        assert_no_spills(c, &format!("halves_{}", c.schedule));
    }
    for (sq, sk) in [(64, 64), (50, 130)] {
        let (tensors, want) = inputs(sq, sk, dk, dv);
        let out = run_on(Target::Sm90a, &text, tensors, &[sq as i64, sk as i64], &[scale(dk)]);
        let err = rel_l2(&decode(DType::F16, &out[3]), &want);
        assert!(err <= 5e-3, "halves general sq={sq} sk={sk}: relative L2 error {err:.3e}");
    }
    // And with each warpgroup's P·V left in flight until needed
    // (`wsloop_owner_waits`): warpgroup 0's half still reads `v_s` when
    // warpgroup 1's, the ring's last reader, is retired, so it is retired
    // before the stage is released (the simulator caught the release
    // racing the producer's refill).
    let owner = CompileOptions { wsloop_owner_waits: true, ..CompileOptions::default() };
    let w = compile_variants(&k, Target::Sm90a, owner).unwrap_or_else(|e| panic!("{e:?}"));
    for v in [&v, &w] {
        let c = v.iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant");
        for (sq, sk) in [(64, 33), (61, 150)] {
            let err = simulated_error(c, &k, (sq, sk, dk, dv));
            assert!(err <= 5e-3, "halves ws sq={sq} sk={sk}: relative L2 error {err:.3e}");
        }
    }
}

/// The owner's statements are in its branches, joined where they follow
/// each other: the general variant's loop has one branch on the owner's
/// predicate per stretch between the block's barriers, not one per
/// statement.
#[test]
fn the_owners_statements_share_branches() {
    let text = owner_text(1, 64, 64, 0);
    let c = compile(&parse_kernel(&text).unwrap(), Target::Sm90a).unwrap_or_else(|e| panic!("{e:?}"));
    let preds = &c.function.warpgroup_preds;
    assert_eq!(preds.len(), 1, "one warpgroup predicate");
    fn branches(body: &[thread_ir::Stmt], p: thread_ir::Reg, n: &mut usize) {
        for s in body {
            match s {
                thread_ir::Stmt::If { cond, then, otherwise, .. } => {
                    *n += (*cond == p) as usize;
                    branches(then, p, n);
                    branches(otherwise, p, n);
                }
                thread_ir::Stmt::For { body, .. } => branches(body, p, n),
                _ => {}
            }
        }
    }
    let mut n = 0;
    branches(&c.function.body, preds[0].0, &mut n);
    // Before the loop (the fills), in it: the scores' gemm .. the row max
    // (then a barrier: `m_prev`'s copy and the mask are the owner's too,
    // the rescale's write waits for the last iteration's reads), the
    // exponentials .. P's copy, and after it the rows' sums to `l_s`.
    assert!((3..=6).contains(&n), "{n} branches on the owner's predicate:\n{}", c.thread_ir);
}

/// A statement that mixes one warpgroup's fragment with a fragment of all
/// threads is a layout conflict naming the warpgroup; a warpgroup the block
/// lacks, 128 rows, and a reduction across the owner's warps are errors.
#[test]
fn mistakes_are_errors_that_say_why() {
    let mixed = owner_text(0, 64, 64, 0).replace("* alpha_s[%10]", "* m[%10]");
    let e = format!("{:?}", compile(&parse_kernel(&mixed).unwrap(), Target::Sm90a).unwrap_err());
    assert!(e.contains("warpgroup 0's") && e.contains("acc"), "{e}");

    let missing = owner_text(2, 64, 64, 0);
    let e = format!("{:?}", verify::verify(&parse_kernel(&missing).unwrap()).unwrap_err());
    assert!(e.contains("warpgroup 2 does not exist"), "{e}");

    let tall = "kernel t(@0 a: &f16[128, 64], @1 c: &mut f32[128, 64]) threads=256 grid=(1, 1, 1) {
  @2 a_s: shared f16[128, 64]
  @3 acc: fragment f32[128, 64]
  copy a[0, 0] -> a_s
  gemm a_s, a_s -> acc, clear, policy=warpgroup(0)
  copy acc -> c[0, 0]
}";
    let e = format!("{:?}", verify::verify(&parse_kernel(tall).unwrap()).unwrap_err());
    assert!(e.contains("has 128 rows; one warpgroup computes 64"), "{e}");

    let across = "kernel t(@0 a: &f16[64, 64], @1 c: &mut f32[64]) threads=256 grid=(1, 1, 1) {
  @2 a_s: shared f16[64, 64]
  @3 acc: fragment f32[64, 64]
  @4 col: fragment f32[64]
  copy a[0, 0] -> a_s
  gemm a_s, a_s -> acc, clear, policy=warpgroup(1)
  reduce.sum acc -> col, dim=0
  copy col -> c[0]
}";
    for target in [Target::Sm90a, Target::Sm80] {
        let e = format!("{:?}", compile(&parse_kernel(across).unwrap(), target).unwrap_err());
        assert!(e.contains("reduce of `acc` along dim 0") && e.contains("its warps split that dim"), "{e}");
    }
}

/// A pipelined stage read only through views (O's halves over `v_s`, all
/// gemms over both warpgroups here): every variant waits for the stage
/// before the first view's reader. The cp.async and TMA-copy pipelines
/// placed the wait by the buffer's own readers, found none, and the views'
/// gemms raced with the copy (a race, or bytes not landed, on the
/// simulator).
#[test]
fn a_stage_read_only_through_views_is_waited_for() {
    let (dk, dv) = (128usize, 128usize);
    let text = halves_text(dk as i64, 2)
        .replace("policy=warpgroup(0)", "policy=full_col")
        .replace("policy=warpgroup(1)", "policy=full_col")
        .replace("o_l[%15, %16] / l[%15]", "o_l[%15, %16] / l_s[%15]")
        .replace("o_l[%10, %11] * exp2((m_prev[%10] - m[%10]) * scale)", "o_l[%10, %11] * alpha_s[%10]");
    let k = parse_kernel(&text).unwrap();
    let variants = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = variants.iter().map(|c| c.schedule).collect();
    assert!(names.contains(&"tma_copy") && names.contains(&"cp_async_pipeline"), "{names:?}");
    for c in &variants {
        for (sq, sk) in [(64, 130), (61, 64)] {
            let err = simulated_error(c, &k, (sq, sk, dk, dv));
            assert!(err <= 5e-3, "{} sq={sq} sk={sk}: relative L2 error {err:.3e}", c.schedule);
        }
    }
}

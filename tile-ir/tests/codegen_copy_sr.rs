//! The cost of the pipelined copies in the steady-state loop of the example
//! GEMM (`examples/kernels/gemm.rs` before it moved to 128×256×64; 128×128×32,
//! 3 stages, f16): the copy
//! addresses and masks are strength-reduced (`lower/reduced_copy.rs`), so
//! that after the loop's barrier each thread spends only a few integer
//! instructions per 16-byte cp.async before its first ldmatrix; and the
//! reduction is exact at awkward sizes, checked on the Thread IR simulator
//! against an f64 reference, including copies whose advancing dim is not
//! the innermost one (A stored `[K, M]`), a loop start other than 0 and
//! leading (batch) tensor dims.
// The check walks PTX lines by index (it also looks at neighbours).
#![allow(clippy::needless_range_loop)]

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{random, run, Rng};
use half::f16;
use std::collections::{HashMap, HashSet};
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{Matmul, MATMUL, MATMUL_128X256};

/// `c[b] = a[b]ᵀ · w` over k-tiles `1..`: A stored `[batch, K, M]` (the copy
/// advances along a non-innermost dim, under a leading batch dim), the loop
/// starts at 1 (the first k-tile is skipped), f32 output.
const BATCHED_TN_FROM_1: &str = "kernel batched_tn<%0 B, %1 K, %2 M, %3 N>(@0 a: &f16[B, K, M], @1 w: &f16[K, N], @2 c: &mut f32[B, M, N]) threads=128 grid=((N + 63) / 64, (M + 63) / 64, B) {
  %4 bx = block_idx.x
  %5 by = block_idx.y
  %6 bz = block_idx.z
  @3 a_s: shared f16[32, 64]
  @4 w_s: shared f16[32, 64]
  @5 acc: fragment f32[64, 64]
  fill acc, 0.0
  for %7 k in pipelined(3) 1..(K + 31) / 32 {
    copy a[bz, k * 32.., by * 64..] -> a_s
    copy w[k * 32, bx * 64] -> w_s
    gemm a_s.t, w_s -> acc
  }
  copy acc -> c[bz, by * 64.., bx * 64..]
}";

fn is_reg(t: &str) -> bool {
    t.starts_with('%')
        && t[1..].starts_with(|c: char| c.is_ascii_lowercase())
        && t.ends_with(|c: char| c.is_ascii_digit())
}

fn reg_tokens(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '%' || c == '_')).filter(|t| is_reg(t)).collect()
}

/// The live integer instructions (after removing those whose result no
/// instruction reads) between the barrier of the first pipelined loop and
/// its first ldmatrix, and the number of cp.asyncs there.
fn refill_cost(ptx: &str) -> (usize, Vec<String>) {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let is_inst = |l: &str| l.ends_with(';') && !l.starts_with('.') && !l.starts_with("//");
    let pure = |l: &str| {
        let op = l.split_whitespace().next().unwrap_or("");
        !["st.", "cp.", "ld.", "atom", "red", "ldmatrix", "mma", "bar", "bra", "@"].iter().any(|p| op.starts_with(p))
    };
    let dst = |l: &str| l.split_whitespace().nth(1).map(|t| t.trim_end_matches(',').to_string());
    let mut dead: HashSet<usize> = HashSet::new();
    loop {
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for (i, l) in lines.iter().enumerate() {
            if is_inst(l) && !dead.contains(&i) {
                for t in reg_tokens(l) {
                    *uses.entry(t).or_default() += 1;
                }
            }
        }
        let newly: Vec<usize> = (0..lines.len())
            .filter(|&i| is_inst(lines[i]) && !dead.contains(&i) && pure(lines[i]))
            .filter(|&i| dst(lines[i]).is_some_and(|d| is_reg(&d) && uses.get(d.as_str()).copied() == Some(1)))
            .collect();
        if newly.is_empty() {
            break;
        }
        dead.extend(newly);
    }
    let head = lines.iter().position(|l| l.starts_with("$L_head")).expect("a loop");
    let bar = (head..lines.len()).find(|&i| lines[i].starts_with("bar.sync")).expect("the loop's barrier");
    // The refill ends at its commit (before the stage's reads: ldmatrix
    // addresses for mma.sync, descriptors for wgmma on sm_90a).
    let ldm = (bar..lines.len()).find(|&i| lines[i].starts_with("cp.async.commit_group")).expect("the refill's commit");
    let mut chunks = 0;
    let mut live = Vec::new();
    for i in bar + 1..ldm {
        let l = lines[i];
        if !is_inst(l) || dead.contains(&i) {
            continue;
        }
        if l.starts_with("cp.async.cg") || l.starts_with("cp.async.ca") {
            chunks += 1;
        } else if pure(l) {
            live.push(l.to_string());
        }
    }
    (chunks, live)
}

#[test]
fn steady_state_refill_costs_a_few_instructions_per_chunk() {
    let k = parse_kernel(&MATMUL.text()).unwrap_or_else(|e| panic!("parse: {e:?}"));
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile(&k, target).unwrap_or_else(|e| panic!("{e:?}"));
        let (chunks, live) = refill_cost(&c.ptx);
        // 128×32 + 32×128 f16 tiles, 256 threads: 2 + 2 chunks of 16 bytes each.
        assert_eq!(chunks, 4, "{}", c.ptx);
        // Per iteration: next k, its test, the refill stage (3); per chunk a
        // compare, an and with the loop-invariant mask, a select of the byte
        // count, the stage's shared address and (for a chunk in another
        // row) one mad.wide; per copy the address and `rest` updates.
        // Before the reduction it was ~17 per chunk.
        assert!(
            live.len() <= 6 * chunks + 8,
            "{} integer instructions for {chunks} chunks:\n{}",
            live.len(),
            live.join("\n")
        );
        eprintln!("{}: {} integer instructions for {chunks} cp.async chunks", target.name(), live.len());
        if let Ok(dir) = std::env::var("TILE_DUMP") {
            let _ = std::fs::write(format!("{dir}/matmul_{}.ptx", target.name()), &c.ptx);
        }
    }
}

#[test]
fn example_gemm_matches_reference_at_edges() {
    // K a multiple of 8 (strength-reduced 16-byte copies) and not (the
    // general version of the loop); M, N off the tile; K below, at and
    // above stages · 32.
    for (m, n, kk) in [(130, 136, 72), (129, 130, 200), (3, 8, 8), (140, 72, 33), (65, 129, 96)] {
        let mut rng = Rng(0xC0FFEE ^ (m * 7 + n * 131 + kk) as u64);
        let (ab, av) = random(&mut rng, DType::F16, m * kk, -1.0, 1.0);
        let (bb, bv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
        let out = run(&MATMUL.text(), vec![ab, bb, vec![0xFF; 2 * m * n]], &[m as i64, kk as i64, n as i64], &[]);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..kk).map(|p| av[i * kk + p] * bv[p * n + j]).sum();
                let got =
                    f16::from_bits(u16::from_le_bytes([out[2][2 * (i * n + j)], out[2][2 * (i * n + j) + 1]])).to_f64();
                assert!(
                    (got - want).abs() <= 2e-2 * (1.0 + want.abs()),
                    "{m}x{n}x{kk}: C[{i},{j}] = {got}, want {want}"
                );
            }
        }
    }
}

#[test]
fn batched_transposed_copy_from_a_nonzero_start_matches_reference() {
    for (bt, kk, m, n) in [(2usize, 104usize, 70usize, 72usize), (3, 64, 64, 64), (1, 40, 8, 16), (2, 200, 33, 65)] {
        let mut rng = Rng(0xBA7C4 ^ (bt * 1000 + kk * 10 + m + n) as u64);
        let (ab, av) = random(&mut rng, DType::F16, bt * kk * m, -1.0, 1.0);
        let (wb, wv) = random(&mut rng, DType::F16, kk * n, -1.0, 1.0);
        let out = run(
            BATCHED_TN_FROM_1,
            vec![ab, wb, vec![0xFF; 4 * bt * m * n]],
            &[bt as i64, kk as i64, m as i64, n as i64],
            &[],
        );
        for z in 0..bt {
            for i in 0..m {
                for j in 0..n {
                    // k-tiles from 1: rows 32.. of K.
                    let want: f64 = (32.min(kk)..kk).map(|p| av[(z * kk + p) * m + i] * wv[p * n + j]).sum();
                    let o = 4 * ((z * m + i) * n + j);
                    let got = f32::from_le_bytes([out[2][o], out[2][o + 1], out[2][o + 2], out[2][o + 3]]) as f64;
                    assert!(
                        (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                        "{bt}x{kk}x{m}x{n}: C[{z},{i},{j}] = {got}, want {want}"
                    );
                }
            }
        }
    }
}

/// The example's configuration (`examples/kernels/gemm.rs`: 128×256×64 tiles,
/// 3 stages, 256 threads, f16 and bf16, B plain or transposed) assembles for
/// sm_80 and sm_90a without spills; its epilogue stores 16-byte vectors
/// (staged through the dead B stage buffers) with no more registers or
/// shared memory than the direct 4-byte stores.
#[test]
fn example_configuration_assembles_without_spills() {
    for (dt, gemm_b) in [("f16", "b_s"), ("bf16", "b_s"), ("f16", "b_s.t")] {
        let text = Matmul { dtype: dt, trans_b: gemm_b == "b_s.t", ..MATMUL_128X256 }.text();
        let k = parse_kernel(&text).unwrap_or_else(|e| panic!("parse: {e:?}\n{text}"));
        for (target, arch) in [(Target::Sm80, "sm_80"), (Target::Sm90a, "sm_90a")] {
            let c = compile(&k, target).unwrap_or_else(|e| panic!("{dt} {gemm_b} {arch}: {e:?}"));
            let direct =
                compile_with(&k, target, CompileOptions { stage_epilogues: false, ..CompileOptions::default() })
                    .unwrap_or_else(|e| panic!("{dt} {gemm_b} {arch} (direct): {e:?}"));
            // The epilogue goes through shared memory (16-byte stores) in the
            // memory of the dead B stages: no more shared memory than before.
            assert!(c.ptx.contains("st.global.v4.b32"), "{dt} {gemm_b} {arch}: no 16-byte stores in the epilogue");
            assert!(
                !direct.ptx.contains("st.global.v4"),
                "{dt} {gemm_b} {arch}: the direct epilogue has 16-byte stores"
            );
            assert_eq!(
                c.shared_bytes, direct.shared_bytes,
                "{dt} {gemm_b} {arch}: the epilogue scratch needs more shared memory"
            );
            if let (Some(report), Some(direct_report)) = (
                ptxas::assemble("matmul_example", &c.ptx, arch),
                ptxas::assemble("matmul_example_direct", &direct.ptx, arch),
            ) {
                assert!(
                    report.contains("0 bytes spill stores") && report.contains("0 bytes spill loads"),
                    "{dt} {gemm_b} ({arch}) spills:\n{report}"
                );
                let regs = |r: &str| -> u32 {
                    r.split("Used ")
                        .nth(1)
                        .and_then(|t| t.split(' ').next())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(u32::MAX)
                };
                assert!(
                    regs(&report) <= regs(&direct_report),
                    "{dt} {gemm_b} ({arch}): staged epilogue uses {} registers, direct {}",
                    regs(&report),
                    regs(&direct_report)
                );
            }
        }
    }
}

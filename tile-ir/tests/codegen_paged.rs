//! Paged attention (issue 13, items 1 and 2): the K and V tiles' origin is
//! a page index read from a block table in the loop body
//! (`tile_testkit::PAGED_ATTENTION`, `tests/kernels/paged.rs` of the facade).
//! The pipeline prefetches them (the table read `stages − 1` iterations
//! ahead, only for iterations below the trip count) in all three pipelining
//! schedules: the cp.async pipeline (sm_80, sm_90a), the TMA copies
//! (thread 0 reads the page index) and the warp-specialized loop (the
//! producer reads it; one consumer warpgroup, and two with the ping-pong:
//! `tile_testkit::paged_attention_text(128, 256)`). Each variant runs on the Thread IR simulator under
//! several interleavings against an f64 reference: pages out of order, a
//! never-referenced page, ragged lengths with loops of 0, 1, 2 and 5 pages
//! (partial last pages). The cp.async waits are per copy (K is waited for
//! at the top, V before the P·V gemm, neither for the other's prefetch).
//! The variants assemble without spills; a kernel that writes its table is
//! not pipelined, and says why.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{decode, random, Rng};
use sim::SimTensor;
use tile_ir::print::parse_kernel;
use tile_ir::schedule::Schedule;
use tile_ir::thread_ir::{Inst, Stmt as TStmt};
use tile_ir::*;
use tile_testkit::{attention_text, paged_attention_text, PAGED_ATTENTION};

fn kernel() -> Kernel {
    parse_kernel(PAGED_ATTENTION).unwrap_or_else(|e| panic!("{e:?}"))
}

/// 128 query rows over two consumer warpgroups: the warp-specialized loop
/// with the default options (its ping-pong).
fn kernel_2wg() -> Kernel {
    parse_kernel(&paged_attention_text(128, 256)).unwrap_or_else(|e| panic!("{e:?}"))
}

/// The default options with the one-consumer-warpgroup variant of the
/// warp-specialized loop on (the default plan leaves 128 threads with a
/// gemm to the TMA-copy variant).
fn opts() -> CompileOptions {
    CompileOptions { wsloop_one_warpgroup: true, ..CompileOptions::default() }
}

/// Every variant of the kernel on both targets: (target, variant).
fn variants(k: &Kernel) -> Vec<(Target, Compiled)> {
    let mut out = Vec::new();
    for target in [Target::Sm80, Target::Sm90a] {
        let v = compile_variants(k, target, opts()).unwrap_or_else(|e| panic!("{e:?}"));
        out.extend(v.into_iter().map(|c| (target, c)));
    }
    out
}

const D: usize = 64;
const PAGE: usize = 64;

/// A problem: `sq` query rows for each batch of `seqlens`; its tensors (the
/// output poisoned), dims and the f64 reference of the output.
fn problem(sq: usize, seqlens: &[usize], seed: u64) -> (Vec<SimTensor>, [i64; 4], Vec<f64>) {
    let mut rng = Rng(seed);
    let b = seqlens.len();
    let blocks: Vec<usize> = seqlens.iter().map(|s| s.div_ceil(PAGE)).collect();
    let max_blocks = blocks.iter().copied().max().unwrap_or(0) + 1;
    let pages = blocks.iter().sum::<usize>() + 1;
    // Pages in a shuffled order; one page nobody references.
    let mut order: Vec<usize> = (0..pages).collect();
    for i in (1..pages).rev() {
        let j = (rng.f32(0.0, 1.0) * (i as f32 + 1.0)) as usize % (i + 1);
        order.swap(i, j);
    }
    let mut table = vec![pages as i32 + 7; b * max_blocks];
    let mut next = 0;
    for (bi, &n) in blocks.iter().enumerate() {
        for kb in 0..n {
            table[bi * max_blocks + kb] = order[next] as i32;
            next += 1;
        }
    }
    let (qb, qv) = random(&mut rng, DType::F16, b * sq * D, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, DType::F16, pages * PAGE * D, -2.0, 2.0);
    let (vb, vv) = random(&mut rng, DType::F16, pages * PAGE * D, -1.0, 1.0);
    let i32s = |x: &[i32]| x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let lens: Vec<i32> = seqlens.iter().map(|&s| s as i32).collect();
    let tensors = vec![
        SimTensor { bytes: qb, shape: vec![b, sq, D], elem: 2 },
        SimTensor { bytes: kb, shape: vec![pages, PAGE, D], elem: 2 },
        SimTensor { bytes: vb, shape: vec![pages, PAGE, D], elem: 2 },
        SimTensor { bytes: i32s(&table), shape: vec![b, max_blocks], elem: 4 },
        SimTensor { bytes: i32s(&lens), shape: vec![b], elem: 4 },
        SimTensor { bytes: vec![0xFF; 2 * b * sq * D], shape: vec![b, sq, D], elem: 2 },
    ];
    let scale = 1.0 / (D as f64).sqrt();
    let mut want = vec![0.0; b * sq * D];
    for bi in 0..b {
        let n = seqlens[bi];
        let row = |t: usize| (table[bi * max_blocks + t / PAGE] as usize * PAGE + t % PAGE) * D;
        for i in 0..sq {
            let q = &qv[(bi * sq + i) * D..][..D];
            let mut p: Vec<f64> = (0..n).map(|t| (0..D).map(|c| q[c] * kv[row(t) + c]).sum::<f64>() * scale).collect();
            let max = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for x in p.iter_mut() {
                *x = (*x - max).exp();
                sum += *x;
            }
            for c in 0..D {
                if n > 0 {
                    want[(bi * sq + i) * D + c] = (0..n).map(|t| p[t] * vv[row(t) + c]).sum::<f64>() / sum;
                }
            }
        }
    }
    (tensors, [b as i64, sq as i64, pages as i64, max_blocks as i64], want)
}

#[test]
fn every_schedule_pipelines_the_paged_copies() {
    let k = kernel();
    let names: Vec<(Target, &str)> = variants(&k).iter().map(|(t, c)| (*t, c.schedule)).collect();
    assert_eq!(
        names,
        [
            (Target::Sm80, "cp_async_pipeline"),
            (Target::Sm90a, "warp_specialized_loop_persistent"),
            (Target::Sm90a, "warp_specialized_loop"),
            (Target::Sm90a, "tma_copy"),
            (Target::Sm90a, "cp_async_pipeline"),
        ]
    );
    let plan = tile_ir::passes::pipeline::plan(&k);
    let pl = plan.loops.values().next().expect("the loop is pipelined");
    assert_eq!(pl.copies.len(), 2, "K and V are both pipelined");
    // Both origins are the table read, inlined.
    assert_eq!(plan.read_origins.len(), 2);
    let k2 = kernel_2wg();
    let o = CompileOptions { wsloop_persistent: false, ..CompileOptions::default() };
    let v2 = compile_variants(&k2, Target::Sm90a, o).unwrap();
    assert_eq!(v2[0].schedule, "warp_specialized_loop", "two warpgroups: the plan takes it");
    assert!(v2[0].ptx.contains("bar.arrive"), "the ping-pong");
    // The persistent variant (`CompileOptions::wsloop_persistent`, the
    // default) comes first and pings and pongs too.
    let v3 = compile_variants(&k2, Target::Sm90a, CompileOptions::default()).unwrap();
    assert_eq!(v3[0].schedule, "warp_specialized_loop_persistent");
    assert_eq!(v3[1].schedule, "warp_specialized_loop");
    assert!(v3[0].ptx.contains("bar.arrive"), "the ping-pong");
    for (t, c) in variants(&k) {
        let what = format!("{} {}", t.name(), c.schedule);
        // The table is read inside the prefetch's guard: in the prologue's
        // `if` (iteration 0 < trip count) and in the loop's.
        assert!(c.ptx.contains("ld.global"), "{what}");
        if c.schedule == "tma_copy" || c.schedule.starts_with("warp_specialized_loop") {
            assert_eq!(c.tensor_maps.len(), if c.schedule == "tma_copy" { 2 } else { 3 }, "{what}");
        }
    }
}

/// The cp.async waits inside `body`'s loops (the steady state), recursively.
fn loop_waits(body: &[TStmt], in_loop: bool, out: &mut Vec<u32>) {
    for s in body {
        match s {
            TStmt::Inst { inst: Inst::CpAsyncWait { pending }, .. } if in_loop => out.push(*pending),
            TStmt::If { then, otherwise, .. } => {
                loop_waits(then, in_loop, out);
                loop_waits(otherwise, in_loop, out);
            }
            TStmt::For { body, .. } => loop_waits(body, true, out),
            _ => {}
        }
    }
}

/// Per-copy waits: a loop of two pipelined copies whose first readers
/// differ (K by Q·Kᵀ, V by P·V) commits one group per copy and iteration
/// and waits with `wait_group 2·(S−1)−1` before each: K's wait leaves V(k)
/// and the later prefetches in flight, V's leaves K(k+S−1), never a
/// `wait_group 0` in the steady state. Two stages: `wait_group 1`, twice.
#[test]
fn each_copy_waits_only_for_its_own_group() {
    // The paged kernel (V copied just before its gemm), and the 2-D
    // attention (K and V copied together at the top, read by different gemms).
    let attention = parse_kernel(&attention_text(64, 64, 128, "f16")).unwrap();
    for k in [kernel(), attention] {
        for target in [Target::Sm80, Target::Sm90a] {
            let c = tile_ir::compile_with(&k, target, CompileOptions::default()).unwrap();
            let what = format!("{} {}", k.name, target.name());
            let mut w = Vec::new();
            loop_waits(&c.function.body, false, &mut w);
            assert!(!w.is_empty(), "{what}: a pipelined loop");
            assert!(w.iter().all(|&p| p == 1), "{what}: waits {w:?}");
            assert_eq!(w.len() % 2, 0, "{what}: one wait per copy: {w:?}");
            // The prologue commits one group per copy.
            let commits = c.ptx.matches("cp.async.commit_group").count();
            assert!(commits >= 4, "{what}: {commits} commits");
        }
        // `CompileOptions::per_copy_waits` off (for bisecting): one group per
        // iteration, waited for at the top (`wait_group S−2`).
        let one = CompileOptions { per_copy_waits: false, ..CompileOptions::default() };
        for target in [Target::Sm80, Target::Sm90a] {
            let c = tile_ir::compile_with(&k, target, one).unwrap();
            let mut w = Vec::new();
            loop_waits(&c.function.body, false, &mut w);
            assert!(!w.is_empty() && w.iter().all(|&p| p == 0), "{} {}: waits {w:?}", k.name, target.name());
        }
        // Three stages: wait_group 3 = 2·2−1.
        let text = print::print_kernel(&k).replace("pipelined(2)", "pipelined(3)");
        let k3 = parse_kernel(&text).unwrap();
        let c = tile_ir::compile_with(&k3, Target::Sm80, CompileOptions::default()).unwrap();
        let mut w = Vec::new();
        loop_waits(&c.function.body, false, &mut w);
        assert!(!w.is_empty() && w.iter().all(|&p| p == 3), "{}: waits {w:?}", k.name);
    }
    // A GEMM's A and B (both first read by the gemm) stay one group: wait S−2.
    let gemm = parse_kernel(&tile_testkit::MATMUL.text()).unwrap();
    let c = tile_ir::compile_with(&gemm, Target::Sm80, CompileOptions::default()).unwrap();
    let mut w = Vec::new();
    loop_waits(&c.function.body, false, &mut w);
    assert!(!w.is_empty() && w.iter().all(|&p| p == 0 || p == 1), "matmul: {w:?}");
}

#[test]
fn paged_variants_on_the_simulator() {
    let k = kernel();
    let scale = (std::f64::consts::LOG2_E / (D as f64).sqrt()) as f32;
    // Loops of 0, 1, 2 and 5 pages in one launch (one block row per batch),
    // and two query blocks over full and partial pages.
    let cases: [(usize, &[usize]); 2] = [(5, &[0, 37, 128, 300]), (70, &[64, 65])];
    let k2 = kernel_2wg();
    let ws2 = compile_variants(&k2, Target::Sm90a, CompileOptions::default()).unwrap().remove(0);
    let mut all: Vec<(&Kernel, Target, Compiled)> = variants(&k).into_iter().map(|(t, c)| (&k, t, c)).collect();
    all.push((&k2, Target::Sm90a, ws2));
    for (k, t, c) in all {
        for (n, (sq, lens)) in cases.iter().enumerate() {
            let sq = if k.threads == 256 { sq * 2 } else { *sq };
            let (tensors, dims, want) = problem(sq, lens, 0x9A6E + n as u64);
            let out = sim::run_interleavings(&c.function, k, tensors, &dims, &[scale.to_bits() as u64], None);
            let got = decode(DType::F16, &out[5]);
            assert!(got.iter().all(|x| x.is_finite()), "{} {}: non-finite output", t.name(), c.schedule);
            let err = gemm_sim::rel_l2(&got, &want);
            assert!(err <= 5e-3, "{} {} sq={sq} {lens:?}: relative L2 error {err:.3e}", t.name(), c.schedule);
            // An empty sequence gives zeros.
            if lens[0] == 0 {
                assert!(got[..sq * D].iter().all(|x| *x == 0.0), "{} {}", t.name(), c.schedule);
            }
        }
    }
}

#[test]
fn paged_variants_assemble_without_spills() {
    let two = compile_variants(&kernel_2wg(), Target::Sm90a, CompileOptions::default()).unwrap();
    let all = variants(&kernel()).into_iter().chain(two.into_iter().map(|c| (Target::Sm90a, c)));
    for (t, c) in all {
        let arch = t.name();
        if let Some(r) = ptxas::assemble("paged_attention", &c.ptx, arch) {
            assert!(
                r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"),
                "{arch} {}:\n{r}",
                c.schedule
            );
        }
    }
}

/// A kernel that writes its block table in the loop is not pipelined that
/// way: reading the table ahead could see an entry before the loop writes
/// it. The cp.async pipeline (and the schedules built on it) say so.
#[test]
fn a_table_written_in_the_loop_is_not_prefetched() {
    let text = PAGED_ATTENTION.replace("@3 block_table: &i32[B, MAXB]", "@3 block_table: &mut i32[B, MAXB]").replace(
        "    let %9 page: i32 = block_table[bz, kb]\n",
        "    let %9 page: i32 = block_table[bz, kb]\n    block_table[bz, kb + 1] = page\n",
    );
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let plan = tile_ir::passes::pipeline::plan(&k);
    assert!(plan.loops.is_empty(), "{:?}", plan.loops);
    let want = "the copy into `k_s` is not pipelined: its origin reads `block_table`, which the kernel writes";
    for (s, target) in [
        (Schedule::CpAsyncPipeline, Target::Sm80),
        (Schedule::TmaCopy, Target::Sm90a),
        (Schedule::WarpSpecializedLoop, Target::Sm90a),
    ] {
        match s.plan(&k, target, opts()) {
            Ok(_) => panic!("{s:?} takes a kernel that writes its table"),
            Err(na) => assert!(na.reason.contains(want), "{s:?}: {}", na.reason),
        }
    }
    let decisions = tile_ir::schedule::describe_decisions(&k, Target::Sm80, CompileOptions::default());
    assert!(decisions.contains(want), "{decisions}");
    // It still runs (serially) and compiles.
    compile_variants(&k, Target::Sm80, CompileOptions::default()).unwrap();
}

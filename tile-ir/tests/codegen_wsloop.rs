//! The warp-specialized loop schedule (`warp_specialized_loop`, issue 9
//! item 2) on the code it generates: which kernels it takes and why it
//! refuses the others (`Schedule::plan`, the `TILE_DUMP` decisions); the
//! structure of its Thread IR and PTX for FlashAttention over 4-D tensors
//! at head dim 64 (128 consumer threads) and 128 (256 consumer threads,
//! 128 query rows, key blocks of 64 and 128): the producer warpgroup issues
//! only TMA and mbarrier operations, `setmaxnreg` and the launch bounds from
//! the target's register split, the mbarrier ring's arrival counts, every
//! consumer barrier named over the consumers, one release of the stage per
//! iteration after the last wgmma wait; and ptxas assembles every such
//! variant without spills. The synchronization is checked on a model: the
//! producer's thread and the consumers interpret the Thread IR's integer
//! part concurrently against modelled mbarriers, for loops of 0 to 5
//! iterations (no deadlock, parities and transaction bytes right, no refill
//! of a stage being read), and the two warpgroups' turns of the ping-pong
//! against named-barrier semantics; both models fail on planted bugs. (The
//! Thread IR simulator runs threads in lockstep and cannot run
//! warp-specialized code: `tests/gpu_wsloop.rs` runs these kernels on the
//! GPU.)

mod ptxas;

use tile_ir::print::parse_kernel;
use tile_ir::schedule::{describe_decisions, Schedule};
use tile_ir::thread_ir::{Inst, Stmt};
use tile_ir::*;
use tile_testkit::{attention_4d_sized, attention_4d_text, Layout4d};

fn kernel(text: &str) -> Kernel {
    parse_kernel(text).unwrap_or_else(|e| panic!("{e:?}\n{text}"))
}

/// The 4-D attention kernels: (text, consumer threads): head dim 64 and
/// 128 over one consumer warpgroup (64 query rows), 128 over two (128 rows,
/// key blocks of 64 and 128).
fn attentions() -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for l in [Layout4d::Bhsd, Layout4d::Bshd] {
        out.push((attention_4d_text(l), 128));
        out.push((attention_4d_sized(l, 128, 64, 64, 128), 128));
        out.push((attention_4d_sized(l, 128, 128, 64, 256), 256));
        out.push((attention_4d_sized(l, 128, 128, 128, 256), 256));
    }
    out
}

/// The default options with the one-consumer-warpgroup variant on
/// ([`CompileOptions::wsloop_one_warpgroup`]): the tests here cover it too.
fn opts() -> CompileOptions {
    CompileOptions { wsloop_one_warpgroup: true, ..CompileOptions::default() }
}

fn reason(text: &str, target: Target) -> String {
    match Schedule::WarpSpecializedLoop.plan(&kernel(text), target, opts()) {
        Ok(_) => panic!("the warp-specialized loop takes\n{text}"),
        Err(na) => na.reason,
    }
}

/// The variant of the schedule, compiled through `compile_variants` (the
/// persistent one, `hopper_wsloop_persistent_sim.rs`'s, only with `wsloop_persistent`).
fn variant(text: &str) -> Compiled {
    variant_with(text, opts())
}

/// [`variant`] compiled with `options`.
fn variant_with(text: &str, options: CompileOptions) -> Compiled {
    let k = kernel(text);
    let v = compile_variants(&k, Target::Sm90a, options).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    let want: &[&str] = if options.wsloop_persistent {
        &["warp_specialized_loop_persistent", "warp_specialized_loop", "tma_copy", "cp_async_pipeline"]
    } else {
        &["warp_specialized_loop", "tma_copy", "cp_async_pipeline"]
    };
    assert_eq!(names, want, "{}", k.name);
    v.into_iter().find(|c| c.schedule == "warp_specialized_loop").unwrap()
}

#[test]
fn takes_the_attention_kernels() {
    for (text, threads) in attentions() {
        let k = kernel(&text);
        let d = describe_decisions(&k, Target::Sm90a, opts());
        assert!(d.contains("\nwarp_specialized_loop: applies\n"), "{}: {d}", k.name);
        assert!(d.starts_with("warp_specialized_gemm: not applicable"), "{}: {d}", k.name);
        let Ok(schedule::Plan::WarpSpecializedLoop(p)) = Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, opts())
        else {
            panic!("{}: no plan", k.name)
        };
        assert_eq!((p.consumer_threads, p.stages, p.copies.len()), (threads, 2, 2), "{}", k.name);
        // The block indices are `ctaid`s: the producer needs no `let`; it
        // issues the Q tile too (the body's first statement).
        assert!(p.producer_lets.is_empty(), "{}", k.name);
        assert_eq!(p.pre_copies, vec![0], "{}", k.name);
        // 24 for the producer (one thread issuing TMA), the rest shared by
        // the consumers (≤ 240).
        assert_eq!((p.producer_regs, p.consumer_regs), (24, 240));
        assert!(24 * 128 + p.consumer_regs * threads <= 65_536);
    }
}

/// A pipelined sum whose tiles the plan tests vary.
const SUM: &str = "kernel sum<%0 M, %1 N>(@0 x: &f32[M, N], @1 y: &mut f32[M, 64], %2 n: i32) threads=128 grid=((M + 63) / 64, 1, 1) {
  %3 bm = block_idx.x
  @2 x_s: shared f32[64, 64]
  @3 acc: fragment f32[64, 64]
  @4 t: fragment f32[64, 64]
  fill acc, 0.0
  for %4 kb in pipelined(2) 0..n {
    copy x[bm * 64, kb * 64] -> x_s
    copy x_s -> t
    for %5 i in parallel 0..64 {
      for %6 j in parallel 0..64 {
        acc[%5, %6] = acc[%5, %6] + t[%5, %6]
      }
    }
  }
  copy acc -> y[bm * 64, 0]
}";

/// The Q tile is the producer's only when nothing else touches `q_s` first
/// (here a fill before it: the consumers copy it themselves, by cp.async).
#[test]
fn pre_loop_copies_only_when_alone() {
    let text = attention_4d_text(Layout4d::Bhsd).replace("  copy q[", "  fill q_s, 0.0 as f16\n  copy q[");
    let k = kernel(&text);
    let Ok(schedule::Plan::WarpSpecializedLoop(p)) = Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, opts())
    else {
        panic!("no plan")
    };
    assert!(p.pre_copies.is_empty());
    let c = variant(&text);
    assert_eq!(c.tensor_maps.len(), 2);
    let (producer, consumers) = split(&c.function.body);
    assert_eq!(insts(producer).iter().filter(|i| matches!(i, Inst::TmaLoad { .. })).count(), 2);
    assert!(insts(consumers).iter().any(|i| matches!(i, Inst::CpAsync { .. })));
}

#[test]
fn takes_loops_without_gemms_and_producer_lets() {
    let k = kernel(SUM);
    assert!(Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, opts()).is_ok());
    // A `let` of the block index the origin uses: the producer evaluates it.
    let text = SUM
        .replace("  fill acc, 0.0\n", "  fill acc, 0.0\n  let %7 row: i32 = bm * 64\n")
        .replace("copy x[bm * 64, kb * 64]", "copy x[row, kb * 64]");
    let Ok(schedule::Plan::WarpSpecializedLoop(p)) =
        Schedule::WarpSpecializedLoop.plan(&kernel(&text), Target::Sm90a, opts())
    else {
        panic!("no plan")
    };
    assert_eq!(p.producer_lets, vec![1]);
    let c = variant(&text);
    assert_eq!(c.threads, 256);
}

/// By default the plan declines one consumer warpgroup whose loop has a
/// gemm (attention at 128 threads): `tma_copy` is then the first sm_90a
/// variant; two consumer warpgroups, and one whose loop has no gemm (the
/// pipelined sum), keep the warp-specialized loop first (its persistent
/// variant, on by default, then the plain one).
#[test]
fn declines_one_consumer_warpgroup_by_default() {
    for (text, threads) in attentions() {
        let k = kernel(&text);
        let planned = Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, CompileOptions::default());
        let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
        let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
        if threads == 128 {
            let why = planned.err().map(|na| na.reason).unwrap_or_default();
            assert!(
                why.starts_with(
                    "one consumer warpgroup: the TMA-copy variant's 2-4 blocks per SM overlap softmax and wgmma better"
                ),
                "{}: {why}",
                k.name
            );
            let d = describe_decisions(&k, Target::Sm90a, CompileOptions::default());
            assert!(d.contains("\nwarp_specialized_loop: not applicable: one consumer warpgroup"), "{}: {d}", k.name);
            assert_eq!(names, ["tma_copy", "cp_async_pipeline"], "{}", k.name);
        } else {
            assert!(planned.is_ok(), "{}", k.name);
            assert_eq!(
                names,
                ["warp_specialized_loop_persistent", "warp_specialized_loop", "tma_copy", "cp_async_pipeline"],
                "{}",
                k.name
            );
        }
    }
    let sum = kernel(SUM);
    assert!(Schedule::WarpSpecializedLoop.plan(&sum, Target::Sm90a, CompileOptions::default()).is_ok());
}

#[test]
fn says_why_it_refuses() {
    let att = attention_4d_text(Layout4d::Bhsd);
    assert!(reason(&att, Target::Sm80).contains("warp specialization needs sm_90a, not sm_80"));
    let off = att.replace(" grid=((SQ + 63) / 64, H, B) {", " grid=((SQ + 63) / 64, H, B) warp_specialize=false {");
    assert!(reason(&off, Target::Sm90a).contains("`warp_specialize = false`"), "{off}");
    assert!(reason(&SUM.replace("threads=128", "threads=96"), Target::Sm90a).contains("threads = 96"));
    assert!(reason(&SUM.replace("threads=128", "threads=1024"), Target::Sm90a).contains("at most 896"));
    // Not a pipelined loop; one nested in another loop.
    assert!(reason(&SUM.replace("pipelined(2) ", ""), Target::Sm90a).contains("no `pipelined` loop at the top level"));
    let nested = SUM
        .replace("  for %4 kb in pipelined(2) 0..n {", "  for %7 r in 0..1 {\n  for %4 kb in pipelined(2) 0..n {")
        .replace("  copy acc -> y", "  }\n  copy acc -> y");
    assert!(reason(&nested, Target::Sm90a).contains("no `pipelined` loop at the top level"), "{nested}");
    // A copy TMA cannot do (a nonzero fill).
    let fill = SUM.replace("copy x[bm * 64, kb * 64] -> x_s", "copy x[bm * 64, kb * 64] -> x_s fill(1.0)");
    assert!(reason(&fill, Target::Sm90a).contains("the pipelined copy into `x_s` is not a TMA box"), "{fill}");
    // Bounds that read a tensor the kernel writes (the producer reads only
    // read-only tensors: a bound read from `x` is its own).
    let load = SUM
        .replace("  fill acc, 0.0\n", "  fill acc, 0.0\n  let %7 r: i32 = y[0, 0] as i32\n")
        .replace("0..n {", "0..r {");
    assert!(reason(&load, Target::Sm90a).contains("`r` reads `y`, which the kernel writes"), "{load}");
    let read_only = load.replace("y[0, 0] as i32", "x[0, 0] as i32");
    assert!(Schedule::WarpSpecializedLoop.plan(&kernel(&read_only), Target::Sm90a, opts()).is_ok(), "{read_only}");
    // An origin through a reassigned variable.
    let muts = SUM
        .replace("  fill acc, 0.0\n", "  fill acc, 0.0\n  let mut %7 row: i32 = bm * 64\n  row = row + 0\n")
        .replace("copy x[bm * 64, kb * 64]", "copy x[row, kb * 64]");
    assert!(reason(&muts, Target::Sm90a).contains("`row` is reassigned"), "{muts}");
    // The GEMM main loop is the warp-specialized GEMM's.
    let gemm = tile_testkit::MATMUL_128X256.text();
    assert!(reason(&gemm, Target::Sm90a).contains("the warp-specialized GEMM takes this kernel"));
}

/// The instructions of `body`, recursively, in order.
fn insts(body: &[Stmt]) -> Vec<&Inst> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Inst { inst, .. } => out.push(inst),
            Stmt::If { then, otherwise, .. } => {
                out.extend(insts(then));
                out.extend(insts(otherwise));
            }
            Stmt::For { body, .. } => out.extend(insts(body)),
            Stmt::Comment(_) => {}
        }
    }
    out
}

/// The producer's branch (the `if` whose first instruction is
/// `setmaxnreg.dec`) and the statements after it (the consumers').
fn split(body: &[Stmt]) -> (&[Stmt], &[Stmt]) {
    let at = body
        .iter()
        .position(|s| {
            matches!(s, Stmt::If { then, .. } if matches!(then.first(), Some(Stmt::Inst { inst: Inst::SetMaxNreg { inc: false, .. }, .. })))
        })
        .expect("a producer branch");
    let Stmt::If { then, otherwise, .. } = &body[at] else { unreachable!() };
    assert!(otherwise.is_empty());
    (then, &body[at + 1..])
}

#[test]
fn attention_variant_structure() {
    // With P·V deferred (the default) and without (issuing Q·Kᵀ ahead where
    // that applies, else the plain loop).
    let cases = attentions().into_iter().flat_map(|(text, t)| [(text.clone(), t, true), (text, t, false)]);
    for (text, t, defer) in cases {
        let c = variant_with(&text, CompileOptions { defer_last_gemm: defer, ..opts() });
        // Deferred where P·V is the wider gemm (the head dim above the key block).
        let k_s = kernel(&text).buffers.iter().find(|b| b.name == "k_s").unwrap().const_shape().unwrap();
        let deferred = defer && k_s[1] > k_s[0];
        let name = kernel(&text).name;
        let f = &c.function;
        // K and V, then Q.
        assert_eq!((c.threads, f.barrier_threads, c.tensor_maps.len()), (t + 128, Some(t), 3), "{name}");
        let tensors: Vec<usize> = c.tensor_maps.iter().map(|m| m.tensor).collect();
        assert_eq!(tensors, [1, 2, 0], "{name}");
        // One consumer warpgroup: two blocks per SM, sharing the file
        // (2·(24·128 + 232·128) = 65 536); two: one block.
        let (blocks, regs) = if t == 128 { (2, 232) } else { (1, 240) };
        assert!(c.ptx.contains(&format!(".maxntid {}, 1, 1\n.minnctapersm {blocks}\n", t + 128)), "{name}");
        assert!(c.ptx.contains("setmaxnreg.dec.sync.aligned.u32 24;"), "{name}");
        assert!(c.ptx.contains(&format!("setmaxnreg.inc.sync.aligned.u32 {regs};")), "{name}");
        // Each ring: full[s] with one arrival (+ tx), empty[s] with T.
        let all = insts(&f.body);
        let counts: Vec<i64> = all
            .iter()
            .filter_map(|i| match i {
                Inst::MbarInit { count: thread_ir::Operand::Imm(n), .. } => Some(*n),
                _ => None,
            })
            .collect();
        // One ring per pipelined copy (K's, V's), then Q's barrier.
        assert_eq!(counts, [1, t as i64, 1, t as i64, 1, t as i64, 1, t as i64, 1], "{name}");
        // Barriers: one over the whole block before the split, the rest
        // named over the consumers (`bar.sync 1, T` in the PTX).
        // (Two consumer warpgroups also take turns: barriers 2 and 3 over
        // both, `ping_pong_turns_balance`.)
        let whole: Vec<&&Inst> = all.iter().filter(|i| matches!(i, Inst::NamedBarSync { id: 0, .. })).collect();
        assert_eq!(whole.len(), 1, "{name}");
        assert!(matches!(whole[0], Inst::NamedBarSync { id: 0, threads } if *threads == t + 128));
        for line in c.ptx.lines().map(str::trim) {
            if line.starts_with("bar.") || line.starts_with("barrier.") {
                let turn = t == 256
                    && ["bar.sync 2, 256;", "bar.sync 3, 256;", "bar.arrive 2, 256;", "bar.arrive 3, 256;"]
                        .contains(&line);
                assert!(
                    turn || line == format!("bar.sync 1, {t};") || line == format!("bar.sync 0, {};", t + 128),
                    "{name}: {line}"
                );
            }
        }
        let (producer, consumers) = split(&f.body);
        // The producer: TMA, mbarriers, integer arithmetic, its exit.
        let p = insts(producer);
        for i in &p {
            let ok = match i {
                // Scalar arithmetic only (a division is a multiply-high,
                // shifts and a sign fix-up: `passes/lower/divide.rs`).
                Inst::Op { op, .. } => {
                    ["mov.", "add.", "sub.", "mad.", "mul.", "div.", "abs.", "shr.", "xor.", "selp.", "setp."]
                        .iter()
                        .any(|x| op.starts_with(x))
                }
                Inst::TensorMapAddr { .. }
                | Inst::MbarWait { .. }
                | Inst::MbarArriveExpectTx { .. }
                | Inst::TmaLoad { .. }
                | Inst::SetMaxNreg { inc: false, .. }
                | Inst::Exit => true,
                _ => false,
            };
            assert!(ok, "{name}: the producer runs {i:?}");
        }
        // Q, K and V, one box per 64-column panel.
        let boxes = if text.contains("f16[B, H, SQ, 128]") || text.contains("f16[B, SQ, H, 128]") { 6 } else { 3 };
        assert_eq!(p.iter().filter(|i| matches!(i, Inst::TmaLoad { .. })).count(), boxes, "{name}: K and V boxes");
        assert!(matches!(p.last(), Some(Inst::Exit)));
        // The consumers: no TMA, no block-wide barrier; their loop waits for
        // K's full[st] before the first wgmma and V's before the last, and
        // releases each ring's empty[st] once, after the wgmma reading it is
        // waited for.
        let cons = insts(consumers);
        assert!(matches!(cons.first(), Some(Inst::SetMaxNreg { inc: true, .. })), "{name}");
        assert!(
            !cons.iter().any(|i| matches!(i, Inst::TmaLoad { .. } | Inst::NamedBarSync { id: 0 | 1, .. })),
            "{name}"
        );
        let body = consumers
            .iter()
            .find_map(|s| match s {
                Stmt::For { uniform: true, body, .. }
                    if insts(body).iter().any(|i| matches!(i, Inst::Wgmma { .. })) =>
                {
                    Some(body)
                }
                _ => None,
            })
            .expect("the consumers' loop");
        let b = insts(body);
        let at = |f: &dyn Fn(&Inst) -> bool| -> Vec<usize> {
            b.iter().enumerate().filter(|(_, i)| f(i)).map(|(j, _)| j).collect()
        };
        let waits = at(&|i| matches!(i, Inst::MbarWait { .. }));
        let arrives = at(&|i| matches!(i, Inst::MbarArrive { .. }));
        let wgmmas = at(&|i| matches!(i, Inst::Wgmma { .. }));
        let gemm_waits = at(&|i| matches!(i, Inst::WgmmaWait { pending: 0 }));
        assert_eq!((waits.len(), arrives.len()), (2, 2), "{name}");
        let (first_b, last_b) = (wgmmas[0], wgmmas[wgmmas.len() - 1]);
        assert!(
            waits[0] < first_b && waits[1] < last_b && waits[1] > first_b,
            "{name}: V is waited for before P·V only"
        );
        // The default defers P·V by one iteration
        // (`CompileOptions::defer_last_gemm`): Q·Kᵀ of this iteration, then
        // P·V of the previous one (in a uniform `if`: not in the first),
        // both in flight; `wait_group 1` (S landed) before K's release and
        // the softmax, `wait_group 0` (O and P free) before V's release.
        let lookahead = !deferred && (t == 128 || text.contains("k_s: shared f16[64,"));
        if deferred {
            let pending_one = at(&|i| matches!(i, Inst::WgmmaWait { pending: 1 }));
            // With O's rescale hoisted under Q·Kᵀ (the default), a no-op
            // `wait_group 1` right after Q·Kᵀ's commit first (ptxas otherwise
            // serializes the two gemms: `ptxas_sees_no_serialized_wgmma`).
            let (hoist_wait, s_wait) = match pending_one[..] {
                [h, s] => (Some(h), s),
                [s] => (None, s),
                _ => panic!("{name}: {} `wait_group 1`", pending_one.len()),
            };
            assert!(hoist_wait.is_some(), "{name}: O's rescale not hoisted");
            if let Some(h) = hoist_wait {
                let commits = at(&|i| matches!(i, Inst::WgmmaCommit));
                assert!(h > first_b && h < waits[1] && commits[0] + 1 == h, "{name}: the hoisted rescale's wait");
            }
            assert!(s_wait > last_b && s_wait < arrives[0], "{name}: K released before S landed");
            assert!(
                gemm_waits.iter().any(|&w| w > arrives[0] && w < arrives[1]),
                "{name}: V released before P·V is done"
            );
            let issued_in_if = body.iter().any(|s| match s {
                Stmt::If { uniform: true, then, .. } => {
                    let i = insts(then);
                    i.iter().any(|i| matches!(i, Inst::Wgmma { .. }))
                        && i.iter().any(|i| matches!(i, Inst::MbarWait { .. }))
                }
                _ => false,
            });
            assert!(issued_in_if, "{name}: P·V of the previous iteration");
            // The last P·V after the loop, waited for before V's release.
            let after: Vec<&Inst> = consumers
                .iter()
                .skip_while(|s| !matches!(s, Stmt::For { uniform: true, .. }))
                .skip(1)
                .flat_map(|s| insts(std::slice::from_ref(s)))
                .collect();
            let w = after.iter().position(|i| matches!(i, Inst::Wgmma { .. })).expect("the last P·V");
            let done = after.iter().position(|i| matches!(i, Inst::WgmmaWait { pending: 0 })).unwrap();
            let rel = after.iter().position(|i| matches!(i, Inst::MbarArrive { .. })).unwrap();
            assert!(w < done && done < rel, "{name}: the last P·V");
        } else if lookahead {
            // K's stage, read by a gemm the previous iteration (or the code
            // before the loop) waited for, is released first; the next
            // iteration's Q·Kᵀ is issued (after its stage's wait) and left
            // in flight; V's stage is released after the P·V wait, and the
            // twins become the scores after a wait.
            assert!(arrives[0] < first_b, "{name}: K released at the top");
            let ahead = body
                .iter()
                .find_map(|s| match s {
                    Stmt::If { uniform: true, then, .. }
                        if insts(then).iter().any(|i| matches!(i, Inst::Wgmma { .. })) =>
                    {
                        Some(insts(then))
                    }
                    _ => None,
                })
                .expect("the gemm issued ahead");
            let first_wait = ahead.iter().position(|i| matches!(i, Inst::MbarWait { .. })).expect("K's wait");
            assert!(ahead.iter().position(|i| matches!(i, Inst::Wgmma { .. })) > Some(first_wait), "{name}");
            assert!(ahead.iter().any(|i| matches!(i, Inst::WgmmaCommit)), "{name}");
            assert!(!ahead.iter().any(|i| matches!(i, Inst::WgmmaWait { .. })), "{name}: the gemm ahead is waited for");
            let r = arrives[1];
            assert!(gemm_waits.iter().any(|&w| w > last_b && w < r), "{name}: V released before P·V is done");
            let moves = b.iter().rposition(|i| matches!(i, Inst::Op { op, .. } if op == "mov.f32")).unwrap();
            assert!(gemm_waits.iter().any(|&w| w > r && w < moves), "{name}: the twins are read in flight");
        } else {
            for &r in &arrives {
                let before = wgmmas.iter().rev().find(|&&w| w < r).expect("a wgmma before the release");
                assert!(
                    gemm_waits.iter().any(|&w| w > *before && w < r),
                    "{name}: a stage released before its wgmma is done"
                );
            }
            assert!(
                arrives[0] < wgmmas.iter().copied().find(|&w| w > waits[1]).unwrap(),
                "{name}: K is released before P·V"
            );
        }
        assert!(!b.iter().any(|i| matches!(i, Inst::BarSync)), "{name}: a barrier in the attention loop");
        // Q came by TMA: the consumers wait for it (no cp.async, and no
        // barrier or proxy fence before the loop for it).
        assert!(!cons.iter().any(|i| matches!(i, Inst::CpAsync { .. })), "{name}");
        let before_loop = consumers.iter().take_while(|s| !matches!(s, Stmt::For { uniform: true, .. }));
        let pre: Vec<&Inst> = before_loop.flat_map(|s| insts(std::slice::from_ref(s))).collect();
        assert!(pre.iter().any(|i| matches!(i, Inst::MbarWait { parity: thread_ir::Operand::Imm(0), .. })), "{name}");
        assert!(!pre.iter().any(|i| matches!(i, Inst::BarSync | Inst::FenceProxyAsync)), "{name}");
        // Issuing ahead, the first iteration's Q·Kᵀ comes before the loop, waited for.
        let first_gemm = pre.iter().any(|i| matches!(i, Inst::Wgmma { .. }))
            && pre.iter().any(|i| matches!(i, Inst::WgmmaWait { pending: 0 }));
        assert_eq!(first_gemm, lookahead, "{name}");
    }
}

#[test]
fn attention_variants_assemble_without_spills() {
    for (text, _) in attentions() {
        let c = variant(&text);
        let name = kernel(&text).name;
        if let Some(r) = ptxas::assemble(&name, &c.ptx, "sm_90a") {
            assert!(r.contains("0 bytes spill stores") && r.contains("0 bytes spill loads"), "{name} spills:\n{r}");
        }
    }
    let c = variant(SUM);
    if let Some(r) = ptxas::assemble("sum", &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores"), "{r}");
    }
}

/// ptxas keeps the wgmma pipeline as the schedules wrote it: it neither
/// serializes wgmmas (C7514 and the other "Potential Performance Loss"
/// notes) nor injects a `warpgroup.wait` or `warpgroup.arrive` (C7517,
/// C7519), with P·V deferred (and O's rescale hoisted under Q·Kᵀ) and
/// without. (An injected wait before the deferred P·V made Q·Kᵀ and P·V run
/// back to back, with nothing in flight between, at d256 on the H200.)
#[test]
fn ptxas_sees_no_serialized_wgmma() {
    for (text, _) in attentions() {
        for defer in [true, false] {
            let c = variant_with(&text, CompileOptions { defer_last_gemm: defer, ..opts() });
            let name = kernel(&text).name;
            if let Some(r) = ptxas::assemble(&name, &c.ptx, "sm_90a") {
                let bad: Vec<&str> =
                    r.lines().filter(|l| l.contains("Performance Loss") || l.contains("is injected")).collect();
                assert!(bad.is_empty(), "{name} (defer {defer}):\n{}", bad.join("\n"));
            }
        }
    }
}

/// Two code-quality properties ptxas cannot recover by itself (ncu on the
/// H200, d256: the XU pipe at 37 % against cuDNN's 21 %, six vector
/// instructions and two `R2UR` per wgmma): the probabilities' conversions
/// to f16 are paired (`cvt.rn.f16x2.f32`, `passes/pack_cvt.rs`), and the
/// warpgroup index the wgmma descriptors start from is broadcast from lane
/// 0 (`shfl.sync.idx`), which ptxas needs to keep the descriptors in
/// uniform registers. With `pack_conversions` off every conversion is single.
#[test]
fn conversions_pair_and_warpgroup_index_is_uniform() {
    let count = |ptx: &str, pat: &str| ptx.lines().filter(|l| l.trim_start().starts_with(pat)).count();
    for (text, threads) in attentions() {
        let name = kernel(&text).name;
        let c = variant(&text);
        let (pairs, singles) = (count(&c.ptx, "cvt.rn.f16x2.f32"), count(&c.ptx, "cvt.rn.f16.f32"));
        assert!(pairs > 0 && singles < pairs, "{name}: {pairs} paired, {singles} single conversions");
        let off = variant_with(&text, CompileOptions { pack_conversions: false, ..opts() });
        assert_eq!(count(&off.ptx, "cvt.rn.f16x2.f32"), 0, "{name} with pack_conversions off");
        assert_eq!(count(&off.ptx, "cvt.rn.f16.f32"), singles + 2 * pairs, "{name}: every conversion kept");
        if threads > 128 {
            // Two consumer warpgroups: Q's descriptor depends on the warpgroup.
            let i = c.ptx.find("shfl.sync.idx.b32").unwrap_or_else(|| panic!("{name}: no broadcast"));
            let wgmma = c.ptx.find("wgmma.mma_async").unwrap();
            assert!(i < wgmma, "{name}: the warpgroup index is broadcast before the first wgmma");
        }
    }
}

/// A warpgroup's barrier events in consumer code, in order: (`true` for a
/// wait (`bar.sync`), `false` for an arrival (`bar.arrive`), barrier id).
type Events = Vec<(bool, u32)>;

/// The barrier events warpgroup `wg` of the consumers meets when the loop
/// runs `n` times: the Thread IR walked with the loop unrolled `n` times
/// and the conditions the barriers sit under evaluated (the loop runs,
/// first iteration, which warpgroup); statements without barrier events
/// are skipped. Panics on a condition it does not know.
fn events(
    body: &[Stmt],
    defs: &std::collections::HashMap<thread_ir::Reg, String>,
    wg: u32,
    n: i64,
    iter: Option<i64>,
    out: &mut Events,
) {
    fn has_events(s: &Stmt) -> bool {
        match s {
            Stmt::Inst { inst, .. } => {
                matches!(inst, Inst::NamedBarSync { .. } | Inst::NamedBarArrive { .. } | Inst::BarSync)
            }
            Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).any(has_events),
            Stmt::For { body, .. } => body.iter().any(has_events),
            Stmt::Comment(_) => false,
        }
    }
    for s in body {
        if !has_events(s) {
            continue;
        }
        match s {
            Stmt::Inst { inst: Inst::NamedBarSync { id, threads }, .. } => {
                assert_eq!(*threads, 256);
                out.push((true, *id))
            }
            Stmt::Inst { inst: Inst::NamedBarArrive { id, threads }, .. } => {
                assert_eq!(*threads, 256);
                out.push((false, *id))
            }
            Stmt::Inst { inst: Inst::BarSync, .. } => out.push((true, 1)),
            Stmt::Inst { .. } | Stmt::Comment(_) => {}
            Stmt::If { cond, negate, then, otherwise, .. } => {
                let def = defs.get(cond).map(String::as_str).unwrap_or("?");
                let v = match def {
                    "setp.ge.u32 tid 128" => wg == 1,
                    "setp.gt.s32 b a" => n > 0,
                    "setp.eq.s32 k a" => iter == Some(0),
                    "setp.lt.s32 k+1 b" => iter.is_some_and(|k| k + 1 < n),
                    other => panic!("a barrier under an unknown condition: {other}"),
                };
                let branch = if v != *negate { then } else { otherwise };
                events(branch, defs, wg, n, iter, out);
            }
            Stmt::For { body, .. } => {
                assert!(iter.is_none(), "a barrier in a nested loop");
                for k in 0..n {
                    events(body, defs, wg, n, Some(k), out);
                }
            }
        }
    }
}

/// The conditions of [`events`], by the register they define: the
/// instruction with its operands named `tid` (the thread index), `b a` (the
/// loop's bounds), `k a` (its variable and start) and `k+1` (a register
/// holding `k + 1`), else their registers.
fn conditions(body: &[Stmt], f: &thread_ir::Function) -> std::collections::HashMap<thread_ir::Reg, String> {
    let tid = insts(&f.body)
        .into_iter()
        .find_map(|i| match i {
            Inst::Op { op, dst, args }
                if op == "mov.u32" && matches!(args[..], [thread_ir::Operand::Special(thread_ir::Special::TidX)]) =>
            {
                Some(*dst)
            }
            _ => None,
        })
        .expect("tid");
    // The loop: its variable and bounds.
    let (k, a, b) = body
        .iter()
        .find_map(|s| match s {
            Stmt::For {
                var,
                start: thread_ir::Operand::Reg(a),
                end: thread_ir::Operand::Reg(b),
                uniform: true,
                body,
                ..
            } if insts(body).iter().any(|i| matches!(i, Inst::Wgmma { .. })) => Some((*var, *a, *b)),
            _ => None,
        })
        .expect("the consumers' loop");
    let next: Vec<thread_ir::Reg> = insts(body)
        .into_iter()
        .filter_map(|i| match i {
            Inst::Op { op, dst, args }
                if op == "add.s32"
                    && matches!(args[..], [thread_ir::Operand::Reg(r), thread_ir::Operand::Imm(1)] if r == k) =>
            {
                Some(*dst)
            }
            _ => None,
        })
        .collect();
    let name = |o: &thread_ir::Operand| match o {
        thread_ir::Operand::Reg(r) if next.contains(r) => "k+1".to_string(),
        thread_ir::Operand::Reg(r) if *r == tid => "tid".to_string(),
        thread_ir::Operand::Reg(r) if *r == a => "a".to_string(),
        thread_ir::Operand::Reg(r) if *r == b => "b".to_string(),
        thread_ir::Operand::Reg(r) if *r == k => "k".to_string(),
        thread_ir::Operand::Imm(x) => x.to_string(),
        other => format!("{other:?}"),
    };
    let mut out = std::collections::HashMap::new();
    for i in insts(body) {
        if let Inst::Op { op, dst, args } = i {
            if op.starts_with("setp.") {
                let args: Vec<String> = args.iter().map(name).collect();
                out.insert(*dst, format!("{op} {}", args.join(" ")));
            }
        }
    }
    out
}

/// Runs two warpgroups' barrier events against named-barrier semantics
/// (a barrier completes at 256 arrivals, releasing its waiters): `Err` on
/// a deadlock, a barrier completed by arrivals alone (nobody waiting), or
/// arrivals left over at the end.
fn run_barriers(wgs: [&Events; 2]) -> Result<(), String> {
    let mut pc = [0usize; 2];
    // Per barrier: arrivals so far (in warpgroups) and the waiting warpgroups.
    let mut bars: std::collections::HashMap<u32, (u32, Vec<usize>)> = Default::default();
    let mut blocked = [false; 2];
    loop {
        let mut progressed = false;
        for w in 0..2 {
            if blocked[w] || pc[w] == wgs[w].len() {
                continue;
            }
            let (wait, id) = wgs[w][pc[w]];
            pc[w] += 1;
            progressed = true;
            let e = bars.entry(id).or_default();
            e.0 += 1;
            if wait {
                e.1.push(w);
            }
            if e.0 == 2 {
                if e.1.is_empty() {
                    return Err(format!("barrier {id} completed by arrivals alone"));
                }
                for &x in &e.1 {
                    blocked[x] = false;
                }
                *e = (0, Vec::new());
            } else if wait {
                blocked[w] = true;
            }
        }
        if !progressed {
            break;
        }
    }
    if pc[0] < wgs[0].len() || pc[1] < wgs[1].len() || blocked.iter().any(|b| *b) {
        return Err(format!("deadlock at events {pc:?} of {} and {}", wgs[0].len(), wgs[1].len()));
    }
    match bars.iter().find(|(_, e)| e.0 != 0) {
        Some((id, _)) => Err(format!("barrier {id} has arrivals left at the end")),
        None => Ok(()),
    }
}

/// Two consumer warpgroups take turns (barriers 2 and 3) around the
/// attention loop's gemms; the turns balance and never deadlock for loops
/// of 0 to 4 iterations (the consumers' barrier events run against
/// named-barrier semantics, the consumer-wide `bar.sync 1` included);
/// `ping_pong: false` and one consumer warpgroup have none.
#[test]
fn ping_pong_turns_balance() {
    for (text, t) in attentions() {
        let name = kernel(&text).name;
        let c = variant(&text);
        let turns = ["bar.arrive 2, 256;", "bar.arrive 3, 256;", "bar.sync 2, 256;", "bar.sync 3, 256;"];
        for tn in turns {
            assert_eq!(c.ptx.contains(tn), t == 256, "{name}: {tn}");
        }
        let (_, consumers) = split(&c.function.body);
        let defs = conditions(consumers, &c.function);
        for n in 0..5 {
            let mut ev = [Events::new(), Events::new()];
            for (w, e) in ev.iter_mut().enumerate() {
                events(consumers, &defs, w as u32, n, None, e);
            }
            if t == 256 {
                let turns0 = ev[0].iter().filter(|e| e.1 >= 2).count() as i64;
                // A turn and a hand-over per iteration, for both warpgroups
                // (warpgroup 1's first hand-over before the loop, none in its
                // last iteration), so that both wait at as many barriers.
                let turns1 = ev[1].iter().filter(|e| e.1 >= 2).count() as i64;
                assert_eq!((turns0, turns1), (2 * n, 2 * n), "{name} n={n}: {ev:?}");
                let waits = |e: &Events| e.iter().filter(|e| e.0).count();
                assert_eq!(waits(&ev[0]), waits(&ev[1]), "{name} n={n}: {ev:?}");
            }
            run_barriers([&ev[0], &ev[1]]).unwrap_or_else(|e| panic!("{name} n={n}: {e}\n{ev:?}"));
        }
        let k = kernel(&text);
        let off = CompileOptions { ping_pong: false, ..opts() };
        let v = compile_variants(&k, Target::Sm90a, off).unwrap();
        let ws: Vec<&Compiled> = v.iter().filter(|c| c.schedule.starts_with("warp_specialized_loop")).collect();
        // The persistent variant (on by default) first, then the plain one.
        assert_eq!(ws[0].schedule, "warp_specialized_loop_persistent", "{name}");
        assert_eq!(ws[1].schedule, "warp_specialized_loop", "{name}");
        assert!(ws.iter().all(|c| !c.ptx.contains("bar.arrive")), "{name}: ping_pong off");
        if t == 256 {
            // The barrier simulation can fail: a lost first grant deadlocks.
            let mut ev = [Events::new(), Events::new()];
            for (w, e) in ev.iter_mut().enumerate() {
                events(consumers, &defs, w as u32, 2, None, e);
            }
            let grant = ev[1].iter().position(|e| *e == (false, 2)).unwrap();
            ev[1].remove(grant);
            assert!(run_barriers([&ev[0], &ev[1]]).is_err());
        }
    }
}

// ------------------------------------------- the mbarrier protocol, modelled

/// A model of the variant's synchronization, run on its Thread IR: two
/// agents, the producer's issuing thread (`tid = T`) and the consumers in
/// lockstep (`tid = 0`: every consumer thread arrives, so an arrival counts
/// `T`), each interpreting the whole function (integer arithmetic exactly;
/// memory and floating point as zeros, which only the consumers' data path
/// reads) on its own OS thread, against a model of the mbarriers
/// (`try_wait.parity p` passes once the phase of parity `p` has completed;
/// a phase completes when its arrivals reach the init count and its
/// transaction bytes, announced by `expect_tx` and delivered by the TMA
/// boxes as they are issued, come to zero), `bar.sync 0` as a rendezvous of
/// the two. It fails on a deadlock, on a box into a stage the consumers
/// hold (between their wait for `full[s]` and their arrival at `empty[s]`),
/// on more bytes delivered than announced, and on a phase left half done
/// at the end. Named barriers over the consumers alone (the ping-pong's,
/// `bar.sync 1`) are not modelled (`ping_pong_turns_balance` is).
mod model {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Condvar, Mutex};
    use tile_ir::thread_ir::{Address, Inst, Operand, Reg, Special, Stmt};

    #[derive(Default, Debug)]
    struct Bar {
        expected: i64,
        pending: i64,
        tx: i64,
        completed: i64,
    }

    #[derive(Default)]
    struct State {
        bars: HashMap<i64, Bar>,
        /// Full barriers whose stage the consumers hold.
        held: HashSet<i64>,
        rendezvous: u32,
        /// What each blocked agent waits for, by its `tid`.
        waiting: HashMap<i64, Wait>,
        live: u32,
        failure: Option<String>,
        waits: u64,
    }

    pub struct Setup<'a> {
        pub consumers: i64,
        /// Rings (one per pipelined copy), `16·stages` bytes apart.
        pub rings: i64,
        /// Bytes of one box of each tensor map, in order.
        pub box_bytes: Vec<i64>,
        /// `full[0]`'s offset and the ring's stages (`empty[s]` is `full[s] + 8·stages`).
        pub bars: i64,
        pub stages: i64,
        /// Kernel parameters by name (`p3_SK` → the value of `SK`).
        pub params: &'a HashMap<String, i64>,
    }

    struct Shared<'a> {
        st: Mutex<State>,
        cv: Condvar,
        setup: &'a Setup<'a>,
    }

    struct Agent<'s, 'a> {
        tid: i64,
        regs: HashMap<Reg, i64>,
        sh: &'s Shared<'a>,
        steps: u64,
    }

    #[derive(Clone, Copy, Debug)]
    enum Wait {
        Rendezvous,
        /// A phase of parity `.1` of the mbarrier at `.0`.
        Mbar(i64, i64),
    }

    fn ready(st: &State, w: Wait) -> bool {
        match w {
            Wait::Rendezvous => st.rendezvous >= 2,
            Wait::Mbar(at, p) => st.bars.get(&at).is_some_and(|b| b.completed % 2 != p),
        }
    }

    /// Every live agent waits and none can go on.
    fn deadlocked(st: &State) -> bool {
        st.waiting.len() as u32 == st.live && st.waiting.values().all(|w| !ready(st, *w))
    }

    enum Stop {
        Exit,
        Fail,
    }

    impl Agent<'_, '_> {
        fn val(&self, o: &Operand) -> i64 {
            match o {
                Operand::Reg(r) => self.regs.get(r).copied().unwrap_or(0),
                Operand::Imm(v) => *v,
                Operand::Special(Special::TidX) => self.tid,
                Operand::Special(Special::NctaId(_)) => 1,
                _ => 0,
            }
        }
        fn addr(&self, a: &Address) -> i64 {
            self.val(&a.base) + a.offset
        }
        fn op(&self, op: &str, a: &[i64]) -> i64 {
            let parts: Vec<&str> = op.split('.').collect();
            let g = |i: usize| a.get(i).copied().unwrap_or(0);
            match parts[0] {
                "mov" | "cvt" | "cvta" => g(0),
                "add" => g(0).wrapping_add(g(1)),
                "sub" => g(0).wrapping_sub(g(1)),
                "mul" => g(0).wrapping_mul(g(1)),
                "mad" => g(0).wrapping_mul(g(1)).wrapping_add(g(2)),
                "div" => g(0).checked_div(g(1)).unwrap_or(0),
                "rem" => g(0).checked_rem(g(1)).unwrap_or(0),
                "shl" => g(0).wrapping_shl(g(1) as u32),
                "shr" => g(0).wrapping_shr(g(1) as u32),
                "and" => g(0) & g(1),
                "or" => g(0) | g(1),
                "xor" => g(0) ^ g(1),
                "min" => g(0).min(g(1)),
                "max" => g(0).max(g(1)),
                "neg" => -g(0),
                "selp" => {
                    if g(2) != 0 {
                        g(0)
                    } else {
                        g(1)
                    }
                }
                "setp" => {
                    let (x, y) = (g(0), g(1));
                    (match parts[1] {
                        "eq" => x == y,
                        "ne" => x != y,
                        "lt" | "lo" => x < y,
                        "le" | "ls" => x <= y,
                        "gt" | "hi" => x > y,
                        "ge" | "hs" => x >= y,
                        _ => false,
                    }) as i64
                }
                _ => 0,
            }
        }
        fn fail(&self, st: &mut State, why: String) -> Stop {
            st.failure.get_or_insert(why);
            self.sh.cv.notify_all();
            Stop::Fail
        }
        /// Blocks until `w` is ready; a deadlock when every live agent
        /// waits for something that cannot happen.
        fn block(&self, w: Wait) -> Result<(), Stop> {
            let mut st = self.sh.st.lock().unwrap();
            st.waiting.insert(self.tid, w);
            while !ready(&st, w) && st.failure.is_none() {
                if deadlocked(&st) {
                    let why = format!("deadlock: tid {} waits for {w:?} ({:?}, {:?})", self.tid, st.waiting, st.bars);
                    return Err(self.fail(&mut st, why));
                }
                st = self.sh.cv.wait(st).unwrap();
            }
            st.waiting.remove(&self.tid);
            if st.failure.is_some() {
                return Err(Stop::Fail);
            }
            Ok(())
        }
        fn arrive(&self, st: &mut State, at: i64, n: i64, tx: i64) -> Result<(), Stop> {
            let Some(b) = st.bars.get_mut(&at) else {
                return Err(self.fail(st, format!("arrival at {at}, not an initialized mbarrier")));
            };
            b.pending += n;
            b.tx += tx;
            let (over, tx_neg) = (b.pending > b.expected, b.tx < 0);
            if b.pending == b.expected && b.tx == 0 {
                *b = Bar { expected: b.expected, completed: b.completed + 1, ..Bar::default() };
            }
            if over || tx_neg {
                return Err(self.fail(st, format!("mbarrier {at}: more arrivals or bytes than its phase takes")));
            }
            self.sh.cv.notify_all();
            Ok(())
        }
        fn inst(&mut self, inst: &Inst) -> Result<(), Stop> {
            let setup = self.sh.setup;
            match inst {
                Inst::Op { op, dst, args } => {
                    let a: Vec<i64> = args.iter().map(|x| self.val(x)).collect();
                    let v = self.op(op, &a);
                    self.regs.insert(*dst, v);
                }
                Inst::LdParam { dst, name, .. } => {
                    let v = name.split_once('_').and_then(|(_, n)| setup.params.get(n)).copied().unwrap_or(0);
                    self.regs.insert(*dst, v);
                }
                Inst::Ld { dsts, .. } | Inst::Ldmatrix { dsts, .. } => {
                    for d in dsts {
                        self.regs.insert(*d, 0);
                    }
                }
                Inst::TensorMapAddr { dst, param } => {
                    let i: i64 = param.trim_start_matches("tmap").parse().unwrap_or(-1);
                    self.regs.insert(*dst, 1_000_000 + i);
                }
                Inst::MbarInit { addr, count } => {
                    let (at, n) = (self.addr(addr), self.val(count));
                    let mut st = self.sh.st.lock().unwrap();
                    st.bars.insert(at, Bar { expected: n, ..Bar::default() });
                }
                Inst::MbarArriveExpectTx { addr, tx_bytes } => {
                    let (at, tx) = (self.addr(addr), self.val(tx_bytes));
                    let mut st = self.sh.st.lock().unwrap();
                    self.arrive(&mut st, at, 1, tx)?;
                }
                Inst::MbarArrive { addr } => {
                    let at = self.addr(addr);
                    let full = at - 8 * setup.stages;
                    let mut st = self.sh.st.lock().unwrap();
                    if !st.held.remove(&full) {
                        return Err(self.fail(&mut st, format!("release of stage {full} not held")));
                    }
                    self.arrive(&mut st, at, setup.consumers, 0)?;
                }
                Inst::TmaLoad { tmap, mbar, .. } => {
                    let map = self.val(tmap) - 1_000_000;
                    let Some(&bytes) = setup.box_bytes.get(map as usize) else {
                        let mut st = self.sh.st.lock().unwrap();
                        return Err(self.fail(&mut st, format!("a box through an unknown map {map}")));
                    };
                    let at = self.addr(mbar);
                    let mut st = self.sh.st.lock().unwrap();
                    if st.held.contains(&at) {
                        return Err(self.fail(&mut st, format!("a box into the held stage of {at}")));
                    }
                    self.arrive(&mut st, at, 0, -bytes)?;
                }
                Inst::MbarWait { addr, parity, pred } => {
                    let (at, p) = (self.addr(addr), self.val(parity));
                    let ring = 16 * setup.stages;
                    let is_full = (setup.bars..setup.bars + ring * setup.rings).contains(&at)
                        && (at - setup.bars) % ring < 8 * setup.stages;
                    self.block(Wait::Mbar(at, p))?;
                    let mut st = self.sh.st.lock().unwrap();
                    st.waits += 1;
                    if is_full && self.tid < setup.consumers && !st.held.insert(at) {
                        return Err(self.fail(&mut st, format!("stage {at} taken twice")));
                    }
                    drop(st);
                    self.regs.insert(*pred, 1);
                }
                Inst::NamedBarSync { id: 0, .. } => {
                    {
                        let mut st = self.sh.st.lock().unwrap();
                        st.rendezvous += 1;
                        self.sh.cv.notify_all();
                    }
                    self.block(Wait::Rendezvous)?;
                }
                Inst::Exit => return Err(Stop::Exit),
                _ => {}
            }
            Ok(())
        }
        fn run(&mut self, body: &[Stmt]) -> Result<(), Stop> {
            for s in body {
                self.steps += 1;
                if self.steps > 5_000_000 {
                    let mut st = self.sh.st.lock().unwrap();
                    return Err(self.fail(&mut st, "runaway".into()));
                }
                match s {
                    Stmt::Inst { inst, guard } => {
                        if guard.is_none_or(|(r, neg)| (self.val(&Operand::Reg(r)) != 0) != neg) {
                            self.inst(inst)?;
                        }
                    }
                    Stmt::If { cond, negate, then, otherwise, .. } => {
                        if (self.val(&Operand::Reg(*cond)) != 0) != *negate {
                            self.run(then)?
                        } else {
                            self.run(otherwise)?
                        }
                    }
                    Stmt::For { var, start, end, body, .. } => {
                        let (a, b) = (self.val(start), self.val(end));
                        for k in a..b {
                            self.regs.insert(*var, k);
                            self.run(body)?;
                        }
                    }
                    Stmt::Comment(_) => {}
                }
            }
            Ok(())
        }
    }

    /// Runs the model (see the module doc); the number of barrier waits.
    pub fn run(body: &[Stmt], setup: &Setup<'_>) -> Result<u64, String> {
        let sh = Shared { st: Mutex::new(State { live: 2, ..State::default() }), cv: Condvar::new(), setup };
        std::thread::scope(|s| {
            for tid in [setup.consumers, 0] {
                let sh = &sh;
                s.spawn(move || {
                    let mut a = Agent { tid, regs: HashMap::new(), sh, steps: 0 };
                    let _ = a.run(body);
                    let mut st = sh.st.lock().unwrap();
                    st.live -= 1;
                    if st.live > 0 && deadlocked(&st) && st.failure.is_none() {
                        st.failure = Some(format!("deadlock: tid {tid} ended, the other waits: {:?}", st.waiting));
                    }
                    sh.cv.notify_all();
                });
            }
        });
        let st = sh.st.into_inner().unwrap();
        if let Some(f) = st.failure {
            return Err(f);
        }
        if let Some((at, b)) = st.bars.iter().find(|(_, b)| b.pending != 0 || b.tx != 0) {
            return Err(format!("mbarrier {at} ends half done: {b:?}"));
        }
        if !st.held.is_empty() {
            return Err(format!("stages still held at the end: {:?}", st.held));
        }
        Ok(st.waits)
    }
}

/// The pre-loop copies the producer issues in `k`'s plan.
fn pre_copies(k: &Kernel) -> i64 {
    match Schedule::WarpSpecializedLoop.plan(k, Target::Sm90a, opts()) {
        Ok(schedule::Plan::WarpSpecializedLoop(p)) => p.pre_copies.len() as i64,
        _ => panic!("no plan"),
    }
}

/// The setup of [`model::run`] for compiled variant `c` of `k` with the
/// parameters `params`.
fn model_setup<'a>(k: &Kernel, c: &Compiled, params: &'a std::collections::HashMap<String, i64>) -> model::Setup<'a> {
    let box_bytes = c
        .tensor_maps
        .iter()
        .map(|m| {
            let ParamKind::Tensor(b) = k.params[m.tensor].kind else { panic!("a map of a scalar") };
            m.box_shape.iter().map(|&e| e as i64).product::<i64>() * k.buffer(b).dtype.size_bytes() as i64
        })
        .collect();
    let inits: Vec<i64> = insts(&c.function.body)
        .iter()
        .filter_map(|i| match i {
            Inst::MbarInit { addr, .. } => Some(addr.offset),
            _ => None,
        })
        .collect();
    let rings = c.tensor_maps.len() as i64 - pre_copies(k);
    model::Setup {
        consumers: (c.threads - 128) as i64,
        rings,
        box_bytes,
        bars: *inits.iter().min().unwrap(),
        stages: 2,
        params,
    }
}

/// The producer and the consumers keep the ring's phases and the Q
/// barrier's right, never deadlock and never refill a stage being read,
/// for loops of 0, 1, 2, 3 and 5 iterations (s_k of 0 to 300), in every
/// attention variant and the plain sum; a kernel whose `expect_tx` would be
/// short of the boxes' bytes fails the model (it can fail).
#[test]
fn mbarrier_protocol_holds_for_any_trip_count() {
    let mut cases: Vec<(String, &str, Vec<i64>)> = Vec::new();
    for (text, _) in attentions() {
        let bn = if text.contains("k_s: shared f16[128,") { 128 } else { 64 };
        let sks: Vec<i64> = [0, 1, 2, 3, 5].iter().map(|n: &i64| (n * bn - bn / 2).max(0)).collect();
        cases.push((text, "SK", sks));
    }
    cases.push((SUM.to_string(), "n", vec![0, 1, 2, 3, 5]));
    for (text, var, values) in cases {
        let k = kernel(&text);
        let c = variant(&text);
        for v in values {
            let params: std::collections::HashMap<String, i64> =
                [("B", 1), ("H", 1), ("SQ", 70), ("M", 70), ("N", 320), (var, v)]
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b))
                    .collect();
            let setup = model_setup(&k, &c, &params);
            let waits = model::run(&c.function.body, &setup).unwrap_or_else(|e| panic!("{} {var}={v}: {e}", k.name));
            // Each iteration, per ring: the consumers' full and the producer's empty wait.
            let bn = if var == "n" {
                1
            } else if text.contains("k_s: shared f16[128,") {
                128
            } else {
                64
            };
            let n = (v + bn - 1) / bn;
            let (pre, rings) = if var == "SK" { (1, 2) } else { (0, 1) };
            assert_eq!(waits as i64, 2 * rings * n + pre, "{} {var}={v}", k.name);
        }
    }
    // Short bytes: the model catches it.
    let text = attention_4d_text(Layout4d::Bhsd);
    let (k, mut c) = (kernel(&text), variant(&text));
    fn shorten(body: &mut [Stmt]) {
        for s in body {
            match s {
                Stmt::Inst { inst: Inst::MbarArriveExpectTx { tx_bytes: thread_ir::Operand::Imm(b), .. }, .. } => {
                    *b -= 2
                }
                Stmt::If { then, otherwise, .. } => {
                    shorten(then);
                    shorten(otherwise);
                }
                Stmt::For { body, .. } => shorten(body),
                _ => {}
            }
        }
    }
    let params: std::collections::HashMap<String, i64> =
        [("B", 1), ("H", 1), ("SQ", 70), ("SK", 300)].into_iter().map(|(a, b)| (a.to_string(), b)).collect();
    let setup = model_setup(&k, &c, &params);
    let good = c.function.body.clone();
    shorten(&mut c.function.body);
    assert!(model::run(&c.function.body, &setup).unwrap_err().contains("more arrivals or bytes"));
    // The producer waiting for the wrong parity of `empty`: a deadlock.
    fn flip(body: &mut [Stmt]) -> bool {
        body.iter_mut().any(|s| match s {
            Stmt::Inst { inst: Inst::Op { op, args, .. }, .. }
                if op == "xor.b32" && args.get(1) == Some(&thread_ir::Operand::Imm(1)) =>
            {
                args[1] = thread_ir::Operand::Imm(0);
                true
            }
            Stmt::If { then, otherwise, .. } => flip(then) || flip(otherwise),
            Stmt::For { body, .. } => flip(body),
            _ => false,
        })
    }
    c.function.body = good.clone();
    assert!(flip(&mut c.function.body));
    assert!(model::run(&c.function.body, &setup).unwrap_err().contains("deadlock"));
    // The consumers never releasing a stage: the producer waits forever.
    fn unrelease(body: &mut Vec<Stmt>) {
        body.retain(|s| !matches!(s, Stmt::Inst { inst: Inst::MbarArrive { .. }, .. }));
        for s in body {
            match s {
                Stmt::If { then, otherwise, .. } => {
                    unrelease(then);
                    unrelease(otherwise);
                }
                Stmt::For { body, .. } => unrelease(body),
                _ => {}
            }
        }
    }
    c.function.body = good;
    unrelease(&mut c.function.body);
    assert!(model::run(&c.function.body, &setup).unwrap_err().contains("deadlock"));
}

/// A traced build (`CompileOptions::trace`, `passes::trace`): the buffer
/// parameter after the other parameters and before the tensor maps, one
/// numbered event after every synchronizing instruction of the untraced
/// variant (mbarrier waits and arrivals, wgmma commits and waits, barriers,
/// TMA loads), each store predicated; ptxas assembles it; the default build
/// has none of it.
#[test]
fn traced_variant_marks_every_synchronizing_instruction() {
    fn events(body: &[Stmt]) -> usize {
        body.iter()
            .map(|s| match s {
                Stmt::Inst { inst, .. } => usize::from(matches!(
                    inst,
                    Inst::MbarWait { .. }
                        | Inst::MbarArrive { .. }
                        | Inst::MbarArriveCluster { .. }
                        | Inst::WgmmaCommit
                        | Inst::WgmmaWait { .. }
                        | Inst::BarSync
                        | Inst::NamedBarSync { .. }
                        | Inst::BarrierSync { .. }
                        | Inst::TmaLoad { .. }
                )),
                Stmt::If { then, otherwise, .. } => events(then) + events(otherwise),
                Stmt::For { body, .. } => events(body),
                Stmt::Comment(_) => 0,
            })
            .sum()
    }
    let (text, _) = attentions().swap_remove(2);
    let name = kernel(&text).name;
    let plain = variant(&text);
    let traced = variant_with(&text, CompileOptions { trace: true, ..opts() });
    assert!(!plain.ptx.contains("tile_trace") && !plain.ptx.contains("%clock64"), "{name}");
    let n = events(&plain.function.body);
    assert!(n > 10, "{name}: {n} events");
    assert_eq!(traced.ptx.matches("// trace event ").count(), n, "{name}");
    assert!(traced.ptx.contains(&format!("// trace event {}: ", n - 1)), "{name}");
    let params: Vec<&str> = traced.function.params.iter().map(|(p, _)| p.as_str()).collect();
    let at = params.iter().position(|&p| p == abi::TRACE_PARAM).expect("the trace parameter");
    assert!(traced.function.params[at + 1..].iter().all(|(_, ty)| *ty == thread_ir::TENSOR_MAP_PARAM), "{params:?}");
    assert!(traced.function.params[..at].iter().all(|(_, ty)| *ty != thread_ir::TENSOR_MAP_PARAM), "{params:?}");
    assert!(abi::takes_trace(&traced.ptx) && !abi::takes_trace(&plain.ptx));
    assert_eq!(traced.ptx.matches("st.global.u64").count(), n, "{name}: one predicated store per event");
    if let Some(r) = ptxas::assemble(&name, &traced.ptx, "sm_90a") {
        assert!(r.contains("Used"), "{r}");
    }
}

/// `wsloop_l2_prefetch`: in the producer's loop, after each ring's boxes of
/// iteration `k`, the same boxes of `k + 1` prefetched into L2 under a
/// branch on `k + 1 < end` (the origin is evaluated only there); the
/// consumers' code and the default build have none; ptxas assembles it.
#[test]
fn l2_prefetch_issues_the_next_iterations_boxes() {
    fn count(body: &[Stmt], f: &dyn Fn(&Inst) -> bool) -> usize {
        insts(body).into_iter().filter(|i| f(i)).count()
    }
    let is_load = |i: &Inst| matches!(i, Inst::TmaLoad { .. });
    let is_prefetch = |i: &Inst| matches!(i, Inst::TmaPrefetch { .. });
    for (text, _) in attentions() {
        let name = kernel(&text).name;
        let plain = variant(&text);
        let with = variant_with(&text, CompileOptions { wsloop_l2_prefetch: true, ..opts() });
        assert!(!plain.ptx.contains("cp.async.bulk.prefetch.tensor"), "{name}");
        let (producer, consumers) = split(&with.function.body);
        assert_eq!(count(consumers, &is_prefetch), 0, "{name}");
        fn first_loop(body: &[Stmt]) -> Option<&Vec<Stmt>> {
            body.iter().find_map(|s| match s {
                Stmt::For { body, .. } => Some(body),
                Stmt::If { then, otherwise, .. } => first_loop(then).or_else(|| first_loop(otherwise)),
                _ => None,
            })
        }
        let lp = first_loop(producer).expect("the producer's loop");
        // Each prefetch stands in a branch that holds nothing but the
        // origin's arithmetic and the prefetches (no load, no barrier).
        let branches: Vec<&Vec<Stmt>> = lp
            .iter()
            .filter_map(|s| match s {
                Stmt::If { then, otherwise, .. } if otherwise.is_empty() && count(then, &is_prefetch) > 0 => Some(then),
                _ => None,
            })
            .collect();
        assert!(!branches.is_empty(), "{name}");
        let loads = count(lp, &is_load);
        let prefetches: usize = branches.iter().map(|b| count(b, &is_prefetch)).sum();
        assert_eq!(prefetches, loads, "{name}: one prefetch per box of the loop");
        assert_eq!(count(lp, &is_prefetch), prefetches, "{name}: every prefetch under its branch");
        for b in &branches {
            for i in insts(b) {
                assert!(matches!(i, Inst::Op { .. } | Inst::TmaPrefetch { .. }), "{name}: {i:?} in a prefetch branch");
            }
        }
        let lines = with.ptx.lines().filter(|l| l.trim_start().starts_with("cp.async.bulk.prefetch.tensor.")).count();
        assert_eq!(lines, prefetches, "{name}");
        if let Some(r) = ptxas::assemble(&name, &with.ptx, "sm_90a") {
            assert!(r.contains("Used"), "{r}");
        }
    }
}

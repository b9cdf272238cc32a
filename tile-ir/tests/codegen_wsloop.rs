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
//! variant without spills. (The Thread IR simulator runs threads in lockstep
//! and cannot run warp-specialized code: `tests/gpu_wsloop.rs` runs these
//! kernels on the GPU.)

mod ptxas;

use tile_ir::print::parse_kernel;
use tile_ir::schedule::{describe_decisions, Schedule};
use tile_ir::thread_ir::{Inst, Stmt};
use tile_ir::*;
use tile_testkit::{attention_4d_sized, attention_4d_text, Layout4d};

fn kernel(text: &str) -> Kernel {
    parse_kernel(text).unwrap_or_else(|e| panic!("{e:?}\n{text}"))
}

/// The 4-D attention kernels: (text, consumer threads).
fn attentions() -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for l in [Layout4d::Bhsd, Layout4d::Bshd] {
        out.push((attention_4d_text(l), 128));
        out.push((attention_4d_sized(l, 128, 128, 64, 256), 256));
        out.push((attention_4d_sized(l, 128, 128, 128, 256), 256));
    }
    out
}

fn reason(text: &str, target: Target) -> String {
    match Schedule::WarpSpecializedLoop.plan(&kernel(text), target, CompileOptions::default()) {
        Ok(_) => panic!("the warp-specialized loop takes\n{text}"),
        Err(na) => na.reason,
    }
}

/// The variant of the schedule, compiled through `compile_variants` (the
/// first sm_90a one).
fn variant(text: &str) -> Compiled {
    let k = kernel(text);
    let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    assert_eq!(names, ["warp_specialized_loop", "tma_copy", "cp_async_pipeline"], "{}", k.name);
    v.into_iter().next().unwrap()
}

#[test]
fn takes_the_attention_kernels() {
    for (text, threads) in attentions() {
        let k = kernel(&text);
        let d = describe_decisions(&k, Target::Sm90a, CompileOptions::default());
        assert!(d.contains("\nwarp_specialized_loop: applies\n"), "{}: {d}", k.name);
        assert!(d.starts_with("warp_specialized_gemm: not applicable"), "{}: {d}", k.name);
        let Ok(schedule::Plan::WarpSpecializedLoop(p)) =
            Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, CompileOptions::default())
        else {
            panic!("{}: no plan", k.name)
        };
        assert_eq!((p.consumer_threads, p.stages, p.copies.len()), (threads, 2, 2), "{}", k.name);
        // The block indices are `ctaid`s: the producer needs no `let`; it
        // issues the Q tile too (the body's first statement).
        assert!(p.producer_lets.is_empty(), "{}", k.name);
        assert_eq!(p.pre_copies, vec![0], "{}", k.name);
        // 40 for the producer, the rest shared by the consumers (≤ 240).
        assert_eq!((p.producer_regs, p.consumer_regs), (40, if threads == 128 { 240 } else { 232 }));
        assert!(40 * 128 + p.consumer_regs * threads <= 65_536);
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
    let Ok(schedule::Plan::WarpSpecializedLoop(p)) =
        Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, CompileOptions::default())
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
    assert!(Schedule::WarpSpecializedLoop.plan(&k, Target::Sm90a, CompileOptions::default()).is_ok());
    // A `let` of the block index the origin uses: the producer evaluates it.
    let text = SUM
        .replace("  fill acc, 0.0\n", "  fill acc, 0.0\n  let %7 row: i32 = bm * 64\n")
        .replace("copy x[bm * 64, kb * 64]", "copy x[row, kb * 64]");
    let Ok(schedule::Plan::WarpSpecializedLoop(p)) =
        Schedule::WarpSpecializedLoop.plan(&kernel(&text), Target::Sm90a, CompileOptions::default())
    else {
        panic!("no plan")
    };
    assert_eq!(p.producer_lets, vec![1]);
    let c = variant(&text);
    assert_eq!(c.threads, 256);
}

#[test]
fn says_why_it_refuses() {
    let att = attention_4d_text(Layout4d::Bhsd);
    assert!(reason(&att, Target::Sm80).contains("warp specialization needs sm_90a, not sm_80"));
    let off = att
        .replace(") threads=128 grid=", ") threads=128 grid=")
        .replace(" grid=((SQ + 63) / 64, H, B) {", " grid=((SQ + 63) / 64, H, B) warp_specialize=false {");
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
    // Bounds that read memory; an origin through a `let` that does.
    let load = SUM
        .replace("  fill acc, 0.0\n", "  fill acc, 0.0\n  let %7 r: i32 = x[0, 0] as i32\n")
        .replace("0..n {", "0..r {");
    assert!(reason(&load, Target::Sm90a).contains("`r` reads memory"), "{load}");
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
    for (text, t) in attentions() {
        let c = variant(&text);
        let name = kernel(&text).name;
        let f = &c.function;
        // K and V, then Q.
        assert_eq!((c.threads, f.barrier_threads, c.tensor_maps.len()), (t + 128, Some(t), 3), "{name}");
        let tensors: Vec<usize> = c.tensor_maps.iter().map(|m| m.tensor).collect();
        assert_eq!(tensors, [1, 2, 0], "{name}");
        assert!(c.ptx.contains(&format!(".maxntid {}, 1, 1\n.minnctapersm 1\n", t + 128)), "{name}");
        let regs = if t == 128 { 240 } else { 232 };
        assert!(c.ptx.contains("setmaxnreg.dec.sync.aligned.u32 40;"), "{name}");
        assert!(c.ptx.contains(&format!("setmaxnreg.inc.sync.aligned.u32 {regs};")), "{name}");
        // The ring: full[s] with one arrival (+ tx), empty[s] with T; Q's.
        let all = insts(&f.body);
        let counts: Vec<i64> = all
            .iter()
            .filter_map(|i| match i {
                Inst::MbarInit { count: thread_ir::Operand::Imm(n), .. } => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(counts, [1, t as i64, 1, t as i64, 1], "{name}");
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
                Inst::Op { op, .. } => {
                    ["mov.", "add.", "mad.", "mul.", "div.", "xor.", "selp.", "setp."].iter().any(|x| op.starts_with(x))
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
        let boxes = if t == 128 { 3 } else { 6 };
        assert_eq!(p.iter().filter(|i| matches!(i, Inst::TmaLoad { .. })).count(), boxes, "{name}: K and V boxes");
        assert!(matches!(p.last(), Some(Inst::Exit)));
        // The consumers: no TMA, no block-wide barrier; their loop waits for
        // full[st] first and releases empty[st] once, after the last wgmma wait.
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
        assert!(
            b.iter().position(|i| matches!(i, Inst::MbarWait { .. }))
                < b.iter().position(|i| matches!(i, Inst::Wgmma { .. }))
        );
        let arrives: Vec<usize> =
            b.iter().enumerate().filter(|(_, i)| matches!(i, Inst::MbarArrive { .. })).map(|(j, _)| j).collect();
        assert_eq!(arrives.len(), 1, "{name}");
        let last_wait = b.iter().rposition(|i| matches!(i, Inst::WgmmaWait { pending: 0 })).expect("a wgmma wait");
        let last_wgmma = b.iter().rposition(|i| matches!(i, Inst::Wgmma { .. })).unwrap();
        assert!(
            last_wgmma < last_wait && last_wait < arrives[0],
            "{name}: the stage is released before its wgmma is done"
        );
        assert!(!b.iter().any(|i| matches!(i, Inst::BarSync)), "{name}: a barrier in the attention loop");
        // Q came by TMA: the consumers wait for it (no cp.async, and no
        // barrier or proxy fence before the loop for it).
        assert!(!cons.iter().any(|i| matches!(i, Inst::CpAsync { .. })), "{name}");
        let before_loop = consumers.iter().take_while(|s| !matches!(s, Stmt::For { uniform: true, .. }));
        let pre: Vec<&Inst> = before_loop.flat_map(|s| insts(std::slice::from_ref(s))).collect();
        assert!(pre.iter().any(|i| matches!(i, Inst::MbarWait { parity: thread_ir::Operand::Imm(0), .. })), "{name}");
        assert!(!pre.iter().any(|i| matches!(i, Inst::BarSync | Inst::FenceProxyAsync)), "{name}");
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
/// loop's bounds) and `k a` (its variable and start), else their registers.
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
    let name = |o: &thread_ir::Operand| match o {
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
                assert_eq!(turns0, if n == 0 { 0 } else { 2 * n + 2 }, "{name} n={n}: {:?}", ev[0]);
            }
            run_barriers([&ev[0], &ev[1]]).unwrap_or_else(|e| panic!("{name} n={n}: {e}\n{ev:?}"));
        }
        let k = kernel(&text);
        let off = CompileOptions { ping_pong: false, ..CompileOptions::default() };
        let v = compile_variants(&k, Target::Sm90a, off).unwrap();
        assert_eq!(v[0].schedule, "warp_specialized_loop");
        assert!(!v[0].ptx.contains("bar.arrive"), "{name}: ping_pong off");
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

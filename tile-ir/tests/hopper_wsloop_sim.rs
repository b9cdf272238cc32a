//! The warp-specialized loop variant (`warp_specialized_loop`, sm_90a) of
//! FlashAttention over 4-D tensors run on the Thread IR simulator, whose
//! warps run independently (`sim/mod.rs`: named barriers with counts,
//! mbarriers, TMA, `exit`, cross-warp races by vector clocks), under several
//! interleavings: head dim 64 over one consumer warpgroup (Q·Kᵀ issued one
//! iteration ahead, two blocks per SM; `CompileOptions::wsloop_one_warpgroup`
//! on, as the default plan declines one consumer warpgroup), 128 over one (64 query rows) and
//! over two (128 rows, key blocks of 64 and 128: the ping-pong, issuing
//! ahead too with key blocks of 64: `CompileOptions::ping_pong_lookahead`,
//! which has a test of its own at head dim 64 and 128), both layouts, against the f64 reference for loops of 1, 2 and 5 key blocks
//! (partial last blocks, query rows off the block), and for a loop of none
//! against the TMA-copy variant's bytes (both divide 0 by 0). Every
//! interleaving must give the same bytes; a deadlock fails with where each
//! warp waits.

mod gemm_sim;
mod sim;

use gemm_sim::{decode, random, Rng};
use sim::SimTensor;
use tile_ir::print::parse_kernel;
use tile_ir::*;
use tile_testkit::{attention_4d_sized, Layout4d};

/// `(text, consumer threads, head dim, key block)`.
fn kernels() -> Vec<(String, u32, usize, usize)> {
    let mut out = Vec::new();
    for l in [Layout4d::Bhsd, Layout4d::Bshd] {
        out.push((attention_4d_sized(l, 64, 64, 64, 128), 128, 64, 64));
        out.push((attention_4d_sized(l, 128, 64, 64, 128), 128, 128, 64));
        out.push((attention_4d_sized(l, 128, 128, 64, 256), 256, 128, 64));
    }
    out.push((attention_4d_sized(Layout4d::Bhsd, 128, 128, 128, 256), 256, 128, 128));
    out
}

/// The `schedule` variant of `k`, with the one-consumer-warpgroup variant
/// of the warp-specialized loop on (`CompileOptions::wsloop_one_warpgroup`).
fn variant(k: &Kernel, schedule: &str) -> Compiled {
    let options = CompileOptions { wsloop_one_warpgroup: true, ..CompileOptions::default() };
    let v = compile_variants(k, Target::Sm90a, options).unwrap_or_else(|e| panic!("{e:?}"));
    v.into_iter().find(|c| c.schedule == schedule).unwrap_or_else(|| panic!("{}: no {schedule} variant", k.name))
}

/// q, k, v, o (NaN bits), lse of one batch and head (`b = h = 1`: both
/// layouts are then `[s, d]` in memory), the f64 reference of o.
fn problem(sq: usize, sk: usize, d: usize, bshd: bool) -> (Vec<SimTensor>, Vec<f64>) {
    let mut rng = Rng(0x5157 ^ (sq * 1000 + sk * 7 + d) as u64);
    let (qb, qv) = random(&mut rng, DType::F16, sq * d, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, DType::F16, sk.max(1) * d, -2.0, 2.0);
    let (vb, vv) = random(&mut rng, DType::F16, sk.max(1) * d, -1.0, 1.0);
    let shape = |s: usize| if bshd { vec![1, s, 1, d] } else { vec![1, 1, s, d] };
    let t = |bytes: Vec<u8>, s: usize| SimTensor { bytes, shape: shape(s), elem: 2 };
    let tensors = vec![
        t(qb, sq),
        t(kb, sk.max(1)),
        t(vb, sk.max(1)),
        t(vec![0xFF; 2 * sq * d], sq),
        SimTensor { bytes: vec![0xFF; 4 * sq], shape: vec![1, 1, sq], elem: 4 },
    ];
    let want = if sk == 0 { Vec::new() } else { gemm_sim::attention_reference(&qv, &kv, &vv, sq, sk, d) };
    (tensors, want)
}

#[test]
fn attention_variants_on_the_simulator() {
    for (text, t, d, bn) in kernels() {
        let k = parse_kernel(&text).unwrap();
        let c = variant(&k, "warp_specialized_loop");
        // Which schedule the consumers got.
        assert_eq!(c.ptx.contains("bar.arrive"), t == 256, "{}: ping-pong", k.name);
        assert_eq!(c.ptx.contains(".minnctapersm 2"), t == 128, "{}: two blocks per SM", k.name);
        let bshd = text.contains("attention_bshd");
        let bm = (t / 2) as usize;
        let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
        // Loops of 1, 2 and 5 key blocks (partial last ones), query rows off the block.
        for (sq, sk) in [(bm - 3, bn / 2 + 1), (bm + 5, 2 * bn), (7, 4 * bn + 9)] {
            let (tensors, want) = problem(sq, sk, d, bshd);
            let dims = if bshd { [1, sq as i64, 1, sk as i64] } else { [1, 1, sq as i64, sk as i64] };
            let out = sim::run_interleavings(&c.function, &k, tensors, &dims, &[scale.to_bits() as u64], None);
            let err = gemm_sim::rel_l2(&decode(DType::F16, &out[3]), &want);
            assert!(err <= 5e-3, "{} sq={sq} sk={sk}: relative L2 error {err:.3e}", k.name);
        }
    }
}

/// A loop of no key block: nobody waits for a phase that never completes,
/// and the output is the TMA-copy variant's (0/0 everywhere).
#[test]
fn attention_with_no_key_block() {
    for (text, t, d, _) in kernels() {
        let k = parse_kernel(&text).unwrap();
        let bshd = text.contains("attention_bshd");
        let sq = (t / 2) as usize;
        let (mut tensors, _) = problem(sq, 0, d, bshd);
        // A key tensor of one row the loop never reaches: SK = 0.
        let dims = if bshd { [1, sq as i64, 1, 0] } else { [1, 1, sq as i64, 0] };
        for t in tensors.iter_mut().skip(1).take(2) {
            t.bytes.clear();
            t.shape[if bshd { 1 } else { 2 }] = 0;
        }
        let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
        let ws = variant(&k, "warp_specialized_loop");
        let tma = variant(&k, "tma_copy");
        let a = sim::run_interleavings(&ws.function, &k, tensors.clone(), &dims, &[scale.to_bits() as u64], None);
        let b = sim::run_interleavings(&tma.function, &k, tensors, &dims, &[scale.to_bits() as u64], None);
        assert!(a[3] == b[3] && a[4] == b[4], "{}: SK = 0 differs from the TMA-copy variant", k.name);
    }
}

/// Removes from `body` (recursively) the instructions `drop` picks; how many.
fn remove(body: &mut Vec<thread_ir::Stmt>, drop: &dyn Fn(&thread_ir::Inst) -> bool) -> usize {
    use thread_ir::Stmt;
    let before = body.len();
    body.retain(|s| !matches!(s, Stmt::Inst { inst, .. } if drop(inst)));
    let mut n = before - body.len();
    for s in body.iter_mut() {
        match s {
            Stmt::If { then, otherwise, .. } => n += remove(then, drop) + remove(otherwise, drop),
            Stmt::For { body, .. } => n += remove(body, drop),
            _ => {}
        }
    }
    n
}

/// Planted bugs in a correct variant are caught: the consumers not waiting
/// for their stages (a race with the TMA, or wrong bytes), the ping-pong's
/// first grant lost (a deadlock).
#[test]
fn planted_bugs_are_caught() {
    let text = attention_4d_sized(Layout4d::Bhsd, 128, 128, 64, 256);
    let k = parse_kernel(&text).unwrap();
    let c = variant(&k, "warp_specialized_loop");
    let (sq, sk, d) = (100, 130, 128);
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    let dims = [1, 1, sq as i64, sk as i64];
    let run = |f: &thread_ir::Function| {
        let (tensors, want) = problem(sq, sk, d, false);
        let f = f.clone();
        let k = k.clone();
        std::panic::catch_unwind(move || {
            let out = sim::run_interleavings(&f, &k, tensors, &dims, &[scale.to_bits() as u64], None);
            gemm_sim::rel_l2(&decode(DType::F16, &out[3]), &want)
        })
    };
    assert!(run(&c.function).is_ok_and(|e| e <= 5e-3), "the variant itself");
    // The consumers' waits for full stages (parity from a register, in the loop).
    let mut f = c.function.clone();
    let consumer_full_waits =
        |i: &thread_ir::Inst| matches!(i, thread_ir::Inst::MbarWait { parity: thread_ir::Operand::Reg(_), .. });
    // Only the consumers' loop: the producer's waits sit inside its branch,
    // which `remove` reaches too, so drop the waits of the uniform loop alone.
    let mut n = 0;
    for s in f.body.iter_mut() {
        if let thread_ir::Stmt::For { uniform: true, body, .. } = s {
            n += remove(body, &consumer_full_waits);
        }
    }
    assert!(n >= 2, "{n}");
    assert!(!run(&f).is_ok_and(|e| e <= 5e-3), "reading stages before they land went unnoticed");
    // The first grant of the ping-pong.
    let mut f = c.function.clone();
    let mut grants = 0;
    for s in f.body.iter_mut() {
        if let thread_ir::Stmt::If { uniform: true, then, .. } = s {
            if !matches!(then.first(), Some(thread_ir::Stmt::If { .. })) {
                continue;
            }
            grants += remove(then, &|i| matches!(i, thread_ir::Inst::NamedBarArrive { id: 2, .. }));
        }
        if grants > 0 {
            break;
        }
    }
    assert_eq!(grants, 1);
    assert!(run(&f).is_err(), "a lost grant did not deadlock");
}

/// `CompileOptions::ping_pong_lookahead`: two consumer warpgroups that
/// ping-pong and issue Q·Kᵀ one iteration ahead (the turn around the next
/// iteration's issue), at head dim 64 and 128 with key blocks of 64 (where
/// the twin scores fit beside the fragments), both layouts: loops of 1 to
/// 5 key blocks (partial last ones, query rows off the block) against the
/// f64 reference, and of none against the TMA-copy variant's bytes, under
/// interleavings. With key blocks of 128 the twins do not fit (ptxas
/// spills): the variant is the plain ping-pong's.
#[test]
fn ping_pong_with_lookahead_on_the_simulator() {
    // Issuing ahead applies where the last gemm is not deferred.
    // The persistent loop on (the default): its variant comes first, the plain one second.
    let on = CompileOptions {
        ping_pong_lookahead: true,
        defer_last_gemm: false,
        wsloop_persistent: true,
        ..CompileOptions::default()
    };
    let off = CompileOptions {
        ping_pong_lookahead: false,
        defer_last_gemm: false,
        wsloop_persistent: true,
        ..CompileOptions::default()
    };
    let first = |k: &Kernel, o: CompileOptions| {
        let v = compile_variants(k, Target::Sm90a, o).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(v[1].schedule, "warp_specialized_loop", "{}", k.name);
        v.into_iter().nth(1).unwrap()
    };
    for l in [Layout4d::Bhsd, Layout4d::Bshd] {
        for d in [64, 128] {
            let k = parse_kernel(&attention_4d_sized(l, d, 128, 128, 256)).unwrap();
            assert_eq!(first(&k, on).ptx, first(&k, off).ptx, "{}: key blocks of 128 issue ahead", k.name);
        }
    }
    for l in [Layout4d::Bhsd, Layout4d::Bshd] {
        for d in [64usize, 128] {
            let bn = 64;
            let text = attention_4d_sized(l, d as i64, 128, bn as i64, 256);
            let k = parse_kernel(&text).unwrap();
            let c = first(&k, on);
            let plain = first(&k, off);
            // Both: the turns (bar.arrive), and Q·Kᵀ's wgmmas twice (before
            // the loop and ahead in it) where the plain ping-pong has them once.
            assert!(c.ptx.contains("bar.arrive"), "{}: no ping-pong", k.name);
            let wgmmas = |p: &str| p.matches("wgmma.mma_async").count();
            assert!(wgmmas(&c.ptx) > wgmmas(&plain.ptx), "{}: Q·Kᵀ not issued ahead", k.name);
            let bshd = text.contains("attention_bshd");
            let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
            for (sq, sk) in [(125, bn / 2 + 1), (133, 2 * bn), (7, 3 * bn - 5), (128, 4 * bn), (60, 4 * bn + 9)] {
                let (tensors, want) = problem(sq, sk, d, bshd);
                let dims = if bshd { [1, sq as i64, 1, sk as i64] } else { [1, 1, sq as i64, sk as i64] };
                let out = sim::run_interleavings(&c.function, &k, tensors, &dims, &[scale.to_bits() as u64], None);
                let err = gemm_sim::rel_l2(&decode(DType::F16, &out[3]), &want);
                assert!(err <= 5e-3, "{} sq={sq} sk={sk}: relative L2 error {err:.3e}", k.name);
            }
            // No key block.
            let sq = 100;
            let (mut tensors, _) = problem(sq, 0, d, bshd);
            let dims = if bshd { [1, sq as i64, 1, 0] } else { [1, 1, sq as i64, 0] };
            for t in tensors.iter_mut().skip(1).take(2) {
                t.bytes.clear();
                t.shape[if bshd { 1 } else { 2 }] = 0;
            }
            let tma = variant(&k, "tma_copy");
            let a = sim::run_interleavings(&c.function, &k, tensors.clone(), &dims, &[scale.to_bits() as u64], None);
            let b = sim::run_interleavings(&tma.function, &k, tensors, &dims, &[scale.to_bits() as u64], None);
            assert!(a[3] == b[3] && a[4] == b[4], "{}: SK = 0 differs from the TMA-copy variant", k.name);
        }
    }
}

/// `CompileOptions::defer_last_gemm` (on by default where P·V is the wider
/// gemm, so some variants of `attention_variants_on_the_simulator` are
/// its): P·V of iteration `k` issued after Q·Kᵀ of `k + 1` (with O's
/// rescale before it, `CompileOptions::hoist_rescale`, or without). Against the loop without it, under
/// interleavings, for one and two consumer warpgroups, and planted bugs:
/// the wait that lets the softmax read S (`wait_group 1`) or the one before
/// O's rescale and P's conversion (`wait_group 0`) dropped is caught (S read
/// pending, or a pending wgmma's accumulator or A registers written).
#[test]
fn deferred_last_gemm_on_the_simulator() {
    let off = CompileOptions { defer_last_gemm: false, wsloop_one_warpgroup: true, ..CompileOptions::default() };
    let on = CompileOptions { wsloop_one_warpgroup: true, ..CompileOptions::default() };
    let wsl = |k: &Kernel, o: CompileOptions| {
        let v = compile_variants(k, Target::Sm90a, o).unwrap_or_else(|e| panic!("{e:?}"));
        v.into_iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant")
    };
    let waits = |f: &thread_ir::Function, pending: u32| {
        fn count(body: &[thread_ir::Stmt], pending: u32) -> usize {
            body.iter()
                .map(|s| match s {
                    thread_ir::Stmt::Inst { inst: thread_ir::Inst::WgmmaWait { pending: p }, .. } => {
                        usize::from(*p == pending)
                    }
                    thread_ir::Stmt::If { then, otherwise, .. } => count(then, pending) + count(otherwise, pending),
                    thread_ir::Stmt::For { body, .. } => count(body, pending),
                    _ => 0,
                })
                .sum()
        }
        count(&f.body, pending)
    };
    // Where P·V is not the wider gemm, nothing is deferred (measured slower
    // on the H200: `defer.rs`).
    for (d, bn) in [(128, 128), (64, 64)] {
        let k = parse_kernel(&attention_4d_sized(Layout4d::Bhsd, d, 128, bn, 256)).unwrap();
        assert_eq!(wsl(&k, on).ptx, wsl(&k, off).ptx, "{}: deferred", k.name);
    }
    for (text, t, d, bn) in [
        (attention_4d_sized(Layout4d::Bhsd, 128, 128, 64, 256), 256, 128, 64),
        (attention_4d_sized(Layout4d::Bshd, 128, 128, 64, 256), 256, 128, 64),
        (attention_4d_sized(Layout4d::Bhsd, 128, 64, 64, 128), 128, 128, 64),
    ] {
        let k = parse_kernel(&text).unwrap();
        let (c, plain) = (wsl(&k, on), wsl(&k, off));
        // S's `wait_group 1`, and the no-op one after Q·Kᵀ's commit that
        // ptxas needs before the hoisted rescale (`defer.rs`).
        assert!(waits(&c.function, 1) == 2 && waits(&plain.function, 1) == 0, "{} (T = {t}): not deferred", k.name);
        let bshd = text.contains("attention_bshd");
        let run = |f: &thread_ir::Function, sq: usize, sk: usize| attention_error(f, &k, sq, sk, d, bshd);
        // `CompileOptions::hoist_rescale` (on): O's rescale runs with the
        // deferred P·V, after the next Q·Kᵀ's issue; both orders are checked.
        let unhoisted = wsl(&k, CompileOptions { hoist_rescale: false, ..on });
        assert_ne!(unhoisted.ptx, c.ptx, "{}: O's rescale not hoisted", k.name);
        for (sq, sk) in [(77, bn / 2 + 3), (128, 2 * bn), (40, 3 * bn - 1)] {
            for f in [&c.function, &unhoisted.function] {
                let err = run(f, sq, sk).unwrap_or_else(|_| panic!("{} sq={sq} sk={sk}", k.name));
                assert!(err <= 5e-3, "{} sq={sq} sk={sk}: relative L2 error {err:.3e}", k.name);
            }
        }
        // No key block: the bytes of the loop without the deferral.
        assert!(
            same_without_keys(&c.function, &plain.function, &k, d, bshd),
            "{}: SK = 0 differs from the loop without the deferral",
            k.name
        );
        // The hoisted rescale's `wait_group 1` (the loop's first) retires
        // nothing: without it the loop is as correct.
        let mut f = c.function.clone();
        let mut first = true;
        for s in f.body.iter_mut() {
            if let thread_ir::Stmt::For { uniform: true, body, .. } = s {
                let at = body.iter().position(|s| {
                    matches!(s, thread_ir::Stmt::Inst { inst: thread_ir::Inst::WgmmaWait { pending: 1 }, .. })
                });
                if let (Some(at), true) = (at, first) {
                    body.remove(at);
                    first = false;
                }
            }
        }
        assert!(!first, "{}: no top-level wait_group 1 in the consumers' loop", k.name);
        let err = run(&f, 100, 2 * bn + 5).unwrap_or_else(|_| panic!("{}: without the no-op wait", k.name));
        assert!(err <= 5e-3, "{}: without the no-op wait: relative L2 error {err:.3e}", k.name);
        // Planted bugs, in the consumers' loop (the uniform one).
        for pending in [1, 0] {
            let mut f = c.function.clone();
            let mut n = 0;
            for s in f.body.iter_mut() {
                if let thread_ir::Stmt::For { uniform: true, body, .. } = s {
                    n += remove(body, &|i| matches!(i, thread_ir::Inst::WgmmaWait { pending: p } if *p == pending));
                }
            }
            assert!(n >= 1, "{}: no wait_group {pending} to drop", k.name);
            assert!(
                !run(&f, 100, 2 * bn + 5).is_ok_and(|e| e <= 5e-3),
                "{}: dropping the loop's wait_group {pending} went unnoticed",
                k.name
            );
        }
    }
}

/// `CompileOptions::late_last_wait` (on by default): the ping-pong's P·V
/// left in flight across the back-edge, waited for after the next Q·Kᵀ is
/// issued, V's stage released then (or after the loop). At head dim 128
/// with key blocks of 128 (the acceptance schedule), both layouts,
/// against the f64 reference for loops of 1 to 4 key blocks (partial last
/// ones) under interleavings, and of none against the loop without it;
/// planted bugs are caught: the wait that retires P·V and S dropped (S or
/// O read pending), and V's stage released in the first iteration too (an
/// extra arrival: the producer refills a stage a P·V still reads).
#[test]
fn late_last_wait_on_the_simulator() {
    use thread_ir::{Inst, Stmt};
    let off = CompileOptions { late_last_wait: false, ..CompileOptions::default() };
    let wsl = |k: &Kernel, o: CompileOptions| {
        let v = compile_variants(k, Target::Sm90a, o).unwrap_or_else(|e| panic!("{e:?}"));
        v.into_iter().find(|c| c.schedule == "warp_specialized_loop").expect("a warp-specialized variant")
    };
    // The consumers' loop: the uniform one.
    fn consumer_loop(body: &mut [Stmt]) -> Option<&mut Vec<Stmt>> {
        body.iter_mut().find_map(|s| match s {
            Stmt::For { uniform: true, body, .. } => Some(body),
            _ => None,
        })
    }
    let is_wait = |s: &Stmt| matches!(s, Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, .. });
    let is_commit = |s: &Stmt| matches!(s, Stmt::Inst { inst: Inst::WgmmaCommit, .. });
    // (With key blocks of 64 the ping-pong issues Q·Kᵀ ahead instead.)
    for (l, bn) in [(Layout4d::Bhsd, 128usize), (Layout4d::Bshd, 128)] {
        let text = attention_4d_sized(l, 128, 128, bn as i64, 256);
        let k = parse_kernel(&text).unwrap();
        let (c, plain) = (wsl(&k, CompileOptions::default()), wsl(&k, off));
        // The loop ends with P·V's commit, not its wait; without the option, with its wait.
        let ends = |f: &thread_ir::Function| {
            let mut f = f.clone();
            let body = consumer_loop(&mut f.body).expect("a consumers' loop").clone();
            let last = body.iter().rposition(|s| is_commit(s) || is_wait(s)).expect("a wgmma in the loop");
            is_commit(&body[last])
        };
        assert!(ends(&c.function) && !ends(&plain.function), "{}: P·V not left in flight", k.name);
        let bshd = text.contains("attention_bshd");
        let run = |f: &thread_ir::Function, sq: usize, sk: usize| attention_error(f, &k, sq, sk, 128, bshd);
        for (sq, sk) in [(77, bn / 2 + 3), (128, 2 * bn), (40, 3 * bn - 1), (130, 4 * bn)] {
            let err = run(&c.function, sq, sk).unwrap_or_else(|_| panic!("{} sq={sq} sk={sk}", k.name));
            assert!(err <= 5e-3, "{} sq={sq} sk={sk}: relative L2 error {err:.3e}", k.name);
        }
        // No key block: the bytes of the loop without the option.
        assert!(
            same_without_keys(&c.function, &plain.function, &k, 128, bshd),
            "{}: SK = 0 differs from the loop without the option",
            k.name
        );
        if bshd {
            continue;
        }
        // Planted: the waits of the loop dropped.
        let mut f = c.function.clone();
        let n = remove(consumer_loop(&mut f.body).unwrap(), &|i| matches!(i, Inst::WgmmaWait { pending: 0 }));
        assert!(n >= 1, "{}: no wait to drop", k.name);
        assert!(!run(&f, 100, 3 * bn - 5).is_ok_and(|e| e <= 5e-3), "{}: the dropped wait went unnoticed", k.name);
        // Planted: V released in the first iteration too (the guard of the
        // release after the wait dropped).
        let mut f = c.function.clone();
        let body = consumer_loop(&mut f.body).unwrap();
        let at = (1..body.len())
            .find(|&j| {
                is_wait(&body[j - 1])
                    && matches!(&body[j], Stmt::If { then, .. } if then.iter().any(|s| matches!(s, Stmt::Inst { inst: Inst::MbarArrive { .. }, .. })))
            })
            .unwrap_or_else(|| panic!("{}: no guarded release after a wait", k.name));
        let Stmt::If { then, .. } = body.remove(at) else { unreachable!() };
        body.splice(at..at, then);
        // (Five key blocks: the early phase lets the fill of block 3 into
        // block 1's stage start while block 1's P·V may still read it.)
        assert!(
            !run(&f, 100, 5 * bn - 5).is_ok_and(|e| e <= 5e-3),
            "{}: V released in the first iteration went unnoticed",
            k.name
        );
    }
}

/// `f` (a variant of attention kernel `k`, head dim `d`) on `problem(sq,
/// sk, ..)` under interleavings: the relative L2 error of o against the
/// f64 reference, or the simulator's panic (a race, a deadlock, a pending
/// register read).
fn attention_error(
    f: &thread_ir::Function,
    k: &Kernel,
    sq: usize,
    sk: usize,
    d: usize,
    bshd: bool,
) -> std::thread::Result<f64> {
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    let dims = if bshd { [1, sq as i64, 1, sk as i64] } else { [1, 1, sq as i64, sk as i64] };
    let (tensors, want) = problem(sq, sk, d, bshd);
    let (f, k) = (f.clone(), k.clone());
    std::panic::catch_unwind(move || {
        let out = sim::run_interleavings(&f, &k, tensors, &dims, &[scale.to_bits() as u64], None);
        gemm_sim::rel_l2(&decode(DType::F16, &out[3]), &want)
    })
}

/// Whether variants `f` and `g` of attention kernel `k` write the same o
/// and lse bytes for 50 query rows and no key (both divide 0 by 0).
fn same_without_keys(f: &thread_ir::Function, g: &thread_ir::Function, k: &Kernel, d: usize, bshd: bool) -> bool {
    let sq = 50;
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    let dims = if bshd { [1, sq as i64, 1, 0] } else { [1, 1, sq as i64, 0] };
    let (mut tensors, _) = problem(sq, 0, d, bshd);
    for t in tensors.iter_mut().skip(1).take(2) {
        t.bytes.clear();
        t.shape[if bshd { 1 } else { 2 }] = 0;
    }
    let s = [scale.to_bits() as u64];
    let a = sim::run_interleavings(f, k, tensors.clone(), &dims, &s, None);
    let b = sim::run_interleavings(g, k, tensors, &dims, &s, None);
    a[3] == b[3] && a[4] == b[4]
}

/// Replaces in `body` (recursively) each statement `pick` maps to
/// statements; how many it replaced.
fn replace(body: &mut Vec<thread_ir::Stmt>, pick: &dyn Fn(&thread_ir::Stmt) -> Option<Vec<thread_ir::Stmt>>) -> usize {
    use thread_ir::Stmt;
    let mut n = 0;
    let mut out = Vec::with_capacity(body.len());
    for mut s in std::mem::take(body) {
        if let Some(new) = pick(&s) {
            out.extend(new);
            n += 1;
            continue;
        }
        match &mut s {
            Stmt::If { then, otherwise, .. } => n += replace(then, pick) + replace(otherwise, pick),
            Stmt::For { body, .. } => n += replace(body, pick),
            _ => {}
        }
        out.push(s);
    }
    *body = out;
    n
}

/// The ping-pong's barriers against the simulator's named-barrier model
/// (PTX ISA barrier{.cta}: a barrier completes when its thread count has
/// arrived, by `bar.sync` or `bar.arrive` alike, one arrival per warp and
/// instance), at head dim 128 with key blocks of 64 (the ping-pong with P·V
/// deferred, the output staged through shared memory after the loop, read
/// across the warpgroups): the variant passes; planted bugs of the class
/// that lets a warpgroup pass a later barrier early are caught: warpgroup
/// 1's hand-over in the last iteration kept (an arrival left pending at
/// barrier 2 when the block ends), and that on the consumers' own barrier
/// 1 (the `bar.sync 1, 256` after the loop then completes by warpgroup 1's
/// two arrivals, and it reads the epilogue's scratch before warpgroup 0
/// wrote it).
#[test]
fn ping_pong_barrier_bugs_are_caught() {
    use thread_ir::{Inst, Stmt};
    let text = attention_4d_sized(Layout4d::Bhsd, 128, 128, 64, 256);
    let k = parse_kernel(&text).unwrap();
    let c = variant(&k, "warp_specialized_loop");
    let (sq, sk, d) = (100, 130, 128);
    let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
    let dims = [1, 1, sq as i64, sk as i64];
    let run = |f: &thread_ir::Function| {
        let (tensors, want) = problem(sq, sk, d, false);
        let (f, k) = (f.clone(), k.clone());
        std::panic::catch_unwind(move || {
            let out = sim::run_interleavings(&f, &k, tensors, &dims, &[scale.to_bits() as u64], None);
            gemm_sim::rel_l2(&decode(DType::F16, &out[3]), &want)
        })
        .map_err(|e| {
            e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
        })
    };
    assert!(run(&c.function).is_ok_and(|e| e <= 5e-3), "the variant itself");
    // Warpgroup 1's hand-over of the last iteration, unconditional.
    let last_handover = |s: &Stmt| match s {
        Stmt::If { uniform: true, then, otherwise, .. }
            if otherwise.is_empty()
                && matches!(then[..], [Stmt::Inst { inst: Inst::NamedBarArrive { id: 2, threads: 256 }, .. }]) =>
        {
            Some(then.clone())
        }
        _ => None,
    };
    let mut pending = c.function.clone();
    assert_eq!(replace(&mut pending.body, &last_handover), 1);
    let e = run(&pending).expect_err("an arrival left pending went unnoticed");
    assert!(e.contains("barrier 2 has arrivals of warps") && e.contains("left pending"), "{e}");
    // The same on the consumers' barrier (`bar.sync 1, 256` in the PTX).
    let mut on_one = pending.clone();
    let renamed = replace(&mut on_one.body, &|s| match s {
        Stmt::Inst { inst: Inst::NamedBarArrive { id: 2, threads }, guard } => {
            Some(vec![Stmt::Inst { inst: Inst::NamedBarArrive { id: 1, threads: *threads }, guard: *guard }])
        }
        Stmt::Inst { inst: Inst::NamedBarSync { id: 2, threads }, guard } => {
            Some(vec![Stmt::Inst { inst: Inst::NamedBarSync { id: 1, threads: *threads }, guard: *guard }])
        }
        _ => None,
    });
    assert!(renamed >= 3, "{renamed}");
    let e = run(&on_one).expect_err("a pending arrival at the consumers' barrier went unnoticed");
    // Caught as the race on the scratch, as the warps' second arrival, or
    // as warps waiting on barrier 1 at two different aligned bar.syncs.
    assert!(
        e.contains("shared-memory race at byte")
            || e.contains("arrives at barrier 1 again")
            || e.contains("with a bar.sync other than the one warps"),
        "{e}"
    );
}

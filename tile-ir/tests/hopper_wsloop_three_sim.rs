//! The warp-specialized loop over three consumer warpgroups (384 consumer
//! threads, 192 query rows of FlashAttention at head dim 64: FA3's
//! head-dim-64 schedule) on the code it generates and on the Thread IR
//! simulator (warps independent, mbarriers, TMA, named barriers with
//! counts, races by vector clocks) under several interleavings: the kernel
//! of `examples/kernels/flash_attention.rs` (causal a scalar, the last
//! query blocks first, the key loop cut at the diagonal aligned to the
//! bottom-right corner), both layouts, key blocks of 128 (no overlap: P·V
//! deferred or S issued ahead would spill in 160 registers) and of 64 (P·V
//! deferred). Query blocks whose key loops run 0, 1, 2 and 3 iterations
//! (causal, `SQ ≠ SK`), ragged last query and key blocks, rows that see no
//! key (o = 0, lse = −∞, never NaN), and values past the first block's
//! reach poisoned with NaN (a block above the diagonal loaded would give
//! NaN), every output against an f64 reference; ptxas assembles every
//! variant without spills (`TILE_PTXAS`); planted bugs (the consumers not
//! waiting for their stages, the consumers' barrier over two warpgroups
//! instead of three, a stage never released) must fail.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{decode, random, Rng};
use sim::SimTensor;
use tile_ir::print::parse_kernel;
use tile_ir::thread_ir::{Inst, Operand, Stmt};
use tile_ir::*;
use tile_testkit::{attention_causal_text, Layout4d};

const D: usize = 64;
const BM: usize = 192;

/// One shape: query and key lengths, causal (one batch and head: both
/// layouts are then `[s, d]` in memory).
#[derive(Copy, Clone, Debug)]
struct Shape {
    sq: usize,
    sk: usize,
    causal: bool,
}

/// The inputs (q, k, v, o and lse as NaN bits; v's keys `poison..` NaN)
/// and the f64 reference of o and lse: row `i` sees the keys `j < SK`
/// with, causal, `j ≤ i + SK − SQ`; a row that sees none has o = 0 and
/// lse = −∞.
fn problem(s: Shape, bshd: bool, poison: usize) -> (Vec<SimTensor>, Vec<f64>, Vec<f64>) {
    let mut rng = Rng(0x3A64 ^ (s.sq * 7919 + s.sk * 31 + s.causal as usize) as u64);
    let sk1 = s.sk.max(1);
    let (qb, qv) = random(&mut rng, DType::F16, s.sq * D, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, DType::F16, sk1 * D, -2.0, 2.0);
    let (mut vb, vv) = random(&mut rng, DType::F16, sk1 * D, -1.0, 1.0);
    for j in poison.min(sk1)..sk1 {
        for c in 0..D {
            // f16 NaN.
            vb[2 * (j * D + c)..][..2].copy_from_slice(&0x7E00u16.to_le_bytes());
        }
    }
    let shape = |n: usize| if bshd { vec![1, n, 1, D] } else { vec![1, 1, n, D] };
    let t = |bytes: Vec<u8>, n: usize| SimTensor { bytes, shape: shape(n), elem: 2 };
    let tensors = vec![
        t(qb, s.sq),
        t(kb, sk1),
        t(vb, sk1),
        t(vec![0xFF; 2 * s.sq * D], s.sq),
        SimTensor { bytes: vec![0xFF; 4 * s.sq], shape: vec![1, 1, s.sq], elem: 4 },
    ];
    let scale = 1.0 / (D as f64).sqrt();
    let (mut o, mut lse) = (vec![0.0; s.sq * D], vec![f64::NEG_INFINITY; s.sq]);
    for i in 0..s.sq {
        let q = &qv[i * D..][..D];
        let seen = (0..s.sk).filter(|&j| !s.causal || j as i64 <= i as i64 + s.sk as i64 - s.sq as i64);
        let scores: Vec<(usize, f64)> =
            seen.map(|j| (j, (0..D).map(|c| q[c] * kv[j * D + c]).sum::<f64>() * scale)).collect();
        if scores.is_empty() {
            continue;
        }
        let mx = scores.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = scores.iter().map(|x| (x.1 - mx).exp()).sum();
        lse[i] = mx + sum.ln();
        for c in 0..D {
            let acc: f64 = scores.iter().map(|&(j, x)| (x - mx).exp() * vv[j * D + c]).sum();
            o[i * D + c] = acc / sum;
        }
    }
    (tensors, o, lse)
}

/// The key blocks each query block of `s` sees (the kernel's `kv_blocks`),
/// by query block.
fn key_blocks(s: Shape, bn: usize) -> Vec<i64> {
    let (sq, sk, bm, bn) = (s.sq as i64, s.sk as i64, BM as i64, bn as i64);
    (0..(sq + bm - 1) / bm)
        .map(|bx| {
            let all = (sk + bn - 1) / bn;
            if s.causal {
                let last = (bx + 1) * bm + sk - sq;
                all.min((last + bn - 1).div_euclid(bn)).max(0)
            } else {
                all
            }
        })
        .collect()
}

/// Causal with `SQ > SK` (four query blocks, the last ragged, the first
/// rows seeing no key; two diagonals, so that query blocks of 0, 1, 2 and
/// 3 key blocks occur: with query blocks of 192 rows the count grows by
/// 1.5 or 3 key blocks a query block), causal with `SQ < SK`, and not
/// causal with ragged query and key blocks.
fn shapes(bn: usize) -> Vec<Shape> {
    let sq = 4 * BM - 11;
    let diags: [usize; 2] = if bn == 128 { [320, 313] } else { [320, 250] };
    let mut out: Vec<Shape> = diags.iter().map(|d| Shape { sq, sk: sq - d, causal: true }).collect();
    out.extend([
        Shape { sq: BM + 9, sk: 2 * BM + 3 * bn / 2, causal: true },
        Shape { sq: BM + 9, sk: 2 * bn + 7, causal: false },
        Shape { sq: 41, sk: bn / 2 + 1, causal: false },
    ]);
    out
}

#[test]
fn the_shapes_cover_the_trip_counts() {
    let s = shapes(128);
    assert_eq!(key_blocks(s[0], 128), [0, 1, 2, 4]);
    assert_eq!(key_blocks(s[1], 128), [0, 1, 3, 4]);
    assert_eq!(key_blocks(s[3], 128), [3, 3]);
    assert_eq!(key_blocks(s[4], 128), [1]);
    let s = shapes(64);
    assert_eq!(key_blocks(s[0], 64), [0, 1, 4, 7]);
    assert_eq!(key_blocks(s[1], 64), [0, 3, 6, 8]);
    assert_eq!(key_blocks(s[3], 64), [3, 3]);
    // Two query blocks that see all the 2·BM + 3·bn/2 keys.
    assert_eq!(key_blocks(shapes(64)[2], 64), [8, 8]);
}

/// The plain warp-specialized variant of `k` (checked to be the second), and
/// what its code must show: no ping-pong, the consumers' barriers over
/// 384 threads, `setmaxnreg` from the block's pool (65,536 / 512 = 128 at
/// entry: the producer 24, the consumers (128 · 512 − 24 · 128) / 384 =
/// 160), P·V deferred where `deferred`; no spills.
fn variant(k: &Kernel, deferred: bool) -> Compiled {
    let v = compile_variants(k, Target::Sm90a, CompileOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    // The persistent variant first (`hopper_wsloop_persistent_sim.rs` runs it), then this one.
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    assert_eq!(names[..2], ["warp_specialized_loop_persistent", "warp_specialized_loop"], "{}", k.name);
    let c = v.into_iter().nth(1).unwrap();
    assert_eq!(c.threads, 512, "{}", k.name);
    let ptx = &c.ptx;
    assert!(!ptx.contains("bar.arrive"), "{}: ping-pong", k.name);
    assert!(ptx.contains("bar.sync 1, 384;"), "{}: the consumers' barrier", k.name);
    for line in ptx.lines().filter(|l| l.contains("bar.sync")) {
        assert!(line.ends_with("0, 512;") || line.ends_with("1, 384;"), "{}: {line}", k.name);
    }
    assert!(ptx.contains("setmaxnreg.dec.sync.aligned.u32 24;"), "{}", k.name);
    assert!(ptx.contains("setmaxnreg.inc.sync.aligned.u32 160;"), "{}", k.name);
    assert!(ptx.contains(".maxntid 512, 1, 1") && ptx.contains(".minnctapersm 1"), "{}", k.name);
    assert_eq!(ptx.contains("wgmma.wait_group.sync.aligned 1;"), deferred, "{}: deferred P·V", k.name);
    // The three warpgroups' rows: each its own 64 (m64 wgmmas only).
    assert!(ptx.contains("wgmma.mma_async.sync.aligned.m64n"), "{}", k.name);
    if let Some(r) = ptxas::assemble(&format!("three_{}", k.name), ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{}: {r}", k.name);
    }
    c
}

/// Runs `f` on `s` under interleavings; o's relative L2 error against the
/// reference on the rows `rows` (all when `None`), after checking there
/// that the rows that see no key are 0 with lse −∞ and that lse matches.
fn check(
    f: &thread_ir::Function,
    k: &Kernel,
    s: Shape,
    bshd: bool,
    poison: usize,
    rows: Option<usize>,
) -> Result<f64, String> {
    let (tensors, want_o, want_lse) = problem(s, bshd, poison);
    let dims = if bshd { [1, s.sq as i64, 1, s.sk as i64] } else { [1, 1, s.sq as i64, s.sk as i64] };
    let scalars = [((std::f64::consts::LOG2_E / (D as f64).sqrt()) as f32).to_bits() as u64, s.causal as u64];
    let (f, k) = (f.clone(), k.clone());
    let out = std::panic::catch_unwind(move || sim::run_interleavings(&f, &k, tensors, &dims, &scalars, None))
        .map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".into())
        })?;
    let n = rows.unwrap_or(s.sq);
    let o = decode(DType::F16, &out[3]);
    let lse: Vec<f32> = out[4].chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    for (r, (&got, &want)) in lse.iter().zip(&want_lse).enumerate().take(n) {
        let ok = if want == f64::NEG_INFINITY {
            got == f32::NEG_INFINITY && o[r * D..][..D].iter().all(|&x| x == 0.0)
        } else {
            (got as f64 - want).abs() <= 1e-2 * want.abs().max(1.0)
        };
        if !ok {
            return Err(format!("row {r}: lse {got} (want {want}), o {:?}", &o[r * D..][..4]));
        }
    }
    Ok(gemm_sim::rel_l2(&o[..n * D], &want_o[..n * D]))
}

/// `(layout, key block, P·V deferred)`.
fn configurations() -> Vec<(Layout4d, usize, bool)> {
    vec![
        (Layout4d::Bhsd, 128, false),
        (Layout4d::Bshd, 128, false),
        (Layout4d::Bhsd, 64, true),
        (Layout4d::Bshd, 64, true),
    ]
}

#[test]
fn three_consumer_warpgroups_on_the_simulator() {
    for (layout, bn, deferred) in configurations() {
        let k = parse_kernel(&attention_causal_text(layout, D as i64, BM as i64, bn as i64, 384))
            .unwrap_or_else(|e| panic!("{e:?}"));
        let c = variant(&k, deferred);
        let bshd = layout == Layout4d::Bshd;
        for s in shapes(bn) {
            let err =
                check(&c.function, &k, s, bshd, usize::MAX, None).unwrap_or_else(|e| panic!("{} {s:?}: {e}", k.name));
            assert!(err <= 5e-3, "{} {s:?}: relative L2 error {err:.3e}", k.name);
        }
    }
}

/// Causal never loads a key block above the diagonal: with the values of
/// the keys past the first query block's reach (its last row's key block,
/// `SQ = SK`) NaN, its rows are still right; the other blocks see those
/// keys, so only the first block's rows are checked.
#[test]
fn causal_never_reads_above_the_diagonal() {
    for (layout, bn, deferred) in configurations() {
        let k = parse_kernel(&attention_causal_text(layout, D as i64, BM as i64, bn as i64, 384)).unwrap();
        let c = variant(&k, deferred);
        let s = Shape { sq: 2 * BM + 5, sk: 2 * BM + 5, causal: true };
        let reach = BM.div_ceil(bn) * bn;
        let err = check(&c.function, &k, s, layout == Layout4d::Bshd, reach, Some(BM))
            .unwrap_or_else(|e| panic!("{} {s:?}: {e}", k.name));
        assert!(err <= 5e-3, "{} {s:?}: relative L2 error {err:.3e}", k.name);
        // The poison reaches the other blocks (the check can fail).
        let rest = check(&c.function, &k, s, layout == Layout4d::Bshd, reach, None);
        assert!(!rest.is_ok_and(|e| e <= 5e-3), "{}: the poisoned keys are read by no block", k.name);
    }
}

/// Applies `edit` to every statement of the consumers' loop (the top-level
/// uniform loop), recursively; `edit` returns the replacement of a
/// statement it changes. How many it changed.
fn edit_consumer_loop(f: &mut thread_ir::Function, edit: &dyn Fn(&Stmt) -> Option<Vec<Stmt>>) -> usize {
    fn walk(body: &mut Vec<Stmt>, edit: &dyn Fn(&Stmt) -> Option<Vec<Stmt>>) -> usize {
        let mut n = 0;
        let mut out = Vec::with_capacity(body.len());
        for mut s in std::mem::take(body) {
            if let Some(new) = edit(&s) {
                out.extend(new);
                n += 1;
                continue;
            }
            match &mut s {
                Stmt::If { then, otherwise, .. } => n += walk(then, edit) + walk(otherwise, edit),
                Stmt::For { body, .. } => n += walk(body, edit),
                _ => {}
            }
            out.push(s);
        }
        *body = out;
        n
    }
    let mut n = 0;
    for s in f.body.iter_mut() {
        if let Stmt::For { uniform: true, body, .. } = s {
            n += walk(body, edit);
        }
    }
    n
}

/// Planted bugs are caught: the consumers not waiting for their stages
/// (wrong bytes or a race with the TMA), the consumers' barriers over 256
/// threads (two of the three warpgroups pass them without the third: a
/// race on the stages or the epilogue's scratch, or a warp's second
/// arrival), the consumers never releasing a stage (the producer waits
/// forever: a deadlock).
#[test]
fn planted_bugs_are_caught() {
    let k = parse_kernel(&attention_causal_text(Layout4d::Bhsd, D as i64, BM as i64, 128, 384)).unwrap();
    let c = variant(&k, false);
    let s = Shape { sq: BM + 9, sk: 2 * 128 + 7, causal: false };
    let run = |f: &thread_ir::Function| check(f, &k, s, false, usize::MAX, None);
    assert!(run(&c.function).is_ok_and(|e| e <= 5e-3), "the variant itself");
    // The full waits (parity from a register) in the consumers' loop.
    let mut f = c.function.clone();
    let n = edit_consumer_loop(&mut f, &|s| match s {
        Stmt::Inst { inst: Inst::MbarWait { parity: Operand::Reg(_), .. }, .. } => Some(vec![]),
        _ => None,
    });
    assert!(n >= 2, "{n}");
    assert!(!run(&f).is_ok_and(|e| e <= 5e-3), "reading stages before they land went unnoticed");
    // Every consumer barrier (`bar.sync 1, 384`) over 256 threads.
    let mut f = c.function.clone();
    fn narrow(body: &mut [Stmt]) -> usize {
        let mut n = 0;
        for s in body {
            match s {
                Stmt::Inst { inst: Inst::NamedBarSync { id: 1, threads }, .. } if *threads == 384 => {
                    *threads = 256;
                    n += 1;
                }
                Stmt::If { then, otherwise, .. } => n += narrow(then) + narrow(otherwise),
                Stmt::For { body, .. } => n += narrow(body),
                _ => {}
            }
        }
        n
    }
    narrow(&mut f.body);
    // The consumers' `bar.sync`s, named at emission from `barrier_threads`.
    assert_eq!(c.function.barrier_threads, Some(384));
    f.barrier_threads = Some(256);
    assert!(!run(&f).is_ok_and(|e| e <= 5e-3), "consumer barriers over two of three warpgroups went unnoticed");
    // The releases of the stages (arrivals at empty barriers, addressed by the stage).
    let mut f = c.function.clone();
    let n = edit_consumer_loop(&mut f, &|s| match s {
        Stmt::Inst { inst: Inst::MbarArrive { .. }, .. } => Some(vec![]),
        _ => None,
    });
    assert!(n >= 2, "{n}");
    let got = run(&f);
    assert!(got.as_ref().is_err_and(|e| e.contains("deadlock")), "a stage never released went unnoticed: {got:?}");
}

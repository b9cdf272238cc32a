//! The persistent variant of the warp-specialized loop
//! (`warp_specialized_loop_persistent`, sm_90a) of FlashAttention over
//! `[b, h, s, d]` tensors, causal or not (the kernel of
//! `examples/kernels/flash_attention.rs`: the last query blocks first, the
//! key loop cut at the diagonal aligned to the bottom-right corner, rows
//! that see no key giving o = 0 and lse = −∞), run on the Thread IR
//! simulator (warps independent, mbarriers, TMA, named barriers, races by
//! vector clocks) under several interleavings, launched with fewer blocks
//! than tiles: blocks that get 0, 1, 2 and 3 or more tiles, tiles whose key
//! loops run 0, 1 and 2 iterations (causal with `SQ ≠ SK`), ragged last
//! query and key blocks; with the ping-pong and issuing ahead (head dim 64),
//! the ping-pong and the deferred P·V (head dim 128), each turned off, one
//! consumer warpgroup and three (head dim 64's 192-row query blocks). Every output is checked against an f64
//! reference, every variant assembles without spills (`TILE_PTXAS`); planted bugs (the consumers never releasing Q, the Q wait's
//! parity not flipping per tile) must fail.

mod gemm_sim;
mod ptxas;
mod sim;

use gemm_sim::{decode, random, Rng};
use sim::SimTensor;
use tile_ir::print::parse_kernel;
use tile_ir::*;

/// FlashAttention forward as `examples/kernels/flash_attention.rs`'s
/// `[b, h, s, d]` kernel lowers it (f16, `causal` a scalar): the testkit's text.
fn attention_text(d: i64, bm: i64, bn: i64, threads: u32) -> String {
    tile_testkit::attention_causal_text(tile_testkit::Layout4d::Bhsd, d, bm, bn, threads)
}

/// One shape: batches, heads, query and key lengths, causal.
#[derive(Copy, Clone, Debug)]
struct Shape {
    b: usize,
    h: usize,
    sq: usize,
    sk: usize,
    causal: bool,
}

/// The inputs (q, k, v, o and lse as NaN bits) and the f64 reference of o
/// and lse: row `i` sees the keys `j < SK` with, causal, `j ≤ i + SK − SQ`;
/// a row that sees none has o = 0 and lse = −∞.
fn problem(s: Shape, d: usize) -> (Vec<SimTensor>, Vec<f64>, Vec<f64>) {
    let mut rng = Rng(0x9E75 ^ (s.sq * 7919 + s.sk * 31 + d + s.h * 3 + s.causal as usize) as u64);
    let (bh, sk1) = (s.b * s.h, s.sk.max(1));
    let (qb, qv) = random(&mut rng, DType::F16, bh * s.sq * d, -2.0, 2.0);
    let (kb, kv) = random(&mut rng, DType::F16, bh * sk1 * d, -2.0, 2.0);
    let (vb, vv) = random(&mut rng, DType::F16, bh * sk1 * d, -1.0, 1.0);
    let t = |bytes: Vec<u8>, n: usize| SimTensor { bytes, shape: vec![s.b, s.h, n, d], elem: 2 };
    let tensors = vec![
        t(qb, s.sq),
        t(kb, sk1),
        t(vb, sk1),
        t(vec![0xFF; 2 * bh * s.sq * d], s.sq),
        SimTensor { bytes: vec![0xFF; 4 * bh * s.sq], shape: vec![s.b, s.h, s.sq], elem: 4 },
    ];
    let scale = 1.0 / (d as f64).sqrt();
    let (mut o, mut lse) = (vec![0.0; bh * s.sq * d], vec![f64::NEG_INFINITY; bh * s.sq]);
    for g in 0..bh {
        for i in 0..s.sq {
            let q = &qv[(g * s.sq + i) * d..][..d];
            let seen = (0..s.sk).filter(|&j| !s.causal || j as i64 <= i as i64 + s.sk as i64 - s.sq as i64);
            let scores: Vec<(usize, f64)> =
                seen.map(|j| (j, (0..d).map(|c| q[c] * kv[(g * sk1 + j) * d + c]).sum::<f64>() * scale)).collect();
            if scores.is_empty() {
                continue;
            }
            let mx = scores.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores.iter().map(|x| (x.1 - mx).exp()).sum();
            lse[g * s.sq + i] = mx + sum.ln();
            for c in 0..d {
                let acc: f64 = scores.iter().map(|&(j, x)| (x - mx).exp() * vv[(g * sk1 + j) * d + c]).sum();
                o[(g * s.sq + i) * d + c] = acc / sum;
            }
        }
    }
    (tensors, o, lse)
}

/// The persistent variant of `k` under `options`, checked to be first.
fn persistent(k: &Kernel, options: CompileOptions) -> Compiled {
    let options = CompileOptions { wsloop_persistent: true, ..options };
    let v = compile_variants(k, Target::Sm90a, options).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    assert_eq!(names[..2], ["warp_specialized_loop_persistent", "warp_specialized_loop"], "{}", k.name);
    let c = v.into_iter().next().unwrap();
    assert!(c.persistent, "{}", k.name);
    // ptxas (`TILE_PTXAS`): no spills, the producer's registers included.
    if let Some(r) = ptxas::assemble(&format!("persistent_{}", k.name), &c.ptx, "sm_90a") {
        assert!(r.contains("0 bytes spill stores, 0 bytes spill loads"), "{}: {r}", k.name);
    }
    c
}

/// Runs `f` on `s` over `blocks` blocks under interleavings; o's relative
/// L2 error against the reference, after checking that the rows that see
/// no key are 0 and that lse matches.
fn check(f: &thread_ir::Function, k: &Kernel, s: Shape, d: usize, blocks: u32) -> Result<f64, String> {
    check_with(f, k, s, d, sim::RunOptions { shape: Some([blocks, 1, 1]), ..Default::default() }).map(|r| r.0)
}

/// [`check`] launched with `opts`; also the tile counter's value at the
/// end (`None`: the variant took none, or a null one).
fn check_with(
    f: &thread_ir::Function,
    k: &Kernel,
    s: Shape,
    d: usize,
    opts: sim::RunOptions,
) -> Result<(f64, Option<u32>), String> {
    let (tensors, want_o, want_lse) = problem(s, d);
    let dims = [s.b as i64, s.h as i64, s.sq as i64, s.sk as i64];
    let scalars = [((std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32).to_bits() as u64, s.causal as u64];
    let (f, k) = (f.clone(), k.clone());
    let out = std::panic::catch_unwind(move || sim::run_interleavings_with(&f, &k, tensors, &dims, &scalars, opts))
        .map_err(|e| e.downcast_ref::<String>().cloned().unwrap_or_else(|| "panicked".into()))?;
    let o = decode(DType::F16, &out[3]);
    let lse: Vec<f32> = out[4].chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    for (r, (&got, &want)) in lse.iter().zip(&want_lse).enumerate() {
        let ok = if want == f64::NEG_INFINITY {
            got == f32::NEG_INFINITY && o[r * d..][..d].iter().all(|&x| x == 0.0)
        } else {
            (got as f64 - want).abs() <= 1e-2 * want.abs().max(1.0)
        };
        if !ok {
            return Err(format!("row {r}: lse {got} (want {want}), o {:?}", &o[r * d..][..4]));
        }
    }
    let counter = out.get(5).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    Ok((gemm_sim::rel_l2(&o, &want_o), counter))
}

/// Tiles of 0, 1 and more key blocks (causal, `SQ > SK`, two heads: the
/// diagonal `SK − SQ = −(2·bm − bn/2)`) and of 2 ragged key blocks (not
/// causal), over blocks that get 0, 1, 2 and 3 tiles.
fn shapes(bm: usize, bn: usize) -> Vec<(Shape, Vec<u32>)> {
    let sq = 3 * bm - 5;
    let sk = sq - (2 * bm - bn / 2);
    let causal = Shape { b: 1, h: 2, sq, sk, causal: true };
    // Not causal: two query blocks (the last ragged), two key blocks (the last ragged).
    let plain = Shape { b: 1, h: 1, sq: bm + 9, sk: bn + 7, causal: false };
    vec![(causal, vec![2, 4, 7]), (plain, vec![1, 3])]
}

/// The key blocks each of `s`'s query blocks sees (the kernel's `kv_blocks`).
fn key_blocks(s: Shape, bm: usize, bn: usize) -> Vec<i64> {
    let (sq, sk, bm, bn) = (s.sq as i64, s.sk as i64, bm as i64, bn as i64);
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

#[test]
fn the_shapes_cover_the_trip_counts() {
    let (bm, bn) = (128, 64);
    let s = shapes(bm, bn);
    assert_eq!(key_blocks(s[0].0, bm, bn), [0, 1, 3]);
    assert_eq!(key_blocks(s[1].0, bm, bn), [2, 2]);
    assert_eq!(key_blocks(shapes(64, 64)[0].0, 64, 64), [0, 1, 2]);
    // 6 tiles over 2, 4 and 7 blocks: 3 each; 2 and 1; 1 each and one block with none.
    let per_block =
        |tiles: u32, blocks: u32| (0..blocks).map(|b| (tiles - b.min(tiles)).div_ceil(blocks)).collect::<Vec<_>>();
    assert_eq!(per_block(6, 2), [3, 3]);
    assert_eq!(per_block(6, 4), [2, 2, 1, 1]);
    assert_eq!(per_block(6, 7), [1, 1, 1, 1, 1, 1, 0]);
}

/// `(head dim, key block, options, what the consumers' loop must show)`.
fn configurations() -> Vec<(i64, i64, &'static str, CompileOptions)> {
    let d = CompileOptions::default();
    vec![
        (64, 64, "ping-pong, issuing ahead", d),
        (64, 64, "issuing ahead, no ping-pong", CompileOptions { ping_pong: false, ..d }),
        (128, 64, "ping-pong, deferred P·V", d),
        (128, 64, "ping-pong, P·V not deferred", CompileOptions { defer_last_gemm: false, ..d }),
        (128, 64, "deferred P·V, no ping-pong", CompileOptions { ping_pong: false, ..d }),
    ]
}

#[test]
fn persistent_attention_on_the_simulator() {
    for (d, bn, what, options) in configurations() {
        let k = parse_kernel(&attention_text(d, 128, bn, 256)).unwrap_or_else(|e| panic!("{e:?}"));
        let c = persistent(&k, options);
        assert_eq!(c.ptx.contains("bar.arrive"), options.ping_pong, "{} ({what}): ping-pong", k.name);
        let deferred = c.ptx.contains("wgmma.wait_group.sync.aligned 1;");
        assert_eq!(deferred, what.contains("deferred P·V") && !what.contains("not deferred"), "{} ({what})", k.name);
        for (s, blocks) in shapes(128, bn as usize) {
            for nb in blocks {
                let err = check(&c.function, &k, s, d as usize, nb)
                    .unwrap_or_else(|e| panic!("{} ({what}) {s:?} on {nb} blocks: {e}", k.name));
                assert!(err <= 5e-3, "{} ({what}) {s:?} on {nb} blocks: relative L2 error {err:.3e}", k.name);
            }
        }
    }
}

/// One consumer warpgroup (`CompileOptions::wsloop_one_warpgroup`: 64 query
/// rows, issuing ahead, two blocks per SM).
#[test]
fn persistent_attention_with_one_consumer_warpgroup() {
    let options = CompileOptions { wsloop_one_warpgroup: true, ..CompileOptions::default() };
    let k = parse_kernel(&attention_text(64, 64, 64, 128)).unwrap_or_else(|e| panic!("{e:?}"));
    let c = persistent(&k, options);
    assert!(c.ptx.contains(".minnctapersm 2"), "{}", k.name);
    for (s, blocks) in shapes(64, 64) {
        for nb in blocks {
            let err =
                check(&c.function, &k, s, 64, nb).unwrap_or_else(|e| panic!("{} {s:?} on {nb} blocks: {e}", k.name));
            assert!(err <= 5e-3, "{} {s:?} on {nb} blocks: relative L2 error {err:.3e}", k.name);
        }
    }
}

/// Three consumer warpgroups (head dim 64's 192-row query blocks, FA3's
/// head-dim-64 schedule; 512 threads: the producer at 32 registers, the
/// consumers (128 · 512 − 32 · 128) / 384 = 160, no ping-pong) in the tile
/// loop: key blocks of 128 (the example's instance, no overlap) and of 64
/// (P·V deferred), tiles of 0, 1, 2 and 3 key blocks over blocks that get
/// 0 to 3 tiles, both tile schedulers (dynamic and the static stride).
#[test]
fn persistent_attention_with_three_consumer_warpgroups() {
    for (bn, deferred) in [(128usize, false), (64, true)] {
        let k = parse_kernel(&attention_text(64, 192, bn as i64, 384)).unwrap_or_else(|e| panic!("{e:?}"));
        let c = persistent(&k, CompileOptions::default());
        assert_eq!(c.threads, 512, "{}", k.name);
        assert!(!c.ptx.contains("bar.arrive"), "{}: three warpgroups do not ping-pong", k.name);
        assert!(c.ptx.contains("setmaxnreg.dec.sync.aligned.u32 32;"), "{}", k.name);
        assert!(c.ptx.contains("setmaxnreg.inc.sync.aligned.u32 160;"), "{}", k.name);
        assert_eq!(c.ptx.contains("wgmma.wait_group.sync.aligned 1;"), deferred, "{}: deferred P·V", k.name);
        let counts: Vec<Vec<i64>> = shapes(192, bn).iter().map(|(s, _)| key_blocks(*s, 192, bn)).collect();
        assert!([0, 1, 2].iter().all(|n| counts.iter().flatten().any(|c| c == n)), "{}: {counts:?}", k.name);
        for (s, blocks) in shapes(192, bn) {
            for nb in blocks {
                // Both tile schedulers (odd block counts static), at half the simulator's time.
                let static_tiles = nb % 2 == 1;
                let opts = sim::RunOptions { shape: Some([nb, 1, 1]), static_tiles, ..Default::default() };
                let what = format!("{} {s:?} on {nb} blocks, static {static_tiles}", k.name);
                let (err, _) = check_with(&c.function, &k, s, 64, opts).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(err <= 5e-3, "{what}: relative L2 error {err:.3e}");
            }
        }
    }
}

/// Launched with the whole grid (one tile per block), the persistent
/// variant is the ordinary kernel.
#[test]
fn persistent_attention_over_the_whole_grid() {
    let k = parse_kernel(&attention_text(64, 128, 64, 256)).unwrap();
    let c = persistent(&k, CompileOptions::default());
    for (s, _) in shapes(128, 64) {
        let tiles = key_blocks(s, 128, 64).len() * s.h * s.b;
        let err = check(&c.function, &k, s, 64, tiles as u32).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert!(err <= 5e-3, "{s:?}: relative L2 error {err:.3e}");
    }
}

/// Applies `edit` to the instructions of the consumers' tile loop (the
/// top-level uniform loop); how many it changed.
fn edit_consumer_tiles(f: &mut thread_ir::Function, edit: &dyn Fn(&mut thread_ir::Inst) -> bool) -> usize {
    use thread_ir::Stmt;
    fn walk(body: &mut Vec<Stmt>, edit: &dyn Fn(&mut thread_ir::Inst) -> bool, drop: bool) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < body.len() {
            match &mut body[i] {
                Stmt::Inst { inst, .. } => {
                    if edit(inst) {
                        n += 1;
                        if drop {
                            body.remove(i);
                            continue;
                        }
                    }
                }
                Stmt::If { then, otherwise, .. } => n += walk(then, edit, drop) + walk(otherwise, edit, drop),
                Stmt::For { body, .. } => n += walk(body, edit, drop),
                Stmt::Comment(_) => {}
            }
            i += 1;
        }
        n
    }
    let mut n = 0;
    for s in f.body.iter_mut() {
        if let thread_ir::Stmt::For { uniform: true, body, .. } = s {
            n += walk(body, edit, false);
        }
    }
    n
}

/// Drops from the consumers' tile loop the instructions `pick` picks.
fn drop_in_consumer_tiles(f: &mut thread_ir::Function, pick: &dyn Fn(&thread_ir::Inst) -> bool) -> usize {
    use thread_ir::Stmt;
    fn walk(body: &mut Vec<Stmt>, pick: &dyn Fn(&thread_ir::Inst) -> bool) -> usize {
        let before = body.len();
        body.retain(|s| !matches!(s, Stmt::Inst { inst, .. } if pick(inst)));
        let mut n = before - body.len();
        for s in body.iter_mut() {
            match s {
                Stmt::If { then, otherwise, .. } => n += walk(then, pick) + walk(otherwise, pick),
                Stmt::For { body, .. } => n += walk(body, pick),
                _ => {}
            }
        }
        n
    }
    let mut n = 0;
    for s in f.body.iter_mut() {
        if let thread_ir::Stmt::For { uniform: true, body, .. } = s {
            n += walk(body, pick);
        }
    }
    n
}

/// Planted bugs: the consumers never releasing Q (the producer then waits
/// for the next tile's Q buffer forever: a deadlock), the consumers' wait
/// for Q with the parity of a single tile (0: the second tile reads Q
/// before it lands, or the previous tile's), and the consumers' ring stage
/// and phase starting again at 0 on each tile (after a tile of 3 key
/// blocks over 2 stages they are 1 and 1: the next tile reads a stage
/// before it lands), and the consumers' `setmaxnreg.inc` at 240 (more than
/// the block's register pool holds: a deadlock).
#[test]
fn planted_bugs_are_caught() {
    use thread_ir::{Address, Inst, Operand};
    let k = parse_kernel(&attention_text(64, 128, 64, 256)).unwrap();
    let c = persistent(&k, CompileOptions::default());
    let (s, _) = shapes(128, 64)[0].clone();
    let run = |f: &thread_ir::Function| check(f, &k, s, 64, 2);
    assert!(run(&c.function).is_ok_and(|e| e <= 5e-3), "the variant itself");
    // Q's release: the only arrive at a fixed barrier (the rings' are at computed addresses).
    let mut f = c.function.clone();
    let q_release = |i: &Inst| matches!(i, Inst::MbarArrive { addr: Address { offset, .. } } if *offset != 0);
    assert_eq!(drop_in_consumer_tiles(&mut f, &q_release), 1);
    let got = run(&f);
    assert!(got.as_ref().is_err_and(|e| e.contains("deadlock")), "a missing Q release went unnoticed: {got:?}");
    // The wait for the next tile's index and Q (one `pre` phase per tile):
    // parity 0 on every tile.
    let mut f = c.function.clone();
    let n = edit_consumer_tiles(&mut f, &|i| match i {
        Inst::MbarWait { addr: Address { offset, .. }, parity, .. } if *offset != 0 => {
            *parity = Operand::Imm(0);
            true
        }
        _ => false,
    });
    assert_eq!(n, 1);
    assert!(!run(&f).is_ok_and(|e| e <= 5e-3), "a Q wait whose parity does not flip went unnoticed");
    // The ring's stage and phase: their two `mov`s at 0 (right after the
    // consumers' `setmaxnreg.inc`) repeated at the top of each tile.
    let mut f = c.function.clone();
    let at = f
        .body
        .iter()
        .position(|s| matches!(s, thread_ir::Stmt::Inst { inst: Inst::SetMaxNreg { inc: true, .. }, .. }))
        .expect("the consumers' setmaxnreg.inc");
    let movs: Vec<thread_ir::Stmt> = f.body[at + 1..at + 3].to_vec();
    assert!(movs.iter().all(|s| matches!(s, thread_ir::Stmt::Inst { inst: Inst::Op { op, args, .. }, .. }
        if op.starts_with("mov") && args == &[Operand::Imm(0)])));
    let tiles = f.body.iter_mut().find_map(|s| match s {
        thread_ir::Stmt::For { uniform: true, body, .. } => Some(body),
        _ => None,
    });
    let tiles = tiles.expect("the consumers' tile loop");
    for (n, m) in movs.into_iter().enumerate() {
        tiles.insert(n, m);
    }
    assert!(!run(&f).is_ok_and(|e| e <= 5e-3), "a ring phase that does not carry across tiles went unnoticed");
    // The consumers' registers at the old rule's 240 (an equal share of
    // the SM's whole file) with the producer at 32: the block holds 168 per
    // thread from its launch, the producer releases 128 · 136 = 17,408,
    // two consumer warpgroups at 240 need 256 · 72 = 18,432: the second
    // waits at its `setmaxnreg.inc` forever (the H200 hang), a deadlock.
    assert_eq!((c.function.threads, sim::entry_regs(&c.function)), (384, 168));
    let mut f = c.function.clone();
    let inc = f.body.iter_mut().find_map(|s| match s {
        thread_ir::Stmt::Inst { inst: Inst::SetMaxNreg { inc: true, count }, .. } => Some(count),
        _ => None,
    });
    let inc = inc.expect("the consumers' setmaxnreg.inc");
    assert_eq!(*inc, 232, "the shipped split");
    *inc = 240;
    let got = run(&f);
    let pool = "it needs 128 × (240 − 168) = 9216 registers, the block's pool holds 8192 (1024 short; entry 168 per thread × 384 threads at launch, 17408 released by setmaxnreg.dec, 9216 taken by setmaxnreg.inc)";
    assert!(got.as_ref().is_err_and(|e| e.contains("deadlock") && e.contains(pool)), "240 consumer registers: {got:?}");
}

/// The dynamic tile scheduler (`abi::TILE_COUNTER_PARAM`): each block's
/// first tile is `ctaid.x`, its next ones `nctaid.x + atomicAdd(counter,
/// 1)`, handed to the consumers in shared memory, −1 ending both sides.
/// With the counter and with a null one (the static stride) over 1, 2, 4,
/// 7 blocks and more blocks than tiles (blocks with no tile at all), under
/// seeded interleavings (which give the blocks other tiles each time),
/// every tile is computed once: the outputs match the reference and the
/// counter ends at `G` (one fetch per tile after a block's first, one more
/// that finds none, per block that had one).
#[test]
fn dynamic_and_static_tiles_compute_every_tile_once() {
    let k = parse_kernel(&attention_text(64, 128, 64, 256)).unwrap();
    let c = persistent(&k, CompileOptions::default());
    assert!(sim::takes_tile_counter(&c.function), "{}", k.name);
    assert!(c.ptx.contains("atom.global.add.u32"), "{}", k.name);
    for (s, blocks) in shapes(128, 64) {
        let tiles = (key_blocks(s, 128, 64).len() * s.h * s.b) as u32;
        for nb in blocks.into_iter().chain([1, tiles + 3]) {
            for static_tiles in [false, true] {
                let opts = sim::RunOptions { shape: Some([nb, 1, 1]), static_tiles, ..Default::default() };
                let what = format!("{s:?} on {nb} blocks, static {static_tiles}");
                let (err, counter) = check_with(&c.function, &k, s, 64, opts).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(err <= 5e-3, "{what}: relative L2 error {err:.3e}");
                assert_eq!(counter, (!static_tiles).then_some(tiles), "{what}: the counter at the end");
            }
        }
    }
}

/// Applies `edit` to every instruction of `f`; how many it changed.
fn edit_all(f: &mut thread_ir::Function, edit: &dyn Fn(&mut thread_ir::Inst) -> bool) -> usize {
    use thread_ir::Stmt;
    fn walk(body: &mut [Stmt], edit: &dyn Fn(&mut thread_ir::Inst) -> bool) -> usize {
        body.iter_mut()
            .map(|s| match s {
                Stmt::Inst { inst, .. } => edit(inst) as usize,
                Stmt::If { then, otherwise, .. } => walk(then, edit) + walk(otherwise, edit),
                Stmt::For { body, .. } => walk(body, edit),
                Stmt::Comment(_) => 0,
            })
            .sum()
    }
    walk(&mut f.body, edit)
}

/// Drops the arrivals in the `else` branches of `f`'s `if`s (the producer's
/// hand-over of the sentinel is the only one); how many.
fn drop_else_arrivals(f: &mut thread_ir::Function) -> usize {
    use thread_ir::{Inst, Stmt};
    fn walk(body: &mut [Stmt]) -> usize {
        let mut n = 0;
        for s in body.iter_mut() {
            match s {
                Stmt::If { then, otherwise, .. } => {
                    let before = otherwise.len();
                    otherwise.retain(|s| !matches!(s, Stmt::Inst { inst: Inst::MbarArrive { .. }, .. }));
                    n += before - otherwise.len() + walk(then) + walk(otherwise);
                }
                Stmt::For { body, .. } => n += walk(body),
                _ => {}
            }
        }
        n
    }
    walk(&mut f.body)
}

/// Planted bugs of the dynamic scheduler: a lost tile (each fetch takes two
/// tiles), a sentinel not handed on (the consumers then wait for a tile
/// forever: a deadlock) and a counter nobody reset (starting at 1: tile
/// `nctaid.x` is never run).
#[test]
fn planted_scheduler_bugs_are_caught() {
    use thread_ir::{Inst, Operand};
    let k = parse_kernel(&attention_text(64, 128, 64, 256)).unwrap();
    let c = persistent(&k, CompileOptions::default());
    let (s, _) = shapes(128, 64)[0].clone();
    let on = sim::RunOptions { shape: Some([2, 1, 1]), ..Default::default() };
    let run = |f: &thread_ir::Function, opts: sim::RunOptions| check_with(f, &k, s, 64, opts).map(|r| r.0);
    assert!(run(&c.function, on).is_ok_and(|e| e <= 5e-3), "the variant itself");
    let mut f = c.function.clone();
    let n = edit_all(&mut f, &|i| match i {
        Inst::AtomAdd { ty: "u32", src, .. } => {
            *src = Operand::Imm(2);
            true
        }
        _ => false,
    });
    assert_eq!(n, 1);
    assert!(!run(&f, on).is_ok_and(|e| e <= 5e-3), "a lost tile went unnoticed");
    let mut f = c.function.clone();
    assert_eq!(drop_else_arrivals(&mut f), 1);
    let got = run(&f, on);
    assert!(got.as_ref().is_err_and(|e| e.contains("deadlock")), "a sentinel not handed on went unnoticed: {got:?}");
    let got = run(&c.function, sim::RunOptions { counter_start: 1, ..on });
    assert!(!got.is_ok_and(|e| e <= 5e-3), "a counter not reset went unnoticed");
}

/// The example's Hopper instances (head dim 128: 128×128 blocks; 256:
/// 128×64; two consumer warpgroups) assemble (`ptxas -v` with
/// `TILE_PTXAS`; `--nocapture` prints the reports' register lines) without
/// spills: the plain variants, and the persistent one at head dim 128. At
/// head dim 256 the plan declines the persistent variant: its fragments
/// (245 registers per consumer thread) spilled 52 bytes in its 232
/// registers (the plain variant's 240 hold them), and the plain variant was
/// faster on the H200.
#[test]
fn example_instances_assemble_without_spills() {
    let mut spills = Vec::new();
    for (d, bn) in [(128, 128), (256, 64)] {
        let k = parse_kernel(&attention_text(d, 128, bn, 256)).unwrap();
        let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
        let has_persistent = v.iter().any(|c| c.schedule == "warp_specialized_loop_persistent");
        assert_eq!(has_persistent, d == 128, "{}: the persistent variant", k.name);
        if d == 256 {
            let why = tile_ir::schedule::describe_decisions(&k, Target::Sm90a, CompileOptions::default());
            assert!(
                why.contains("warp_specialized_loop_persistent: not applicable: its fragments hold 245 registers"),
                "{why}"
            );
        }
        for c in v.iter().filter(|c| c.schedule.starts_with("warp_specialized_loop")) {
            if let Some(r) = ptxas::assemble(&format!("{}_{}", c.schedule, k.name), &c.ptx, "sm_90a") {
                let used: Vec<&str> = r.lines().filter(|l| l.contains("Used") || l.contains("spill")).collect();
                eprintln!("{} {} ({} bytes of shared memory): {used:?}", k.name, c.schedule, c.shared_bytes);
                spills.push((k.name.clone(), c.schedule, r.contains("0 bytes spill stores, 0 bytes spill loads")));
            }
        }
    }
    assert!(spills.iter().all(|s| s.2), "{spills:?}");
}

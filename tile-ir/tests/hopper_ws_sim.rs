//! The warp-specialized GEMM variant (`warp_specialized_gemm`, sm_90a) run on
//! the Thread IR simulator, whose warps run independently (`sim/mod.rs`):
//! the producer warpgroup's TMA loads and the consumers' wgmmas hand stages
//! over through the full/empty mbarrier ring, named barriers sync the
//! consumers only, the producer exits early. Checked against an f64
//! reference for loops of 0, 1, 2 and 5 k-blocks, edge tiles in M, N and K,
//! 2 and 3 stages, both transposes, bf16, the TMA-store and persistent
//! options (launched with fewer blocks than tiles), under several
//! interleavings (scheduling seeds, which must all give the same bytes).
//! Planted bugs in the Thread IR of a correct variant must be caught: no
//! empty arrive (deadlock), no full wait (read before the TMA lands, or a
//! race with it), a named barrier's count changed (deadlock), a register
//! split that asks for more than the block's pool (deadlock at the
//! `setmaxnreg.inc`).
//!
//! **Running another warp-specialized variant** (e.g. `warp_specialized_loop`
//! for attention): take it from `compile_variants` by `Compiled::schedule`
//! and call `sim::run_interleavings` (or `sim::run_compiled` for one run) with
//! its tensors as `sim::SimTensor`s (bytes, shape outermost first, element
//! size), in parameter order, and the dims in `kernel.dims` order: the
//! simulator binds the variant's tensor maps from the shapes as the runtime
//! does, runs its grid (`RunOptions::shape` for a persistent variant
//! launched with fewer blocks) and returns the tensors, e.g.
//! ```ignore
//! let c = variant(&k, "warp_specialized_loop", CompileOptions::default());
//! let out = sim::run_interleavings(&c.function, &k, vec![q, kt, v, o], &dims, &[], None);
//! let got = decode(DType::F16, &out[3]);
//! ```
//! A deadlock fails with each warp's statement and what it waits for.

mod gemm_sim;
mod sim;

use gemm_sim::{decode, random, reference, Rng};
use sim::{RunOptions, SimTensor};
use tile_ir::print::parse_kernel;
use tile_ir::thread_ir::{Function, Inst, Stmt};
use tile_ir::*;
use tile_testkit::{Matmul, MATMUL_128X256};

/// The variant of `k` that `schedule` made.
fn variant(k: &Kernel, schedule: &str, options: CompileOptions) -> Compiled {
    let v = compile_variants(k, Target::Sm90a, options).unwrap_or_else(|e| panic!("compile: {e:?}"));
    v.into_iter().find(|c| c.schedule == schedule).unwrap_or_else(|| panic!("no {schedule} variant"))
}

/// One GEMM problem for a `Matmul` configuration: its inputs, an output
/// of NaN bit patterns (elements never written fail), the reference.
struct Problem {
    tensors: Vec<SimTensor>,
    dims: [i64; 3],
    want: Vec<f64>,
    dt: DType,
    m: usize,
    n: usize,
}

fn problem(cfg: &Matmul, m: usize, n: usize, kk: usize) -> Problem {
    let dt = if cfg.dtype == "bf16" { DType::BF16 } else { DType::F16 };
    let mut rng = Rng(0x5EED ^ (m * 7919 + n * 131 + kk) as u64);
    let (ab, av) = random(&mut rng, dt, m * kk, -1.0, 1.0);
    let (bb, bv) = random(&mut rng, dt, kk * n, -1.0, 1.0);
    let a_shape = if cfg.trans_a { vec![kk, m] } else { vec![m, kk] };
    let b_shape = if cfg.trans_b { vec![n, kk] } else { vec![kk, n] };
    let tensors = vec![
        SimTensor { bytes: ab, shape: a_shape, elem: 2 },
        SimTensor { bytes: bb, shape: b_shape, elem: 2 },
        SimTensor { bytes: vec![0xFF; 2 * m * n], shape: vec![m, n], elem: 2 },
    ];
    let want = reference(m, n, kk, &av, &bv, cfg.trans_a, cfg.trans_b);
    Problem { tensors, dims: [m as i64, kk as i64, n as i64], want, dt, m, n }
}

impl Problem {
    fn check(&self, out: &[Vec<u8>], what: &str) {
        let got = decode(self.dt, &out[2]);
        let tol = if self.dt == DType::BF16 { 8e-3 } else { 2e-3 };
        for (i, (g, w)) in got.iter().zip(&self.want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{what} {}×{}: C[{}, {}] = {g}, want {w}",
                self.m,
                self.n,
                i / self.n,
                i % self.n
            );
        }
    }
}

/// Compiles `cfg` with `options`, runs its warp-specialized variant on
/// `m × n × kk` (launched as `shape`, default its grid) under several
/// interleavings and checks the result.
fn check_ws(cfg: Matmul, options: CompileOptions, m: usize, n: usize, kk: usize, shape: Option<[u32; 3]>) -> Compiled {
    let k = parse_kernel(&cfg.text()).unwrap();
    let c = variant(&k, "warp_specialized_gemm", options);
    let p = problem(&cfg, m, n, kk);
    let out = sim::run_interleavings(&c.function, &k, p.tensors.clone(), &p.dims, &[], shape);
    p.check(&out, &format!("{cfg:?} {options:?} K={kk} launched {shape:?}"));
    c
}

/// 64×128×64 tiles, one consumer warpgroup (two warpgroups in all).
const SMALL: Matmul = Matmul { bm: 64, bn: 128, threads: 128, swizzle: None, ..MATMUL_128X256 };

fn plain() -> CompileOptions {
    CompileOptions { tma_store: false, persistent: false, ..CompileOptions::default() }
}

#[test]
fn loops_of_0_1_2_and_5_k_blocks() {
    for stages in [2, 3] {
        let cfg = Matmul { stages, ..SMALL };
        // K = 0: no iteration (the runtime would not pick this variant, as
        // TMA maps cannot describe an empty tensor, but the loops must not hang).
        for kk in [0, 64, 128, 320] {
            let c = check_ws(cfg, plain(), 64, 128, kk, None);
            assert_eq!((c.threads, c.persistent), (256, false));
        }
    }
}

#[test]
fn edge_tiles_in_m_n_and_k() {
    // 2×2 tiles, the last ones partial; K not a multiple of the k-block.
    check_ws(SMALL, plain(), 100, 200, 100, None);
    check_ws(Matmul { stages: 2, ..SMALL }, plain(), 70, 130, 200, None);
}

#[test]
fn transposes_and_bf16() {
    check_ws(Matmul { trans_a: true, ..SMALL }, plain(), 72, 136, 130, None);
    check_ws(Matmul { trans_b: true, dtype: "bf16", ..SMALL }, plain(), 65, 129, 192, None);
    // Two 64-row slices per consumer warpgroup.
    check_ws(Matmul { bm: 128, bn: 64, threads: 128, ..SMALL }, plain(), 130, 64, 128, None);
}

#[test]
fn two_consumer_warpgroups_share_the_stages() {
    // The example's 128×256 tile: 256 consumers, two warpgroups reading
    // all of B; 3 k-blocks over 3 stages, edges in M and N.
    let cfg = Matmul { swizzle: None, ..MATMUL_128X256 };
    let c = check_ws(cfg, plain(), 130, 200, 192, None);
    assert_eq!(c.threads, 384);
}

#[test]
fn tma_store_option() {
    let tma_store = CompileOptions { persistent: false, ..CompileOptions::default() };
    let c = check_ws(SMALL, tma_store, 100, 200, 192, None);
    assert!(!c.persistent && c.ptx.contains("cp.async.bulk.tensor.2d.global.shared::cta"));
    check_ws(Matmul { stages: 2, ..SMALL }, tma_store, 64, 128, 0, None);
}

#[test]
fn persistent_option_over_fewer_blocks_than_tiles() {
    let c = check_ws(SMALL, CompileOptions::default(), 100, 300, 192, Some([1, 1, 1]));
    assert!(c.persistent, "TMA store ending the kernel: persistent");
    // 6 tiles over 4 blocks (two run two tiles), 2 stages carried across tiles.
    check_ws(Matmul { stages: 2, ..SMALL }, CompileOptions::default(), 100, 300, 320, Some([4, 1, 1]));
    // One block per tile, and K = 0.
    check_ws(SMALL, CompileOptions::default(), 128, 256, 0, Some([4, 1, 1]));
    // Rasterized grid.
    check_ws(Matmul { swizzle: Some(2), ..SMALL }, CompileOptions::default(), 190, 260, 64, Some([2, 1, 1]));
}

/// Every configuration the GPU test runs (`tile-runtime/tests/gpu_ws_gemm.rs`,
/// listed in `hopper_ws.rs`), with its default options (TMA store,
/// persistent, launched on 2 blocks): one partial tile row, two tile
/// columns (the second partial), four k-blocks (the last partial).
#[test]
fn the_gpu_tests_configurations() {
    let base = Matmul { swizzle: None, ..MATMUL_128X256 };
    let configs = [
        base,
        Matmul { dtype: "bf16", ..base },
        Matmul { trans_b: true, ..base },
        Matmul { trans_a: true, ..base },
        Matmul { trans_a: true, trans_b: true, ..base },
        Matmul { stages: 2, ..base },
        Matmul { stages: 4, ..base },
        Matmul { bm: 64, bn: 128, threads: 128, ..base },
        Matmul { bk: 32, ..base },
        Matmul { dtype: "bf16", bn: 128, bk: 32, trans_b: true, ..base },
        Matmul { bm: 128, bn: 128, threads: 128, ..base },
        Matmul { bm: 256, bn: 128, threads: 256, stages: 4, ..base },
        Matmul { bm: 128, bn: 64, threads: 128, trans_a: true, dtype: "bf16", ..base },
        MATMUL_128X256,
    ];
    for cfg in configs {
        let (m, n, kk) = (cfg.bm as usize - 3, cfg.bn as usize + 8, 3 * cfg.bk as usize + 5);
        let k = parse_kernel(&cfg.text()).unwrap();
        let c = variant(&k, "warp_specialized_gemm", CompileOptions::default());
        let p = problem(&cfg, m, n, kk);
        let shape = c.persistent.then_some([2, 1, 1]);
        let out = sim::run_function(
            &c.function,
            &k,
            p.tensors.clone(),
            &p.dims,
            &[],
            RunOptions { shape, ..RunOptions::default() },
        );
        p.check(&out.tensors, &format!("{cfg:?}"));
    }
}

// ------------------------------------------------------------ planted bugs

/// Removes the statements `drop` picks (given the innermost loop's
/// `uniform` flag; false outside loops), everywhere; how many.
fn remove(body: &mut Vec<Stmt>, in_uniform_loop: bool, drop: &dyn Fn(&Inst, bool) -> bool) -> usize {
    let before = body.len();
    body.retain(|s| !matches!(s, Stmt::Inst { inst, .. } if drop(inst, in_uniform_loop)));
    let mut n = before - body.len();
    for s in body.iter_mut() {
        match s {
            Stmt::If { then, otherwise, .. } => {
                n += remove(then, in_uniform_loop, drop) + remove(otherwise, in_uniform_loop, drop);
            }
            Stmt::For { body, uniform, .. } => n += remove(body, *uniform, drop),
            _ => {}
        }
    }
    n
}

/// Runs `f` expecting a failure; its message.
fn failure(f: &Function, k: &Kernel, p: &Problem, shape: Option<[u32; 3]>, seed: Option<u64>) -> String {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sim::run_function(f, k, p.tensors.clone(), &p.dims, &[], RunOptions { shape, seed, ..RunOptions::default() });
    }));
    let e = run.expect_err("the planted bug ran without complaint");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn small_ws(options: CompileOptions) -> (Kernel, Compiled) {
    let k = parse_kernel(&SMALL.text()).unwrap();
    let c = variant(&k, "warp_specialized_gemm", options);
    (k, c)
}

#[test]
fn dropping_the_consumers_empty_arrives_deadlocks() {
    for options in [plain(), CompileOptions::default()] {
        let (k, c) = small_ws(options);
        let mut f = c.function.clone();
        assert!(remove(&mut f.body, false, &|i, _| matches!(i, Inst::MbarArrive { .. })) > 0);
        // 5 k-blocks over 3 stages: the producer waits for a stage that is never released.
        let p = problem(&SMALL, 64, 128, 320);
        for seed in [None, Some(5)] {
            let msg = failure(&f, &k, &p, Some([1, 1, 1]), seed);
            assert!(msg.contains("deadlock") && msg.contains("waits forever on the mbarrier"), "{msg}");
            // The consumers wait at the full barrier of the stage the producer cannot refill.
            assert!(msg.contains("warp 4 (lanes 0x00000001)"), "the producer thread's warp: {msg}");
        }
        // With no more k-blocks than stages, nothing waits for a release.
        let p = problem(&SMALL, 64, 128, 192);
        p.check(
            &sim::run_interleavings(&f, &k, p.tensors.clone(), &p.dims, &[], Some([1, 1, 1])),
            "no empty arrives, 3 blocks",
        );
    }
}

#[test]
fn dropping_the_consumers_full_waits_is_caught() {
    let (k, c) = small_ws(plain());
    let mut f = c.function.clone();
    let consumers_wait = |i: &Inst, uniform: bool| uniform && matches!(i, Inst::MbarWait { .. });
    assert!(remove(&mut f.body, false, &consumers_wait) > 0);
    let p = problem(&SMALL, 64, 128, 128);
    for seed in [None, Some(1), Some(2), Some(3)] {
        let msg = failure(&f, &k, &p, None, seed);
        assert!(
            msg.contains("has not landed") || msg.contains("TMA load"),
            "a read before the TMA lands, or a TMA load racing with the read: {msg}"
        );
    }
}

#[test]
fn changing_a_named_barriers_count_deadlocks() {
    let (k, c) = small_ws(plain());
    let p = problem(&SMALL, 64, 128, 64);
    // The consumers' `bar.sync 1, 128` expecting the (exited) producer warps too.
    let mut f = c.function.clone();
    assert_eq!(f.barrier_threads, Some(128));
    f.barrier_threads = Some(160);
    let msg = failure(&f, &k, &p, None, None);
    assert!(msg.contains("deadlock") && msg.contains("waits at barrier 1 for 160 threads"), "{msg}");
    assert!(msg.contains("warp 4: exited"), "{msg}");
    // The setup barrier over all 256 threads asking for one warp more.
    let mut f = c.function.clone();
    fn recount(body: &mut [Stmt]) -> usize {
        let mut n = 0;
        for s in body {
            match s {
                Stmt::Inst { inst: Inst::NamedBarSync { id: 0, threads }, .. } => {
                    *threads += 32;
                    n += 1;
                }
                Stmt::If { then, otherwise, .. } => n += recount(then) + recount(otherwise),
                Stmt::For { body, .. } => n += recount(body),
                _ => {}
            }
        }
        n
    }
    assert_eq!(recount(&mut f.body), 1);
    let msg = failure(&f, &k, &p, None, Some(9));
    assert!(msg.contains("deadlock") && msg.contains("waits at barrier 0 for 288 threads"), "{msg}");
}

/// Sets the count of every `setmaxnreg.inc` in `body` to `count`; how many.
fn set_consumer_regs(body: &mut [Stmt], count: u32) -> usize {
    let mut n = 0;
    for s in body {
        match s {
            Stmt::Inst { inst: Inst::SetMaxNreg { inc: true, count: c }, .. } => {
                *c = count;
                n += 1;
            }
            Stmt::If { then, otherwise, .. } => {
                n += set_consumer_regs(then, count) + set_consumer_regs(otherwise, count)
            }
            Stmt::For { body, .. } => n += set_consumer_regs(body, count),
            _ => {}
        }
    }
    n
}

/// `setmaxnreg.inc` takes registers only from the block's own pool
/// (`sim/regs.rs`): four consumer warpgroups (640 threads, 96 registers
/// each at entry) under a producer at 40 share 128 · 56 = 7,168 released
/// registers. The split (104: 512 · 8 = 4,096 taken) runs; the old rule's
/// 112 (an equal share of the SM's whole file: 512 · 16 = 8,192, 1,024
/// short) and 120 (5,120 short) leave the last warpgroup at the inc
/// forever, a deadlock naming the pool; an inc below the current count
/// and a dec above it are undefined in PTX and fail.
#[test]
fn a_register_split_beyond_the_blocks_pool_deadlocks() {
    let cfg = Matmul { bm: 256, bn: 128, threads: 512, swizzle: None, ..MATMUL_128X256 };
    let k = parse_kernel(&cfg.text()).unwrap();
    let c = variant(&k, "warp_specialized_gemm", plain());
    assert_eq!((c.function.threads, sim::entry_regs(&c.function)), (640, 96));
    let p = problem(&cfg, 256, 128, 192);
    let mut f = c.function.clone();
    assert_eq!(set_consumer_regs(&mut f.body, 104), 1);
    assert!(f.body == c.function.body, "the shipped split is 104");
    p.check(&sim::run_interleavings(&f, &k, p.tensors.clone(), &p.dims, &[], None), "640 threads at 104");
    for count in [112, 120] {
        let mut f = c.function.clone();
        set_consumer_regs(&mut f.body, count);
        for seed in [None, Some(3)] {
            // The warpgroups that come first take what there is; the last waits.
            let msg = failure(&f, &k, &p, None, seed);
            let pool = "entry 96 per thread × 640 threads at launch, 7168 released by setmaxnreg.dec";
            assert!(
                msg.contains("deadlock") && msg.contains(&format!("waits at setmaxnreg.inc {count} for warpgroup")),
                "{msg}"
            );
            assert!(msg.contains(&format!("it needs 128 × ({count} − 96) = {}", 128 * (count - 96))), "{msg}");
            assert!(msg.contains(pool) && msg.contains("short;"), "{msg}");
        }
    }
    // The producer's dec above its entry count, or turned into an inc
    // below it (at 40: ptxas's entry count stays 96, the largest count
    // being the consumers' 104): undefined.
    fn set_dec(body: &mut [Stmt], to: Inst) -> usize {
        let mut n = 0;
        for s in body {
            match s {
                Stmt::Inst { inst: inst @ Inst::SetMaxNreg { inc: false, .. }, .. } => {
                    *inst = to.clone();
                    n += 1;
                }
                Stmt::If { then, otherwise, .. } => n += set_dec(then, to.clone()) + set_dec(otherwise, to.clone()),
                Stmt::For { body, .. } => n += set_dec(body, to.clone()),
                _ => {}
            }
        }
        n
    }
    let mut f = c.function.clone();
    assert_eq!(set_dec(&mut f.body, Inst::SetMaxNreg { inc: true, count: 40 }), 1);
    let msg = failure(&f, &k, &p, None, None);
    assert!(msg.contains("setmaxnreg.inc 40 in warpgroup 4, which holds 96 registers per thread"), "{msg}");
    let mut f = c.function.clone();
    assert_eq!(set_dec(&mut f.body, Inst::SetMaxNreg { inc: false, count: 104 }), 1);
    let msg = failure(&f, &k, &p, None, None);
    assert!(msg.contains("setmaxnreg.dec 104 in warpgroup 4, which holds 96 registers per thread"), "{msg}");
}

#[test]
fn dropping_the_consumers_barriers_is_a_race() {
    // Two consumer warpgroups; the TMA store's panels lie over the stages.
    let cfg = Matmul { swizzle: None, ..MATMUL_128X256 };
    let k = parse_kernel(&cfg.text()).unwrap();
    let options = CompileOptions { persistent: false, ..CompileOptions::default() };
    let c = variant(&k, "warp_specialized_gemm", options);
    let mut f = c.function.clone();
    assert!(remove(&mut f.body, false, &|i, _| matches!(i, Inst::BarSync)) >= 2);
    let p = problem(&cfg, 128, 256, 128);
    for seed in [None, Some(4)] {
        let msg = failure(&f, &k, &p, None, seed);
        assert!(msg.contains("no synchronization"), "{msg}");
    }
}

#[test]
fn persistent_stores_must_wait_until_their_panels_are_read() {
    // The next tile's accumulator overwrites the panels the previous tile's
    // TMA store may still read, without `cp.async.bulk.wait_group.read`.
    let (k, c) = small_ws(CompileOptions::default());
    assert!(c.persistent);
    let mut f = c.function.clone();
    assert!(remove(&mut f.body, false, &|i, _| matches!(i, Inst::BulkWaitRead { .. })) >= 2);
    let p = problem(&SMALL, 128, 256, 64);
    let msg = failure(&f, &k, &p, Some([1, 1, 1]), None);
    assert!(msg.contains("still reads (no cp.async.bulk.wait_group.read)"), "{msg}");
}

#[test]
fn a_tma_store_of_unfenced_generic_writes_is_caught() {
    // The consumers write the store panels with st.shared: the TMA store
    // (async proxy) reads them only after each writer's fence.proxy.async.
    let (k, c) = small_ws(CompileOptions { persistent: false, ..CompileOptions::default() });
    let mut f = c.function.clone();
    assert!(remove(&mut f.body, false, &|i, _| matches!(i, Inst::FenceProxyAsync)) > 0);
    let p = problem(&SMALL, 64, 128, 64);
    let msg = failure(&f, &k, &p, None, None);
    assert!(msg.contains("TMA store by thread 0 reads shared byte") && msg.contains("fence.proxy.async"), "{msg}");
}

// ------------------------------------------- every variant, interleaved

/// Every sm_90a variant of the GEMM (warp-specialized, TMA-copy, cp.async,
/// and any other schedule that takes it) gives the reference under every
/// interleaving: the barriers the other schedules place order their warps too.
#[test]
fn every_sm90a_variant_of_the_gemm_under_interleavings() {
    let k = parse_kernel(&SMALL.text()).unwrap();
    let v = compile_variants(&k, Target::Sm90a, plain()).unwrap();
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    assert!(names[0] == "warp_specialized_gemm" && names.contains(&"tma_copy"), "{names:?}");
    assert!(v.last().unwrap().tensor_maps.is_empty(), "{names:?}");
    let p = problem(&SMALL, 100, 200, 192);
    for c in &v {
        let out = sim::run_interleavings(&c.function, &k, p.tensors.clone(), &p.dims, &[], None);
        p.check(&out, c.schedule);
    }
}

/// Every sm_90a variant of the attention loop (head dim 64, online
/// softmax, P·V from registers; the `warp_specialized_loop` variant first
/// with `CompileOptions::wsloop_one_warpgroup` on, as it is one consumer
/// warpgroup; `hopper_wsloop_sim.rs` has more of it) against the f64
/// reference, under every interleaving; key lengths of 1, 2 and 3 key
/// tiles, partial ones.
#[test]
fn every_sm90a_variant_of_attention_under_interleavings() {
    let k = parse_kernel(tile_testkit::ATTENTION).unwrap();
    let options = CompileOptions { wsloop_one_warpgroup: true, wsloop_persistent: true, ..CompileOptions::default() };
    let v = compile_variants(&k, Target::Sm90a, options).unwrap();
    let names: Vec<&str> = v.iter().map(|c| c.schedule).collect();
    assert!(names.contains(&"tma_copy") && v.last().unwrap().tensor_maps.is_empty(), "{names:?}");
    assert_eq!(names[..2], ["warp_specialized_loop_persistent", "warp_specialized_loop"], "{names:?}");
    let d = 64;
    for (sq, sk) in [(70, 129), (1, 64), (64, 100)] {
        let mut rng = Rng(0xA77E ^ (sq * 1000 + sk) as u64);
        let (qb, qv) = random(&mut rng, DType::F16, sq * d, -2.0, 2.0);
        let (kb, kv) = random(&mut rng, DType::F16, sk * d, -2.0, 2.0);
        let (vb, vv) = random(&mut rng, DType::F16, sk * d, -1.0, 1.0);
        let scale = (std::f64::consts::LOG2_E / (d as f64).sqrt()) as f32;
        let t = |bytes: Vec<u8>, rows: usize| SimTensor { bytes, shape: vec![rows, d], elem: 2 };
        let tensors = vec![t(qb, sq), t(kb, sk), t(vb, sk), t(vec![0xFF; 2 * sq * d], sq)];
        let want = gemm_sim::attention_reference(&qv, &kv, &vv, sq, sk, d);
        for c in &v {
            let dims = [sq as i64, sk as i64];
            // The persistent variant on one block: every tile in turn.
            let shape = c.persistent.then_some([1, 1, 1]);
            let out = sim::run_interleavings(&c.function, &k, tensors.clone(), &dims, &[scale.to_bits() as u64], shape);
            let err = gemm_sim::rel_l2(&decode(DType::F16, &out[3]), &want);
            assert!(err <= 5e-3, "{} sq={sq} sk={sk}: relative L2 error {err:.3e}", c.schedule);
        }
    }
}

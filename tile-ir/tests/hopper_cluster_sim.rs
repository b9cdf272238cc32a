//! Thread block clusters on the simulator (`sim/`): hand-built Thread IR
//! for two blocks of a cluster `[2, 1, 1]` run together. A correct TMA
//! multicast pipeline (each block's producer loads half of every box into
//! both blocks, each consumer releases the stage in both) gives every block
//! every box under several interleavings; planted bugs are each caught with
//! their own message: no cluster barrier after the barriers' init (a remote
//! use before the peer's init), a producer that exits before the peer's last
//! releases (an arrival on an exited block), an empty barrier counting one
//! block's consumers (the peer's stage overwritten while it is read: a race),
//! a missing multicast bit (the bytes never arrive: a deadlock). Also: a
//! cluster barrier a thread never reaches, a block exiting with a multicast
//! still landing in it, and the cluster instructions without a cluster.

mod sim;

use sim::{Sim, SimTensorMap, GBASE};
use std::collections::HashMap;
use tile_ir::thread_ir::*;

/// Boxes through the pipeline, pipeline stages.
const ITERS: usize = 6;
const STAGES: usize = 2;
/// One block's half of a box (16 rows of 64 f16), and the whole box.
const HALF: i64 = 2048;
const BOX: i64 = 2 * HALF;
/// Bytes of `out` per block: every box.
const PER_BLOCK: usize = ITERS * BOX as usize;

/// Shared layout: the full barriers, the empty barriers, the stages.
fn full(s: usize) -> i64 {
    8 * s as i64
}
fn empty(s: usize) -> i64 {
    16 + 8 * s as i64
}
fn stage(s: usize) -> i64 {
    1024 + BOX * s as i64
}
const SHARED: u32 = 1024 + (BOX as u32) * STAGES as u32;

fn smem(offset: i64) -> Address {
    Address { base: Operand::Symbol(SMEM.into()), offset }
}
fn at(r: Reg, offset: i64) -> Address {
    Address { base: Operand::Reg(r), offset }
}
fn inst(inst: Inst) -> Stmt {
    Stmt::Inst { inst, guard: None }
}
fn op(op: &str, dst: Reg, args: Vec<Operand>) -> Stmt {
    inst(Inst::Op { op: op.into(), dst, args })
}
fn when(cond: Reg, then: Vec<Stmt>) -> Stmt {
    Stmt::If { cond, negate: false, uniform: false, then, otherwise: vec![] }
}
fn wait(addr: i64, parity: usize, pred: Reg) -> Stmt {
    inst(Inst::MbarWait { addr: smem(addr), parity: Operand::Imm((parity & 1) as i64), pred })
}
fn tma(dst: Address, tmap: Reg, y: Operand, mbar: i64, multicast: Option<Reg>) -> Stmt {
    inst(Inst::TmaLoad {
        dst,
        tmap: Operand::Reg(tmap),
        coords: vec![Operand::Imm(0), y],
        mbar: smem(mbar),
        cache_hint: None,
        cta_dst: false,
        multicast: multicast.map(Operand::Reg),
        region: None,
    })
}

/// A function of `threads` threads per block with the common registers.
struct K {
    f: Function,
    tid: Reg,
    rank: Reg,
    leader: Reg,
    tmap: Reg,
}

impl K {
    fn new(threads: u32, shared_bytes: u32) -> K {
        let mut f = Function {
            name: "cluster".into(),
            params: vec![("out".into(), ".u64"), ("tmap".into(), TENSOR_MAP_PARAM)],
            threads,
            shared_bytes,
            ..Function::default()
        };
        let (tid, rank, leader, tmap) =
            (f.new_reg(RegClass::B32), f.new_reg(RegClass::B32), f.new_reg(RegClass::Pred), f.new_reg(RegClass::B64));
        f.body = vec![
            op("mov.u32", tid, vec![Operand::Special(Special::TidX)]),
            op("mov.u32", rank, vec![Operand::Special(Special::ClusterCtaRank)]),
            op("setp.eq.u32", leader, vec![Operand::Reg(tid), Operand::Imm(0)]),
            inst(Inst::TensorMapAddr { dst: tmap, param: "tmap".into() }),
        ];
        K { f, tid, rank, leader, tmap }
    }
    fn reg(&mut self, c: RegClass) -> Reg {
        self.f.new_reg(c)
    }
    fn push(&mut self, s: Stmt) {
        self.f.body.push(s);
    }
    /// `mapa` of shared byte `offset` in the block of rank `rank`.
    fn remote(&mut self, offset: i64, rank: Operand) -> (Reg, Vec<Stmt>) {
        let (a, r) = (self.reg(RegClass::B32), self.reg(RegClass::B32));
        let code = vec![
            op("add.u32", a, vec![Operand::Symbol(SMEM.into()), Operand::Imm(offset)]),
            op("mapa.shared::cluster.u32", r, vec![Operand::Reg(a), rank]),
        ];
        (r, code)
    }
}

/// Planted bugs of [`pipeline`].
#[derive(Clone, Copy, Default, Debug)]
struct Bugs {
    /// No cluster barrier after the barriers' init.
    no_cluster_sync: bool,
    /// The producer exits without waiting for the last releases.
    no_drain: bool,
    /// The empty barriers count one block's consumer only.
    empty_counts_one_block: bool,
    /// The multicast mask lacks rank 1's bit.
    missing_bit: bool,
}

/// The two-block multicast pipeline. Per block: warp 0 consumes, thread 32
/// produces. Thread 0 inits full (1 arrival: the block's producer's
/// expect_tx of the whole box) and empty (2 arrivals: both blocks'
/// consumers) barriers, `fence.mbarrier_init`, `bar.sync`, cluster arrive +
/// wait. Box `i` (rows `32i..32i+32` of the tensor) goes to stage `i % 2`:
/// each block's producer multicasts its 16 rows to both blocks (its rank's
/// half of the stage) after the stage's release, expecting the whole box
/// on its own full barrier; each consumer waits full, copies the box to
/// its block's part of `out`, and releases the stage in both blocks
/// (`mapa` + `mbarrier.arrive.release.cta.shared::cluster`). The producer waits for the
/// last two releases before it exits: the peer's consumer arrives on this
/// block's empty barriers until then.
fn pipeline(bugs: Bugs) -> Function {
    let mut k = K::new(64, SHARED);
    let (tid, rank, leader, tmap) = (k.tid, k.rank, k.leader, k.tmap);
    let (cons, prod, p) = (k.reg(RegClass::Pred), k.reg(RegClass::Pred), k.reg(RegClass::Pred));
    k.push(op("setp.lt.u32", cons, vec![Operand::Reg(tid), Operand::Imm(32)]));
    k.push(op("setp.eq.u32", prod, vec![Operand::Reg(tid), Operand::Imm(32)]));
    let consumers = if bugs.empty_counts_one_block { 1 } else { 2 };
    let mut init = vec![];
    for s in 0..STAGES {
        init.push(inst(Inst::MbarInit { addr: smem(full(s)), count: Operand::Imm(1) }));
        init.push(inst(Inst::MbarInit { addr: smem(empty(s)), count: Operand::Imm(consumers) }));
    }
    init.push(inst(Inst::FenceMbarrierInit));
    k.push(when(leader, init));
    k.push(inst(Inst::BarSync));
    if !bugs.no_cluster_sync {
        k.push(inst(Inst::ClusterArrive));
        k.push(inst(Inst::ClusterWait));
    }

    // Producer: this rank's half of every box, to both blocks.
    let (mask, row, half, dst) =
        (k.reg(RegClass::B16), k.reg(RegClass::B32), k.reg(RegClass::B32), k.reg(RegClass::B32));
    let mut produce = vec![
        op("mov.b16", mask, vec![Operand::Imm(if bugs.missing_bit { 0b01 } else { 0b11 })]),
        op("mul.lo.u32", row, vec![Operand::Reg(rank), Operand::Imm(16)]),
        op("mul.lo.u32", half, vec![Operand::Reg(rank), Operand::Imm(HALF)]),
        op("add.u32", dst, vec![Operand::Symbol(SMEM.into()), Operand::Reg(half)]),
    ];
    for i in 0..ITERS {
        let (s, n) = (i % STAGES, i / STAGES);
        if i >= STAGES {
            // Both blocks' consumers released the stage's previous box.
            produce.push(wait(empty(s), n - 1, p));
        }
        produce.push(inst(Inst::MbarArriveExpectTx { addr: smem(full(s)), tx_bytes: Operand::Imm(BOX) }));
        let y = k.reg(RegClass::B32);
        produce.push(op("add.u32", y, vec![Operand::Reg(row), Operand::Imm(32 * i as i64)]));
        produce.push(tma(at(dst, stage(s)), tmap, Operand::Reg(y), full(s), Some(mask)));
    }
    if !bugs.no_drain {
        for i in ITERS - STAGES..ITERS {
            produce.push(wait(empty(i % STAGES), i / STAGES, p));
        }
    }
    k.push(when(prod, produce));

    // Consumer: copy each box out, release the stage in both blocks.
    let (soff, cta, off, off64, base, g) = (
        k.reg(RegClass::B32),
        k.reg(RegClass::B32),
        k.reg(RegClass::B32),
        k.reg(RegClass::B64),
        k.reg(RegClass::B64),
        k.reg(RegClass::B64),
    );
    let mut consume = vec![
        op("mul.lo.u32", soff, vec![Operand::Reg(tid), Operand::Imm(16)]),
        op("mov.u32", cta, vec![Operand::Special(Special::CtaId(0))]),
        op("mad.lo.u32", off, vec![Operand::Reg(cta), Operand::Imm(PER_BLOCK as i64), Operand::Reg(soff)]),
        op("cvt.u64.u32", off64, vec![Operand::Reg(off)]),
        inst(Inst::LdParam { ty: "u64", dst: base, name: "out".into() }),
        op("add.s64", g, vec![Operand::Reg(base), Operand::Reg(off64)]),
    ];
    // Per stage: the arrivals on its empty barrier in blocks 0 and 1.
    let mut releases = vec![];
    for s in 0..STAGES {
        let mut arrive = vec![];
        for r in 0..2 {
            let (remote, code) = k.remote(empty(s), Operand::Imm(r));
            consume.extend(code);
            arrive.push(inst(Inst::MbarArriveCluster { addr: Operand::Reg(remote) }));
        }
        releases.push(arrive);
    }
    let v: Vec<Reg> = (0..4).map(|_| k.reg(RegClass::B32)).collect();
    for i in 0..ITERS {
        let (s, n) = (i % STAGES, i / STAGES);
        consume.push(wait(full(s), n, p));
        for j in 0..8 {
            consume.push(inst(Inst::Ld {
                space: Space::Shared,
                ty: "b32",
                dsts: v.clone(),
                addr: at(soff, stage(s) + 512 * j),
                region: None,
            }));
            consume.push(inst(Inst::St {
                space: Space::Global,
                ty: "b32",
                srcs: v.iter().map(|r| Operand::Reg(*r)).collect(),
                addr: at(g, i as i64 * BOX + 512 * j),
                region: None,
            }));
        }
        consume.push(when(leader, releases[s].clone()));
    }
    k.push(when(cons, consume));
    k.f
}

/// The tensor the boxes come from: `32 · ITERS` rows of 64 f16, dense.
fn tensor() -> Vec<u8> {
    let mut x = 0x2545_F491u32;
    (0..PER_BLOCK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn map() -> SimTensorMap {
    SimTensorMap {
        tensor: 0,
        elem_bytes: 2,
        dims: vec![64, 32 * ITERS as u64],
        strides: vec![128],
        boxdim: vec![64, 16],
        swizzle: 0,
    }
}

fn params() -> HashMap<String, u64> {
    HashMap::from([("out".to_string(), GBASE + (1 << 32))])
}

/// Runs `f` on a grid of `blocks` blocks in clusters of 2.
fn sim(f: &Function, blocks: u32, seed: Option<u64>) -> Sim<'_> {
    let mut s = Sim::new(f, vec![tensor(), vec![0; blocks as usize * PER_BLOCK]], params());
    s.cluster = [2, 1, 1];
    s.seed = seed;
    s.add_tensor_map("tmap", map());
    s.run_grid([blocks, 1, 1]);
    s
}

/// The panic message of `run`.
fn failure(run: impl FnOnce()) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).expect_err("the run should fail");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

const SEEDS: [Option<u64>; 5] = [None, Some(1), Some(2), Some(0xC0FFEE), Some(77)];

#[test]
fn a_multicast_pipeline_gives_both_blocks_every_box() {
    let f = pipeline(Bugs::default());
    let want = tensor();
    for blocks in [2, 4] {
        for seed in SEEDS {
            let s = sim(&f, blocks, seed);
            for b in 0..blocks as usize {
                assert!(
                    s.tensors[1][b * PER_BLOCK..(b + 1) * PER_BLOCK] == want[..],
                    "block {b} of {blocks}, seed {seed:?}: wrong boxes"
                );
            }
            // One multicast per producer and box; each stage's barriers
            // went through a phase per box in both blocks (the last cluster's).
            assert_eq!(s.hopper.tma_loads, blocks as u64 * ITERS as u64);
            for r in 0..2 {
                for st in 0..STAGES {
                    let uses = (ITERS / STAGES) as u64;
                    let (fm, em) =
                        (s.mbarrier_in(r, full(st) as usize).unwrap(), s.mbarrier_in(r, empty(st) as usize).unwrap());
                    assert_eq!((fm.phase, fm.pending, fm.tx), (uses, 1, 0), "block {r} full[{st}]");
                    assert_eq!((em.phase, em.pending), (uses, 2), "block {r} empty[{st}]");
                }
            }
        }
    }
}

#[test]
fn a_remote_use_before_the_peer_initialized_fails() {
    let f = pipeline(Bugs { no_cluster_sync: true, ..Bugs::default() });
    for seed in SEEDS {
        let msg = failure(|| {
            sim(&f, 2, seed);
        });
        // A multicast or a release reaching the peer's barrier before its
        // init, or after it but not ordered after it.
        assert!(msg.contains("of block") && msg.contains("no cluster barrier"), "seed {seed:?}: {msg}");
    }
    // The default interleaving: block 0's producer multicasts into block 1,
    // which has not run yet.
    let msg = failure(|| {
        sim(&f, 2, None);
    });
    assert!(
        msg.contains(
            "thread 32 of block 0 issues a TMA multicast completing on an uninitialized mbarrier at 0 of block 1"
        ),
        "{msg}"
    );
}

#[test]
fn a_producer_exiting_before_the_peer_releases_faults() {
    let f = pipeline(Bugs { no_drain: true, ..Bugs::default() });
    let msg = failure(|| {
        sim(&f, 2, None);
    });
    assert!(msg.contains("remote access to an exited CTA"), "{msg}");
    // Block 1 finishes first; block 0's consumer still releases box 4.
    assert!(
        msg.contains("thread 0 of block 0 arrives on the mbarrier at 16 of block 1, all of whose threads have exited"),
        "{msg}"
    );
    // Every interleaving ends with one block's last release reaching the
    // other after it exited, or a block exiting with its box landing.
    for seed in SEEDS {
        let msg = failure(|| {
            sim(&f, 2, seed);
        });
        assert!(msg.contains("remote access to an exited CTA"), "seed {seed:?}: {msg}");
    }
}

#[test]
fn an_empty_barrier_counting_one_block_races() {
    let f = pipeline(Bugs { empty_counts_one_block: true, ..Bugs::default() });
    for seed in SEEDS {
        let msg = failure(|| {
            sim(&f, 2, seed);
        });
        assert!(
            msg.contains("shared-memory race at byte") && msg.contains("issues a TMA load to it"),
            "seed {seed:?}: {msg}"
        );
    }
    let msg = failure(|| {
        sim(&f, 2, None);
    });
    // Block 1's producer refills stage 0 with box 2 once block 1's consumer
    // alone has released box 0 (one arrival completes the phase): in block
    // 0, box 0's half from block 1 (bytes 3072..) has landed and is unread,
    // block 0's consumer still waiting for the other half.
    assert!(
        msg.contains("shared-memory race at byte 3072 of block 0: thread 32 of block 1 issues a TMA load to it after a TMA load completing on the mbarrier at 0 of block 0's write with no synchronization between"),
        "{msg}"
    );
}

#[test]
fn a_missing_multicast_bit_deadlocks() {
    let f = pipeline(Bugs { missing_bit: true, ..Bugs::default() });
    for seed in SEEDS {
        let msg = failure(|| {
            sim(&f, 2, seed);
        });
        assert!(msg.contains("deadlock: every live warp is blocked in the cluster of blocks ctaid.x 0..2"), "{msg}");
        // Block 1 gets no box: its consumer waits for bytes no load brings.
        assert!(
            msg.contains("block 1 warp 0 (lanes 0xffffffff)")
                && msg.contains(
                    "thread 0 of block 1 waits forever on the mbarrier at 0 of block 1 for parity 0 (phase 0, 0 of 1 arrivals and 4096 tx bytes pending, 0 TMA loads in flight on it)"
                ),
            "seed {seed:?}: {msg}"
        );
    }
}

/// Two blocks of 32 threads; block 0 passes a cluster barrier that block 1
/// reaches only after an mbarrier phase block 0 completes after it.
#[test]
fn a_cluster_barrier_a_thread_never_reaches_deadlocks() {
    let mut k = K::new(32, 1024);
    let (rank, leader) = (k.rank, k.leader);
    k.push(when(
        leader,
        vec![inst(Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) }), inst(Inst::FenceMbarrierInit)],
    ));
    k.push(inst(Inst::BarSync));
    k.push(inst(Inst::ClusterArrive));
    k.push(inst(Inst::ClusterWait));
    let (first, p) = (k.reg(RegClass::Pred), k.reg(RegClass::Pred));
    k.push(op("setp.eq.u32", first, vec![Operand::Reg(rank), Operand::Imm(0)]));
    let (remote, code) = k.remote(0, Operand::Imm(1));
    let mut then = vec![inst(Inst::ClusterArrive), inst(Inst::ClusterWait)];
    then.extend(code);
    then.push(when(leader, vec![inst(Inst::MbarArriveCluster { addr: Operand::Reg(remote) })]));
    let otherwise = vec![wait(0, 0, p), inst(Inst::ClusterArrive), inst(Inst::ClusterWait)];
    k.push(Stmt::If { cond: first, negate: false, uniform: true, then, otherwise });
    for seed in SEEDS {
        let msg = failure(|| {
            sim(&k.f, 2, seed);
        });
        assert!(msg.contains("deadlock"), "{msg}");
        assert!(
            msg.contains("block 0 warp 0 (lanes 0xffffffff) at body[")
                && msg.contains("waits at the cluster barrier (barrier.cluster.wait) for every thread of the cluster's 2 blocks that has not exited; not arrived: block 1 warp 0"),
            "seed {seed:?}: {msg}"
        );
        assert!(
            msg.contains("thread 0 of block 1 waits forever on the mbarrier at 0 of block 1 for parity 0"),
            "{msg}"
        );
    }
}

/// Block 0 multicasts a box to both blocks and lets block 1 go (a remote
/// arrival); block 1 exits without waiting for its copy.
#[test]
fn a_block_exiting_with_a_multicast_landing_in_it_faults() {
    let mut k = K::new(32, 4096);
    let (rank, leader, tmap) = (k.rank, k.leader, k.tmap);
    k.push(when(
        leader,
        vec![
            inst(Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) }),
            inst(Inst::MbarInit { addr: smem(8), count: Operand::Imm(1) }),
            inst(Inst::FenceMbarrierInit),
        ],
    ));
    k.push(inst(Inst::BarSync));
    k.push(inst(Inst::ClusterArrive));
    k.push(inst(Inst::ClusterWait));
    let (first, p, mask) = (k.reg(RegClass::Pred), k.reg(RegClass::Pred), k.reg(RegClass::B16));
    k.push(op("setp.eq.u32", first, vec![Operand::Reg(rank), Operand::Imm(0)]));
    let (go, code) = k.remote(8, Operand::Imm(1));
    let mut issue = vec![
        op("mov.b16", mask, vec![Operand::Imm(0b11)]),
        inst(Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(HALF) }),
        tma(smem(1024), tmap, Operand::Imm(0), 0, Some(mask)),
    ];
    issue.extend(code);
    issue.push(inst(Inst::MbarArriveCluster { addr: Operand::Reg(go) }));
    issue.push(wait(0, 0, p));
    k.push(Stmt::If {
        cond: first,
        negate: false,
        uniform: true,
        then: vec![when(leader, issue)],
        otherwise: vec![wait(8, 0, p)],
    });
    let msg = failure(|| {
        sim(&k.f, 2, None);
    });
    assert!(
        msg.contains("block 1 exits (all its threads) while 1 TMA loads to its shared memory are in flight (the first to shared byte 1024 of block 1, completing on the mbarrier at 0 of block 1")
            && msg.contains("remote access to an exited CTA"),
        "{msg}"
    );
}

/// Without a cluster the block is rank 0 of a cluster of 1: `mapa` to rank
/// 0 is the block's own barrier, a multicast to bit 0 an ordinary load, the
/// cluster barrier the block's threads; another bit fails.
#[test]
fn cluster_instructions_without_a_cluster_are_a_cluster_of_one() {
    let build = |mask_bits: i64| {
        let mut k = K::new(64, 4096);
        let (tid, rank, leader, tmap) = (k.tid, k.rank, k.leader, k.tmap);
        k.push(when(
            leader,
            vec![
                inst(Inst::MbarInit { addr: smem(0), count: Operand::Imm(1) }),
                inst(Inst::MbarInit { addr: smem(8), count: Operand::Imm(64) }),
                inst(Inst::FenceMbarrierInit),
            ],
        ));
        k.push(inst(Inst::ClusterArrive));
        k.push(inst(Inst::ClusterWait));
        let (p, mask) = (k.reg(RegClass::Pred), k.reg(RegClass::B16));
        k.push(when(
            leader,
            vec![
                op("mov.b16", mask, vec![Operand::Imm(mask_bits)]),
                inst(Inst::MbarArriveExpectTx { addr: smem(0), tx_bytes: Operand::Imm(HALF) }),
                tma(smem(1024), tmap, Operand::Imm(16), 0, Some(mask)),
            ],
        ));
        k.push(wait(0, 0, p));
        // Every thread copies 32 bytes of the box out, then arrives on
        // barrier 8 through its rank-0 `.shared::cluster` address.
        let (soff, g, base, off64) =
            (k.reg(RegClass::B32), k.reg(RegClass::B64), k.reg(RegClass::B64), k.reg(RegClass::B64));
        k.push(op("mul.lo.u32", soff, vec![Operand::Reg(tid), Operand::Imm(32)]));
        k.push(op("cvt.u64.u32", off64, vec![Operand::Reg(soff)]));
        k.push(inst(Inst::LdParam { ty: "u64", dst: base, name: "out".into() }));
        k.push(op("add.s64", g, vec![Operand::Reg(base), Operand::Reg(off64)]));
        let v: Vec<Reg> = (0..4).map(|_| k.reg(RegClass::B32)).collect();
        for j in 0..2 {
            k.push(inst(Inst::Ld {
                space: Space::Shared,
                ty: "b32",
                dsts: v.clone(),
                addr: at(soff, 1024 + 16 * j),
                region: None,
            }));
            let srcs = v.iter().map(|r| Operand::Reg(*r)).collect();
            k.push(inst(Inst::St { space: Space::Global, ty: "b32", srcs, addr: at(g, 16 * j), region: None }));
        }
        let (remote, code) = k.remote(8, Operand::Reg(rank));
        for s in code {
            k.push(s);
        }
        k.push(inst(Inst::MbarArriveCluster { addr: Operand::Reg(remote) }));
        k.push(wait(8, 0, p));
        // The rank, after the box.
        k.push(when(
            leader,
            vec![inst(Inst::St {
                space: Space::Global,
                ty: "u32",
                srcs: vec![Operand::Reg(rank)],
                addr: at(g, HALF),
                region: None,
            })],
        ));
        k.f
    };
    let f = build(0b01);
    for seed in SEEDS {
        let mut s = Sim::new(&f, vec![tensor(), vec![0xFF; HALF as usize + 4]], params());
        s.seed = seed;
        s.add_tensor_map("tmap", map());
        s.run_grid([1, 1, 1]);
        // Rows 16..32 of the tensor, and rank 0.
        assert!(s.tensors[1][..HALF as usize] == tensor()[HALF as usize..BOX as usize], "seed {seed:?}");
        assert_eq!(s.tensors[1][HALF as usize..], [0, 0, 0, 0]);
        assert_eq!(s.mbarrier(8).unwrap().phase, 1);
    }
    let f = build(0b11);
    let msg = failure(|| {
        let mut s = Sim::new(&f, vec![tensor(), vec![0; HALF as usize + 4]], params());
        s.add_tensor_map("tmap", map());
        s.run_grid([1, 1, 1]);
    });
    assert!(
        msg.contains(
            "thread 0 issues a TMA multicast with ctaMask 0x0003: its bits must name ranks of its cluster of 1 blocks"
        ),
        "{msg}"
    );
}

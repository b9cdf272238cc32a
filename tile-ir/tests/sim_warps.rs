//! The simulator's warps (`sim/warps.rs`) on hand-written Thread IR: warps
//! run independently, so a producer warp can wait for its consumer warp;
//! named barriers sync only their warps (counted per warp, one arrival per
//! warp and instance, none left pending at the end), a barrier with
//! no count ignores exited warps and a counted one waiting on them
//! deadlocks; mbarrier arrive/wait order shared memory across warps
//! (release/acquire) and their absence is a race; deadlocks are reported
//! with where each warp is and what it waits for; warpgroup-collective
//! instructions are a meeting point of the warpgroup's four warps.

mod sim;

use std::collections::HashMap;
use tile_ir::thread_ir::*;

/// A Thread IR function under construction: `tid`, and `out` (a u32 per
/// thread in global memory) at `gout`.
struct K {
    f: Function,
    tid: Reg,
    gout: Reg,
}

fn smem(offset: i64) -> Address {
    Address { base: Operand::Symbol(SMEM.into()), offset }
}
fn at(r: Reg, offset: i64) -> Address {
    Address { base: Operand::Reg(r), offset }
}
fn inst(inst: Inst) -> Stmt {
    Stmt::Inst { inst, guard: None }
}

impl K {
    fn new(threads: u32, shared_bytes: u32) -> K {
        let mut f = Function {
            name: "k".into(),
            params: vec![("out".into(), ".u64")],
            threads,
            shared_bytes,
            ..Function::default()
        };
        let tid = f.new_reg(RegClass::B32);
        let gout = f.new_reg(RegClass::B64);
        let mut k = K { f, tid, gout };
        k.op("mov.u32", tid, vec![Operand::Special(Special::TidX)]);
        let base = k.reg(RegClass::B64);
        k.push(Inst::LdParam { ty: "u64", dst: base, name: "out".into() });
        let off32 = k.op_new("mul.lo.u32", RegClass::B32, vec![tid.into(), Operand::Imm(4)]);
        let off = k.op_new("cvt.u64.u32", RegClass::B64, vec![off32.into()]);
        k.op("add.s64", gout, vec![base.into(), off.into()]);
        k
    }
    fn reg(&mut self, c: RegClass) -> Reg {
        self.f.new_reg(c)
    }
    fn push(&mut self, i: Inst) {
        self.f.body.push(inst(i));
    }
    fn op(&mut self, op: &str, dst: Reg, args: Vec<Operand>) {
        self.push(Inst::Op { op: op.into(), dst, args });
    }
    fn op_new(&mut self, op: &str, class: RegClass, args: Vec<Operand>) -> Reg {
        let r = self.reg(class);
        self.op(op, r, args);
        r
    }
    /// A predicate `tid <cmp> v`.
    fn tid_is(&mut self, cmp: &str, v: i64) -> Reg {
        let tid = self.tid;
        self.op_new(&format!("setp.{cmp}.u32"), RegClass::Pred, vec![tid.into(), Operand::Imm(v)])
    }
    fn if_(&mut self, cond: Reg, then: Vec<Stmt>, otherwise: Vec<Stmt>) {
        self.f.body.push(Stmt::If { cond, negate: false, uniform: false, then, otherwise });
    }
    /// `out[tid] = v`.
    fn store_out(&mut self, v: Reg) -> Stmt {
        inst(Inst::St { space: Space::Global, ty: "b32", srcs: vec![v.into()], addr: at(self.gout, 0), region: None })
    }
    /// Thread 0 initializes 8-byte mbarriers at `addrs` with `count`s; all sync.
    fn init_mbarriers(&mut self, bars: &[(i64, i64)]) {
        let t0 = self.tid_is("eq", 0);
        let mut init: Vec<Stmt> =
            bars.iter().map(|&(a, c)| inst(Inst::MbarInit { addr: smem(a), count: Operand::Imm(c) })).collect();
        init.push(inst(Inst::FenceMbarrierInit));
        self.if_(t0, init, vec![]);
        self.push(Inst::BarSync);
    }
}

fn run(f: &Function, seed: Option<u64>) -> Vec<u32> {
    let mut p = HashMap::new();
    p.insert("out".to_string(), sim::GBASE);
    let mut s = sim::Sim::new(f, vec![vec![0; 4 * f.threads as usize]], p);
    s.seed = seed;
    s.run_block();
    s.tensors[0].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The failure message of running `f`.
fn failure(f: &Function, seed: Option<u64>) -> String {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(f, seed)));
    let e = r.expect_err("ran without complaint");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

const SEEDS: [Option<u64>; 4] = [None, Some(1), Some(2), Some(0xBEEF)];

/// Each thread writes `tid` to shared word `tid`, syncs on barrier 1
/// (threads 0..64) or 2 (64..128), each over 64 threads, and reads word
/// `tid ^ partner`.
fn pairs(partner: i64) -> Function {
    let mut k = K::new(128, 512);
    let tid = k.tid;
    let s = k.op_new("mul.lo.u32", RegClass::B32, vec![tid.into(), Operand::Imm(4)]);
    k.push(Inst::St { space: Space::Shared, ty: "b32", srcs: vec![tid.into()], addr: at(s, 0), region: None });
    let low = k.tid_is("lt", 64);
    k.if_(
        low,
        vec![inst(Inst::NamedBarSync { id: 1, threads: 64 })],
        vec![inst(Inst::NamedBarSync { id: 2, threads: 64 })],
    );
    let o = k.op_new("xor.b32", RegClass::B32, vec![tid.into(), Operand::Imm(partner)]);
    let so = k.op_new("mul.lo.u32", RegClass::B32, vec![o.into(), Operand::Imm(4)]);
    let v = k.reg(RegClass::B32);
    k.push(Inst::Ld { space: Space::Shared, ty: "b32", dsts: vec![v], addr: at(so, 0), region: None });
    let st = k.store_out(v);
    k.f.body.push(st);
    k.f
}

#[test]
fn named_barriers_sync_only_their_warps() {
    let f = pairs(32);
    for seed in SEEDS {
        let out = run(&f, seed);
        assert!(out.iter().enumerate().all(|(t, v)| *v == (t ^ 32) as u32), "{seed:?}: {out:?}");
    }
    // Reading the other pair's words: no barrier orders them.
    let msg = failure(&pairs(64), None);
    assert!(msg.contains("shared-memory race") && msg.contains("no synchronization"), "{msg}");
}

/// Warp 2 exits at once; warps 0 and 1 write, `bar`, read each other's word.
fn with_exited_warp(bar: Inst) -> Function {
    let mut k = K::new(96, 512);
    let tid = k.tid;
    let hi = k.tid_is("ge", 64);
    k.if_(hi, vec![inst(Inst::Exit)], vec![]);
    let s = k.op_new("mul.lo.u32", RegClass::B32, vec![tid.into(), Operand::Imm(4)]);
    k.push(Inst::St { space: Space::Shared, ty: "b32", srcs: vec![tid.into()], addr: at(s, 0), region: None });
    k.push(bar);
    let o = k.op_new("xor.b32", RegClass::B32, vec![tid.into(), Operand::Imm(32)]);
    let so = k.op_new("mul.lo.u32", RegClass::B32, vec![o.into(), Operand::Imm(4)]);
    let v = k.reg(RegClass::B32);
    k.push(Inst::Ld { space: Space::Shared, ty: "b32", dsts: vec![v], addr: at(so, 0), region: None });
    let st = k.store_out(v);
    k.f.body.push(st);
    k.f
}

#[test]
fn a_barrier_without_count_ignores_exited_warps() {
    let f = with_exited_warp(Inst::BarSync);
    for seed in SEEDS {
        let out = run(&f, seed);
        assert!((0..64).all(|t| out[t] == (t ^ 32) as u32) && out[64..].iter().all(|v| *v == 0), "{out:?}");
    }
    // The same barrier counting 96 threads waits for the exited warp forever.
    let msg = failure(&with_exited_warp(Inst::NamedBarSync { id: 0, threads: 96 }), None);
    assert!(msg.contains("deadlock: every live warp is blocked"), "{msg}");
    assert!(msg.contains("waits at barrier 0 for 96 threads; arrived: warps [0, 1] (64 threads)"), "{msg}");
    assert!(msg.contains("warp 2: exited"), "{msg}");
}

/// Warp 1 writes its words, arrives on the mbarrier at 0 (32 arrivals);
/// warp 0 waits for its phase 0 (unless `!wait`) and reads them.
fn handoff(wait: bool, write_after_arrive: bool) -> Function {
    let mut k = K::new(64, 1024);
    k.init_mbarriers(&[(0, 32)]);
    let tid = k.tid;
    let s = k.op_new("mul.lo.u32", RegClass::B32, vec![tid.into(), Operand::Imm(4)]);
    let write =
        inst(Inst::St { space: Space::Shared, ty: "b32", srcs: vec![tid.into()], addr: at(s, 64), region: None });
    let arrive = inst(Inst::MbarArrive { addr: smem(0) });
    let producer = if write_after_arrive { vec![arrive, write] } else { vec![write, arrive] };
    let p = k.reg(RegClass::Pred);
    let v = k.reg(RegClass::B32);
    let mut consumer = vec![];
    if wait {
        consumer.push(inst(Inst::MbarWait { addr: smem(0), parity: Operand::Imm(0), pred: p }));
    }
    // Thread t reads word t + 32 (offset 64 + 4t + 128).
    consumer.push(inst(Inst::Ld {
        space: Space::Shared,
        ty: "b32",
        dsts: vec![v],
        addr: at(s, 64 + 128),
        region: None,
    }));
    consumer.push(k.store_out(v));
    let hi = k.tid_is("ge", 32);
    k.if_(hi, producer, consumer);
    k.f
}

#[test]
fn mbarrier_arrive_and_wait_order_shared_memory_across_warps() {
    for seed in SEEDS {
        let out = run(&handoff(true, false), seed);
        assert!((0..32).all(|t| out[t] == t as u32 + 32), "{seed:?}: {out:?}");
    }
    for seed in SEEDS {
        let msg = failure(&handoff(false, false), seed);
        assert!(msg.contains("shared-memory race at byte"), "no wait: {msg}");
        let msg = failure(&handoff(true, true), seed);
        assert!(msg.contains("shared-memory race at byte"), "written after the arrive: {msg}");
    }
}

/// Warp 1 produces `n` values through a one-slot buffer, warp 0 sums them:
/// full (1 arrival) and empty (32 arrivals) mbarriers at 0 and 8, parities
/// carried in a loop. In lockstep this deadlocks: the producer waits for
/// the consumer's release of the slot.
fn ping_pong(n: i64) -> Function {
    let mut k = K::new(64, 256);
    k.init_mbarriers(&[(0, 1), (8, 32)]);
    let tid = k.tid;
    let (i, exit, ph) = (k.reg(RegClass::B32), k.reg(RegClass::Pred), k.reg(RegClass::B32));
    let (par, p, v, acc) = (k.reg(RegClass::B32), k.reg(RegClass::Pred), k.reg(RegClass::B32), k.reg(RegClass::B32));
    let lane = k.op_new("and.b32", RegClass::B32, vec![tid.into(), Operand::Imm(31)]);
    let s = k.op_new("mul.lo.u32", RegClass::B32, vec![lane.into(), Operand::Imm(4)]);
    let is0 = k.tid_is("eq", 32);
    let op = |op: &str, dst: Reg, args: Vec<Operand>| inst(Inst::Op { op: op.into(), dst, args });
    k.push(Inst::Op { op: "mov.u32".into(), dst: ph, args: vec![Operand::Imm(0)] });
    k.push(Inst::Op { op: "mov.u32".into(), dst: acc, args: vec![Operand::Imm(0)] });
    // Producer: wait empty (parity ph ^ 1), write i * 1000 + lane, one thread arrives on full.
    let value = k.reg(RegClass::B32);
    let producer = vec![Stmt::For {
        var: i,
        start: Operand::Imm(0),
        end: Operand::Imm(n),
        exit,
        uniform: false,
        body: vec![
            op("xor.b32", par, vec![ph.into(), Operand::Imm(1)]),
            inst(Inst::MbarWait { addr: smem(8), parity: par.into(), pred: p }),
            op("mad.lo.s32", value, vec![i.into(), Operand::Imm(1000), lane.into()]),
            inst(Inst::St { space: Space::Shared, ty: "b32", srcs: vec![value.into()], addr: at(s, 64), region: None }),
            Stmt::If {
                cond: is0,
                negate: false,
                uniform: false,
                then: vec![inst(Inst::MbarArrive { addr: smem(0) })],
                otherwise: vec![],
            },
            op("xor.b32", ph, vec![ph.into(), Operand::Imm(1)]),
        ],
    }];
    // Consumer: wait full (parity ph), add, release the slot.
    let consumer = vec![
        Stmt::For {
            var: i,
            start: Operand::Imm(0),
            end: Operand::Imm(n),
            exit,
            uniform: false,
            body: vec![
                inst(Inst::MbarWait { addr: smem(0), parity: ph.into(), pred: p }),
                inst(Inst::Ld { space: Space::Shared, ty: "b32", dsts: vec![v], addr: at(s, 64), region: None }),
                op("add.s32", acc, vec![acc.into(), v.into()]),
                inst(Inst::MbarArrive { addr: smem(8) }),
                op("xor.b32", ph, vec![ph.into(), Operand::Imm(1)]),
            ],
        },
        k.store_out(acc),
    ];
    let hi = k.tid_is("ge", 32);
    k.if_(hi, producer, consumer);
    k.f
}

#[test]
fn a_producer_warp_waits_for_its_consumer_warp() {
    for n in [0, 1, 2, 5] {
        let f = ping_pong(n);
        for seed in SEEDS {
            let out = run(&f, seed);
            for lane in 0..32i64 {
                let want: i64 = (0..n).map(|i| i * 1000 + lane).sum();
                assert_eq!(out[lane as usize] as i64, want, "n={n} {seed:?} lane {lane}");
            }
        }
    }
}

#[test]
fn a_deadlock_says_where_each_warp_is_and_what_it_waits_for() {
    // The consumer never releases the slot: the producer's second wait hangs.
    let mut f = ping_pong(3);
    let Stmt::If { otherwise, .. } = f.body.last_mut().unwrap() else { panic!() };
    let Stmt::For { body, .. } = &mut otherwise[0] else { panic!() };
    body.retain(|s| !matches!(s, Stmt::Inst { inst: Inst::MbarArrive { .. }, .. }));
    let msg = failure(&f, None);
    assert!(msg.starts_with("deadlock: every live warp is blocked"), "{msg}");
    // The producer warp (lanes 32..64): in the loop of the `then` branch.
    assert!(
        msg.contains("warp 1 (lanes 0xffffffff) at body[") && msg.contains("> then[0] > for[1]: thread 32 waits forever on the mbarrier at 8 for parity 0 (phase 0, 32 of 32 arrivals and 0 tx bytes pending, 0 TMA loads in flight on it)"),
        "{msg}"
    );
    // The consumer, having taken the first value, waits for the second.
    assert!(
        msg.contains("thread 0 waits forever on the mbarrier at 0 for parity 1 (phase 1, 1 of 1 arrivals"),
        "{msg}"
    );
}

#[test]
fn warpgroup_collectives_wait_for_all_four_warps() {
    // setmaxnreg is warpgroup-collective: warp 0 skipping it leaves the others waiting.
    let mut k = K::new(128, 16);
    let skip = k.tid_is("lt", 32);
    k.if_(skip, vec![], vec![inst(Inst::SetMaxNreg { inc: true, count: 64 })]);
    let msg = failure(&k.f, None);
    assert!(
        msg.contains("waits at warpgroup-collective setmaxnreg.inc.sync.aligned.u32 for warpgroup 0 (warp 0 exited, warp 1 here, warp 2 here, warp 3 here)"),
        "{msg}"
    );
    // All four warps there: it runs, once.
    let mut k = K::new(128, 16);
    k.push(Inst::SetMaxNreg { inc: true, count: 64 });
    let one = k.op_new("mov.u32", RegClass::B32, vec![Operand::Imm(1)]);
    let st = k.store_out(one);
    k.f.body.push(st);
    for seed in SEEDS {
        assert!(run(&k.f, seed).iter().all(|v| *v == 1));
    }
}

/// Two groups of four warps (warpgroups 0 and 1 of 256 threads): `pre0` and
/// `pre1` run by each, then every thread writes `tid` to shared word `tid`,
/// `bar.sync 1, 256`, and reads word `tid ^ 128` (the other group's).
fn two_groups(pre0: Vec<Stmt>, pre1: Vec<Stmt>) -> Function {
    let mut k = K::new(256, 1024);
    let tid = k.tid;
    let wg1 = k.tid_is("ge", 128);
    k.if_(wg1, pre1, pre0);
    let s = k.op_new("mul.lo.u32", RegClass::B32, vec![tid.into(), Operand::Imm(4)]);
    k.push(Inst::St { space: Space::Shared, ty: "b32", srcs: vec![tid.into()], addr: at(s, 0), region: None });
    k.push(Inst::NamedBarSync { id: 1, threads: 256 });
    let o = k.op_new("xor.b32", RegClass::B32, vec![tid.into(), Operand::Imm(128)]);
    let so = k.op_new("mul.lo.u32", RegClass::B32, vec![o.into(), Operand::Imm(4)]);
    let v = k.reg(RegClass::B32);
    k.push(Inst::Ld { space: Space::Shared, ty: "b32", dsts: vec![v], addr: at(so, 0), region: None });
    let st = k.store_out(v);
    k.f.body.push(st);
    k.f
}

/// PTX ISA barrier{.cta}: a barrier completes when its count has arrived,
/// by `bar.sync` or `bar.arrive` alike, one arrival per warp and instance.
/// A hand-over (`bar.arrive` on one side, `bar.sync` on the other) and a
/// barrier of one group alone before the shared `bar.sync 1, 256` are fine;
/// a warp's second arrival at an instance before it completes (a
/// `bar.arrive 1` before the `bar.sync 1`: unpredictable, on hardware it
/// would complete the barrier without the other group) and an arrival no
/// instruction consumes by the end of the block are errors.
#[test]
fn barrier_arrivals_count_once_per_warp_and_none_is_left_pending() {
    let sync = |id, threads| inst(Inst::NamedBarSync { id, threads });
    let arrive = |id, threads| inst(Inst::NamedBarArrive { id, threads });
    let fine = [
        (vec![], vec![]),
        (vec![sync(2, 256)], vec![arrive(2, 256)]),
        (vec![sync(2, 256)], vec![arrive(2, 256), sync(5, 128)]),
        (vec![sync(5, 128)], vec![]),
    ];
    for (pre0, pre1) in fine {
        let f = two_groups(pre0, pre1);
        for seed in SEEDS {
            let out = run(&f, seed);
            assert!(out.iter().enumerate().all(|(t, v)| *v == (t ^ 128) as u32), "{seed:?}: {out:?}");
        }
    }
    let msg = failure(&two_groups(vec![], vec![arrive(1, 256)]), None);
    assert!(msg.contains("warp 4 arrives at barrier 1 again before it completes"), "{msg}");
    let msg = failure(&two_groups(vec![], vec![arrive(2, 256)]), None);
    assert!(msg.contains("barrier 2 has arrivals of warps [4, 5, 6, 7] left pending when the block ends"), "{msg}");
}

/// A warpgroup's vote (`bar.red.or.pred`, `Inst::BarRedOr`) on its own
/// barrier: every thread of the warpgroup gets the OR of its 128 votes,
/// the other warpgroup's votes aside, under every interleaving.
#[test]
fn a_warpgroup_vote_is_the_or_of_its_threads_alone() {
    for voter in [5, 200, 1000] {
        let mut k = K::new(256, 0);
        let tid = k.tid;
        let vote = k.tid_is("eq", voter);
        let wg = k.op_new("shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
        let id = k.op_new("add.s32", RegClass::B32, vec![wg.into(), Operand::Imm(4)]);
        let any = k.reg(RegClass::Pred);
        k.push(Inst::BarRedOr { dst: any, src: vote, id: id.into(), threads: 128 });
        let v = k.op_new("selp.b32", RegClass::B32, vec![Operand::Imm(1), Operand::Imm(0), any.into()]);
        let st = k.store_out(v);
        k.f.body.push(st);
        for seed in SEEDS {
            let out = run(&k.f, seed);
            let want: Vec<u32> = (0..256).map(|t| (t / 128 == voter / 128) as u32).collect();
            assert_eq!(out, want, "voter {voter}, {seed:?}");
        }
    }
}

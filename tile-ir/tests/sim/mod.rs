//! A block-level simulator of the Thread IR, for tests: runs a block's warps
//! (a thread block cluster's blocks' warps together, see **Clusters**) over
//! the structured control flow, with bounds-checked global and shared
//! memory (an access outside a tensor or outside the dynamic shared memory
//! fails the test, so masking bugs show up even when the results happen to
//! be right) and happens-before race detection on shared memory.
//!
//! **Warps** (`warps.rs`). The 32 lanes of a warp run in lockstep per
//! structured statement (a divergent `if` runs its `then` lanes, then its
//! `else` lanes; shuffles see their partners), and each warp has its own
//! program counter (a stack of frames over the structured IR). Warps
//! interleave at their blocking points: an `mbarrier.try_wait` loop whose
//! phase has not completed, `bar.sync`/named barriers (`bar.sync id, n`, ids
//! 0..15: a barrier completes when `n` threads have arrived, counted per
//! warp as the hardware does — each arriving warp counts 32 — or, with no
//! count, when every warp that has not exited has arrived), and the
//! warpgroup-collective instructions (`wgmma.*`, `setmaxnreg`: the four
//! warps of a warpgroup meet there and the instruction runs once for the
//! 128 threads; a `setmaxnreg.inc` also waits until the block's register
//! pool holds what it takes, see below). `exit` ends lanes: exited warps no longer count for a
//! barrier without a thread count (PTX ISA, `exit`), a counted barrier that
//! waits on them never completes. The order is deterministic: by default
//! each warp runs until it blocks, lowest warp first; with
//! [`Sim::seed`] set, every round shuffles the warps and runs each for a
//! random number of statements, so a test can run several interleavings.
//! When every live warp is blocked the test fails with a deadlock report:
//! per warp, where it is (its statement path and instruction) and what it
//! waits for (the mbarrier's phase, pending arrivals and transaction bytes,
//! in-flight TMA loads; the barrier's count and who arrived; the warpgroup's
//! other warps; the cluster barrier's warps that have not arrived).
//!
//! **Races.** Each warp has a vector clock (one slot per warp, plus one per
//! mbarrier for the TMA bytes its phases complete). A barrier joins its
//! arrivals' clocks; `mbarrier.arrive` releases (the barrier accumulates
//! the arriver's clock) and a successful `try_wait` acquires the arrivals
//! up to the phase it saw complete (PTX memory model: arrive has release,
//! try_wait acquire semantics; arrivals are read-modify-writes), and TMA
//! bytes landing on an mbarrier are written by that mbarrier's slot, so
//! only a wait on one of its phases orders them. Per shared
//! byte the simulator keeps the last write (thread, clock) and the reads
//! since (per warp: clock and lane, or "several lanes"); an access that is
//! not ordered after a conflicting one by another thread fails the test.
//! Lanes of one warp share its clock: two lanes' accesses are ordered when
//! the warp synchronized (barrier, mbarrier arrive or wait) between them.
//! `uniform` branches and loops are checked within each warp. A warp's
//! divergent branches run one after the other (`then` lanes first), so code
//! in which one branch of a warp waits for the other branch of the same
//! warp deadlocks here (hardware with independent thread scheduling may
//! run it); across warps there is no such limit.
//!
//! **Clusters.** A kernel with `cluster = [C, 1, 1]` ([`Sim::cluster`], from
//! `Kernel::cluster` in [`launch`] and [`run_function`]) runs cluster by
//! cluster: blocks `ctaid.x = C·i .. C·i+C` (the grid's x a multiple of C)
//! in one run, their warps interleaved as one block's are (the seeded
//! schedules too), numbered across the cluster for the vector clocks, so
//! happens-before spans the blocks. Each block has its own shared memory
//! (block `r`'s at `r · sstride` in `Sim::shared`, 1024-aligned; every
//! `.shared::cta` address is the executing thread's block's), mbarriers,
//! 16 named barriers (`bar.sync` is per block), register pool, exits and
//! `%tid.x`; `%cluster_ctarank` is `r` and `%ctaid.x` the cluster's first
//! plus `r`. As on the hardware, a block's own `.shared::cta` addresses lie
//! inside the cluster's window: `smem` is block `r`'s `.shared::cluster`
//! address of its byte 0, `(r + 1) · CLUSTER_WINDOW` (on the H100 the
//! rank-1 block's addresses carry bits above 256 KB: a wgmma descriptor
//! whose start was not masked to its 14 bits carried them into LBO), and a
//! `.shared::cta` access through another block's window fails. Threads are padded per block to whole warpgroups (the padding
//! warps have no lanes). `mapa` gives a `.shared::cluster` address
//! (`hopper::CLUSTER_WINDOW`); `mbarrier.arrive.release.cta.shared::cluster` on one
//! arrives (releasing, as a local arrive) on that block's barrier;
//! `barrier.cluster.arrive.release` / `wait.acquire` is a cluster-wide
//! barrier joining every warp's clock (exited threads do not hold it up, a
//! live thread that never arrives is a deadlock); a TMA multicast lands in
//! every block of its mask (`hopper.rs`). Messages name threads, warps and
//! bytes by block in a cluster (`thread 32 of block 1`, `block 1 warp 0`,
//! `shared byte 1024 of block 1`: block r is rank r), the deadlock report
//! the cluster's `ctaid`. Without a cluster the instructions see a cluster
//! of one: rank 0, `mapa` to rank 0 only, multicast masks of bit 0 only.
//!
//! **Registers** (`regs.rs`). The block holds, from its launch, the entry
//! count per thread that ptxas gives the function (`TargetInfo::entry_regs`
//! of its `.maxntid` and `.minnctapersm`, at most its largest `setmaxnreg`
//! count: [`entry_regs`]) for every thread, and nothing more:
//! `setmaxnreg.dec` returns the difference to the block's pool,
//! `setmaxnreg.inc` waits (its warpgroup blocked, the other warps running)
//! until the pool holds the difference and takes it. A split that asks for
//! more than the producer released leaves a warpgroup at the inc forever:
//! a deadlock whose report names the `setmaxnreg.inc`, what it needs and
//! the pool's numbers (the H200 hang of a persistent loop at 240 consumer
//! registers, which the simulator did not see before). An inc below or a
//! dec above the warpgroup's current count (undefined in PTX) fails. Each
//! block of a cluster has its own pool.
//!
//! `cp.async` is asynchronous as on the hardware: the source is read at
//! issue, but the data lands in shared memory only when a
//! `cp.async.wait_group` of the issuing thread retires its group (a write by
//! that thread at that moment, for race detection). Reading or writing a
//! byte whose cp.async has not landed fails the test, as does a block that
//! exits with cp.asyncs in flight.
//!
//! Hopper instructions (see `hopper.rs` next to this file for their
//! semantics, written from the PTX ISA): mbarriers with arrival counts,
//! transaction bytes and phase parity; TMA loads that land only when a wait
//! on their mbarrier needs them; TMA stores with bulk groups; wgmma with
//! shared-memory descriptors or register A, asynchronous until
//! `wgmma.wait_group`; elect.sync and setmaxnreg (the register pool); the
//! cluster instructions (remote arrivals, TMA multicast, their faults).
//!
//! **Running a compiled variant.** [`run_compiled`] runs a
//! `tile_ir::Compiled` (any schedule: `warp_specialized_gemm`,
//! `warp_specialized_loop`, `tma_copy`, ...) over its grid: tensors as
//! [`SimTensor`]s (bytes, shape outermost first, element size) in parameter
//! order, each tensor map the variant declares encoded from its tensor's
//! shape as the runtime does (dense row-major, the meta's box and swizzle),
//! then `dims` and scalar bits, in clusters of the kernel's `cluster`;
//! [`RunOptions`] picks the launch shape (a persistent variant may be
//! launched with fewer blocks, on x) and the scheduling seed. [`run_function`] does the same for a `Function` the
//! test changed (planted bugs); [`run_interleavings`] runs one under the
//! default schedule and three seeds and checks they agree, e.g.
//! ```ignore
//! let v = compile_variants(&k, Target::Sm90a, CompileOptions::default()).unwrap();
//! let ws = v.iter().find(|c| c.schedule == "warp_specialized_loop").unwrap();
//! let out = sim::run_interleavings(&ws.function, &k, tensors, &dims, &[], None);
//! let o = &out[3];
//! ```
// Per-thread and per-byte state is indexed by thread and byte number on purpose.
#![allow(clippy::needless_range_loop)]
#![allow(dead_code)]

mod hopper;
mod ops;
mod regs;
mod warps;
#[allow(unused_imports)]
pub use hopper::SimTensorMap;
pub use ops::eval_op;
#[allow(unused_imports)]
pub use regs::entry_regs;

use ops::ty_size;
use std::collections::HashMap;
use tile_ir::thread_ir::*;

pub const GBASE: u64 = 0x1000_0000;

/// Runs `f` (compiled from `k`) over the grid of `k` at `dims`: tensors in
/// parameter order, each at `GBASE + i * 2^32`, then `dims` (in `k.dims`
/// order), then `scalars` (bit patterns, in scalar-parameter order). Returns
/// the finished simulation (its tensors, counters, Hopper state).
pub fn launch<'f>(
    f: &'f Function,
    k: &tile_ir::Kernel,
    tensors: Vec<Vec<u8>>,
    dims: &[i64],
    scalars: &[u64],
) -> Sim<'f> {
    let grid = tile_ir::abi::eval_grid(k, dims).unwrap();
    let mut sm = Sim::new(f, tensors, plain_params(f, k, 0, dims, scalars, 0));
    sm.cluster = k.cluster;
    sm.run_grid(grid);
    sm
}

/// [`launch`] with the launch shape `shape` (`nctaid`) rather than the
/// kernel's grid: e.g. a grid folded onto x (`tile_ir::abi::launch_shape`);
/// no cluster.
pub fn launch_shaped<'f>(
    f: &'f Function,
    k: &tile_ir::Kernel,
    tensors: Vec<Vec<u8>>,
    dims: &[i64],
    scalars: &[u64],
    shape: [u32; 3],
) -> Sim<'f> {
    let mut sm = Sim::new(f, tensors, plain_params(f, k, 0, dims, scalars, 0));
    sm.run_grid(shape);
    sm
}

/// The parameter values of `f`'s non-tensor-map parameters: `nt` tensors
/// (`GBASE + i * 2^32`; `nt` = 0: as many as there are parameters before
/// the dims, scalars and divisors), then `dims`, then `scalars`, then the
/// divisors' parameters (`abi::divisor_args`, as the runtime passes them);
/// a tile counter (`abi::TILE_COUNTER_PARAM`) gets `counter` (0: null, the
/// static stride).
pub fn plain_params(
    f: &Function,
    k: &tile_ir::Kernel,
    nt: usize,
    dims: &[i64],
    scalars: &[u64],
    counter: u64,
) -> HashMap<String, u64> {
    let divisors: Vec<u64> = tile_ir::abi::divisor_args(k, dims).into_iter().map(u64::from).collect();
    let plain: Vec<&String> = f
        .params
        .iter()
        .filter(|(n, ty)| *ty != TENSOR_MAP_PARAM && n != tile_ir::abi::TILE_COUNTER_PARAM)
        .map(|(n, _)| n)
        .collect();
    let nt = if nt == 0 { plain.len() - dims.len() - scalars.len() - divisors.len() } else { nt };
    assert_eq!(plain.len(), nt + dims.len() + scalars.len() + divisors.len(), "the function's parameters");
    let mut params = HashMap::new();
    for (i, name) in plain.into_iter().enumerate() {
        let val = if i < nt {
            GBASE + ((i as u64) << 32)
        } else if i < nt + dims.len() {
            dims[i - nt] as u32 as u64
        } else if i < nt + dims.len() + scalars.len() {
            scalars[i - nt - dims.len()]
        } else {
            divisors[i - nt - dims.len() - scalars.len()]
        };
        params.insert(name.clone(), val);
    }
    if f.params.iter().any(|(n, _)| n == tile_ir::abi::TILE_COUNTER_PARAM) {
        params.insert(tile_ir::abi::TILE_COUNTER_PARAM.to_string(), counter);
    }
    params
}

/// Whether `f` takes a tile counter (`abi::TILE_COUNTER_PARAM`).
pub fn takes_tile_counter(f: &Function) -> bool {
    f.params.iter().any(|(n, _)| n == tile_ir::abi::TILE_COUNTER_PARAM)
}

/// A tensor argument of [`run_compiled`]: its bytes (dense row-major), its
/// shape (outermost first) and its element size in bytes.
#[derive(Clone, Debug)]
pub struct SimTensor {
    pub bytes: Vec<u8>,
    pub shape: Vec<usize>,
    pub elem: usize,
}

/// How [`run_compiled`] launches.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// `nctaid` (default: the kernel's grid at the dims).
    pub shape: Option<[u32; 3]>,
    /// The scheduling seed ([`Sim::seed`]; default: run each warp until it blocks).
    pub seed: Option<u64>,
    /// A variant with a tile counter (`abi::TILE_COUNTER_PARAM`): pass a
    /// null one (the static stride) rather than a counter in a global word
    /// of its own after the tensors (`Sim::tensors`' last).
    pub static_tiles: bool,
    /// That counter's value at the launch (0 but for planted bugs: a
    /// counter nobody reset).
    pub counter_start: u32,
}

/// Runs the compiled variant `c` of `k` (see the module doc).
pub fn run_compiled<'f>(
    c: &'f tile_ir::Compiled,
    k: &tile_ir::Kernel,
    tensors: Vec<SimTensor>,
    dims: &[i64],
    scalars: &[u64],
    opts: RunOptions,
) -> Sim<'f> {
    run_function(&c.function, k, tensors, dims, scalars, opts)
}

/// [`run_compiled`] for a Thread IR function (e.g. a compiled variant's,
/// changed by the test); its tensor maps are `f.tensor_maps`.
pub fn run_function<'f>(
    f: &'f Function,
    k: &tile_ir::Kernel,
    tensors: Vec<SimTensor>,
    dims: &[i64],
    scalars: &[u64],
    opts: RunOptions,
) -> Sim<'f> {
    let dynamic = takes_tile_counter(f) && !opts.static_tiles;
    let counter = if dynamic { GBASE + ((tensors.len() as u64) << 32) } else { 0 };
    let params = plain_params(f, k, tensors.len(), dims, scalars, counter);
    let shapes: Vec<(Vec<usize>, usize)> = tensors.iter().map(|t| (t.shape.clone(), t.elem)).collect();
    let mut bytes: Vec<Vec<u8>> = tensors.into_iter().map(|t| t.bytes).collect();
    if dynamic {
        bytes.push(opts.counter_start.to_le_bytes().to_vec());
    }
    let mut sm = Sim::new(f, bytes, params);
    sm.seed = opts.seed;
    sm.cluster = k.cluster;
    for tm in &f.tensor_maps {
        let (shape, elem) = &shapes[tm.tensor];
        assert_eq!(tm.box_shape.len(), shape.len(), "{}: one box extent per tensor dim", tm.param);
        let inner: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let mut strides = Vec::new();
        let mut s = *elem as u64;
        for d in &inner[..inner.len() - 1] {
            s *= d;
            strides.push(s);
        }
        sm.add_tensor_map(
            &tm.param,
            SimTensorMap {
                tensor: tm.tensor,
                elem_bytes: *elem,
                dims: inner,
                strides,
                boxdim: tm.box_shape.iter().rev().copied().collect(),
                swizzle: tm.swizzle.bytes(),
            },
        );
    }
    let shape = opts.shape.unwrap_or_else(|| tile_ir::abi::eval_grid(k, dims).unwrap());
    sm.run_grid(shape);
    sm
}

/// Runs `f` as [`run_function`] does with the default schedule and with
/// three seeded interleavings; all must give the same tensors, which it
/// returns.
pub fn run_interleavings(
    f: &Function,
    k: &tile_ir::Kernel,
    tensors: Vec<SimTensor>,
    dims: &[i64],
    scalars: &[u64],
    shape: Option<[u32; 3]>,
) -> Vec<Vec<u8>> {
    run_interleavings_with(f, k, tensors, dims, scalars, RunOptions { shape, ..RunOptions::default() })
}

/// [`run_interleavings`] with `opts` (its seed ignored).
pub fn run_interleavings_with(
    f: &Function,
    k: &tile_ir::Kernel,
    tensors: Vec<SimTensor>,
    dims: &[i64],
    scalars: &[u64],
    opts: RunOptions,
) -> Vec<Vec<u8>> {
    let first = run_function(f, k, tensors.clone(), dims, scalars, RunOptions { seed: None, ..opts }).tensors;
    for seed in [1, 0xC0FFEE, 77] {
        let again = run_function(f, k, tensors.clone(), dims, scalars, RunOptions { seed: Some(seed), ..opts }).tensors;
        assert!(again == first, "seed {seed} gives other results than the default interleaving");
    }
    first
}

/// The cp.asyncs of one group: (shared address, bytes that will land).
type AsyncGroup = Vec<(usize, Vec<u8>)>;

/// The last write of a shared byte and which warps have read it since.
#[derive(Copy, Clone, Debug)]
struct Shadow {
    /// The writing thread, `AGENT | slot` for a TMA load completing on the
    /// mbarrier of that clock slot, or `NONE`.
    writer: u32,
    /// The writer's clock (its warp's, or its slot's) at the write.
    clock: u32,
    /// Bit `w`: warp `w` read the byte since the write (`Sim::reads`).
    readers: u64,
}

const NONE: u32 = u32::MAX;
const AGENT: u32 = 1 << 30;
/// The lane of a read record standing for several lanes of the warp.
const MANY: u32 = 32;

impl Shadow {
    const FRESH: Shadow = Shadow { writer: NONE, clock: 0, readers: 0 };
}

pub struct Sim<'f> {
    pub f: &'f Function,
    /// Global memory: each tensor at `GBASE + i * 2^32`.
    pub tensors: Vec<Vec<u8>>,
    pub params: HashMap<String, u64>,
    /// The first block of the cluster being run (the block, without a
    /// cluster); a thread's `%ctaid.x` adds its block's rank.
    pub ctaid: [u32; 3],
    pub nctaid: [u32; 3],
    /// The thread block cluster (`Kernel::cluster`, `[C, 1, 1]`; set by
    /// [`launch`] and [`run_function`]): [`Sim::run_grid`] runs the grid
    /// cluster by cluster, the `C` blocks of one together.
    pub cluster: [u32; 3],
    /// Scheduling: `None` runs each warp until it blocks, lowest warp
    /// first; `Some(seed)` shuffles the warps every round and runs each for
    /// a pseudo-random number of statements (the same seed, the same order).
    pub seed: Option<u64>,
    rng: u64,
    regs: Vec<Vec<u64>>,
    /// The cluster's shared memory: block `r`'s at `r * sstride`.
    shared: Vec<u8>,
    /// Thread indices of the cluster being run: block `r`'s threads are
    /// `r * stride ..` (`stride`: the block's threads, rounded up to whole
    /// warpgroups in a cluster), `threads` in all.
    threads: usize,
    stride: usize,
    /// The run's blocks (the cluster's, 1 without a cluster), threads per
    /// block (`Function::threads`), shared bytes per block and the stride
    /// of the blocks in `shared` (1024-aligned in a cluster: swizzles and
    /// alignments stay those of the block's own addresses).
    nblocks: usize,
    block_threads: usize,
    smem: usize,
    sstride: usize,
    /// Per block of the cluster: every thread of it has exited.
    block_done: Vec<bool>,
    /// The cluster barrier (`barrier.cluster`).
    cbar: warps::ClusterBar,
    pub steps: u64,
    /// The cluster's warps (block `r`'s from `r * stride / 32`), their
    /// synchronization state, each block's 16 barriers (block `r`'s from
    /// `16 * r`).
    warps: Vec<warps::Warp<'f>>,
    sync: Vec<warps::WarpSync<'f>>,
    bars: Vec<warps::NamedBar>,
    nwarps: usize,
    /// Per warp: its vector clock (slots: warps, then mbarriers).
    vc: Vec<Vec<u32>>,
    /// Set by an instruction with release semantics (mbarrier arrive): the
    /// warp's own clock advances after the instruction.
    released: bool,
    /// Race detection on shared memory: per byte, the last write and its
    /// readers; per byte and warp (`b * nwarps + w`), the read record
    /// `clock << 6 | lane` (lane `MANY`: several).
    shadow: Vec<Shadow>,
    reads: Vec<u32>,
    /// Per thread: cp.asyncs issued since the last commit, and the committed
    /// groups still in flight (oldest first); each copy is (shared address, bytes).
    async_open: Vec<AsyncGroup>,
    async_groups: Vec<Vec<AsyncGroup>>,
    /// Per shared byte: the thread whose cp.async to it is in flight.
    async_owner: Vec<usize>,
    /// Number of cp.asyncs issued (for tests).
    pub cp_async_count: u64,
    /// Hopper state (mbarriers, TMA, bulk groups, wgmma groups).
    pub hopper: hopper::HopperState,
    /// Per block: its register pool (`setmaxnreg`, `regs.rs`).
    pools: Vec<regs::RegPool>,
}

fn f32b(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn bf(x: f32) -> u64 {
    x.to_bits() as u64
}
fn h2f(x: u64) -> f32 {
    half::f16::from_bits(x as u16).to_f32()
}
fn bh2f(x: u64) -> f32 {
    half::bf16::from_bits(x as u16).to_f32()
}

impl<'f> Sim<'f> {
    pub fn new(f: &'f Function, tensors: Vec<Vec<u8>>, params: HashMap<String, u64>) -> Sim<'f> {
        let threads = f.threads as usize;
        Sim {
            f,
            tensors,
            params,
            ctaid: [0; 3],
            nctaid: [1; 3],
            cluster: [1, 1, 1],
            seed: None,
            rng: 0,
            regs: vec![],
            shared: vec![],
            threads,
            stride: threads,
            nblocks: 1,
            block_threads: threads,
            smem: f.shared_bytes as usize,
            sstride: f.shared_bytes as usize,
            block_done: vec![],
            cbar: warps::ClusterBar::default(),
            steps: 0,
            warps: vec![],
            sync: vec![],
            bars: vec![],
            nwarps: 0,
            vc: vec![],
            released: false,
            shadow: vec![],
            reads: vec![],
            async_open: vec![],
            async_groups: vec![],
            async_owner: vec![],
            cp_async_count: 0,
            hopper: hopper::HopperState::default(),
            pools: vec![],
        }
    }

    /// Runs the grid `grid` (`nctaid`), cluster by cluster (block by block
    /// without a cluster).
    pub fn run_grid(&mut self, grid: [u32; 3]) {
        self.nctaid = grid;
        let c = self.cluster_size() as u32;
        assert!(grid[0] % c == 0, "a grid of {} blocks along x is not a whole number of clusters of {c}", grid[0]);
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in (0..grid[0]).step_by(c as usize) {
                    self.ctaid = [x, y, z];
                    self.run_block();
                }
            }
        }
    }

    /// Blocks per cluster: `C` of `cluster = [C, 1, 1]`, 1 without a cluster.
    pub fn cluster_size(&self) -> usize {
        let [x, y, z] = self.cluster;
        assert!(
            y == 1 && z == 1 && (1..=16).contains(&x),
            "the simulator models clusters [C, 1, 1] with C in 1..=16, not {:?}",
            self.cluster
        );
        x as usize
    }

    /// Runs one cluster, its first block at `ctaid` (one block, without a
    /// cluster): its blocks' warps interleaved until every one has finished.
    pub fn run_block(&mut self) {
        let c = self.cluster_size();
        let (t, s) = (self.f.threads as usize, self.f.shared_bytes as usize);
        self.nblocks = c;
        self.block_threads = t;
        self.stride = if c == 1 { t } else { t.div_ceil(128) * 128 };
        self.threads = c * self.stride;
        self.smem = s;
        self.sstride = if c == 1 { s } else { s.div_ceil(1024) * 1024 };
        self.block_done = vec![false; c];
        self.regs = vec![vec![0xDEAD_BEEF_DEAD_BEEF; self.f.regs.len()]; self.threads];
        // Garbage in shared memory: reads of unwritten data poison results.
        let bytes = c * self.sstride;
        self.shared = vec![0x7F; bytes];
        self.async_open = vec![vec![]; self.threads];
        self.async_groups = vec![vec![]; self.threads];
        self.async_owner = vec![usize::MAX; bytes];
        self.start_warps();
        self.shadow = vec![Shadow::FRESH; bytes];
        self.reads = vec![0; bytes * self.nwarps];
        self.hopper_block_start();
        self.regs_block_start();
        self.run_warps();
        self.hopper_block_end();
        for t in 0..self.threads {
            assert!(
                self.async_open[t].is_empty() && self.async_groups[t].is_empty(),
                "{} exits with cp.async copies in flight",
                self.thread_name(t)
            );
        }
    }

    /// The block (cluster rank) of thread `t`.
    fn block_of(&self, t: usize) -> usize {
        t / self.stride
    }

    /// The block of warp `w`.
    fn warp_block(&self, w: usize) -> usize {
        32 * w / self.stride
    }

    /// Block `r`'s first byte in `shared`.
    fn sbase(&self, r: usize) -> usize {
        r * self.sstride
    }

    /// Thread `t` in words: `thread 5`, in a cluster `thread 5 of block 1`
    /// (its `%tid.x`, its block's rank).
    fn thread_name(&self, t: usize) -> String {
        if self.nblocks == 1 {
            format!("thread {t}")
        } else {
            format!("thread {} of block {}", t % self.stride, t / self.stride)
        }
    }

    /// Warp `w` in words: `warp 4`, in a cluster `block 1 warp 0`.
    fn warp_name(&self, w: usize) -> String {
        if self.nblocks == 1 {
            format!("warp {w}")
        } else {
            let r = self.warp_block(w);
            format!("block {r} warp {}", w - r * self.stride / 32)
        }
    }

    /// Warps `ws` (of one block) by their numbers in the block.
    fn warp_list(&self, ws: &[usize]) -> String {
        let local: Vec<usize> = ws.iter().map(|&w| w - self.warp_block(w) * self.stride / 32).collect();
        format!("{local:?}")
    }

    /// Shared byte `g` (an index into `shared`) in words: `520`, in a
    /// cluster `520 of block 1`.
    fn byte_name(&self, g: usize) -> String {
        if self.nblocks == 1 || self.sstride == 0 {
            format!("{g}")
        } else {
            format!("{} of block {}", g % self.sstride, g / self.sstride)
        }
    }

    /// The address of `smem` for thread `t`: 0, or in a cluster its block's
    /// window in the cluster's (see **Clusters**).
    fn smem_symbol(&self, t: usize) -> u64 {
        if self.cluster == [1, 1, 1] {
            0
        } else {
            (self.block_of(t) as u64 + 1) * hopper::CLUSTER_WINDOW
        }
    }

    /// The shared byte of thread `t`'s `.shared::cta` address `v` (its own
    /// block's: an address in another block's window fails).
    pub(super) fn own_shared(&self, t: usize, v: u64) -> usize {
        let (r, a) = self.cluster_addr(t, v);
        assert_eq!(
            r,
            self.block_of(t),
            "{} accesses {v:#x}, a .shared::cta address of the block of rank {r}, not its own",
            self.thread_name(t)
        );
        a
    }

    /// The index into `shared` of thread `t`'s shared address `a` (its
    /// block's `len` bytes there, which must lie in its shared memory).
    fn shared_index(&self, t: usize, a: u64, len: usize) -> u64 {
        let a = self.own_shared(t, a);
        assert!(a + len <= self.smem, "shared access out of bounds: {a}+{len} > {}", self.smem);
        (self.sbase(self.block_of(t)) + a) as u64
    }

    /// Fails when a byte of `[addr, addr+len)` has a cp.async in flight.
    fn check_landed(&self, t: usize, addr: u64, len: usize, what: &str) {
        if what != "reads" {
            self.check_bulk_source(t, addr, len);
        }
        for b in addr as usize..(addr as usize + len).min(self.async_owner.len()) {
            let o = self.async_owner[b];
            assert!(
                o != hopper::TMA_OWNER,
                "{} {what} shared byte {} while a TMA load to it is in flight (no mbarrier wait has completed its phase)",
                self.thread_name(t),
                self.byte_name(b)
            );
            assert!(
                o == usize::MAX,
                "{} {what} shared byte {} while {}'s cp.async to it is in flight (no cp.async.wait_group retired it)",
                self.thread_name(t),
                self.byte_name(b),
                self.thread_name(o)
            );
        }
    }

    fn val(&self, t: usize, o: &Operand) -> u64 {
        match o {
            Operand::Reg(r) => self.regs[t][r.0 as usize],
            Operand::Imm(v) => *v as u64,
            Operand::F32(x) => bf(*x),
            Operand::B16(b) => *b as u64,
            Operand::Special(Special::TidX) => (t % self.stride) as u64,
            // Cluster blocks are consecutive along x: rank r is ctaid.x + r.
            Operand::Special(Special::CtaId(0)) => (self.ctaid[0] as usize + self.block_of(t)) as u64,
            Operand::Special(Special::CtaId(a)) => self.ctaid[*a as usize] as u64,
            Operand::Special(Special::ClusterCtaRank) => self.block_of(t) as u64,
            Operand::Special(Special::NctaId(a)) => self.nctaid[*a as usize] as u64,
            // (No clock: traced builds are not simulated.)
            Operand::Special(Special::Clock64) => 0,
            Operand::Symbol(s) if s == SMEM => self.smem_symbol(t),
            Operand::Symbol(s) => panic!("unknown symbol {s}"),
        }
    }

    /// The clock slot of a shadow writer: its warp, or its mbarrier's slot.
    fn writer_slot(&self, writer: u32) -> usize {
        if writer & AGENT != 0 {
            (writer & !AGENT) as usize
        } else {
            writer as usize / 32
        }
    }

    /// Whether warp `w` (now) is ordered after an access by `who` (a thread
    /// or `AGENT | slot`) at clock `clock` (for the same warp: whether it
    /// synchronized since; the same thread is ordered by program order,
    /// which the callers check).
    fn ordered(&self, w: usize, who: u32, clock: u32) -> bool {
        let u = self.writer_slot(who);
        if u == w {
            self.vc[w][w] > clock
        } else {
            self.vc[w][u] >= clock
        }
    }

    /// Who wrote a byte, in words.
    fn writer_name(&self, writer: u32) -> String {
        if writer & AGENT != 0 {
            let slot = (writer & !AGENT) as usize;
            match self.hopper.slot_mbar.get(slot - self.nwarps) {
                Some(&mbar) => format!("a TMA load completing on the mbarrier at {}", self.byte_name(mbar)),
                None => format!("a TMA load completing on the mbarrier at {}", usize::MAX),
            }
        } else {
            self.thread_name(writer as usize)
        }
    }

    /// Checks an access of byte `b` by thread `t` against the byte's
    /// history without recording it: the conflicting earlier access it is
    /// not ordered after, in words.
    fn unordered_access(&self, t: usize, b: usize, write: bool) -> Option<String> {
        let w = t / 32;
        let sh = self.shadow[b];
        if sh.writer != NONE && sh.writer != t as u32 && !self.ordered(w, sh.writer, sh.clock) {
            return Some(format!("{}'s write", self.writer_name(sh.writer)));
        }
        if write {
            let (nw, lane, now) = (self.nwarps, (t % 32) as u32, self.vc[w][w]);
            let mut m = sh.readers;
            while m != 0 {
                let u = m.trailing_zeros() as usize;
                m &= m - 1;
                let r = self.reads[b * nw + u];
                let (rc, rl) = (r >> 6, r & 63);
                let ok = if u == w { rl == lane || now > rc } else { self.vc[w][u] >= rc };
                if !ok {
                    let who = if rl == MANY {
                        format!("lanes of {}", self.warp_name(u))
                    } else {
                        self.thread_name(32 * u + rl as usize)
                    };
                    return Some(format!("a read by {who}"));
                }
            }
        }
        None
    }

    /// Records a read of byte `b` by warp `w` (lane `lane`, or `MANY`).
    fn record_read(&mut self, b: usize, w: usize, lane: u32) {
        let now = self.vc[w][w];
        assert!(now < 1 << 26, "the simulator's clocks overflow");
        let i = b * self.nwarps + w;
        let sh = &mut self.shadow[b];
        let lane = if sh.readers & (1 << w) != 0 {
            let r = self.reads[i];
            if r >> 6 == now && (r & 63) != lane {
                MANY
            } else {
                lane
            }
        } else {
            lane
        };
        self.reads[i] = (now << 6) | lane;
        sh.readers |= 1 << w;
    }

    /// Records a write of byte `b` by `who` (a thread or `AGENT | slot`) at `clock`.
    fn record_write(&mut self, b: usize, who: u32, clock: u32) {
        self.shadow[b] = Shadow { writer: who, clock, readers: 0 };
    }

    /// Checks and records a shared-memory access by thread `t`.
    fn race_check(&mut self, t: usize, addr: u64, len: usize, write: bool) {
        if write {
            self.check_no_wgmma_reads(addr as usize, len);
        }
        let w = t / 32;
        for b in addr as usize..addr as usize + len {
            if let Some(other) = self.unordered_access(t, b, write) {
                panic!(
                    "shared-memory race at byte {}: {} {} after {other} with no synchronization between (bar.sync, or an mbarrier arrive and a wait on its phase)",
                    self.byte_name(b),
                    self.thread_name(t),
                    if write { "writes" } else { "reads" }
                );
            }
            if write {
                let now = self.vc[w][w];
                self.record_write(b, t as u32, now);
            } else {
                self.record_read(b, w, (t % 32) as u32);
            }
        }
    }

    fn addr(&self, t: usize, a: &Address) -> u64 {
        self.val(t, &a.base).wrapping_add(a.offset as u64)
    }

    /// ldmatrix and mma.sync, written from the PTX ISA's fragment
    /// definitions (independently of the code generator): every lane of a
    /// warp must take part.
    fn warp_collective(&mut self, w: usize, inst: &Inst, mask: u32) {
        {
            let lanes: Vec<usize> = (w * 32..(w * 32 + 32).min(self.threads)).collect();
            let on = mask.count_ones();
            if on == 0 {
                return;
            }
            assert_eq!(on, 32, "warp-collective {inst:?} with inactive lanes in warp {w}");
            self.steps += 32;
            match inst {
                Inst::Ldmatrix { trans, dsts, addr, .. } => {
                    // Matrix j's row i (8 halves, 16 bytes) is at lane 8j + i's address.
                    let mut mats = vec![[[0u16; 8]; 8]; dsts.len()];
                    for (j, mat) in mats.iter_mut().enumerate() {
                        for (i, row) in mat.iter_mut().enumerate() {
                            let t = lanes[8 * j + i];
                            let a = self.addr(t, addr);
                            let a = self.shared_index(t, a, 16);
                            self.race_check(t, a, 16, false);
                            let bytes = self.mem(Space::Shared, a, 16).to_vec();
                            for (e, x) in row.iter_mut().enumerate() {
                                *x = u16::from_le_bytes([bytes[2 * e], bytes[2 * e + 1]]);
                            }
                        }
                    }
                    for (l, &t) in lanes.iter().enumerate() {
                        let (g, q) = (l / 4, l % 4);
                        for (j, d) in dsts.iter().enumerate() {
                            let (lo, hi) = if *trans {
                                (mats[j][2 * q][g], mats[j][2 * q + 1][g])
                            } else {
                                (mats[j][g][2 * q], mats[j][g][2 * q + 1])
                            };
                            self.regs[t][d.0 as usize] = lo as u64 | ((hi as u64) << 16);
                        }
                    }
                }
                Inst::Mma { ab, d, a, b, c } => {
                    let cvt = |x: u64| -> f64 {
                        if *ab == "bf16" {
                            half::bf16::from_bits(x as u16).to_f64()
                        } else {
                            half::f16::from_bits(x as u16).to_f64()
                        }
                    };
                    let mut am = [[0f64; 16]; 16];
                    let mut bm = [[0f64; 8]; 16];
                    let mut cm = [[0f64; 8]; 16];
                    for (l, &t) in lanes.iter().enumerate() {
                        let (g, q) = (l / 4, l % 4);
                        for i in 0..8 {
                            let word = self.regs[t][a[i / 2].0 as usize];
                            let half = (word >> (16 * (i % 2))) & 0xFFFF;
                            let row = g + 8 * ((i >> 1) & 1);
                            let col = 2 * q + (i & 1) + 8 * (i / 4);
                            am[row][col] = cvt(half);
                        }
                        for i in 0..4 {
                            let word = self.regs[t][b[i / 2].0 as usize];
                            let half = (word >> (16 * (i % 2))) & 0xFFFF;
                            let kk = 2 * q + (i & 1) + 8 * (i / 2);
                            bm[kk][g] = cvt(half);
                        }
                        for i in 0..4 {
                            cm[g + 8 * (i / 2)][2 * q + (i & 1)] = f32b(self.regs[t][c[i].0 as usize]) as f64;
                        }
                    }
                    for (l, &t) in lanes.iter().enumerate() {
                        let (g, q) = (l / 4, l % 4);
                        for i in 0..4 {
                            let (row, col) = (g + 8 * (i / 2), 2 * q + (i & 1));
                            let mut acc = cm[row][col];
                            for kk in 0..16 {
                                acc += am[row][kk] * bm[kk][col];
                            }
                            self.regs[t][d[i].0 as usize] = bf(acc as f32);
                        }
                    }
                }
                _ => unreachable!(),
            }
        }
    }

    fn mem(&mut self, space: Space, addr: u64, len: usize) -> &mut [u8] {
        match space {
            // `addr`: an index into `shared` (`Sim::shared_index`).
            Space::Shared => {
                let a = addr as usize;
                assert!(a + len <= self.shared.len(), "shared access out of bounds: {a}+{len} > {}", self.shared.len());
                assert_eq!(a % len.min(16), 0, "misaligned shared access");
                &mut self.shared[a..a + len]
            }
            Space::Global => {
                assert!(addr >= GBASE, "global address {addr:#x} below any tensor");
                let i = ((addr - GBASE) >> 32) as usize;
                let off = ((addr - GBASE) & 0xFFFF_FFFF) as usize;
                assert!(i < self.tensors.len(), "global address {addr:#x} outside tensors");
                let t = &mut self.tensors[i];
                assert!(
                    off + len <= t.len(),
                    "global access out of bounds: tensor {i} offset {off} len {len} size {}",
                    t.len()
                );
                assert_eq!(off % len.min(16), 0, "misaligned global access");
                &mut t[off..off + len]
            }
            _ => panic!("unsupported space"),
        }
    }

    fn inst(&mut self, t: usize, inst: &Inst) {
        match inst {
            Inst::Op { op, dst, args } if op.starts_with("mapa.") => self.mapa(t, *dst, args),
            Inst::Op { op, dst, args } => {
                let a: Vec<u64> = args.iter().map(|x| self.val(t, x)).collect();
                let r = eval_op(op, &a);
                self.regs[t][dst.0 as usize] = r;
            }
            Inst::Pack { dst, lo, hi } => {
                let v = (self.regs[t][lo.0 as usize] & 0xFFFF) | ((self.regs[t][hi.0 as usize] & 0xFFFF) << 16);
                self.regs[t][dst.0 as usize] = v;
            }
            Inst::Unpack { lo, hi, src } => {
                let v = self.regs[t][src.0 as usize];
                self.regs[t][lo.0 as usize] = v & 0xFFFF;
                self.regs[t][hi.0 as usize] = (v >> 16) & 0xFFFF;
            }
            Inst::LdParam { dst, name, .. } => {
                self.regs[t][dst.0 as usize] = *self.params.get(name).unwrap_or_else(|| panic!("param {name} not set"));
            }
            Inst::Ld { space, ty, dsts, addr, .. } => {
                let size = ty_size(ty);
                let mut base = self.addr(t, addr);
                let n = dsts.len();
                if *space == Space::Shared {
                    base = self.shared_index(t, base, size * n);
                    self.check_landed(t, base, size * n, "reads");
                    self.race_check(t, base, size * n, false);
                }
                let bytes = self.mem(*space, base, size * n).to_vec();
                for (e, d) in dsts.iter().enumerate() {
                    let mut v = 0u64;
                    for b in 0..size {
                        v |= (bytes[e * size + b] as u64) << (8 * b);
                    }
                    if *ty == "s32" {
                        v = v as u32 as u64;
                    }
                    self.regs[t][d.0 as usize] = v;
                }
            }
            Inst::St { space, ty, srcs, addr, .. } => {
                let size = ty_size(ty);
                let mut base = self.addr(t, addr);
                let vals: Vec<u64> = srcs.iter().map(|s| self.val(t, s)).collect();
                if *space == Space::Shared {
                    base = self.shared_index(t, base, size * vals.len());
                }
                let m = self.mem(*space, base, size * vals.len());
                let _ = m;
                if *space == Space::Shared {
                    self.check_landed(t, base, size * vals.len(), "writes");
                    self.race_check(t, base, size * vals.len(), true);
                    self.note_generic_write(t, base as usize, size * vals.len());
                }
                let m = self.mem(*space, base, size * vals.len());
                for (e, v) in vals.iter().enumerate() {
                    for b in 0..size {
                        m[e * size + b] = (v >> (8 * b)) as u8;
                    }
                }
            }
            Inst::AtomAdd { space, ty, dst, addr, src } => {
                let size = ty_size(ty);
                let mut base = self.addr(t, addr);
                if *space == Space::Shared {
                    base = self.shared_index(t, base, size);
                }
                let x = self.val(t, src);
                let m = self.mem(*space, base, size);
                let mut old = 0u64;
                for b in 0..size {
                    old |= (m[b] as u64) << (8 * b);
                }
                let new = match *ty {
                    "f32" => bf(f32b(old) + f32b(x)),
                    "s32" | "u32" => (old as u32).wrapping_add(x as u32) as u64,
                    "u64" => old.wrapping_add(x),
                    "f16" => half::f16::from_f32(h2f(old) + h2f(x)).to_bits() as u64,
                    "bf16" => half::bf16::from_f32(bh2f(old) + bh2f(x)).to_bits() as u64,
                    _ => panic!("atom type {ty}"),
                };
                for b in 0..size {
                    m[b] = (new >> (8 * b)) as u8;
                }
                self.regs[t][dst.0 as usize] = old;
            }
            Inst::CpAsync { bytes, dst, src, src_bytes, .. } => {
                let bytes = *bytes as usize;
                assert!(matches!(bytes, 4 | 8 | 16), "cp.async of {bytes} bytes");
                let n = self.val(t, src_bytes) as u32 as usize;
                assert!(n <= bytes, "cp.async src_bytes {n} > {bytes}");
                let d = self.own_shared(t, self.addr(t, dst));
                assert!(d + bytes <= self.smem, "cp.async to shared out of bounds: {d}+{bytes} > {}", self.smem);
                assert_eq!(d % bytes, 0, "misaligned cp.async destination {d}");
                let d = self.sbase(self.block_of(t)) + d;
                let g = self.addr(t, src);
                let mut data = vec![0u8; bytes];
                if n > 0 {
                    assert_eq!(g % bytes as u64, 0, "misaligned cp.async source {g:#x}");
                    assert!(g >= GBASE, "cp.async source {g:#x} below any tensor");
                    let i = ((g - GBASE) >> 32) as usize;
                    let off = ((g - GBASE) & 0xFFFF_FFFF) as usize;
                    assert!(i < self.tensors.len(), "cp.async source {g:#x} outside tensors");
                    let tn = &self.tensors[i];
                    assert!(
                        off + n <= tn.len(),
                        "cp.async reads out of bounds: tensor {i} offset {off} len {n} size {}",
                        tn.len()
                    );
                    data[..n].copy_from_slice(&tn[off..off + n]);
                }
                // The write may land any time from now: it must not race with
                // earlier accesses by other threads, nor with another copy.
                self.check_landed(t, d as u64, bytes, "issues a cp.async to");
                self.race_check(t, d as u64, bytes, true);
                for b in d..d + bytes {
                    self.async_owner[b] = t;
                }
                self.async_open[t].push((d, data));
                self.cp_async_count += 1;
            }
            Inst::CpAsyncCommit => {
                let g = std::mem::take(&mut self.async_open[t]);
                self.async_groups[t].push(g);
            }
            Inst::CpAsyncWait { pending } => {
                while self.async_groups[t].len() > *pending as usize {
                    let g = self.async_groups[t].remove(0);
                    for (d, data) in g {
                        for b in d..d + data.len() {
                            self.async_owner[b] = usize::MAX;
                        }
                        self.race_check(t, d as u64, data.len(), true);
                        self.note_generic_write(t, d, data.len());
                        self.shared[d..d + data.len()].copy_from_slice(&data);
                    }
                }
            }
            Inst::ShflBfly { .. }
            | Inst::WarpBroadcast { .. }
            | Inst::BarSync
            | Inst::NamedBarSync { .. }
            | Inst::BarRedOr { .. }
            | Inst::Exit
            | Inst::ClusterArrive
            | Inst::ClusterWait
            | Inst::MbarWait { .. }
            | Inst::Ldmatrix { .. }
            | Inst::Mma { .. } => unreachable!("{inst:?} is run per warp"),
            other => self.hopper_inst(t, other),
        }
    }
}

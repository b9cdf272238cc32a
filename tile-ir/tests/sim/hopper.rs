//! Simulator semantics of the Hopper instructions, written from the PTX ISA
//! (not from `tile_ir::hopper`'s encoders, which the tests check against it).
//!
//! - mbarrier: `init(count)` sets the expected arrivals, phase 0, no
//!   transaction bytes; `arrive` decrements the pending arrivals;
//!   `expect_tx(b)` adds `b` pending bytes, then arrives; a TMA load's
//!   completion subtracts its box bytes. The phase completes when both reach
//!   zero: the phase number increments and the arrivals reset.
//!   `try_wait.parity(P)` succeeds when the current phase's parity differs
//!   from `P` (the phase with parity `P` is the completed one). Use of a
//!   barrier by another thread than its initializer, not ordered after the
//!   init (a `bar.sync`; from another block of a cluster, the cluster
//!   barrier), fails the test. Memory ordering (PTX memory
//!   model): `arrive` releases (the barrier accumulates the arriving warp's
//!   clock), a successful `try_wait` acquires every arrival up to the phase
//!   it saw complete (arrivals are read-modify-writes of the barrier). The
//!   tx count may go negative (bytes completing before the `expect_tx`);
//!   the phase still completes only at 0 arrivals and 0 bytes pending.
//! - Clusters (see `mod.rs`): `mapa.shared::cluster.u32 d, a, r` is
//!   `(r + 1) · CLUSTER_WINDOW + a` (a rank outside the cluster fails);
//!   `mbarrier.arrive.release.cta.shared::cluster` on such an address
//!   (or a `.shared::cta` one: the own block) is an arrival with release
//!   semantics on that block's barrier. Unmodeled: `fence.mbarrier_init`
//!   (the cluster barrier's release/acquire orders the init here), the
//!   `.relaxed` cluster arrive.
//! - TMA load: the box at the coordinates (innermost first, signed) is read
//!   from the tensor at issue, elements outside the tensor are zero; it is
//!   laid out densely (innermost fastest) from the 128-byte aligned
//!   destination, with the swizzle applied to the shared address (bits
//!   `[4, 4+b)` ^= bits `[7, 7+b)`); it lands, and completes `box bytes` on
//!   its mbarrier, only when a wait on that mbarrier needs it. Reading the
//!   bytes before fails the test; so does reading them afterwards from a
//!   warp that has not waited on (acquired) a phase of that mbarrier since,
//!   directly or through other synchronization (the landed bytes are
//!   written by the mbarrier's clock slot). At issue the destination must
//!   be ordered after every earlier access of it and no in-flight wgmma may
//!   read it. With `.multicast::cluster` and a `ctaMask` (bits of ranks of
//!   the cluster, at least one) the box is one such load per block of the
//!   mask: an async-proxy write at `dst`'s offset in that block, completing
//!   its box bytes on the mbarrier at `mbar`'s offset there, ordered by a
//!   wait on that block's phase; each destination is checked at issue as
//!   above, against the issuing thread's clock. Failing the test: a
//!   remote arrival or a multicast to a block all of whose threads have
//!   exited, and a block exiting while a TMA load to it is in flight (the
//!   hardware faults: "remote access to an exited CTA"); a remote arrival
//!   or multicast on a peer's barrier not initialized, or whose init is not
//!   ordered before it (a `barrier.cluster` arrive and wait after the init).
//! - TMA store: the box is read from shared memory (same layout) at issue
//!   and written to the in-bounds elements; writing the shared source before
//!   `cp.async.bulk.wait_group.read` retires its group fails the test, and
//!   so does a source byte written through the generic proxy by a thread
//!   that has not executed `fence.proxy.async` since (as for wgmma).
//! - wgmma (per warpgroup of 128 threads, all active): operands from
//!   descriptors are located by the canonical layouts (K-major: row `r`,
//!   k at `start + (r/8)·SBO + (r%8)·W + 2k` when swizzled with span `W`,
//!   `start + (r/8)·SBO + (r%8)·16 + (k/8)·LBO + 2(k%8)` when not; MN-major
//!   swizzled: `start + (mn / (W/2))·LBO + 2(mn % (W/2)) + (k/8)·SBO + (k%8)·W`),
//!   then swizzled like TMA. Results stay pending (the accumulator registers
//!   read as NaN) until `wgmma.wait_group` retires their group; a wgmma
//!   reading bytes whose write not all four warps of the warpgroup are
//!   ordered after (a barrier, an mbarrier wait) fails, and
//!   so does one reading bytes written through the generic proxy (`st.shared`,
//!   a landed `cp.async`) by a thread that has not executed
//!   `fence.proxy.async` since that write (TMA writes are async-proxy
//!   writes and need none). The bytes a wgmma reads count as read by the
//!   warpgroup's four warps, at issue and again when `wgmma.wait_group`
//!   retires it (a later write must be ordered after that), and a write to
//!   them before the retirement fails, barrier or not; so does a thread's
//!   write to a register a pending wgmma writes (its accumulator) or reads
//!   (its A operand from registers). The warpgroup's warps
//!   meet at every wgmma instruction (and at `setmaxnreg`), which runs once
//!   for the 128 threads. Unmodeled: the base-offset field (must be 0),
//!   MN-major without swizzle, the `wgmma.fence` requirement, and whether
//!   the fence came before or after the barrier.

#![allow(clippy::needless_range_loop, clippy::manual_is_multiple_of)]

use super::*;

/// The owner marker of shared bytes a TMA load will write.
pub const TMA_OWNER: usize = usize::MAX - 2;
/// Generic addresses of tensor maps: `TMAP_BASE + index`.
const TMAP_BASE: u64 = 0xF000_0000_0000_0000;
/// The simulator's `.shared::cluster` window: `mapa` of shared byte `a` in
/// the block of rank `r` is `(r + 1) · CLUSTER_WINDOW + a`; an address
/// below it is the `.shared::cta` address of the thread's own block.
pub const CLUSTER_WINDOW: u64 = 1 << 24;

/// A tensor map as `cuTensorMapEncodeTiled` describes it.
#[derive(Clone, Debug)]
pub struct SimTensorMap {
    /// The tensor (index into `Sim::tensors`).
    pub tensor: usize,
    pub elem_bytes: usize,
    /// Extents, innermost first.
    pub dims: Vec<u64>,
    /// Byte strides of dims 1.. (dim 0 is contiguous).
    pub strides: Vec<u64>,
    /// Box extents, innermost first.
    pub boxdim: Vec<u32>,
    /// Swizzle span in bytes: 0, 32, 64 or 128.
    pub swizzle: u32,
}

#[derive(Clone, Debug)]
pub struct MbarState {
    pub expected: u32,
    pub pending: u32,
    pub tx: i64,
    pub phase: u64,
    init_thread: usize,
    init_clock: u32,
    /// The vector-clock slot of the TMA bytes its phases complete.
    slot: usize,
    /// The join of the clocks of all arrivals so far, and of those up to
    /// the last completed phase (what a successful wait acquires).
    arrive_vc: Vec<u32>,
    pub(super) done_vc: Vec<u32>,
}

/// A TMA load in flight to one block (a multicast has one per destination):
/// its mbarrier and bytes as indices into `Sim::shared`.
struct TmaInFlight {
    mbar: usize,
    dst: usize,
    bytes: Vec<(usize, u8)>,
    box_bytes: i64,
    /// The destination block (its rank).
    block: usize,
}

#[derive(Default)]
pub struct HopperState {
    pub tensor_maps: Vec<(String, SimTensorMap)>,
    /// By index into `Sim::shared` (block `r`'s at `r · sstride +` its address).
    pub mbarriers: HashMap<usize, MbarState>,
    /// Per mbarrier clock slot (from the first after the warps'): the
    /// mbarrier's address, and the slot's clock (one tick per landed load).
    pub(super) slot_mbar: Vec<usize>,
    slot_clock: Vec<u32>,
    tma: Vec<TmaInFlight>,
    /// Per thread: shared ranges of bulk stores not yet committed, and
    /// committed groups (oldest first).
    bulk_open: Vec<Vec<(usize, usize)>>,
    bulk_groups: Vec<Vec<Vec<(usize, usize)>>>,
    /// Per warpgroup: the open wgmma results and the committed groups;
    /// each result is (thread, register, value).
    wg_open: Vec<Vec<(usize, u32, u64)>>,
    wg_groups: Vec<Vec<Vec<(usize, u32, u64)>>>,
    /// Per warpgroup: commits and retirements so far (group `i` is the
    /// `i`-th committed), and per (thread, register) the latest pending
    /// result with its group's number.
    wg_committed: Vec<u64>,
    wg_retired: Vec<u64>,
    wg_latest: Vec<HashMap<(usize, u32), (u64, u64)>>,
    /// Per warpgroup: the shared bytes its open and committed wgmmas read
    /// (the operands are read asynchronously until `wgmma.wait_group`
    /// retires the group), parallel to `wg_open` / `wg_groups`.
    wg_reads_open: Vec<Vec<usize>>,
    wg_reads_groups: Vec<Vec<Vec<usize>>>,
    /// Per warpgroup: the registers its open and committed wgmmas read as
    /// A (thread, register, the value at issue), parallel to `wg_open` /
    /// `wg_groups`: the hardware may read them until the group retires.
    wg_a_open: Vec<Vec<(usize, u32, u64)>>,
    wg_a_groups: Vec<Vec<Vec<(usize, u32, u64)>>>,
    /// Per shared byte: how many in-flight wgmmas read it.
    async_reads: Vec<u32>,
    /// Per shared byte: the thread whose generic-proxy write is the latest
    /// one and that thread's count of `fence.proxy.async` at the write
    /// (`usize::MAX`: none, or an async-proxy write).
    generic_writes: Vec<(usize, u64)>,
    /// Per thread: `fence.proxy.async` executed so far.
    proxy_fences: Vec<u64>,
    /// Counters for tests.
    pub tma_loads: u64,
    pub wgmmas: u64,
}

impl HopperState {
    /// TMA loads in flight that complete on the mbarrier at `mbar`.
    pub(super) fn tma_in_flight(&self, mbar: usize) -> usize {
        self.tma.iter().filter(|x| x.mbar == mbar).count()
    }
}

fn swizzle_addr(a: usize, span: u32) -> usize {
    if span == 0 {
        return a;
    }
    let mask = (span as usize / 16) - 1;
    a ^ (((a >> 7) & mask) << 4)
}

/// The NaN the accumulator registers of a pending wgmma read as.
const PENDING_NAN: u64 = 0x7FC0_DEAD;

impl<'f> Sim<'f> {
    /// Registers the tensor map passed as kernel parameter `param`.
    pub fn add_tensor_map(&mut self, param: &str, map: SimTensorMap) {
        self.hopper.tensor_maps.push((param.to_string(), map));
    }

    /// The state of the mbarrier at shared byte `addr` (after a run; of
    /// block 0 of the last cluster in a cluster).
    pub fn mbarrier(&self, addr: usize) -> Option<&MbarState> {
        self.mbarrier_in(0, addr)
    }

    /// The state of the mbarrier at shared byte `addr` of the last
    /// cluster's block of rank `block` (after a run).
    pub fn mbarrier_in(&self, block: usize, addr: usize) -> Option<&MbarState> {
        self.hopper.mbarriers.get(&(self.sbase(block) + addr))
    }

    pub(super) fn hopper_block_start(&mut self) {
        let h = &mut self.hopper;
        h.mbarriers.clear();
        h.slot_mbar.clear();
        h.slot_clock = vec![0; warps::MAX_MBARRIERS * self.nblocks];
        h.tma.clear();
        h.bulk_open = vec![vec![]; self.threads];
        h.bulk_groups = vec![vec![]; self.threads];
        let wgs = self.threads.div_ceil(128);
        h.wg_open = vec![vec![]; wgs];
        h.wg_groups = vec![vec![]; wgs];
        h.wg_committed = vec![0; wgs];
        h.wg_retired = vec![0; wgs];
        h.wg_latest = vec![HashMap::new(); wgs];
        h.wg_reads_open = vec![vec![]; wgs];
        h.wg_reads_groups = vec![vec![]; wgs];
        h.wg_a_open = vec![vec![]; wgs];
        h.wg_a_groups = vec![vec![]; wgs];
        h.async_reads = vec![0; self.shared.len()];
        h.generic_writes = vec![(usize::MAX, 0); self.shared.len()];
        h.proxy_fences = vec![0; self.threads];
    }

    /// Fails when shared bytes are written while an in-flight wgmma reads them.
    pub(super) fn check_no_wgmma_reads(&self, addr: usize, len: usize) {
        for b in addr..addr + len {
            assert!(
                self.hopper.async_reads[b] == 0,
                "shared byte {b} written while a wgmma that reads it is in flight (before its wgmma.wait_group)"
            );
        }
    }

    /// Records a generic-proxy write of shared bytes by thread `t`.
    pub(super) fn note_generic_write(&mut self, t: usize, addr: usize, len: usize) {
        let fences = self.hopper.proxy_fences[t];
        for b in addr..addr + len {
            self.hopper.generic_writes[b] = (t, fences);
        }
    }

    pub(super) fn hopper_block_end(&mut self) {
        assert!(
            self.hopper.tma.is_empty(),
            "block exits with {} TMA loads that no mbarrier wait completed",
            self.hopper.tma.len()
        );
        for (w, (o, g)) in self.hopper.wg_open.iter().zip(&self.hopper.wg_groups).enumerate() {
            assert!(o.is_empty() && g.is_empty(), "warpgroup {w} exits with wgmmas not retired by wgmma.wait_group");
        }
        // Bulk stores were performed at issue; an unwaited group only
        // matters for the shared source, which no one writes any more.
    }

    /// Every thread of block `r` of a cluster has exited: no TMA load may
    /// still be landing in its shared memory (the hardware faults).
    pub(super) fn hopper_block_exit(&mut self, r: usize) {
        let n = self.hopper.tma.iter().filter(|x| x.block == r).count();
        if n > 0 {
            let x = self.hopper.tma.iter().find(|x| x.block == r).unwrap();
            panic!(
                "block {r} exits (all its threads) while {n} TMA loads to its shared memory are in flight (the first to shared byte {}, completing on the mbarrier at {}; no wait of the block completed them): remote access to an exited CTA",
                self.byte_name(x.dst),
                self.byte_name(x.mbar)
            );
        }
    }

    /// Fails when a thread writes shared bytes a pending bulk store reads.
    pub(super) fn check_bulk_source(&self, t: usize, addr: u64, len: usize) {
        let (a, e) = (addr as usize, addr as usize + len);
        for u in 0..self.hopper.bulk_open.len() {
            let open = self.hopper.bulk_open[u].iter();
            let groups = self.hopper.bulk_groups[u].iter().flatten();
            for &(s, l) in open.chain(groups) {
                assert!(
                    e <= s || a >= s + l,
                    "thread {t} writes shared bytes {a}..{e} that thread {u}'s TMA store still reads (no cp.async.bulk.wait_group.read)"
                );
            }
        }
    }

    /// Thread `t`'s use (`what`) of the mbarrier at its `.shared::cta`
    /// address `a`: its index into `shared` (see [`Sim::mbar_in`]).
    pub(super) fn mbar_at(&mut self, t: usize, a: &Address, what: &str) -> usize {
        let addr = self.own_shared(t, self.addr(t, a));
        self.mbar_in(t, self.block_of(t), addr, what)
    }

    /// Thread `t`'s use (`what`) of the mbarrier at shared byte `addr` of
    /// the block of rank `r` (its own, or a peer's through a
    /// `.shared::cluster` address): a peer must not have exited, the
    /// barrier must be initialized and its init ordered before the use (a
    /// `bar.sync` in the block, the cluster barrier across blocks). Returns
    /// its index into `shared`.
    pub(super) fn mbar_in(&mut self, t: usize, r: usize, addr: usize, what: &str) -> usize {
        let remote = r != self.block_of(t);
        assert!(
            !remote || !self.block_done[r],
            "{} {what} the mbarrier at {addr} of block {r}, all of whose threads have exited: remote access to an exited CTA (the hardware faults)",
            self.thread_name(t)
        );
        assert_eq!(addr % 8, 0, "mbarrier at misaligned shared byte {addr}");
        assert!(addr + 8 <= self.smem, "mbarrier at {addr} outside shared memory");
        let g = self.sbase(r) + addr;
        let Some(m) = self.hopper.mbarriers.get(&g) else {
            panic!(
                "{} {what} an uninitialized mbarrier at {}{}",
                self.thread_name(t),
                self.byte_name(g),
                if remote {
                    " (a use in another block before its mbarrier.init, or not ordered after it: no cluster barrier after the init)"
                } else {
                    ""
                }
            )
        };
        if !(m.init_thread == t || self.ordered(t / 32, m.init_thread as u32, m.init_clock)) {
            let between = if self.block_of(m.init_thread) == self.block_of(t) {
                "no bar.sync in between"
            } else {
                "no cluster barrier in between (barrier.cluster.arrive.release and barrier.cluster.wait.acquire after the init)"
            };
            panic!(
                "{} {what} the mbarrier at {} initialized by {} with {between}",
                self.thread_name(t),
                self.byte_name(g),
                self.thread_name(m.init_thread)
            );
        }
        g
    }

    /// A `.shared::cluster` address used by thread `t`: (the block's rank,
    /// the shared byte in it); a `.shared::cta` one is of `t`'s block.
    pub(super) fn cluster_addr(&self, t: usize, v: u64) -> (usize, usize) {
        let v = v as u32 as u64;
        if v < CLUSTER_WINDOW {
            return (self.block_of(t), v as usize);
        }
        let r = (v / CLUSTER_WINDOW - 1) as usize;
        assert!(
            r < self.nblocks,
            "{} uses the .shared::cluster address {v:#x}, in the block of rank {r}, outside its cluster of {} blocks",
            self.thread_name(t),
            self.nblocks
        );
        (r, (v % CLUSTER_WINDOW) as usize)
    }

    /// `mapa.shared::cluster.u32 dst, addr, rank`: the `.shared::cluster`
    /// address of `addr`'s byte in the block of rank `rank`.
    pub(super) fn mapa(&mut self, t: usize, dst: Reg, args: &[Operand]) {
        assert_eq!(args.len(), 2, "mapa takes an address and a rank");
        let (v, r) = (self.val(t, &args[0]), self.val(t, &args[1]) as u32 as usize);
        assert!(
            r < self.nblocks,
            "{} maps a shared address to the block of rank {r}, outside its cluster of {} blocks (mapa)",
            self.thread_name(t),
            self.nblocks
        );
        let (_, a) = self.cluster_addr(t, v);
        self.regs[t][dst.0 as usize] = (r as u64 + 1) * CLUSTER_WINDOW + a as u64;
    }

    /// Arrives (`arrivals`, by thread `by`: a release of its warp's clock)
    /// and adds `tx` transaction bytes; completes the phase when both are done.
    fn mbar_arrive(&mut self, addr: usize, tx: i64, arrivals: u32, by: Option<usize>) {
        let m = self.hopper.mbarriers.get_mut(&addr).unwrap();
        if let Some(t) = by {
            for (x, v) in m.arrive_vc.iter_mut().zip(&self.vc[t / 32]) {
                *x = (*x).max(*v);
            }
            self.released = true;
        }
        m.tx += tx;
        if m.pending < arrivals {
            let phase = m.phase;
            panic!("arrive on the mbarrier at {} with no pending arrivals in phase {phase}", self.byte_name(addr));
        }
        let m = self.hopper.mbarriers.get_mut(&addr).unwrap();
        m.pending -= arrivals;
        if m.pending == 0 && m.tx == 0 {
            m.phase += 1;
            m.pending = m.expected;
            // Arrivals are read-modify-writes of the barrier: a wait that
            // sees this phase complete is ordered after every earlier one.
            m.done_vc.clone_from(&m.arrive_vc);
        }
    }

    /// Lands in-flight TMA loads on `mbar` (oldest first) until the phase
    /// of parity `parity` has completed; false when it never does.
    pub(super) fn mbar_wait(&mut self, mbar: usize, parity: u64) -> bool {
        loop {
            if (self.hopper.mbarriers[&mbar].phase & 1) != (parity & 1) {
                return true;
            }
            let Some(i) = self.hopper.tma.iter().position(|x| x.mbar == mbar) else {
                return false;
            };
            let x = self.hopper.tma.remove(i);
            // Written by the mbarrier's slot: ordered for whoever acquires the phase.
            let slot = self.hopper.mbarriers[&mbar].slot;
            let k = slot - self.nwarps;
            self.hopper.slot_clock[k] += 1;
            let clock = self.hopper.slot_clock[k];
            for &(b, v) in &x.bytes {
                self.shared[b] = v;
                self.async_owner[b] = usize::MAX;
                assert!(
                    self.hopper.async_reads[b] == 0,
                    "TMA lands on shared byte {} while a wgmma that reads it is in flight",
                    self.byte_name(b)
                );
                self.record_write(b, AGENT | slot as u32, clock);
                self.hopper.generic_writes[b] = (usize::MAX, 0);
            }
            let _ = x.dst;
            let m = self.hopper.mbarriers.get_mut(&mbar).unwrap();
            m.arrive_vc[slot] = m.arrive_vc[slot].max(clock);
            self.mbar_arrive(mbar, -x.box_bytes, 0, None);
        }
    }

    fn tensor_map(&self, t: usize, o: &Operand) -> SimTensorMap {
        let v = self.val(t, o);
        assert!(
            v >= TMAP_BASE,
            "TMA tensor-map operand {v:#x} is not a tensor map address (cvta.param of a tensor-map parameter)"
        );
        self.hopper.tensor_maps[(v - TMAP_BASE) as usize].1.clone()
    }

    /// The box elements of `map` at `coords`: (shared byte offset from the
    /// box start before swizzling, global byte offset or None when outside).
    fn box_elements(map: &SimTensorMap, coords: &[i64]) -> Vec<(usize, Option<usize>)> {
        let rank = map.dims.len();
        assert_eq!(coords.len(), rank, "TMA with {} coordinates on a rank-{rank} tensor map", coords.len());
        let total: usize = map.boxdim.iter().map(|&b| b as usize).product();
        let mut out = Vec::with_capacity(total);
        for lin in 0..total {
            let mut rem = lin;
            let mut goff = 0usize;
            let mut inside = true;
            for d in 0..rank {
                let i = rem % map.boxdim[d] as usize;
                rem /= map.boxdim[d] as usize;
                let c = coords[d] + i as i64;
                if c < 0 || c >= map.dims[d] as i64 {
                    inside = false;
                } else {
                    goff += c as usize * if d == 0 { map.elem_bytes } else { map.strides[d - 1] as usize };
                }
            }
            out.push((lin * map.elem_bytes, inside.then_some(goff)));
        }
        out
    }

    fn check_box_dst(map: &SimTensorMap, dst: usize) {
        assert_eq!(dst % 128, 0, "TMA shared address {dst} must be 128-byte aligned");
        if map.swizzle > 0 {
            assert_eq!(
                map.boxdim[0] as usize * map.elem_bytes,
                map.swizzle as usize,
                "the simulator models swizzled TMA boxes whose inner extent is the swizzle span"
            );
            assert_eq!(
                dst % (8 * map.swizzle as usize),
                0,
                "swizzled TMA box at {dst}: align it to 8 rows of the span"
            );
        }
    }

    /// Runs a warpgroup-collective instruction for warpgroup `wg`'s 128 threads.
    pub(super) fn warpgroup(&mut self, wg: usize, inst: &Inst) {
        match inst {
            Inst::WgmmaFence => {}
            Inst::SetMaxNreg { inc, count } => self.setmaxnreg(wg, *inc, *count),
            Inst::WgmmaCommit => {
                let g = std::mem::take(&mut self.hopper.wg_open[wg]);
                self.hopper.wg_groups[wg].push(g);
                self.hopper.wg_committed[wg] += 1;
                let r = std::mem::take(&mut self.hopper.wg_reads_open[wg]);
                self.hopper.wg_reads_groups[wg].push(r);
                let a = std::mem::take(&mut self.hopper.wg_a_open[wg]);
                self.hopper.wg_a_groups[wg].push(a);
            }
            Inst::WgmmaWait { pending } => {
                while self.hopper.wg_groups[wg].len() > *pending as usize {
                    let g = self.hopper.wg_groups[wg].remove(0);
                    // The operands were read until now, by the warpgroup.
                    for b in self.hopper.wg_reads_groups[wg].remove(0) {
                        self.hopper.async_reads[b] -= 1;
                        for w in 4 * wg..(4 * wg + 4).min(self.nwarps) {
                            self.record_read(b, w, MANY);
                        }
                    }
                    // Registers it read as A were left alone until now.
                    for (t, r, v) in self.hopper.wg_a_groups[wg].remove(0) {
                        assert_eq!(
                            self.regs[t][r as usize], v,
                            "thread {t} wrote register {r}, an A operand of a pending wgmma, before the wgmma.wait_group that retires it"
                        );
                    }
                    let seq = self.hopper.wg_retired[wg];
                    self.hopper.wg_retired[wg] += 1;
                    for (t, r, _) in g {
                        // The group's last result, unless a later pending wgmma writes the register too.
                        if let Some(&(q, v)) = self.hopper.wg_latest[wg].get(&(t, r)) {
                            if q == seq {
                                // Nothing wrote the accumulator while it was pending.
                                assert_eq!(
                                    self.regs[t][r as usize], PENDING_NAN,
                                    "thread {t} wrote register {r}, the accumulator of a pending wgmma, before the wgmma.wait_group that retires it"
                                );
                                self.hopper.wg_latest[wg].remove(&(t, r));
                                self.regs[t][r as usize] = v;
                            }
                        }
                    }
                }
            }
            Inst::Wgmma { n, ab, d, a, b_desc, scale_d, neg_a, neg_b, trans_a, trans_b, .. } => {
                self.wgmma(wg, *n, ab, d, a, b_desc, scale_d, *neg_a, *neg_b, *trans_a, *trans_b)
            }
            _ => unreachable!(),
        }
    }

    /// The shared byte address of element (mn, k) of a descriptor operand.
    fn desc_element(&self, desc: u64, mn: usize, k: usize, mn_major: bool) -> usize {
        let start = ((desc & 0x3FFF) << 4) as usize;
        let lbo = (((desc >> 16) & 0x3FFF) << 4) as usize;
        let sbo = (((desc >> 32) & 0x3FFF) << 4) as usize;
        let base_offset = (desc >> 49) & 7;
        assert_eq!(base_offset, 0, "the simulator models descriptors with base offset 0");
        let span = match desc >> 62 {
            0 => 0,
            1 => 128,
            2 => 64,
            _ => 32,
        };
        let logical = match (mn_major, span) {
            (false, 0) => start + (mn / 8) * sbo + (mn % 8) * 16 + (k / 8) * lbo + 2 * (k % 8),
            (false, w) => start + (mn / 8) * sbo + (mn % 8) * w + 2 * k,
            (true, 0) => panic!("the simulator does not model MN-major operands without swizzle"),
            (true, w) => start + (mn / (w / 2)) * lbo + 2 * (mn % (w / 2)) + (k / 8) * sbo + (k % 8) * w,
        };
        swizzle_addr(logical, span as u32)
    }

    fn read_operand(
        &mut self,
        wg: usize,
        desc: u64,
        rows: usize,
        mn_major: bool,
        cvt: &dyn Fn(u64) -> f64,
    ) -> Vec<Vec<f64>> {
        let mut m = vec![vec![0f64; 16]; rows];
        // The warpgroup's block's shared memory.
        let base = self.sbase(self.block_of(128 * wg));
        for (mn, row) in m.iter_mut().enumerate() {
            for (k, x) in row.iter_mut().enumerate() {
                let a = self.desc_element(desc, mn, k, mn_major);
                assert!(a + 2 <= self.smem, "wgmma (warpgroup {wg}) reads shared byte {a} outside shared memory");
                let a = base + a;
                for b in a..a + 2 {
                    assert!(
                        self.async_owner[b] == usize::MAX,
                        "wgmma reads shared byte {b} whose async copy has not landed"
                    );
                    let sh = self.shadow[b];
                    for w in 4 * wg..(4 * wg + 4).min(self.nwarps) {
                        assert!(
                            sh.writer == NONE || self.ordered(w, sh.writer, sh.clock),
                            "wgmma (warpgroup {wg}) reads shared byte {b} written by {} that warp {w} is not ordered after (no bar.sync or mbarrier wait since)",
                            self.writer_name(sh.writer)
                        );
                    }
                    let (gw, fences) = self.hopper.generic_writes[b];
                    assert!(
                        gw == usize::MAX || self.hopper.proxy_fences[gw] > fences,
                        "wgmma reads shared byte {b} written through the generic proxy by thread {gw}, which has not executed fence.proxy.async since"
                    );
                    // Read by the whole warpgroup, asynchronously.
                    for w in 4 * wg..(4 * wg + 4).min(self.nwarps) {
                        self.record_read(b, w, MANY);
                    }
                    self.hopper.async_reads[b] += 1;
                    self.hopper.wg_reads_open[wg].push(b);
                }
                *x = cvt(u16::from_le_bytes([self.shared[a], self.shared[a + 1]]) as u64);
            }
        }
        m
    }

    /// The latest value of thread `t`'s register `r`, pending or not.
    fn acc_value(&self, wg: usize, t: usize, r: u32) -> u64 {
        self.hopper.wg_latest[wg].get(&(t, r)).map(|x| x.1).unwrap_or(self.regs[t][r as usize])
    }

    #[allow(clippy::too_many_arguments)]
    fn wgmma(
        &mut self,
        wg: usize,
        n: u32,
        ab: &str,
        d: &[Reg],
        a: &WgmmaA,
        b_desc: &Operand,
        scale_d: &Operand,
        neg_a: bool,
        neg_b: bool,
        trans_a: bool,
        trans_b: bool,
    ) {
        let n = n as usize;
        assert!((8..=256).contains(&n) && n % 8 == 0, "wgmma n = {n}");
        assert_eq!(d.len(), n / 2, "wgmma m64n{n}k16 needs {} accumulator registers", n / 2);
        let is_bf16 = ab == "bf16";
        let cvt = move |x: u64| -> f64 {
            if is_bf16 {
                half::bf16::from_bits(x as u16).to_f64()
            } else {
                half::f16::from_bits(x as u16).to_f64()
            }
        };
        let t0 = wg * 128;
        let uniform = |s: &Self, o: &Operand, what: &str| -> u64 {
            let v = s.val(t0, o);
            for t in t0..t0 + 128 {
                assert_eq!(s.val(t, o), v, "wgmma {what} differs between threads of warpgroup {wg}");
            }
            v
        };
        let bm = self.read_operand(wg, uniform(self, b_desc, "B descriptor"), n, trans_b, &cvt);
        let am: Vec<Vec<f64>> = match a {
            WgmmaA::Desc(o) => self.read_operand(wg, uniform(self, o, "A descriptor"), 64, trans_a, &cvt),
            WgmmaA::Regs(regs) => {
                assert!(!trans_a, "imm-trans-a applies to a descriptor A only");
                let mut m = vec![vec![0f64; 16]; 64];
                for l in 0..128 {
                    let (w, lane) = (l / 32, l % 32);
                    let (g, q) = (lane / 4, lane % 4);
                    for i in 0..8 {
                        let word = self.regs[t0 + l][regs[i / 2].0 as usize];
                        if i % 2 == 0 {
                            self.hopper.wg_a_open[wg].push((t0 + l, regs[i / 2].0, word));
                        }
                        let h = (word >> (16 * (i % 2))) & 0xFFFF;
                        m[16 * w + g + 8 * ((i >> 1) & 1)][2 * q + (i & 1) + 8 * (i >> 2)] = cvt(h);
                    }
                }
                m
            }
        };
        let keep = uniform(self, scale_d, "scale-d") != 0;
        let (sa, sb) = (if neg_a { -1.0 } else { 1.0 }, if neg_b { -1.0 } else { 1.0 });
        for l in 0..128 {
            let t = t0 + l;
            let (w, lane) = (l / 32, l % 32);
            let (g, q) = (lane / 4, lane % 4);
            for (i, r) in d.iter().enumerate() {
                let row = 16 * w + g + 8 * ((i >> 1) & 1);
                let col = 8 * (i >> 2) + 2 * q + (i & 1);
                let mut acc = if keep { f32b(self.acc_value(wg, t, r.0)) as f64 } else { 0.0 };
                for k in 0..16 {
                    acc += sa * am[row][k] * sb * bm[col][k];
                }
                self.hopper.wg_open[wg].push((t, r.0, bf(acc as f32)));
                self.hopper.wg_latest[wg].insert((t, r.0), (self.hopper.wg_committed[wg], bf(acc as f32)));
                self.regs[t][r.0 as usize] = PENDING_NAN;
            }
        }
        self.hopper.wgmmas += 1;
    }

    /// Per-thread Hopper instructions.
    pub(super) fn hopper_inst(&mut self, t: usize, inst: &Inst) {
        match inst {
            Inst::MbarInit { addr, count } => {
                let a = self.own_shared(t, self.addr(t, addr));
                assert_eq!(a % 8, 0, "mbarrier.init at misaligned shared byte {a}");
                assert!(a + 8 <= self.smem, "mbarrier.init at {a} outside shared memory");
                let a = self.sbase(self.block_of(t)) + a;
                self.race_check(t, a as u64, 8, true);
                let count = self.val(t, count) as u32;
                assert!(count > 0, "mbarrier.init with count 0");
                let k = match self.hopper.slot_mbar.iter().position(|&m| m == a) {
                    Some(k) => k,
                    None => {
                        self.hopper.slot_mbar.push(a);
                        self.hopper.slot_mbar.len() - 1
                    }
                };
                let most = warps::MAX_MBARRIERS * self.nblocks;
                assert!(k < most, "the simulator models at most {most} mbarriers");
                let slots = self.vc[0].len();
                let m = MbarState {
                    expected: count,
                    pending: count,
                    tx: 0,
                    phase: 0,
                    init_thread: t,
                    init_clock: self.vc[t / 32][t / 32],
                    slot: self.nwarps + k,
                    arrive_vc: vec![0; slots],
                    done_vc: vec![0; slots],
                };
                self.hopper.mbarriers.insert(a, m);
            }
            Inst::MbarArrive { addr } => {
                let a = self.mbar_at(t, addr, "arrives on");
                self.mbar_arrive(a, 0, 1, Some(t));
            }
            // A release as a local arrival; the barrier may be a peer's.
            Inst::MbarArriveCluster { addr } => {
                let v = self.val(t, addr);
                let (r, a) = self.cluster_addr(t, v);
                let a = self.mbar_in(t, r, a, "arrives on");
                self.mbar_arrive(a, 0, 1, Some(t));
            }
            Inst::MbarArriveExpectTx { addr, tx_bytes } => {
                let a = self.mbar_at(t, addr, "arrives on");
                let b = self.val(t, tx_bytes) as u32 as i64;
                self.mbar_arrive(a, b, 1, Some(t));
            }
            // No grid runs before another in the simulator: nothing to wait for.
            Inst::FenceMbarrierInit | Inst::Nanosleep { .. } | Inst::GridDepWait => {}
            // An L2 prefetch changes no memory the simulator models.
            Inst::TmaPrefetch { .. } => {}
            Inst::FenceProxyAsync => self.hopper.proxy_fences[t] += 1,
            Inst::TensorMapAddr { dst, param } => {
                let i = self
                    .hopper
                    .tensor_maps
                    .iter()
                    .position(|(n, _)| n == param)
                    .unwrap_or_else(|| panic!("no tensor map for parameter {param}"));
                self.regs[t][dst.0 as usize] = TMAP_BASE + i as u64;
            }
            Inst::TmaLoad { dst, tmap, coords, mbar, cache_hint, multicast, .. } => {
                let map = self.tensor_map(t, tmap);
                if let Some(h) = cache_hint {
                    let _ = self.val(t, h);
                }
                let (dr, d) = self.cluster_addr(t, self.addr(t, dst));
                let (mr, ma) = self.cluster_addr(t, self.addr(t, mbar));
                Self::check_box_dst(&map, d);
                let c: Vec<i64> = coords.iter().map(|o| self.val(t, o) as u32 as i32 as i64).collect();
                // The destination blocks: the mask's (at the same offsets in
                // each), or the block of the destination address.
                let dests: Vec<usize> = match multicast {
                    Some(mask) => {
                        let mask = self.val(t, mask) & 0xFFFF;
                        assert!(
                            mask != 0 && mask >> self.nblocks == 0,
                            "{} issues a TMA multicast with ctaMask {mask:#06x}: its bits must name ranks of its cluster of {} blocks",
                            self.thread_name(t),
                            self.nblocks
                        );
                        (0..self.nblocks).filter(|r| mask >> r & 1 != 0).collect()
                    }
                    None => {
                        assert_eq!(
                            dr,
                            mr,
                            "{} issues a TMA load to block {dr} completing on an mbarrier of block {mr}",
                            self.thread_name(t)
                        );
                        vec![dr]
                    }
                };
                let what = if multicast.is_some() {
                    "issues a TMA multicast completing on"
                } else {
                    "issues a TMA load completing on"
                };
                let elems = Self::box_elements(&map, &c);
                let box_bytes = (elems.len() * map.elem_bytes) as i64;
                assert!(d + box_bytes as usize <= self.smem, "TMA box {d}+{box_bytes} outside shared memory");
                // Read at issue; the shared bytes from the block's base.
                let mut local = Vec::with_capacity(box_bytes as usize);
                for (soff, g) in elems {
                    for e in 0..map.elem_bytes {
                        let v = match g {
                            Some(g) => self.tensors[map.tensor][g + e],
                            None => 0,
                        };
                        let b = swizzle_addr(d + soff + e, map.swizzle);
                        local.push((b, v));
                    }
                }
                for r in dests {
                    let m = self.mbar_in(t, r, ma, what);
                    let base = self.sbase(r);
                    let bytes: Vec<(usize, u8)> = local.iter().map(|&(b, v)| (base + b, v)).collect();
                    // An async-proxy write into block r: ordered after every
                    // earlier access of its bytes there.
                    for &(b, _) in &bytes {
                        let o = self.async_owner[b];
                        assert!(
                            o == usize::MAX,
                            "shared-memory race at byte {}: {} issues a TMA load to it that overlaps another copy to it still in flight (no wait has completed that copy's mbarrier phase)",
                            self.byte_name(b),
                            self.thread_name(t)
                        );
                        assert!(
                            self.hopper.async_reads[b] == 0,
                            "{} issues a TMA load to shared byte {} that an in-flight wgmma reads (before its wgmma.wait_group)",
                            self.thread_name(t),
                            self.byte_name(b)
                        );
                        if let Some(other) = self.unordered_access(t, b, true) {
                            panic!(
                                "shared-memory race at byte {}: {} issues a TMA load to it after {other} with no synchronization between",
                                self.byte_name(b),
                                self.thread_name(t)
                            );
                        }
                        self.async_owner[b] = TMA_OWNER;
                    }
                    self.hopper.tma.push(TmaInFlight { mbar: m, dst: base + d, bytes, box_bytes, block: r });
                }
                self.hopper.tma_loads += 1;
            }
            Inst::TmaStore { tmap, coords, src, .. } => {
                let map = self.tensor_map(t, tmap);
                let s = self.own_shared(t, self.addr(t, src));
                Self::check_box_dst(&map, s);
                assert!(s <= self.smem, "TMA store source {s} outside shared memory");
                let s = self.sbase(self.block_of(t)) + s;
                let c: Vec<i64> = coords.iter().map(|o| self.val(t, o) as u32 as i32 as i64).collect();
                let elems = Self::box_elements(&map, &c);
                let len = elems.len() * map.elem_bytes;
                self.check_landed(t, s as u64, len, "reads");
                for (soff, g) in elems {
                    for e in 0..map.elem_bytes {
                        let b = swizzle_addr(s + soff + e, map.swizzle);
                        if let Some(other) = self.unordered_access(t, b, false) {
                            panic!(
                                "TMA store by {} reads shared byte {} after {other} with no synchronization between",
                                self.thread_name(t),
                                self.byte_name(b)
                            );
                        }
                        let (gw, fences) = self.hopper.generic_writes[b];
                        assert!(
                            gw == usize::MAX || self.hopper.proxy_fences[gw] > fences,
                            "TMA store by {} reads shared byte {} written through the generic proxy by {}, which has not executed fence.proxy.async since",
                            self.thread_name(t),
                            self.byte_name(b),
                            self.thread_name(gw)
                        );
                        self.record_read(b, t / 32, (t % 32) as u32);
                        if let Some(g) = g {
                            self.tensors[map.tensor][g + e] = self.shared[b];
                        }
                    }
                }
                self.hopper.bulk_open[t].push((s, len));
            }
            Inst::BulkCommit => {
                let g = std::mem::take(&mut self.hopper.bulk_open[t]);
                self.hopper.bulk_groups[t].push(g);
            }
            Inst::BulkWaitRead { pending } => {
                while self.hopper.bulk_groups[t].len() > *pending as usize {
                    self.hopper.bulk_groups[t].remove(0);
                }
            }
            other => panic!("the simulator does not execute {other:?}"),
        }
    }
}

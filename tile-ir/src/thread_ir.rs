//! The Thread IR: what one thread executes, after layouts are fixed.
//!
//! A [`Function`] owns a register file (virtual registers of a PTX register
//! class, addressed by [`Reg`]) and a body of [`Stmt`]s: explicit
//! instructions ([`Inst`]) and structured control flow (`If`, `For`), each
//! marked uniform (every thread of the block takes the same path) or not.
//! Memory instructions name their state space and, for shared memory, the
//! [`Region`] they touch, so that passes (barrier insertion, later
//! pipelining) can reason about dependences without re-deriving addresses.
//!
//! Instructions are close to PTX on purpose: printing PTX from here is a
//! mechanical walk ([`crate::ptx`]). New hardware features (mma.sync,
//! ldmatrix, wgmma, TMA, mbarrier, setmaxnreg) become new [`Inst`]
//! variants; nothing else changes.

use std::fmt::{self, Write};

/// A PTX register class.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegClass {
    /// `.pred`: a predicate (comparisons, guards, branch conditions).
    Pred,
    /// `.b16`: 16 bits (one f16 or bf16).
    B16,
    /// `.b32`: 32 bits (i32, u32, a pair of 16-bit values).
    B32,
    /// `.b64`: 64 bits (addresses, descriptors, i64).
    B64,
    /// `.f32`: an f32.
    F32,
}

impl RegClass {
    /// The PTX name prefix and declaration type.
    pub fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B16 => "%h",
            RegClass::B32 => "%r",
            RegClass::B64 => "%rd",
            RegClass::F32 => "%f",
        }
    }
    /// The PTX type of the class's `.reg` declarations (`.pred`, `.b16`,
    /// `.b32`, `.b64`, `.f32`).
    pub fn decl_type(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
        }
    }
}

/// A virtual register: an index into [`Function::regs`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u32);

/// A PTX special register.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Special {
    /// `%tid.x`: the thread's index in its (1-D) block.
    TidX,
    /// `%ctaid.{x,y,z}` (axis 0, 1, 2): the block's index in the launched grid.
    CtaId(u8),
    /// `%nctaid.{x,y,z}`: the launched grid's extent.
    NctaId(u8),
    /// `%cluster_ctarank`: the block's rank in its thread block cluster
    /// (sm_90; 0 without a cluster).
    ClusterCtaRank,
    /// `%clock64`: the SM's cycle counter (`passes::trace`).
    Clock64,
}

/// An instruction operand: a register, an immediate, a special register or
/// a symbol's address.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A virtual register.
    Reg(Reg),
    /// An integer immediate (printed in decimal).
    Imm(i64),
    /// An f32 immediate (printed as its bit pattern, `0f3F800000`).
    F32(f32),
    /// A 16-bit immediate bit pattern (`0x3C00`).
    B16(u16),
    /// A special register (thread and block indices, grid extents).
    Special(Special),
    /// The address of a module-level or function-level symbol.
    Symbol(String),
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Operand {
        Operand::Reg(r)
    }
}

/// A PTX state space for memory instructions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Space {
    /// `.global`: device memory (tensor arguments).
    Global,
    /// `.shared`: the block's shared memory.
    Shared,
    /// `.local`: per-thread memory (local arrays, spills).
    Local,
    /// `.param`: kernel parameters.
    Param,
}

impl Space {
    /// The state space's PTX name, without the dot (`global`, `shared`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Space::Global => "global",
            Space::Shared => "shared",
            Space::Local => "local",
            Space::Param => "param",
        }
    }
}

/// A region of shared memory (a shared buffer or a compiler scratch area,
/// `id`) as touched by one collective operation (`op`): the unit of
/// dependence for barrier insertion. Accesses of one region by one operation
/// never conflict with each other (a tile op touches each element once, from
/// the thread that owns it); accesses by different operations may.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Region {
    /// The shared buffer or scratch area (numbered by the lowering).
    pub id: u32,
    /// The collective operation, numbered in program order by the lowering.
    pub op: u32,
}

/// `[base + offset]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Address {
    /// A register holding an address in the instruction's state space, or
    /// a symbol (`smem`, a local array).
    pub base: Operand,
    /// A constant byte offset added to `base`.
    pub offset: i64,
}

/// One Thread IR instruction: a PTX instruction (or a short fixed sequence,
/// like [`Inst::MbarWait`]'s loop) with typed operands. Shared-memory
/// accesses carry the [`Region`] they touch (`None` where no barrier
/// analysis is needed: compiler-private scratch ordered otherwise).
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// A register-to-register operation printed as `op dst, args..;`, where
    /// `op` carries the full PTX opcode with its modifiers and type
    /// (`add.s32`, `ex2.approx.ftz.f32`, `cvt.rzi.sat.s32.f32`, `setp.lt.s32`).
    Op {
        /// The opcode with modifiers and type.
        op: String,
        /// The destination register.
        dst: Reg,
        /// The source operands, in PTX order.
        args: Vec<Operand>,
    },
    /// `mov.b32 dst, {lo, hi};` (pack two 16-bit registers).
    Pack {
        /// The 32-bit result.
        dst: Reg,
        /// The 16-bit low half.
        lo: Reg,
        /// The 16-bit high half.
        hi: Reg,
    },
    /// `mov.b32 {lo, hi}, src;` (split a 32-bit register).
    Unpack {
        /// Receives the low 16 bits.
        lo: Reg,
        /// Receives the high 16 bits.
        hi: Reg,
        /// The 32-bit source.
        src: Reg,
    },
    /// `ld.space[.vN].ty {dsts}, [addr];`
    Ld {
        /// The state space read.
        space: Space,
        /// The PTX element type (`b32`, `f32`, `b16`, ...).
        ty: &'static str,
        /// One register per element: 1, 2 or 4 (`.v2`, `.v4`).
        dsts: Vec<Reg>,
        /// The address of the first element (aligned to the whole access).
        addr: Address,
        /// The shared region touched, for barrier insertion (`None` off shared
        /// memory).
        region: Option<Region>,
    },
    /// `ld.param.ty dst, [name];`
    LdParam {
        /// The parameter's PTX type (`u64`, `s32`, `f32`, ...).
        ty: &'static str,
        /// The destination register.
        dst: Reg,
        /// The parameter's name in [`Function::params`].
        name: String,
    },
    /// `st.space[.vN].ty [addr], {srcs};`
    St {
        /// The state space written.
        space: Space,
        /// The PTX element type.
        ty: &'static str,
        /// One operand per element: 1, 2 or 4 (`.v2`, `.v4`).
        srcs: Vec<Operand>,
        /// The address of the first element (aligned to the whole access).
        addr: Address,
        /// The shared region touched, for barrier insertion (`None` off shared
        /// memory).
        region: Option<Region>,
    },
    /// `atom.space.add[.noftz].ty dst, [addr], src;` (result unused).
    AtomAdd {
        /// The state space (global for `atomic_add`).
        space: Space,
        /// The PTX type added (`f32`, `f16`, `bf16`, `s32`, `u32`).
        ty: &'static str,
        /// Receives the old value (unused).
        dst: Reg,
        /// The element's address.
        addr: Address,
        /// The value added.
        src: Operand,
    },
    /// `shfl.sync.bfly.b32 dst, src, lane_mask, 31, 0xffffffff;`
    ShflBfly {
        /// Receives `src` of lane `lane ^ lane_mask`.
        dst: Reg,
        /// This lane's value.
        src: Reg,
        /// The XOR applied to the lane index (1..=31).
        lane_mask: u32,
    },
    /// `shfl.sync.idx.b32 dst, src, 0, 31, 0xffffffff;`: lane 0's `src`
    /// in every lane. Emitted where a value is warp-uniform by construction
    /// (the warpgroup index `tid >> 7`) so that ptxas can prove it and keep
    /// what derives from it in uniform registers (wgmma descriptors: no
    /// per-instruction vector arithmetic and `R2UR`).
    WarpBroadcast {
        /// Receives lane 0's `src`.
        dst: Reg,
        /// This lane's value.
        src: Reg,
    },
    /// `bar.sync 0;`
    BarSync,
    /// `cp.async.{ca,cg}.shared.global [dst], [src], bytes[, src_bytes];`:
    /// an asynchronous copy of `bytes` (4, 8 or 16; `.cg` only for 16) from
    /// global to shared memory, of which the first `src_bytes` come from
    /// `src` and the rest are zero-filled. The data lands in shared memory
    /// only once a `cp.async.wait_group` retires the group it was committed
    /// in; `src` is not read beyond `src_bytes`.
    CpAsync {
        /// The chunk size: 4, 8 or 16 bytes.
        bytes: u32,
        /// The shared destination (aligned to `bytes`).
        dst: Address,
        /// The global source (aligned to `bytes`).
        src: Address,
        /// How many leading bytes come from `src` (0..=`bytes`); the rest are zero.
        src_bytes: Operand,
        /// The shared region touched, for barrier insertion (`None` off shared
        /// memory).
        region: Option<Region>,
    },
    /// `cp.async.commit_group;`: closes the group of this thread's
    /// `cp.async`s issued since the previous commit (possibly empty).
    CpAsyncCommit,
    /// `cp.async.wait_group pending;`: waits until at most `pending` of this
    /// thread's committed groups are still in flight.
    CpAsyncWait {
        /// How many of the newest groups may still be in flight.
        pending: u32,
    },
    /// `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 {dsts}, [addr];`
    /// (warp-collective): lane `8j + i` gives the address of row `i` of
    /// matrix `j` (16 bytes); `dsts[j]` receives matrix `j`'s elements
    /// `(lane / 4, 2·(lane % 4) + {0, 1})`, transposed with `trans`.
    Ldmatrix {
        /// Load each 8×8 matrix transposed (`.trans`).
        trans: bool,
        /// One `.b32` register per matrix: 1, 2 or 4 (`.x1`, `.x2`, `.x4`).
        dsts: Vec<Reg>,
        /// This lane's row address (16-byte aligned).
        addr: Address,
        /// The shared region touched, for barrier insertion (`None` off shared
        /// memory).
        region: Option<Region>,
    },
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 {d}, {a}, {b}, {c};`
    /// (warp-collective), `ab` = `f16` or `bf16`.
    Mma {
        /// The operands' type: `f16` or `bf16`.
        ab: &'static str,
        /// The f32 result fragment (16×8 over the warp).
        d: [Reg; 4],
        /// A (16×16): four `.b32` registers of two elements each.
        a: [Reg; 4],
        /// B (16×8): two `.b32` registers of two elements each.
        b: [Reg; 2],
        /// The f32 accumulator added (may be `d` itself).
        c: [Reg; 4],
    },

    // ---- Hopper (sm_90 / sm_90a) building blocks; see `crate::hopper` ----
    // Each needs a minimum PTX ISA version and a target feature
    // ([`crate::target::isa`]); the PTX printer raises the module's
    // `.version` and rejects them on targets without the feature.
    /// `mbarrier.init.shared::cta.b64 [addr], count;`: the 8-byte barrier at
    /// `addr` expects `count` arrivals per phase, starts in phase 0 with no
    /// pending transaction bytes.
    MbarInit {
        /// The barrier's shared address (8-byte aligned).
        addr: Address,
        /// The arrivals each phase expects.
        count: Operand,
    },
    /// `mbarrier.arrive.expect_tx.shared::cta.b64 _, [addr], tx_bytes;`:
    /// adds `tx_bytes` to the bytes the current phase waits for, then arrives.
    MbarArriveExpectTx {
        /// The barrier's shared address.
        addr: Address,
        /// The transaction bytes the phase now also waits for.
        tx_bytes: Operand,
    },
    /// `mbarrier.arrive.shared::cta.b64 _, [addr];`
    MbarArrive {
        /// The barrier's shared address.
        addr: Address,
    },
    /// `mbarrier.arrive.release.cta.shared::cluster.b64 _, [addr];`: an
    /// arrival on the barrier of any block of the cluster, `addr` being its
    /// 32-bit `.shared::cluster` address (`mapa.shared::cluster.u32` of the
    /// local address and the block's rank). Its release is at CTA scope, as
    /// CUTLASS's cluster barriers do: a consumer releasing a stage orders
    /// only its own reads of it, which `wgmma.wait_group` has retired, and
    /// a release at cluster scope is a memory barrier per arrival (ncu: 60 %
    /// of the clustered GEMM's warp stalls, 4.4× its time).
    MbarArriveCluster {
        /// The barrier's `.shared::cluster` address (a `.b32` register).
        addr: Operand,
    },
    /// `barrier.cluster.arrive.release.aligned;`: this thread arrives at the
    /// cluster-wide barrier (every thread of every block of the cluster).
    ClusterArrive,
    /// `barrier.cluster.wait.acquire.aligned;`: waits until every thread of
    /// the cluster has arrived ([`Inst::ClusterArrive`]).
    ClusterWait,
    /// A wait loop on `mbarrier.try_wait.parity.shared::cta.b64 pred, [addr], parity;`
    /// that returns once the phase with parity `parity` (0 or 1) has
    /// completed; `pred` is a scratch predicate register. PTX: a label,
    /// the try_wait and a `bra` back while `pred` is false.
    MbarWait {
        /// The barrier's shared address.
        addr: Address,
        /// The parity (0 or 1) of the phase waited for.
        parity: Operand,
        /// A scratch predicate for the loop's test.
        pred: Reg,
    },
    /// `fence.mbarrier_init.release.cluster;`: makes preceding
    /// `mbarrier.init`s visible to other threads and to the async proxy.
    FenceMbarrierInit,
    /// `fence.proxy.async.shared::cta;`: orders this thread's generic-proxy
    /// shared-memory accesses with later async-proxy ones (TMA, wgmma).
    FenceProxyAsync,
    /// `cvta.param.u64 dst, param;`: the generic address of a kernel
    /// parameter of type [`TENSOR_MAP_PARAM`] (what TMA instructions take).
    TensorMapAddr {
        /// Receives the 64-bit generic address.
        dst: Reg,
        /// The tensor-map parameter's name.
        param: String,
    },
    /// `cp.async.bulk.tensor.{N}d.shared::{cluster,cta}.global.tile.mbarrier::complete_tx::bytes[.L2::cache_hint]
    /// [dst], [tmap, {coords}], [mbar][, cache_hint];` with N = `coords.len()`
    /// (1..=5; innermost coordinate first, in elements): one box of the
    /// tensor map lands at `dst` (128-byte aligned) and completes
    /// `box bytes` transaction bytes on the mbarrier. `cta_dst` picks the
    /// `.shared::cta` destination form (PTX 8.6).
    TmaLoad {
        /// Where the box lands in shared memory (128-byte aligned).
        dst: Address,
        /// The tensor map's generic address ([`Inst::TensorMapAddr`]).
        tmap: Operand,
        /// The box's first element, innermost coordinate first, in elements.
        coords: Vec<Operand>,
        /// The mbarrier the box's bytes complete on.
        mbar: Address,
        /// A 64-bit L2 cache policy (`.L2::cache_hint`), if any.
        cache_hint: Option<Operand>,
        /// Use the `.shared::cta` destination form (PTX 8.6) instead of `.shared::cluster`.
        cta_dst: bool,
        /// `.multicast::cluster` with this 16-bit `ctaMask` (a `.b16`
        /// register): the box lands at `dst`'s offset in the shared memory
        /// of every block of the cluster whose rank's bit is set, and
        /// completes its bytes on the mbarrier at `mbar`'s offset in each.
        multicast: Option<Operand>,
        /// The shared region touched, for barrier insertion (`None` off shared
        /// memory).
        region: Option<Region>,
    },
    /// `cp.async.bulk.prefetch.tensor.{N}d.L2.global.tile[.L2::cache_hint] [tmap, {coords}][, cache_hint];`
    /// with N = `coords.len()`: one box of the tensor map brought into L2
    /// ahead of the load that will read it (no destination, no completion
    /// to wait for; out-of-range boxes prefetch nothing).
    TmaPrefetch {
        /// The tensor map's generic address ([`Inst::TensorMapAddr`]).
        tmap: Operand,
        /// The box's first element, innermost coordinate first, in elements.
        coords: Vec<Operand>,
        /// A 64-bit L2 cache policy (`.L2::cache_hint`), if any.
        cache_hint: Option<Operand>,
    },
    /// `cp.async.bulk.tensor.{N}d.global.shared::cta.tile.bulk_group [tmap, {coords}], [src];`:
    /// one box from shared memory to the tensor (out-of-bounds elements are
    /// not written); completion is tracked by bulk groups.
    TmaStore {
        /// The tensor map's generic address.
        tmap: Operand,
        /// The box's first element, innermost coordinate first, in elements.
        coords: Vec<Operand>,
        /// The box in shared memory (128-byte aligned).
        src: Address,
        /// The shared region touched, for barrier insertion (`None` off shared
        /// memory).
        region: Option<Region>,
    },
    /// `cp.async.bulk.commit_group;`
    BulkCommit,
    /// `cp.async.bulk.wait_group.read pending;`: waits until at most
    /// `pending` bulk groups still read their shared source.
    BulkWaitRead {
        /// How many of the newest bulk groups may still be reading.
        pending: u32,
    },
    /// `wgmma.fence.sync.aligned;` (warpgroup-collective): orders register
    /// writes (accumulator, A fragment) before the next wgmma.
    WgmmaFence,
    /// `wgmma.commit_group.sync.aligned;`
    WgmmaCommit,
    /// `wgmma.wait_group.sync.aligned pending;`
    WgmmaWait {
        /// How many of the newest wgmma groups may still be in flight.
        pending: u32,
    },
    /// `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {d}, a, b_desc, scale_d, imm-scale-a, imm-scale-b[, imm-trans-a], imm-trans-b;`
    /// (warpgroup-collective): `D = A·B + (scale_d ? D : 0)`, `d` = `n/2`
    /// f32 registers, A 64×16 from a descriptor or 4 f16x2 registers, B
    /// 16×n from a descriptor. `neg_a`/`neg_b` print imm-scale -1.
    /// `trans_a` only applies to a descriptor A (`imm-trans-a` 1 = A is
    /// M-major); `trans_b` 1 = B is N-major. `regions`: the shared
    /// regions its descriptors read (for barrier insertion and the
    /// generic → async proxy fence, [`crate::passes::barriers`]); empty
    /// where mbarriers order the operands instead (warp-specialized loop).
    Wgmma {
        /// The instruction's N: 8..=256 in steps of 8.
        n: u32,
        /// The operands' type: `f16` or `bf16`.
        ab: &'static str,
        /// The f32 accumulator registers, `n / 2` of them.
        d: Vec<Reg>,
        /// The A operand.
        a: WgmmaA,
        /// B's 64-bit shared-memory matrix descriptor.
        b_desc: Operand,
        /// A predicate or immediate: accumulate into `d` when true, overwrite when false.
        scale_d: Operand,
        /// Negate A (imm-scale-a -1).
        neg_a: bool,
        /// Negate B (imm-scale-b -1).
        neg_b: bool,
        /// A is M-major (descriptor A only).
        trans_a: bool,
        /// B is N-major.
        trans_b: bool,
        /// The shared regions its descriptors read.
        regions: Vec<Region>,
    },
    /// `setmaxnreg.{inc,dec}.sync.aligned.u32 count;` (warpgroup-collective).
    SetMaxNreg {
        /// Raise the warpgroup's register limit (`.inc`) rather than lower it (`.dec`).
        inc: bool,
        /// The new per-thread register count: 24..=256, a multiple of 8.
        count: u32,
    },
    /// `elect.sync _|pred, 0xffffffff;`: `pred` is true in one lane of the warp.
    ElectSync {
        /// True in the elected lane only.
        pred: Reg,
    },
    /// `bar.sync id, threads;`: a named barrier over the first `threads`
    /// threads to arrive (a multiple of 32).
    NamedBarSync {
        /// The barrier (0..=15; 0 is `bar.sync 0`'s).
        id: u32,
        /// The threads it waits for (a multiple of 32).
        threads: u32,
    },
    /// `barrier.sync id, threads;`: [`Inst::NamedBarSync`] without
    /// `.aligned`, so that the threads taking part may reach it at different
    /// instructions (one per warpgroup's copy of a loop,
    /// [`crate::passes::split_warpgroups`]: `bar.sync` is
    /// `barrier.sync.aligned`, which every participating thread must execute
    /// at the same instruction).
    BarrierSync {
        /// The barrier (0..=15).
        id: u32,
        /// The threads it waits for (a multiple of 32).
        threads: u32,
    },
    /// `bar.arrive id, threads;`: this warp's arrival at named barrier `id`
    /// without waiting (the barrier completes when `threads` have arrived,
    /// the others with `bar.sync`). Used only as a scheduling signal (the
    /// ping-pong of two consumer warpgroups: "your turn"), never to order
    /// memory accesses: the wgmma-wait pass moves waits past it.
    NamedBarArrive {
        /// The barrier (0..=15).
        id: u32,
        /// The threads whose arrival completes it (a multiple of 32).
        threads: u32,
    },
    /// `barrier.arrive id, threads;`: [`Inst::NamedBarArrive`] without
    /// `.aligned` (the warpgroups' copies of a split loop reach it at
    /// different instructions), as the writer's half of a hand-over: the
    /// barrier completes when `threads` have arrived, the readers with
    /// [`Inst::BarrierSync`], and then the shared accesses the arriving
    /// threads made before it are performed relative to every thread taking
    /// part (PTX ISA, `barrier{.cta}`). Placed only by
    /// [`crate::passes::arrivals`], which checks that the arriving threads
    /// need nothing from the others there.
    BarrierArrive {
        /// The barrier (0..=15).
        id: u32,
        /// The threads whose arrival completes it (a multiple of 32).
        threads: u32,
    },
    /// `bar.red.or.pred dst, id, threads, src;`: a barrier over `threads`
    /// threads (a multiple of 32) that also reduces: `dst` is true in every
    /// one of them when `src` is true in any. A warpgroup's vote (`id`
    /// its own barrier, `threads` 128): a condition made uniform over the
    /// warpgroup, so that a warpgroup-collective instruction
    /// (`wgmma.wait_group`) may go under it.
    BarRedOr {
        /// True in every participating thread when `src` is in any.
        dst: Reg,
        /// This thread's vote.
        src: Reg,
        /// The barrier (0..=15), the same in every participating thread.
        id: Operand,
        /// The threads it waits for (a multiple of 32).
        threads: u32,
    },
    /// `exit;`: the thread stops (a warp-specialized producer, done).
    Exit,
    /// `nanosleep.u32 ns;`: the thread sleeps up to `ns` nanoseconds. Its use
    /// here is a scheduling fence: inside a branch no thread takes, it ends
    /// a basic block that ptxas's scheduler does not hoist instructions
    /// out of (see `schedule/warp_specialized_loop/defer.rs`).
    Nanosleep {
        /// The longest sleep, in nanoseconds.
        ns: u32,
    },
    /// `griddepcontrol.wait;`: the thread waits until the grids this launch
    /// depends on programmatically (the kernel before it on the stream,
    /// `Kernel::dependent_launch`) have completed and their memory
    /// operations are visible; returns at once when there are none.
    GridDepWait,
    /// A call of CUDA's `vprintf(format, args)`: `format` (a C format with
    /// its newline) becomes the global string `tile_fmt{id}`, `args` are
    /// stored into the local buffer `tile_pbuf{id}` (each at an offset
    /// aligned to its size; `ty` is `f64`, `s32`, `u32` or `s64`) whose
    /// generic address is the second argument. `id` names the two symbols:
    /// instructions with the same `id` are copies of one print.
    Printf {
        /// Names the format string and argument buffer symbols.
        id: u32,
        /// The C format, newline included.
        format: String,
        /// The arguments and their `vprintf` types, in order.
        args: Vec<(Reg, &'static str)>,
    },
}

/// The byte offsets of `vprintf` arguments of types `f64`/`s64` (8 bytes)
/// and `s32`/`u32` (4 bytes), each aligned to its size, and the total size.
pub fn printf_layout(args: &[(Reg, &'static str)]) -> (Vec<u32>, u32) {
    let mut offsets = Vec::with_capacity(args.len());
    let mut at = 0u32;
    for (_, ty) in args {
        let size = if matches!(*ty, "f64" | "s64") { 8 } else { 4 };
        at = at.div_ceil(size) * size;
        offsets.push(at);
        at += size;
    }
    (offsets, at)
}

/// The A operand of a wgmma.
#[derive(Clone, Debug, PartialEq)]
pub enum WgmmaA {
    /// A 64-bit shared-memory matrix descriptor ([`crate::hopper::MatrixDescriptor`]).
    Desc(Operand),
    /// Four `.b32` registers, each two f16/bf16 (layout [`crate::hopper::wgmma_a_regs_coord`]).
    Regs([Reg; 4]),
}

/// The parameter type (in [`Function::params`]) of a `CUtensorMap` passed by
/// value: printed as `.param .align 64 .b8 name[128]`.
pub const TENSOR_MAP_PARAM: &str = ".tensormap";

impl Inst {
    /// Whether this is a barrier instruction (named or not, arriving or
    /// waiting, reducing or not).
    pub fn is_barrier(&self) -> bool {
        matches!(
            self,
            Inst::BarSync
                | Inst::NamedBarSync { .. }
                | Inst::BarrierSync { .. }
                | Inst::NamedBarArrive { .. }
                | Inst::BarrierArrive { .. }
                | Inst::BarRedOr { .. }
        )
    }

    /// The PTX opcode of an instruction, with the modifiers that decide
    /// what it needs (for error messages; [`crate::target::isa`]).
    pub fn opcode(&self) -> String {
        match self {
            Inst::Op { op, .. } => op.clone(),
            Inst::AtomAdd { space, ty, .. } => {
                let noftz = if *ty == "f16" || *ty == "bf16" { ".noftz" } else { "" };
                format!("atom.{}.add{noftz}.{ty}", space.name())
            }
            Inst::MbarInit { .. } => "mbarrier.init.shared::cta.b64".into(),
            Inst::MbarArriveExpectTx { .. } => "mbarrier.arrive.expect_tx.shared::cta.b64".into(),
            Inst::MbarArrive { .. } => "mbarrier.arrive.shared::cta.b64".into(),
            Inst::MbarArriveCluster { .. } => "mbarrier.arrive.release.cta.shared::cluster.b64".into(),
            Inst::ClusterArrive => "barrier.cluster.arrive.release.aligned".into(),
            Inst::ClusterWait => "barrier.cluster.wait.acquire.aligned".into(),
            Inst::MbarWait { .. } => "mbarrier.try_wait.parity.shared::cta.b64".into(),
            Inst::FenceMbarrierInit => "fence.mbarrier_init.release.cluster".into(),
            Inst::FenceProxyAsync => "fence.proxy.async.shared::cta".into(),
            Inst::TensorMapAddr { .. } => "cvta.param.u64".into(),
            Inst::TmaLoad { coords, multicast, .. } => format!(
                "cp.async.bulk.tensor.{}d.shared::cluster.global{}",
                coords.len(),
                if multicast.is_some() { ".multicast::cluster" } else { "" }
            ),
            Inst::TmaStore { coords, .. } => format!("cp.async.bulk.tensor.{}d.global.shared::cta", coords.len()),
            Inst::TmaPrefetch { coords, .. } => format!("cp.async.bulk.prefetch.tensor.{}d.L2.global", coords.len()),
            Inst::BulkCommit => "cp.async.bulk.commit_group".into(),
            Inst::BulkWaitRead { .. } => "cp.async.bulk.wait_group.read".into(),
            Inst::WgmmaFence => "wgmma.fence.sync.aligned".into(),
            Inst::WgmmaCommit => "wgmma.commit_group.sync.aligned".into(),
            Inst::WgmmaWait { .. } => "wgmma.wait_group.sync.aligned".into(),
            Inst::Wgmma { n, ab, .. } => format!("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}"),
            Inst::SetMaxNreg { inc, .. } => format!("setmaxnreg.{}.sync.aligned.u32", if *inc { "inc" } else { "dec" }),
            Inst::ElectSync { .. } => "elect.sync".into(),
            Inst::Printf { .. } => "call vprintf".into(),
            other => format!("{other:?}").split([' ', '{']).next().unwrap_or("").to_string(),
        }
    }
}

/// A statement of a [`Function`]'s body: an instruction or structured
/// control flow (the PTX printer lowers it to labels and branches).
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// An instruction, optionally predicated (`@p` / `@!p`).
    Inst {
        /// The instruction.
        inst: Inst,
        /// The guard predicate and whether it is negated (`@!p`); `None`:
        /// always executed.
        guard: Option<(Reg, bool)>,
    },
    /// `if cond (negated when `negate`) { then } else { otherwise }`.
    If {
        /// The predicate tested.
        cond: Reg,
        /// Take `then` when `cond` is false.
        negate: bool,
        /// Every thread of the block takes the same branch (`bra.uni`).
        uniform: bool,
        /// Runs when the (possibly negated) condition holds.
        then: Vec<Stmt>,
        /// Runs when it does not.
        otherwise: Vec<Stmt>,
    },
    /// `for var in start..end` (32-bit signed counter, step 1); `exit` is a
    /// predicate register the loop test uses.
    For {
        /// The counter (`.b32`), written by the loop.
        var: Reg,
        /// Its first value.
        start: Operand,
        /// One past its last value (no iteration when `end <= start`).
        end: Operand,
        /// A scratch predicate: `var >= end`.
        exit: Reg,
        /// Every thread of the block runs the same iterations (`bra.uni`).
        uniform: bool,
        /// The statements of one iteration.
        body: Vec<Stmt>,
    },
    /// A `// text` line in the PTX (dumps only; no effect).
    Comment(String),
}

/// One kernel entry.
#[derive(Clone, Debug, Default)]
pub struct Function {
    /// The entry's name (the kernel's).
    pub name: String,
    /// PTX parameter names and types (`.u64`, `.s32`, `.f32`, `.u32`, `.b16`), in ABI order.
    pub params: Vec<(String, &'static str)>,
    /// Threads per block (`.maxntid`), the producer warpgroup included.
    pub threads: u32,
    /// The class of each virtual register, indexed by [`Reg`].
    pub regs: Vec<RegClass>,
    /// Dynamic shared memory in bytes.
    pub shared_bytes: u32,
    /// Per-thread `.local` arrays: (name, bytes).
    pub local_arrays: Vec<(String, u32)>,
    /// What each thread executes.
    pub body: Vec<Stmt>,
    /// TMA tensor maps, after every other parameter (their `params`
    /// entries have type [`TENSOR_MAP_PARAM`]), in the same order.
    pub tensor_maps: Vec<crate::abi::TensorMapUse>,
    /// When set, [`Inst::BarSync`] synchronizes only the first `n` threads
    /// (`bar.sync 1, n`): a warp-specialized kernel's consumers, while the
    /// producer warpgroup runs its own loop.
    pub barrier_threads: Option<u32>,
    /// `.minnctapersm` (a register cap for `setmaxnreg` kernels).
    pub min_blocks_per_sm: Option<u32>,
    /// The kernel loops over the grid's blocks (`ctaid.x + i·nctaid.x`):
    /// it may be launched with fewer blocks, in x only.
    pub persistent: bool,
    /// The predicates of warpgroup branches ("this thread is in warpgroup
    /// `w`", with `w`), each set once in the entry code: the branches
    /// around the statements on one warpgroup's fragments
    /// ([`crate::layout::RootLayout::owner`]), which
    /// [`crate::passes::merge_branches`] joins where they follow each other
    /// and inside which [`crate::passes::barriers`] orders that
    /// warpgroup's own accesses with a barrier of its 128 threads.
    pub warpgroup_preds: Vec<(Reg, u32)>,
    /// Loops to run as one copy per warpgroup
    /// ([`crate::passes::split_warpgroups`]).
    pub split_loops: Vec<crate::passes::split_warpgroups::SplitLoop>,
    /// Loops (by their variable) each of whose iterations starts a new
    /// round of the rings of these shared regions: the warp-specialized
    /// consumers' loop, where every access of a ring's stage follows its
    /// thread's wait for the stage's full barrier, which the producer's
    /// refill completes only after every consumer released the stage's
    /// previous use. [`crate::passes::barriers`] orders an iteration's
    /// accesses of them after earlier iterations' with no barrier.
    pub ring_loops: Vec<(Reg, Vec<u32>)>,
    /// Of those loops (by their variable): the rings' regions whose stage
    /// only one consumer warpgroup waits for, each with that warpgroup; the
    /// others read the stage ordered after its waits by a barrier of all
    /// consumers (`schedule/warp_specialized_loop/observers.rs`), which
    /// [`crate::passes::arrivals`] must keep a wait for them.
    pub observed_rings: Vec<(Reg, Vec<(u32, u32)>)>,
}

impl Function {
    /// A new virtual register of `class`.
    pub fn new_reg(&mut self, class: RegClass) -> Reg {
        self.regs.push(class);
        Reg(self.regs.len() as u32 - 1)
    }
    /// The register's PTX name: its class's prefix and its index (`%r12`).
    pub fn reg_name(&self, r: Reg) -> String {
        format!("{}{}", self.regs[r.0 as usize].prefix(), r.0)
    }
}

/// Name of the dynamic shared memory symbol.
pub const SMEM: &str = "smem";

pub(crate) fn fmt_operand(f: &Function, o: &Operand) -> String {
    match o {
        Operand::Reg(r) => f.reg_name(*r),
        Operand::Imm(v) => v.to_string(),
        Operand::F32(x) => format!("0f{:08X}", x.to_bits()),
        Operand::B16(b) => format!("0x{b:04X}"),
        Operand::Special(Special::TidX) => "%tid.x".into(),
        Operand::Special(Special::CtaId(a)) => format!("%ctaid.{}", ["x", "y", "z"][*a as usize % 3]),
        Operand::Special(Special::NctaId(a)) => format!("%nctaid.{}", ["x", "y", "z"][*a as usize % 3]),
        Operand::Special(Special::ClusterCtaRank) => "%cluster_ctarank".into(),
        Operand::Special(Special::Clock64) => "%clock64".into(),
        Operand::Symbol(s) => s.clone(),
    }
}

pub(crate) fn fmt_address(f: &Function, a: &Address) -> String {
    let base = fmt_operand(f, &a.base);
    match a.offset {
        0 => format!("[{base}]"),
        o if o > 0 => format!("[{base}+{o}]"),
        o => format!("[{base}{o}]"),
    }
}

fn fmt_list(f: &Function, regs: &[Operand]) -> String {
    let parts: Vec<String> = regs.iter().map(|o| fmt_operand(f, o)).collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("{{{}}}", parts.join(", "))
    }
}

/// An optional last operand of an instruction: the modifier it needs and
/// `, operand`, or nothing for either.
fn optional_operand(f: &Function, operand: &Option<Operand>, modifier: &'static str) -> (&'static str, String) {
    match operand {
        Some(o) => (modifier, format!(", {}", fmt_operand(f, o))),
        None => ("", String::new()),
    }
}

fn join_operands(f: &Function, ops: &[Operand]) -> String {
    ops.iter().map(|o| fmt_operand(f, o)).collect::<Vec<_>>().join(", ")
}

fn vec_suffix(n: usize) -> String {
    if n > 1 {
        format!(".v{n}")
    } else {
        String::new()
    }
}

/// The PTX text of one instruction (without guard and `;`).
pub(crate) fn fmt_inst(f: &Function, inst: &Inst) -> String {
    match inst {
        Inst::Op { op, dst, args } => {
            let mut s = format!("{op} {}", f.reg_name(*dst));
            for a in args {
                let _ = write!(s, ", {}", fmt_operand(f, a));
            }
            s
        }
        Inst::Pack { dst, lo, hi } => {
            format!("mov.b32 {}, {{{}, {}}}", f.reg_name(*dst), f.reg_name(*lo), f.reg_name(*hi))
        }
        Inst::Unpack { lo, hi, src } => {
            format!("mov.b32 {{{}, {}}}, {}", f.reg_name(*lo), f.reg_name(*hi), f.reg_name(*src))
        }
        Inst::Ld { space, ty, dsts, addr, .. } => {
            let d: Vec<Operand> = dsts.iter().map(|r| Operand::Reg(*r)).collect();
            format!("ld.{}{}.{ty} {}, {}", space.name(), vec_suffix(dsts.len()), fmt_list(f, &d), fmt_address(f, addr))
        }
        Inst::LdParam { ty, dst, name } => format!("ld.param.{ty} {}, [{name}]", f.reg_name(*dst)),
        Inst::St { space, ty, srcs, addr, .. } => {
            format!(
                "st.{}{}.{ty} {}, {}",
                space.name(),
                vec_suffix(srcs.len()),
                fmt_address(f, addr),
                fmt_list(f, srcs)
            )
        }
        Inst::AtomAdd { space, ty, dst, addr, src } => {
            let noftz = if *ty == "f16" || *ty == "bf16" { ".noftz" } else { "" };
            format!(
                "atom.{}.add{noftz}.{ty} {}, {}, {}",
                space.name(),
                f.reg_name(*dst),
                fmt_address(f, addr),
                fmt_operand(f, src)
            )
        }
        Inst::WarpBroadcast { dst, src } => {
            format!("shfl.sync.idx.b32 {}, {}, 0, 31, -1", f.reg_name(*dst), f.reg_name(*src))
        }
        Inst::ShflBfly { dst, src, lane_mask } => {
            format!("shfl.sync.bfly.b32 {}, {}, {lane_mask}, 31, -1", f.reg_name(*dst), f.reg_name(*src))
        }
        Inst::BarSync => match f.barrier_threads {
            Some(n) => format!("bar.sync 1, {n}"),
            None => "bar.sync 0".into(),
        },
        Inst::NamedBarSync { id, threads } => format!("bar.sync {id}, {threads}"),
        Inst::BarrierSync { id, threads } => format!("barrier.sync {id}, {threads}"),
        Inst::NamedBarArrive { id, threads } => format!("bar.arrive {id}, {threads}"),
        Inst::BarrierArrive { id, threads } => format!("barrier.arrive {id}, {threads}"),
        Inst::BarRedOr { dst, src, id, threads } => {
            format!("bar.red.or.pred {}, {}, {threads}, {}", f.reg_name(*dst), fmt_operand(f, id), f.reg_name(*src))
        }
        Inst::Exit => "exit".into(),
        Inst::Nanosleep { ns } => format!("nanosleep.u32 {ns}"),
        Inst::GridDepWait => "griddepcontrol.wait".into(),
        Inst::CpAsync { bytes, dst, src, src_bytes, .. } => {
            // `.cg` (L2 only) exists for 16-byte copies; narrower ones use `.ca`.
            let cache = if *bytes == 16 { "cg" } else { "ca" };
            let tail = match src_bytes {
                Operand::Imm(b) if *b == *bytes as i64 => String::new(),
                o => format!(", {}", fmt_operand(f, o)),
            };
            format!("cp.async.{cache}.shared.global {}, {}, {bytes}{tail}", fmt_address(f, dst), fmt_address(f, src))
        }
        Inst::CpAsyncCommit => "cp.async.commit_group".into(),
        Inst::CpAsyncWait { pending } => format!("cp.async.wait_group {pending}"),
        Inst::Ldmatrix { trans, dsts, addr, .. } => {
            let d: Vec<Operand> = dsts.iter().map(|r| Operand::Reg(*r)).collect();
            format!(
                "ldmatrix.sync.aligned.m8n8.x{}{}.shared.b16 {{{}}}, {}",
                dsts.len(),
                if *trans { ".trans" } else { "" },
                d.iter().map(|o| fmt_operand(f, o)).collect::<Vec<_>>().join(", "),
                fmt_address(f, addr)
            )
        }
        Inst::Mma { ab, d, a, b, c } => {
            let l = |rs: &[Reg]| rs.iter().map(|r| f.reg_name(*r)).collect::<Vec<_>>().join(", ");
            format!(
                "mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 {{{}}}, {{{}}}, {{{}}}, {{{}}}",
                l(d),
                l(a),
                l(b),
                l(c)
            )
        }

        // ---- Hopper ----
        Inst::MbarInit { addr, count } => {
            format!("mbarrier.init.shared::cta.b64 {}, {}", fmt_address(f, addr), fmt_operand(f, count))
        }
        Inst::MbarArriveExpectTx { addr, tx_bytes } => format!(
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, {}, {}",
            fmt_address(f, addr),
            fmt_operand(f, tx_bytes)
        ),
        Inst::MbarArrive { addr } => format!("mbarrier.arrive.shared::cta.b64 _, {}", fmt_address(f, addr)),
        Inst::MbarArriveCluster { addr } => {
            format!("mbarrier.arrive.release.cta.shared::cluster.b64 _, [{}]", fmt_operand(f, addr))
        }
        Inst::ClusterArrive => "barrier.cluster.arrive.release.aligned".into(),
        Inst::ClusterWait => "barrier.cluster.wait.acquire.aligned".into(),
        // The text form; the PTX printer expands it into a loop.
        Inst::MbarWait { addr, parity, pred } => format!(
            "mbarrier.try_wait.parity.shared::cta.b64 {}, {}, {} (loop)",
            f.reg_name(*pred),
            fmt_address(f, addr),
            fmt_operand(f, parity)
        ),
        Inst::FenceMbarrierInit => "fence.mbarrier_init.release.cluster".into(),
        Inst::FenceProxyAsync => "fence.proxy.async.shared::cta".into(),
        Inst::TensorMapAddr { dst, param } => format!("cvta.param.u64 {}, {param}", f.reg_name(*dst)),
        Inst::TmaLoad { dst, tmap, coords, mbar, cache_hint, cta_dst, multicast, .. } => {
            let space = if *cta_dst { "cta" } else { "cluster" };
            let (hint_mod, hint) = optional_operand(f, cache_hint, ".L2::cache_hint");
            let (cast_mod, mask) = optional_operand(f, multicast, ".multicast::cluster");
            format!(
                "cp.async.bulk.tensor.{}d.shared::{space}.global.tile.mbarrier::complete_tx::bytes{cast_mod}{hint_mod} {}, [{}, {{{}}}], {}{mask}{hint}",
                coords.len(),
                fmt_address(f, dst),
                fmt_operand(f, tmap),
                join_operands(f, coords),
                fmt_address(f, mbar)
            )
        }
        Inst::TmaStore { tmap, coords, src, .. } => format!(
            "cp.async.bulk.tensor.{}d.global.shared::cta.tile.bulk_group [{}, {{{}}}], {}",
            coords.len(),
            fmt_operand(f, tmap),
            join_operands(f, coords),
            fmt_address(f, src)
        ),
        Inst::TmaPrefetch { tmap, coords, cache_hint } => {
            let (hint_mod, hint) = optional_operand(f, cache_hint, ".L2::cache_hint");
            format!(
                "cp.async.bulk.prefetch.tensor.{}d.L2.global.tile{hint_mod} [{}, {{{}}}]{hint}",
                coords.len(),
                fmt_operand(f, tmap),
                join_operands(f, coords)
            )
        }
        Inst::BulkCommit => "cp.async.bulk.commit_group".into(),
        Inst::BulkWaitRead { pending } => format!("cp.async.bulk.wait_group.read {pending}"),
        Inst::WgmmaFence => "wgmma.fence.sync.aligned".into(),
        Inst::WgmmaCommit => "wgmma.commit_group.sync.aligned".into(),
        Inst::WgmmaWait { pending } => format!("wgmma.wait_group.sync.aligned {pending}"),
        Inst::Wgmma { n, ab, d, a, b_desc, scale_d, neg_a, neg_b, trans_a, trans_b, .. } => {
            let d: Vec<String> = d.iter().map(|r| f.reg_name(*r)).collect();
            let sign = |neg: bool| if neg { "-1" } else { "1" };
            let (a_text, trans_a) = match a {
                WgmmaA::Desc(o) => (fmt_operand(f, o), format!(", {}", *trans_a as u8)),
                WgmmaA::Regs(r) => {
                    (format!("{{{}}}", r.iter().map(|r| f.reg_name(*r)).collect::<Vec<_>>().join(", ")), String::new())
                }
            };
            format!(
                "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{}}}, {a_text}, {}, {}, {}, {}{trans_a}, {}",
                d.join(", "),
                fmt_operand(f, b_desc),
                fmt_operand(f, scale_d),
                sign(*neg_a),
                sign(*neg_b),
                *trans_b as u8
            )
        }
        Inst::SetMaxNreg { inc, count } => {
            format!("setmaxnreg.{}.sync.aligned.u32 {count}", if *inc { "inc" } else { "dec" })
        }
        Inst::ElectSync { pred } => format!("elect.sync _|{}, -1", f.reg_name(*pred)),
        Inst::Printf { id, format, args } => {
            let args: Vec<String> = args.iter().map(|(r, ty)| format!("{}:{ty}", f.reg_name(*r))).collect();
            format!("vprintf.{id} {format:?}, {{{}}}", args.join(", "))
        }
    }
}

fn guard_text(f: &Function, guard: &Option<(Reg, bool)>) -> String {
    match guard {
        Some((p, false)) => format!("@{} ", f.reg_name(*p)),
        Some((p, true)) => format!("@!{} ", f.reg_name(*p)),
        None => String::new(),
    }
}

/// The text form of the Thread IR: PTX-like instructions inside structured,
/// indented `if` / `for` blocks.
pub fn print_function(f: &Function) -> String {
    let mut out = String::new();
    let params: Vec<String> = f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    let _ =
        writeln!(out, "fn {}({}) threads={} shared_bytes={} {{", f.name, params.join(", "), f.threads, f.shared_bytes);
    for (name, bytes) in &f.local_arrays {
        let _ = writeln!(out, "  local {name}[{bytes} bytes]");
    }
    print_block(f, &f.body, 1, &mut out);
    out.push_str("}\n");
    out
}

fn print_block(f: &Function, body: &[Stmt], depth: usize, out: &mut String) {
    let ind = "  ".repeat(depth);
    for s in body {
        match s {
            Stmt::Inst { inst, guard } => {
                let region = match inst {
                    Inst::Ld { region: Some(r), .. }
                    | Inst::St { region: Some(r), .. }
                    | Inst::CpAsync { region: Some(r), .. }
                    | Inst::Ldmatrix { region: Some(r), .. }
                    | Inst::TmaLoad { region: Some(r), .. }
                    | Inst::TmaStore { region: Some(r), .. } => format!("  // region {}.{}", r.id, r.op),
                    Inst::Wgmma { regions, .. } if !regions.is_empty() => {
                        let r: Vec<String> = regions.iter().map(|r| format!("{}.{}", r.id, r.op)).collect();
                        format!("  // regions {}", r.join(", "))
                    }
                    _ => String::new(),
                };
                let _ = writeln!(out, "{ind}{}{}{region}", guard_text(f, guard), fmt_inst(f, inst));
            }
            Stmt::If { cond, negate, uniform, then, otherwise } => {
                let kind = if *uniform { "if.uniform" } else { "if" };
                let _ = writeln!(out, "{ind}{kind} {}{} {{", if *negate { "!" } else { "" }, f.reg_name(*cond));
                print_block(f, then, depth + 1, out);
                if !otherwise.is_empty() {
                    let _ = writeln!(out, "{ind}}} else {{");
                    print_block(f, otherwise, depth + 1, out);
                }
                let _ = writeln!(out, "{ind}}}");
            }
            Stmt::For { var, start, end, uniform, body, .. } => {
                let kind = if *uniform { "for.uniform" } else { "for" };
                let _ = writeln!(
                    out,
                    "{ind}{kind} {} in {}..{} {{",
                    f.reg_name(*var),
                    fmt_operand(f, start),
                    fmt_operand(f, end)
                );
                print_block(f, body, depth + 1, out);
                let _ = writeln!(out, "{ind}}}");
            }
            Stmt::Comment(c) => {
                let _ = writeln!(out, "{ind}// {c}");
            }
        }
    }
}

impl fmt::Display for Function {
    fn fmt(&self, fm: &mut fmt::Formatter<'_>) -> fmt::Result {
        fm.write_str(&print_function(self))
    }
}
